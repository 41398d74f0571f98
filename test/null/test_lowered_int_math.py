"""Rules that run on lowered kernels (codegen/lowerer.py's pm_simplify_lowered): they keep every value, and they never
move an integer op into a signed dtype where it can overflow (undefined in C: gcc then assumes it doesn't)."""
from __future__ import annotations
from hypothesis import given, settings, strategies as st
from attograd.codegen.lowerer import pm_simplify_lowered
from attograd.dtype import DType, dtypes, truncate_to
from attograd.uop.ops import Ops, UOp, Variable, exec_alu, graph_rewrite, python_alu

def run(u: UOp, env: dict[UOp, int], check: bool = True) -> int:
  """u's value at env (the IR's wrapping semantics); with check, asserts that no signed ADD/MUL on the way leaves its
  dtype."""
  vals: dict[UOp, int] = {}
  for n in u.toposort():
    if n.op is Ops.CONST: vals[n] = n.arg
    elif n.op is Ops.DEFINE_VAR: vals[n] = env[n]
    elif n.op is Ops.CAST: vals[n] = truncate_to(vals[n.src[0]], n.dtype)
    else:
      args = [vals[s] for s in n.src]
      if check and n.op in (Ops.ADD, Ops.MUL) and dtypes.is_int(n.dtype) and not dtypes.is_unsigned(n.dtype):
        exact = python_alu[n.op](*args)
        assert dtypes.min(n.dtype) <= exact <= dtypes.max(n.dtype), f"{n.render()} overflows {n.dtype} at {env}"
      vals[n] = exec_alu(n.op, n.dtype, args)
  return vals[u]

def lowered(u: UOp) -> UOp: return graph_rewrite(u, pm_simplify_lowered)

def test_hash_multiply_stays_unsigned() -> None:
  # the rand kernel's first mixing step, once its xor with a zero key folds away: cast(i) * 0x7FEB352D in uint32.
  # It became (i * 0x7FEB352D) in int32, cast after: a signed overflow gcc assumed away (the kernel segfaulted)
  i = Variable("i", 0, 4095)
  e = i.cast(dtypes.uint32) * 0x7FEB352D
  s = lowered(e)
  assert not any(n.op is Ops.MUL and n.dtype is dtypes.int32 for n in s.toposort()), s.render()
  for v in (0, 1, 2, 4095): assert run(s, {i: v}) == run(e, {i: v})

def test_index_halves_still_meet() -> None:
  # what the rule is for: an int64 index computed in int32 halves, brought back together where the sum folds
  r = Variable("r", 0, 2**20 - 1, dtypes.int64)
  e = (r // 64).cast(dtypes.int32) * 64 + (r % 64).cast(dtypes.int32)
  s = lowered(e)
  assert s.op is Ops.CAST and s.src[0] is r, s.render()

_NARROW: list[tuple[DType, DType]] = [(dtypes.int32, dtypes.uint32), (dtypes.int64, dtypes.int32),
                                      (dtypes.int32, dtypes.int32), (dtypes.int64, dtypes.uint32),
                                      (dtypes.int64, dtypes.int64), (dtypes.int16, dtypes.uint16)]

@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_NARROW), st.integers(0, 3), st.integers(0, 2**40), st.sampled_from([Ops.ADD, Ops.MUL]),
       st.integers(-2**33, 2**33), st.booleans())
def test_narrowing_never_overflows_signed(dts: tuple[DType, DType], lo_kind: int, span: int, op: Ops, k: int,
                                          two_vars: bool) -> None:
  wide, narrow = dts
  lo = (0, 1, -7, dtypes.min(wide))[lo_kind]
  hi = min(lo + span, dtypes.max(wide))
  a, b = Variable("a", lo, hi, wide), Variable("b", lo, hi, wide)
  other = b.cast(narrow) if two_vars else UOp.const(narrow, exec_alu(Ops.ADD, narrow, [k, 0]))  # k wrapped
  e = UOp(op, narrow, (UOp(Ops.CAST, narrow, (a,)), other))
  s = lowered(e)
  for p in [(lo, hi), (hi, hi), (lo, lo), (hi, lo), ((lo + hi) // 2, lo)]:
    env = {a: p[0], b: p[1]}
    # an op that overflows its signed dtype already (the narrow one) is the caller's; the rewrite must add none
    try: want, clean = run(e, env), True
    except AssertionError: want, clean = run(e, env, check=False), False
    assert run(s, env, check=clean) == want, f"{e.render()} -> {s.render()} at {env}"

def test_unrolled_copies_are_substitutions_of_every_combination() -> None:
  # lowering's copies of a graph per unrolled position: the graph with the placeholders' values substituted, in
  # itertools.product order; the parts that don't depend on a placeholder are the very same nodes in every copy
  import itertools
  from attograd.codegen.lowerer import unrolled_copies
  d = dtypes.int32
  r = UOp(Ops.RANGE, d, (UOp.const(d, 8),), (0, "loop"))
  u0, u1 = (UOp(Ops.DEFINE_VAR, d, (), (f"_unroll{i}", 0, n - 1)) for i, n in ((1, 2), (2, 3)))
  shared = r * 12 + 5
  root = UOp(Ops.SINK, dtypes.void, ((shared + u0 * 3) * (u1 + 1), shared))
  copies = unrolled_copies(root, [u0, u1], d)
  want = [root.substitute({u0: UOp.const(d, a), u1: UOp.const(d, b)}) for a, b in itertools.product(range(2), range(3))]
  assert copies == want and len(set(copies)) == 6
  assert all(c.src[1] is shared for c in copies)
  assert unrolled_copies(shared, [u0, u1], d) == [shared] * 6  # nothing to substitute: the graph itself

def test_unrolled_copies_simplified_as_they_are_built() -> None:
  # with a rule table, each copy is the simplified graph: copies that come out equal are one node
  from attograd.codegen.lowerer import unrolled_copies
  d = dtypes.int32
  r = UOp(Ops.RANGE, d, (UOp.const(d, 8),), (0, "loop"))
  u0, u1 = (UOp(Ops.DEFINE_VAR, d, (), (f"_unroll{i}", 0, 2)) for i in (1, 2))
  root = (r + u0) + u1  # (u0, u1) = (0, 2), (1, 1) and (2, 0) all reach r + 2
  copies = unrolled_copies(root, [u0, u1], d, pm_simplify_lowered)
  assert copies == [lowered(c) for c in unrolled_copies(root, [u0, u1], d)]
  assert copies[2] is copies[4] is copies[6] and len(set(copies)) == 5
