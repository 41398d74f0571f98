"""attograd.distributed's DistributedSampler: each rank's share of every epoch (device-free: it hands out row indices;
nn.data's DataLoader taking rows from it is tested in test/backend/test_datasets.py)."""
from __future__ import annotations
import pytest
from attograd.distributed import DistributedError, DistributedSampler

def test_distributed_sampler_splits_each_epoch_between_ranks() -> None:
  for n, world, drop in ((10, 3, False), (10, 3, True), (8, 2, False)):
    samplers = [DistributedSampler(n, r, world, shuffle=True, seed=7, drop_last=drop) for r in range(world)]
    for _ in range(2):  # two epochs: a new order each, the same on every rank
      shares = [list(s) for s in samplers]
      assert len({len(x) for x in shares}) == 1 and len(shares[0]) == len(samplers[0])
      seen = [i for x in shares for i in x]
      if drop: assert len(set(seen)) == len(seen) == (n // world) * world
      else: assert set(seen) == set(range(n)) and len(seen) == -(-n // world) * world
  with pytest.raises(ValueError, match="rank must be in 0..world_size-1"): DistributedSampler(4, 2, 2)

def test_distributed_sampler_defaults_to_the_jobs_rank_and_size(monkeypatch: pytest.MonkeyPatch) -> None:
  import attograd.distributed.world as world
  monkeypatch.setattr(world, "_world", None)
  with pytest.raises(DistributedError, match="call distributed.init"): DistributedSampler(4)
  class Job:
    rank, size = 1, 3
  monkeypatch.setattr(world, "_world", Job())
  s = DistributedSampler(7, shuffle=False)
  assert (s.rank, s.world_size, list(s)) == (1, 3, [1, 4, 0])
  assert DistributedSampler(7, rank=0, shuffle=False).world_size == 3
