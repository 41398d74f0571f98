"""Tensor.as_param and Tensor.call: a body built on placeholders equals the same ops on the arguments, forward and
backward (through the body, or through a grad_fxn given the call), on one device and on sharded tensors; a wrong
argument or a UOp body is refused with its reason."""
from __future__ import annotations
import numpy as np
import pytest
from attograd import Device, Tensor
from attograd.tensor.call import FunctionCall

X = np.arange(12, dtype=np.float32).reshape(3, 4) / 4 - 1
W = np.arange(8, dtype=np.float32).reshape(4, 2) / 3 + 0.5

def test_body_applied_to_arguments(device: str) -> None:
  x, w = Tensor(X), Tensor(W)
  body = (x.as_param(0) @ w.as_param(1)).relu() + x.as_param(0).sum(1, keepdim=True)
  np.testing.assert_allclose(Tensor.call(x, w, fxn=body).numpy(), np.maximum(X @ W, 0) + X.sum(1, keepdims=True),
                             rtol=1e-6)
  # the same body on other arguments of the same kind: it is a function of its slots, not of x and w
  np.testing.assert_allclose(Tensor.call(Tensor(-X), Tensor(W * 2), fxn=body).numpy(),
                             np.maximum(-X @ (W * 2), 0) - X.sum(1, keepdims=True), rtol=1e-6)

def test_gradient_through_body(device: str) -> None:
  x, w = Tensor(X, requires_grad=True), Tensor(W, requires_grad=True)
  Tensor.call(x, w, fxn=(x.as_param(0) @ w.as_param(1)) * 3).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), np.ones((3, 2), np.float32) @ W.T * 3, rtol=1e-6)  # type: ignore[union-attr]
  np.testing.assert_allclose(w.grad.numpy(), X.T @ np.ones((3, 2), np.float32) * 3, rtol=1e-6)  # type: ignore[union-attr]

def test_grad_fxn_gets_the_call(device: str) -> None:
  seen: list[FunctionCall] = []
  def grad_fxn(grad: Tensor, call: FunctionCall) -> tuple[Tensor, None]:
    seen.append(call)
    return grad * 5, None  # not the body's gradient (1): visibly grad_fxn's
  x, y = Tensor(X, requires_grad=True), Tensor(X * 2, requires_grad=True)
  out = Tensor.call(x, y, fxn=x.as_param(0) + y.as_param(1), grad_fxn=grad_fxn)
  out.sum().backward()
  np.testing.assert_allclose(out.numpy(), X * 3)
  np.testing.assert_allclose(x.grad.numpy(), np.full((3, 4), 5.0))  # type: ignore[union-attr]
  assert len(seen) == 1 and len(seen[0].src) == 3
  np.testing.assert_allclose(seen[0].src[2].numpy(), X * 2)  # src: (value, *arguments)

def test_sharded_arguments() -> None:
  devs = ("CPU:0", "CPU:1")
  ok, why = Device.available(devs[1])
  if not ok: pytest.skip(why)
  a, b = Tensor(X).shard(devs, axis=0), Tensor(X[0]).shard(devs, axis=None)
  Tensor.realize(a, b)
  np.testing.assert_allclose(Tensor.call(a, b, fxn=a.as_param(0).sum(0) * b.as_param(1)).numpy(), X.sum(0) * X[0],
                             rtol=1e-6)
  a, b = Tensor(X, requires_grad=True).shard(devs, axis=0), Tensor(X * 2, requires_grad=True).shard(devs, axis=0)
  def grad_fxn(grad: Tensor, call: FunctionCall) -> tuple[Tensor, Tensor]:
    ga, gb = call.src[1], call.src[2]
    return grad.expand(ga.shape) * gb, grad.expand(gb.shape) * ga
  Tensor.call(a, b, fxn=(a.as_param(0) * b.as_param(1)).sum(0), grad_fxn=grad_fxn).sum().backward()
  np.testing.assert_allclose(a.grad.numpy(), X * 2, rtol=1e-6)  # type: ignore[union-attr]
  np.testing.assert_allclose(b.grad.numpy(), X, rtol=1e-6)  # type: ignore[union-attr]

def test_refused() -> None:
  x = Tensor(X)
  with pytest.raises(IndexError, match="reads argument 1 but got 1"): Tensor.call(x, fxn=x.as_param(1) + 1)
  with pytest.raises(ValueError, match="argument 0 is"): Tensor.call(Tensor([1.0]), fxn=x.as_param(0) + 1)
  with pytest.raises(ValueError, match="argument 0 is"): Tensor.call(Tensor(X.astype(np.int32)), fxn=x.as_param(0))
  with pytest.raises(ValueError, match="slot must be an int"): x.as_param(-1)
  with pytest.raises(TypeError, match="fxn is a UOp"): Tensor.call(x, fxn=x.uop)  # type: ignore[arg-type]
