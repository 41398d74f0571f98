"""Several processes, one job: rank, world size, and collectives (all-reduce, broadcast, all-gather, barrier) of Tensors
over MPI (mpi4py), or over NCCL between CUDA GPUs. Launch with `mpirun -n N python script.py`.

>>> from attograd import Tensor, distributed as dist      # doctest: +SKIP
>>> dist.init()                                           # doctest: +SKIP
>>> dist.all_reduce(Tensor([float(dist.rank())]), op="sum").item() == sum(range(dist.world_size()))  # doctest: +SKIP
True
"""
from __future__ import annotations
from typing import Any
from attograd.distributed.errors import DistributedError
from attograd.distributed.world import (REDUCE_OPS, all_gather, all_reduce, barrier, broadcast, init, is_initialized,
                                        rank, world_size)
from attograd.distributed.sampler import DistributedSampler

__all__ = ["init", "is_initialized", "rank", "world_size", "all_reduce", "broadcast", "all_gather", "barrier",
           "DistributedError", "REDUCE_OPS", "DistributedSampler"]

def __getattr__(name: str) -> Any:
  # the data-parallel helpers live in their own module; reachable from here without importing it eagerly
  if name in ("broadcast_parameters", "allreduce_gradients"):
    from attograd.distributed import data_parallel
    return getattr(data_parallel, name)
  raise AttributeError(f"module 'attograd.distributed' has no attribute {name!r}")
