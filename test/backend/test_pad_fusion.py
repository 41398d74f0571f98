"""A PAD above an op with f(0) != 0 must not be pushed down to that op's loads (regression tests)."""
from __future__ import annotations
import math
from attograd import Tensor

def test_pad_of_exp_in_cat(device: str) -> None:
  x = Tensor([1.0, 2.0])
  got = x.exp().cat(x).tolist()
  assert [round(v, 5) for v in got] == [round(math.e, 5), round(math.e ** 2, 5), 1.0, 2.0]

def test_pad_of_unsafe_ops_then_reduce(device: str) -> None:
  x = Tensor([1.0, 2.0])
  assert (x / x).pad((1, 1)).sum().item() == 2.0
  assert x.reciprocal().pad((1, 1)).sum().item() == 1.5
  assert x.log2().pad((1, 1)).sum().item() == 1.0
  assert x.eq(x).pad((1, 1)).cast("float32").sum().item() == 2.0
  assert ((x / x).pad((1, 1)) + 1).tolist() == [1.0, 2.0, 2.0, 1.0]

def test_pad_of_int_division_does_not_trap(device: str) -> None:
  x = Tensor([7, 9])
  assert ((x // x).pad((1, 1)) + 1).tolist() == [1, 2, 2, 1]
  assert ((x % 4).pad((1, 1)) * 2).tolist() == [0, 6, 2, 0]

def test_conv_with_padding_of_an_expression(device: str) -> None:
  x = Tensor.arange(16).reshape(1, 1, 4, 4).float() / 16
  w = Tensor.ones(1, 1, 3, 3)
  a = x.exp().conv2d(w, padding=1).tolist()
  b = x.exp().contiguous().conv2d(w, padding=1).tolist()
  assert a == b

def test_sigmoid_extremes_are_finite(device: str) -> None:
  x = Tensor([-100.0, -20.0, 0.0, 20.0, 100.0])
  vals = x.sigmoid().tolist()
  assert vals[0] == 0.0 or vals[0] < 1e-40
  assert vals[2] == 0.5 and vals[4] == 1.0
