"""Float rules on lowered kernels (codegen/lowerer.py's pm_simplify_lowered) keep every bit: -0.0, NaN and inf
included."""
from __future__ import annotations
import math
import numpy as np
from attograd.codegen.lowerer import pm_simplify_lowered
from attograd.dtype import dtypes
from attograd.uop.ops import Ops, UOp, graph_rewrite

def _x() -> UOp: return UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))

def test_adding_plus_zero_twice_is_adding_it_once() -> None:
  # a masked load summed with neighbours whose masks folded to false: x + 0.0 + 0.0 + ... (468 of the 1943 lines of
  # MNIST's biggest conv kernel); the first add stays, it turns -0.0 into +0.0
  x = _x()
  chain = x
  for _ in range(7): chain = chain + 0.0
  out = graph_rewrite(chain, pm_simplify_lowered)
  assert out.op is Ops.ADD and out.src[0] is x and out.src[1].op is Ops.CONST and out.src[1].arg == 0.0

def test_minus_zero_adds_are_kept() -> None:
  # x + -0.0 + +0.0 is not x + -0.0 (for x = -0.0: +0.0 vs -0.0), nor is x + 0.0 + -0.0 reduced to x + -0.0
  x = _x()
  for u in ((x + -0.0) + 0.0, (x + 0.0) + -0.0):
    assert graph_rewrite(u, pm_simplify_lowered) is u

def test_plus_zero_once_and_twice_agree_bitwise() -> None:
  # what the rule relies on: after one + 0.0, another changes no bit, for -0.0, NaN, inf and denormals
  xs = np.array([-0.0, 0.0, np.nan, -np.inf, np.inf, 1e-45, -1e-45, -1.5], np.float32)
  once, twice = xs + np.float32(0.0), (xs + np.float32(0.0)) + np.float32(0.0)
  assert once.tobytes() == twice.tobytes()
  assert math.copysign(1.0, float(once[0])) > 0
