"""Tests for attograd/uop/symbolic.py: the simplifier never changes a value, and it does simplify index math."""
import functools, itertools, os, random
from typing import Callable
import pytest
from hypothesis import given, settings, strategies as st
from attograd.dtype import dtypes
from attograd.uop.ops import Ops, UOp, Variable, exec_alu, graph_rewrite
from attograd.uop.symbolic import symbolic, symbolic_simple

I32 = dtypes.int32
FUZZ = int(os.getenv("FUZZ", "1"))  # FUZZ=50 for a long bug hunt

def evaluate(u: UOp, env: dict[UOp, int]) -> int | bool:
  """A reference evaluator that shares nothing with the simplifier but exec_alu (the IR's C semantics).
  On the way it checks that every node's value lies inside its own vmin/vmax."""
  vals: dict[UOp, int | bool] = {}
  for n in u.toposort():
    if n.op is Ops.CONST: vals[n] = n.arg
    elif n.op is Ops.DEFINE_VAR: vals[n] = env[n]
    else: vals[n] = exec_alu(n.op, n.dtype, [vals[s] for s in n.src])
    assert n.vmin <= vals[n] <= n.vmax, f"{n.render()} = {vals[n]} outside [{n.vmin}, {n.vmax}] at {envstr(env)}"
  return vals[u]

def envstr(env: dict[UOp, int]) -> str: return ", ".join(f"{v.expr}={x}" for v, x in env.items())

def var(name: str, lo: int, hi: int) -> UOp: return Variable(name, lo, hi)
def c(x: int) -> UOp: return UOp.const(I32, x)

# ***** random expressions *****

@st.composite
def variables(draw: st.DrawFn) -> list[UOp]:
  n = draw(st.integers(1, 3))
  out = []
  for name in "abc"[:n]:
    lo = draw(st.sampled_from([0, 0, 0, 1, -1, -3, -7]))
    out.append(Variable(name, lo, lo + draw(st.integers(0, 12))))
  return out

# Strategies draw builders (functions of the variable list) rather than UOps, so that they are made once and
# hypothesis doesn't validate a fresh strategy tree for every example.
Build = Callable[[list[UOp]], UOp]

Strat = st.SearchStrategy[Build]
var_s: Strat = st.integers(0, 2).map(lambda i: lambda vs: vs[i % len(vs)])

def bin_(f: Callable[[UOp, UOp], UOp], x: Strat, y: Strat) -> Strat:
  return st.tuples(x, y).map(lambda t: lambda vs: f(t[0](vs), t[1](vs)))

def with_consts(f: Callable[..., UOp], x: Strat, *ks: st.SearchStrategy[int]) -> Strat:
  return st.tuples(x, *ks).map(lambda t: lambda vs: f(t[0](vs), *t[1:]))

@functools.cache
def int_expr(depth: int) -> Strat:
  leaf = st.one_of(var_s, st.integers(-8, 8).map(lambda k: lambda vs: c(k)))
  if depth == 0: return leaf
  sub, pos = int_expr(depth - 1), st.integers(1, 9)
  return st.one_of(
    leaf,
    bin_(lambda x, y: x + y, sub, sub),
    bin_(lambda x, y: x - y, sub, sub),
    bin_(lambda x, y: x * y, sub, sub),
    bin_(lambda x, y: x.maximum(y), sub, sub),
    with_consts(lambda x, k: x * k, sub, st.integers(-4, 6)),
    with_consts(lambda x, k: x // k, sub, pos),
    with_consts(lambda x, k: x % k, sub, pos),
    st.tuples(bool_expr(depth - 1), sub, sub).map(lambda t: lambda vs: t[0](vs).where(t[1](vs), t[2](vs))),
    # the shapes the view code produces: a*k + b split back apart, and nested div/mod
    st.tuples(sub, sub, pos).map(lambda t: lambda vs: (t[0](vs) * t[2] + t[1](vs)) // t[2]),
    st.tuples(sub, sub, pos).map(lambda t: lambda vs: (t[0](vs) * t[2] + t[1](vs)) % t[2]),
    with_consts(lambda x, k: (x // k) * k + x % k, sub, pos),
    with_consts(lambda x, k, m: (x // k) // m, sub, pos, pos),
    with_consts(lambda x, k, m: (x % (k * m)) // k, sub, pos, pos),
    with_consts(lambda x, k, m: (x % (k * m)) % m, sub, pos, pos),
    # bit fields (a quantized block's nibbles): shifts' bounds, and masks the bounds make redundant
    with_consts(lambda x, k: x.alu(Ops.SHR, c(k)), sub, st.integers(0, 4)),
    bin_(lambda x, y: x.alu(Ops.SHR, y), sub, sub),
    with_consts(lambda x, m: x & m, sub, st.sampled_from([0, 1, 3, 7, 15, 6, -1])),
  )

@functools.cache
def bool_expr(depth: int) -> Strat:
  sub = int_expr(max(depth - 1, 0))
  cmp = st.one_of(
    bin_(lambda x, y: x < y, sub, sub),
    bin_(lambda x, y: x.ne(y), sub, sub),
    bin_(lambda x, y: x.eq(y), sub, sub),
    with_consts(lambda x, k: x < k, sub, st.integers(-10, 30)),
    with_consts(lambda x, k: x >= k, sub, st.integers(-10, 30)),
  )
  if depth == 0: return cmp
  bsub = bool_expr(depth - 1)
  return st.one_of(cmp, bin_(lambda x, y: x & y, bsub, bsub), bin_(lambda x, y: x | y, bsub, bsub),
                   bsub.map(lambda b: lambda vs: b(vs).logical_not()))

@functools.cache
def linear_expr(depth: int) -> Strat:
  """Sums of small multiples of index-like terms plus a constant: what the div/mod/< rules are for."""
  pos = st.integers(1, 9)
  term = var_s if depth == 0 else st.one_of(
    var_s,
    bin_(lambda x, y: x * y, var_s, var_s),
    with_consts(lambda x, k: x // k, linear_expr(depth - 1), pos),
    with_consts(lambda x, k: x % k, linear_expr(depth - 1), pos),
    # a div/mod pair of one x: merges back into x only when the coefficients line up (m1 == m2)
    with_consts(lambda x, k, m1, m2: (x // k) * (k * m1) + (x % k) * m2, linear_expr(depth - 1), pos,
                st.integers(-1, 2), st.integers(-1, 2)),
  )
  def build(terms: list[tuple[Build, int]], k: int) -> Build:
    return lambda vs: sum((t(vs) * m for t, m in terms[1:]), terms[0][0](vs) * terms[0][1]) + k
  return st.tuples(st.lists(st.tuples(term, st.integers(-3, 8)), min_size=1, max_size=4), st.integers(-6, 20)).map(
    lambda t: build(*t))

@functools.cache
def index_expr() -> Strat:
  lin, pos = linear_expr(2), st.integers(1, 12)
  return st.one_of(lin, with_consts(lambda x, k: x // k, lin, pos), with_consts(lambda x, k: x % k, lin, pos),
                   with_consts(lambda x, k: x < k, lin, st.integers(-10, 60)))

@st.composite
def expr_and_points(draw: st.DrawFn, kind: str) -> tuple[UOp, list[dict[UOp, int]]]:
  vs = draw(variables())
  e = draw({"int": int_expr(3), "bool": bool_expr(2), "index": index_expr()}[kind])(vs)
  # every point when the domain is small, else a seeded sample (always with the corners, where bounds bite)
  domains = [range(v.vmin, v.vmax + 1) for v in vs]
  points = list(itertools.product(*domains))
  if len(points) > 40:
    rng = random.Random(draw(st.integers(0, 2**32)))
    corners = list(itertools.product(*[(d[0], d[-1]) for d in domains]))
    points = corners + rng.sample(points, 32)
  return e, [dict(zip(vs, p)) for p in points]

def check_same_values(e: UOp, points: list[dict[UOp, int]]) -> UOp:
  s = e.simplify()
  for env in points:
    want, got = evaluate(e, env), evaluate(s, env)
    assert want == got, f"{e.render()} -> {s.render()}: {want} != {got} at {envstr(env)}"
  return s

@settings(max_examples=250 * FUZZ, deadline=None)
@given(expr_and_points("int"))
def test_int_expr_value_preserved(ep: tuple[UOp, list[dict[UOp, int]]]) -> None:
  check_same_values(*ep)

@settings(max_examples=200 * FUZZ, deadline=None)
@given(expr_and_points("index"))
def test_index_expr_value_preserved(ep: tuple[UOp, list[dict[UOp, int]]]) -> None:
  check_same_values(*ep)

@settings(max_examples=200 * FUZZ, deadline=None)
@given(expr_and_points("bool"))
def test_bool_expr_value_preserved(ep: tuple[UOp, list[dict[UOp, int]]]) -> None:
  check_same_values(*ep)

@settings(max_examples=100 * FUZZ, deadline=None)
@given(expr_and_points("int"))
def test_simplify_is_a_fixpoint(ep: tuple[UOp, list[dict[UOp, int]]]) -> None:
  s = ep[0].simplify()
  assert s.simplify() is s, f"{s.render()} -> {s.simplify().render()}"

@settings(max_examples=100 * FUZZ, deadline=None)
@given(expr_and_points("int"))
def test_substitute_then_simplify_is_a_const(ep: tuple[UOp, list[dict[UOp, int]]]) -> None:
  e, points = ep
  for env in points[:4]:
    got = e.substitute({v: c(x) for v, x in env.items()}).simplify()
    assert got.op is Ops.CONST and got.arg == evaluate(e, env)

# ***** the index patterns that must simplify *****

a, b, x = var("a", 0, 10), var("b", 0, 3), var("x", 0, 99)
n = var("n", -5, 5)

@pytest.mark.parametrize("expr, want", [
  ((a * 4 + b) // 4, a),
  ((a * 4 + b) % 4, b),
  ((b + a * 4) // 4, a),
  ((x // 10) * 10 + x % 10, x),
  ((x % 10) + (x // 10) * 10, x),
  ((x // 10) * 30 + (x % 10) * 3, x * 3),
  ((x // 4) // 5, x // 20),
  ((x % 12) % 4, x % 4),
  ((x % 12) // 4, (x // 4) % 3),
  (a % 1, c(0)),
  (n % 1, c(0)),
  (n // 1, n),
  (a + 0, a),
  (a * 1, a),
  (a * 0, c(0)),
  (n * 0, c(0)),
  (a - a, c(0)),
  ((a + 3) * 2 - 6, a * 2),
  ((a * 6 + b * 4) // 2, a * 3 + b * 2),
  ((a * 6 + b * 4) % 2, c(0)),
  ((a * 6 + b * 4 + 2) % 4, ((a * 3 + b * 2 + 1) % 2) * 2),
  ((a * 4 + 8) // 4, a + 2),
  ((a * 4 + 9) // 4, a + 2),
  ((a * 4 + 9) % 4, c(1)),
  (b // 4, c(0)),
  (b % 4, b),
  (a * 3 * 5, a * 15),
  ((a + b) * 3, a * 3 + b * 3),
  (a.maximum(b + 11), b + 11),
  (a.maximum(-1), a),
  (UOp.const(dtypes.bool, True).where(a, b), a),
])
def test_simplifies_to(expr: UOp, want: UOp) -> None:
  got = expr.simplify()
  assert got is want.simplify(), f"{expr.render()} -> {got.render()}, want {want.simplify().render()}"

@pytest.mark.parametrize("expr, want", [
  (c(3) + c(4), 7),
  (c(3) * c(4) - c(5), 7),
  (c(-7) // c(2), -3),  # C division truncates toward zero
  (c(-7) % c(2), -1),   # C modulo takes the dividend's sign
  (c(7) // c(-2), -3),
  (c(2**31 - 1) + c(1), -(2**31)),  # int32 wraps
  (c(3).maximum(c(9)), 9),
  (c(3) < c(4), True),
  (c(3).ne(c(3)), False),
  (c(3).eq(c(3)), True),
  ((c(1) < c(2)).where(c(5), c(6)), 5),
  (a * 0 + c(5), 5),
])
def test_constant_folding(expr: UOp, want: int) -> None:
  got = expr.simplify()
  assert got.op is Ops.CONST and got.arg == want and type(got.arg) is type(want), got

@pytest.mark.parametrize("expr, want", [
  (a < 11, True),
  (a < 0, False),
  (a >= 0, True),
  (a < -3, False),
  (a.ne(11), True),
  (a.eq(-1), False),
  (n < 6, True),
  (n < -5, False),
  ((a * 4 + b) < 44, True),
  ((a * 4 + b) < 0, False),
  (x % 10 < 10, True),
  (x // 10 < 10, True),
  ((a < 11) & (b < 4), True),
  ((a < 0) | (b < 4), True),
  ((a < 0) & (b < 2), False),
])
def test_comparisons_decided_by_bounds(expr: UOp, want: bool) -> None:
  got = expr.simplify()
  assert got.op is Ops.CONST and got.arg is want, got.render()

@pytest.mark.parametrize("expr, want", [
  (a + 3 < 5, a < 2),
  (a * 4 < 9, a < 3),
  (a * 4 + b * 8 < 9, a + b * 2 < 3),
  (a * 4 + b * 8 < 8, a + b * 2 < 2),
])
def test_comparisons_rewritten(expr: UOp, want: UOp) -> None:
  assert expr.simplify() is want, expr.simplify().render()

def test_divmod_pairs_merge_only_when_they_line_up() -> None:
  for e in ((x // 10) * 20 + x % 10, (x // 10) * 10 + (x % 10) * 2, (x // 10) * 10 + x % 5):
    s = e.simplify()
    assert s is not x and s is not x * 2
    for v in range(100): assert evaluate(s, {x: v}) == evaluate(e, {x: v})

def test_gcd_folding() -> None:
  assert ((a * 4 + b * 8) // 4).simplify() is (a + b * 2).simplify()
  assert ((a * 4 + b * 8) % 4).simplify() is c(0)
  assert ((a * 6 + 3) // 9).simplify() is ((a * 2 + 1) // 3).simplify()
  assert ((a * 6 + 3) % 9).simplify() is (((a * 2 + 1) % 3) * 3).simplify()

def test_negative_dividends_left_alone() -> None:
  # in C, (n*4 + 1)//4 != n for n < 0: the rules must not fire
  e = (n * 4 + 1) // 4
  for v in range(-5, 6): assert evaluate(e.simplify(), {n: v}) == evaluate(e, {n: v})
  assert e.simplify() is not n
  assert ((n * 4 + 1) % 4).simplify() is not c(1)

def test_no_int32_overflow_assumed() -> None:
  big = var("big", 0, 2**30)
  # big*4 wraps in int32: (big*4)//4 is not big when big >= 2**29
  e = (big * 4) // 4
  for v in (0, 2**29 - 1, 2**29, 2**30):
    assert evaluate(e.simplify(), {big: v}) == evaluate(e, {big: v})
  e2 = big * 4 + 4 < 8
  for v in (0, 1, 2**29, 2**30 - 1, 2**30):
    assert evaluate(e2.simplify(), {big: v}) == evaluate(e2, {big: v})

@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.uint8, dtypes.int8])
def test_shift_and_mask_bounds_hold(dtype) -> None:
  # every value of x >> y and x & m lies within the node's bounds (and its simplified form keeps the value), for
  # ranges of x and y on both sides of 0 and counts past the width
  bits = dtype.itemsize * 8
  lo_x = [0, 3, -5] if not dtypes.is_unsigned(dtype) else [0, 3, 200]
  for xl, xw, yl, yw in itertools.product(lo_x, [0, 1, 17, 40], [0, 1, -2, bits - 2], [0, 1, 3]):
    xh = min(xl + xw, dtypes.max(dtype))
    x, y = Variable("x", xl, xh, dtype), Variable("y", yl, yl + yw, dtype)
    for e in (x.alu(Ops.SHR, y), x.alu(Ops.SHR, UOp.const(dtype, max(yl, 0))), x & UOp.const(dtype, 15),
              (x.alu(Ops.SHR, UOp.const(dtype, 2))) & UOp.const(dtype, 7)):
      s = e.simplify()
      for xv, yv in itertools.product(range(xl, xh + 1), range(yl, yl + yw + 1)):
        env = {x: xv, y: yv}
        assert evaluate(s, env) == evaluate(e, env), f"{e.render()} -> {s.render()} at {envstr(env)}"

def test_mask_of_a_field_in_bounds() -> None:
  # a byte's high nibble needs no mask; its low one does, and so does a value that may be negative
  byte = var("byte", 0, 255)
  assert (byte.alu(Ops.SHR, c(4)) & 15).simplify() is byte.alu(Ops.SHR, c(4))
  assert (byte & 15).simplify() is not byte
  s = var("s", -8, 7)
  assert (s & 15).simplify() is not s
  assert ((byte.alu(Ops.SHR, c(3))) & 15).simplify() is not byte.alu(Ops.SHR, c(3))  # 0..31: the mask cuts a bit

def test_unsigned_wraparound_respected() -> None:
  u = Variable("u", 0, 2**32 - 1, dtypes.uint32)
  for e in ((u * 4) // 4, (u * 4) % 8, (u * 4 + 4) // 2, u + 1 < 5, u * 2 < 5):
    s = e.simplify()
    for v in (0, 1, 2**30, 2**31 + 1, 2**32 - 1):
      assert evaluate(s, {u: v}) == evaluate(e, {u: v}), f"{e.render()} -> {s.render()} at u={v}"

def test_float_identities_keep_floats() -> None:
  f = UOp(Ops.DEFINE_VAR, dtypes.float32, arg=("f", 0, 1))
  assert (f * 1.0).simplify() is f
  # x + 0 is not an identity for floats (-0.0 + 0.0 == +0.0), so it must stay
  assert (f + 0.0).simplify() is not f
  assert (f * 0.0).simplify() is not UOp.const(dtypes.float32, 0.0)

def test_boolean_identities() -> None:
  p, q = a < 5, b < 2
  t, f = UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)
  assert (p & t).simplify() is p
  assert (t & p).simplify() is p
  assert (p & f).simplify() is f
  assert (p | t).simplify() is t
  assert (p | f).simplify() is p
  assert (p & p).simplify() is p
  assert (q | q).simplify() is q
  assert p.logical_not().logical_not().simplify() is p
  assert p.where(a, a).simplify() is a

def test_symbolic_simple_is_a_subset() -> None:
  # symbolic_simple folds constants but leaves sums alone
  assert graph_rewrite(c(2) + c(3), symbolic_simple) is c(5)
  e = (a + 1) + 1
  assert graph_rewrite(e, symbolic_simple) is e
  assert graph_rewrite(e, symbolic) is (a + 2)

def test_render() -> None:
  assert ((a * 4 + b) // 4).render() == "(((a*4)+b)//4)"
  assert (a < 3).where(a, b).render() == "(a if (a<3) else b)"
  assert a.maximum(b).render() == "max(a, b)"

def test_int_vectors_left_alone() -> None:
  # index rules reason about one scalar; vector consts hold tuples, so only elementwise constant folding applies
  v4 = dtypes.int32.vec(4)
  xv = UOp(Ops.DEFINE_VAR, v4, arg=("xv", 0, 10))
  k = UOp.const(v4, (1, 2, 3, 4))
  for e in (xv + k + k, (xv * k) * k, (xv + k) * k, xv // k, xv % k, (xv // k) // k, (xv % k) % k, xv < k,
            xv.maximum(k)):
    assert e.simplify() is e
  assert (k + k).simplify() is UOp.const(v4, (2, 4, 6, 8))
