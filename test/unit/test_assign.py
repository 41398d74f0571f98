"""In-place assign: the value may read the target, and kernels whose inputs fold away still run everywhere."""
from __future__ import annotations
from typing import Any
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

def test_assign_into_a_region_at_a_symbolic_position(device: str) -> None:
  # a KV cache row written at a Variable position (the LLM's decode step): the kernel stores into that region only;
  # the store used to be contiguous from element 0 of the buffer, whatever the target's view
  from attograd import TinyJit, Variable
  from attograd.llm.model import assign_later
  import numpy as np
  cache = Tensor.zeros(2, 6, 3).contiguous().realize()
  want = np.zeros((2, 6, 3), np.float32)
  pos = Variable("pos", 0, 5)
  @TinyJit
  def write(v: Tensor, p: Any) -> Tensor:
    region = cache.shrink((None, (p, p + 1), None))
    assign_later(region, v * 2).realize()
    return cache.sum((0, 2))
  for i in (4, 0, 5, 2):  # run, capture, replay, replay: one program for every position
    sums = write(Tensor.full((2, 1, 3), float(i + 1)).contiguous().realize(), pos.bind(i))
    want[:, i] = 2 * (i + 1)
    assert np.array_equal(cache.numpy(), want), (i, cache.numpy()[..., 0])
    assert sums.tolist() == want.sum((0, 2)).tolist()
  # a region whose size is symbolic too (a prefill chunk of rows [p, p + 2)) and a fixed one
  assign_later(cache.shrink((None, (pos.bind(1), pos.bind(1) + 2), None)), Tensor.full((2, 2, 3), -1.0)).realize()
  assign_later(cache.shrink(((1, 2), (0, 6), (1, 2))), Tensor.full((1, 6, 1), 9.0)).realize()
  want[:, 1:3], want[1, :, 1] = -1, 9
  assert np.array_equal(cache.numpy(), want)
