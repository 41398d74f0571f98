"""Autograd: every op's gradient against PyTorch and against central finite differences (float64, small tensors),
second derivatives, backward() bookkeeping (accumulation, detach, requires_grad) and very deep graphs."""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest
from helpers import make_inputs
from attograd import Tensor, dtypes
from attograd.gradient import compute_gradient, pm_gradient
from attograd.uop.ops import GroupOp, Ops

try:
  import torch
except ImportError:  # the finite-difference checks still run
  torch = None  # type: ignore[assignment]

@pytest.fixture(autouse=True)
def _torch_float64() -> Any:
  # float64 references for this module only: a global default would leak into every other test in the process
  if torch is None:
    yield
    return
  old = torch.get_default_dtype()
  torch.set_default_dtype(torch.float64)
  yield
  torch.set_default_dtype(old)
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (finite differences still run)")

def P(name: str, shapes: list[tuple[int, ...]], att_fn: Callable, torch_fn: Callable, **kw: Any) -> Any:
  return pytest.param(shapes, att_fn, torch_fn, kw, id=name)

# gather indices, shared by the attograd and torch versions of the case
IDX = np.array([[0, 2, 1, 2], [3, 0, 0, 1], [1, 1, 3, 0]])

def _tt(x: np.ndarray) -> Any: return torch.tensor(x)

# (name, input shapes, attograd fn, torch fn, input options). Inputs are float64, uniform in [low, high) (default
# [-2, 2)), away from kinks (relu at 0, ties in max) with probability ~1.
CASES = [
  # elementwise
  P("add", [(3, 4), (3, 4)], lambda a, b: a + b, lambda a, b: a + b),
  P("add_broadcast", [(3, 4), (4,)], lambda a, b: a + b, lambda a, b: a + b),
  P("add_self", [(5,)], lambda a: a + a, lambda a: a + a),
  P("sub", [(3, 4), (3, 1)], lambda a, b: a - b, lambda a, b: a - b),
  P("rsub_const", [(6,)], lambda a: 1.5 - a, lambda a: 1.5 - a),
  P("mul", [(3, 4), (3, 4)], lambda a, b: a * b, lambda a, b: a * b),
  P("mul_broadcast", [(2, 3, 1), (1, 4)], lambda a, b: a * b, lambda a, b: a * b),
  P("square", [(6,)], lambda a: a * a, lambda a: a * a),
  P("div", [(3, 4), (3, 4)], lambda a, b: a / b, lambda a, b: a / b, nonzero=True),
  P("rdiv_const", [(6,)], lambda a: 2.0 / a, lambda a: 2.0 / a, low=0.5, high=2),
  P("neg", [(6,)], lambda a: -a, lambda a: -a),
  P("exp", [(3, 4)], lambda a: a.exp(), lambda a: a.exp()),
  P("exp2", [(6,)], lambda a: a.exp2(), lambda a: a.exp2()),
  P("log", [(3, 4)], lambda a: a.log(), lambda a: a.log(), low=0.1, high=3),
  P("log2", [(6,)], lambda a: a.log2(), lambda a: a.log2(), low=0.1, high=3),
  P("sqrt", [(3, 4)], lambda a: a.sqrt(), lambda a: a.sqrt(), low=0.1, high=3),
  P("rsqrt", [(6,)], lambda a: a.rsqrt(), lambda a: a.rsqrt(), low=0.1, high=3),
  P("reciprocal", [(6,)], lambda a: a.reciprocal(), lambda a: a.reciprocal(), low=0.2, high=3),
  P("sin", [(3, 4)], lambda a: a.sin(), lambda a: a.sin(), low=-4, high=4),
  P("cos", [(3, 4)], lambda a: a.cos(), lambda a: a.cos(), low=-4, high=4),
  P("tan", [(6,)], lambda a: a.tan(), lambda a: a.tan(), low=-1.2, high=1.2),
  P("tanh", [(3, 4)], lambda a: a.tanh(), lambda a: a.tanh()),
  P("sigmoid", [(3, 4)], lambda a: a.sigmoid(), lambda a: a.sigmoid(), low=-5, high=5),
  P("relu", [(3, 4)], lambda a: a.relu(), lambda a: a.relu()),
  P("abs", [(3, 4)], lambda a: a.abs(), lambda a: a.abs()),
  P("maximum", [(3, 4), (3, 4)], lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b)),
  P("maximum_const", [(6,)], lambda a: a.maximum(0.3), lambda a: torch.clamp(a, min=0.3)),
  P("minimum", [(3, 4), (4,)], lambda a, b: a.minimum(b), lambda a, b: torch.minimum(a, b)),
  P("pow", [(3, 4), (3, 4)], lambda a, b: a ** b, lambda a, b: a ** b, low=[0.2, -2], high=[3, 2]),
  P("pow_int_neg_base", [(6,)], lambda a: a ** 3.0, lambda a: a ** 3.0),
  P("pow_frac", [(6,)], lambda a: a ** 1.7, lambda a: a ** 1.7, low=0.2, high=3),
  P("rpow", [(6,)], lambda a: 2.5 ** a, lambda a: 2.5 ** a),
  P("where", [(3, 4), (3, 4)], lambda a, b: (a > 0).where(a, b), lambda a, b: torch.where(a > 0, a, b)),
  P("where_const", [(3, 4)], lambda a: (a < 0.5).where(a * 2, 1.0), lambda a: torch.where(a < 0.5, a * 2, 1.0)),
  P("clip", [(3, 4)], lambda a: a.clip(-0.5, 0.7), lambda a: a.clip(-0.5, 0.7)),
  # float32 in the middle: finite differences need a bigger step
  P("cast_roundtrip", [(6,)], lambda a: (a.float() * 3).double(), lambda a: (a.float() * 3).double(),
    fd_h=1e-3, fd_tol=1e-3),
  P("lerp", [(6,), (6,)], lambda a, b: a.lerp(b, 0.3), lambda a, b: torch.lerp(a, b, 0.3)),
  # reductions
  P("sum", [(3, 4)], lambda a: a.sum(), lambda a: a.sum()),
  P("sum_axis", [(3, 4)], lambda a: a.sum(1), lambda a: a.sum(1)),
  P("sum_axis_keepdim", [(2, 3, 4)], lambda a: a.sum((0, 2), keepdim=True), lambda a: a.sum((0, 2), keepdim=True)),
  P("mean", [(3, 4)], lambda a: a.mean(0), lambda a: a.mean(0)),
  P("max", [(3, 4)], lambda a: a.max(), lambda a: a.amax()),
  P("max_axis", [(3, 4)], lambda a: a.max(1), lambda a: a.amax(1)),
  P("max_axis_keepdim", [(3, 4)], lambda a: a.max(0, keepdim=True), lambda a: a.amax(0, keepdim=True)),
  P("min_axis", [(3, 4)], lambda a: a.min(1), lambda a: a.amin(1)),
  P("prod", [(3, 4)], lambda a: a.prod(), lambda a: a.prod()),
  P("prod_axis", [(3, 4)], lambda a: a.prod(1), lambda a: a.prod(1)),
  P("var", [(3, 4)], lambda a: a.var(1), lambda a: a.var(1)),
  P("var_keepdim_corr0", [(3, 4)], lambda a: a.var(0, keepdim=True, correction=0),
    lambda a: a.var(0, keepdim=True, correction=0)),
  P("std", [(3, 4)], lambda a: a.std(), lambda a: a.std()),
  P("logsumexp", [(3, 4)], lambda a: a.logsumexp(1), lambda a: torch.logsumexp(a, 1)),
  P("logsumexp_keepdim", [(3, 4)], lambda a: a.logsumexp(0, keepdim=True),
    lambda a: torch.logsumexp(a, 0, keepdim=True)),
  P("softmax", [(3, 4)], lambda a: a.softmax(), lambda a: torch.softmax(a, -1)),
  P("softmax_axis0", [(3, 4)], lambda a: a.softmax(0), lambda a: torch.softmax(a, 0)),
  P("log_softmax", [(3, 4)], lambda a: a.log_softmax(), lambda a: torch.log_softmax(a, -1)),
  P("cumsum", [(3, 4)], lambda a: a.cumsum(1), lambda a: torch.cumsum(a, 1)),
  P("cumsum_axis0", [(5, 2)], lambda a: a.cumsum(0), lambda a: torch.cumsum(a, 0)),
  # movement
  P("reshape", [(3, 4)], lambda a: a.reshape(2, 6) * Tensor.arange(6).reshape(1, 6).double(),
    lambda a: a.reshape(2, 6) * torch.arange(6.0).reshape(1, 6)),
  P("permute", [(2, 3, 4)], lambda a: a.permute(2, 0, 1), lambda a: a.permute(2, 0, 1)),
  P("transpose", [(3, 4)], lambda a: a.transpose(), lambda a: a.transpose(1, 0)),
  P("expand", [(3, 1)], lambda a: a.expand(3, 4), lambda a: a.expand(3, 4)),
  P("expand_new_dims", [(4,)], lambda a: a.expand(2, 3, 4), lambda a: a.expand(2, 3, 4)),
  P("pad", [(3, 4)], lambda a: a.pad((1, 2)), lambda a: torch.nn.functional.pad(a, (1, 2))),
  P("pad_2d_value", [(3, 4)], lambda a: a.pad((1, 0, 2, 1), value=1.5),
    lambda a: torch.nn.functional.pad(a, (1, 0, 2, 1), value=1.5)),
  P("pad_reflect", [(2, 5)], lambda a: a.pad((2, 1), mode="reflect"),
    lambda a: torch.nn.functional.pad(a, (2, 1), mode="reflect")),
  P("shrink", [(4, 5)], lambda a: a.shrink(((1, 3), (0, 4))), lambda a: a[1:3, 0:4]),
  P("flip", [(3, 4)], lambda a: a.flip(1), lambda a: a.flip(1)),
  P("flip_both", [(3, 4)], lambda a: a.flip(0, 1), lambda a: a.flip(0, 1)),
  P("getitem_slices", [(5, 6)], lambda a: a[1:4, ::2], lambda a: a[1:4, ::2]),
  P("getitem_int_step", [(4, 7)], lambda a: a[2, 1::3], lambda a: a[2, 1::3]),
  P("getitem_neg_step", [(5, 3)], lambda a: a[::-2], lambda a: a.flip(0)[::2]),
  P("getitem_none_ellipsis", [(2, 3, 4)], lambda a: a[..., None, 1], lambda a: a[..., None, 1]),
  P("getitem_fancy", [(4, 3)], lambda a: a[Tensor([2, 0, 2])], lambda a: a[torch.tensor([2, 0, 2])]),
  P("cat", [(2, 3), (2, 2)], lambda a, b: a.cat(b, dim=1), lambda a, b: torch.cat([a, b], 1)),
  P("cat_self", [(2, 3)], lambda a: a.cat(a * 2, dim=0), lambda a: torch.cat([a, a * 2], 0)),
  P("stack", [(2, 3), (2, 3)], lambda a, b: Tensor.stack(a, b, dim=1), lambda a, b: torch.stack([a, b], 1)),
  P("repeat", [(2, 3)], lambda a: a.repeat(2, 2), lambda a: a.repeat(2, 2)),
  # matmul and friends
  P("matmul", [(3, 4), (4, 2)], lambda a, b: a @ b, lambda a, b: a @ b),
  P("matmul_vec", [(4,), (4, 3)], lambda a, b: a @ b, lambda a, b: a @ b),
  P("matmul_batched", [(2, 3, 4), (4, 2)], lambda a, b: a @ b, lambda a, b: a @ b),
  P("gather", [(4, 5)], lambda a: a.gather(0, Tensor(IDX)), lambda a: torch.gather(a, 0, _tt(IDX))),
  P("gather_dim1", [(3, 4)], lambda a: a.gather(1, Tensor(IDX[:, :3])), lambda a: torch.gather(a, 1, _tt(IDX[:, :3]))),
  P("einsum", [(2, 3), (3, 4)], lambda a, b: Tensor.einsum("ij,jk->ik", a, b),
    lambda a, b: torch.einsum("ij,jk->ik", a, b)),
  # composites
  P("mlp", [(2, 3), (3, 4), (4,)], lambda x, w, b: (x @ w + b).relu().sum(1).log1p(),
    lambda x, w, b: (x @ w + b).relu().sum(1).log1p()),
  P("layernorm", [(3, 4)], lambda a: a.layernorm(), lambda a: torch.nn.functional.layer_norm(a, (4,))),
  P("cross_entropy", [(3, 4)], lambda a: a.cross_entropy(Tensor([1, 0, 3])),
    lambda a: torch.nn.functional.cross_entropy(a, torch.tensor([1, 0, 3]))),
]

def _inputs(shapes: list[tuple[int, ...]], kw: dict[str, Any], seed: int = 0) -> list[np.ndarray]:
  return make_inputs(shapes, dtype=np.float64, low=kw.get("low"), high=kw.get("high"), seed=seed,
                     nonzero=kw.get("nonzero", False))

def _weights(shape: tuple[int, ...]) -> np.ndarray:
  # a fixed random cotangent, so each output element contributes differently to the loss
  return np.random.default_rng(1).uniform(0.5, 1.5, shape)

def _att_grads(att_fn: Callable, xs: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
  ts = [Tensor(x) for x in xs]
  out = att_fn(*ts)
  assert out.dtype == dtypes.float64, f"output dtype {out.dtype}"
  grads = (out * Tensor(_weights(out.shape))).sum().gradient(*ts)
  for t, g in zip(ts, grads): assert (g.shape, g.dtype) == (t.shape, t.dtype), f"grad {g.shape} {g.dtype} for {t.shape}"
  return out.numpy(), [g.numpy() for g in grads]

@needs_torch
@pytest.mark.parametrize("shapes,att_fn,torch_fn,kw", CASES)
def test_vs_torch(device: str, shapes: list, att_fn: Callable, torch_fn: Callable, kw: dict) -> None:
  xs = _inputs(shapes, kw)
  out, got = _att_grads(att_fn, xs)
  txs = [torch.tensor(x, requires_grad=True) for x in xs]
  tout = torch_fn(*txs)
  np.testing.assert_allclose(out, tout.detach().numpy(), rtol=1e-7, atol=1e-9, err_msg="forward")
  want = torch.autograd.grad((tout * torch.tensor(_weights(tuple(tout.shape)))).sum(), txs)
  for i, (g, w) in enumerate(zip(got, want)):
    np.testing.assert_allclose(g, w.numpy(), rtol=1e-7, atol=1e-9, err_msg=f"gradient of input {i}")

@pytest.mark.parametrize("shapes,att_fn,torch_fn,kw", CASES)
def test_vs_finite_differences(device: str, shapes: list, att_fn: Callable, torch_fn: Callable, kw: dict) -> None:
  # directional derivatives: (f(x + h v) - f(x - h v)) / 2h must equal <grad f, v> for random directions v
  xs = _inputs(shapes, kw)
  out, got = _att_grads(att_fn, xs)
  w = Tensor(_weights(out.shape))
  def f(vs: list[np.ndarray], h: float) -> float:
    return (att_fn(*[Tensor(x + h * v) for x, v in zip(xs, vs)]) * w).sum().item()
  rng, h, tol = np.random.default_rng(2), kw.get("fd_h", 1e-6), kw.get("fd_tol", 1e-5)
  for _ in range(2):
    vs = [rng.standard_normal(x.shape) for x in xs]
    numeric = (f(vs, h) - f(vs, -h)) / (2 * h)
    analytic = sum(float((g * v).sum()) for g, v in zip(got, vs))
    assert abs(numeric - analytic) <= tol * max(1.0, abs(analytic)), f"numeric {numeric} != analytic {analytic}"

# ***** ties and zeros: the cases where a derivative is a convention *****

@needs_torch
def test_maximum_ties_split(device: str) -> None:
  a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 5.0, 3.0])
  ta, tb = Tensor(a), Tensor(b)
  ga, gb = ta.maximum(tb).sum().gradient(ta, tb)
  xa, xb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
  wa, wb = torch.autograd.grad(torch.maximum(xa, xb).sum(), (xa, xb))
  np.testing.assert_allclose(ga.numpy(), wa.numpy())
  np.testing.assert_allclose(gb.numpy(), wb.numpy())
  np.testing.assert_allclose(ga.numpy(), [0.5, 0.0, 0.5])

@needs_torch
def test_max_reduce_ties_share(device: str) -> None:
  # like torch.amax, every maximal element gets an equal share
  x = np.array([[3.0, 1.0, 3.0], [2.0, 2.0, 2.0]])
  t = Tensor(x)
  g, = (t.max(1) * Tensor([1.0, 3.0])).sum().gradient(t)
  tx = torch.tensor(x, requires_grad=True)
  want, = torch.autograd.grad((tx.amax(1) * torch.tensor([1.0, 3.0])).sum(), tx)
  np.testing.assert_allclose(g.numpy(), want.numpy())
  np.testing.assert_allclose(g.numpy(), [[0.5, 0, 0.5], [1, 1, 1]])

@needs_torch
@pytest.mark.parametrize("row", [[2.0, 0.0, 3.0, 4.0], [0.0, 1.5, 0.0, 2.0], [1.0, -2.0, 0.5, 3.0]],
                         ids=["one_zero", "two_zeros", "no_zero"])
def test_prod_with_zeros(device: str, row: list[float]) -> None:
  t = Tensor(row, dtype=dtypes.float64)
  g, = t.prod().gradient(t)
  tx = torch.tensor(row, requires_grad=True)
  want, = torch.autograd.grad(tx.prod(), tx)
  np.testing.assert_allclose(g.numpy(), want.numpy())

# ***** non-smooth points: every kink, tie and zero gets PyTorch's gradient (docs/numerics.md) *****

# (the gradient at a NaN input is a convention PyTorch doesn't keep uniform: not compared)
KINK_X = [0.0, -0.0, 1.0, -1.0, 6.0, 3.0, -3.0, 20.0, -20.0, 0.5, -0.5, 2.0, 1e-8, 0.0]
KINKS = [
  pytest.param(lambda t: t.relu(), lambda t: torch.relu(t), id="relu"),
  pytest.param(lambda t: t.abs(), lambda t: t.abs(), id="abs"),
  pytest.param(lambda t: t.clip(-1, 1), lambda t: t.clamp(-1, 1), id="clip"),
  pytest.param(lambda t: t.clip(0, None), lambda t: t.clamp(0, None), id="clip_min"),
  pytest.param(lambda t: t.relu6(), lambda t: torch.nn.functional.relu6(t), id="relu6"),
  pytest.param(lambda t: t.hardtanh(), lambda t: torch.nn.functional.hardtanh(t), id="hardtanh"),
  pytest.param(lambda t: t.hardswish(), lambda t: torch.nn.functional.hardswish(t), id="hardswish"),
  pytest.param(lambda t: t.hardsigmoid(), lambda t: torch.nn.functional.hardsigmoid(t), id="hardsigmoid"),
  pytest.param(lambda t: t.leaky_relu(0.1), lambda t: torch.nn.functional.leaky_relu(t, 0.1), id="leaky_relu"),
  pytest.param(lambda t: t.elu(2.0), lambda t: torch.nn.functional.elu(t, 2.0), id="elu"),
  pytest.param(lambda t: t.celu(2.0), lambda t: torch.nn.functional.celu(t, 2.0), id="celu"),
  pytest.param(lambda t: t.selu(), lambda t: torch.nn.functional.selu(t), id="selu"),
  pytest.param(lambda t: t.softplus(), lambda t: torch.nn.functional.softplus(t), id="softplus"),
  pytest.param(lambda t: t.softplus(2.0), lambda t: torch.nn.functional.softplus(t, 2.0), id="softplus_beta"),
  pytest.param(lambda t: t.sigmoid(), lambda t: t.sigmoid(), id="sigmoid"),
  pytest.param(lambda t: t.tanh(), lambda t: t.tanh(), id="tanh"),
  pytest.param(lambda t: t.maximum(t.flip(0)), lambda t: torch.maximum(t, t.flip(0)), id="maximum_ties"),
  pytest.param(lambda t: t.minimum(t.flip(0)), lambda t: torch.minimum(t, t.flip(0)), id="minimum_ties"),
  pytest.param(lambda t: t.minimum(0.0), lambda t: torch.minimum(t, torch.zeros_like(t)), id="minimum_0"),
  pytest.param(lambda t: t.sqrt(), lambda t: t.sqrt(), id="sqrt"),
  pytest.param(lambda t: t.log(), lambda t: t.log(), id="log"),
  pytest.param(lambda t: t.log1p(), lambda t: t.log1p(), id="log1p"),
  pytest.param(lambda t: t.expm1(), lambda t: t.expm1(), id="expm1"),
  pytest.param(lambda t: t ** 2, lambda t: t ** 2, id="square"),
  pytest.param(lambda t: t ** 3, lambda t: t ** 3, id="pow3"),
  pytest.param(lambda t: t ** 2.5, lambda t: t ** 2.5, id="pow2.5"),
  pytest.param(lambda t: t ** -2, lambda t: t ** -2, id="pow_neg2"),
  pytest.param(lambda t: 0.0 ** t, lambda t: 0.0 ** t, id="zero_pow"),
  pytest.param(lambda t: 2.0 ** t, lambda t: 2.0 ** t, id="two_pow"),
  pytest.param(lambda t: (t > 0).where(t, t * 2), lambda t: torch.where(t > 0, t, t * 2), id="where"),
  pytest.param(lambda t: t[:13].max(), lambda t: t[:13].amax(), id="max_reduce"),
  pytest.param(lambda t: t[:13].min(), lambda t: t[:13].amin(), id="min_reduce"),
  pytest.param(lambda t: t[:13].sort()[0] * Tensor(np.arange(13.0)), lambda t: t[:13].sort(stable=True)[0] *
               torch.arange(13.0), id="sort"),
  pytest.param(lambda t: t[:13].topk(4)[0] * Tensor(np.arange(4.0)), lambda t: t[:13].topk(4)[0] * torch.arange(4.0),
               id="topk"),
  pytest.param(lambda t: t[:12].reshape(1, 1, 3, 4).max_pool2d(2, stride=1),  # (no ties in these windows)
               lambda t: torch.nn.functional.max_pool2d(t[:12].reshape(1, 1, 3, 4), 2, stride=1),
               id="max_pool_overlap"),
]

@needs_torch
@pytest.mark.parametrize("att_fn,torch_fn", KINKS)
def test_gradient_at_kinks(device: str, att_fn: Callable, torch_fn: Callable) -> None:
  x = np.array(KINK_X)
  t = Tensor(x)
  out = att_fn(t)
  g, = (out * Tensor(_weights(out.shape))).sum().gradient(t)
  tx = torch.tensor(x, requires_grad=True)
  tout = torch_fn(tx)
  want, = torch.autograd.grad((tout * torch.tensor(_weights(tuple(tout.shape)))).sum(), tx)
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-7, atol=1e-300, equal_nan=True)
  np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-7, atol=1e-12, equal_nan=True)

def test_custom_grad_second_derivative(device: str) -> None:
  # the rules behind Tensor._custom_grad are graphs too: d2/dx2 of log1p is -1/(1+x)^2, of expm1 e^x, of abs 0
  x = np.array([0.5, 1.5, -0.25])
  for fn, d2 in ((lambda t: t.log1p(), -1 / (1 + x) ** 2), (lambda t: t.expm1(), np.exp(x)),
                 (lambda t: t.abs() * 3, np.zeros(3)), (lambda t: t ** 3, 6 * x)):
    t = Tensor(x)
    g, = fn(t).sum().gradient(t)
    h, = g.sum().gradient(t, materialize_grads=True)
    np.testing.assert_allclose(h.numpy(), d2, rtol=1e-9, atol=1e-12)

# ***** second derivatives: gradients are graphs, so they differentiate again *****

SECOND = [
  pytest.param([(5,)], lambda x: x.sin(), lambda x: x.sin(), id="sin"),
  pytest.param([(5,)], lambda x: x.exp(), lambda x: x.exp(), id="exp"),
  pytest.param([(2, 3), (2, 3)], lambda x, y: x * y, lambda x, y: x * y, id="mul"),
  pytest.param([(2, 3), (3, 2)], lambda x, y: (x @ y).tanh(), lambda x, y: (x @ y).tanh(), id="matmul_tanh"),
  pytest.param([(3, 4)], lambda x: x.softmax(), lambda x: torch.softmax(x, -1), id="softmax"),
  pytest.param([(2, 3), (2, 3)], lambda x, y: (x / y).log_softmax(0) * x, lambda x, y: torch.log_softmax(x / y, 0) * x,
               id="div_log_softmax"),
]

@needs_torch
@pytest.mark.parametrize("shapes,att_fn,torch_fn", SECOND)
def test_second_derivative(device: str, shapes: list, att_fn: Callable, torch_fn: Callable) -> None:
  xs = _inputs(shapes, {"low": 0.5, "high": 2.0})
  v = [np.random.default_rng(3).uniform(-1, 1, x.shape) for x in xs]
  ts = [Tensor(x) for x in xs]
  gs = att_fn(*ts).sum().gradient(*ts)
  # the gradient of <grad f, v>: a Hessian-vector product
  loss2 = sum(((g * Tensor(vi)).sum() for g, vi in zip(gs, v)), Tensor(0.0, dtype=dtypes.float64))
  got = loss2.gradient(*ts, materialize_grads=True)
  txs = [torch.tensor(x, requires_grad=True) for x in xs]
  tgs = torch.autograd.grad(torch_fn(*txs).sum(), txs, create_graph=True)
  want = torch.autograd.grad(sum((g * torch.tensor(vi)).sum() for g, vi in zip(tgs, v)), txs, allow_unused=True)
  for i, (g, w) in enumerate(zip(got, want)):
    np.testing.assert_allclose(g.numpy(), np.zeros(xs[i].shape) if w is None else w.numpy(), rtol=1e-7, atol=1e-9,
                               err_msg=f"second derivative for input {i}")

@needs_torch
def test_pow_op_rule(device: str) -> None:
  # Tensor.pow is written with exp2/log2; the POW primitive has its own rule for backends and rewrites that emit it
  a, e = np.array([0.5, 2.0, 3.0, 1.5]), np.array([3.0, 0.5, -1.0, 2.2])
  ta, te = Tensor(a), Tensor(e)
  ga, ge = ta._alu(Ops.POW, te).sum().gradient(ta, te)
  xa, xe = torch.tensor(a, requires_grad=True), torch.tensor(e, requires_grad=True)
  wa, we = torch.autograd.grad((xa ** xe).sum(), (xa, xe))
  np.testing.assert_allclose(ga.numpy(), wa.numpy(), rtol=1e-7)
  np.testing.assert_allclose(ge.numpy(), we.numpy(), rtol=1e-7)

def test_copy_between_devices() -> None:
  from attograd.device import Device
  if not all(Device.available(d)[0] for d in ("CPU", "PYTHON")): pytest.skip("needs the CPU and PYTHON devices")
  x = Tensor([1.0, 2.0, 3.0], device="CPU", requires_grad=True)
  ((x.to("PYTHON") * Tensor([1.0, 2.0, 3.0], device="PYTHON")).sum()).backward()
  assert x.grad.device == "CPU"
  np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0, 3.0])

def test_third_derivative_of_sin(device: str) -> None:
  x = Tensor([0.3, 1.1, -0.7], dtype=dtypes.float64)
  g1, = x.sin().sum().gradient(x)
  g2, = g1.sum().gradient(x)
  g3, = g2.sum().gradient(x)
  np.testing.assert_allclose(g3.numpy(), -np.cos([0.3, 1.1, -0.7]), rtol=1e-12)

# ***** conv and pooling (written in Tensor from views, so their gradients come for free) *****

NN_CASES = [
  pytest.param([(1, 2, 5, 5), (3, 2, 3, 3), (3,)], lambda x, w, b: x.conv2d(w, b, padding=1),
               lambda x, w, b: torch.nn.functional.conv2d(x, w, b, padding=1), id="conv2d"),
  pytest.param([(1, 2, 6, 5), (2, 1, 2, 3)], lambda x, w: x.conv2d(w, groups=2, stride=2),
               lambda x, w: torch.nn.functional.conv2d(x, w, groups=2, stride=2), id="conv2d_groups_stride"),
  pytest.param([(1, 1, 6, 6), (1, 1, 2, 2)], lambda x, w: x.conv2d(w, dilation=2),
               lambda x, w: torch.nn.functional.conv2d(x, w, dilation=2), id="conv2d_dilation"),
  pytest.param([(1, 2, 4, 6)], lambda x: x.max_pool2d(), lambda x: torch.nn.functional.max_pool2d(x, 2),
               id="max_pool2d"),
  pytest.param([(1, 1, 5, 5)], lambda x: x.max_pool2d(3, stride=2, padding=1),
               lambda x: torch.nn.functional.max_pool2d(x, 3, stride=2, padding=1), id="max_pool2d_overlap"),
  pytest.param([(1, 2, 4, 6)], lambda x: x.avg_pool2d(), lambda x: torch.nn.functional.avg_pool2d(x, 2),
               id="avg_pool2d"),
  pytest.param([(1, 1, 5, 5)], lambda x: x.avg_pool2d(3, stride=2, padding=1),
               lambda x: torch.nn.functional.avg_pool2d(x, 3, stride=2, padding=1), id="avg_pool2d_overlap"),
  pytest.param([(1, 2, 3, 3), (2, 1, 2, 2)], lambda x, w: x.conv_transpose2d(w, stride=2),
               lambda x, w: torch.nn.functional.conv_transpose2d(x, w, stride=2), id="conv_transpose2d"),
]
needs_conv = pytest.mark.skipif(not hasattr(Tensor, "conv2d"), reason="Tensor.conv2d doesn't exist yet")

@needs_torch
@needs_conv
@pytest.mark.parametrize("shapes,att_fn,torch_fn", NN_CASES)
def test_nn_vs_torch(device: str, shapes: list, att_fn: Callable, torch_fn: Callable) -> None:
  test_vs_torch(device, shapes, att_fn, torch_fn, {})

@needs_conv
@pytest.mark.parametrize("shapes,att_fn,torch_fn", NN_CASES)
def test_nn_vs_finite_differences(device: str, shapes: list, att_fn: Callable, torch_fn: Callable) -> None:
  test_vs_finite_differences(device, shapes, att_fn, torch_fn, {})

# ***** backward(): .grad bookkeeping *****

def test_backward_sets_grad(device: str) -> None:
  w = Tensor([1.0, -2.0, 3.0], requires_grad=True)
  b = Tensor([0.5], requires_grad=True)
  x = Tensor([2.0, 1.0, 0.5])  # requires_grad None: filled as well (tinygrad fills every live float tensor)
  frozen = Tensor([4.0, 4.0, 4.0], requires_grad=False)  # False opts out
  loss = ((w * x + frozen).sum() + b * 3).sum()
  assert loss.backward() is loss
  np.testing.assert_allclose(w.grad.numpy(), [2.0, 1.0, 0.5])
  np.testing.assert_allclose(b.grad.numpy(), [3.0])
  np.testing.assert_allclose(x.grad.numpy(), [1.0, -2.0, 3.0])
  assert frozen.grad is None and w.grad.requires_grad is None

def test_backward_fills_live_intermediates_not_literals(device: str) -> None:
  # an intermediate the caller still holds gets its gradient; a bare constant is the hash-consed node of every equal
  # literal (here the same node as the `2.0` inside h * 2.0), so it gets none; nor does an int tensor or a tensor of
  # another graph
  a = Tensor([1.0, -1.0, 2.0])
  h = a * a
  two, ones, counts, other = Tensor(2.0), Tensor.ones(3), Tensor([1, 2, 3]), Tensor([5.0])
  out = (h * 2.0 * two * ones * counts).sum()
  out.backward()
  np.testing.assert_allclose(h.grad.numpy(), [4.0, 8.0, 12.0])
  np.testing.assert_allclose(a.grad.numpy(), [8.0, -16.0, 48.0])
  np.testing.assert_allclose(out.grad.numpy(), 1.0)
  assert two.grad is None and ones.grad is None and counts.grad is None and other.grad is None
  held = a.grad
  h.sum().backward()  # adds into the same .grad objects
  assert a.grad is held
  np.testing.assert_allclose(a.grad.numpy(), [10.0, -18.0, 52.0])

def test_clone_carries_grad(device: str) -> None:
  w = Tensor([1.0, 2.0])
  (w * 3).sum().backward()
  c = w.clone()
  np.testing.assert_allclose(c.grad.numpy(), [3.0, 3.0])
  assert c.grad is not w.grad and Tensor([1.0]).clone().grad is None

def test_backward_accumulates(device: str) -> None:
  w = Tensor([1.0, 2.0], requires_grad=True)
  (w * w).sum().backward()
  (w * 3).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), [2.0 + 3.0, 4.0 + 3.0])

def test_backward_with_gradient_arg(device: str) -> None:
  w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  (w * w).backward(Tensor([[1.0, 0.0], [2.0, 1.0]]))
  np.testing.assert_allclose(w.grad.numpy(), [[2.0, 0.0], [12.0, 8.0]])

def test_backward_after_realize(device: str) -> None:
  # realizing a parameter replaces its uop by a buffer; the loss graph still holds the old node
  w = (Tensor([1.0, 2.0]) * 2).requires_grad_()
  loss = (w * w).sum()
  w.realize()
  loss.backward()
  np.testing.assert_allclose(w.grad.numpy(), [4.0, 8.0])

def test_intermediate_requires_grad(device: str) -> None:
  x = Tensor([1.0, 2.0], requires_grad=True)
  h = (x * 3).requires_grad_()
  (h * h).sum().backward()
  np.testing.assert_allclose(h.grad.numpy(), [6.0, 12.0])
  np.testing.assert_allclose(x.grad.numpy(), [18.0, 36.0])

def test_reshaped_parameter(device: str) -> None:
  # Tensor.reshape composes reshapes, so w.reshape(6) is a RESHAPE of w's buffer, not of w's own node; w is also used
  # directly, and the two uses must add up once each
  w = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
  (w.reshape(6) * Tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  w.grad = None
  ((w * 10).sum() + w.reshape(3, 2).sum()).backward()
  np.testing.assert_allclose(w.grad.numpy(), np.full((2, 3), 11.0))
  g, = w.reshape(6).sum().gradient(w)
  np.testing.assert_allclose(g.numpy(), np.ones((2, 3)))

def test_requires_grad_flag(device: str) -> None:
  x = Tensor([1.0], requires_grad=True)
  assert x.requires_grad is True and (x * 2).requires_grad is None
  assert Tensor([1.0]).requires_grad is None
  assert x.requires_grad_(False) is x and x.requires_grad is False

def test_constant_parameters_are_distinct(device: str) -> None:
  # Tensor.ones(3) twice is one hash-consed graph: marking them requires_grad gives each a buffer of its own
  w, b = Tensor.ones(3).requires_grad_(), Tensor.ones(3).requires_grad_()
  assert w.uop is not b.uop
  ((w * 2).sum() + (b * 5).sum()).backward()
  np.testing.assert_allclose(w.grad.numpy(), [2.0, 2.0, 2.0])
  np.testing.assert_allclose(b.grad.numpy(), [5.0, 5.0, 5.0])

def test_registry_is_weak() -> None:
  import gc
  from attograd.tensor.autograd import _grad_tensors
  n = len(_grad_tensors)
  t = Tensor([1.0], requires_grad=True)
  assert len(_grad_tensors) == n + 1
  del t
  gc.collect()
  assert len(_grad_tensors) == n

def test_unused_parameter_keeps_no_grad(device: str) -> None:
  w, unused = Tensor([1.0], requires_grad=True), Tensor([2.0], requires_grad=True)
  (w * 2).sum().backward()
  assert unused.grad is None

def test_detach_blocks(device: str) -> None:
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  y = (x.detach() * x).sum()   # d/dx treats the detached copy as a constant
  g, = y.gradient(x)
  np.testing.assert_allclose(g.numpy(), [1.0, 2.0, 3.0])
  z = (x.detach() * 2).sum()
  with pytest.raises(RuntimeError, match="not in the output.s graph"): z.gradient(x, materialize_grads=False)
  np.testing.assert_allclose(z.gradient(x)[0].numpy(), [0.0, 0.0, 0.0])
  z.backward()  # x is in z's graph only under the detach: zeros, as tinygrad gives
  np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0, 0.0])
  z.backward()  # and again, now that x has a .grad (a Tensor: checking it must not compare elementwise)
  np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0, 0.0])

def test_softmax_max_is_detached(device: str) -> None:
  # softmax subtracts a detached max; the gradient must still match the exact softmax Jacobian
  x = Tensor([1.0, 2.0, 3.0], dtype=dtypes.float64)
  s = x.softmax()
  g, = (s * Tensor([1.0, 0.0, 0.0], dtype=dtypes.float64)).sum().gradient(x)
  sv = s.numpy()
  np.testing.assert_allclose(g.numpy(), sv[0] * (np.eye(3)[0] - sv), rtol=1e-6)

def test_deep_chain_backward(device: str) -> None:
  # 10k nodes deep, and x's gradient is a sum 10k terms deep: the walk and the rule application are iterative
  x = Tensor([1.0, 2.0], requires_grad=True)
  y = x
  for _ in range(10_000): y = y + x
  y.sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [10_001.0, 10_001.0])

def test_deep_chain_gradient_graph(device: str) -> None:
  # the gradient graph alone (not realized: one fused kernel this deep takes long to compile)
  x = Tensor([0.5, 0.25])
  y = x
  for _ in range(5_000): y = (y * 1.0001).sin()
  g, = y.sum().gradient(x)
  assert g.shape == (2,) and len(g.uop.toposort()) > 10_000

# ***** errors and the API around gradients *****

def test_errors(device: str) -> None:
  x = Tensor([1.0, 2.0])
  with pytest.raises(RuntimeError, match=r"shape \(2,\)"): (x * 2).backward()
  with pytest.raises(ValueError, match=r"shape \(3,\)"): (x * 2).gradient(x, gradient=Tensor([1.0, 1.0, 1.0]))
  with pytest.raises(RuntimeError, match="float"): (x * 2).sum().gradient(Tensor([1, 2]))
  with pytest.raises(RuntimeError, match="float"): Tensor([1, 2]).sum().backward()

def test_gradient_is_lazy_and_differentiable(device: str) -> None:
  x = Tensor([1.0, 2.0])
  g, = (x * x * x).sum().gradient(x)
  assert isinstance(g, Tensor) and g.uop.op is not Ops.BUFFER   # a graph, not yet computed
  np.testing.assert_allclose(g.numpy(), [3.0, 12.0])

def test_train_context_and_decorator() -> None:
  assert Tensor.training is False
  with Tensor.train():
    assert Tensor.training is True
    with Tensor.train(False): assert Tensor.training is False
    assert Tensor.training is True
  assert Tensor.training is False
  @Tensor.train()
  def step() -> bool: return Tensor.training
  assert step() is True and Tensor.training is False

def test_compute_gradient_prunes(device: str) -> None:
  # only the nodes between the output and the targets get gradients
  a, b = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
  out = ((a * 2).exp() + b.sin()).sum()
  grads = compute_gradient(out.uop, Tensor(1.0).uop, {a.uop})
  assert a.uop in grads and b.uop not in grads and all(u.op is not Ops.SIN for u in grads)

# every op that can appear between a Tensor and its inputs has a gradient rule (leaves have no sources to
# differentiate); MULACC is made by the code generator only (codegen/fma.py), never in a tensor's graph
TENSOR_OPS = (GroupOp.ALU - {Ops.MULACC}) | GroupOp.Movement | {Ops.CAST, Ops.BITCAST, Ops.REDUCE_AXIS, Ops.CONTIGUOUS,
                                             Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY}

@pytest.mark.parametrize("op", sorted(TENSOR_OPS), ids=lambda o: o.name)
def test_every_op_has_a_rule(op: Ops) -> None:
  assert op in pm_gradient.pdict, f"pm_gradient has no rule for {op}"

def test_unasked_grad_dropped_at_a_write_it_reads(device: str) -> None:
  # an input's .grad reads the weight; nothing holds it but x, so the optimizer step drops it rather than computing it
  # (a kernel per step nobody reads), and reading it says why; one the caller holds, or one asked for with
  # requires_grad=True, is computed before the write and keeps the value at backward time
  from attograd import nn
  from attograd.tensor.autograd import StaleGradError
  w = Tensor([1.0, 2.0], requires_grad=True)
  x, held, asked = Tensor([3.0, 4.0]), Tensor([5.0, 6.0]), Tensor([7.0, 8.0], requires_grad=True)
  opt = nn.optim.SGD([w], lr=0.5)
  ((w * x).sum() + (w * held).sum()).backward()
  (w * asked).sum().backward()
  g = held.grad
  with Tensor.train(): opt.step()
  np.testing.assert_allclose(w.numpy(), [1.0 - 0.5 * 15.0, 2.0 - 0.5 * 18.0])
  with pytest.raises(StaleGradError, match="optimizer step"): _ = x.grad
  np.testing.assert_allclose(g.numpy(), [1.0, 2.0])
  np.testing.assert_allclose(held.grad.numpy(), [1.0, 2.0])
  np.testing.assert_allclose(asked.grad.numpy(), [1.0, 2.0])
  (w * x).sum().backward()  # a new backward starts a fresh .grad
  np.testing.assert_allclose(x.grad.numpy(), w.numpy())
