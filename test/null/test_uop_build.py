"""uop/build.py, the tensor-level UOp builders the Tensor and the gradient rules share, and the gradient table's
registry of CUSTOM_GRAD rules: no device runs (shapes, dtypes and graph structure only)."""
from __future__ import annotations
import pytest
from attograd.dtype import dtypes
from attograd.gradient import custom_grad_rules, register_custom_grad
from attograd.uop import build
from attograd.uop.ops import Ops, UOp

def _leaf(shape: tuple[int, ...], dtype=dtypes.float32) -> UOp:
  return build.expand(build.reshape(build.const(1.0, dtype, "CPU"), (1,) * len(shape)), shape)

def test_full_like_has_the_shape_dtype_and_device() -> None:
  x = _leaf((2, 3))
  c = build.full_like(x, 5)
  assert (c.shape, c.dtype, c.device) == ((2, 3), dtypes.float32, "CPU")
  assert c.op is Ops.EXPAND and c.src[0].op is Ops.RESHAPE and c.src[0].src[0].arg == 5.0

def test_reshape_composes_and_same_shape_is_identity() -> None:
  x = _leaf((2, 3))
  assert build.reshape(x, (2, 3)) is x
  r = build.reshape(build.reshape(x, (6,)), (3, 2))
  assert r.op is Ops.RESHAPE and r.src[0] is x, "a reshape of a reshape is one RESHAPE of the source"
  assert build.reshape(build.reshape(x, (6,)), (2, 3)) is x

def test_expand_and_sum_axes_without_work_are_the_input() -> None:
  x = _leaf((2, 3))
  assert build.expand(x, (2, 3)) is x and build.sum_axes(x, ()) is x
  s = build.sum_axes(x, (1,))
  assert s.op is Ops.REDUCE_AXIS and s.arg == (Ops.ADD, (1,)) and s.shape == (2, 1)

def test_alu_dtypes() -> None:
  x, y = _leaf((4,)), _leaf((4,))
  assert build.alu(Ops.CMPLT, x, y).dtype is dtypes.bool
  assert build.add(x, y).dtype is dtypes.float32
  assert build.where(build.alu(Ops.CMPEQ, x, y), x, y).dtype is dtypes.float32
  assert build.mulc(x, 2.0).src[1].shape == (4,)

def test_custom_grad_registry_refuses_a_second_rule() -> None:
  import attograd.tensor  # noqa: F401  (registers the Tensor-written rules)
  assert {"relu", "abs", "conv2d", "pow", "acosh", "max_unpool2d"} <= set(custom_grad_rules)
  with pytest.raises(ValueError, match="relu"): register_custom_grad("relu", lambda ctx, ret: (None,))
