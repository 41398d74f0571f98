"""tinygrad 0.14's Tensor API, part 2: cummax/cummin with indices, logcumsumexp, diag, diagonal, unfold, meshgrid,
rearrange, scatter_reduce, max_pool2d(return_indices=True), max_unpool2d, qr and svd, vs PyTorch (NumPy for the
factorizations), forward and backward, with the errors they give for bad input."""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest
from attograd import Tensor, Variable, dtypes

torch = pytest.importorskip("torch")
F = torch.nn.functional

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)

def _np(x: Any) -> np.ndarray: return x.detach().numpy() if isinstance(x, torch.Tensor) else x.numpy()

def check_fwd_bwd(x: np.ndarray, att_fn: Callable, torch_fn: Callable, grad: bool = True, rtol: float = 1e-5,
                  atol: float = 1e-6) -> None:
  """att_fn(Tensor(x)) vs torch_fn(torch.tensor(x)), and the gradients of the sum of each output times fixed
  weights (so an op whose outputs sum to a constant still gets a gradient to compare)."""
  t = Tensor(x, requires_grad=grad)
  tt = torch.tensor(x, requires_grad=grad)
  outs, touts = att_fn(t), torch_fn(tt)
  if not isinstance(outs, tuple): outs, touts = (outs,), (touts,)
  assert len(outs) == len(touts)
  for o, to in zip(outs, touts):
    assert o.shape == tuple(to.shape), f"shape {o.shape} != torch's {tuple(to.shape)}"
    np.testing.assert_allclose(_np(o), _np(to), rtol=rtol, atol=atol)
  # an empty output has no gradient to compare (attograd leaves .grad None there, PyTorch gives zeros)
  if not grad or all(o.numel() == 0 for o in outs): return
  loss, tloss = None, None
  for o, to in zip(outs, touts):
    if not dtypes.is_float(o.dtype): continue
    w = np.random.default_rng(1).uniform(0.5, 1.5, o.shape).astype(np.float32)
    term, tterm = (o * Tensor(w)).sum(), (to * torch.tensor(w)).sum()
    loss, tloss = (term, tterm) if loss is None else (loss + term, tloss + tterm)
  assert loss is not None and tloss is not None
  loss.backward()
  tloss.backward()
  np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=rtol, atol=atol)  # type: ignore[union-attr]

RNG = np.random.default_rng(0)
A34 = RNG.standard_normal((3, 4)).astype(np.float32)
A234 = RNG.standard_normal((2, 3, 4)).astype(np.float32)

# ***** cummax, cummin, logcumsumexp *****

TIES = np.array([[3.0, 1.0, 3.0, 2.0, 5.0, 5.0], [-1.0, -1.0, 0.0, -2.0, 0.0, 4.0]], dtype=np.float32)

@pytest.mark.parametrize("name", ["cummax", "cummin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cummax_cummin(device: str, name: str, axis: int) -> None:
  # ties get the latest index and the gradient goes to that element only, as in PyTorch
  for x in (A34, TIES):
    check_fwd_bwd(x, lambda t: getattr(t, name)(axis), lambda t: tuple(getattr(torch, name)(t, axis)))

@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int8, np.bool_, np.float16])
@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_cummax_cummin_dtypes(device: str, name: str, dtype: Any) -> None:
  x = np.array([[3, 1, 3, 0, 7, 2], [0, 2, 2, 1, 0, 9]]).astype(dtype)
  if dtype == np.int8: x[0, 3] = -128
  v, i = getattr(Tensor(x), name)(1)
  tv, ti = getattr(torch, name)(torch.tensor(x), 1)
  assert v.dtype == Tensor(x).dtype and i.dtype is dtypes.int32
  np.testing.assert_equal(v.numpy(), tv.numpy())
  np.testing.assert_equal(i.numpy(), ti.numpy())

def test_cummax_cummin_nan_and_edges(device: str) -> None:
  x = np.array([3.0, 1.0, np.nan, 5.0, np.nan, -np.inf, 2.0], dtype=np.float32)
  for name in ("cummax", "cummin"):
    v, i = getattr(Tensor(x), name)(0)
    tv, ti = getattr(torch, name)(torch.tensor(x), 0)
    np.testing.assert_equal(v.numpy(), tv.numpy())
    np.testing.assert_equal(i.numpy(), ti.numpy())
  v, i = Tensor(2.5).cummax(0)
  assert v.shape == () and v.item() == 2.5 and i.item() == 0
  v, i = Tensor.zeros(2, 0).cummin(1)
  assert v.shape == i.shape == (2, 0)

@pytest.mark.parametrize("axis", [0, 1])
def test_logcumsumexp(device: str, axis: int) -> None:
  check_fwd_bwd(A34 * 3, lambda t: t.logcumsumexp(axis), lambda t: torch.logcumsumexp(t, axis))
  # large values don't overflow; -inf and +inf give what PyTorch gives
  x = np.array([[1000.0, 1000.0, -np.inf, 0.0], [-np.inf, -np.inf, 5.0, np.inf]], dtype=np.float32)
  np.testing.assert_allclose(Tensor(x).logcumsumexp(1).numpy(), torch.logcumsumexp(torch.tensor(x), 1).numpy(),
                             rtol=1e-6)

def test_logcumsumexp_masked_exp_has_no_nan_gradient(device: str) -> None:
  # regression: exp(x_j - m_i) for j > i overflowed to inf where masked out, and its gradient 0 * inf was NaN
  check_fwd_bwd(np.array([0.0, 100.0], np.float32), lambda t: t.logcumsumexp(0), lambda t: torch.logcumsumexp(t, 0))

def test_logcumsumexp_dtypes(device: str) -> None:
  x = np.array([[0.5, -1.0, 2.0], [3.0, 0.0, -2.0]])
  h = Tensor(x.astype(np.float16)).logcumsumexp(1)
  assert h.dtype is dtypes.float16
  np.testing.assert_allclose(h.numpy(), torch.logcumsumexp(torch.tensor(x, dtype=torch.float32), 1).numpy(),
                             rtol=1e-3)
  i = Tensor([[1, 2, 3]]).logcumsumexp(1)  # ints compute in the default float (PyTorch refuses them)
  assert i.dtype is dtypes.float32
  np.testing.assert_allclose(i.numpy(), torch.logcumsumexp(torch.tensor([[1.0, 2.0, 3.0]]), 1).numpy(), rtol=1e-6)

# ***** diag, diagonal, unfold, meshgrid *****

@pytest.mark.parametrize("k", [0, 1, -2])
def test_diag(device: str, k: int) -> None:
  check_fwd_bwd(A34[0], lambda t: t.diag(k), lambda t: torch.diag(t, k))
  check_fwd_bwd(A34, lambda t: t.diag(k), lambda t: torch.diag(t, k))

@pytest.mark.parametrize("offset, d1, d2", [(0, 0, 1), (1, 0, 1), (-1, 1, 2), (2, 2, 0), (-2, -1, 0), (5, 0, 1)])
def test_diagonal(device: str, offset: int, d1: int, d2: int) -> None:
  check_fwd_bwd(A234, lambda t: t.diagonal(offset, d1, d2), lambda t: torch.diagonal(t, offset, d1, d2))

@pytest.mark.parametrize("dim, size, step", [(0, 2, 1), (1, 3, 1), (-1, 2, 3), (2, 4, 2), (1, 1, 5), (0, 0, 1)])
def test_unfold(device: str, dim: int, size: int, step: int) -> None:
  # overlapping windows (step < size) add up their gradients
  check_fwd_bwd(A234, lambda t: t.unfold(dim, size, step), lambda t: t.unfold(dim, size, step), grad=size > 0)

def test_unfold_0d(device: str) -> None:
  assert Tensor(3.0).unfold(0, 1, 1).tolist() == [3.0]
  assert Tensor(3.0).unfold(0, 0, 1).shape == (0,)

@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(device: str, indexing: str) -> None:
  a, b, c = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0, 5.0], np.float32), np.float32(7.0)
  ts = [Tensor(v, requires_grad=True) for v in (a, b, c)]
  tts = [torch.tensor(v, requires_grad=True) for v in (a, b, c)]
  outs, touts = Tensor.meshgrid(*ts, indexing=indexing), torch.meshgrid(*tts, indexing=indexing)
  for o, to in zip(outs, touts):
    assert o.shape == tuple(to.shape)
    np.testing.assert_equal(o.numpy(), _np(to))
  sum(o * (k + 1) for k, o in enumerate(outs)).sum().backward()
  sum(o * (k + 1) for k, o in enumerate(touts)).sum().backward()
  for t, tt in zip(ts, tts): np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy())  # type: ignore[union-attr]
  one = Tensor([1, 2]).meshgrid(indexing=indexing)
  assert len(one) == 1 and one[0].tolist() == [1, 2]

# ***** rearrange *****

# (formula, sizes, the same layout written in torch ops)
REARRANGE = [
  P("transpose", "a b c -> c a b", {}, lambda t: t.permute(2, 0, 1)),
  P("merge", "a b c -> (a b) c", {}, lambda t: t.reshape(6, 4)),
  P("merge_swapped", "a b c -> (b a) c", {}, lambda t: t.permute(1, 0, 2).reshape(6, 4)),
  P("split", "a b (h w) -> a h b w", {"h": 2}, lambda t: t.reshape(2, 3, 2, 2).permute(0, 2, 1, 3)),
  P("split_both_given", "a b (h w) -> (a w) b h", {"h": 2, "w": 2},
    lambda t: t.reshape(2, 3, 2, 2).permute(0, 3, 1, 2).reshape(4, 3, 2)),
  P("ellipsis", "a ... -> ... a", {}, lambda t: t.permute(1, 2, 0)),
  P("ellipsis_merged", "a ... -> a (...)", {}, lambda t: t.reshape(2, 12)),
  P("unit_dims", "a b c -> a 1 b () c", {}, lambda t: t.reshape(2, 1, 3, 1, 4)),
  P("unicode_ellipsis", "… c -> c …", {}, lambda t: t.permute(2, 0, 1)),
]

@pytest.mark.parametrize("formula, sizes, torch_fn", REARRANGE)
def test_rearrange(device: str, formula: str, sizes: dict, torch_fn: Callable) -> None:
  check_fwd_bwd(A234, lambda t: t.rearrange(formula, **sizes), torch_fn)

def test_rearrange_drops_unit_dim(device: str) -> None:
  x = Tensor(A234.reshape(2, 1, 3, 4))
  np.testing.assert_equal(x.rearrange("a 1 b c -> (a b) c").numpy(), A234.reshape(6, 4))

# ***** scatter_reduce *****

REDUCES = ["sum", "prod", "mean", "amax", "amin"]
IDX = np.array([[0, 2, 0, 0], [1, 1, 2, 0]])

@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_reduce(device: str, reduce: str, include_self: bool, dim: int) -> None:
  base = RNG.uniform(0.5, 2.0, (3, 5)).astype(np.float32)  # away from 0: prod's gradient divides by nothing
  src = RNG.uniform(0.5, 2.0, (2, 4)).astype(np.float32)
  idx = IDX if dim == 0 else np.array([[0, 4, 0, 4], [1, 1, 3, 0]])
  s, ts = Tensor(src, requires_grad=True), torch.tensor(src, requires_grad=True)
  check_fwd_bwd(base, lambda t: t.scatter_reduce(dim, Tensor(idx), s, reduce, include_self),
                lambda t: t.scatter_reduce(dim, torch.tensor(idx), ts, reduce, include_self=include_self))
  np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy(), rtol=1e-5, atol=1e-6)  # type: ignore[union-attr]

@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.float16])
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_dtypes(device: str, reduce: str, dtype: Any) -> None:
  # int mean rounds down, as in PyTorch (-5 / 2 is -3)
  base = np.array([[5, -3, 2, 7, 1], [0, 4, -6, 2, 3], [1, 1, 1, 1, 1]]).astype(dtype)
  src = np.array([[-2, 3, -3, 1], [-4, 2, 5, -1]]).astype(dtype)
  for include_self in (True, False):
    got = Tensor(base).scatter_reduce(0, Tensor(IDX), Tensor(src), reduce, include_self)
    want = torch.tensor(base).scatter_reduce(0, torch.tensor(IDX), torch.tensor(src), reduce, include_self=include_self)
    assert got.dtype == Tensor(base).dtype
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64), rtol=1e-3)

def test_scatter_reduce_int8_mean_counts_past_127() -> None:
  # regression: the count was int8 and wrapped (PyTorch's wraps too and gives 0 here); -100 over 131 values is -1
  src = np.zeros(130, np.int8)
  src[0] = -100
  got = Tensor(np.array([0], np.int8)).scatter_reduce(0, Tensor(np.zeros(130, np.int32)), Tensor(src), "mean")
  assert got.dtype is dtypes.int8 and got.tolist() == [-100 // 131]

def test_scatter_reduce_smaller_src_and_0d(device: str) -> None:
  # src may be larger than index: only index's shape of it is used
  src = np.arange(12, dtype=np.float32).reshape(3, 4)
  got = Tensor.ones(3, 5).scatter_reduce(1, Tensor([[0, 0], [4, 1]]), Tensor(src), "sum")
  want = torch.ones(3, 5).scatter_reduce(1, torch.tensor([[0, 0], [4, 1]]), torch.tensor(src), "sum")
  np.testing.assert_equal(got.numpy(), want.numpy())
  assert Tensor(2.0).scatter_reduce(0, Tensor(0), Tensor(3.0), "prod").item() == 6.0

# ***** max_pool2d(return_indices=True), max_unpool2d *****

POOLS = [
  P("k2", {"kernel_size": 2}),
  P("k3_s2_p1", {"kernel_size": 3, "stride": 2, "padding": 1}),
  P("k23_s1_d2", {"kernel_size": (2, 3), "stride": 1, "dilation": 2}),
  P("k3_s2_ceil", {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
]
X_POOL = RNG.standard_normal((2, 2, 7, 6)).astype(np.float32)

@pytest.mark.parametrize("kw", POOLS)
def test_max_pool2d_indices(device: str, kw: dict) -> None:
  check_fwd_bwd(X_POOL, lambda t: t.max_pool2d(**kw, return_indices=True),
                lambda t: F.max_pool2d(t, **kw, return_indices=True))

def test_max_pool2d_indices_ties_and_1d(device: str) -> None:
  # on ties the first position in the window, as in PyTorch
  x = np.array([[[[1.0, 1.0, 0.0], [1.0, 2.0, 2.0], [0.0, 2.0, 2.0]]]], dtype=np.float32)
  v, i = Tensor(x).max_pool2d(2, stride=1, return_indices=True)
  tv, ti = F.max_pool2d(torch.tensor(x), 2, stride=1, return_indices=True)
  np.testing.assert_equal(v.numpy(), tv.numpy())
  np.testing.assert_equal(i.numpy(), ti.numpy())
  x1 = X_POOL[0, :, 0]
  v, i = Tensor(x1).max_pool2d((3,), stride=2, return_indices=True)
  tv, ti = F.max_pool1d(torch.tensor(x1), 3, stride=2, return_indices=True)
  np.testing.assert_equal(i.numpy(), ti.numpy())

# (pooling arguments, an input size they map back to without output_size)
UNPOOLS = [P("k2", {"kernel_size": 2}, 6), P("k3_s2_p1", {"kernel_size": 3, "stride": 2, "padding": 1}, 5),
           P("k23", {"kernel_size": (2, 3)}, 6)]

@pytest.mark.parametrize("kw, n", UNPOOLS)
@pytest.mark.parametrize("with_size", [False, True])
def test_max_unpool2d(device: str, kw: dict, n: int, with_size: bool) -> None:
  x = X_POOL[:, :, :n, :n] if not with_size else X_POOL
  _, ti = F.max_pool2d(torch.tensor(x), **kw, return_indices=True)
  _, i = Tensor(x).max_pool2d(**kw, return_indices=True)
  size = {"output_size": x.shape[-2:]} if with_size else {}
  pooled = F.max_pool2d(torch.tensor(x), **kw).numpy()
  check_fwd_bwd(pooled, lambda t: t.max_unpool2d(i, **kw, **size), lambda t: F.max_unpool2d(t, ti, **kw, **size))

def test_max_unpool2d_repeated_index_last_wins(device: str) -> None:
  out = Tensor([[[[1.0, 2.0]]]]).max_unpool2d(Tensor([[[[3, 3]]]]), (1, 2))
  assert out.tolist() == [[[[0.0, 0.0, 0.0, 2.0]]]]

# ***** qr, svd *****

@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 3, 4)])
def test_qr(device: str, shape: tuple[int, ...]) -> None:
  a = RNG.standard_normal(shape).astype(np.float32)
  Q, R = Tensor(a).qr()
  q, r = Q.numpy(), R.numpy()
  m = shape[-2]
  np.testing.assert_allclose(q @ r, a, atol=2e-6)
  np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(m), q.shape), atol=2e-6)
  assert np.all(np.tril(r, -1) == 0)
  # LAPACK's sign convention, so Q and R are numpy's themselves
  nq, nr = np.linalg.qr(a, mode="complete")
  np.testing.assert_allclose(r, nr, atol=2e-6)
  np.testing.assert_allclose(q, nq, atol=2e-6)

def test_qr_special_columns(device: str) -> None:
  # a zero column and a column with nothing below the diagonal: no reflection, like LAPACK (R keeps the signs)
  a = np.array([[0.0, -2.0, 1.0], [0.0, 0.0, 3.0], [0.0, 0.0, 4.0]])
  Q, R = Tensor(a).qr()
  assert Q.dtype is dtypes.float64
  np.testing.assert_allclose(Q.numpy() @ R.numpy(), a, atol=1e-12)
  nq, nr = np.linalg.qr(a, mode="complete")
  np.testing.assert_allclose(R.numpy(), nr, atol=1e-12)
  q, r = Tensor([[1, 2], [3, 4]]).qr()  # ints compute in the default float
  assert q.dtype is r.dtype is dtypes.float32

@pytest.mark.parametrize("shape, full", [((4, 3), True), ((2, 3, 2), False), ((2, 4), True)])
def test_svd(device: str, shape: tuple[int, ...], full: bool) -> None:
  a = RNG.standard_normal(shape).astype(np.float32)
  U, S, Vh = Tensor(a).svd(full_matrices=full)
  u, s, vh = U.numpy(), S.numpy(), Vh.numpy()
  nu, ns, nvh = np.linalg.svd(a, full_matrices=full)
  assert u.shape == nu.shape and s.shape == ns.shape and vh.shape == nvh.shape
  np.testing.assert_allclose(s, ns, rtol=1e-5, atol=1e-6)
  k = min(shape[-2:])
  np.testing.assert_allclose((u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=3e-6)
  for m in (u, np.swapaxes(vh, -1, -2)):  # orthonormal columns
    np.testing.assert_allclose(np.swapaxes(m, -1, -2) @ m, np.broadcast_to(np.eye(m.shape[-1]), m.shape[:-2] +
                               (m.shape[-1],) * 2), atol=3e-6)
  # singular vectors agree with numpy's up to the sign of each pair (the singular values here are distinct)
  sign = np.sign(np.sum(u[..., :, :k] * nu[..., :, :k], axis=-2, keepdims=True))
  np.testing.assert_allclose(u[..., :, :k] * sign, nu[..., :, :k], atol=3e-5)

def test_svd_float64_and_rank_deficient(device: str) -> None:
  a = np.outer([1.0, 2.0, 3.0], [1.0, -1.0])  # rank 1
  U, S, Vh = Tensor(a).svd()
  assert S.dtype is dtypes.float64
  np.testing.assert_allclose(S.numpy(), np.linalg.svd(a, compute_uv=False), atol=1e-12)
  np.testing.assert_allclose((U.numpy()[:, :2] * S.numpy()) @ Vh.numpy(), a, atol=1e-12)
  # U stays orthonormal: the column for the zero singular value and the full_matrices one complete the basis
  np.testing.assert_allclose(U.numpy().T @ U.numpy(), np.eye(3), atol=1e-12)
  U, S, Vh = Tensor(np.zeros((2, 2), np.float32)).svd()
  np.testing.assert_equal(S.numpy(), [0.0, 0.0])
  np.testing.assert_allclose(U.numpy().T @ U.numpy(), np.eye(2), atol=1e-6)

# ***** errors *****

ERRORS = [
  P("cummax_axis", lambda: Tensor.ones(2, 3).cummax(2), IndexError, "cummax"),
  P("cummin_axis", lambda: Tensor.ones(2, 3).cummin(-3), IndexError, "cummin"),
  P("logcumsumexp_axis", lambda: Tensor.ones(3).logcumsumexp(1), IndexError, "logcumsumexp"),
  P("diag_3d", lambda: Tensor.ones(2, 2, 2).diag(), ValueError, "diag"),
  P("diagonal_1d", lambda: Tensor.ones(3).diagonal(), ValueError, "diagonal"),
  P("diagonal_same_dims", lambda: Tensor.ones(3, 3).diagonal(0, 1, -1), RuntimeError, "diagonal"),  # as PyTorch
  P("unfold_size", lambda: Tensor.ones(2, 3).unfold(1, 4, 1), RuntimeError, "unfold"),
  P("unfold_step", lambda: Tensor.ones(2, 3).unfold(1, 2, 0), RuntimeError, "unfold"),
  P("unfold_dim", lambda: Tensor.ones(2, 3).unfold(2, 1, 1), IndexError, "unfold"),
  P("meshgrid_2d", lambda: Tensor.meshgrid(Tensor.ones(2, 2), Tensor.ones(2)), ValueError, "meshgrid"),
  P("meshgrid_indexing", lambda: Tensor.meshgrid(Tensor.ones(2), indexing="ji"), RuntimeError, "meshgrid"),
  P("rearrange_arrow", lambda: Tensor.ones(2, 3).rearrange("a b"), ValueError, "rearrange"),
  P("rearrange_names", lambda: Tensor.ones(2, 3).rearrange("a b -> a c"), ValueError, "rearrange"),
  P("rearrange_ndim", lambda: Tensor.ones(2, 3).rearrange("a b c -> a b c"), ValueError, "rearrange"),
  P("rearrange_split", lambda: Tensor.ones(2, 6).rearrange("a (b c) -> a b c", b=4), ValueError, "rearrange"),
  P("rearrange_unknown", lambda: Tensor.ones(2, 6).rearrange("a (b c) -> a b c"), ValueError, "rearrange"),
  P("rearrange_size", lambda: Tensor.ones(2, 6).rearrange("a b -> b a", a=3), ValueError, "rearrange"),
  P("rearrange_paren", lambda: Tensor.ones(2, 6).rearrange("a (b -> a b"), ValueError, "rearrange"),
  P("rearrange_token", lambda: Tensor.ones(2, 6).rearrange("a 2 -> a"), ValueError, "rearrange"),
  P("rearrange_underscore", lambda: Tensor.ones(2).rearrange("_a -> _a"), ValueError, "rearrange"),
  P("rearrange_two_ellipses", lambda: Tensor.ones(2, 3).rearrange("... a ... -> a ... ..."), ValueError, "rearrange"),
  P("rearrange_ellipsis_group", lambda: Tensor.ones(2, 3).rearrange("(...) -> (...)"), ValueError, "rearrange"),
  P("scatter_reduce_name", lambda: Tensor.ones(3).scatter_reduce(0, Tensor([0]), Tensor([1.0]), "max"), RuntimeError,
    "scatter_reduce"),
  P("scatter_reduce_dtypes", lambda: Tensor.ones(3).half().scatter_reduce(0, Tensor([0]), Tensor([1.0]), "sum"),
    RuntimeError, "scatter_reduce"),
  P("scatter_reduce_index", lambda: Tensor.ones(3).scatter_reduce(0, Tensor([0.0]), Tensor([1.0]), "sum"), TypeError,
    "scatter_reduce"),
  P("scatter_reduce_src", lambda: Tensor.ones(3, 2).scatter_reduce(0, Tensor([[0, 1]]), Tensor([[1.0]]), "sum"),
    ValueError, "scatter_reduce"),
  P("scatter_reduce_bool", lambda: Tensor([True]).scatter_reduce(0, Tensor([0]), Tensor([False]), "mean"), TypeError,
    "scatter_reduce"),
  P("max_pool2d_indices_ndim", lambda: Tensor.ones(3).max_pool2d(2, return_indices=True), ValueError, "max_pool2d"),
  P("max_unpool2d_shapes", lambda: Tensor.ones(1, 1, 2, 2).max_unpool2d(Tensor.ones(1, 1, 2, 1, dtype=dtypes.int32)),
    ValueError, "max_unpool2d"),
  P("max_unpool2d_dtype", lambda: Tensor.ones(1, 1, 2, 2).max_unpool2d(Tensor.ones(1, 1, 2, 2)), TypeError,
    "max_unpool2d"),
  P("qr_1d", lambda: Tensor.ones(3).qr(), ValueError, "qr"),
  P("svd_1d", lambda: Tensor.ones(3).svd(), ValueError, "svd"),
  P("svd_bool", lambda: Tensor.ones(2, 2, dtype=dtypes.bool).svd(), TypeError, "svd"),
]

@pytest.mark.parametrize("fn, exc, name", ERRORS)
def test_errors_name_the_op(fn: Callable, exc: type, name: str) -> None:
  with pytest.raises(exc, match=name): fn()

def test_rearrange_errors_are_also_tinygrads_types() -> None:
  # tinygrad raises AssertionError or RuntimeError for these; ported code that catches them keeps working
  for exc in (ValueError, AssertionError, RuntimeError):
    with pytest.raises(exc, match="rearrange"): Tensor.ones(8, 1).rearrange("(a b c) d -> a b c d", a=2)

def test_symbolic_shapes_are_refused_by_name() -> None:
  n = Variable("n", 1, 8).bind(3)
  x = Tensor.ones(8, 4).shrink(((0, n), None))
  for name in ("qr", "cummax", "diagonal", "unfold"):
    args = {"unfold": (0, 1, 1)}.get(name, ())
    with pytest.raises(ValueError, match=name): getattr(x, name)(*args)

def _torch_newton_schulz(x: Any, steps: int, params: tuple[float, ...], eps: float) -> Any:
  """The iteration written out in torch, as the reference for the gradient."""
  if x.shape[-2] > x.shape[-1]: return _torch_newton_schulz(x.transpose(-2, -1), steps, params, eps).transpose(-2, -1)
  g = x / (x.square().sum((-2, -1), keepdim=True).sqrt() + eps)
  for _ in range(steps):
    gram = g @ g.transpose(-2, -1)
    g = sum(p * torch.linalg.matrix_power(gram, i) @ g for i, p in enumerate(params))
  return g

@pytest.mark.parametrize("shape", [(3, 3), (3, 2), (2, 2, 3)])
def test_newton_schulz(device: str, shape: tuple[int, ...]) -> None:
  a = RNG.standard_normal(shape).astype(np.float32)
  got = Tensor(a).newton_schulz(steps=25, params=(2, -1.5, 0.5), eps=0.0).numpy()
  u, _, vh = np.linalg.svd(a, full_matrices=False)
  np.testing.assert_allclose(got, u @ vh, atol=2e-3)  # the polar factor; convergence is slow near small singular values
  check_fwd_bwd(a, lambda t: t.newton_schulz(3, (3.4445, -4.775, 2.0315)),
                lambda t: _torch_newton_schulz(t, 3, (3.4445, -4.775, 2.0315), 1e-7), rtol=1e-4, atol=1e-5)
