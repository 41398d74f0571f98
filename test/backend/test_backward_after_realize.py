"""backward() and gradient() through values that were realized first (printing the loss before backward, reusing a
realized intermediate), as in PyTorch: the graph behind a realized tensor is kept while autograd may need it."""
from __future__ import annotations
import numpy as np
from attograd import Tensor
from attograd.helpers import GlobalCounters

def test_backward_after_reading_the_loss(device: str) -> None:
  w = Tensor(np.array([1.0, -2.0, 3.0], np.float32), device=device, requires_grad=True)
  loss = (w * w).sum()
  assert loss.item() == 14.0
  loss.backward()
  np.testing.assert_allclose(w.grad.numpy(), [2.0, -4.0, 6.0])

def test_backward_through_a_realized_intermediate(device: str) -> None:
  x = Tensor(np.array([1.0, 2.0], np.float32), device=device, requires_grad=True)
  h = (x * 3).exp()
  hv = h.numpy()  # realized: h now holds its buffer
  k0 = GlobalCounters.kernel_count
  (g,) = (h * h).sum().gradient(x)
  np.testing.assert_allclose(g.numpy(), 6 * hv * hv, rtol=1e-5)
  assert GlobalCounters.kernel_count - k0 <= 2  # h is read from its buffer, not recomputed
  y = (h * h).sum()
  y.realize()
  y.backward()
  np.testing.assert_allclose(x.grad.numpy(), 6 * hv * hv, rtol=1e-5)

def test_training_step_with_logged_loss(device: str) -> None:
  rng = np.random.default_rng(0)
  xs = rng.standard_normal((16, 3)).astype(np.float32)
  ys = xs @ np.array([[1.0], [-2.0], [0.5]], np.float32)
  w = Tensor(np.zeros((3, 1), np.float32), device=device, requires_grad=True)
  losses = []
  for _ in range(20):
    w.grad = None
    loss = ((Tensor(xs, device=device) @ w - Tensor(ys, device=device)) ** 2).mean()
    losses.append(loss.item())  # logged before backward
    loss.backward()
    w.assign(w - 0.1 * w.grad).realize()
  assert losses[-1] < losses[0] * 0.1

def test_realized_values_make_no_reference_cycles() -> None:
  # a realized result remembers its graph, and the graph's node remembers the result: one of the two links is weak,
  # so a training step's buffers go as soon as its tensors do, not at the garbage collector's next run (before, the
  # next step found no cached memory and faulted in fresh pages: MNIST ran ~1.5x slower)
  import gc, weakref
  from attograd.engine.buffers import buffers
  w = Tensor(np.ones((8, 8), np.float32), requires_grad=True)
  x = Tensor(np.arange(32, dtype=np.float32).reshape(4, 8)).realize()
  def step() -> weakref.ref:
    h = (x @ w).relu().realize()
    loss = (h * 2).sum()
    loss.item()
    loss.backward()
    w.grad = None
    return weakref.ref(buffers[h.uop.base])
  step()
  gc.collect()
  gc.disable()
  try: alive = [step()() is not None for _ in range(3)]
  finally: gc.enable()
  assert not any(alive), \
    "a step's buffer outlived its tensors (held by a reference cycle until the garbage collector runs)"
