"""Optimizers: update sequences vs torch.optim (or a NumPy reference where torch has none), one realize per step,
lr as a tensor, parameter bookkeeping, and small end-to-end fits through autograd."""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest
import attograd.tensor.core
from attograd import Context, Tensor
from attograd.engine import realize as engine_realize
from attograd.nn import Linear
from attograd.nn.optim import LAMB, LARS, SGD, Adam, AdamW, Optimizer, OptimizerGroup

torch = pytest.importorskip("torch")

@pytest.fixture(autouse=True)
def training() -> Any:
  """Optimizers step only in training (the TRAINING flag): every test here runs inside one."""
  with Context(TRAINING=1): yield

def test_step_needs_training() -> None:
  w = Tensor([1.0, 2.0], requires_grad=True)
  opt = SGD([w], lr=0.1)
  w.grad = Tensor([1.0, 1.0])
  with Context(TRAINING=0):
    with pytest.raises(RuntimeError, match=r"SGD.step: TRAINING is 0.*Context\(TRAINING=1\)"): opt.step()
    with pytest.raises(RuntimeError, match="TRAINING"): opt.schedule_step()
    np.testing.assert_equal(w.numpy(), [1.0, 2.0])  # nothing was written
    with Tensor.train(): opt.step()  # Tensor.train() is the same switch
  np.testing.assert_allclose(w.numpy(), [0.9, 1.9], rtol=1e-6)

SHAPES = [(3, 4), (5,), ()]  # a matrix, a vector and a scalar parameter
STEPS = 3

def init_params(seed: int = 0) -> list[np.ndarray]:
  rng = np.random.default_rng(seed)
  return [rng.uniform(-1, 1, s).astype(np.float32) for s in SHAPES]

def grads_for(step: int) -> list[np.ndarray]:
  rng = np.random.default_rng(100 + step)
  return [rng.uniform(-1, 1, s).astype(np.float32) for s in SHAPES]

MakeOpt = Callable[[list[Tensor]], Optimizer]

def run_ours(make: MakeOpt, steps: int = STEPS, lrs: list[float] | None = None) -> list[np.ndarray]:
  params = [Tensor(p, requires_grad=True) for p in init_params()]
  opt = make(params)
  for i in range(steps):
    if lrs is not None: opt.lr = lrs[i]  # type: ignore[assignment]  # a number is written into the lr tensor
    for p, g in zip(params, grads_for(i)): p.grad = Tensor(g)
    opt.step()
  return [p.numpy() for p in params]

def run_torch(make: Callable[[list[Any]], Any], steps: int = STEPS, lrs: list[float] | None = None) -> list[np.ndarray]:
  params = [torch.tensor(p, requires_grad=True) for p in init_params()]
  opt = make(params)
  for i in range(steps):
    if lrs is not None:
      for group in opt.param_groups: group["lr"] = lrs[i]
    for p, g in zip(params, grads_for(i)): p.grad = torch.tensor(g)
    opt.step()
  return [p.detach().numpy() for p in params]

def check(ours: list[np.ndarray], ref: list[np.ndarray], atol: float = 1e-6, rtol: float = 1e-6) -> None:
  for o, r in zip(ours, ref):
    assert o.shape == r.shape
    np.testing.assert_allclose(o, r, atol=atol, rtol=rtol)

# ***** update sequences vs torch.optim *****

TORCH_CASES: dict[str, tuple[MakeOpt, Callable[[list[Any]], Any]]] = {
  "sgd": (lambda ps: SGD(ps, lr=0.1), lambda ps: torch.optim.SGD(ps, lr=0.1)),
  "sgd_momentum": (lambda ps: SGD(ps, lr=0.1, momentum=0.9), lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
  "sgd_nesterov": (lambda ps: SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
                   lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True)),
  "sgd_weight_decay": (lambda ps: SGD(ps, lr=0.1, weight_decay=0.1),
                       lambda ps: torch.optim.SGD(ps, lr=0.1, weight_decay=0.1)),
  "sgd_all": (lambda ps: SGD(ps, lr=0.05, momentum=0.8, weight_decay=0.01, nesterov=True),
              lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, weight_decay=0.01, nesterov=True)),
  "adam": (lambda ps: Adam(ps, lr=0.01), lambda ps: torch.optim.Adam(ps, lr=0.01)),
  "adam_betas": (lambda ps: Adam(ps, lr=0.02, b1=0.8, b2=0.99, eps=1e-6),
                 lambda ps: torch.optim.Adam(ps, lr=0.02, betas=(0.8, 0.99), eps=1e-6)),
  "adam_l2": (lambda ps: Adam(ps, lr=0.01, weight_decay=0.1),
              lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1)),
  "adamw": (lambda ps: AdamW(ps, lr=0.01), lambda ps: torch.optim.AdamW(ps, lr=0.01)),
  "adamw_decay": (lambda ps: AdamW(ps, lr=0.01, weight_decay=0.2),
                  lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.2)),
}

@pytest.mark.parametrize("case", list(TORCH_CASES))
def test_matches_torch(device: str, case: str) -> None:
  ours, ref = TORCH_CASES[case]
  check(run_ours(ours), run_torch(ref))

def test_lr_change_between_steps_matches_torch(device: str) -> None:
  lrs = [0.1, 0.03, 0.2]
  check(run_ours(lambda ps: SGD(ps, lr=1.0, momentum=0.9), lrs=lrs),
        run_torch(lambda ps: torch.optim.SGD(ps, lr=1.0, momentum=0.9), lrs=lrs))
  # steps of ~lr: float32 rounding of the weights is a few 1e-6
  ours = run_ours(lambda ps: Adam(ps, lr=1.0), lrs=lrs)
  check(ours, run_torch(lambda ps: torch.optim.Adam(ps, lr=1.0), lrs=lrs), atol=1e-5)

# ***** LARS, LAMB and classic SGD vs NumPy references (torch has none) *****

def np_lars(lr: float, momentum: float, wd: float, nesterov: bool, classic: bool, tcoef: float) -> list[np.ndarray]:
  ps = [p.astype(np.float64) for p in init_params()]
  bs = [np.zeros_like(p) for p in ps]
  for i in range(STEPS):
    for j, g in enumerate(grads_for(i)):
      w, g = ps[j], g.astype(np.float64)
      r = 1.0
      if tcoef:
        r1, r2 = np.sqrt((w * w).sum()), np.sqrt((g * g).sum())
        r = tcoef * r1 / (r2 + wd * r1) if r1 > 0 and r2 > 0 else 1.0
      g = g + wd * w
      if classic: g = g * r * lr
      if momentum:
        bs[j] = momentum * bs[j] + g
        g = g + momentum * bs[j] if nesterov else bs[j]
      if not classic: g = g * r * lr
      ps[j] = w - g
  return ps

def np_lamb(lr: float, b1: float, b2: float, eps: float, wd: float, adam: bool) -> list[np.ndarray]:
  ps = [p.astype(np.float64) for p in init_params()]
  ms, vs = [np.zeros_like(p) for p in ps], [np.zeros_like(p) for p in ps]
  for i in range(STEPS):
    for j, g in enumerate(grads_for(i)):
      w, g = ps[j], g.astype(np.float64)
      ms[j] = b1 * ms[j] + (1 - b1) * g
      vs[j] = b2 * vs[j] + (1 - b2) * g * g
      up = ms[j] / (1 - b1 ** (i + 1)) / (np.sqrt(vs[j] / (1 - b2 ** (i + 1))) + eps) + wd * w
      r = 1.0
      if not adam:
        r1, r2 = np.sqrt((w * w).sum()), np.sqrt((up * up).sum())
        r = r1 / r2 if r1 > 0 and r2 > 0 else 1.0
      ps[j] = w - lr * r * up
  return ps

@pytest.mark.parametrize("kw", [{}, {"nesterov": True}, {"classic": False}, {"momentum": 0.0}, {"tcoef": 0.0},
                                {"weight_decay": 0.0}])
def test_lars_matches_numpy(device: str, kw: dict[str, Any]) -> None:
  args: dict[str, Any] = {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-2, "nesterov": False, "classic": True,
                          "tcoef": 0.02, **kw}
  ref = np_lars(args["lr"], args["momentum"], args["weight_decay"], args["nesterov"], args["classic"], args["tcoef"])
  check(run_ours(lambda ps: LARS(ps, **args)), ref, atol=1e-5, rtol=1e-5)

def test_sgd_classic_momentum_matches_numpy(device: str) -> None:
  ref = np_lars(0.1, 0.9, 0.0, False, True, 0.0)
  check(run_ours(lambda ps: SGD(ps, lr=0.1, momentum=0.9, classic=True)), ref, atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("kw", [{}, {"weight_decay": 0.1}, {"adam": True}, {"b1": 0.5, "b2": 0.9, "eps": 1e-4}])
def test_lamb_matches_numpy(device: str, kw: dict[str, Any]) -> None:
  args: dict[str, Any] = {"lr": 0.01, "b1": 0.9, "b2": 0.999, "eps": 1e-6, "weight_decay": 0.0, "adam": False, **kw}
  ref = np_lamb(args["lr"], args["b1"], args["b2"], args["eps"], args["weight_decay"], args["adam"])
  check(run_ours(lambda ps: LAMB(ps, **args)), ref, atol=1e-5, rtol=1e-5)

def test_lamb_zero_weight_is_unscaled(device: str) -> None:
  w = Tensor.zeros(3).contiguous()
  opt = LAMB([w], lr=0.1)
  w.grad = Tensor([1.0, -1.0, 0.5])
  opt.step()  # |w| = 0: the trust ratio falls back to 1, so this is an Adam step
  np.testing.assert_allclose(w.numpy(), [-0.1, 0.1, -0.1], atol=1e-5)

# ***** one realize per step *****

def count_schedules(fn: Callable[[], None], monkeypatch: pytest.MonkeyPatch) -> int:
  calls = [0]
  real = attograd.tensor.core.create_schedule
  def counting(*args: Any, **kwargs: Any) -> Any:
    calls[0] += 1
    return real(*args, **kwargs)
  with monkeypatch.context() as m:
    m.setattr(attograd.tensor.core, "create_schedule", counting)
    fn()
  return calls[0]

@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.1), lambda ps: SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: Adam(ps), lambda ps: LAMB(ps), lambda ps: LARS(ps),
                                  lambda ps: OptimizerGroup(SGD(ps[:1], lr=0.1), Adam(ps[1:]))],
                         ids=["sgd", "sgd_momentum", "adam", "lamb", "lars", "group"])
def test_step_is_one_realize(device: str, monkeypatch: pytest.MonkeyPatch, make: MakeOpt) -> None:
  params = [Tensor(p) for p in init_params()]  # requires_grad None: the optimizer turns it on
  opt = make(params)
  assert all(p.requires_grad for p in params)
  for i in range(2):
    gs = grads_for(i)
    for p, g in zip(params, gs): p.grad = Tensor(g) * 2  # lazy gradients are computed in the same realize
    assert count_schedules(opt.step, monkeypatch) == 1

def test_adam_over_lazy_weights_is_one_realize(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
  # layer weights initialized lazily (random numbers) and Adam's zero state get their buffers in one realize: on a
  # first run two schedules were two rounds of compiler runs (MNIST's first step: 6 -> 5 schedules)
  from attograd import nn
  layers = [Linear(3, 4), Linear(4, 2)]
  params = nn.state.get_parameters(layers)
  assert any(p.uop.base.op.name != "BUFFER" for p in params)  # lazily initialized
  opt: list[Adam] = []
  assert count_schedules(lambda: opt.append(Adam(params)), monkeypatch) == 1
  bufs = [p.uop.base for p in params] + [s.uop.base for s in opt[0].m + opt[0].v]
  assert all(b.op.name == "BUFFER" for b in bufs) and len({id(b.buffer) for b in bufs}) == len(bufs)
  assert all(not s.numpy().any() for s in opt[0].m + opt[0].v)
  x = Tensor(np.ones((2, 3), np.float32))
  x.sequential(layers).sum().backward()
  opt[0].step()  # every parameter and state tensor written in place in its own buffer
  assert all(s.numpy().any() for s in opt[0].m)

def test_lazy_loss_read_after_step_is_in_the_step_schedule(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
  # a lazy loss held across opt.step() keeps its value (computed from the old weights) and is computed in the step's
  # own schedule, before the writes: it was a schedule of its own first (the MNIST first step's 9 kernels)
  params = [Tensor(p) for p in init_params()]
  opt = Adam(params, lr=0.5)
  x = Tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
  def loss_of() -> Tensor: return (x @ params[0]).relu().square().mean()
  expected = loss_of().item()
  loss = loss_of()
  loss.backward()
  before = params[0].numpy().copy()
  assert count_schedules(opt.step, monkeypatch) == 1
  assert not np.allclose(params[0].numpy(), before)  # the step wrote the weights
  np.testing.assert_allclose(loss.item(), expected, rtol=1e-6)
  assert loss_of().item() != pytest.approx(expected)  # computed again now: the new weights

def test_sgd_step_kernels(device: str) -> None:
  from attograd import GlobalCounters
  params = [Tensor(p) for p in init_params()]
  opt = SGD(params, lr=0.1)
  for p, g in zip(params, grads_for(0)): p.grad = Tensor(g)
  GlobalCounters.reset()
  opt.step()
  assert GlobalCounters.kernel_count == len(params)  # realized gradients: one in-place update kernel per parameter

def test_lr_change_does_not_recompile(device: str) -> None:
  params = [Tensor(p) for p in init_params()]
  opt = Adam(params, lr=0.1)
  def step() -> None:
    for p, g in zip(params, grads_for(0)): p.grad = Tensor(g)
    opt.step()
  step()
  opt.lr = Tensor([0.05])  # the first write compiles the (copy) kernel that writes lr
  step()
  n = len(engine_realize._runners)
  opt.lr = 0.01  # type: ignore[assignment]
  step()
  opt.lr.assign(Tensor([0.02]))
  step()
  assert len(engine_realize._runners) == n
  assert opt.lr.tolist() == pytest.approx([0.02])

def test_loss_realized_with_step_sees_old_weights(device: str) -> None:
  w = Tensor([1.0, 2.0])
  opt = SGD([w], lr=0.5)
  loss = (w * w).sum()
  w.grad = Tensor([1.0, 1.0])
  loss.realize(*opt.schedule_step())
  assert loss.item() == pytest.approx(5.0)
  np.testing.assert_allclose(w.numpy(), [0.5, 1.5])

# ***** safety of writing everything in one schedule *****

def test_gradients_reading_other_params_through_views(device: str) -> None:
  # q's gradient reads p reversed and p's reads q reversed: both must see the values from before the step
  pn, qn = np.array([1.0, 2.0, 3.0], np.float32), np.array([10.0, 20.0, 30.0], np.float32)
  p, q = Tensor(pn), Tensor(qn)
  opt = SGD([p, q], lr=0.1)
  p.grad, q.grad = q.flip(0) * 1.0, p.flip(0) + 0.0
  opt.step()
  np.testing.assert_allclose(p.numpy(), pn - 0.1 * qn[::-1], atol=1e-6)
  np.testing.assert_allclose(q.numpy(), qn - 0.1 * pn[::-1], atol=1e-6)

def test_equal_constant_params_stay_separate(device: str) -> None:
  a, b = Tensor.zeros(3), Tensor.zeros(3)  # one node: the optimizer must give each its own buffer
  opt = SGD([a, b], lr=1.0)
  a.grad, b.grad = Tensor([1.0, 1.0, 1.0]), Tensor([2.0, 2.0, 2.0])
  opt.step()
  assert a.tolist() == [-1.0, -1.0, -1.0]
  assert b.tolist() == [-2.0, -2.0, -2.0]
  assert Tensor.zeros(3).tolist() == [0.0, 0.0, 0.0]

def test_adam_state_tensors_are_separate(device: str) -> None:
  w = Tensor([1.0, 2.0])
  opt = Adam([w], lr=0.1, b1=0.5, b2=0.25)
  w.grad = Tensor([1.0, -1.0])
  opt.step()
  assert opt.m[0].tolist() == pytest.approx([0.5, -0.5])
  assert opt.v[0].tolist() == pytest.approx([0.75, 0.75])
  assert opt.b1_t.tolist() == pytest.approx([0.5]) and opt.b2_t.tolist() == pytest.approx([0.25])

def test_cached_results_are_not_reused_after_a_step(device: str) -> None:
  w = Tensor([1.0, 2.0])
  x = Tensor([3.0, 4.0])
  opt = SGD([w], lr=1.0)
  assert (w * x).sum().item() == 11.0
  w.grad = Tensor([1.0, 1.0])
  opt.step()
  assert (w * x).sum().item() == 4.0  # the same graph over the updated weights is computed again

# ***** parameters, grads and errors *****

def test_requires_grad_bookkeeping(device: str) -> None:
  a, b, c = Tensor([1.0]), Tensor([2.0], requires_grad=True), Tensor([3.0], requires_grad=False)
  opt = SGD([a, b, c, a], lr=0.1)
  assert a.requires_grad is True and c.requires_grad is False
  assert [id(p) for p in opt.params] == [id(a), id(b)]
  assert [id(x) for x in opt.buffers] == [id(c)]
  with pytest.raises(ValueError, match="no parameters"): SGD([], lr=0.1)
  with pytest.raises(ValueError, match="no parameters"): SGD([Tensor([1.0], requires_grad=False)])

def test_zero_grad_and_missing_grads(device: str) -> None:
  a, b = Tensor([1.0]), Tensor([2.0])
  opt = SGD([a, b], lr=0.5)
  with pytest.raises(RuntimeError, match="backward"): opt.step()
  a.grad = Tensor([1.0])
  opt.step()  # b has no grad: skipped, as in PyTorch
  assert a.item() == 0.5 and b.item() == 2.0
  opt.zero_grad()
  assert a.grad is None and b.grad is None

def test_bad_grad_shape(device: str) -> None:
  a = Tensor([1.0, 2.0])
  opt = SGD([a])
  a.grad = Tensor([1.0])
  with pytest.raises(ValueError, match=r"shape \(2,\).*shape \(1,\)"): opt.step()

def test_bad_lr(device: str) -> None:
  opt = SGD([Tensor([1.0])], lr=0.1)
  with pytest.raises(ValueError, match="single value"): opt.lr = Tensor([0.1, 0.2])
  with pytest.raises(ValueError, match="single value"): SGD([Tensor([1.0])], lr=Tensor([0.1, 0.2]))

def test_lr_tensor_is_shared(device: str) -> None:
  lr = Tensor([0.5])
  w = Tensor([1.0])
  opt = SGD([w], lr=lr)
  lr.assign(Tensor([0.25]))  # the optimizer reads the caller's tensor
  w.grad = Tensor([1.0])
  opt.step()
  assert w.item() == 0.75

def test_nesterov_needs_momentum() -> None:
  with pytest.raises(ValueError, match="nesterov"): SGD([Tensor([1.0])], nesterov=True)

def test_optimizer_group(device: str) -> None:
  a, b = Tensor([1.0]), Tensor([1.0])
  opt = OptimizerGroup(SGD([a], lr=0.1), Adam([b], lr=0.5))
  assert isinstance(opt[1], Adam) and len(opt.params) == 2
  a.grad, b.grad = Tensor([1.0]), Tensor([1.0])
  opt.step()
  assert a.item() == pytest.approx(0.9) and b.item() == pytest.approx(0.5, abs=1e-5)
  opt.zero_grad()
  assert a.grad is None and b.grad is None

def test_float16_params(device: str) -> None:
  w = Tensor([1.0, 2.0], dtype="float16")
  opt = Adam([w], lr=0.1)
  w.grad = Tensor([1.0, -1.0], dtype="float16")
  opt.step()
  assert w.dtype.name == "float16"
  np.testing.assert_allclose(w.numpy().astype(np.float32), [0.9, 2.1], atol=1e-3)

# ***** end to end through autograd *****

needs_backward = pytest.mark.skipif(not hasattr(Tensor, "backward"), reason="Tensor.backward isn't available yet")

@needs_backward
@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.1), lambda ps: SGD(ps, lr=0.05, momentum=0.9),
                                  lambda ps: Adam(ps, lr=0.1), lambda ps: AdamW(ps, lr=0.1, weight_decay=0.0)],
                         ids=["sgd", "sgd_momentum", "adam", "adamw"])
def test_fit_line(device: str, make: MakeOpt) -> None:
  Tensor.manual_seed(0)
  xn = np.linspace(-1, 1, 16, dtype=np.float32).reshape(16, 1)
  x, y = Tensor(xn), Tensor(2 * xn + 1)
  model = Linear(1, 1)
  opt = make([model.weight, model.bias])  # type: ignore[list-item]
  for _ in range(150):
    opt.zero_grad()
    loss = (model(x) - y).square().mean()
    loss.backward()
    opt.step()
  assert model.weight.item() == pytest.approx(2.0, abs=0.05)
  assert model.bias.item() == pytest.approx(1.0, abs=0.05)  # type: ignore[union-attr]

@needs_backward
def test_mlp_training_matches_torch(device: str) -> None:
  rng = np.random.default_rng(0)
  xn, yn = rng.uniform(-1, 1, (8, 4)).astype(np.float32), rng.uniform(-1, 1, (8, 2)).astype(np.float32)
  tl1, tl2 = torch.nn.Linear(4, 6), torch.nn.Linear(6, 2)
  l1, l2 = Linear(4, 6), Linear(6, 2)
  for ours, ref in ((l1, tl1), (l2, tl2)):
    ours.weight, ours.bias = Tensor(ref.weight.detach().numpy()), Tensor(ref.bias.detach().numpy())
  opt = Adam([l1.weight, l1.bias, l2.weight, l2.bias], lr=0.05)  # type: ignore[list-item]
  topt = torch.optim.Adam([*tl1.parameters(), *tl2.parameters()], lr=0.05)
  x, y, tx, ty = Tensor(xn), Tensor(yn), torch.tensor(xn), torch.tensor(yn)
  for _ in range(4):
    opt.zero_grad()
    loss = (l2(l1(x).relu()) - y).square().mean()
    loss.backward()
    loss_value = loss.item()  # read before step: the step writes the weights in place
    opt.step()
    topt.zero_grad()
    tloss = (tl2(tl1(tx).relu()) - ty).square().mean()
    tloss.backward()
    topt.step()
    assert loss_value == pytest.approx(tloss.item(), rel=1e-5)
  np.testing.assert_allclose(l1.weight.numpy(), tl1.weight.detach().numpy(), atol=1e-5)
  np.testing.assert_allclose(l2.bias.numpy(), tl2.bias.detach().numpy(), atol=1e-5)  # type: ignore[union-attr]

@needs_backward
def test_optimizer_made_after_the_forward_pass(device: str) -> None:
  Tensor.manual_seed(0)
  layer = Linear(3, 2)  # lazy random weights: the optimizer realizes them, and the graph below must still reach them
  loss = layer(Tensor([[1.0, 2.0, 3.0]])).sum()
  opt = SGD([layer.weight, layer.bias], lr=0.1)  # type: ignore[list-item]
  w0 = layer.weight.numpy()
  loss.backward()
  opt.step()
  np.testing.assert_allclose(layer.weight.numpy(), w0 - 0.1 * np.array([[1.0, 2.0, 3.0]] * 2), atol=1e-6)

@needs_backward
def test_conv_batchnorm_training_matches_torch(device: str) -> None:
  from attograd.nn import BatchNorm2d, Conv2d
  torch.manual_seed(0)
  tconv, tbn, tfc = torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.Linear(3, 2)
  conv, bn, fc = Conv2d(2, 3, 3), BatchNorm2d(3), Linear(3, 2)
  for ours, ref in ((conv, tconv), (bn, tbn), (fc, tfc)):
    for name, v in ref.state_dict().items(): getattr(ours, name).assign(Tensor(v.numpy()))  # keeps requires_grad
  params = [conv.weight, conv.bias, bn.weight, bn.bias, fc.weight, fc.bias, bn.running_mean, bn.running_var]
  opt = SGD(params, lr=0.1, momentum=0.9)  # type: ignore[arg-type]
  assert len(opt.params) == 6 and len(opt.buffers) == 2  # running statistics have requires_grad=False
  topt = torch.optim.SGD([*tconv.parameters(), *tbn.parameters(), *tfc.parameters()], lr=0.1, momentum=0.9)
  rng = np.random.default_rng(0)
  for _ in range(3):
    xn, yn = rng.uniform(-1, 1, (4, 2, 5, 5)).astype(np.float32), rng.uniform(-1, 1, (4, 2)).astype(np.float32)
    with Tensor.train():
      opt.zero_grad()
      loss = (fc(bn(conv(Tensor(xn))).relu().mean((2, 3))) - Tensor(yn)).square().mean()
      loss.backward()
      opt.step()
    topt.zero_grad()
    tloss = (tfc(tbn(tconv(torch.tensor(xn))).relu().mean((2, 3))) - torch.tensor(yn)).square().mean()
    tloss.backward()
    topt.step()
  np.testing.assert_allclose(conv.weight.numpy(), tconv.weight.detach().numpy(), atol=1e-5)
  np.testing.assert_allclose(bn.bias.numpy(), tbn.bias.detach().numpy(), atol=1e-5)  # type: ignore[union-attr]
  np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), atol=1e-5)

def test_optimizer_base_class_needs_a_step_rule() -> None:
  from attograd.nn.optim import Optimizer
  with pytest.raises(TypeError, match="defines _step"): Optimizer([Tensor([1.0], requires_grad=True)], lr=0.1)
