"""tinygrad's Invalid ("any value"): an element computed from it through elementwise ops and where-picks is not
written by the kernel that stores it (the memory keeps what it held); under a reduce any value will do."""
from __future__ import annotations
import numpy as np
from attograd import Tensor, dtypes
from attograd.dtype import Invalid
from attograd.uop.ops import Ops, UOp

SENTINEL = -7.0

def into(device: str, out: Tensor) -> list:
  """`out` computed into a buffer that held SENTINEL everywhere (an assign: the kernel writes into it in place)."""
  dst = Tensor.full(out.shape, SENTINEL, dtype=out.dtype, device=device).contiguous().realize()
  return dst.assign(out).tolist()

def test_where_with_invalid_leaves_the_other_elements(device: str) -> None:
  mask = Tensor.arange(4, device=device) < 2
  vals = Tensor([1.0, 2.0, 3.0, 4.0], device=device)
  assert into(device, mask.where(vals, Invalid)) == [1.0, 2.0, SENTINEL, SENTINEL]
  assert into(device, mask.where(Invalid, vals)) == [SENTINEL, SENTINEL, 3.0, 4.0]

def test_invalid_flows_through_elementwise_ops(device: str) -> None:
  mask = Tensor.arange(4, device=device) < 2
  vals = Tensor([1.0, 4.0, 9.0, 16.0], device=device)
  inv = Tensor.full((4,), Invalid, dtype=dtypes.float, device=device)
  got = into(device, (mask.where(vals, Invalid) + 1).sqrt())
  assert np.allclose(got, [np.sqrt(2), np.sqrt(5), SENTINEL, SENTINEL])
  assert into(device, mask.where(vals, 2 + inv)) == [1.0, 4.0, SENTINEL, SENTINEL]
  both = (Tensor.arange(4, device=device) > 0).where(mask.where(vals, Invalid), Invalid)
  assert into(device, both) == [SENTINEL, 4.0, SENTINEL, SENTINEL]

def test_an_invalid_condition_is_invalid(device: str) -> None:
  cond = Tensor.full((3,), Invalid, dtype=dtypes.bool, device=device)
  x = Tensor([1.0, 2.0, 3.0], device=device)
  assert into(device, cond.where(x, x + 1)) == [SENTINEL] * 3

def test_invalid_under_a_reduce_is_any_value(device: str) -> None:
  always = Tensor.arange(4, device=device) < 9
  assert always.where(Tensor([1.0, 2.0, 3.0, 4.0], device=device), Invalid).sum().item() == 10.0

def test_partial_assign_with_invalid_keeps_old_values(device: str) -> None:
  t = Tensor([5.0, 6.0, 7.0, 8.0], device=device).contiguous().realize()
  t.assign((Tensor.arange(4, device=device) < 2).where(t * 2, Invalid))
  assert t.tolist() == [10.0, 12.0, 7.0, 8.0]

def test_uop_invalid_node() -> None:
  out = (UOp.const(0) < UOp.const(1)).where(UOp.const(3), UOp.invalid())
  assert out.op is Ops.WHERE and out.src[2].is_invalid and not out.src[1].is_invalid
