"""A PAD above an op with f(0) != 0: pushed down to that op's loads, the padded region computes f(0), which the kernel
must throw away (a select), or, for an integer division by the 0 a padded load reads, never compute (a buffer)."""
from __future__ import annotations
import math
import numpy as np
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
  a = x.exp().conv2d(w, padding=1)
  b = x.exp().contiguous().conv2d(w, padding=1)
  # (the same values up to rounding: fused, exp runs in the conv's kernel, in its order of the sums)
  np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
  np.testing.assert_allclose(a.numpy()[0, 0, 0, 0], sum(math.exp(v / 16) for v in (0, 1, 4, 5)), rtol=1e-6)

def test_sigmoid_extremes_are_finite(device: str) -> None:
  x = Tensor([-100.0, -20.0, 0.0, 20.0, 100.0])
  vals = x.sigmoid().tolist()
  assert vals[0] == 0.0 or vals[0] < 1e-40
  assert vals[2] == 0.5 and vals[4] == 1.0

def test_pad_of_unsafe_ops_fuses_with_them(device: str) -> None:
  # exp2, a reciprocal, log2 under a pad run in the pad's kernel (selected away in the padded region): one kernel
  from attograd import GlobalCounters
  xn = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
  for fn, ref in ((lambda t: t.exp2(), np.exp2), (lambda t: 1 / t, lambda a: 1 / a), (lambda t: t.log2(), np.log2)):
    x = Tensor(xn).realize()
    out = fn(x)[:-1, :].pad(((1, 1), (0, 2))) * 2
    GlobalCounters.reset()
    out.realize()
    assert GlobalCounters.kernel_count == 1
    np.testing.assert_allclose(out.numpy(), np.pad(ref(xn)[:-1, :], ((1, 1), (0, 2))) * 2, rtol=1e-6)
  # a value padded with a value other than 0, then reduced: one kernel too
  x = Tensor(xn).realize()
  out = x.log2().pad(((0, 1), (1, 0)), value=1.0).sum()
  GlobalCounters.reset()
  out.realize()
  assert GlobalCounters.kernel_count == 1
  np.testing.assert_allclose(out.numpy(), np.pad(np.log2(xn), ((0, 1), (1, 0)), constant_values=1.0).sum(), rtol=1e-6)
