"""Tensors over several devices (Tensor.shard, to(tuple)): every op on a sharded tensor equals the op on the whole
tensor, forward and backward, on two CPU devices and on two OpenCL devices."""
from __future__ import annotations
import numpy as np
import pytest
from typing import Any
from attograd import Device, Tensor, TinyJit, Variable, nn
from attograd.engine import multi

PAIRS = [("CPU:0", "CPU:1"), ("CL:0", "CL:1")]

@pytest.fixture(params=PAIRS, ids=["CPU", "CL"])
def devs(request: pytest.FixtureRequest) -> tuple[str, str]:
  ok, why = Device.available(request.param[1])
  if not ok: pytest.skip(why)
  return request.param

A = np.arange(42, dtype=np.float32).reshape(7, 6) / 10 - 2  # 7 rows: uneven over 2 devices (4 + 3)

def _sh(devs: tuple[str, str], axis: int | None) -> Tensor: return Tensor(A).shard(devs, axis=axis)

CASES = {
  "add_mul": (lambda t: t * 2 + 1, lambda a: a * 2 + 1),
  "exp_relu": (lambda t: t.exp().relu() - t.sigmoid(), lambda a: np.exp(a) - 1 / (1 + np.exp(-a))),
  "sum_all": (lambda t: t.sum(), lambda a: a.sum()),
  "sum0": (lambda t: t.sum(0), lambda a: a.sum(0)),
  "sum1": (lambda t: t.sum(1), lambda a: a.sum(1)),
  "max0": (lambda t: t.max(0), lambda a: a.max(0)),
  "mean1": (lambda t: t.mean(1, keepdim=True), lambda a: a.mean(1, keepdims=True)),
  "softmax": (lambda t: t.softmax(1), lambda a: np.exp(a) / np.exp(a).sum(1, keepdims=True)),
  "reshape": (lambda t: t.reshape(42), lambda a: a.reshape(42)),
  "reshape_split": (lambda t: t.reshape(7, 2, 3), lambda a: a.reshape(7, 2, 3)),
  "permute": (lambda t: t.permute(1, 0), lambda a: a.T),
  "shrink": (lambda t: t[1:6, 2:5], lambda a: a[1:6, 2:5]),
  "shrink_one_side": (lambda t: t[5:], lambda a: a[5:]),
  "pad": (lambda t: t.pad(((1, 2), (0, 1))), lambda a: np.pad(a, ((1, 2), (0, 1)))),
  "flip": (lambda t: t.flip(0), lambda a: a[::-1]),
  "expand": (lambda t: t.reshape(7, 1, 6).expand(7, 3, 6), lambda a: np.broadcast_to(a.reshape(7, 1, 6), (7, 3, 6))),
  "matmul": (lambda t: t @ Tensor(A.T.copy()).to(t.device), lambda a: a @ a.T),
  "matmul_t": (lambda t: t.T @ t, lambda a: a.T @ a),
  "argmax": (lambda t: t.argmax(1), lambda a: a.argmax(1)),
  "cumsum": (lambda t: t.cumsum(1), lambda a: a.cumsum(1)),
}

@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("axis", [0, 1, None])
def test_sharded_op_equals_whole(devs: tuple[str, str], name: str, axis: int | None) -> None:
  fn, ref = CASES[name]
  out = fn(_sh(devs, axis))
  assert isinstance(out.device, tuple) and out.device == Device.canonicalize(devs)
  np.testing.assert_allclose(out.numpy(), ref(A), rtol=1e-5, atol=1e-5)

def test_shards_live_on_their_devices(devs: tuple[str, str]) -> None:
  t = _sh(devs, 0).realize()
  assert [s.shape for s in t.uop.src] == [(4, 6), (3, 6)]  # uneven: ceil(7/2) rows, then the rest
  assert [s.device for s in t.uop.src] == list(Device.canonicalize(devs))
  np.testing.assert_array_equal(t.to(devs[1]).numpy(), A)  # gathered onto one device
  assert t.to(devs[1]).device == Device.canonicalize(devs[1])

def test_binary_of_differently_sharded(devs: tuple[str, str]) -> None:
  out = _sh(devs, 0) + _sh(devs, 1) * _sh(devs, None)
  np.testing.assert_allclose(out.numpy(), A + A * A, rtol=1e-6)

def test_ring_all_reduce(devs: tuple[str, str]) -> None:
  # big enough to go around the ring rather than reduce directly on each device
  n = multi.RING_MIN_ELEMENTS * 2 + 6
  a = np.random.default_rng(0).standard_normal((2, n)).astype(np.float32)
  out = Tensor(a).shard(devs, axis=0).sum(0)
  np.testing.assert_allclose(out.numpy(), a.sum(0), rtol=1e-5, atol=1e-5)
  shards = [s.realize() for s in [Tensor(u) for u in out.realize().uop.src]]
  np.testing.assert_array_equal(shards[0].numpy(), shards[1].numpy())  # every device holds the same result

@pytest.mark.parametrize("axis", [0, 1, None])
def test_gradients_through_shard(devs: tuple[str, str], axis: int | None) -> None:
  x = Tensor(A, requires_grad=True)
  w = Tensor(A.T.copy(), requires_grad=True)
  ((x.shard(devs, axis=axis) @ w.to(devs)).relu() * 0.5).sum().backward()
  x2, w2 = Tensor(A, requires_grad=True), Tensor(A.T.copy(), requires_grad=True)
  ((x2 @ w2).relu() * 0.5).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(w.grad.numpy(), w2.grad.numpy(), rtol=1e-5, atol=1e-5)
  assert x.grad.device == x.device

def _train(devs: tuple[str, str] | None, jit: bool = False) -> tuple[float, list[np.ndarray]]:
  Tensor.manual_seed(0)
  model = [nn.Linear(6, 8), Tensor.relu, nn.Linear(8, 3)]
  params = nn.state.get_parameters(model)
  if devs is not None:
    for p in params: p.realize().to_(devs)
  opt = nn.optim.Adam(params, lr=0.01)
  x, y = Tensor(A), Tensor((np.arange(7) % 3).astype(np.int32))
  if devs is not None: x, y = x.shard(devs, axis=0), y.shard(devs, axis=0)
  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      # realized before the step changes the weights
      loss = x.sequential(model).sparse_categorical_crossentropy(y).backward().realize()
      opt.step()
    return loss
  fn = TinyJit(step) if jit else step
  losses = [fn(x, y).item() for _ in range(4)]
  return losses[-1], [p.numpy() for p in params]

@pytest.mark.parametrize("jit", [False, True])
def test_data_parallel_training_on_two_devices(devs: tuple[str, str], jit: bool) -> None:
  # the batch split over the devices, the weights copied to both: the same steps as on one device
  loss, params = _train(devs, jit)
  want_loss, want = _train(None)
  assert abs(loss - want_loss) < 1e-5
  for p, w in zip(params, want): np.testing.assert_allclose(p, w, rtol=1e-5, atol=1e-6)

def test_shard_errors() -> None:
  with pytest.raises(ValueError, match="shard: axis 0 of shape"): Tensor([1.0]).shard(("CPU:0", "CPU:1"), axis=0)
  t = Tensor([1.0, 2.0]).shard(("CPU:0", "CPU:1"))
  with pytest.raises(ValueError, match="already on"): t.shard(("CPU:0", "CPU:1"))
  with pytest.raises(ValueError, match="device mismatch"): t + Tensor([1.0, 2.0])

@pytest.mark.parametrize("axis", [0, 1, None])
def test_conv2d_on_sharded_input(devs: tuple[str, str], axis: int | None) -> None:
  # conv2d (then pooling) with the batch split (each device its images), the input channels split (each device a
  # partial sum over its channels, all-reduced) or the input copied; weights copied to both; forward and backward
  rng = np.random.default_rng(1)
  xn, wn = rng.standard_normal((3, 4, 7, 7)).astype(np.float32), rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
  def run(shard: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    xs, ws = (x.shard(devs, axis=axis), w.to(devs)) if shard else (x, w)
    out = xs.conv2d(ws, padding=1).relu().avg_pool2d(2)
    (out * out).sum().backward()
    return out.numpy(), x.grad.numpy(), w.grad.numpy()
  for got, want in zip(run(True), run(False)): np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("opt_cls", [nn.optim.Adam, nn.optim.LAMB])
def test_optimizer_state_offloaded_to_the_host(devs: tuple[str, str], opt_cls: type) -> None:
  # tinygrad's CPU offload: the moments moved off the sharded parameter's devices with to_() after the optimizer was
  # made; the step computes them where they are now and moves the update back, giving the same weights
  def train(offload: bool) -> tuple[np.ndarray, object, object]:
    w = Tensor(A).shard(devs, axis=1)
    opt = opt_cls([w])
    if offload:
      for s in opt.m + opt.v + [opt.b1_t, opt.b2_t]: s.to_("CPU")
    for _ in range(2):
      opt.zero_grad()
      (w * w * Tensor(A).shard(devs, axis=1)).sum().backward()
      with Tensor.train(): opt.step()
    return w.numpy(), w.device, opt.m[0].device
  kept, offloaded = train(False), train(True)
  np.testing.assert_allclose(offloaded[0], kept[0], rtol=1e-5, atol=1e-6)
  assert offloaded[1] == kept[1] == tuple(Device.canonicalize(d) for d in devs) and offloaded[2] == "CPU"

# (view of the whole tensor, the same view in NumPy): an assign through it writes the shards under it
VIEWS = {
  "column": (lambda t: t[:, 2:3], lambda a: a[:, 2:3]),
  "rows_across_shards": (lambda t: t[2:6], lambda a: a[2:6]),
  "strided_permuted_flipped": (lambda t: t[1:7:2, ::-1].permute(1, 0), lambda a: a[1:7:2, ::-1].T),
  "reshaped": (lambda t: t.reshape(6, 7)[1:3], lambda a: a.reshape(6, 7)[1:3]),
  "whole": (lambda t: t, lambda a: a),
}

@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("axis", [0, 1, None])
def test_assign_through_a_view_of_a_sharded_tensor(devs: tuple[str, str], view: str, axis: int | None) -> None:
  # a silent no-op before: the view took the new graph and the tensor under it kept its values
  tv, nv = VIEWS[view]
  out = _sh(devs, axis).contiguous().realize()
  before = out * 1  # computed before the write: keeps the old values, as in PyTorch
  shape = nv(A).shape
  value = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 100
  v = tv(out)
  v.assign(Tensor(value).shard(devs, 0 if len(shape) else None))
  want = A.copy()
  nv(want)[...] = value
  np.testing.assert_array_equal(out.numpy(), want)
  np.testing.assert_array_equal(v.numpy(), value)
  np.testing.assert_array_equal(before.numpy(), A)
  assert out.device == Device.canonicalize(devs)

def test_assign_reading_the_tensor_elsewhere(devs: tuple[str, str]) -> None:
  # the value reads the shards at other positions than it writes: computed whole before the write
  out = _sh(devs, 0).contiguous().realize()
  out[1:].assign(out[:-1] * 1)
  want = A.copy()
  want[1:] = A[:-1]
  np.testing.assert_array_equal(out.numpy(), want)

def test_jitted_assign_into_a_sharded_argument_with_a_variable_offset(devs: tuple[str, str]) -> None:
  # the first shard of a tensor sharded on its own device is a view of the source buffer; the jit used to copy such an
  # argument, so the writes went to the copy and the caller's tensor stayed zero
  out = Tensor(np.zeros((4, 6), np.float32), device=devs[0]).contiguous().realize().shard(devs, 0).realize()
  col = Tensor(np.ones((4, 1), np.float32), device=devs[0]).shard(devs, 0).contiguous().realize()
  @TinyJit
  def f(o: Tensor, vi: Any) -> None:
    o[:, vi:vi + 1].assign(col).realize()
    col.assign(col + 1).realize()
  vi = Variable("i", 0, 5)
  for i in range(1, 5): f(out, vi.bind(i))
  np.testing.assert_array_equal(out.numpy(), np.array([[0, 1, 2, 3, 4, 0]] * 4, np.float32))

def test_axis_of_an_op_over_sharded_tensors(devs: tuple[str, str]) -> None:
  # UOp.axis of any node (tinygrad's name): where laying the graph out over the devices splits the result
  t = Tensor(np.ones((4, 8), np.float32)).shard(devs, axis=0)
  assert (t + t).uop.axis == 0 and t.T.uop.axis == 1 and t.reshape(2, 16).uop.axis == 0
  assert t.reshape(2, 2, 8).uop.axis == 0 and t.sum(1).uop.axis == 0
  assert t.sum(0).uop.axis is None  # reduced across the split: whole on each device
  a, b = Tensor([1.0, 2.0, 3.0, 4.0]).shard(devs, 0), Tensor([[10.0, 20.0, 30.0, 40.0]]).shard(devs, None)
  assert (a + b).uop.axis == 1
  np.testing.assert_array_equal((a + b).numpy(), [[11.0, 22.0, 33.0, 44.0]])
  assert Tensor.ones(3).uop.axis is None

@pytest.mark.parametrize("make", ["full_like", "zeros_like", "empty_like", "rand_like", "randn_like"])
def test_like_of_a_sharded_tensor_is_split_the_same_way(devs: tuple[str, str], make: str) -> None:
  t = Tensor(A).shard(devs, axis=0)  # 7 rows: 4 + 3
  r = getattr(Tensor, make)(t, 2.0) if make == "full_like" else getattr(Tensor, make)(t)
  assert r.shape == t.shape and r.device == t.device and r.dtype == t.dtype and r.uop.axis == 0
  assert [s.shape for s in r.uop.src] == [(4, 6), (3, 6)]  # each device made its own shard, nothing copied
  vals = r.numpy()
  if make == "full_like": np.testing.assert_array_equal(vals, np.full(A.shape, 2.0, np.float32))
  if make == "zeros_like": np.testing.assert_array_equal(vals, np.zeros(A.shape, np.float32))
  if make == "rand_like": assert 0 <= vals.min() and vals.max() < 1 and len(np.unique(vals)) == vals.size
  args = (t, 2.0) if make == "full_like" else (t,)
  whole = getattr(Tensor, make)(*args, device=devs[0])
  assert whole.device == Device.canonicalize(devs[0]) and whole.shape == t.shape

def test_bounds_of_a_sharded_value(devs: tuple[str, str]) -> None:
  t = Tensor(A).shard(devs, axis=0)  # 7 rows: 4 + 3
  assert t.uop.bounds == [(0, 4), (4, 7)] and (t * 2).uop.bounds == [(0, 4), (4, 7)]
  assert t.T.uop.bounds == [(0, 4), (4, 7)]  # along axis 1 now
  parts = [t[lo:hi] + 1 for lo, hi in t.uop.bounds]
  np.testing.assert_array_equal(parts[0].cat(*parts[1:]).numpy(), A + 1)
  with pytest.raises(RuntimeError, match="bounds: .* isn't split over devices along an axis"):
    Tensor(A).shard(devs).uop.bounds

@pytest.mark.parametrize("axis", [None, 0])
def test_sharding_a_constant_makes_it_on_each_device(devs: tuple[str, str], axis: int | None) -> None:
  # Tensor.ones sharded: each device makes its own constant; no kernel, no copy, no memory
  from attograd.helpers import GlobalCounters
  GlobalCounters.reset()
  x = Tensor.ones(256).realize().shard(devs, axis=axis).realize()
  assert GlobalCounters.kernel_count == 0 and GlobalCounters.global_mem == 0
  assert [s.device for s in x.uop.src] == list(Device.canonicalize(devs))
  np.testing.assert_array_equal(x.numpy(), np.ones(256, np.float32))

def test_a_tensor_of_device_less_uops_joins_the_other_operand(devs: tuple[str, str]) -> None:
  # Tensor(UOp.const(...)) has no device of its own: it combines with a sharded tensor (and one on another device)
  from attograd import UOp, dtypes
  one = Tensor(UOp.const(1.0).cast(dtypes.float))
  s = Tensor([1.0, 2, 3, 4]).shard(devs, axis=0)
  np.testing.assert_array_equal((s + one).numpy(), [2, 3, 4, 5])
  np.testing.assert_array_equal((one.reshape((1,)).expand((4,)) - s).numpy(), [0, -1, -2, -3])
  np.testing.assert_array_equal((Tensor([1.0, 2.0], device=devs[1]) * one).numpy(), [1, 2])
  with pytest.raises(Exception, match="device mismatch"): Tensor([1.0], device=devs[1]) + Tensor([1.0], device=devs[0])

def test_jit_returns_its_sharded_input_written_in_place(devs: tuple[str, str]) -> None:
  # each shard of the output is the call's input shard (it used to raise: an output sharded over an input's buffers)
  @TinyJit
  def f(out: Tensor, x: Tensor) -> Tensor:
    out.assign(out + x).realize()
    return out
  for i in range(5):
    out = Tensor(np.full(5, float(i), np.float32)).shard(devs, 0).contiguous().realize()
    x = Tensor(np.arange(5, dtype=np.float32)).shard(devs, 0).contiguous().realize()
    r = f(out, x)
    np.testing.assert_array_equal(out.numpy(), np.arange(5) + i)
    np.testing.assert_array_equal(r.numpy(), np.arange(5) + i)
    assert r.device == out.device and [s.base for s in r.uop.src] == [s.base for s in out.uop.src]
