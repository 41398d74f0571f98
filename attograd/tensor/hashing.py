"""Hashes written in Tensor ops: the Keccak-f[1600] sponge (SHA3-224, SHA3-256, SHAKE128 and any rate/domain pair) over
the last dim, and `hash()`, tinygrad's 16-byte tree hash of a whole tensor (SHAKE128 over 4096-byte leaves, then
over each MB of leaf digests). The tables of the permutation (rotation offsets, round constants) are generated here from
their definitions in FIPS 202, not typed in.

The state lives as a (batch, 25) uint64 tensor, lane x + 5y at column x + 5y. Inside a round the 25 lanes are separate
tensors (the permutation's π step is a renaming in Python), stacked back into one buffer after each round: one kernel
per round, the same program for every round (the round constant is read from a table at an offset)."""
from __future__ import annotations
import functools
from typing import TYPE_CHECKING
from attograd.dtype import dtypes
from attograd.helpers import prod

if TYPE_CHECKING: from attograd.tensor.core import Tensor

# the named configurations: (rate in bytes, domain-separation byte); the digest is (200 - rate) // 2 bytes
KECCAK_CONFIGS = {"keccak_256": (136, 0x01),  # the original Keccak's padding (Ethereum's hash)
                  "sha3_224": (144, 0x06), "sha3_256": (136, 0x06), "sha3_384": (104, 0x06), "sha3_512": (72, 0x06),
                  "shake_128": (168, 0x1F), "shake_256": (136, 0x1F)}

@functools.cache
def _rotations() -> tuple[int, ...]:
  """ρ's rotation of each lane x + 5y: (t+1)(t+2)/2 mod 64 along the walk (x, y) -> (y, 2x + 3y) from (1, 0)."""
  r, (x, y) = [0] * 25, (1, 0)
  for t in range(24):
    r[x + 5 * y] = (t + 1) * (t + 2) // 2 % 64
    x, y = y, (2 * x + 3 * y) % 5
  return tuple(r)

@functools.cache
def _round_constants() -> tuple[int, ...]:
  """ι's constant of each of the 24 rounds: bit 2^j - 1 of round i is rc(j + 7i), rc the output of the LFSR of
  x^8 + x^6 + x^5 + x^4 + 1 started at 1."""
  bits, r = [], 1
  for _ in range(7 * 24):
    bits.append(r & 1)
    r = (r << 1) ^ 0x171 if r & 0x80 else r << 1
  return tuple(sum(bits[7 * i + j] << ((1 << j) - 1) for j in range(7)) for i in range(24))

def _rotl(x: Tensor, n: int) -> Tensor: return x if n == 0 else (x << n) | (x >> (64 - n))

def _round(a: list[Tensor], rc: Tensor) -> list[Tensor]:
  """One round of Keccak-f[1600] on the 25 lanes (each a (batch,) uint64 tensor); rc is the round's constant."""
  # θ: each lane takes the parities of two neighbouring columns
  c = [a[x] ^ a[x + 5] ^ a[x + 10] ^ a[x + 15] ^ a[x + 20] for x in range(5)]
  d = [c[(x - 1) % 5] ^ _rotl(c[(x + 1) % 5], 1) for x in range(5)]
  a = [a[i] ^ d[i % 5] for i in range(25)]
  # ρ and π: lane (x, y) rotated, moved to (y, 2x + 3y)
  rot, b = _rotations(), [a[0]] * 25
  for x in range(5):
    for y in range(5): b[y + 5 * ((2 * x + 3 * y) % 5)] = _rotl(a[x + 5 * y], rot[x + 5 * y])
  # χ: the only non-linear step, along rows
  out = [b[i] ^ (~b[(i % 5 + 1) % 5 + i - i % 5] & b[(i % 5 + 2) % 5 + i - i % 5]) for i in range(25)]
  out[0] = out[0] ^ rc  # ι
  return out

class HashMixin:
  def keccak(self: Tensor, cfg: str | tuple[int, int] = "sha3_256") -> Tensor:  # type: ignore[misc]
    """The Keccak hash of the bytes of each row (the last dim), as tinygrad's `keccak`: "sha3_224", "sha3_256"
    (the default), "sha3_384", "sha3_512", "shake_128", "shake_256" or a (rate in bytes, domain byte) pair. The
    result is uint8, the last dim replaced by the digest's (200 - rate) // 2 bytes (SHAKE's first that many).

    >>> Tensor(b"abc").keccak().data().hex()[:16]
    '3a985da74fe225b2'
    """
    cls = type(self)
    if isinstance(cfg, str):
      if cfg not in KECCAK_CONFIGS: raise ValueError(f"keccak: unknown configuration {cfg!r}; one of "
                                                     f"{sorted(KECCAK_CONFIGS)}, or a (rate, domain byte) pair")
      rate, dsbyte = KECCAK_CONFIGS[cfg]
    else: rate, dsbyte = cfg
    if not (isinstance(rate, int) and 0 < rate < 200 and rate % 8 == 0 and isinstance(dsbyte, int) and
            0 < dsbyte < 0x100):
      raise ValueError(f"keccak: rate must be a multiple of 8 bytes below 200 and the domain byte in 1..255, got "
                       f"{cfg!r}")
    if self.ndim == 0: raise ValueError("keccak: hashes the last dim; got a 0-d tensor")
    data = self.bitcast(dtypes.uint8) if self.dtype != dtypes.uint8 else self
    if not isinstance(data.shape[-1], int):  # the leading dims may be symbolic: one program for every batch size
      raise ValueError(f"keccak: the last dim (the message) needs a concrete size, got {data.shape}")
    lead, n = data.shape[:-1], data.shape[-1]
    batch, blocks = prod(lead), n // rate + 1  # pad10*1 always adds at least one byte
    # the padding: the domain byte right after the message, 0x80 on the block's last byte (both on one byte when
    # they meet), as a constant row xor-ed onto the zero-padded message
    pad = [0] * (blocks * rate - n)
    pad[0] ^= dsbyte
    pad[-1] ^= 0x80
    msg = data.reshape(batch, n).pad(((0, 0), (0, blocks * rate - n))) ^ \
      cls(bytes(pad), device=self.device).reshape(1, -1).pad(((0, 0), (n, 0)))
    # each block as 25 lanes: the rate's bytes, then the capacity's zeros
    lanes = msg.reshape(batch, blocks, rate).pad(((0, 0), (0, 0), (0, 200 - rate))).bitcast(dtypes.uint64).realize()
    # the round constants as buffers of their own: every round's graph is then the same one (one schedule, one set of
    # programs, for every round of every block)
    rcs = [cls([c], dtype=dtypes.uint64, device=self.device).expand(batch) for c in _round_constants()]
    state = [lanes[:, 0, i] for i in range(25)]
    for k in range(blocks):
      if k: cls.realize(*(state := [s ^ lanes[:, k, i] for i, s in enumerate(state)]))  # absorb the next block
      for rc in rcs: cls.realize(*(state := _round(state, rc)))
    obytes = (200 - rate) // 2
    return state[0].stack(*state[1:(obytes + 7) // 8], dim=1).bitcast(dtypes.uint8)[:, :obytes].reshape(*lead, obytes)

  def hash(self: Tensor) -> Tensor:  # type: ignore[misc]
    """A 16-byte uint8 digest of the tensor's bytes, tinygrad's tree hash: the bytes zero-padded to whole MBs, each
    MB hashed as SHAKE128 of the SHAKE128 digests of its 4096-byte pieces, those digests hashed again the same way
    until one MB remains, and that MB's digest returned.

    >>> len(Tensor([1, 2, 3]).hash().data())
    16
    """
    mb = 1 << 20
    data = self.flatten().bitcast(dtypes.uint8) if self.dtype != dtypes.uint8 else self.flatten()
    if not isinstance(n := data.shape[0], int): raise ValueError(f"hash: needs a concrete shape, got {self.shape}")
    def one_mb(rows: Tensor) -> Tensor:
      return rows.reshape(-1, 4096).keccak("shake_128").reshape(rows.shape[0], -1).keccak("shake_128")
    chunks = -(-n // mb)
    while chunks > 1:
      data = one_mb(data.pad_to(chunks * mb).reshape(chunks, mb)).flatten()
      chunks = -(-chunks // (mb // 16))
    return one_mb(data.pad_to(mb).reshape(1, mb)).flatten()[:16]
