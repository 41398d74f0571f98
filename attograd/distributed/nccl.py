"""NCCL under attograd.distributed: CUDA tensors reduced GPU to GPU. libnccl is loaded with ctypes from the system or
from the nvidia-nccl-cu12 wheel; rank 0's NCCL id reaches the other ranks over MPI. Each rank uses GPU rank % count.
(Written on a machine without a GPU: library discovery and its errors are tested; the collectives are not.)"""
from __future__ import annotations
import ctypes, ctypes.util, glob, importlib.util, os, time
from typing import Any, TYPE_CHECKING
from attograd.distributed.errors import DistributedError
from attograd.dtype import dtypes
from attograd.tensor import Tensor
if TYPE_CHECKING:
  from attograd.distributed.mpi import MPIWorld

# ncclDataType_t and ncclRedOp_t (nccl.h)
_NCCL_TYPE = {dtypes.int8: 0, dtypes.uint8: 1, dtypes.int32: 2, dtypes.uint32: 3, dtypes.int64: 4, dtypes.uint64: 5,
              dtypes.float16: 6, dtypes.float32: 7, dtypes.float64: 8, dtypes.bfloat16: 9, dtypes.bool: 1}
_NCCL_OP = {"sum": 0, "max": 2, "min": 3, "mean": 4}
_NCCL_ID_BYTES = 128
_IN_PROGRESS = 7  # ncclInProgress: a non-blocking call still running

def nccl_paths() -> list[str]:
  """Where libnccl may be: $NCCL_LIBRARY, the nvidia-nccl-cu12 wheel, then the system's library path."""
  out = [p] if (p := os.getenv("NCCL_LIBRARY")) else []
  if (spec := importlib.util.find_spec("nvidia")) is not None:
    for root in spec.submodule_search_locations or []:
      out += sorted(glob.glob(os.path.join(root, "nccl", "lib", "libnccl.so*")))
  if (found := ctypes.util.find_library("nccl")): out.append(found)
  return out + ["libnccl.so.2", "libnccl.so"]

def load_nccl() -> ctypes.CDLL:
  tried = []
  for path in nccl_paths():
    try: return ctypes.CDLL(path)
    except OSError as e: tried.append(f"{path}: {e}")
  raise DistributedError("attograd.distributed: NCCL was asked for (backend='nccl') but libnccl could not be loaded; "
                         "pip install nvidia-nccl-cu12, or set NCCL_LIBRARY to libnccl.so.2 (tried: "
                         + "; ".join(tried) + ")")

class NCCLComm:
  """One NCCL communicator over the job's ranks, on this rank's GPU."""
  def __init__(self, world: MPIWorld):
    from attograd.device import Device
    self.world, self.lib = world, load_nccl()
    ok, why = Device.available("CUDA")
    if not ok:
      raise DistributedError(f"attograd.distributed: backend='nccl' needs a CUDA GPU on every rank; rank {world.rank}: "
                             f"{why}")
    n_gpus = self._gpu_count()
    self.device = "CUDA" if world.rank % n_gpus == 0 else f"CUDA:{world.rank % n_gpus}"
    uid = ctypes.create_string_buffer(_NCCL_ID_BYTES)
    if world.rank == 0: self._check(self.lib.ncclGetUniqueId(uid), "ncclGetUniqueId")
    uid.raw = world.comm.bcast(uid.raw if world.rank == 0 else None, root=0)
    self.comm = ctypes.c_void_p()
    self._ctx()
    self._check(self.lib.ncclCommInitRank(ctypes.byref(self.comm), world.size, uid, world.rank), "ncclCommInitRank")
  def _gpu_count(self) -> int:
    from attograd.runtime.ops_cuda import cuda
    n = ctypes.c_int()
    cuda().cuDeviceGetCount(ctypes.byref(n))
    return max(n.value, 1)
  def _ctx(self) -> Any:
    from attograd.device import Device
    from attograd.runtime.ops_cuda import cuda
    dev: Any = Device[self.device]  # a CUDA device: it has a context
    cuda().cuCtxSetCurrent(dev.ctx)
    return dev
  def _check(self, status: int, what: str) -> None:
    if status not in (0, _IN_PROGRESS):
      msg = self.lib.ncclGetErrorString(status) if hasattr(self.lib, "ncclGetErrorString") else None
      raise DistributedError(f"{what} failed on rank {self.world.rank}: NCCL error {status}"
                             + (f" ({(ctypes.cast(msg, ctypes.c_char_p).value or b'').decode()})" if msg else ""))
  def handles(self, t: Tensor) -> bool: return isinstance(t.device, str) and t.device.split(":")[0] == "CUDA"
  def _ptr(self, t: Tensor) -> int: return _device_ptr(t.to(self.device).contiguous().realize())
  def _wait(self, what: str, deadline: float) -> None:
    """Wait for the GPU's stream, or abort the communicator at the deadline (a missing rank hangs NCCL otherwise)."""
    from attograd.runtime.ops_cuda import cuda
    dev = self._ctx()
    while cuda().cuStreamQuery(dev.stream) != 0:
      err = ctypes.c_int()
      self.lib.ncclCommGetAsyncError(self.comm, ctypes.byref(err))
      if err.value not in (0, _IN_PROGRESS) or time.monotonic() > deadline:
        self.lib.ncclCommAbort(self.comm)
        raise DistributedError(f"{what} #{self.world.seq}: NCCL did not complete on rank {self.world.rank} in time "
                               f"(async error {err.value}); a rank stopped in the middle of it")
  def _run(self, what: str, fn: Any, args: tuple, out: Tensor, deadline: float) -> Tensor:
    dev = self._ctx()
    self._check(fn(*args, self.comm, dev.stream), what)
    self._wait(what, deadline)
    return out
  def all_reduce(self, t: Tensor, op: str, deadline: float) -> Tensor:
    x = t.cast(dtypes.uint8) if t.dtype is dtypes.bool else t
    out = Tensor.empty(*x.shape, dtype=x.dtype, device=self.device).realize()
    nop = 2 if t.dtype is dtypes.bool and op == "sum" else _NCCL_OP[op]  # bools: + is `or`, as max
    args = (ctypes.c_void_p(self._ptr(x)), ctypes.c_void_p(_device_ptr(out)), ctypes.c_size_t(x.numel()),
            _NCCL_TYPE[x.dtype], nop)
    return self._run("all_reduce", self.lib.ncclAllReduce, args, out, deadline).cast(t.dtype).to(t.device)
  def broadcast(self, t: Tensor, root: int, deadline: float) -> Tensor:
    out = Tensor.empty(*t.shape, dtype=t.dtype, device=self.device).realize()
    args = (ctypes.c_void_p(self._ptr(t)), ctypes.c_void_p(_device_ptr(out)), ctypes.c_size_t(t.nbytes()), 1, root)
    return self._run("broadcast", self.lib.ncclBroadcast, args, out, deadline).to(t.device)
  def all_gather(self, t: Tensor, deadline: float) -> Tensor:
    out = Tensor.empty(self.world.size, *t.shape, dtype=t.dtype, device=self.device).realize()
    args = (ctypes.c_void_p(self._ptr(t)), ctypes.c_void_p(_device_ptr(out)), ctypes.c_size_t(t.nbytes()), 1)
    return self._run("all_gather", self.lib.ncclAllGather, args, out, deadline).to(t.device)

def _device_ptr(t: Tensor) -> int:
  """The device memory under a realized tensor that is its whole buffer (UOp.buffer: tinygrad's public name)."""
  return t.uop.buffer.handle
