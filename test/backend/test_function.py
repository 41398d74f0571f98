"""The @function decorator: same values and gradients as the plain function, methods with their weights as inputs,
no device use inside, implicit buffers refused unless allowed, and a custom gradient."""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
from attograd import Context, Tensor, TinyJit, function, nn
from attograd.function import _function

def test_values_and_grads_match_plain(device: str) -> None:
  def body(a: Tensor, b: Tensor) -> Tensor: return (a @ b).relu() * b
  av, bv = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32), np.array([[5.0, 6.0], [-7.0, 8.0]], np.float32)
  outs = []
  for fn in (body, function(body)):
    a, b = Tensor(av, requires_grad=True), Tensor(bv, requires_grad=True)
    out = fn(a, b)
    out.sum().backward()
    outs.append((out.numpy(), a.grad.numpy(), b.grad.numpy()))  # type: ignore[union-attr]
  for x, y in zip(*outs): np.testing.assert_allclose(x, y, rtol=1e-6)

def test_same_tensor_twice_and_tuple_return(device: str) -> None:
  @function
  def f(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]: return a + b, a * b
  a = Tensor([1, 2, 3])
  s, p = f(a, a)
  assert s.tolist() == [2, 4, 6] and p.tolist() == [1, 4, 9]

def test_method_takes_self_weights_as_inputs(device: str) -> None:
  class Model:
    def __init__(self) -> None: self.l1 = nn.Linear(3, 2)
    @function
    def __call__(self, x: Tensor) -> Tensor: return self.l1(x).relu()
  m = Model()
  x = Tensor([[1.0, -1.0, 2.0]])
  np.testing.assert_allclose(m(x).numpy(), m.l1(x).relu().numpy(), rtol=1e-6)
  assert type(Model.__dict__["__call__"]) is _function and Model.__call__.__name__ == "__call__"

def test_realize_inside_raises_and_depth_restored() -> None:
  @function
  def f(a: Tensor) -> Tensor: return (a + 1).realize()
  with pytest.raises(RuntimeError, match="inside a @function body"): f(Tensor([1.0]))
  assert _function.depth == 0
  assert (Tensor([1.0]) + 1).realize().item() == 2.0  # device use is back on after the call

def test_implicit_buffer_refused_unless_allowed() -> None:
  w = Tensor([7, 8, 9]).realize()
  def body(a: Tensor) -> Tensor: return a + w
  with pytest.raises(RuntimeError, match=r"(?s)function .*body reads 1 buffer\(s\) that are not among its arguments.*"
                                         r"allow_implicit=True.*dtype=dtypes.int, size=3"):
    function(body)(Tensor([1, 2, 3]))
  assert function(allow_implicit=True)(body)(Tensor([1, 2, 3])).tolist() == [8, 10, 12]
  # a pending value from outside (not a made buffer) may be captured, as in tinygrad
  pending = (Tensor([1, 1, 1]) * 2).contiguous()
  @function
  def g(a: Tensor) -> Tensor: return a + pending
  assert g(Tensor([1, 2, 3])).tolist() == [3, 4, 5]

def test_bad_return_type() -> None:
  @function
  def f(a: Tensor) -> list[Tensor]: return [a]
  with pytest.raises(RuntimeError, match="must return a Tensor or a tuple of Tensors, got list"): f(Tensor([1]))

def test_grad_fxn_replaces_the_gradient(device: str) -> None:
  # a straight-through estimator: forward rounds, backward passes the gradient unchanged (times 3 to be visible)
  @function(grad_fxn=lambda g, x: (g * 3,))
  def ste(x: Tensor) -> Tensor: return x.round()
  x = Tensor([0.4, 1.6, -2.2], requires_grad=True)
  y = ste(x)
  (y * Tensor([1.0, 2.0, 3.0])).sum().backward()
  np.testing.assert_allclose(y.numpy(), [0.0, 2.0, -2.0])
  np.testing.assert_allclose(x.grad.numpy(), [3.0, 6.0, 9.0])  # type: ignore[union-attr]

def test_unread_input_gets_zero_grad(device: str) -> None:
  # every argument is an input of the call, read or not: backward() gives one the body ignores zeros, not None
  @function
  def f(a: Tensor, skipped: Tensor, c: Tensor) -> Tensor: return a * c
  a, b, c = Tensor([1.0, 2.0]), Tensor([5.0, -1.0]), Tensor([3.0, 4.0])
  out = f(a, b, c)
  out.sum().backward()
  assert b.grad is not None
  np.testing.assert_allclose(b.grad.numpy(), [0.0, 0.0])
  np.testing.assert_allclose(a.grad.numpy(), [3.0, 4.0])  # type: ignore[union-attr]
  np.testing.assert_allclose(out.numpy(), [3.0, 8.0])

def test_grad_fxn_of_tuple_output(device: str) -> None:
  # one gradient per output comes first (zeros for an output the loss doesn't use), then the inputs
  seen: list[tuple[float, ...]] = []
  def grads(d_sum: Tensor, d_diff: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    seen.append(tuple(d_diff.numpy().tolist()))
    return d_sum * 10 + d_diff, d_sum * 10 - d_diff
  @function(grad_fxn=grads)
  def f(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]: return x + y, x - y
  x, y = Tensor([1.0, 2.0]).contiguous(), Tensor([3.0, 5.0]).contiguous()
  s, d = f(x, y)
  (s * 2 + d * 3).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [23.0, 23.0])  # type: ignore[union-attr]
  np.testing.assert_allclose(y.grad.numpy(), [17.0, 17.0])  # type: ignore[union-attr]
  np.testing.assert_allclose(d.numpy(), [-2.0, -3.0])
  x.grad = y.grad = None
  s, d = f(x, y)
  seen.clear()
  s.sum().backward()
  assert seen == [(0.0, 0.0)]
  np.testing.assert_allclose(x.grad.numpy(), [10.0, 10.0])  # type: ignore[union-attr]

def test_grad_fxn_tinygrad_form(device: str) -> None:
  # tinygrad's grad_fxn(*grads, call): call.src is (value, *inputs); with one input the parameter is named `call`
  @function(grad_fxn=lambda g, call: (g * call.src[2], g * call.src[1]))
  def mul(x: Tensor, y: Tensor) -> Tensor: return x * y
  x, y = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 5.0], requires_grad=True)
  mul(x, y).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [3.0, 5.0])  # type: ignore[union-attr]
  np.testing.assert_allclose(y.grad.numpy(), [1.0, 2.0])  # type: ignore[union-attr]
  def twice(g: Tensor, call: Any) -> tuple[Tensor]: return (g * 2 + call.src[0] * 0,)
  @function(grad_fxn=twice)
  def ident(x: Tensor) -> Tensor: return x + 0
  z = Tensor([4.0, -1.0], requires_grad=True)
  ident(z).sum().backward()
  np.testing.assert_allclose(z.grad.numpy(), [2.0, 2.0])  # type: ignore[union-attr]

def test_grad_fxn_wrong_count() -> None:
  @function(grad_fxn=lambda g, x, w: (g,))
  def f(x: Tensor, w: Tensor) -> Tensor: return x * w
  x = Tensor([1.0], requires_grad=True)
  with pytest.raises(ValueError, match="grad_fxn returned 1 gradients for 2 inputs"):
    f(x, Tensor([2.0])).sum().backward()

def test_in_jitted_training_step() -> None:
  # the shape of tinygrad's beautiful_mnist: a @function model call inside @TinyJit @Context(TRAINING=1)
  class Model:
    def __init__(self) -> None: self.layers = [nn.Linear(4, 8), Tensor.relu, nn.BatchNorm(8), nn.Linear(8, 3)]
    @function
    def __call__(self, x: Tensor) -> Tensor: return x.sequential(self.layers)
  Tensor.manual_seed(0)
  m = Model()
  opt = nn.optim.Adam(nn.state.get_parameters(m), lr=0.05)
  @TinyJit
  @Context(TRAINING=1)
  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = m(x).sparse_categorical_crossentropy(y).backward()
    return loss.realize(*opt.schedule_step())
  rng = np.random.default_rng(0)
  xv = rng.standard_normal((16, 4)).astype(np.float32)
  yv = (xv[:, 0] > 0).astype(np.int32) + (xv[:, 1] > 0).astype(np.int32)
  x, y = Tensor(xv).realize(), Tensor(yv).realize()
  losses = [step(x, y).item() for _ in range(25)]
  assert losses[-1] < losses[0] * 0.5, losses
  assert not Tensor.training  # the Context decorator restored the flag
  assert m.layers[2].num_batches_tracked.item() == 25  # BatchNorm counted every (replayed) training step
