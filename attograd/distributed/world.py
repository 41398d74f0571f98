"""The job this process belongs to: its one MPIWorld (made by init()), rank and world size, and the collectives over
it. attograd.distributed re-exports these names; the data-parallel helpers use them from here."""
from __future__ import annotations
from typing import TYPE_CHECKING
from attograd.distributed.errors import DistributedError
if TYPE_CHECKING:
  from attograd.tensor import Tensor
  from attograd.distributed.mpi import MPIWorld

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

def world() -> MPIWorld:
  """The job's MPIWorld (after init())."""
  if _world is None: raise DistributedError("attograd.distributed: call distributed.init() first")
  return _world

def rank() -> int:
  """This process's rank, 0 .. world_size()-1."""
  return world().rank

def world_size() -> int:
  """The number of processes in the job."""
  return world().size

def all_reduce(t: Tensor, op: str = "sum", timeout: float | None = None) -> Tensor:
  """The elementwise `op` ("sum", "mean", "max" or "min") of `t` over every rank, on every rank (a new Tensor on
  t's device with t's shape and dtype). Every rank must pass the same shape and dtype."""
  if op not in REDUCE_OPS: raise ValueError(f"all_reduce: op must be one of {REDUCE_OPS}, got {op!r}")
  return world().all_reduce(t, op, timeout)

def broadcast(t: Tensor, root: int = 0, timeout: float | None = None) -> Tensor:
  """Rank `root`'s `t`, on every rank (every rank passes a tensor of the same shape and dtype)."""
  return world().broadcast(t, root, timeout)

def all_gather(t: Tensor, timeout: float | None = None) -> Tensor:
  """Every rank's `t` stacked along a new first dim: shape (world_size, *t.shape), row r from rank r."""
  return world().all_gather(t, timeout)

def barrier(timeout: float | None = None) -> None:
  """Wait until every rank has reached this point (or raise DistributedError naming the ranks that did not)."""
  world().barrier(timeout)
