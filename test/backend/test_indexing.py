"""Indexing against NumPy: basic and advanced __getitem__, __setitem__, masked_select/masked_fill, gather, scatter."""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest
from helpers import compare, helper_test_op
from attograd import Tensor, dtypes

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)

# ***** basic indexing: ints, slices, None, Ellipsis *****

# each index works unchanged on a numpy array and a Tensor
BASIC = [
  P("int", (4, 5), 1), P("neg_int", (4, 5), -1), P("two_ints", (4, 5), (1, 2)), P("neg_ints", (4, 5), (-1, -5)),
  P("int_3d", (2, 3, 4), (1, 0)), P("all_ints_3d", (2, 3, 4), (1, 2, 3)), P("1d_int", (6,), 3),
  P("slice", (6, 4), slice(1, 3)), P("slice_open_end", (6, 4), slice(2, None)),
  P("slice_open_start", (6, 4), slice(None, 4)), P("slice_full", (6, 4), slice(None)),
  P("step", (7, 4), slice(None, None, 2)), P("step3_offset", (7, 4), slice(1, None, 3)),
  P("neg_step", (6, 4), slice(None, None, -1)), P("neg_step2", (7, 4), slice(None, None, -2)),
  P("neg_step_range", (7, 4), slice(5, 1, -2)), P("neg_start", (6, 4), slice(-3, None)),
  P("neg_stop", (6, 4), slice(None, -2)), P("neg_both", (6, 4), slice(-4, -1)),
  P("clamped", (6, 4), slice(1, 100)), P("clamped_neg", (6, 4), slice(-100, 2)),
  P("empty_slice", (6, 4), slice(4, 2)), P("empty_neg_step", (6, 4), slice(1, 4, -1)),
  P("2d_slices", (6, 5), (slice(1, 5, 2), slice(None, None, -2))), P("col", (4, 5), (slice(None), 2)),
  P("row_slice", (4, 5), (2, slice(1, 4))), P("step_bigger_than_dim", (3, 4), slice(None, None, 5)),
  P("none_front", (3, 4), None), P("none_mid", (3, 4), (slice(None), None)), P("none_end", (3, 4), (..., None)),
  P("none_many", (3, 4), (None, 1, None, slice(None), None)), P("ellipsis", (2, 3, 4), ...),
  P("ellipsis_int", (2, 3, 4), (..., 1)), P("int_ellipsis", (2, 3, 4), (1, ...)),
  P("ellipsis_mid", (2, 3, 4), (0, ..., 2)), P("ellipsis_slice", (2, 3, 4), (..., slice(None, None, 2))),
  P("ellipsis_none", (2, 3, 4), (None, ..., None)), P("ellipsis_empty", (2, 3), (0, 1, ...)),
  P("scalar_none", (), None), P("scalar_ellipsis", (), ...), P("scalar_empty_tuple", (), ()),
  P("empty_dim", (0, 3), (slice(None), 1)), P("empty_result_int", (3, 0), 1),
  P("1d_all_neg", (5,), slice(-1, -6, -1)),
]
@pytest.mark.parametrize("shape,index", BASIC)
def test_basic_getitem(device: str, shape: tuple, index: Any) -> None:
  helper_test_op([shape], lambda x: x[index], lambda t: t[index])

@pytest.mark.parametrize("dtype", [np.int32, np.bool_, np.float16, np.uint8, np.int64], ids=lambda d: np.dtype(d).name)
def test_getitem_dtypes(device: str, dtype: Any) -> None:
  helper_test_op([(5, 4)], lambda x: x[1:4:2, ::-1], lambda t: t[1:4:2, ::-1], dtype=dtype)
  helper_test_op([(5, 4)], lambda x: x[-1, None], lambda t: t[-1, None], dtype=dtype)

def test_getitem_of_views(device: str) -> None:
  helper_test_op([(4, 6)], lambda x: x.T[1:, ::2], lambda t: t.permute(1, 0)[1:, ::2])
  helper_test_op([(4, 6)], lambda x: x[::-1][1:3, 2], lambda t: t.flip(0)[1:3, 2])
  helper_test_op([(4, 1)], lambda x: np.broadcast_to(x, (4, 5))[::2, 3], lambda t: t.expand(4, 5)[::2, 3])
  helper_test_op([(3, 4)], lambda x: (x * 2)[1][::-1], lambda t: (t * 2)[1][::-1])
  helper_test_op([(2, 3, 4)], lambda x: x[1][2][3], lambda t: t[1][2][3])

def test_out_of_bounds_index_names_its_dim(device: str) -> None:
  # getitem and setitem read basic indices the same way: the dim counted in x, not in x with the int-indexed dims
  # already gone (getitem said dim 1 here)
  x = Tensor.zeros(2, 3, 4, device=device).contiguous()
  for fn in (lambda: x[0, 1, 4], lambda: x.__setitem__((0, 1, 4), 1.0)):
    with pytest.raises(IndexError, match="index 4 is out of bounds for dim 2 with size 4"): fn()

def test_getitem_returns_scalar_tensor(device: str) -> None:
  t = Tensor([[1, 2], [3, 4]])
  assert t[1, 0].shape == () and t[1, 0].item() == 3
  assert isinstance(t[0], Tensor)

# ***** advanced (fancy) indexing with integer tensors *****

# (name, input shape, index built from numpy arrays; arrays turn into Tensors for attograd)
A = np.array
FANCY = [
  P("1d", (5, 3), (A([0, 2, 4]),)), P("repeat", (5, 3), (A([1, 1, 0]),)), P("neg", (5, 3), (A([-1, 0, -5]),)),
  P("2d_index", (5, 3), (A([[0, 1], [2, 0]]),)), P("scalar_index", (5, 3), (A(2),)),
  P("two_tensors", (4, 5), (A([0, 2, 3]), A([1, 4, 0]))),
  P("broadcast_pair", (4, 5), (A([[0], [2]]), A([1, 3, 4]))),
  P("tensor_after_slice", (4, 5), (slice(None), A([0, 4, 2]))),
  P("tensor_slice_tensor", (3, 4, 5), (A([0, 2]), slice(None), A([1, 3]))),
  P("tensor_int", (4, 5), (A([0, 3]), 2)), P("int_tensor", (4, 5), (1, A([0, 3, 3]))),
  P("tensor_none", (4, 5), (A([1, 2]), None)), P("ellipsis_tensor", (2, 3, 4), (..., A([0, 3]))),
  P("slice_step_tensor", (6, 5), (slice(None, None, 2), A([4, 0]))),
  P("adjacent_middle", (2, 3, 4), (slice(None), A([2, 0]), A([1, 3]))),
  P("empty_index", (4, 5), (A([], dtype=np.int32),)),
  P("3d_all", (2, 3, 4), (A([1, 0]), A([2, 1]), A([3, 0]))),
]
def _to_tensors(index: tuple) -> tuple:
  return tuple(Tensor(i.astype(np.int32)) if isinstance(i, np.ndarray) else i for i in index)

@pytest.mark.parametrize("shape,index", FANCY)
def test_fancy_getitem(device: str, shape: tuple, index: tuple) -> None:
  helper_test_op([shape], lambda x: x[index], lambda t: t[_to_tensors(index)])

def test_fancy_getitem_list_and_int64(device: str) -> None:
  helper_test_op([(5, 3)], lambda x: x[[0, 2, 2]], lambda t: t[[0, 2, 2]])
  helper_test_op([(5, 3)], lambda x: x[A([4, 1])], lambda t: t[Tensor(A([4, 1], np.int64))])
  helper_test_op([(5, 3)], lambda x: x[:, [2, 0]], lambda t: t[:, [2, 0]])

def test_fancy_getitem_of_view_and_lazy_index(device: str) -> None:
  idx = A([2, 0, 1])
  helper_test_op([(3, 4)], lambda x: x.T[idx], lambda t: t.T[Tensor(idx.astype(np.int32))])
  helper_test_op([(3, 4)], lambda x: x[(idx + 1) % 3], lambda t: t[(Tensor(idx.astype(np.int32)) + 1) % 3])

# ***** masks *****

@pytest.mark.parametrize("shape,mask_shape", [P("same", (3, 4), (3, 4)), P("1d", (7,), (7,)),
                                              P("broadcast", (3, 4), (4,)), P("empty", (0, 2), (0, 2))])
def test_masked_select(device: str, shape: tuple, mask_shape: tuple) -> None:
  def np_fn(x: np.ndarray, m: np.ndarray) -> np.ndarray: return x[np.broadcast_to(m, x.shape)]
  helper_test_op([shape, mask_shape], np_fn, lambda x, m: x.masked_select(m), dtype=[np.float32, np.bool_])

def test_masked_select_all_or_nothing(device: str) -> None:
  t = Tensor([1.0, 2.0, 3.0])
  assert t.masked_select(Tensor([False, False, False])).shape == (0,)
  assert t.masked_select(Tensor([True, True, True])).tolist() == [1.0, 2.0, 3.0]

MASKED_FILL = [P("scalar", [(3, 4), (3, 4)], lambda x, m: np.where(m, -1.5, x), lambda x, m: x.masked_fill(m, -1.5)),
               P("broadcast_mask", [(3, 4), (3, 1)], lambda x, m: np.where(m, 0.0, x),
                 lambda x, m: x.masked_fill(m, 0.0)),
               P("inf", [(2, 5), (5,)], lambda x, m: np.where(m, -np.inf, x),
                 lambda x, m: x.masked_fill(m, -float("inf"))),
               P("tensor_value", [(3, 4), (3, 4), ()], lambda x, m, v: np.where(m, v, x),
                 lambda x, m, v: x.masked_fill(m, v))]
@pytest.mark.parametrize("shapes,np_fn,att_fn", MASKED_FILL)
def test_masked_fill(device: str, shapes: list, np_fn: Callable, att_fn: Callable) -> None:
  helper_test_op(shapes, np_fn, att_fn, dtype=[np.float32, np.bool_, np.float32][:len(shapes)])

def test_masked_fill_int(device: str) -> None:
  helper_test_op([(3, 4), (3, 4)], lambda x, m: np.where(m, 7, x), lambda x, m: x.masked_fill(m, 7),
                 dtype=[np.int32, np.bool_])

def test_boolean_mask_via_where_and_comparison(device: str) -> None:
  helper_test_op([(4, 5)], lambda x: np.where(x > 0, x, 0), lambda t: (t > 0).where(t, 0))
  helper_test_op([(4, 5)], lambda x: (x > 0).sum(1), lambda t: (t > 0).sum(1))

# ***** __setitem__ *****

# (name, shape, index, value): value is a Python scalar or a numpy array (turned into a Tensor for attograd)
SETITEM = [
  P("int_scalar", (4, 5), 1, 3.0), P("neg_int", (4, 5), -1, -2.0), P("two_ints", (4, 5), (2, 3), 9.0),
  P("slice_scalar", (4, 5), slice(1, 3), 7.0), P("neg_step", (6,), slice(None, None, -2), 1.0),
  P("step_slices", (4, 5), (slice(None, None, 2), slice(1, None, 2)), 5.0),
  P("col_tensor", (4, 5), (slice(None), 2), A([1.0, 2.0, 3.0, 4.0])),
  P("row_tensor", (4, 5), 0, A([1.0, 2.0, 3.0, 4.0, 5.0])), P("broadcast_row", (4, 5), slice(1, 3), A([1.0] * 5)),
  P("block_tensor", (4, 5), (slice(1, 3), slice(0, 2)), A([[1.0, 2.0], [3.0, 4.0]])),
  P("ellipsis", (2, 3), ..., 0.5), P("ellipsis_last", (2, 3, 4), (..., 1), 8.0),
  P("all", (3, 3), slice(None), A([[1.0] * 3] * 3)), P("int_value", (3,), 0, 4),
  P("scalar_tensor_value", (3, 3), (1, 1), A(6.0)),
]
@pytest.mark.parametrize("shape,index,value", SETITEM)
def test_setitem(device: str, shape: tuple, index: Any, value: Any) -> None:
  x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
  t = Tensor(x.copy())
  x[index] = value
  t[index] = Tensor(value.astype(np.float32)) if isinstance(value, np.ndarray) else value
  compare(t, x, exact_dtype=True)

def test_setitem_int_tensor(device: str) -> None:
  x = np.zeros((3, 4), np.int32)
  t = Tensor(x.copy())
  x[1:, ::3] = 5
  t[1:, ::3] = 5
  x[0] = np.array([1, 2, 3, 4])
  t[0] = Tensor([1, 2, 3, 4])
  compare(t, x, exact_dtype=True)

def test_setitem_repeated_and_read_between(device: str) -> None:
  t = Tensor.zeros(3, 3).contiguous().realize()
  t[0, 0] = 1.0
  first = t.sum().item()
  t[1, 1] = 2.0
  t[2] = Tensor([3.0, 3.0, 3.0])
  assert first == 1.0
  assert t.tolist() == [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [3.0, 3.0, 3.0]]

def test_setitem_keeps_aliases(device: str) -> None:
  t = Tensor([1.0, 2.0, 3.0]).realize()
  alias = t
  t[1] = 9.0
  assert alias.tolist() == [1.0, 9.0, 3.0]

def test_setitem_value_is_cast(device: str) -> None:
  t = Tensor([1, 2, 3])
  t[0] = 7.9  # a Python float into int32: the tensor keeps its dtype
  assert t.dtype == dtypes.int32 and t.tolist()[1:] == [2, 3] and t.tolist()[0] in (7, 8)
  # a float tensor into int32 must be cast explicitly (tinygrad's rule; PyTorch casts silently)
  with pytest.raises(RuntimeError, match="setitem: the value's dtype dtypes.float differs"):
    t[0] = Tensor([7.9]).reshape(())
  t[0] = Tensor([7.9]).reshape(()).cast(dtypes.int32)
  assert t.tolist() == [7, 2, 3]

# ***** gather *****

def _np_gather(x: np.ndarray, dim: int, idx: np.ndarray) -> np.ndarray:
  """torch/tinygrad gather: out[i][j] = x[idx[i][j]][j] (dim=0); idx may be smaller than x in the other dims."""
  sl = tuple(slice(0, s) if d != dim % x.ndim else slice(None) for d, s in enumerate(idx.shape))
  return np.take_along_axis(x[sl], idx, axis=dim)

GATHER = [
  P("dim0", (4, 3), 0, A([[0, 1, 3], [3, 2, 0]])), P("dim1", (4, 3), 1, A([[0, 0], [2, 1], [1, 2], [0, 2]])),
  P("neg_dim", (4, 3), -1, A([[2], [0], [1], [1]])), P("smaller", (4, 5), 1, A([[4, 0], [1, 1]])),
  P("1d", (6,), 0, A([5, 0, 5, 2])), P("3d", (2, 3, 4), 2, A([[[0, 3], [1, 2], [3, 3]], [[0, 0], [2, 1], [1, 3]]])),
  P("3d_mid", (2, 3, 4), 1, A([[[0, 1, 2, 0]], [[2, 2, 1, 0]]])), P("empty", (3, 4), 1, np.zeros((3, 0), np.int64)),
]
@pytest.mark.parametrize("shape,dim,idx", GATHER)
def test_gather(device: str, shape: tuple, dim: int, idx: np.ndarray) -> None:
  helper_test_op([shape], lambda x: _np_gather(x, dim, idx), lambda t: t.gather(dim, Tensor(idx.astype(np.int32))))

@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.bool_], ids=lambda d: np.dtype(d).name)
def test_gather_dtypes_and_views(device: str, dtype: Any) -> None:
  idx = A([[1, 0, 2], [2, 2, 0]])
  helper_test_op([(3, 3)], lambda x: _np_gather(x.T, 0, idx), lambda t: t.T.gather(0, Tensor(idx.astype(np.int32))),
                 dtype=dtype)

# ***** scatter *****

def _np_scatter(x: np.ndarray, dim: int, idx: np.ndarray, src: Any, reduce: str | None = None) -> np.ndarray:
  """torch scatter: out[idx[i][j]][j] = src[i][j] (dim=0), loops in index order so duplicates reduce in order."""
  out = x.copy()
  for pos in np.ndindex(*idx.shape):
    tgt = list(pos)
    tgt[dim] = idx[pos]
    v = src[pos] if isinstance(src, np.ndarray) else src
    if reduce is None: out[tuple(tgt)] = v
    elif reduce == "add": out[tuple(tgt)] += v
    elif reduce == "multiply": out[tuple(tgt)] *= v
  return out

# (name, input shape, dim, index, src shape or scalar, reduce); no duplicate indices without a reduce (undefined)
SCATTER = [
  P("dim0", (3, 4), 0, A([[0, 1, 2, 0], [2, 0, 1, 1]]), (2, 4), None),
  P("dim1", (3, 4), 1, A([[3, 0], [1, 2], [0, 3]]), (3, 2), None),
  P("neg_dim", (3, 4), -1, A([[2], [1], [0]]), (3, 1), None),
  P("src_bigger", (3, 4), 0, A([[1, 2]]), (2, 3), None),
  P("scalar_src", (3, 4), 1, A([[0, 2], [1, 3], [3, 0]]), 9.5, None),
  P("1d", (6,), 0, A([5, 1, 3]), (3,), None),
  P("add", (3, 4), 0, A([[0, 0, 1, 2], [0, 2, 1, 2]]), (2, 4), "add"),
  P("multiply", (3, 4), 1, A([[0, 0], [3, 3], [1, 2]]), (3, 2), "multiply"),
  P("add_scalar", (2, 3), 1, A([[0, 0, 0], [2, 1, 2]]), 1.0, "add"),
  P("3d", (2, 3, 2), 1, A([[[2, 0]], [[1, 1]]]), (2, 1, 2), None),
]
@pytest.mark.parametrize("shape,dim,idx,src,reduce", SCATTER)
def test_scatter(device: str, shape: tuple, dim: int, idx: np.ndarray, src: Any, reduce: str | None) -> None:
  rng = np.random.default_rng(0)
  x = rng.uniform(-2, 2, shape).astype(np.float32)
  s = rng.uniform(-2, 2, src).astype(np.float32) if isinstance(src, tuple) else src
  want = _np_scatter(x, dim % len(shape), idx, s, reduce)
  ts = Tensor(s) if isinstance(s, np.ndarray) else s
  kw = {} if reduce is None else {"reduce": reduce}
  ti = Tensor(idx.astype(np.int32))
  if reduce is not None and isinstance(ts, Tensor):  # tinygrad's rule: a Tensor src combines through scatter_reduce
    with pytest.raises(TypeError, match="scatter_reduce"): Tensor(x).scatter(dim, ti, ts, **kw)
    got = Tensor(x).scatter_reduce(dim, ti, ts, reduce="sum" if reduce == "add" else "prod")
  else: got = Tensor(x).scatter(dim, ti, ts, **kw)
  compare(got, want, atol=1e-5, exact_dtype=True)

def test_scatter_int(device: str) -> None:
  x = np.zeros((2, 3), np.int32)
  idx = A([[2, 0], [1, 2]])
  src = A([[5, 6], [7, 8]], np.int32)
  compare(Tensor(x).scatter(1, Tensor(idx.astype(np.int32)), Tensor(src)), _np_scatter(x, 1, idx, src),
          exact_dtype=True)
  compare(Tensor(x).scatter_reduce(1, Tensor(idx.astype(np.int32)), Tensor(src), reduce="sum"),
          _np_scatter(x, 1, idx, src, "add"), exact_dtype=True)
  # the TypeError comes before any shape check (a 1-d tensor has no dim 1)
  with pytest.raises(TypeError, match="scatter_reduce"): Tensor.ones(4).scatter(1, Tensor([0]), Tensor.ones(4), "add")

def test_scatter_does_not_modify_input(device: str) -> None:
  t = Tensor([[1.0, 2.0], [3.0, 4.0]])
  out = t.scatter(0, Tensor([[1, 0]]), 0.0)
  assert out.tolist() == [[1.0, 0.0], [0.0, 4.0]]
  assert t.tolist() == [[1.0, 2.0], [3.0, 4.0]]

# ***** bigger indexing on CPU *****

def test_fancy_big_cpu(device: str) -> None:
  if device != "CPU": pytest.skip("CPU only: large sizes")
  rng = np.random.default_rng(0)
  idx = rng.integers(0, 300, 500)
  helper_test_op([(300, 16)], lambda x: x[idx], lambda t: t[Tensor(idx.astype(np.int32))])
  helper_test_op([(300, 16)], lambda x: x[::7, ::-3], lambda t: t[::7, ::-3])
