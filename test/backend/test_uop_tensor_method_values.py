"""The values of graphs built with UOp's lent tensor methods (tensor/uop_methods.py), realized as Tensors: the same
numbers NumPy gives, on every device. (That the graphs are the Tensor methods' own is test/null's
test_uop_tensor_methods.py.)"""
from __future__ import annotations
import numpy as np
from attograd import Tensor, dtypes
from attograd.uop.ops import UOp

A = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
N = np.array([[-7, 5, 0, 9], [3, -4, 8, -1]], dtype=np.int32)

def test_reduce_and_index(device: str) -> None:
  u = Tensor(A).realize().uop
  np.testing.assert_allclose(Tensor(u.sum(1)).numpy(), A.sum(1))
  np.testing.assert_allclose(Tensor((u / 2)[1:, None, ::-1]).numpy(), (A / 2)[1:, None, ::-1])
  assert Tensor(u.argmax(1)).tolist() == A.argmax(1).tolist()
  idx = Tensor([2, 0, 2], dtype=dtypes.int32).uop
  np.testing.assert_allclose(Tensor(u[idx, 1:3]).numpy(), A[[2, 0, 2], 1:3])

def test_int_division_rounds_as_python(device: str) -> None:
  u = Tensor(N).uop
  assert Tensor(u // 3).tolist() == (N // 3).tolist()
  assert Tensor(u % -3).tolist() == (N % -3).tolist()
  assert Tensor(u.div(3, rounding_mode="trunc")).tolist() == np.trunc(N / 3).astype(np.int32).tolist()
  np.testing.assert_allclose(Tensor(u / 4).numpy(), N / 4)

def test_creation_and_promotion(device: str) -> None:
  got = Tensor(UOp.arange(4) * 0.5 + UOp.eye(4).sum(0))
  assert got.dtype is dtypes.float32
  np.testing.assert_allclose(got.numpy(), np.arange(4) * 0.5 + 1)

def test_nn_functions(device: str) -> None:
  x = np.arange(50, dtype=np.float32).reshape(1, 2, 5, 5) / 10
  w = np.ones((1, 2, 3, 3), dtype=np.float32)
  got = Tensor(Tensor(x).uop.conv2d(Tensor(w).uop, padding=1).relu().max_pool2d()).numpy()
  want = Tensor(x).conv2d(Tensor(w), padding=1).relu().max_pool2d().numpy()
  np.testing.assert_allclose(got, want, rtol=1e-6)
  vals, order = Tensor(A).uop.sort(1, descending=True)
  np.testing.assert_allclose(Tensor(vals).numpy(), -np.sort(-A, 1))
  assert Tensor(order).tolist() == np.argsort(-A, 1, kind="stable").tolist()

def test_gradient_values(device: str) -> None:
  x = Tensor(A)
  (g,) = (x.uop * x.uop).sum().gradient(x.uop)
  np.testing.assert_allclose(Tensor(g).numpy(), 2 * A)

def test_bits_to_rand_reads_the_top_mantissa_bits(device: str) -> None:
  # all-zero bits are 0.0 and all-one bits the largest value below 1; half-size floats take a word's low bytes first
  bits = Tensor([0, 0xFFFFFFFF, 0xFFFF0000], dtype=dtypes.uint32)
  assert Tensor._bits_to_rand(bits, (2,), dtypes.float32).tolist() == [0.0, 1 - 2**-23]
  assert Tensor._bits_to_rand(bits, (3, 2), dtypes.float16).tolist() == [[0.0, 0.0], [1 - 2**-10] * 2,
                                                                         [0.0, 1 - 2**-10]]
  # a float64 takes two words, the low one first: the high word's 32 one bits are the top of the 52-bit mantissa
  assert Tensor._bits_to_rand(bits[:2], (1,), dtypes.float64).tolist() == [1 - 2**-32]

def test_rand_of_a_key_is_pure(device: str) -> None:
  key, counter = Tensor([7, 9], dtype=dtypes.uint32), Tensor([0, 0], dtype=dtypes.uint32)
  a = Tensor._rand(key, counter, (4, 3), dtypes.float32).numpy()
  b = Tensor(UOp._rand(key.uop, counter.uop, (4, 3), dtypes.float32)).numpy()
  np.testing.assert_array_equal(a, b)
  assert a.shape == (4, 3) and (a >= 0).all() and (a < 1).all() and len(np.unique(a)) == 12

def test_tensor_of_a_deviceless_uop_has_no_device(device: str) -> None:
  # tinygrad's device-less tensor: its device is None (its repr says so), it computes on the default device, and it
  # combines with, is written into and is copied to a tensor of any device
  t = Tensor(UOp.const(2.0).cast(dtypes.float))
  assert t.device is None and t.uop.device is None
  assert "<UOp None ()" in repr(t) and "device=None" in repr(t)
  assert t.numpy() == 2.0 and t.device is None  # (printing and reading it leave it device-less)
  x = Tensor([1.0, 3.0], device=device)
  assert (x * t).tolist() == [2.0, 6.0] and (x * t).device == x.device
  assert t.clone(device=device).device == x.device and t.clone(device=device).item() == 2.0
  s = Tensor.empty(3, device=device)
  s.assign(t)
  assert s.tolist() == [2.0, 2.0, 2.0]
  assert Tensor(UOp.const(2.0).cast(dtypes.float), device=device).device == x.device  # a device asked for
