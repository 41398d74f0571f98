"""tensor/rng.py on Python ints: Threefry-2x32 against Random123's known answers, and the stream's key schedule."""
import hashlib
import pytest
from attograd.tensor import rng

M = 0xFFFFFFFF

@pytest.mark.parametrize("key, ctr, want", [
  ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
  ((M, M), (M, M), (0x1CB996FC, 0xBB002BE7)),
  ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),  # the digits of pi
])
def test_threefry_known_answers(key: tuple, ctr: tuple, want: tuple) -> None:
  # Random123's kat_vectors for threefry2x32 with 20 rounds
  assert rng.threefry2x32(key, ctr) == want

def test_results_stay_32_bit() -> None:
  for k in ((M, 1), (5, M)):
    assert all(0 <= v <= M for v in rng.threefry2x32(k, (M, M - 3)))

def test_device_key_is_sha256_of_the_index_and_the_seed() -> None:
  assert rng.device_key(0, 1337) == (int(hashlib.sha256(bytes(4)).hexdigest()[-8:], 16), 1337)
  assert rng.device_key(1, 2**32 + 7)[1] == 7  # the seed's low word
  assert rng.device_key(0, 5)[0] != rng.device_key(1, 5)[0]

def test_draw_key_enciphers_the_counter() -> None:
  k = rng.device_key(0, 42)
  assert rng.draw_key(k, 20, 0) == rng.threefry2x32(k, (20, 0)) != rng.draw_key(k, 20, 1)
