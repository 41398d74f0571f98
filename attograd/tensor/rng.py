"""The random stream: Threefry-2x32 with 20 rounds (Random123's counter-based generator, as in JAX), keyed the way
tinygrad keys it, so a seed gives the numbers tinygrad gives.

Each device drawing gets a key pair (the low 32 bits of sha256 of its index among the devices that drew since the
seed was set, the seed); each draw of `num` 32-bit words derives a fresh key by enciphering the counter (the words
drawn before it, as two 32-bit halves) under the device's key, then enciphers the counter pairs (j, j + h), h = ceil
(num / 2): word j < h is the first output of pair j, word h + j the second. The functions take Python ints or uint32
Tensors alike: a draw's key is derived on the host (for a TinyJit replay too), its words inside the kernel."""
from __future__ import annotations
import hashlib
from typing import Any

MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1  # a device's count of words drawn wraps as tinygrad's pair of uint32 words does
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
_PARITY = 0x1BD11BDA  # Threefish's key-schedule constant

def _wrap(v: Any) -> Any: return v & MASK32 if isinstance(v, int) else v  # uint32 Tensors wrap by themselves

def threefry2x32(key: tuple[Any, Any], x: tuple[Any, Any]) -> tuple[Any, Any]:
  """The cipher of the 32-bit pair `x` under the pair `key` (each an int or a uint32 Tensor)."""
  ks = (key[0], key[1], _wrap(key[0] ^ key[1] ^ _PARITY))
  a, b = _wrap(x[0] + ks[0]), _wrap(x[1] + ks[1])
  for r in range(20):
    a, n = _wrap(a + b), _ROTATIONS[r % 8]
    b = _wrap((b << n) | (b >> (32 - n))) ^ a
    if r % 4 == 3:  # a key injection every 4 rounds
      i = r // 4 + 1
      a, b = _wrap(a + ks[i % 3]), _wrap(b + ks[(i + 1) % 3] + i)
  return a, b

def device_key(index: int, seed: int) -> tuple[int, int]:
  """The key of the `index`-th device to draw since the seed was set."""
  return int.from_bytes(hashlib.sha256(index.to_bytes(4, "big")).digest(), "big") & MASK32, seed & MASK32

def draw_key(key: tuple[int, int], counter_low: Any, counter_high: Any) -> tuple[Any, Any]:
  """The key of a draw starting after `counter` words (given as its two 32-bit halves)."""
  return threefry2x32(key, (counter_low, counter_high))

def words(idx: Any, num: int, key: tuple[Any, Any]) -> Any:
  """The draw's 32-bit words at positions `idx` (a uint32 Tensor of values below `num`)."""
  h = (num + 1) // 2
  second = idx >= h
  j = second.where(idx - h, idx)
  lo, hi = threefry2x32(key, (j, j + h))
  return second.where(hi, lo)
