"""Tests for the symbolic facts attograd/uop/ops.py derives from bounds: vmin/vmax of the ops tinygrad's code asks
about (vector constants, shifts, masks, casts), const_factor/divides, Variable(multiple_of=), float Variables,
resolve, int()/float() of a UOp, and the undecidable-bool error. Each bound is checked against every value."""
import math
import pytest
from attograd.dtype import Invalid, dtypes, truncate_to
from attograd.uop.ops import Ops, UndecidableError, UOp, Variable, exec_alu, resolve
from attograd.mixin.gradient import compute_gradient

I32 = dtypes.int32

def all_values(u: UOp, var: UOp) -> list:
  """u's value at every value of var (an int Variable with a small range), computed with exec_alu."""
  def ev(n: UOp, x: int):
    if n is var: return x
    if n.op is Ops.CONST: return n.arg
    if n.op is Ops.CAST: return truncate_to(ev(n.src[0], x), n.dtype)
    return exec_alu(n.op, n.dtype, [ev(s, x) for s in n.src])
  return [ev(u, x) for x in range(var.vmin, var.vmax + 1)]  # type: ignore[arg-type]

@pytest.mark.parametrize("lo,hi", [(0, 10), (-10, -3), (-5, 6), (3, 7)])
@pytest.mark.parametrize("build", [lambda x: x.alu(Ops.SHL, UOp.const(I32, 5)),
                                   lambda x: x.alu(Ops.XOR, UOp.const(I32, -1)), lambda x: x & 511, lambda x: x & 5,
                                   lambda x: x.cast(dtypes.float32),
                                   lambda x: x.cast(dtypes.uint8)])
def test_bounds_hold_every_value(lo: int, hi: int, build) -> None:
  x = Variable("x", lo, hi)
  u = build(x)
  vals = all_values(u, x)
  assert u.vmin <= min(vals) and max(vals) <= u.vmax

def test_bounds_are_tight_where_known() -> None:
  x = Variable("x", 3, 7)
  assert (x.alu(Ops.XOR, UOp.const(I32, -1))).vmin_vmax == (~7, ~3)
  assert (x.alu(Ops.SHL, UOp.const(I32, 5))).vmin_vmax == (3 << 5, 7 << 5)
  assert (Variable("y", -100, 100) & 511).vmin_vmax == (0, 511)
  assert Variable("z", 0, 16777219).cast(dtypes.float32).vmin_vmax == (0.0, 16777220.0)  # onto float32's grid
  assert Variable("z", -10, 10).cast(dtypes.float32).vmin_vmax == (-10.0, 10.0)
  assert Variable("z", -10, 10).cast(dtypes.uint32).vmin_vmax == (0, 2**32 - 1)  # may wrap: the whole range
  f = UOp.variable("f", -4.5, 4.5, dtypes.float32)
  assert f.cast(I32).vmin_vmax == (-4, 4) and f._min_max == (-4.5, 4.5)

def test_vector_constant_bounds() -> None:
  assert UOp.const((10, 20, -5, 7)).vmin_vmax == (-5, 20)
  assert UOp.const((1.5, -3.2, 0.0)).vmin == truncate_to(-3.2, dtypes.float32)
  # a lane without a value (tinygrad's Invalid) bounds nothing
  assert UOp(Ops.CONST, I32, arg=(0, 4, Invalid, Invalid)).vmin_vmax == (0, 4)

def test_special_in_tinygrads_form() -> None:
  assert UOp(Ops.SPECIAL, I32, (Variable("i", 1, 10),), "gidx0").vmin_vmax == (0, 9)

def test_cast_of_a_constant_folds() -> None:
  x = UOp.const(dtypes.float32, 4.5)
  assert x.cast(I32).simplify() is UOp.const(I32, 4)
  assert x.ne(x.cast(I32).cast(dtypes.float32)).simplify().arg is True
  nan = UOp.const(dtypes.float32, math.nan)
  assert nan.cast(I32).simplify().op is Ops.CAST  # C leaves it undefined: not folded

def test_const_factor_and_divides() -> None:
  x = Variable("x", 10, 20)
  assert UOp.const(I32, 30).const_factor() == 30 and (UOp(Ops.ADD, I32, (UOp.const(I32, 30), UOp.const(I32, 12)))
                                                     ).const_factor() == 6
  assert (x * 3).const_factor() == 3 and (x // 4).const_factor() == 1
  assert ((x * 6) + 18).divides(6) is x + 3
  assert (x * 4).divides(3) is None and UOp.const(I32, 42).divides(5) is None
  assert UOp.const(I32, 42).divides(7) is UOp.const(I32, 6)
  m = UOp.variable("m", 16, 32, multiple_of=4)
  assert m.const_factor() == 4 and m.divides(2) is m // 2 and m.divides(8) is None
  assert m.bind(20).unbind()[1] == 20
  with pytest.raises(ValueError, match="multiple of 4"): m.bind(18)
  with pytest.raises(ValueError, match="multiple_of"): UOp.variable("m", 0, 8, multiple_of=0)

def test_float_variables() -> None:
  x = UOp.variable("x", -math.inf, math.inf, dtype=dtypes.float32)
  assert x.vmin_vmax == (-math.inf, math.inf)
  with pytest.raises(ValueError, match="float dtype"): UOp.variable("x", -0.5, 1.0)
  with pytest.raises(ValueError, match="min <= max"): UOp.variable("x", math.nan, 1.0, dtype=dtypes.float32)
  g = compute_gradient(x.sin() * x, UOp.const(dtypes.float32, 1.0), {x})[x]
  got = g.substitute({x: UOp.const(dtypes.float32, 2.0)}).ssimplify()
  assert got == pytest.approx(math.sin(2.0) + 2.0 * math.cos(2.0), rel=1e-5)

def test_resolve_and_single_values() -> None:
  i = Variable("i", 1, 10)
  assert resolve(i < 4) is True and resolve(i < 4, False) is False
  assert resolve(i < 11, False) is True and resolve(i < -1, True) is False and resolve(False) is False
  with pytest.raises(TypeError): resolve(i)  # not a condition
  assert int(UOp.const(I32, 4) + 7) == 11 and float(UOp.const(dtypes.float32, 4.5) + 7) == 11.5
  assert int(i.maximum(20)) == 20
  with pytest.raises(ValueError, match="not one number"): int(i + 1)
  with pytest.raises(TypeError): int(UOp.const(dtypes.float32, 1.0))
  b = UOp.variable("b", False, True, dtypes.bool)
  assert bool(b | True) is True and bool(b & False) is False
  # undecidable: a ValueError as in tinygrad, still the TypeError attograd's own code catches
  with pytest.raises(UndecidableError): bool(i < 5)
  with pytest.raises(ValueError): bool(b & True)
  with pytest.raises(TypeError): bool((i > 4) | (i < 6))

def test_exact_cast_chains_fold() -> None:
  a = Variable("a", 1, 10)
  assert a.cast(dtypes.int64).cast(I32).simplify() is a
  assert a.cast(dtypes.float64).cast(I32).simplify() is a
  assert a.cast(dtypes.int8).cast(dtypes.int64).simplify() is a.cast(dtypes.int64)  # int8 holds 1..10
  assert a.cast(dtypes.int8).cast(dtypes.float32).simplify() is a.cast(dtypes.float32)
  big = Variable("b", 0, 1000)
  assert big.cast(dtypes.int8).cast(I32).simplify().src[0].op is Ops.CAST  # int8 wraps 1000: kept
  assert Variable("c", 0, 2**25).cast(dtypes.float32).cast(I32).simplify().op is Ops.CAST  # float32 rounds 2**25-1
  h = UOp.variable("h", 0.0, 100.0, dtypes.float16)
  assert h.cast(dtypes.float32).cast(dtypes.float16).simplify() is h  # there and back through a wider float
  assert h.cast(dtypes.float64).cast(dtypes.float32).simplify().src[0].op is Ops.CAST  # no new half cast made

def test_nan_pattern_arg_matches_nan() -> None:
  from attograd.uop.ops import PatternMatcher, UPat
  pm = PatternMatcher([(UPat(Ops.CONST, arg=math.nan, name="x"), lambda x: x.rtag())])
  n = UOp.const(dtypes.float32, math.nan)
  assert pm.rewrite(n) is n.rtag() and pm.rewrite(UOp.const(dtypes.float32, 1.0)) is None
