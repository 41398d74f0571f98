"""Tensor.linear_with_vars() and run_linear(): a realize split in two, the schedule made (as tinygrad's LINEAR of
CALLs) and run later, with the bound Variables' values replaceable by name."""
import numpy as np
import pytest
from attograd import Tensor, TinyJit
from attograd.engine.realize import compile_linear, run_linear
from attograd.helpers import GlobalCounters
from attograd.uop.ops import Ops, UOp

def test_made_now_run_later(device):
  a = Tensor([1.0, 2.0, 3.0]).realize()
  b = (a * 2 + 1).sum()
  linear, var_vals = b.linear_with_vars()
  assert linear.op is Ops.LINEAR and var_vals == {}
  assert all(c.op is Ops.CALL and c.src[0].op in (Ops.SINK, Ops.COPY) for c in linear.src)
  assert b.uop.base.realized is None  # scheduled, not run: no memory yet
  assert compile_linear(linear) is linear and b.uop.base.realized is None
  run_linear(linear, var_vals)
  assert b.uop.base.realized is not None and b.item() == 15.0

def test_several_tensors_one_linear(device):
  x = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
  s, m = x.sum(1), x.max(0)
  linear, _ = Tensor.linear_with_vars(s, m)
  run_linear(linear)
  assert s.tolist() == [3.0, 7.0] and m.tolist() == [3.0, 4.0]

def test_var_vals_replaced_by_name(device):
  v = UOp.variable("n", 1, 8)
  x = Tensor.arange(8).float().realize()
  out = x[:v.bind(3)].sum().contiguous()
  linear, var_vals = out.linear_with_vars()
  assert var_vals == {"n": 3}
  run_linear(linear, {"n": 5})
  assert out.item() == 0 + 1 + 2 + 3 + 4

def test_update_stats_false(device):
  t = (Tensor.ones(4).contiguous() + 1)
  linear, _ = t.linear_with_vars()
  GlobalCounters.reset()
  run_linear(linear, update_stats=False)
  assert GlobalCounters.kernel_count == 0 and np.array_equal(t.numpy(), [2, 2, 2, 2])

def test_schedule_linear_refuses_variables(device):
  assert Tensor.ones(3).contiguous().schedule_linear().op is Ops.LINEAR
  with pytest.raises(ValueError, match="linear_with_vars"):
    (Tensor.arange(8)[:UOp.variable("k", 1, 8).bind(2)] + 1).schedule_linear()

def test_run_linear_refuses_other_uops(device):
  with pytest.raises(TypeError, match="LINEAR"): run_linear(Tensor.ones(2).uop)
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x + 1).realize()
  for _ in range(3): f(Tensor.ones(2).contiguous().realize())
  with pytest.raises(TypeError, match="TinyJit"): run_linear(f.captured.linear)
