"""Tests for attograd/uop/view.py: View/ShapeTracker index math against NumPy, and that views merge where they can."""
import itertools, os
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from attograd.dtype import dtypes
from attograd.helpers import prod
from attograd.uop.ops import Ops, UOp, Variable
from attograd.uop.view import ShapeTracker, View

FUZZ = int(os.getenv("FUZZ", "1"))  # FUZZ=50 for a long bug hunt

# ***** evaluating index expressions *****

def np_eval(u: UOp, env: dict[UOp, np.ndarray]) -> np.ndarray:
  """Evaluate an int/bool UOp over whole arrays of variable values at once (C division: truncate toward zero)."""
  vals: dict[UOp, np.ndarray] = {}
  for n in u.toposort():
    s = [vals[x] for x in n.src]
    if n.op is Ops.CONST: vals[n] = np.array(n.arg)
    elif n.op is Ops.DEFINE_VAR: vals[n] = env[n]
    elif n.op is Ops.ADD: vals[n] = s[0] + s[1]
    elif n.op is Ops.MUL: vals[n] = s[0] * s[1]
    elif n.op in (Ops.IDIV, Ops.MOD):
      q = np.abs(s[0]) // np.abs(s[1])
      q = np.where((s[0] < 0) != (s[1] < 0), -q, q)
      vals[n] = q if n.op is Ops.IDIV else s[0] - q * s[1]
    elif n.op is Ops.MAX: vals[n] = np.maximum(s[0], s[1])
    elif n.op is Ops.CMPLT: vals[n] = s[0] < s[1]
    elif n.op is Ops.CMPNE: vals[n] = s[0] != s[1]
    elif n.op is Ops.CMPEQ: vals[n] = s[0] == s[1]
    elif n.op is Ops.AND: vals[n] = s[0] & s[1]
    elif n.op is Ops.OR: vals[n] = s[0] | s[1]
    elif n.op is Ops.WHERE: vals[n] = np.where(s[0], s[1], s[2])
    else: raise NotImplementedError(n.op)
  return vals[u]

def const_eval(stt: ShapeTracker, pos: tuple[int, ...]) -> tuple[int, bool]:
  """(idx, valid) of one element the way a lowerer with constant indices gets it: substitute, simplify to CONSTs."""
  idx, valid = stt.to_indexed([UOp.const(dtypes.int32, i) for i in pos])
  idx, valid = idx.simplify(), valid.simplify()
  assert idx.op is Ops.CONST and valid.op is Ops.CONST, (idx, valid)
  return idx.arg, valid.arg

def check_against_numpy(stt: ShapeTracker, want: np.ndarray) -> None:
  """`want` holds buffer index + 1 for every element, 0 where the element is padding."""
  assert stt.shape == want.shape
  if want.size == 0: return
  vs = [Variable(f"i{d}", 0, s - 1) for d, s in enumerate(stt.shape)]
  grids = dict(zip(vs, np.meshgrid(*[np.arange(s) for s in stt.shape], indexing="ij")))
  idx, valid = stt.to_indexed(vs)
  for i, v in ((idx, valid), (idx.simplify(), valid.simplify())):
    got_idx = np.broadcast_to(np_eval(i, grids), want.shape)
    got_valid = np.broadcast_to(np_eval(v, grids), want.shape).astype(bool)
    np.testing.assert_array_equal(got_valid, want != 0, err_msg=f"valid: {v.render()}")
    np.testing.assert_array_equal(np.where(want != 0, got_idx, -1), want - 1, err_msg=f"idx: {i.render()}")

# ***** random movement chains *****

def random_factor_shape(draw: st.DrawFn, size: int) -> tuple[int, ...]:
  if size == 0:
    shape = draw(st.lists(st.integers(0, 4), min_size=1, max_size=4))
    if 0 not in shape: shape[draw(st.integers(0, len(shape) - 1))] = 0
    return tuple(shape)
  if size == 1 and draw(st.booleans()): return ()  # rank 0: a view with no dim to hold a mask
  primes, n, p = [], size, 2
  while n > 1:
    while n % p == 0: primes, n = primes + [p], n // p
    p += 1
  ndim = draw(st.integers(1, 4))
  dims = [1] * ndim
  for q in primes: dims[draw(st.integers(0, ndim - 1))] *= q
  return tuple(dims)

@st.composite
def movement_chain(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[str, tuple]]]:
  shape = tuple(draw(st.lists(st.sampled_from([0, 1, 1, 2, 2, 3, 3, 4, 4, 4]), min_size=1, max_size=4)))
  start, ops = shape, []
  for _ in range(draw(st.integers(1, 6))):
    small = prod(shape) <= 64  # padding and expanding grow the element count; keep the checks fast
    kinds = ["reshape", "permute", "shrink", "flip"] + (["pad", "expand"] if small else [])
    kind = draw(st.sampled_from(kinds)) if shape else "reshape"  # a 0-d view only reshapes
    if kind == "reshape": arg: tuple = random_factor_shape(draw, prod(shape))
    elif kind == "permute": arg = tuple(draw(st.permutations(range(len(shape)))))
    elif kind == "flip": arg = tuple(draw(st.booleans()) for _ in shape)
    elif kind == "pad": arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    elif kind == "expand": arg = tuple(draw(st.integers(0, 4)) if s == 1 else s for s in shape)
    else:
      arg = tuple((b, draw(st.integers(b, s))) for s in shape for b in [draw(st.integers(0, s))])
    ops.append((kind, arg))
    shape = apply_np(np.zeros(shape), kind, arg).shape
  return start, ops

def apply_np(x: np.ndarray, kind: str, arg: tuple) -> np.ndarray:
  if kind == "reshape": return x.reshape(arg)
  if kind == "permute": return x.transpose(arg)
  if kind == "expand": return np.broadcast_to(x, arg)
  if kind == "pad": return np.pad(x, arg)  # pads with 0, the "invalid" marker
  if kind == "shrink": return x[tuple(slice(b, e) for b, e in arg)]
  if kind == "flip": return x[tuple(slice(None, None, -1) if f else slice(None) for f in arg)]
  raise ValueError(kind)

def run_chain(start: tuple[int, ...], ops: list[tuple[str, tuple]]) -> tuple[ShapeTracker, np.ndarray]:
  want = np.arange(1, prod(start) + 1).reshape(start)
  stt = ShapeTracker.from_shape(start)
  for kind, arg in ops:
    want = apply_np(want, kind, arg)
    stt = getattr(stt, kind)(arg)
    assert stt.shape == want.shape, (kind, arg)
  return stt, want

@settings(max_examples=250 * FUZZ, deadline=None)
@given(movement_chain())
def test_movement_chain_matches_numpy(chain: tuple[tuple[int, ...], list[tuple[str, tuple]]]) -> None:
  stt, want = run_chain(*chain)
  check_against_numpy(stt, want)
  # every reshape that can't merge adds at most one view
  assert len(stt.views) <= 1 + sum(kind == "reshape" for kind, _ in chain[1])
  simple = stt.simplify()
  assert len(simple.views) <= len(stt.views)
  check_against_numpy(simple, want)

@settings(max_examples=60 * FUZZ, deadline=None)
@given(movement_chain(), st.randoms(use_true_random=False))
def test_constant_indices_simplify_to_constants(chain: tuple[tuple[int, ...], list[tuple[str, tuple]]], rng) -> None:
  stt, want = run_chain(*chain)
  if want.size == 0: return
  for pos in rng.sample(list(itertools.product(*[range(s) for s in want.shape])), min(want.size, 6)):
    idx, valid = const_eval(stt, pos)
    assert valid == (want[pos] != 0)
    if valid: assert idx == want[pos] - 1

@pytest.mark.parametrize("ops", [
  [("reshape", (2, 3, 4)), ("permute", (2, 0, 1)), ("reshape", (4, 6))],
  [("reshape", (2, 2, 6)), ("permute", (1, 0, 2)), ("reshape", (2, 12))],
  [("pad", ((1, 1), (0, 0))), ("reshape", (36,))],
  [("pad", ((0, 0), (1, 1))), ("reshape", (32,))],
  [("pad", ((2, 0), (0, 0))), ("reshape", (3, 2, 6)), ("permute", (2, 1, 0)), ("reshape", (6, 6))],
  [("flip", (True, True)), ("reshape", (24,)), ("shrink", ((3, 20),)), ("pad", ((1, 2),))],
  [("shrink", ((0, 4), (1, 5))), ("reshape", (2, 2, 4)), ("permute", (2, 1, 0)), ("reshape", (16,))],
  [("reshape", (4, 1, 6)), ("expand", (4, 3, 6)), ("reshape", (12, 6)), ("pad", ((0, 1), (0, 0))), ("reshape", (78,))],
  [("shrink", ((1, 2), (0, 6))), ("reshape", (2, 3)), ("pad", ((1, 1), (1, 1)))],
  [("shrink", ((0, 4), (0, 0))), ("pad", ((0, 0), (1, 1))), ("reshape", (2, 4))],
  [("shrink", ((0, 0), (0, 6))), ("reshape", (0, 2, 3)), ("pad", ((1, 0), (0, 0), (0, 1))), ("reshape", (8,))],
])
def test_known_chains(ops: list[tuple[str, tuple]]) -> None:
  stt, want = run_chain((4, 6), ops)
  check_against_numpy(stt, want)
  check_against_numpy(stt.simplify(), want)

# ***** merging: movement chains that must stay one view *****

def test_contiguous_reshapes_stay_one_view() -> None:
  stt = ShapeTracker.from_shape((4, 6)).reshape((2, 12)).reshape((24,)).reshape((2, 3, 1, 4))
  assert len(stt.views) == 1 and stt.contiguous
  assert stt.views[0].strides == (12, 4, 0, 1)

def test_permute_then_mergeable_reshape() -> None:
  # (2,3,4) permuted to (4,2,3) has strides (1,12,4): the last two dims are one run of 6 with stride 4
  stt = ShapeTracker.from_shape((2, 3, 4)).permute((2, 0, 1)).reshape((4, 6))
  assert len(stt.views) == 1 and stt.views[0].strides == (1, 4)
  # splitting a permuted dim always merges
  stt = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((2, 3, 4))
  assert len(stt.views) == 1 and stt.views[0].strides == (3, 1, 6)

def test_permute_then_unmergeable_reshape() -> None:
  # (2,2,6) permuted to strides (6,12,1): merging the (2,6) dims of strides (12,1) is not one stride, so two views
  stt = ShapeTracker.from_shape((4, 6)).reshape((2, 2, 6)).permute((1, 0, 2)).reshape((2, 12))
  assert len(stt.views) == 2
  _, want = run_chain((4, 6), [("reshape", (2, 2, 6)), ("permute", (1, 0, 2)), ("reshape", (2, 12))])
  check_against_numpy(stt, want)

def test_expand_then_reshape_with_ones() -> None:
  stt = ShapeTracker.from_shape((3, 1)).expand((3, 4)).reshape((3, 1, 4, 1))
  assert len(stt.views) == 1 and stt.views[0].strides == (1, 0, 0, 0)
  stt = ShapeTracker.from_shape((1, 1)).expand((3, 4)).reshape((12,))
  assert len(stt.views) == 1 and stt.views[0].strides == (0,)
  stt = ShapeTracker.from_shape((1, 5)).expand((3, 5)).reshape((3, 5, 1)).reshape((15,))
  assert len(stt.views) == 2  # (3 with stride 0, 5 with stride 1) is not one run

def test_pad_then_flatten_keeps_a_mask() -> None:
  stt = ShapeTracker.from_shape((3, 4)).pad(((1, 1), (0, 0))).reshape((20,))
  assert len(stt.views) == 1
  v = stt.views[0]
  assert v.mask == ((4, 16),) and v.strides == (1,) and v.offset == -4
  # padding an inner dim leaves gaps a single 1-D mask can't describe
  assert len(ShapeTracker.from_shape((3, 4)).pad(((0, 0), (1, 1))).reshape((18,)).views) == 2

def test_shrink_then_reshape_is_one_view_with_offset() -> None:
  stt = ShapeTracker.from_shape((4, 6)).shrink(((1, 3), (0, 6))).reshape((12,))
  assert len(stt.views) == 1 and stt.views[0].offset == 6 and stt.views[0].strides == (1,)

def test_split_masked_dim_on_row_boundaries() -> None:
  stt = ShapeTracker.from_shape((3, 4)).reshape((12,)).pad(((4, 4),)).reshape((5, 4))
  assert len(stt.views) == 1 and stt.views[0].mask == ((1, 4), (0, 4))

def test_simplify_merges_back() -> None:
  stt = ShapeTracker.from_shape((2, 3, 4)).permute((1, 0, 2)).reshape((6, 4))
  assert len(stt.views) == 2
  back = stt.reshape((3, 2, 4)).simplify()
  assert len(back.views) == 1 and back.views[0] == ShapeTracker.from_shape((2, 3, 4)).permute((1, 0, 2)).views[0]

# ***** View basics *****

def test_view_create_normalizes() -> None:
  v = View.create((3, 1, 4))
  assert v.strides == (4, 0, 1) and v.contiguous and v.mask is None
  assert View.create((3, 4), mask=((0, 3), (0, 4))).mask is None  # a full mask is no mask
  assert View.create((3, 4), mask=((0, 3), (2, 2))).mask == ((0, 0), (0, 0))  # an empty mask is all-empty
  # a mask keeping one element of a dim pins that dim: its start moves to the offset
  v = View.create((3, 4), mask=((1, 2), (0, 4)))
  assert v.strides == (0, 1) and v.offset == 4

def test_fully_masked_view_is_never_valid() -> None:
  stt = ShapeTracker.from_shape((2, 3)).shrink(((0, 2), (1, 1))).pad(((0, 0), (1, 2)))
  assert stt.shape == (2, 3)
  for pos in itertools.product(range(2), range(3)): assert const_eval(stt, pos)[1] is False

def test_all_padding_reshaped_to_rank_0_stays_invalid() -> None:
  # regression: the one-element view inside a pad, reshaped to (), lost its empty mask and read the buffer
  stt = ShapeTracker.from_shape((2,)).pad(((1, 0),)).shrink(((0, 1),))
  for shape in ((), (1, 1), ()):
    stt = stt.reshape(shape)
    assert const_eval(stt, (0,) * len(shape))[1] is False
    assert const_eval(stt.simplify(), (0,) * len(shape))[1] is False
  assert const_eval(stt.reshape((1,)).expand((3,)), (2,))[1] is False

def test_zero_size_shapes() -> None:
  stt = ShapeTracker.from_shape((0, 3))
  assert stt.reshape((3, 0, 5)).shape == (3, 0, 5)
  assert stt.permute((1, 0)).shape == (3, 0)
  padded = stt.pad(((1, 1), (0, 0)))
  assert padded.shape == (2, 3)
  for pos in itertools.product(range(2), range(3)): assert const_eval(padded, pos)[1] is False

def test_scalar_shape() -> None:
  stt = ShapeTracker.from_shape(())
  assert stt.contiguous and stt.shape == ()
  assert const_eval(stt, ()) == (0, True)
  one = stt.reshape((1, 1)).expand((2, 3))
  for pos in itertools.product(range(2), range(3)): assert const_eval(one, pos) == (0, True)

def test_real_strides() -> None:
  assert ShapeTracker.from_shape((3, 4)).real_strides() == (4, 1)
  assert ShapeTracker.from_shape((3, 4)).pad(((1, 0), (0, 0))).real_strides() == (None, 1)
  assert ShapeTracker.from_shape((2, 2, 6)).permute((1, 0, 2)).reshape((2, 12)).real_strides() == (None, None)

def test_apply_by_op() -> None:
  stt = ShapeTracker.from_shape((2, 3))
  assert stt.apply(Ops.PERMUTE, (1, 0)) == stt.permute((1, 0))
  assert stt.apply(Ops.RESHAPE, (6,)) == stt.reshape((6,))

def test_reshape_size_mismatch_raises() -> None:
  with pytest.raises(ValueError):
    ShapeTracker.from_shape((2, 3)).reshape((4, 2))
  with pytest.raises(ValueError):
    ShapeTracker.from_shape((2, 3)).permute((1, 0)).reshape((7,))

def test_index_math_is_int32() -> None:
  stt = ShapeTracker.from_shape((3, 4)).pad(((1, 0), (0, 0)))
  idx, valid = stt.to_indexed([Variable("i", 0, 3), Variable("j", 0, 3)])
  assert idx.dtype is dtypes.int32 and valid.dtype is dtypes.bool

def test_pad_of_a_one_row_dim_then_flatten_is_one_view() -> None:
  # the padded dim keeps one valid row, so create() pinned its stride to 0; reshape must still merge it
  stt = ShapeTracker.from_shape((1, 4)).pad(((1, 1), (0, 0))).reshape((12,))
  assert len(stt.views) == 1 and stt.views[0].mask == ((4, 8),)
  stt = ShapeTracker.from_shape((2, 4)).shrink(((1, 2), (0, 4))).pad(((2, 0), (0, 0))).reshape((12,))
  assert len(stt.views) == 1 and stt.views[0].mask == ((8, 12),)
  _, want = run_chain((2, 4), [("shrink", ((1, 2), (0, 4))), ("pad", ((2, 0), (0, 0))), ("reshape", (12,))])
  check_against_numpy(stt, want)
