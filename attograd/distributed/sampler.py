"""Which rows of a dataset each rank of a data-parallel job reads: DistributedSampler, handed to nn.data's DataLoader
as its `sampler`."""
from __future__ import annotations
import random
from typing import Iterator
import attograd.distributed.world as dist

class DistributedSampler:
  """The indices of one rank's share of a dataset of `n` rows, epoch by epoch: every rank draws the same order (from
  `seed` and the epoch number), pads it by wrapping around to a multiple of `world_size` (or drops the tail with
  drop_last=True), and keeps every world_size-th index starting at its rank. Each epoch (each `iter`) draws anew.

  >>> [list(DistributedSampler(5, rank=r, world_size=2, shuffle=False)) for r in (0, 1)]
  [[0, 2, 4], [1, 3, 0]]
  """
  def __init__(self, n: int, rank: int | None = None, world_size: int | None = None, shuffle: bool = True,
               seed: int = 0, drop_last: bool = False):
    # by default the job's own rank and size (distributed.init() must have run)
    if rank is None: rank = dist.rank()
    if world_size is None: world_size = dist.world_size()
    if not 0 <= rank < world_size:
      raise ValueError(f"DistributedSampler: rank must be in 0..world_size-1, got rank {rank} of {world_size}")
    self.n, self.rank, self.world_size = n, rank, world_size
    self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
    self.epoch = 0
  def __len__(self) -> int: return self.n // self.world_size if self.drop_last else -(-self.n // self.world_size)
  def __iter__(self) -> Iterator[int]:
    order = list(range(self.n))
    if self.shuffle: random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
    self.epoch += 1
    total = len(self) * self.world_size
    if total > len(order) and order: order = (order * -(-total // len(order)))[:total]
    return iter(order[self.rank:total:self.world_size])
