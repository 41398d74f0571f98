"""Several processes, one job: rank, world size, and collectives (all-reduce, broadcast, all-gather, barrier) of Tensors
over MPI (mpi4py), or over NCCL between CUDA GPUs. Launch with `mpirun -n N python script.py`.

>>> from attograd import Tensor, distributed as dist      # doctest: +SKIP
>>> dist.init()                                           # doctest: +SKIP
>>> dist.all_reduce(Tensor([float(dist.rank())]), op="sum").item() == sum(range(dist.world_size()))  # doctest: +SKIP
True
"""
from __future__ import annotations
from typing import Any, TYPE_CHECKING
from attograd.distributed.errors import DistributedError
if TYPE_CHECKING:
  from attograd.tensor import Tensor
  from attograd.distributed.mpi import MPIWorld

__all__ = ["init", "is_initialized", "rank", "world_size", "all_reduce", "broadcast", "all_gather", "barrier",
           "DistributedError", "REDUCE_OPS"]

REDUCE_OPS = ("sum", "mean", "max", "min")

_world: MPIWorld | None = None

def init(timeout: float | None = None, backend: str | None = None) -> None:
  """Join the job this process was launched in (mpirun sets the ranks; a single plain process is a job of one).

  timeout: seconds a collective waits for every rank before it raises DistributedError naming the ranks that did not
  arrive (default $DIST_TIMEOUT, else 300). backend: "mpi" (host memory, any device) or "nccl" (CUDA tensors go
  GPU to GPU; others still use MPI); default $DIST_BACKEND, else "mpi". Calling init again changes only the timeout.
  """
  global _world
  from attograd.distributed.mpi import MPIWorld
  if _world is None: _world = MPIWorld(timeout, backend)
  elif timeout is not None: _world.timeout = float(timeout)

def is_initialized() -> bool: return _world is not None

def _w() -> MPIWorld:
  if _world is None: raise DistributedError("attograd.distributed: call distributed.init() first")
  return _world

def rank() -> int:
  """This process's rank, 0 .. world_size()-1."""
  return _w().rank

def world_size() -> int:
  """The number of processes in the job."""
  return _w().size

def all_reduce(t: Tensor, op: str = "sum", timeout: float | None = None) -> Tensor:
  """The elementwise `op` ("sum", "mean", "max" or "min") of `t` over every rank, on every rank (a new Tensor on
  t's device with t's shape and dtype). Every rank must pass the same shape and dtype."""
  if op not in REDUCE_OPS: raise ValueError(f"all_reduce: op must be one of {REDUCE_OPS}, got {op!r}")
  return _w().all_reduce(t, op, timeout)

def broadcast(t: Tensor, root: int = 0, timeout: float | None = None) -> Tensor:
  """Rank `root`'s `t`, on every rank (every rank passes a tensor of the same shape and dtype)."""
  return _w().broadcast(t, root, timeout)

def all_gather(t: Tensor, timeout: float | None = None) -> Tensor:
  """Every rank's `t` stacked along a new first dim: shape (world_size, *t.shape), row r from rank r."""
  return _w().all_gather(t, timeout)

def barrier(timeout: float | None = None) -> None:
  """Wait until every rank has reached this point (or raise DistributedError naming the ranks that did not)."""
  _w().barrier(timeout)

def __getattr__(name: str) -> Any:
  # the data-parallel helpers live in their own module; reachable from here without importing it eagerly
  if name in ("broadcast_parameters", "allreduce_gradients"):
    from attograd.distributed import data_parallel
    return getattr(data_parallel, name)
  raise AttributeError(f"module 'attograd.distributed' has no attribute {name!r}")
