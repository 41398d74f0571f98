"""nn.optim.Muon and newton_schulz against a NumPy reference of tinygrad 0.14's update, on every device."""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
from attograd import Context, Tensor, dtypes
from attograd.nn.optim import Muon, newton_schulz

NS_COEFFS = (3.4445, -4.775, 2.0315)

@pytest.fixture(autouse=True)
def training() -> Any:
  with Context(TRAINING=1): yield

def np_newton_schulz(x: np.ndarray, steps: int, coeffs: tuple[float, ...], eps: float = 1e-7) -> np.ndarray:
  if x.shape[-2] > x.shape[-1]: return np_newton_schulz(x.swapaxes(-2, -1), steps, coeffs, eps).swapaxes(-2, -1)
  g = x / (np.sqrt((x * x).sum(axis=(-2, -1), keepdims=True)) + eps)
  for _ in range(steps):
    a = g @ g.swapaxes(-2, -1)
    g = sum(c * np.linalg.matrix_power(a, i) @ g for i, c in enumerate(coeffs))
  return g

def np_muon(ws: list[np.ndarray], grads: list[list[np.ndarray]], lr: float = 0.001, momentum: float = 0.95,
            weight_decay: float = 0.1, ns_steps: int = 5, ns_coefficients: tuple[float, ...] | None = NS_COEFFS,
            nesterov: bool = True) -> list[np.ndarray]:
  """The update written from the paper and tinygrad's semantics: b = m*b + g; g' = g + m*b (nesterov) or b;
  orthogonalize g' seen as (shape[0], -1); w = w*(1 - lr*wd) - lr*g'."""
  ws, bs = [w.astype(np.float64) for w in ws], [np.zeros(w.shape) for w in ws]
  for step_grads in grads:
    for i, g in enumerate(step_grads):
      g = g.astype(np.float64)
      if momentum:
        bs[i] = momentum * bs[i] + g
        g = g + momentum * bs[i] if nesterov else bs[i]
      if ns_coefficients is not None:
        g = np_newton_schulz(g.reshape(g.shape[0] if g.ndim else 1, -1), ns_steps, ns_coefficients).reshape(g.shape)
      ws[i] = ws[i] * (1 - lr * weight_decay) - lr * g
  return ws

# wide, tall (done transposed), a conv weight (as 4 x 18), a bias (a column), a scalar
SHAPES = [(4, 6), (8, 3), (4, 2, 3, 3), (5,), ()]

def run(device: str, steps: int = 3, **kw: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
  rng = np.random.default_rng(0)
  w0 = [rng.uniform(-1, 1, s).astype(np.float32) for s in SHAPES]
  grads = [[rng.uniform(-1, 1, s).astype(np.float32) for s in SHAPES] for _ in range(steps)]
  ps = [Tensor(w, device=device, requires_grad=True) for w in w0]
  opt = Muon(ps, **kw)
  for step_grads in grads:
    for p, g in zip(ps, step_grads): p.grad = Tensor(g, device=device)
    opt.step()
  return [p.numpy() for p in ps], np_muon(w0, grads, **kw)

@pytest.mark.parametrize("kw", [
  pytest.param({}, id="defaults"),
  pytest.param({"lr": 0.02}, id="lr"),
  pytest.param({"lr": 0.02, "nesterov": False, "weight_decay": 0.0}, id="plain-momentum"),
  pytest.param({"lr": 0.05, "momentum": 0.0, "ns_steps": 2}, id="no-momentum"),
  pytest.param({"lr": 0.05, "ns_coefficients": (2.0, -1.5, 0.5), "ns_steps": 4}, id="cubic"),
  pytest.param({"lr": 0.05, "ns_coefficients": None}, id="no-orthogonalization"),
])
def test_muon_matches_numpy(device: str, kw: dict[str, Any]) -> None:
  got, ref = run(device, **kw)
  for g, r, s in zip(got, ref, SHAPES):
    assert g.shape == s and g.dtype == np.float32
    np.testing.assert_allclose(g, r, rtol=1e-4, atol=2e-5, err_msg=f"shape {s}")

def test_muon_orthogonalizes() -> None:
  # a gradient with singular values 59, 1.1 and 0.11 (condition ~500) becomes one with all of them in [0.6, 1.2]
  # after the default 5 steps: the step has about the same size in every direction
  g = np.diag([30.0, 1.0, 0.1]).astype(np.float32) @ np.random.default_rng(1).normal(size=(3, 7)).astype(np.float32)
  assert np.linalg.cond(g) > 400
  sv = np.linalg.svd(newton_schulz(Tensor(g), 5, NS_COEFFS).numpy(), compute_uv=False)
  assert sv.min() > 0.6 and sv.max() < 1.2, sv
  np.testing.assert_allclose(newton_schulz(Tensor(g), 5, NS_COEFFS).numpy(), np_newton_schulz(g, 5, NS_COEFFS),
                             rtol=1e-4, atol=1e-5)
  batched = np.random.default_rng(2).normal(size=(2, 5, 3)).astype(np.float32)  # leading dims are a batch
  np.testing.assert_allclose(newton_schulz(Tensor(batched), 3, NS_COEFFS).numpy(),
                             np_newton_schulz(batched, 3, NS_COEFFS), rtol=1e-4, atol=1e-5)

def test_muon_keeps_the_param_dtype() -> None:
  w = Tensor(np.ones((4, 4), np.float16), requires_grad=True)
  opt = Muon([w], lr=0.1)
  w.grad = Tensor(np.eye(4, dtype=np.float16))
  opt.step()
  assert w.dtype is dtypes.float16 and opt.b[0].dtype is dtypes.float16
  ref = np_muon([np.ones((4, 4))], [[np.eye(4)]], lr=0.1)[0]
  np.testing.assert_allclose(w.numpy().astype(np.float64), ref, rtol=5e-3, atol=5e-3)

def test_muon_trains_a_linear_fit() -> None:
  rng = np.random.default_rng(3)
  X, W = rng.normal(size=(64, 8)).astype(np.float32), rng.normal(size=(8, 4)).astype(np.float32)
  w = Tensor.zeros(8, 4, requires_grad=True)
  opt = Muon([w], lr=0.1, weight_decay=0.0)
  losses = []
  for _ in range(40):
    opt.zero_grad()
    loss = ((Tensor(X) @ w - Tensor(X @ W)) ** 2).mean()
    loss.backward()
    losses.append(loss.item())
    opt.step()
  assert losses[-1] < 0.1 * losses[0], losses

def test_muon_errors() -> None:
  w = Tensor.ones(2, 2, requires_grad=True)
  with pytest.raises(ValueError, match="Muon: momentum must be >= 0, got -0.1"): Muon([w], momentum=-0.1)
  with pytest.raises(ValueError, match="Muon: weight_decay must be >= 0, got -1"): Muon([w], weight_decay=-1)
  with pytest.raises(ValueError, match="Muon: ns_steps must be an int >= 0, got 2.5"): Muon([w], ns_steps=2.5)  # type: ignore
  with pytest.raises(ValueError, match=r"Muon: ns_coefficients must be a non-empty sequence"):
    Muon([w], ns_coefficients=())
  with pytest.raises(ValueError, match=r"newton_schulz: needs a matrix \(2 or more dims\), got shape \(3,\)"):
    newton_schulz(Tensor([1.0, 2.0, 3.0]), 5, NS_COEFFS)
  with Context(TRAINING=0):
    w.grad = Tensor.ones(2, 2)
    with pytest.raises(RuntimeError, match="Muon.step: TRAINING is 0"): Muon([w]).step()

def test_muon_matches_torch_on_wide_matrices(monkeypatch) -> None:
  # torch.optim.Muon (2-D params only) scales lr by sqrt(max(1, rows/cols)); tinygrad doesn't, so they agree where
  # rows <= cols. Its momentum is an EMA (buf = m*buf + (1-m)*g), (1-m) times tinygrad's, a scale the normalization
  # in Newton-Schulz removes. torch iterates Newton-Schulz in bfloat16 (its result is ~2% off the exact one), so here
  # it runs the float64 reference instead: this pins the rest of the update (momentum, nesterov, decay, lr).
  torch = pytest.importorskip("torch")
  import torch.optim._muon as torch_muon
  def exact_ns(grad: Any, coeffs: tuple[float, ...], steps: int, eps: float) -> Any:
    return torch.from_numpy(np_newton_schulz(grad.double().numpy(), steps, coeffs, eps)).to(grad.dtype)
  monkeypatch.setattr(torch_muon, "_zeropower_via_newtonschulz", exact_ns)
  rng = np.random.default_rng(5)
  x0, w0 = rng.normal(size=(1, 4)).astype(np.float32), rng.normal(size=(4, 6)).astype(np.float32)
  for kw in (dict(lr=0.05, momentum=0.9, weight_decay=0.05, ns_steps=4), dict(lr=0.02, nesterov=False)):
    x, w = Tensor(x0, requires_grad=True), Tensor(w0, requires_grad=True)
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    opt, topt = Muon([x, w], **kw), torch.optim.Muon([tx, tw], **kw)  # type: ignore[arg-type]
    for _ in range(3):
      opt.zero_grad()
      (x @ w).relu().log_softmax(1).sum().backward()
      opt.step()
      topt.zero_grad()
      (tx @ tw).relu().log_softmax(1).sum().backward()
      topt.step()
    for ours, theirs, start in ((x, tx, x0), (w, tw, w0)):
      np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-5)
      assert np.abs(ours.numpy() - start).max() > 1e-2  # the steps moved the weights
