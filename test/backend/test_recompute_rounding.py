"""An expression computed by two kernels rounds the same in both (codegen/fma.py): no compiler fuses a*b+c on its own,
so a value recomputed in a backward kernel equals the forward's to the bit. Where it did not, a max's gradient (which
goes to the positions equal to the max) silently lost rows, or became 0/0."""
from __future__ import annotations
import numpy as np
from attograd import Tensor

def _abc(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  return tuple(rng.standard_normal((64, 256)).astype(np.float32) for _ in range(3))  # type: ignore[return-value]

def test_max_gradient_reaches_every_row(device: str) -> None:
  # the backward kernel recomputes a*b+c next to another use of a*b (its exp), the forward max kernel without one
  A, B, C = _abc()
  a = Tensor(A, device=device, requires_grad=True)
  b, c = Tensor(B, device=device), Tensor(C, device=device)
  m = a * b
  x = m + c
  (x.max(axis=1).sum() + m.exp().sum() * 0).backward()
  assert a.grad is not None
  g, xv = a.grad.numpy(), x.numpy()
  want = np.zeros_like(A)
  rows, idx = np.arange(64), xv.argmax(axis=1)
  want[rows, idx] = B[rows, idx]
  assert np.isfinite(g).all()
  assert (np.count_nonzero(g, axis=1) == 1).all(), "a row's gradient went missing"
  np.testing.assert_array_equal(g, want)

def test_a_value_recomputed_elsewhere_is_the_same_bits(device: str) -> None:
  A, B, C = _abc(1)
  def x_of(a: Tensor, b: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    p = a * b * c
    r = (p + b) * a
    return r - c, p, r  # two multiply-adds: p + b and r - c
  alone = x_of(*(Tensor(v, device=device) for v in (A, B, C)))[0].numpy()
  # the same expression on the same values, in a kernel where its products have other users too
  x, p, r = x_of(*(Tensor(v, device=device) for v in (A, B, C)))
  again = ((x - Tensor(alone, device=device)) + (p.exp() + r.exp()) * 0).numpy()
  assert (again == 0).all()
