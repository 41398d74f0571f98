"""Tests for attograd/codegen/intsafe.py: the guards on integer division and shifts, rule by rule (device-free);
the values on every device are pinned in test_ops.py (test_int_division_edges, test_shifts_by_the_width_or_more)."""
from __future__ import annotations
import itertools
import pytest
from attograd.codegen.intsafe import pm_int_safety
from attograd.dtype import dtypes
from attograd.uop.ops import Ops, UOp, Variable, exec_alu, graph_rewrite

def _eval(u: UOp, env: dict[UOp, int]) -> int:
  vals: dict[UOp, int] = {}
  for n in u.toposort():
    if n.op is Ops.CONST: vals[n] = n.arg
    elif n.op is Ops.DEFINE_VAR: vals[n] = env[n]
    elif n.op is Ops.CAST: vals[n] = exec_alu(Ops.ADD, n.dtype, [vals[n.src[0]], 0])  # wrap into the new dtype
    else: vals[n] = exec_alu(n.op, n.dtype, [vals[s] for s in n.src])
  return vals[u]

def test_index_math_and_in_range_shifts_are_left_alone() -> None:
  i = Variable("i", 0, 1000)
  for u in (i // 7, i % 7, i // Variable("n", 1, 64), UOp(Ops.SHL, dtypes.int32, (i, UOp.const(dtypes.int32, 31))),
            UOp(Ops.SHR, dtypes.int32, (i, Variable("s", 0, 31)))):
    assert graph_rewrite(u, pm_int_safety) is u

def test_constant_edge_cases_fold() -> None:
  x = Variable("x", -2**31, 2**31 - 1)
  assert graph_rewrite(x // 0, pm_int_safety).arg == 0
  assert graph_rewrite(x % -1, pm_int_safety).arg == 0
  assert graph_rewrite(UOp(Ops.SHL, dtypes.int32, (x, UOp.const(dtypes.int32, 32))), pm_int_safety).arg == 0
  # a divisor of -1 is not worth guarding when x can't be INT_MIN
  assert graph_rewrite(Variable("y", 0, 10) // -1, pm_int_safety).op is Ops.IDIV

@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint32])
@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR])
def test_guarded_ops_give_the_reference_values(dt, op) -> None:
  # every guarded form, evaluated op by op, agrees with exec_alu (the PYTHON device's meaning of the raw op) on the
  # edges: 0, +-1, the dtype's extremes, counts past the width and negative counts
  lo, hi, bits = dtypes.min(dt), dtypes.max(dt), dt.itemsize * 8
  a, b = UOp.variable("a", lo, hi, dt), UOp.variable("b", lo, hi, dt)
  guarded = graph_rewrite(UOp(op, dt, (a, b)), pm_int_safety)
  assert guarded.op is Ops.WHERE  # nothing is provably safe about a loaded value
  edges = (lo, lo + 1, -1, 0, 1, 2, 7, bits - 1, bits, bits + 1, 2 * bits, hi - 1, hi)
  vals = sorted({v for v in edges if lo <= v <= hi})
  for x, y in itertools.product(vals, vals):
    assert _eval(guarded, {a: x, b: y}) == exec_alu(op, dt, [x, y]), (x, y)

@pytest.mark.parametrize("dt", ["uint8", "uint16", "uint32", "uint64"])
def test_negative_float_to_unsigned_wraps(device: str, dt: str) -> None:
  # C leaves it undefined and gcc folded a constant -1.0 to 0 (linspace(-1, 2, 7, dtype=uint32)[0] was 0, not
  # 0xFFFFFFFF); NumPy and PyTorch wrap, as the PYTHON device does
  np = pytest.importorskip("numpy")
  from attograd import Tensor
  vals = np.array([-1.5, -1.0, -300.0, 0.0, 3.7, 255.0, 70000.5, 2.0 ** 40], dtype=np.float32)
  want = vals.astype(np.int64).astype(dt)
  assert Tensor(vals).cast(getattr(dtypes, dt)).tolist() == want.tolist()
  assert Tensor.full((3,), -1.0).cast(getattr(dtypes, dt)).tolist() == [int(np.array(-1).astype(dt))] * 3
  assert Tensor.linspace(-1, 2, 7, dtype=getattr(dtypes, dt)).tolist()[0] == int(np.array(-1).astype(dt))
