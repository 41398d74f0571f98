"""tinygrad 0.14's Tensor API beyond the core ops: inverse and hyperbolic trig, erf, copysign, logaddexp, isclose,
nonzero, masked_select(size=), multinomial, the initializers and keyword arguments, vs PyTorch, forward and backward."""
from __future__ import annotations
import ctypes
from typing import Any, Callable
import numpy as np
import pytest
from attograd import GlobalCounters, Tensor, dtypes

torch = pytest.importorskip("torch")

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)

# (name, attograd fn, torch fn, low, high): inputs include 0 and a tiny value where the range allows
UNARY = [
  P("erf", Tensor.erf, torch.erf, -3.0, 3.0),
  P("asin", Tensor.asin, torch.asin, -0.99, 0.99),
  P("acos", Tensor.acos, torch.acos, -0.99, 0.99),
  P("atan", Tensor.atan, torch.atan, -5.0, 5.0),
  P("sinh", Tensor.sinh, torch.sinh, -3.0, 3.0),
  P("cosh", Tensor.cosh, torch.cosh, -3.0, 3.0),
  P("asinh", Tensor.asinh, torch.asinh, -5.0, 5.0),
  P("acosh", Tensor.acosh, torch.acosh, 1.01, 5.0),
  P("atanh", Tensor.atanh, torch.atanh, -0.95, 0.95),
  P("gelu_none", lambda x: x.gelu(approximate="none"), torch.nn.functional.gelu, -3.0, 3.0),
]

@pytest.mark.parametrize("att_fn, torch_fn, low, high", UNARY)
def test_unary_forward_backward(device: str, att_fn: Callable, torch_fn: Callable, low: float, high: float) -> None:
  x = np.random.default_rng(0).uniform(low, high, 40).astype(np.float32)
  if low < 0: x[:2] = [0.0, 1e-4]
  t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  y, ty = att_fn(t), torch_fn(tt)
  y.sum().backward()
  ty.sum().backward()
  np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=2e-6, atol=1e-6)
  np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-5, atol=2e-6)  # type: ignore[union-attr]

@pytest.mark.parametrize("fn", [Tensor.asin, Tensor.acosh, Tensor.atanh, Tensor.erf, Tensor.sinh])
def test_unary_edges_and_int_input(fn: Callable) -> None:
  name = fn.__name__
  x = [-2.0, -1.0, 1.0, 2.0, float("inf"), float("nan")]
  np.testing.assert_allclose(fn(Tensor(x)).numpy(), getattr(torch, name)(torch.tensor(x)).numpy(), rtol=1e-6)
  assert fn(Tensor([1, 2])).dtype is dtypes.float32

def test_copysign_logaddexp(device: str) -> None:
  a, b = [1.0, -2.0, 3.0, 0.0, -0.0], [-0.0, 3.0, -1.0, -5.0, 2.0]
  np.testing.assert_equal(Tensor(a).copysign(Tensor(b)).numpy(), torch.tensor(a).copysign(torch.tensor(b)).numpy())
  np.testing.assert_equal(Tensor(a).copysign(-1).numpy(), torch.tensor(a).copysign(torch.tensor(-1.0)).numpy())
  x, y = [float("-inf"), 1000.0, 1.0, -3.0], [float("-inf"), 1000.0, 2.0, float("inf")]
  np.testing.assert_allclose(Tensor(x).logaddexp(Tensor(y)).numpy(), torch.logaddexp(torch.tensor(x), torch.tensor(y)),
                             rtol=2e-7)
  t = Tensor([1.0, 2.0], requires_grad=True)
  t.logaddexp(Tensor([2.0, 0.0])).sum().backward()
  tt = torch.tensor([1.0, 2.0], requires_grad=True)
  torch.logaddexp(tt, torch.tensor([2.0, 0.0])).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-6)  # type: ignore[union-attr]

def test_isclose_allclose(device: str) -> None:
  x = [1.0, 1.1, float("inf"), float("nan"), 1.0, float("-inf"), 0.0]
  y = [1.0 + 1e-9, 1.0, float("inf"), float("nan"), float("inf"), float("inf"), 1e-9]
  for kw in ({}, {"equal_nan": True}, {"rtol": 0.2}, {"atol": 1e-8, "rtol": 0}):
    assert Tensor(x).isclose(Tensor(y), **kw).tolist() == torch.isclose(torch.tensor(x), torch.tensor(y), **kw).tolist()
  assert Tensor([1, 2]).isclose(Tensor([1, 3])).tolist() == [True, False]
  assert Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-7])).item() is True
  assert Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.1])).item() is False

def test_nonzero_and_masked_select_size(device: str) -> None:
  v = np.array([[0, 3, 0], [5, 0, 7]])
  assert Tensor(v).nonzero().tolist() == torch.tensor(v).nonzero().tolist()
  assert Tensor(v).nonzero(size=4, fill_value=-1).tolist() == [[0, 1], [1, 0], [1, 2], [-1, -1]]
  assert Tensor(v).nonzero(size=2).tolist() == [[0, 1], [1, 0]]
  assert Tensor([0.0, 0.0]).nonzero().shape == (0, 1)
  assert Tensor(5).nonzero().shape == (1, 0) and Tensor(0).nonzero(size=2).shape == (2, 0)  # 0-d: no coordinates
  x, m = Tensor([1, 2, 3, 4]), Tensor([True, False, True, True])
  assert x.masked_select(m).tolist() == [1, 3, 4] and x.masked_select(m, size=2).tolist() == [1, 3]
  assert x.masked_select(m, size=5, fill_value=9).tolist() == [1, 3, 4, 9, 9]
  assert Tensor([True, False]).masked_select(Tensor([True, True]), size=3).tolist() == [True, False, False]

def test_var_std_mean_size() -> None:
  v = np.array([[1.0, 2.0, 4.0], [3.0, 5.0, 9.0]], np.float32)
  for fn in ("std_mean", "var_mean"):
    for kw in ({}, {"axis": 1}, {"axis": 0, "keepdim": True, "correction": 0}):
      got = getattr(Tensor(v), fn)(**kw)
      tkw = {"dim": kw.get("axis"), "keepdim": kw.get("keepdim", False), "correction": kw.get("correction", 1)}
      want = getattr(torch, fn)(torch.tensor(v), **tkw)
      for g, w in zip(got, want): np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
  assert Tensor.ones(2, 3).size() == (2, 3) and Tensor.ones(2, 3).size(-1) == 3

def test_initializers_and_random_like() -> None:
  Tensor.manual_seed(1)
  for fn, bound in ((Tensor.scaled_uniform, (64 * 32) ** -0.5), (Tensor.glorot_uniform, (6 / (64 + 32)) ** 0.5),
                    (Tensor.kaiming_uniform, (6 / (1 + 0.01 ** 2) / 32) ** 0.5)):
    w = fn(64, 32).numpy()
    assert w.shape == (64, 32) and np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
  std = Tensor.kaiming_normal(256, 64, a=0.0).numpy().std()
  assert abs(std - (2 / 64) ** 0.5) < 0.01
  t = Tensor.ones(3, 4, dtype=dtypes.float16)
  assert t.rand_like().dtype is dtypes.float16 and t.rand_like(dtype=dtypes.float32).shape == (3, 4)
  assert Tensor.ones(2, dtype=dtypes.int32).randn_like().dtype is dtypes.float32
  assert Tensor.ones(2).rand_like(requires_grad=True).requires_grad

def test_multinomial() -> None:
  Tensor.manual_seed(2)
  s = Tensor([[0.0, 10.0, 0.0, 1.0]]).multinomial(2000, replacement=True).numpy()
  counts = np.bincount(s.ravel(), minlength=4)
  assert s.shape == (1, 2000) and counts[0] == counts[2] == 0 and 1700 < counts[1] < 1950
  s = Tensor([1.0, 1.0, 1.0, 0.0]).multinomial(3).numpy()
  assert sorted(s.tolist()) == [0, 1, 2] and s.dtype == np.int32
  with pytest.raises(ValueError, match="can't draw 5 samples without replacement from 4"):
    Tensor([1.0, 1.0, 1.0, 1.0]).multinomial(5)

def test_keyword_arguments(device: str) -> None:
  assert Tensor.full((2,), 1, dtypes.int8).dtype is dtypes.int8  # a positional dtype, as tinygrad 0.14
  assert Tensor.full((2,), 1.5, buffer=True).tolist() == [1.5, 1.5]
  assert Tensor.arange(6).view(shape=(2, 3)).shape == (2, 3)
  assert Tensor.rand(3, contiguous=False).shape == (3,)
  a = Tensor([1.0, 2.0]).clone(device="PYTHON")
  assert a.device == "PYTHON" and a.tolist() == [1.0, 2.0]
  GlobalCounters.reset()
  assert (Tensor([1.0]) + 1).realize(do_update_stats=False).item() == 2.0 and GlobalCounters.kernel_count == 0
  x, w = Tensor([[1.0, 2.0]], dtype=dtypes.float16), Tensor([[3.0], [4.0]], dtype=dtypes.float16)
  for out in (x.dot(w, dtype=dtypes.float32), x.matmul(w, dtype=dtypes.float32), x.linear(w, dtype=dtypes.float32),
              Tensor.einsum("ij,jk->ik", x, w, dtype=dtypes.float32)):
    assert out.dtype is dtypes.float32 and out.tolist() == [[11.0]]
  h = Tensor.ones(1, 1, 3, 3, dtype=dtypes.float16)
  c = h.conv2d(Tensor.ones(1, 1, 2, 2, dtype=dtypes.float16), dtype="float32")
  assert c.dtype is dtypes.float32 and c.tolist() == [[[[4.0, 4.0], [4.0, 4.0]]]]
  t = Tensor([1.0, 2.0])
  assert t.replace(Tensor([3.0, 4.0])) is t and t.tolist() == [3.0, 4.0]
  with pytest.raises(ValueError, match=r"replace: needs a Tensor of shape \(2,\)"): t.replace(Tensor([1.0]))

def test_sdpa_enable_gqa(device: str) -> None:
  rng = np.random.default_rng(3)
  q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, 4, 3, 8), (1, 2, 5, 8), (1, 2, 5, 8)))
  got = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), enable_gqa=True).numpy()
  tq, tk, tv = torch.tensor(q), torch.tensor(k), torch.tensor(v)
  want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, enable_gqa=True)
  np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="enable_gqa needs the query's heads"):
    k3, v3 = Tensor(k[:, :1].repeat(3, 1)), Tensor(v[:, :1].repeat(3, 1))
    Tensor(q).scaled_dot_product_attention(k3, v3, enable_gqa=True)

def test_from_blob() -> None:
  buf = (ctypes.c_float * 4)(1, 2, 3, 4)
  assert Tensor.from_blob(ctypes.addressof(buf), (2, 2)).tolist() == [[1.0, 2.0], [3.0, 4.0]]
  ibuf = (ctypes.c_int16 * 3)(-1, 0, 7)
  assert Tensor.from_blob(ctypes.addressof(ibuf), (3,), dtype=dtypes.int16).tolist() == [-1, 0, 7]
  with pytest.raises(ValueError, match="from_blob: needs a non-null"): Tensor.from_blob(0, (1,))
