"""X[idx] with tensor indices as gathers: values against NumPy on every device, gradients against torch, and proof that
codegen's pm_gather_fold turned the one-hot reduction into one load per output element (no loop over X's rows)."""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
import torch
from helpers import compare
from attograd import Tensor, dtypes, GlobalCounters
from attograd.device import Device
from attograd.schedule import create_schedule
from attograd.uop.ops import Ops

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)

def _np_index(x: np.ndarray, index: Any) -> np.ndarray:
  """NumPy's answer, with an index past the end (either sign) reading zeros, as X[idx] always has."""
  idx = index if isinstance(index, tuple) else (index,)
  arrs = [i for i in idx if isinstance(i, np.ndarray)]
  dims = [d for d, i in enumerate(idx) if isinstance(i, np.ndarray)]
  ok = np.ones(np.broadcast_shapes(*[a.shape for a in arrs]), dtype=bool)
  fixed = list(idx)
  for d, a in zip(dims, arrs):
    n = x.shape[d]
    good = (a >= -n) & (a < n)
    ok &= np.broadcast_to(good, ok.shape)
    fixed[d] = np.where(good, a, 0)
  out = x[tuple(fixed)]
  consecutive = dims == list(range(dims[0], dims[0] + len(dims)))
  # where the broadcast index dims sit in the result: in place of the indexed dims, or first
  lead = dims[0] if consecutive else 0
  mask = ok.reshape((1,) * lead + ok.shape + (1,) * (out.ndim - lead - ok.ndim))
  return np.where(mask, out, np.zeros((), dtype=out.dtype))

CASES = [
  P("1d", (10, 4), np.array([3, 0, 9, 3])),
  P("1d_neg", (10, 4), np.array([-1, -10, 2])),
  P("2d_index", (7, 3), np.array([[0, 6], [5, -2], [1, 1]])),
  P("3d_index", (6, 2), np.array([[[0, 1], [2, 3]], [[5, 4], [-1, -6]]])),
  P("3d_x", (5, 3, 4), np.array([4, 0, -3])),
  P("second_dim", (3, 8, 2), (slice(None), np.array([7, 0, -8, 3]))),
  P("two_tensors", (5, 6), (np.array([0, 4, -1]), np.array([5, -6, 2]))),
  P("two_tensors_bcast", (4, 5, 3), (np.array([[0], [3]]), np.array([1, 4, -1]))),
  P("apart", (4, 3, 5), (np.array([1, -1]), slice(None), np.array([0, 4]))),
  P("out_of_range", (6, 2), np.array([6, -7, 100, -100, 2])),
  P("scalar_x_rows", (9,), np.array([8, 0, -9, 4])),
]

@pytest.mark.parametrize("shape,index", CASES)
def test_gather_values(device: str, shape: tuple[int, ...], index: Any) -> None:
  x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  t_index = tuple(Tensor(i) if isinstance(i, np.ndarray) else i for i in index) if isinstance(index, tuple) \
    else Tensor(index)
  compare(Tensor(x)[t_index], _np_index(x, index), exact_dtype=True)

X_DTYPES = [np.float32, np.float16, np.int32, np.int64, np.uint8, np.int8, np.bool_]
@pytest.mark.parametrize("dtype", X_DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather_x_dtypes(device: str, dtype: Any) -> None:
  rng = np.random.default_rng(1)
  x = (rng.integers(0, 2, (9, 5)) if dtype is np.bool_ else rng.integers(-100, 100, (9, 5))).astype(dtype)
  if dtype is np.uint8: x = rng.integers(0, 256, (9, 5)).astype(np.uint8)
  index = np.array([[8, 0], [-1, 4], [9, -10]])  # the last row: both out of range, zeros
  compare(Tensor(x)[Tensor(index)], _np_index(x, index), exact_dtype=True)

IDX_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16]
@pytest.mark.parametrize("dtype", IDX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_gather_index_dtypes(device: str, dtype: Any) -> None:
  x = np.arange(24, dtype=np.float32).reshape(12, 2)
  index = np.array([11, 0, 5, 7], dtype=dtype)
  compare(Tensor(x)[Tensor(index)], x[index], exact_dtype=True)
  if np.issubdtype(dtype, np.signedinteger):
    index = np.array([-12, -1, 3], dtype=dtype)
    compare(Tensor(x)[Tensor(index)], x[index], exact_dtype=True)

def test_gather_bool_mask_index(device: str) -> None:
  x = np.arange(12, dtype=np.int32).reshape(4, 3)
  mask = np.array([True, False, True, True])
  compare(Tensor(x)[Tensor(mask)], x[mask], exact_dtype=True)

@pytest.mark.parametrize("shape,index", [P("1d_repeats", (8, 3), np.array([2, 2, -1, 5, 2])),
                                         P("2d_index", (6, 4), np.array([[0, 5], [5, 5]])),
                                         P("two_tensors", (5, 4), (np.array([0, 4, 4]), np.array([3, 3, -1])))])
def test_gather_gradient(device: str, shape: tuple[int, ...], index: Any) -> None:
  """The gradient of a gather is a scatter-add (repeated rows add up): against torch."""
  rng = np.random.default_rng(2)
  x = rng.standard_normal(shape).astype(np.float32)
  tup = index if isinstance(index, tuple) else (index,)
  tx = Tensor(x, requires_grad=True)
  out = tx[tuple(Tensor(i) for i in tup)]
  w = rng.standard_normal(out.shape).astype(np.float32)
  (out * Tensor(w)).sum().backward()
  px = torch.tensor(x, requires_grad=True)
  (px[tuple(torch.tensor(i) for i in tup)] * torch.tensor(w)).sum().backward()
  assert tx.grad is not None and px.grad is not None
  np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-5, atol=1e-6)

# ***** the fold happened *****

def _gather_kernel_uops(y: Tensor, device: str) -> list[Any]:
  from attograd.codegen import _build_program
  items, _ = create_schedule([y.uop])
  ast = items[-1].ast
  return list(_build_program(ast, Device[device].renderer).uops)

def _loop_sizes(uops: list[Any]) -> list[int]:
  return [u.src[0].arg for u in uops if u.op is Ops.RANGE and u.src[0].op is Ops.CONST]

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.uint8, dtypes.bool], ids=str)
def test_gather_kernel_has_no_row_loop(device: str, dtype: Any) -> None:
  """X[idx] over 4096 rows: the gather kernel's only loops (if any) are over its 15 outputs, and the rows are read by
  loaded index. On GPUs the reduce axis is not split across a work-group either (no local memory, no partial loop)."""
  x = Tensor.ones(4096, 5, dtype=dtype).contiguous().realize()
  idx = Tensor([4095, 0, 17]).realize()
  uops = _gather_kernel_uops(x[idx], device)
  sizes = _loop_sizes(uops)
  assert all(n <= 15 for n in sizes), sizes
  assert not any(u.op is Ops.DEFINE_LOCAL for u in uops)
  assert any(u.op is Ops.LOAD and len(u.src) == 3 for u in uops)  # the row load, gated by 0 <= idx < 4096

@pytest.mark.parametrize("dtype", [dtypes.int64, dtypes.int32, dtypes.int8, dtypes.uint32], ids=str)
def test_embedding_folds(device: str, dtype: Any) -> None:
  """nn.Embedding's one_hot.cast(float) @ table folds the same way (the one-hot times a value), for index dtypes wider
  and narrower than the kernel's index math; an index outside the table gives a row of zeros."""
  from attograd import nn
  emb = nn.Embedding(300, 4)
  hi = 100 if dtype is dtypes.int8 else 300  # the last index is out of range (or negative) either way
  idx = Tensor([[1, 299 if hi == 300 else 99, 7], [0, 2, hi if hi == 300 else -3]], dtype=dtype)
  y = emb(idx)
  assert all(n < 300 for n in _loop_sizes(_gather_kernel_uops(y, device)))
  w, i = emb.weight.numpy(), idx.numpy().astype(np.int64)
  want = np.where(((i >= 0) & (i < 300))[..., None], w[np.clip(i, 0, 299)], 0)
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)

def test_gather_ops_count_mnist_sized() -> None:
  """beautiful_mnist's X_train[samples]: 512 rows of a 60000x784 table cost O(512*784) ops, not O(512*60000*784)."""
  if Device.DEFAULT != "CPU": pytest.skip("CPU only: large sizes")
  x = Tensor.arange(60000, dtype=dtypes.float32).reshape(60000, 1).expand(60000, 784).contiguous().realize()
  samples = Tensor.randint(512, high=60000).realize()
  GlobalCounters.reset()
  y = x[samples].realize()
  assert GlobalCounters.global_ops <= 4 * 512 * 784, GlobalCounters.global_ops
  np.testing.assert_equal(y.numpy()[:, 0], samples.numpy().astype(np.float32))
  np.testing.assert_equal(y.numpy()[:, -1], samples.numpy().astype(np.float32))

def test_gather_big_index_dtype_still_folds() -> None:
  """A gather whose loop space passes 2**31 indexes in int64 while the arange halves are int32: still one load."""
  if Device.DEFAULT != "CPU": pytest.skip("CPU only: large sizes")
  x = Tensor.empty(70000, 784, dtype=dtypes.uint8)
  uops = _gather_kernel_uops(x[Tensor.randint(512, high=70000).realize()], "CPU")
  assert 70000 not in (sizes := _loop_sizes(uops)), sizes

def test_assign_to_arange_leaves_other_aranges(device: str) -> None:
  """Tensor.arange(n) is a buffer shared by every arange of that size (kernels compute it rather than read it): an
  assign to one rebinds that tensor instead of writing the shared buffer, which turned every later arange(5) into 9s."""
  a = Tensor.arange(5)
  a.assign(Tensor([9, 9, 9, 9, 9]))
  np.testing.assert_equal(a.numpy(), [9] * 5)
  np.testing.assert_equal(Tensor.arange(5).numpy(), np.arange(5))
  np.testing.assert_equal((Tensor.arange(5) + 1).numpy(), np.arange(5) + 1)
