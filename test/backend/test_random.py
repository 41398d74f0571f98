"""Random tensors: Tensor.manual_seed reproducibility, ranges, dtypes and rough distributions of every generator."""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest
from attograd import Device, Tensor, dtypes
from attograd.device import is_dtype_supported

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)

def _n(device: str) -> int: return 10_000 if device == "CPU" else 256  # the PYTHON device interprets kernels

# (name, make(*shape) -> Tensor)
GENERATORS = [
  P("rand", lambda *s: Tensor.rand(*s)),
  P("randn", lambda *s: Tensor.randn(*s)),
  P("randint", lambda *s: Tensor.randint(*s, low=-5, high=100)),
  P("uniform", lambda *s: Tensor.uniform(*s, low=-3.0, high=2.0)),
  P("normal", lambda *s: Tensor.normal(*s, mean=2.0, std=0.5)),
  P("randperm", lambda *s: Tensor.randperm(int(np.prod(s)))),
]

@pytest.mark.parametrize("make", GENERATORS)
def test_same_seed_same_values(device: str, make: Callable) -> None:
  Tensor.manual_seed(42)
  a = make(4, 5).numpy()
  b = make(4, 5).numpy()
  Tensor.manual_seed(42)
  np.testing.assert_array_equal(make(4, 5).numpy(), a)
  np.testing.assert_array_equal(make(4, 5).numpy(), b)

@pytest.mark.parametrize("make", GENERATORS)
def test_different_seed_different_values(device: str, make: Callable) -> None:
  Tensor.manual_seed(1)
  a = make(4, 5).numpy()
  Tensor.manual_seed(2)
  b = make(4, 5).numpy()
  assert not np.array_equal(a, b)

@pytest.mark.parametrize("make", GENERATORS)
def test_consecutive_calls_differ(device: str, make: Callable) -> None:
  Tensor.manual_seed(0)
  assert not np.array_equal(make(4, 5).numpy(), make(4, 5).numpy())

@pytest.mark.parametrize("make", GENERATORS)
def test_seed_is_independent_of_realize_order(device: str, make: Callable) -> None:
  # the k-th random tensor created after a seed has the same values whether or not earlier ones were realized
  Tensor.manual_seed(7)
  a = make(3, 4)
  b = make(3, 4)
  bv, av = b.numpy(), a.numpy()
  Tensor.manual_seed(7)
  np.testing.assert_array_equal(make(3, 4).numpy(), av)
  np.testing.assert_array_equal(make(3, 4).numpy(), bv)

def test_rand_range_and_dtype(device: str) -> None:
  Tensor.manual_seed(0)
  t = Tensor.rand(_n(device))
  assert t.shape == (_n(device),) and t.dtype == dtypes.default_float and t.device == device
  x = t.numpy()
  assert x.min() >= 0.0 and x.max() < 1.0
  assert len(np.unique(x)) > 0.9 * x.size

def _np_threefry(k0: int, k1: int, x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Threefry-2x32, 20 rounds, vectorized over uint32 counters."""
  u = np.uint32
  ks = [u(k0), u(k1), u(k0 ^ k1 ^ 0x1BD11BDA)]
  a, b = x0 + ks[0], x1 + ks[1]
  for r, n in enumerate([13, 15, 26, 6, 17, 29, 16, 24] * 2 + [13, 15, 26, 6]):
    a = a + b
    b = ((b << u(n)) | (b >> u(32 - n))) ^ a
    if r % 4 == 3: a, b = a + ks[(r // 4 + 1) % 3], b + ks[(r // 4 + 2) % 3] + u(r // 4 + 1)
  return a, b

def _device_key0(index: int) -> int:
  import hashlib
  return int.from_bytes(hashlib.sha256(index.to_bytes(4, "big")).digest(), "big") & 0xFFFFFFFF

def _np_stream(seed: int, start: int, num: int, index: int = 0) -> np.ndarray:
  """`num` words of a device's stream after `start` words: the draw's key enciphers the counter (low and high words)
  under the device's key (sha256 of its index among the devices that drew, the seed), then pairs (j, j + ceil(num /
  2)) give words j and j + ceil(num / 2)."""
  k0 = _device_key0(index)
  with np.errstate(over="ignore"):
    nk = _np_threefry(k0, seed, np.array([start & 0xFFFFFFFF], np.uint32), np.array([start >> 32], np.uint32))
    h = (num + 1) // 2
    j = np.arange(h, dtype=np.uint32)
    lo, hi = _np_threefry(int(nk[0][0]), int(nk[1][0]), j, j + np.uint32(h))
  return np.concatenate([lo, hi])[:num]

def test_rand_values_from_a_fresh_seed(device: str) -> None:
  # tinygrad's stream: the same seed gives tinygrad's numbers. Three draws in a row (the counter moves the key; seed 0
  # once made the lowered kernel multiply in int32, and the third draw segfaulted)
  Tensor.manual_seed(0)
  for start in range(0, 3 * 4096, 4096):
    got = Tensor.rand(64, 64).numpy()
    want = ((_np_stream(0, start, 64 * 64) >> 9) | np.uint32(0x3F800000)).view(np.float32) - np.float32(1)
    np.testing.assert_array_equal(got.reshape(-1), want)

def _rand_of(words: np.ndarray) -> np.ndarray:
  return ((words >> np.uint32(9)) | np.uint32(0x3F800000)).view(np.float32) - np.float32(1)

def test_each_device_counts_its_own_words(device: str) -> None:
  # as tinygrad: a device's numbers follow from the seed, its place among the devices that drew since the seed was
  # set, and its own count of words drawn, whatever the other devices drew
  other = Device.canonicalize("CPU:1")
  dev = Device.canonicalize(device)
  Tensor.manual_seed(5)
  np.testing.assert_array_equal(Tensor.rand(6, device=device).numpy(), _rand_of(_np_stream(5, 0, 6)))
  np.testing.assert_array_equal(Tensor.rand(3, device=other).numpy(), _rand_of(_np_stream(5, 0, 3, index=1)))
  np.testing.assert_array_equal(Tensor.rand(2, device=device).numpy(), _rand_of(_np_stream(5, 6, 2)))
  assert Tensor._device_rng_counters[dev].tolist() == [8, 0] and Tensor._device_rng_counters[other].tolist() == [3, 0]
  assert Tensor._device_seeds[other].tolist() == [_device_key0(1), 5]
  Tensor.manual_seed(6)
  assert Tensor._device_rng_counters == {} and Tensor._device_seeds == {}

def test_the_counter_is_a_lazy_tensor_that_moves_the_stream(device: str) -> None:
  # drawing runs nothing: the counter is a lazy uint32 (low, high) pair; assigning it moves the stream, and the count
  # carries into the high word
  dev = Device.canonicalize(device)
  Tensor.manual_seed(3)
  r = Tensor.rand(4, device=device)
  counter = Tensor._device_rng_counters[dev]
  Tensor.rand(4, device=device)
  assert not counter.uop.is_realized and not r.uop.is_realized
  assert counter.tolist() == [8, 0]
  counter.assign(Tensor([2**32 - 3, 0], device=device, dtype=dtypes.uint32))
  np.testing.assert_array_equal(Tensor.rand(5, device=device).numpy(), _rand_of(_np_stream(3, 2**32 - 3, 5)))
  assert Tensor._device_rng_counters[dev].tolist() == [2, 1]
  np.testing.assert_array_equal(Tensor.rand(3, device=device).numpy(), _rand_of(_np_stream(3, 2**32 + 2, 3)))

def test_draws_of_a_size_share_one_program(device: str) -> None:
  # a draw reads its key from a buffer: a new draw of a size compiles nothing (each used to be a program of its own,
  # its key folded into the source: ~200 ms of compiling per draw on CPU)
  from attograd.engine import realize
  Tensor.manual_seed(9)
  Tensor.rand(37, device=device).realize()
  before = len(realize._runners)
  for _ in range(3): Tensor.rand(37, device=device).realize()
  assert len(realize._runners) == before

def test_rand_packs_narrow_and_wide_dtypes(device: str) -> None:
  # a word holds two float16 values (low half first); a float64 takes two words (low word first)
  Tensor.manual_seed(7)
  w = _np_stream(7, 0, 3)
  half = ((w.view(np.uint16)[:5] >> np.uint16(6)) | np.uint16(0x3C00)).view(np.float16) - np.float16(1)
  np.testing.assert_array_equal(Tensor.rand(5, dtype=dtypes.float16).numpy(), half)
  w = _np_stream(7, 3, 4)
  dbl = ((w.view(np.uint64) >> np.uint64(12)) | np.uint64(0x3FF0000000000000)).view(np.float64) - 1.0
  np.testing.assert_array_equal(Tensor.rand(2, dtype=dtypes.float64).numpy(), dbl)

def test_randn_and_randperm_from_the_stream(device: str) -> None:
  Tensor.manual_seed(11)
  u = Tensor.rand(2, 50).numpy().astype(np.float64)
  Tensor.manual_seed(11)
  # Box-Muller with the first half as the angle and the second as the radius, as tinygrad
  want = np.cos(2 * np.pi * u[0]) * np.sqrt(-2 * np.log(1 - u[1]))
  np.testing.assert_allclose(Tensor.randn(50).numpy(), want, rtol=1e-5, atol=1e-5)
  Tensor.manual_seed(11)
  keys = Tensor.rand(30).numpy()
  Tensor.manual_seed(11)
  np.testing.assert_array_equal(Tensor.randperm(30).numpy(), np.argsort(keys, kind="stable"))

def test_rand_refuses_int_dtypes(device: str) -> None:
  with pytest.raises(ValueError, match="rand"): Tensor.rand(3, dtype=dtypes.int32)

def test_threefry_random_bits_pairs(device: str) -> None:
  # the first words of every pair, then the second words: the counters split in two halves
  key = Tensor([3, 9], dtype=dtypes.uint32)
  c0, c1 = Tensor([0, 1, 2], dtype=dtypes.uint32), Tensor([3, 4, 5], dtype=dtypes.uint32)
  lo, hi = _np_threefry(3, 9, np.arange(3, dtype=np.uint32), np.arange(3, 6, dtype=np.uint32))
  np.testing.assert_array_equal(Tensor._threefry_random_bits(key, c0, c1).numpy(), np.concatenate([lo, hi]))

@pytest.mark.parametrize("shape", [(), (0,), (1,), (2, 3, 4), (0, 5)], ids=str)
def test_rand_shapes(device: str, shape: tuple) -> None:
  for make in (Tensor.rand, Tensor.randn, lambda *s: Tensor.randint(*s, low=0, high=3)):
    t = make(*shape)
    assert t.shape == shape and t.numpy().shape == shape

def test_rand_tuple_shape(device: str) -> None:
  assert Tensor.rand((2, 3)).shape == (2, 3)
  assert Tensor.randn((2, 3)).shape == (2, 3)

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64], ids=str)
def test_rand_dtypes(device: str, dtype: Any) -> None:
  Tensor.manual_seed(3)
  t = Tensor.rand(200, dtype=dtype)
  assert t.dtype == dtype
  x = t.numpy()
  assert x.min() >= 0.0 and x.max() < 1.0
  y = Tensor.randn(200, dtype=dtype)
  assert y.dtype == dtype and np.all(np.isfinite(y.numpy()))

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_rand_low_precision_never_reaches_one(device: str, dtype: Any) -> None:
  # values near 1 drawn at float32's 24 bits used to round up to 1.0 in the narrower dtype (dozens in 32k samples)
  if not is_dtype_supported(dtype, device): pytest.skip(f"{dtype} on {device}")
  Tensor.manual_seed(0)
  x = Tensor.rand(2, 128, 128, dtype=dtype).float().numpy()
  assert x.max() < 1.0 and (x == 0).sum() > 0 and abs(x.mean() - 0.5) < 0.01

def test_rand_distribution_cpu(device: str) -> None:
  if device != "CPU": pytest.skip("CPU only: 10k samples")
  Tensor.manual_seed(0)
  x = Tensor.rand(10_000).numpy()
  assert abs(x.mean() - 0.5) < 0.02 and abs(x.std() - np.sqrt(1 / 12)) < 0.02
  hist, _ = np.histogram(x, bins=10, range=(0, 1))
  assert hist.min() > 800 and hist.max() < 1200

def test_randn_stats(device: str) -> None:
  Tensor.manual_seed(0)
  n = _n(device)
  x = Tensor.randn(n).numpy()
  tol = 0.05 if n >= 10_000 else 0.3
  assert abs(x.mean()) < tol and abs(x.std() - 1.0) < tol
  assert np.all(np.isfinite(x))
  if n >= 10_000:
    assert 0.66 < np.mean(np.abs(x) < 1) < 0.70  # 68% within one sigma
    assert np.abs(x).max() < 6

def test_normal_stats(device: str) -> None:
  Tensor.manual_seed(1)
  n = _n(device)
  x = Tensor.normal(n, mean=5.0, std=0.1).numpy()
  tol = 0.01 if n >= 10_000 else 0.05
  assert abs(x.mean() - 5.0) < tol and abs(x.std() - 0.1) < tol

def test_uniform_range(device: str) -> None:
  Tensor.manual_seed(2)
  x = Tensor.uniform(_n(device), low=-3.0, high=-1.0).numpy()
  assert x.min() >= -3.0 and x.max() < -1.0
  assert abs(x.mean() + 2.0) < (0.05 if device == "CPU" else 0.2)

def test_randint_range_and_dtype(device: str) -> None:
  Tensor.manual_seed(0)
  t = Tensor.randint(_n(device), low=2, high=7)
  assert t.dtype == dtypes.int32
  x = t.numpy()
  assert x.min() >= 2 and x.max() < 7
  assert set(np.unique(x).tolist()) == {2, 3, 4, 5, 6}

def test_randint_negative_and_defaults(device: str) -> None:
  Tensor.manual_seed(0)
  x = Tensor.randint(200, low=-10, high=-5).numpy()
  assert x.min() >= -10 and x.max() < -5
  y = Tensor.randint(200).numpy()  # tinygrad's defaults: low=0, high=10
  assert y.min() >= 0 and y.max() < 10

@pytest.mark.parametrize("n", [1, 2, 10, 100], ids=str)
def test_randperm_is_permutation(device: str, n: int) -> None:
  Tensor.manual_seed(0)
  t = Tensor.randperm(n)
  assert t.shape == (n,) and t.dtype == dtypes.int32
  np.testing.assert_array_equal(np.sort(t.numpy()), np.arange(n))

def test_randperm_shuffles(device: str) -> None:
  Tensor.manual_seed(0)
  perms = {tuple(Tensor.randperm(8).tolist()) for _ in range(5)}
  assert len(perms) > 1 and any(p != tuple(range(8)) for p in perms)

def test_manual_seed_default(device: str) -> None:
  Tensor.manual_seed()
  a = Tensor.rand(5).numpy()
  Tensor.manual_seed(0)
  np.testing.assert_array_equal(Tensor.rand(5).numpy(), a)

def test_rand_used_twice_is_one_value(device: str) -> None:
  # one random tensor read by two consumers must give the same values to both
  Tensor.manual_seed(0)
  r = Tensor.rand(16)
  a, b = r + 0, r * 1
  np.testing.assert_array_equal(a.numpy(), b.numpy())
  np.testing.assert_array_equal(r.numpy(), a.numpy())

def test_dropout_like_mask(device: str) -> None:
  Tensor.manual_seed(0)
  mask = (Tensor.rand(_n(device)) < 0.3).numpy()
  assert mask.dtype == np.bool_
  assert abs(mask.mean() - 0.3) < (0.03 if device == "CPU" else 0.12)

def test_uniform_int_with_a_negative_low_is_uniform(device: str) -> None:
  # the scaled value is cast before low is added: cast after, values in (-1, 0) truncated toward zero, so 0 came
  # twice as often and low almost never
  Tensor.manual_seed(5)
  x = Tensor.uniform(20_000, low=-2, high=3, dtype=dtypes.int32).numpy()
  counts = np.bincount(x + 2, minlength=5)
  assert x.min() == -2 and x.max() == 2 and counts.min() > 0.9 * 4000 and counts.max() < 1.1 * 4000

# ***** rand's contiguous=: a buffer of its own (the default, as in tinygrad) or an expression fused into readers *****

def test_rand_is_computed_once_into_its_own_buffer(device: str) -> None:
  from attograd.helpers import GlobalCounters
  Tensor.manual_seed(3)
  a = Tensor.rand(16, 16)
  b = a[2:10].clone()
  k0 = GlobalCounters.kernel_count
  b.realize()
  assert GlobalCounters.kernel_count - k0 == 2  # rand's values, then the copy of its rows
  # the realize of b computed a's buffer: a holds it now (a realize rebinds every tensor whose value it computed)
  assert a.uop.base.buffer is not b.uop.base.buffer
  k0 = GlobalCounters.kernel_count
  np.testing.assert_equal(a.numpy()[2:10], b.numpy())
  assert GlobalCounters.kernel_count - k0 == 0

def test_rand_not_contiguous_fuses_into_its_reader(device: str) -> None:
  from attograd.helpers import GlobalCounters
  Tensor.manual_seed(3)
  ref = Tensor.rand(16, 16).numpy()
  Tensor.manual_seed(3)
  a = Tensor.rand(16, 16, contiguous=False)
  k0 = GlobalCounters.kernel_count
  b = (a[2:10] * 2).realize()
  assert GlobalCounters.kernel_count - k0 == 1
  np.testing.assert_equal(b.numpy(), ref[2:10] * 2)  # the same values either way
