"""The MPI engine under attograd.distributed (mpi4py): tensors travel as host bytes, every collective is first agreed
on by all ranks (same op, shape and dtype) and every wait has a deadline, so a failure is an error naming ranks."""
from __future__ import annotations
import os, signal, socket, sys, time
from typing import Any, Callable
from attograd.distributed.errors import DistributedError
from attograd.dtype import DType, dtypes
from attograd.helpers import getenv
from attograd.tensor import Tensor

# MPI type of each dtype reduced on the wire; 16-bit floats have no standard MPI type, so they are reduced as float32
_MPI_TYPE = {dtypes.float32: "FLOAT", dtypes.float64: "DOUBLE", dtypes.int8: "INT8_T", dtypes.int16: "INT16_T",
             dtypes.int32: "INT32_T", dtypes.int64: "INT64_T", dtypes.uint8: "UINT8_T", dtypes.uint16: "UINT16_T",
             dtypes.uint32: "UINT32_T", dtypes.uint64: "UINT64_T", dtypes.bool: "C_BOOL"}
_WIDEN = {dtypes.float16: dtypes.float32, dtypes.bfloat16: dtypes.float32}
_MPI_OP = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}
_MPI_BOOL_OP = {"sum": "LOR", "max": "LOR", "min": "LAND"}  # a bool tensor's + is `or`, as for Tensor.add

_HEADER, _VERDICT = 1, 2  # message tags on the control communicator

def host_bytes(t: Tensor) -> memoryview:
  """t's values as a writable, contiguous byte view of a fresh host copy."""
  mv = t.data()
  return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")

def from_host(raw: memoryview | bytearray, shape: tuple[int, ...], dtype: DType, device: str) -> Tensor:
  return Tensor(raw, dtype=dtype, device=device).reshape(shape)

def _import_mpi() -> Any:
  try: from mpi4py import MPI
  except ImportError as e:
    raise DistributedError("attograd.distributed needs mpi4py and an MPI library: pip install 'attograd[distributed]' "
                           f"(mpi4py and Open MPI from PyPI), or mpi4py over the system's MPI ({e})") from None
  return MPI

def _process_gone(pid: int) -> bool:
  """The process has exited (a zombie not yet reaped by its launcher counts as exited)."""
  try: os.kill(pid, 0)
  except ProcessLookupError: return True
  except PermissionError: return False
  try:
    with open(f"/proc/{pid}/stat") as f: return f.read().rsplit(")", 1)[1].split()[0] == "Z"
  except OSError: return False

class MPIWorld:
  """This process's place in the job: its communicators, the timeout, and the collectives over them."""
  def __init__(self, timeout: float | None, backend: str | None):
    self.MPI = MPI = _import_mpi()
    self.comm = MPI.COMM_WORLD
    self.ctl = self.comm.Dup()  # agreement messages never meet the user's own MPI traffic
    self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
    self.timeout = float(timeout if timeout is not None else getenv("DIST_TIMEOUT", 300.0))
    self.seq = 0  # collectives called so far: every rank must be at the same one
    self.host, self.pid = socket.gethostname(), os.getpid()
    # who is who, for naming a rank whose process is gone (this exchange is the only wait without a deadline: MPI's
    # own start-up has already waited for every rank)
    self.peers: list[tuple[str, int]] = self.comm.allgather((self.host, self.pid))
    self.nccl: Any = None
    backend = (backend or os.getenv("DIST_BACKEND") or "mpi").lower()
    if backend not in ("mpi", "nccl"):
      raise ValueError(f"distributed.init: backend must be 'mpi' or 'nccl', got {backend!r}")
    if backend == "nccl":
      from attograd.distributed.nccl import NCCLComm
      self.nccl = NCCLComm(self)
    if self.size > 1: self._install_failure_handlers()

  # ***** failing fast: an exception aborts the job; a rank stopped by the launcher says which rank is gone *****
  def _install_failure_handlers(self) -> None:
    self._prev_hook = sys.excepthook
    sys.excepthook = self._excepthook
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL: signal.signal(signal.SIGTERM, self._on_sigterm)
  def _excepthook(self, typ: type[BaseException], val: BaseException, tb: Any) -> None:
    self._prev_hook(typ, val, tb)
    sys.stderr.write(f"attograd.distributed: rank {self.rank} of {self.size} raised {typ.__name__} (above); "
                     "aborting the job so that no other rank waits for it\n")
    sys.stderr.flush()
    self.comm.Abort(1)
  def _on_sigterm(self, signum: int, frame: Any) -> None:
    # Open MPI's launcher stops every rank when one exits early: say which one is gone (those on this host are checked)
    gone = self.gone_ranks()
    why = f"rank {', '.join(map(str, gone))} exited" if gone else "another rank failed (the launcher's report names it)"
    sys.stderr.write(f"attograd.distributed: rank {self.rank} was stopped by the MPI launcher because {why}\n")
    sys.stderr.flush()
    os._exit(128 + signum)
  def gone_ranks(self) -> list[int]:
    """Ranks on this host whose process has exited."""
    return [r for r, (host, pid) in enumerate(self.peers)
            if r != self.rank and host == self.host and _process_gone(pid)]
  def _failed(self, what: str, e: Exception) -> DistributedError:
    """An MPI error turned into one that names the failed ranks (MPI reports them with ULFM: mpirun --with-ft ulfm)."""
    failed: list[int] = []
    try:
      g = self.comm.Get_failed()
      failed = list(self.MPI.Group.Translate_ranks(g, list(range(g.Get_size())), self.comm.Get_group()))
    except Exception: failed = self.gone_ranks()
    who = f"rank {', '.join(map(str, failed))} failed (its process is gone)" if failed else "a rank failed"
    return DistributedError(f"{what}: {who}; seen by rank {self.rank} ({e})")

  # ***** every collective starts with an agreement, checked by rank 0 *****
  def agree(self, what: str, header: tuple, timeout: float | None) -> float:
    """Every rank has called collective number `self.seq` as `what` with the same header (shapes, dtypes, op), or all
    arrived ranks raise the same DistributedError; a rank missing at the deadline is named. Returns the deadline for
    the data transfer that follows."""
    self.seq += 1
    limit = self.timeout if timeout is None else float(timeout)
    mine = (self.seq, what, header)
    if self.size > 1:
      try: self._agree_root(mine, limit) if self.rank == 0 else self._agree_member(mine, limit)
      except self.MPI.Exception as e: raise self._failed(f"{what} #{self.seq}", e) from None
    return time.monotonic() + limit
  def _agree_root(self, mine: tuple, limit: float) -> None:
    deadline = time.monotonic() + limit
    pending = {r: self.ctl.irecv(source=r, tag=_HEADER) for r in range(1, self.size)}
    got: dict[int, tuple] = {0: mine}
    _poll(lambda: _collect(pending, got), deadline)
    verdict = None
    if pending:
      missing = sorted(pending)
      gone = [r for r in missing if r in self.gone_ranks()]
      verdict = (f"{mine[1]} #{mine[0]}: rank {', '.join(map(str, missing))} did not arrive within {limit:g} s"
                 + (f" (rank {', '.join(map(str, gone))} has exited)" if gone else "")
                 + f"; rank {', '.join(map(str, sorted(got)))} did")
    elif any(h != mine for h in got.values()):
      desc = "; ".join(f"rank {r} called {h[1]} #{h[0]} with {_describe(h[2])}" for r, h in sorted(got.items()))
      verdict = f"{mine[1]}: the ranks disagree: {desc}"
    sends = [self.ctl.isend(verdict, dest=r, tag=_VERDICT) for r in got if r != 0]
    _poll(lambda: all(s.Test() for s in sends), deadline + 1.0)
    if verdict is not None: raise DistributedError(verdict)
  def _agree_member(self, mine: tuple, limit: float) -> None:
    # rank 0 names the missing ranks at its deadline: wait a little longer for its verdict than it waits for us
    deadline = time.monotonic() + limit * 1.1 + 1.0
    send = self.ctl.isend(mine, dest=0, tag=_HEADER)
    recv = self.ctl.irecv(source=0, tag=_VERDICT)
    box: list[Any] = []
    def done() -> bool:
      if not box and (r := recv.test())[0]: box.append(r[1])
      return bool(box) and send.Test()
    if not _poll(done, deadline):
      gone = " (its process has exited)" if 0 in self.gone_ranks() else ""
      raise DistributedError(f"{mine[1]} #{mine[0]}: rank 0, which checks every collective, did not answer rank "
                             f"{self.rank} within {limit:g} s{gone}")
    if box[0] is not None: raise DistributedError(box[0])

  def wait(self, req: Any, what: str, deadline: float) -> None:
    """Drive a non-blocking MPI request to completion (MPI makes progress inside Test), or fail at the deadline."""
    try:
      while not req.Test():
        if time.monotonic() > deadline:
          raise DistributedError(f"{what} #{self.seq}: the transfer did not complete in time on rank {self.rank}; "
                                 "a rank stopped in the middle of it")
    except self.MPI.Exception as e: raise self._failed(f"{what} #{self.seq}", e) from None

  # ***** the collectives *****
  def all_reduce(self, t: Tensor, op: str, timeout: float | None) -> Tensor:
    return self.all_reduce_many([t], op, timeout)[0]
  def all_reduce_many(self, ts: list[Tensor], op: str, timeout: float | None = None) -> list[Tensor]:
    """all_reduce of each tensor, agreed on once; each transfer starts as soon as its tensor is on the host."""
    for t in ts:
      if op == "mean" and not dtypes.is_float(t.dtype):
        raise TypeError(f"all_reduce: op='mean' needs a float tensor, got {t.dtype}; use op='sum'")
      if t.dtype not in _MPI_TYPE and t.dtype not in _WIDEN: raise TypeError(f"all_reduce: unsupported dtype {t.dtype}")
    header: tuple[Any, ...] = tuple((tuple(t.shape), t.dtype.name) for t in ts) + (op,)
    deadline = self.agree("all_reduce", header[0] + (op,) if len(ts) == 1 else header, timeout)
    if self.nccl is not None and all(self.nccl.handles(t) for t in ts):
      return [self.nccl.all_reduce(t, op, deadline) for t in ts]
    bufs, reqs = [], []
    for t in ts:
      wire = _WIDEN.get(t.dtype, t.dtype)
      bufs.append(buf := host_bytes(t.cast(wire)))
      if self.size > 1 and buf.nbytes:
        mop = getattr(self.MPI, (_MPI_BOOL_OP if wire is dtypes.bool else _MPI_OP)[op])
        reqs.append(self.comm.Iallreduce(self.MPI.IN_PLACE, [buf, getattr(self.MPI, _MPI_TYPE[wire])], mop))
        reqs[-1].Test()  # a first push of progress before copying out the next tensor
    for req in reqs: self.wait(req, "all_reduce", deadline)
    outs = []
    for t, buf in zip(ts, bufs):
      out = from_host(buf, tuple(t.shape), _WIDEN.get(t.dtype, t.dtype), t.device)
      if op == "mean": out = out / self.size
      outs.append(out.cast(t.dtype))
    return outs
  def broadcast(self, t: Tensor, root: int, timeout: float | None) -> Tensor:
    if not isinstance(root, int) or not 0 <= root < self.size:
      raise ValueError(f"broadcast: root must be a rank in 0..{self.size - 1}, got {root!r}")
    deadline = self.agree("broadcast", (tuple(t.shape), t.dtype.name, root), timeout)
    if self.nccl is not None and self.nccl.handles(t): return self.nccl.broadcast(t, root, deadline)
    buf = host_bytes(t) if self.rank == root else memoryview(bytearray(t.nbytes()))
    if self.size > 1 and buf.nbytes: self.wait(self.comm.Ibcast([buf, self.MPI.BYTE], root=root), "broadcast", deadline)
    return from_host(buf, tuple(t.shape), t.dtype, t.device)
  def all_gather(self, t: Tensor, timeout: float | None) -> Tensor:
    deadline = self.agree("all_gather", (tuple(t.shape), t.dtype.name), timeout)
    if self.nccl is not None and self.nccl.handles(t): return self.nccl.all_gather(t, deadline)
    send = host_bytes(t)
    recv = memoryview(bytearray(send.nbytes * self.size))
    if self.size == 1: recv[:] = send
    elif send.nbytes:
      req = self.comm.Iallgather([send, self.MPI.BYTE], [recv, self.MPI.BYTE])
      self.wait(req, "all_gather", deadline)
    return from_host(recv, (self.size,) + tuple(t.shape), t.dtype, t.device)
  def barrier(self, timeout: float | None) -> None: self.agree("barrier", (), timeout)

def _collect(pending: dict[int, Any], got: dict[int, tuple]) -> bool:
  for r in list(pending):
    if (res := pending[r].test())[0]:
      got[r] = res[1]
      del pending[r]
  return not pending

def _poll(done: Callable[[], bool], deadline: float) -> bool:
  """Call done() until it is true (True) or the deadline passes (False): spinning at first, then sleeping a little
  longer each time, so a rank waiting for a slow one doesn't take a core from it."""
  pause = 0.0
  while not done():
    if time.monotonic() > deadline: return False
    if pause: time.sleep(pause)
    pause = min(0.002, pause * 2 if pause else 1e-5)
  return True

def _describe(header: tuple) -> str:
  if not header: return "no tensor"
  if isinstance(header[0], tuple) and len(header[0]) == 2 and isinstance(header[0][1], str):  # several tensors at once
    return f"{len(header) - 1} tensors (" + ", ".join(f"{s} {d}" for s, d in header[:-1]) + f"), op {header[-1]}"
  shape, dtype, *rest = header
  extra = f", {'op' if isinstance(rest[0], str) else 'root'} {rest[0]}" if rest else ""
  return f"shape {shape} {dtype}{extra}"
