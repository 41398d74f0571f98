"""In-place assign: the value may read the target, and kernels whose inputs fold away still run everywhere."""
from __future__ import annotations
from attograd import GlobalCounters, Tensor

def test_assign_reading_shifted_target(device: str) -> None:
  t = Tensor([0.0, 1, 2, 3, 4, 5]).realize()
  t.assign(t.shrink(((0, 5),)).pad_(((1, 0),)))
  assert t.tolist() == [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]

def test_assign_reading_flipped_target(device: str) -> None:
  t = Tensor([0.0, 1, 2, 3, 4, 5]).realize()
  t.assign(t.flip(0))
  assert t.tolist() == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]

def test_assign_elementwise_is_one_kernel(device: str) -> None:
  t = Tensor([0.0, 1, 2, 3]).realize()
  GlobalCounters.reset()
  t.assign(t * 2 + 1)
  assert GlobalCounters.kernel_count == 1
  assert t.tolist() == [1.0, 3.0, 5.0, 7.0]

def test_assign_keeps_other_views_consistent(device: str) -> None:
  t = Tensor([1.0, 2.0]).realize()
  before = t + 0
  t.assign(Tensor([5.0, 6.0]))
  assert (t + 1).tolist() == [6.0, 7.0]
  assert before.shape == (2,)

def test_kernel_with_folded_away_input(device: str) -> None:
  # where(True, a, b) never reads b: the program's buffers are renumbered
  a, b = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
  assert Tensor.full((2,), True).where(a, b).tolist() == [1.0, 2.0]
  assert Tensor.full((2,), False).where(a, b).tolist() == [3.0, 4.0]
