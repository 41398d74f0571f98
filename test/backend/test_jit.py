"""TinyJit: replayed calls give the non-jitted results (inputs, kwargs, Variables, return structures, a training step),
replays don't schedule or compile, a call whose plain arguments differ from a capture's (values, containers, float
bits, the instance of a jitted method) runs and captures anew, one whose Tensor inputs differ (shapes, dtypes, views)
raises JitError as in tinygrad, misuse raises a clear error, and JIT=0 turns it off."""
from __future__ import annotations
import gc, struct, time
from typing import Any
import numpy as np
import pytest
import attograd.engine.realize as engine_realize
import attograd.tensor.core
from attograd import Context, Device, Tensor, TinyJit, Variable, dtypes, nn
from attograd.engine.jit import JitError
from attograd.tensor.jit import TinyJit as TinyJit2
from attograd.engine.memory import PooledBuffer
from attograd.engine.buffers import buffers
from attograd.uop.ops import Ops, UOp, UOpMetaClass

def rnd(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def test_exported() -> None: assert TinyJit is TinyJit2

def test_replay_matches(device: str) -> None:
  calls = []
  @TinyJit
  def f(x: Tensor, y: Tensor) -> Tensor:
    calls.append(1)
    return (x @ y + 1).relu().sum(axis=1)
  for i in range(5):
    a, b = rnd(3, 4, seed=i), rnd(4, 5, seed=10 + i)
    np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), np.maximum(a @ b + 1, 0).sum(1), rtol=1e-5, atol=1e-5)
  assert len(calls) == 2 and f.cnt == 5  # run, capture, then three replays that don't call the function

def test_replay_does_not_schedule_or_compile(monkeypatch: pytest.MonkeyPatch) -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x * 2).sum() + x.max()
  for i in range(2): f(Tensor(rnd(8, seed=i)))
  counts = {"schedule": 0, "runner": 0}
  real_sched, real_runner = attograd.tensor.core.create_schedule, engine_realize.get_runner
  def sched(*a: Any) -> Any:
    counts["schedule"] += 1
    return real_sched(*a)
  def runner(*a: Any) -> Any:
    counts["runner"] += 1
    return real_runner(*a)
  monkeypatch.setattr(attograd.tensor.core, "create_schedule", sched)
  monkeypatch.setattr(engine_realize, "get_runner", runner)
  x = rnd(8, seed=5)
  out = f(Tensor(x))
  assert counts == {"schedule": 0, "runner": 0}
  np.testing.assert_allclose(out.numpy(), (x * 2).sum() + x.max(), rtol=1e-5)

def test_plain_inputs_shortcut_matches_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
  # the replay's one-pass preparation of Tensor-only calls must give what the general path gives, and stand aside
  # for every call it doesn't cover
  import attograd.tensor.jit as tjit
  a, b = Tensor(rnd(3, 4, seed=1)).realize(), Tensor(rnd(12, seed=2)).realize().reshape(3, 4)
  lazy, strided = a + 1, Tensor(rnd(4, 3, seed=3)).realize().T
  b.requires_grad = True
  for args in [(a, b), (a,), ()]:
    fast = tjit._prepare_inputs(args, {}, 0)
    with monkeypatch.context() as m:
      m.setattr(tjit, "_plain_inputs", lambda *_: None)
      general = tjit._prepare_inputs(args, {}, 0)
    assert fast[0] is args and fast[2:4] == general[2:4] and fast[5:] == general[5:]
    assert len(fast[4]) == len(general[4]) and all(x is y for x, y in zip(fast[4], general[4]))
  for args in [(a, lazy), (strided,), (a, 2.0), (a, [b])]:
    assert tjit._plain_inputs(args, {}) is None

def test_return_structure_and_kwargs(device: str) -> None:
  @TinyJit
  def f(x: Tensor, *, scale: Tensor, shift: Tensor) -> Any:
    return {"a": x * scale + shift, "b": [x.sum(), None, (x - 1,)]}
  for i in range(4):
    x, s, t = rnd(5, seed=i), rnd(5, seed=20 + i), rnd(5, seed=40 + i)
    r = f(Tensor(x), shift=Tensor(t), scale=Tensor(s)) if i == 3 else f(Tensor(x), scale=Tensor(s), shift=Tensor(t))
    assert set(r) == {"a", "b"} and r["b"][1] is None and isinstance(r["b"][2], tuple)
    np.testing.assert_allclose(r["a"].numpy(), x * s + t, rtol=1e-6)
    np.testing.assert_allclose(r["b"][0].numpy(), x.sum(), rtol=1e-5)
    np.testing.assert_allclose(r["b"][2][0].numpy(), x - 1, rtol=1e-6)

def test_non_contiguous_and_lazy_inputs() -> None:
  # a strided view and a lazy graph are different inputs (the view is part of the signature): a jit for each
  for lazy in (False, True):
    @TinyJit
    def f(x: Tensor) -> Tensor: return x * 3
    for i in range(4):
      a = rnd(4, 6, seed=i)
      t = Tensor(a).permute(1, 0) + 0 if lazy else Tensor(a).permute(1, 0)
      np.testing.assert_allclose(f(t).numpy(), a.T * 3, rtol=1e-6)

def test_outputs_are_fresh_and_usable_after_replay() -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor: return x + 1
  for i in range(3): f(Tensor(rnd(4, seed=i)))
  a, b = rnd(4, seed=7), rnd(4, seed=8)
  oa = f(Tensor(a))
  np.testing.assert_allclose((oa * 2).numpy(), (a + 1) * 2, rtol=1e-6)
  ob = f(Tensor(b))
  np.testing.assert_allclose((ob * 2).numpy(), (b + 1) * 2, rtol=1e-6)  # no stale result of the graph over oa
  assert oa.uop is not ob.uop

def test_variables(device: str) -> None:
  v = Variable("n", 1, 100)
  @TinyJit
  def f(x: Tensor, n: Any) -> Tensor: return x * Tensor(n).cast(x.dtype) + 1
  for n in (3, 7, 11, 42):
    x = rnd(4, seed=n)
    np.testing.assert_allclose(f(Tensor(x), v.bind(n)).numpy(), x * n + 1, rtol=1e-6)
  calls = f.cnt
  w = Variable("m", 1, 100)  # another Variable: a new signature, run and captured anew
  for n in (3, 5, 9):
    x = rnd(4, seed=n)
    np.testing.assert_allclose(f(Tensor(x), w.bind(n)).numpy(), x * n + 1, rtol=1e-6)
  assert f.cnt == calls + 3 and len(f._entries) == 2 and f.captured.var_names.keys() == {"m"}

def test_variable_operands_before_a_reduce(device: str) -> None:
  # a bound Variable used as a value (masks against a position, a scale) in kernels that reduce: plain and jitted
  pos = Variable("pos", 0, 7)
  def f(x: Tensor, p: Any) -> tuple[Tensor, Tensor, Tensor]:
    ar = Tensor.arange(8, device=device)
    return (ar <= p).where(x, -1e9).max(-1), (ar == p).where(x, 0.0).sum(-1), (x * Tensor(p).cast(x.dtype)).sum(-1)
  jf = TinyJit(f)
  for p in (3, 0, 7, 5, 2):
    x = rnd(2, 8, seed=p)
    want = (x[:, :p + 1].max(-1), x[:, p], (x * p).sum(-1))
    for got in (f(Tensor(x, device=device), pos.bind(p)), jf(Tensor(x, device=device), pos.bind(p))):
      for g, w in zip(got, want): np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5)
  assert jf.captured is not None and jf.captured.var_names.keys() == {"pos"}

def test_jitted_method() -> None:
  class M:
    def __init__(self) -> None: self.w = Tensor(rnd(3, seed=1))
    @TinyJit
    def __call__(self, x: Tensor) -> Tensor: return x * self.w
  m = M()
  for i in range(4):
    x = rnd(3, seed=i)
    np.testing.assert_allclose(m(Tensor(x)).numpy(), x * m.w.numpy(), rtol=1e-6)

def test_jit_off() -> None:
  calls = []
  def body(x: Tensor) -> Tensor:
    calls.append(1)
    return x + 1
  f = TinyJit(body)
  with Context(JIT=0):
    for i in range(4): np.testing.assert_allclose(f(Tensor(rnd(2, seed=i))).numpy(), rnd(2, seed=i) + 1)
  assert len(calls) == 4 and f.captured is None

def test_reset() -> None:
  ran = []
  @TinyJit
  def f(x: Tensor) -> Tensor:
    ran.append(x.shape)
    return x.sum(0)
  for i in range(3): f(Tensor(rnd(2, 3, seed=i)))
  with pytest.raises(JitError, match=r"argument 0 is a Tensor of shape \(4, 3\)"): f(Tensor(rnd(4, 3)))  # captured
  assert ran == [(2, 3)] * 2
  f.reset()
  assert f.cnt == 0 and f.captured is None
  for i in range(3):
    x = rnd(4, 3, seed=i)
    np.testing.assert_allclose(f(Tensor(x)).numpy(), x.sum(0), rtol=1e-5)
  assert ran[2:] == [(4, 3)] * 2  # captured again after the reset, for the new shape

# ***** misuse *****

def _captured(f: TinyJit, *args: Any) -> None:
  for _ in range(2): f(*args)

def test_error_non_tensor_output() -> None:
  @TinyJit
  def f(x: Tensor) -> Any: return x.sum(), x.sum().item()
  with pytest.raises(TypeError, match=r"return value\[1\] is a float"): f(Tensor(rnd(3)))

def test_error_nested_jit() -> None:
  inner = TinyJit(lambda x: x * 2)
  @TinyJit
  def outer(x: Tensor) -> Tensor: return inner(x) + 1
  outer(Tensor(rnd(3)))  # the first call only runs
  with pytest.raises(RuntimeError, match="while .* is capturing"): outer(Tensor(rnd(3)))

def test_output_may_be_an_input() -> None:
  # returned as is (tinygrad allows it; this raised before): each replay returns that call's own input
  @TinyJit
  def f(x: Tensor) -> Any: return (x + 1).sum(), x
  for i in range(4):
    a = rnd(3, seed=i)
    s, x = f(Tensor(a))
    np.testing.assert_allclose(x.numpy(), a)
    np.testing.assert_allclose(s.numpy(), (a + 1).sum(), rtol=1e-5)

def test_error_no_kernels() -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor: return Tensor.zeros(3)
  with pytest.raises(RuntimeError, match="ran no kernels"): _captured(f, Tensor(rnd(3)))

def test_error_duplicate_inputs() -> None:
  @TinyJit
  def f(x: Tensor, y: Tensor, k: float = 1.0) -> Tensor: return x + y * k
  t = Tensor(rnd(3))
  with pytest.raises(ValueError, match="argument 0 and argument 1 are the same buffer"): f(t, t)
  _captured(f, Tensor(rnd(3)), Tensor(rnd(3)), 2.0)
  with pytest.raises(ValueError, match="argument 0 and argument 1 are the same buffer"): f(t, t, 3.0)  # a new key

# ***** a training step *****

class TinyNet:
  def __init__(self) -> None:
    self.layers = [nn.Conv2d(1, 4, 3), Tensor.relu, nn.BatchNorm(4), Tensor.max_pool2d, lambda x: x.flatten(1),
                   nn.Linear(36, 10)]
  def __call__(self, x: Tensor) -> Tensor: return x.sequential(self.layers)

def _train(jit: bool, make_opt: Any, steps: int = 4) -> tuple[list[float], list[np.ndarray], list[np.ndarray]]:
  Tensor.manual_seed(1)
  model = TinyNet()
  opt = make_opt(nn.state.get_parameters(model))
  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y).backward()
      loss.realize()
      opt.step()
    return loss
  fn = TinyJit(step) if jit else step
  rng = np.random.default_rng(0)
  xt = Tensor(rng.standard_normal((2, 1, 8, 8)).astype(np.float32))
  losses, evals = [], []
  for _ in range(steps):
    x, y = rng.standard_normal((4, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 4).astype(np.int32)
    losses.append(fn(Tensor(x), Tensor(y)).item())
    evals.append(model(xt).numpy())  # the weights updated in place by a replay are seen outside the jit
  return losses, [p.numpy() for p in nn.state.get_state_dict(model).values()], evals

@pytest.mark.parametrize("make_opt", [lambda ps: nn.optim.Adam(ps, lr=0.01),
                                      lambda ps: nn.optim.SGD(ps, lr=0.1, momentum=0.9)], ids=["adam", "sgd_momentum"])
def test_training_step_matches(make_opt: Any) -> None:
  l0, w0, e0 = _train(False, make_opt)
  l1, w1, e1 = _train(True, make_opt)
  np.testing.assert_allclose(l1, l0, rtol=1e-5, atol=1e-6)
  assert len(set(l1)) == len(l1)  # the loss moves: the weights really are updated on replay
  for a, b in zip(w0 + e0, w1 + e1): np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)

def test_replay_uses_planned_buffers() -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor:
    for _ in range(6): x = (x * 2 + 1).contiguous()
    return x
  for i in range(3): out = f(Tensor(rnd(64, seed=i)))
  want = rnd(64, seed=2)
  for _ in range(6): want = want * 2 + 1
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)
  assert f.captured is not None
  pooled = {id(b): b for b in f.captured.keep if isinstance(b, PooledBuffer)}
  assert len(pooled) == 5 and len({id(b.slot) for b in pooled.values()}) == 2  # a ping-pong between two slots

def test_replay_overhead() -> None:
  """Replay is a loop of prebuilt calls: generous bound here (the figure is reported in the README/bench)."""
  n = 40
  @TinyJit
  def f(x: Tensor) -> Tensor:
    for _ in range(n): x = (x + 1).contiguous()
    return x
  x = Tensor.zeros(16).contiguous().realize()
  for _ in range(3): f(x)
  reps = 20
  st = time.perf_counter()
  for _ in range(reps): out = f(x)
  per_kernel = (time.perf_counter() - st) / reps / n
  assert out.numpy()[0] == n
  assert per_kernel < 100e-6, f"replay costs {per_kernel * 1e6:.1f} us per kernel"

def test_random_numbers_advance_on_replay() -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor: return x + Tensor.rand(4)
  def plain(x: Tensor) -> Tensor: return x + Tensor.rand(4)
  Tensor.manual_seed(3)
  ref = [plain(Tensor(rnd(4, seed=i))).numpy() for i in range(5)]
  Tensor.manual_seed(3)
  got = [f(Tensor(rnd(4, seed=i))).numpy() for i in range(5)]
  for a, b in zip(ref, got): np.testing.assert_allclose(b, a, rtol=1e-6)
  assert len({tuple(g - rnd(4, seed=i)) for i, g in enumerate(got)}) == 5  # new random numbers on every call

def test_random_numbers_on_replay_carry_into_the_high_word() -> None:
  # each replay writes the keys of its own draws, computed from the device's 64-bit count (the capture once baked the
  # high word in, so replays past 2**32 words repeated the numbers of another place in the stream)
  def run(jit: bool) -> list[np.ndarray]:
    Tensor.manual_seed(4)
    Tensor.rand(1).realize()
    Tensor._device_rng_counters[Device.DEFAULT].assign(Tensor([2**32 - 9, 0], dtype=dtypes.uint32))
    def f(x: Tensor) -> Tensor: return x + Tensor.rand(4) + Tensor.rand(2).sum()
    fn = TinyJit(f) if jit else f
    out = [fn(Tensor(rnd(4, seed=i))).numpy() for i in range(4)]
    assert Tensor._device_rng_counters[Device.DEFAULT].tolist() == [2**32 - 9 + 24 - 2**32, 1]
    return out
  for a, b in zip(run(False), run(True)): np.testing.assert_array_equal(b, a)

def test_random_numbers_on_several_devices_advance_on_replay() -> None:
  # a draw on two devices reads its key from a buffer copied to each: a replay writes the key and the recorded copies
  # carry it (noting the draw's buffers used to fail on the copies, which have no buffer until scheduled)
  devs = ("CPU", "CPU:1")
  def run(jit: bool) -> list[np.ndarray]:
    Tensor.manual_seed(8)
    def f(x: Tensor) -> Tensor: return (x + Tensor.rand(4, device=devs)).realize()
    fn = TinyJit(f) if jit else f
    x = Tensor.zeros(4).contiguous().shard(devs).realize()
    return [fn(x).numpy() for _ in range(4)]
  plain, jitted = run(False), run(True)
  for a, b in zip(plain, jitted): np.testing.assert_array_equal(b, a)
  assert len({tuple(a) for a in plain}) == 4

def test_dropout_training_step_matches() -> None:
  def run(jit: bool) -> list[float]:
    Tensor.manual_seed(2)
    lin = nn.Linear(8, 4)
    opt = nn.optim.SGD([lin.weight, lin.bias], lr=0.1)
    def step(x: Tensor) -> Tensor:
      with Tensor.train():
        opt.zero_grad()
        loss = lin(x).dropout(0.5).square().mean().backward()
        loss.realize()
        opt.step()
      return loss
    fn = TinyJit(step) if jit else step
    return [fn(Tensor(rnd(3, 8, seed=i))).item() for i in range(5)]
  np.testing.assert_allclose(run(True), run(False), rtol=1e-5)

def test_tensors_inside_a_list_argument_are_inputs() -> None:
  # one level deep, as tinygrad takes them (this raised before)
  @TinyJit
  def f(xs: list[Tensor]) -> Tensor: return xs[0] + xs[1]
  for i in range(4):
    a, b = rnd(2, seed=i), rnd(2, seed=10 + i)
    np.testing.assert_allclose(f([Tensor(a), Tensor(b)]).numpy(), a + b, rtol=1e-6)

def test_debug_output(capsys: pytest.CaptureFixture[str]) -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x + 1).sum()
  with Context(DEBUG=2):
    for i in range(3): f(Tensor(rnd(4, seed=i)))
  out = capsys.readouterr().out
  assert "jit: captured 1 kernels" in out and "jit: replayed 1 kernels" in out and "*** jit r_" in out

# ***** what a call is keyed by: a changed argument re-captures, never replays the old capture *****

def test_tuple_argument_change_recaptures(device: str) -> None:
  @TinyJit
  def f(x: Tensor, axis: tuple[int, ...]) -> Tensor: return x.sum(axis)
  a = rnd(2, 3)
  for axis in [(0,)] * 3 + [(1,)] * 3 + [(0,), (0, 1)]:  # (0,) replays by then; (1,) must not replay its kernels
    out = f(Tensor(a), axis)
    assert out.shape == a.sum(axis).shape, f"{axis=}: got shape {out.shape}"
    np.testing.assert_allclose(out.numpy(), a.sum(axis), rtol=1e-5)

def test_negative_zero_is_not_zero(device: str) -> None:
  # 0.0 == -0.0 in Python, but the kernels baked with one give +inf where the other gives -inf
  @TinyJit
  def f(x: Tensor, c: float) -> Tensor: return 1 / (x * Tensor([c, c]))
  for c in (0.0, 0.0, 0.0, -0.0, -0.0, 0.0):
    np.testing.assert_equal(f(Tensor([1.0, 2.0]), c).numpy(), np.float32(1) / (np.float32([1, 2]) * np.float32(c)))

def test_nan_payloads_and_int_bool_float_are_distinct() -> None:
  ran: list[Any] = []
  @TinyJit
  def f(x: Tensor, c: Any) -> Tensor:
    ran.append(c)
    return x + 1
  nan1, nan2 = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0], float("nan")
  for c in (nan1, nan1, nan1, nan2, 1, True, 1.0):  # equal or both NaN in Python, but different values to a kernel
    f(Tensor(rnd(2)), c)
  assert len(ran) == 2 + 1 + 1 + 1 + 1, ran  # run and capture the first, then each new value runs the function

def test_jitted_method_captures_per_instance(device: str) -> None:
  class Model:
    def __init__(self, seed: int) -> None: self.w = Tensor(rnd(3, seed=seed)).realize()
    @TinyJit
    def step(self, x: Tensor) -> Tensor: return (x * self.w).sum()
  m1, m2 = Model(1), Model(2)
  x = rnd(3, seed=9)
  for _ in range(3): np.testing.assert_allclose(m1.step(Tensor(x)).numpy(), (x * m1.w.numpy()).sum(), rtol=1e-5)
  for i in range(4):  # interleaved: each model replays its own capture, with its own weights
    for m in (m2, m1):
      np.testing.assert_allclose(m.step(Tensor(x + i)).numpy(), ((x + i) * m.w.numpy()).sum(), rtol=1e-5)
  assert m1.step.captured is not m2.step.captured and m1.step.cnt == 7 and m2.step.cnt == 4
  del m1, m  # a dead instance's captures go with it
  gc.collect()
  assert len(Model.step._instances) == 1

def test_jitted_method_of_a_class_without_weak_references() -> None:
  class Slotted:
    __slots__ = ("w",)
    def __init__(self, seed: int) -> None: self.w = Tensor(rnd(3, seed=seed)).realize()
    @TinyJit
    def step(self, x: Tensor) -> Tensor: return x * self.w
  ms, x = [Slotted(1), Slotted(2)], rnd(3, seed=9)
  for i in range(3):
    for m in ms: np.testing.assert_allclose(m.step(Tensor(x + i)).numpy(), (x + i) * m.w.numpy(), rtol=1e-6)
  assert len(Slotted.step._entries) == 2  # keyed by the instance itself

def test_bound_variable_inside_a_container_is_keyed_by_value() -> None:
  v = Variable("n", 1, 9)  # only a top-level bound Variable is a replay input; nested, its value is baked in
  @TinyJit
  def f(x: Tensor, ns: tuple[Any, ...]) -> Tensor: return x * Tensor(ns[0]).cast(x.dtype)
  for n in (2, 2, 2, 5, 5, 7):
    np.testing.assert_allclose(f(Tensor(rnd(3)), (v.bind(n),)).numpy(), rnd(3) * n, rtol=1e-6)

def test_container_and_keyword_arguments_are_keyed() -> None:
  @TinyJit
  def f(x: Tensor, opts: dict[str, Any], *, scale: list[float]) -> Tensor:
    return x.sum(opts["axis"][0]) * scale[0] if opts["sum"] else x * scale[0]
  a = rnd(2, 3)
  calls = [({"axis": [0], "sum": True}, [2.0])] * 3 + [({"axis": [1], "sum": True}, [2.0])] * 3 + \
          [({"axis": [1], "sum": True}, [3.0]), ({"axis": [1], "sum": False}, [3.0])] + \
          [({"sum": True, "axis": [1]}, [3.0])]  # the same items in another order: another key, still right
  for opts, scale in calls:
    want = a.sum(opts["axis"][0]) * scale[0] if opts["sum"] else a * scale[0]
    np.testing.assert_allclose(f(Tensor(a), opts, scale=scale).numpy(), want, rtol=1e-5)

def test_strings_none_and_dtypes_are_keyed() -> None:
  @TinyJit
  def f(x: Tensor, act: str | None, dt: Any) -> Tensor:
    return (x * 2 if act is None else getattr(x, act)()).cast(dt)
  a = rnd(4)
  for act, dt, want in [("relu", dtypes.float32, np.maximum(a, 0))] * 3 + [("neg", dtypes.float32, -a)] * 2 + \
                       [(None, dtypes.float32, a * 2), (None, dtypes.int32, (a * 2).astype(np.int32))] * 2:
    out = f(Tensor(a), act, dt)
    assert out.dtype == dt
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)

def test_tensor_shape_dtype_change_raises() -> None:
  # tinygrad's contract (these captured anew before): the kernels are fixed once captured
  @TinyJit
  def f(x: Tensor, y: Tensor) -> Tensor: return x + y
  for _ in range(3): np.testing.assert_allclose(f(Tensor(rnd(3)), Tensor(rnd(3))).numpy(), rnd(3) * 2, rtol=1e-6)
  with pytest.raises(JitError, match=r"argument 1 is a Tensor of shape \(4,\) \(dtypes.float, CPU\), but the capture "
                                     r"took a Tensor of shape \(3,\)"):
    f(Tensor(rnd(3)), Tensor(rnd(4)))
  with pytest.raises(JitError, match=r"argument 0 is a Tensor of shape \(3,\) \(dtypes.int,"):
    f(Tensor(np.arange(3, dtype=np.int32)), Tensor(rnd(3)))

def test_training_mode_is_keyed() -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor: return x.dropout(0.5) + 1
  x = Tensor.ones(64).contiguous().realize()
  with Tensor.train():
    for _ in range(3): assert set(f(x).numpy().tolist()) == {1.0, 3.0}
  for _ in range(3): assert f(x).numpy().tolist() == [2.0] * 64  # eval mode: no dropout, not the training capture
  with Tensor.train(): assert set(f(x).numpy().tolist()) == {1.0, 3.0}

def test_error_unhashable_argument() -> None:
  class Config:
    __hash__ = None  # type: ignore[assignment]
  @TinyJit
  def f(x: Tensor, c: Any) -> Tensor: return x + 1
  with pytest.raises(TypeError, match="TinyJit: keyword argument 'c' is a Config, which is not hashable"):
    f(Tensor(rnd(2)), c=Config())

def test_error_tensors_inside_nested_containers() -> None:
  @TinyJit
  def f(x: Tensor, cfg: Any) -> Tensor: return x + cfg["t"][0]
  with pytest.raises(TypeError, match="keyword argument 'cfg' is a dict holding Tensors"):
    f(Tensor(rnd(2)), cfg={"t": (Tensor(rnd(2)),)})

def test_many_signatures_warn_and_stay_right() -> None:
  @TinyJit
  def f(x: Tensor, k: float) -> Tensor: return x * k
  a = rnd(3)
  with pytest.warns(UserWarning, match=r"argument 1 is 8.0 \(was 7.0\).*as a Tensor"):
    for k in range(12):
      for _ in range(3): np.testing.assert_allclose(f(Tensor(a), float(k)).numpy(), a * k, rtol=1e-6)
  assert len(f._entries) == f.max_captures

def test_debug_names_the_changed_argument(capsys: pytest.CaptureFixture[str]) -> None:
  @TinyJit
  def f(x: Tensor, axis: tuple[int, ...], c: float) -> Tensor: return x.sum(axis) * c
  with Context(DEBUG=1):
    for axis, c in [((0,), 0.0), ((0,), 0.0), ((1,), 0.0), ((1,), -0.0)]: f(Tensor(rnd(2, 3)), axis, c)
  out = capsys.readouterr().out
  assert "new argument signature (argument 1 is (1,) (was (0,)))" in out
  assert "argument 2 is -0.0 (bits 8000000000000000) (was 0.0 (bits 0000000000000000))" in out

def test_jit_misuse_is_a_jit_error_and_the_builtin_error():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return (a + b).realize()
  x = Tensor([1.0, 2.0]).realize()
  with pytest.raises(JitError):
    for _ in range(3): f(x, x)  # the same buffer twice
  with pytest.raises(ValueError):
    for _ in range(3): f(x, x)

def test_prune_drops_kernels_that_read_nothing_the_inputs_change():
  weights = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  def f(x: Tensor) -> Tensor: return (weights * 2).contiguous() + x
  plain, pruned = TinyJit(f), TinyJit(f, prune=True)
  for jit in (plain, pruned):
    for i in range(4):
      a = Tensor([float(i)] * 4).realize()
      assert jit(a).tolist() == [2.0 + i, 4.0 + i, 6.0 + i, 8.0 + i]
  assert jit is pruned and pruned.captured is not None and plain.captured is not None
  assert pruned.captured.n_kernels == 1 and plain.captured.n_kernels == 2

def test_prune_as_a_decorator_keeps_random_numbers_fresh():
  @TinyJit(prune=True)
  def g(x: Tensor) -> Tensor: return Tensor.rand(4) + x * 0
  outs = [g(Tensor([0.0] * 4).realize()).tolist() for _ in range(4)]
  assert len({tuple(o) for o in outs}) == 4

def test_captured_linear_lists_each_replayed_kernel():
  from attograd.uop.ops import Ops
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x * 2).contiguous().sum()
  for i in range(3): f(Tensor([float(i), 1.0]).realize())
  assert f.captured is not None
  lin = f.captured.linear
  assert lin.op is Ops.LINEAR and len(lin.src) == f.captured.n_kernels
  assert all(c.op is Ops.CALL and c.src[0].op is Ops.SINK for c in lin.src)

# ***** TinyJit's contract as tinygrad's: a captured jit called with Tensor inputs of other shapes, dtypes, views or
# names raises JitError; Tensors in list, tuple and dict arguments are inputs; an output may be an input written in
# place, and an output fed back as the next call's input is right; reading values, a scalar constant input and a jit
# inside a jit raise JitError; Context(CAPTURING=0) keeps kernels out of the capture; a jitted method is a partial
# over its jit *****

# ***** the signature: fixed at the first capture *****

def test_shape_change_after_capture_raises(device: str) -> None:
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return (a + b).realize()
  for i in range(3):
    a, b = rnd(4, seed=i), rnd(4, seed=9 + i)
    np.testing.assert_allclose(f(Tensor(a, device=device), Tensor(b, device=device)).numpy(), a + b, rtol=1e-6)
  with pytest.raises(JitError, match=r"argument 0 is a Tensor of shape \(8,\)"):
    f(Tensor(rnd(8), device=device), Tensor(rnd(8), device=device))

def test_views_at_other_offsets_raise() -> None:
  @TinyJit
  def f(a: Tensor) -> Tensor: return (a + 1).realize()
  base = Tensor(rnd(5, 6)).realize()
  np.testing.assert_allclose(f(base[:, 1:3]).numpy(), rnd(5, 6)[:, 1:3] + 1, rtol=1e-6)  # runs
  np.testing.assert_allclose(f(base[:, 2:4]).numpy(), rnd(5, 6)[:, 2:4] + 1, rtol=1e-6)  # captured
  with pytest.raises(JitError, match=r"argument 0 is a view .* but the capture took a view"): f(base[:, 3:5])
  with pytest.raises(JitError, match="argument 0 is a contiguous buffer, but the capture took a view"):
    f(Tensor(rnd(5, 2)))
  np.testing.assert_allclose(f(base[:, 2:4]).numpy(), rnd(5, 6)[:, 2:4] + 1, rtol=1e-6)  # the same view replays

def test_writes_through_a_view_argument_reach_its_buffer(device: str) -> None:
  # a view argument used to be passed as a contiguous copy: a jitted assign into it wrote the copy, and the caller's
  # tensor never changed (silently, on every call)
  @TinyJit
  def f(o: Tensor, x: Tensor) -> None: o.assign(o + x).realize()
  big = Tensor(np.zeros((6, 3), np.float32), device=device).contiguous().realize()
  for i in range(4):  # runs, captures, replays
    f(big[2:5, 1:], Tensor(np.full((3, 2), i + 1.0, np.float32), device=device))
    want = np.zeros((6, 3), np.float32)
    want[2:5, 1:] = sum(range(1, i + 2))
    np.testing.assert_array_equal(big.numpy(), want)
  other = Tensor(np.ones((6, 3), np.float32), device=device).contiguous().realize()
  f(other[2:5, 1:], Tensor(np.full((3, 2), 5.0, np.float32), device=device))  # a replay on another buffer, same view
  assert other.numpy()[2:5, 1:].tolist() == [[6.0, 6.0]] * 3 and other.numpy()[0].tolist() == [1.0] * 3

def test_a_view_argument_at_a_variable_offset_reads_each_calls_offset(device: str) -> None:
  # the view is passed through: the Variable in its shrink is one of the replay's Variables, not the capture's value
  @TinyJit
  def f(a: Tensor) -> Tensor: return (a + 1).realize()
  base = rnd(7, 11)
  t = Tensor(base, device=device).realize()
  for i in range(1, 6):
    vi = Variable("i", 1, 9).bind(i)
    np.testing.assert_allclose(f(t[3:5, vi:vi + 2]).numpy(), base[3:5, i:i + 2] + 1, rtol=1e-6)

def test_writing_a_view_that_shares_its_buffer_with_another_argument_raises() -> None:
  # two views of one buffer: the second one is passed as a copy (a replay swaps each input's buffer alone), so a
  # write to it would be lost; reading both is fine
  @TinyJit
  def read(a: Tensor, b: Tensor) -> Tensor: return (a * b).sum().realize()
  x = Tensor(np.arange(8, dtype=np.float32)).contiguous().realize()
  assert [read(x[:4], x[4:]).item() for _ in range(3)] == [38.0] * 3
  @TinyJit
  def write(a: Tensor, b: Tensor) -> None: a.assign(a + b).realize()
  with pytest.raises(JitError, match="argument 0 is a view of a buffer that another argument also views"):
    write(x[4:], x[:4])

def test_positional_then_keyword_raises() -> None:
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return (a + b).realize()
  for _ in range(2): f(Tensor([1.0]), Tensor([2.0]))
  with pytest.raises(JitError, match=r"Tensor inputs are \(keyword argument 'a', keyword argument 'b'\), but the "
                                     r"capture took \(argument 0, argument 1\)"):
    f(a=Tensor([3.0]), b=Tensor([4.0]))

def test_plain_values_still_capture_anew() -> None:
  # kept from attograd (tinygrad replays the first branch taken: a wrong answer)
  @TinyJit
  def f(x: Tensor, square: bool) -> Tensor: return (x * x if square else x * 2).realize()
  f(Tensor([3.0]), True)
  f(Tensor([3.0]), False)
  for _ in range(2): assert f(Tensor([3.0]), True).item() == 9.0 and f(Tensor([3.0]), False).item() == 6.0

# ***** Tensors in containers *****

def test_tensors_in_list_tuple_and_dict_arguments(device: str) -> None:
  @TinyJit
  def f(a: Tensor, arr: list[Tensor], d: dict[str, Any], t: tuple[Tensor, ...]) -> Tensor:
    return (a + arr[0] * d["w"] - t[1]).realize()
  for i in range(4):
    a, b, w, c = (rnd(3, seed=10 * k + i) for k in range(4))
    out = f(Tensor(a, device=device), [Tensor(b, device=device)], {"w": Tensor(w, device=device), "n": 1},
            (0, Tensor(c, device=device)))
    np.testing.assert_allclose(out.numpy(), a + b * w - c, rtol=1e-5, atol=1e-6)

def test_strided_view_in_a_list() -> None:
  @TinyJit
  def f(arr: list[Tensor]) -> Tensor: return (arr[0] * 2).realize()
  for i in range(4):
    a = rnd(3, 4, seed=i)
    np.testing.assert_allclose(f([Tensor(a).permute(1, 0)]).numpy(), a.T * 2, rtol=1e-6)

def test_container_tensor_shape_change_raises() -> None:
  @TinyJit
  def f(arr: list[Tensor]) -> Tensor: return (arr[0] + 1).realize()
  for _ in range(2): f([Tensor(rnd(3))])
  with pytest.raises(JitError, match=r"argument 0\[0\] is a Tensor of shape \(4,\)"): f([Tensor(rnd(4))])

# ***** outputs that are inputs, and outputs fed back *****

def test_output_is_an_input_written_in_place(device: str) -> None:
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return b.assign(a + 1)
  for i in range(4):
    a = Tensor([float(i)], device=device)
    b = Tensor.empty_like(a)  # no memory yet: the replay allocates it before a kernel writes it
    c = f(a, b)
    assert c.item() == i + 1 and b.item() == i + 1

def test_input_mutated_in_place(device: str) -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor:
    x += 1
    return x.realize()
  a = Tensor([0.0], device=device).contiguous().realize()
  for _ in range(5): f(a)
  assert a.item() == 5.0

def test_replay_writing_an_input_makes_results_memoized_from_it_stale(device: str) -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor:
    x += 1
    return (x * 2).realize()
  a = Tensor([0.0], device=device).contiguous().realize()
  for _ in range(5): f(a)
  c = a * 3
  assert c.item() == 15.0
  f(a)
  assert (a * 3).item() == 18.0  # not c's result, memoized before the replay wrote a (this gave 15)

def test_replay_bumps_versions_of_reachable_buffers_only(device: str) -> None:
  # a replay bumps the versions of the buffers a node can reach (state written in place, the outputs): memoized
  # results over them go stale. Its pooled intermediates no node reaches are left alone (each bump costs a Python
  # attribute write per kernel: SmolLM2's decode step wrote 820 buffers, 62 of them reachable)
  state = Tensor([1.0, 2.0], device=device).contiguous().realize()
  @TinyJit
  def f(x: Tensor) -> Tensor:
    h = ((x + 1) * 2).contiguous()
    g = (h.exp() + h).contiguous()
    state.assign(state + g.sum())
    return (g - h).realize(state)
  for _ in range(4): f(Tensor([0.0, 0.0], device=device))
  cj = f.captured
  assert cj is not None and any(isinstance(b, PooledBuffer) for b in cj.keep)
  reached = {id(buffers[u]) for u in UOpMetaClass.live() if u.op is Ops.BUFFER and u in buffers}
  assert cj.written and all(id(b) in reached for b in cj.written)
  assert not any(isinstance(b, PooledBuffer) for b in cj.written)
  memo = state * 1
  before = memo.numpy().copy()
  out = f(Tensor([0.0, 0.0], device=device))
  np.testing.assert_allclose((state * 1).numpy(), before + 2 * (np.exp(2.0) + 2.0), rtol=1e-5)
  np.testing.assert_allclose(out.numpy(), [np.exp(2.0)] * 2, rtol=1e-5)

def test_replay_calls_runs_of_kernels_as_one_batch(device: str, capsys: pytest.CaptureFixture[str]) -> None:
  # where the device offers call_batch (CPU: one C function calling the kernels), consecutive kernels replay in one
  # call; their inputs, Variables and buffers shifted into a stacked weight (one program for the four layers, its
  # address moved per layer) still change per call, and DEBUG=2 still times each kernel alone
  from attograd import Device
  w = Tensor(rnd(4, 48, seed=1), device=device).realize()
  n = Variable("n", 1, 8)
  @TinyJit
  def f(x: Tensor, k: UOp) -> Tensor:
    for i in range(4): x = (x * w[i] + 1).contiguous()
    return (x[:, :k].sum(1) + x.sum(1)).realize()
  def want(x: np.ndarray, k: int) -> np.ndarray:
    for i in range(4): x = x * w.numpy()[i] + 1
    return x[:, :k].sum(1) + x.sum(1)
  for i in range(6):
    x = rnd(2, 48, seed=i)
    np.testing.assert_allclose(f(Tensor(x, device=device), n.bind(i + 1)).numpy(), want(x, i + 1), rtol=1e-4)
  cj = f.captured
  assert cj is not None and len(cj.kernel_calls) == cj.n_kernels >= 5
  batched = Device[device].call_batch is not None
  assert len(cj.calls) == (1 if batched else cj.n_kernels)
  with Context(DEBUG=2):
    np.testing.assert_allclose(f(Tensor(x, device=device), n.bind(3)).numpy(), want(x, 3), rtol=1e-4)
  assert capsys.readouterr().out.count("*** jit ") == cj.n_kernels

def test_batches_take_kernels_that_wake_threads_only_from_a_size_on(device: str) -> None:
  # a kernel whose thread count ThreadChoice picks per call joins the batch when its parallel loop's `if` clause
  # (over a Variable: attention over the filled positions) keeps it on one thread for small values; from the
  # smallest value that wakes its threads on, the replay calls it alone, between batches of the others
  from attograd import Device
  if Device[device].call_batch is None: pytest.skip("this device replays kernel by kernel")
  data = rnd(16384, 64, seed=2)
  x = Tensor(data, device=device).realize()
  rows = Variable("rows", 1, 16384)
  @TinyJit
  def f(y: Tensor, k: UOp) -> Tensor:
    h = (y * 2 + 1).contiguous()
    s = (x[:k] * h).sum(0).contiguous()  # over a symbolic number of rows: the clause's Variable
    return (s * 3 + h).realize()
  y = rnd(64, seed=3)
  def want(k: int) -> np.ndarray: return (data[:k] * (y * 2 + 1)).sum(0) * 3 + (y * 2 + 1)
  for k in (3, 5, 7): f(Tensor(y, device=device), rows.bind(k))
  from attograd.runtime.ops_cpu import _omp_threads
  if _omp_threads() is None: pytest.skip("one OpenMP thread: no kernel picks its thread count")
  cj = f.captured
  assert cj is not None and cj.split is not None and cj.split[0] == "rows" and 1 < cj.split[1] <= 16384
  assert len(cj.calls) == 1 and len(cj.calls_high) == 3
  for k in (9, cj.split[1] - 1, cj.split[1], 16384):
    np.testing.assert_allclose(f(Tensor(y, device=device), rows.bind(k)).numpy(), want(k), rtol=1e-3)

def test_output_fed_back_as_input(device: str) -> None:
  # the output buffer is written while the kernel reads the input: the fed-back input is copied first
  @TinyJit
  def f(buf: Tensor, frame: Tensor) -> tuple[Tensor, Tensor]:
    new = buf[1:].cat(frame, dim=0)
    return new.contiguous(), new[:1].contiguous()
  buf, ref = Tensor([[0.0], [1.0], [2.0]], device=device).contiguous().realize(), [0.0, 1.0, 2.0]
  for i in range(5):
    new, first = f(buf, Tensor([[10.0 + i]], device=device).contiguous().realize())
    ref = ref[1:] + [10.0 + i]
    assert first.item() == ref[0] and new.numpy().ravel().tolist() == ref
    buf = new

# ***** what can't be captured *****

def test_reading_values_while_capturing_raises() -> None:
  @TinyJit
  def f(x: Tensor, mask: Tensor) -> Tensor: return x.masked_select(mask)
  f(Tensor([1, 2, 3, 4]), Tensor([True, False, True, False]))
  with pytest.raises(JitError, match="reading a Tensor's values"):
    f(Tensor([1, 2, 3, 4]), Tensor([True, False, True, False]))
  @TinyJit
  def g(x: Tensor) -> Tensor: return Tensor.zeros(int(x.sum().item()))
  g(Tensor([1, 1]))
  with pytest.raises(JitError): g(Tensor([1, 1]))

def test_scalar_constant_input_raises() -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x + 1).realize()
  with pytest.raises(JitError, match="argument 0 is a scalar constant"): f(Tensor(2.0))
  with pytest.raises(JitError, match="argument 0 is a scalar constant"): f(Tensor(2.0).realize())
  with pytest.raises(JitError, match="device-less"):
    f(Tensor(UOp.const(dtypes.float32, 2.0) + UOp.const(dtypes.float32, 1.0)))
  for i in range(3): assert f(Tensor.full((2,), float(i))).tolist() == [i + 1.0] * 2  # bigger constants get a buffer

def test_nested_jit_message() -> None:
  @TinyJit
  def f(t: Tensor) -> Tensor: return t + 1
  @TinyJit
  def g(t: Tensor) -> Tensor: return f(t) * 3
  g(Tensor([1])).realize()
  with pytest.raises(RuntimeError, match="having TinyJit inside another TinyJit is not supported"): g(Tensor([1]))

def test_capturing_off_keeps_kernels_out() -> None:
  @TinyJit
  def f(a: Tensor) -> Tensor:
    with Context(CAPTURING=0): Tensor.zeros(4).contiguous().realize()  # one-time work the replays skip
    return (a + 1).realize()
  for i in range(4): assert f(Tensor([float(i)])).item() == i + 1
  assert f.captured is not None and len(f.captured.linear.src) == 1

def test_jitted_method_is_a_partial_over_its_jit() -> None:
  class Fun:
    def __init__(self) -> None: self.a = Tensor(rnd(3)).realize()
    @TinyJit
    def __call__(self, b: Tensor) -> Tensor: return (self.a + b).realize()
  fun = Fun()
  for i in range(4): np.testing.assert_allclose(fun(Tensor(rnd(3, seed=i))).numpy(), rnd(3) + rnd(3, seed=i), rtol=1e-6)
  jit = fun.__call__.func.__self__
  assert isinstance(jit, TinyJit) and jit.captured is fun.__call__.captured is not None
  assert buffers  # the jit keeps its buffers

# ***** tinygrad's names around the jit *****

def test_free_intermediates(device: str) -> None:
  from attograd.helpers import GlobalCounters
  ext = Tensor([1.0, 24.0, 23.0, 45.0, 1.0], device=device).realize()
  @TinyJit
  def f(x: Tensor) -> Tensor:
    t1 = (x * 2).contiguous().realize()
    t2 = (t1 + ext).contiguous().realize()
    return t2.sum().contiguous().realize()
  for i in range(4): assert f(Tensor([float(i), 1, 2, 3, 4], device=device)).item() == 114 + 2 * i
  assert f.captured is not None
  for _ in range(2):
    before = GlobalCounters.mem_used
    f.captured.free_intermediates()
    f.captured.free_intermediates()  # twice: nothing left to free
    assert before - GlobalCounters.mem_used >= 2 * 5 * 4 + 4  # t1, t2 and the output
    assert f(Tensor([11.0, 1, 2, 3, 4], device=device)).item() == 136  # allocated again

def test_free_intermediates_keeps_state_written_in_place(device: str) -> None:
  from attograd.helpers import GlobalCounters
  x = Tensor([1.0], device=device).contiguous().realize()
  @TinyJit
  def f(y: Tensor) -> Tensor:
    x.assign(x + y)
    return x.realize()
  for _ in range(5): f(Tensor([1.0], device=device))
  assert f.captured is not None and x.item() == 6.0
  before = GlobalCounters.mem_used
  f.captured.free_intermediates()
  assert before == GlobalCounters.mem_used
  f(Tensor([2.0], device=device))
  assert x.item() == 8.0

def test_devices_have_no_graph_runner() -> None:
  from attograd import Device
  from attograd.engine.jit import graph_class
  assert Device[Device.DEFAULT].graph is None and graph_class(Device[Device.DEFAULT]) is None

def test_jitbeam_searches_only_the_captured_kernels(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
  # JITBEAM=n: BEAM=n while a TinyJit captures; the first (plain) call and the replays search nothing
  if device == "PYTHON": pytest.skip("BEAM doesn't search the PYTHON device's interpreted kernels")
  import attograd.codegen.opt.search as search
  searched: list[UOp] = []
  def spy(k: Any, *args: Any, **kwargs: Any) -> Any:
    searched.append(k.ast)
    return k  # no actions taken: the plain kernel, without timing candidates
  monkeypatch.setattr(search, "beam_search", spy)
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return (a * 7 + b).realize()
  a, b = Tensor.full((3, 5), 2.0, device=device).contiguous().realize(), Tensor.ones(3, 5, device=device).contiguous()
  b.realize()
  with Context(JITBEAM=2):
    f(a, b)
    assert not searched  # the first call only runs the function
    assert f(a, b).tolist() == [[15.0] * 5] * 3 and len(searched) == 1
    assert f(a, b).tolist() == [[15.0] * 5] * 3 and len(searched) == 1  # replayed, not built again
  assert (a * 7 + b).tolist() == [[15.0] * 5] * 3 and len(searched) == 1  # outside the jit: BEAM=0, not searched

def test_beam_search_takes_the_loop_space_and_returns_its_choice(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
  # the search is looked up per kernel in attograd.codegen.opt.search, where tinygrad keeps it: it gets the kernel's
  # loop space with no actions taken and returns it with the actions it chose, which the program is built with. A
  # capture reads JITBEAM through engine.jit's getenv, as tinygrad's does (tinygrad code may stand in for getenv)
  if device == "PYTHON": pytest.skip("BEAM doesn't search the PYTHON device's interpreted kernels")
  import attograd.codegen.opt.search as search
  import attograd.engine.jit as engine_jit
  from attograd.codegen.kernel import Opt
  taken: list[list] = []
  def choose(k: Any, *args: Any, **kwargs: Any) -> Any:
    taken.append(list(k.applied))
    k.apply_opt(Opt("UPCAST", 0, 2))
    return k
  monkeypatch.setattr(search, "beam_search", choose)
  monkeypatch.setattr(engine_jit, "getenv", lambda key, default=0: 3 if key == "JITBEAM" else default)
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return (a - b * 3).realize()
  a, b = Tensor.full((4, 3), 5.0, device=device).contiguous().realize(), Tensor.ones(4, 3, device=device).contiguous()
  b.realize()
  f(a, b)
  assert not taken  # the first call only runs the function
  assert f(a, b).tolist() == [[2.0] * 3] * 4 and taken == [[]]
  runners = [r for key, r in engine_realize._runners.items() if key[0] == Device.canonicalize(device) and
             len(key) == 3 and key[2] == 3]
  assert any(r.spec.applied_opts == (Opt("UPCAST", 0, 2),) for r in runners)
