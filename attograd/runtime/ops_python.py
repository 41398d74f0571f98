"""The PYTHON device: runs the same linear programs as every other backend, one UOp at a time, in plain Python.
It needs no compiler and is the executable reference for what a program means."""
from __future__ import annotations
import itertools, pickle, struct, time
from typing import Any
from attograd.device import Allocator, Compiled, Compiler
from attograd.dtype import (DType, PtrDType, bf16_bits_to_float, dtypes, float_to_bf16_bits, float_to_fp8_bits,
                            fp8_bits_to_float, truncate_to)
from attograd.dtype import from_storage_scalar, to_storage_scalar  # noqa: F401  (tinygrad's ops_python names them)
from attograd.helpers import getenv, prod
from attograd.renderer import Renderer
from attograd.renderer.cstyle import CUDARenderer, fuse_wmma_acc
from attograd.uop.ops import GroupOp, Ops, UOp, exec_alu

class PythonAllocator(Allocator):
  def alloc(self, nbytes: int) -> memoryview: return memoryview(bytearray(nbytes))
  def copyin(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def copyout(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def as_memoryview(self, buf: memoryview, nbytes: int) -> memoryview: return buf[:nbytes]
  def offset_handle(self, buf: memoryview, nbytes: int, offset: int) -> memoryview: return buf[offset:offset + nbytes]

class PythonRenderer(Renderer):
  """The 'source' is the program itself, serialized."""
  def __init__(self) -> None: super().__init__(device="PYTHON")
  def render(self, name: str, uops: list[UOp]) -> str: return pickle.dumps(uops).hex()
  def prepare(self, sink: UOp) -> UOp: return sink

class PythonGPURenderer(CUDARenderer):
  """Programs lowered exactly as for CUDA (thread indices, work-group memory, warp shuffles, tensor cores) and run by
  the emulator below instead of a GPU: the executable check of the GPU lowering. PYTHON_GPU=1 gives PYTHON this one."""
  def __init__(self, arch: str = "sm_80"): super().__init__(device="PYTHON", arch=arch)
  def render(self, name: str, uops: list[UOp]) -> str: return pickle.dumps(fuse_wmma_acc(uops)).hex()

class PythonCompiler(Compiler):
  cachekey = None
  def compile(self, src: str) -> bytes: return bytes.fromhex(src)

def _fmt(d: DType) -> str:
  # memoryview can't cast to half, bfloat16 or fp8: those are read as raw 16- or 8-bit words
  if d in (dtypes.bfloat16, dtypes.float16): return "H"
  return "B" if d is dtypes.bool or d in dtypes.fp8s else d.fmt  # type: ignore[return-value]
def _h2f(x: int) -> float: return struct.unpack("<e", struct.pack("<H", x))[0]
def _f2h(x: float) -> int: return struct.unpack("<H", struct.pack("<e", truncate_to(x, dtypes.float16)))[0]
def _from_raw(x: Any, d: DType) -> Any:
  if d is dtypes.bfloat16: return bf16_bits_to_float(x)
  if d is dtypes.float16: return _h2f(x)
  if d in dtypes.fp8s: return fp8_bits_to_float(x, d)
  return bool(x) if d is dtypes.bool else x
def _to_raw(x: Any, d: DType) -> Any:
  if d is dtypes.bfloat16: return float_to_bf16_bits(x)
  if d is dtypes.float16: return _f2h(x)
  if d in dtypes.fp8s: return float_to_fp8_bits(x, d)
  return int(bool(x)) if d is dtypes.bool else x

def _cast(v: Any, src: DType, dst: DType) -> Any:
  if dst is dtypes.bool: return bool(v)
  if dtypes.is_int(dst):
    if isinstance(v, float):
      if v != v or v in (float("inf"), float("-inf")): return dtypes.min(dst) if dtypes.is_unsigned(dst) is False else 0
      v = int(v)
    return truncate_to(int(v), dst)
  return truncate_to(float(v), dst)

def _bitcast(v: Any, src: DType, dst: DType) -> Any:
  raw = struct.pack(f"<{_fmt(src)}", _to_raw(v, src))
  return _from_raw(struct.unpack(f"<{_fmt(dst)}", raw)[0], dst)

class PythonProgram:
  def __init__(self, name: str, lib: bytes):
    self.name, self.uops = name, pickle.loads(lib)  # only ever our own programs, made in this process
    # the runner passes only the buffers the program uses, in DEFINE_GLOBAL order
    self.gpos = {g: i for i, g in enumerate(sorted({u.arg for u in self.uops if u.op is Ops.DEFINE_GLOBAL}))}
    self.jump: dict[int, int] = {}
    starts: dict[UOp, int] = {}
    for i, u in enumerate(self.uops):
      if u.op is Ops.RANGE: starts[u] = i
      elif u.op is Ops.ENDRANGE:
        self.jump[starts[u.src[0]]] = i
        self.jump[i] = starts[u.src[0]]
  def __call__(self, *bufs: memoryview, vals: tuple[int, ...] = (), global_size: tuple[int, ...] | None = None,
               local_size: tuple[int, ...] | None = None, wait: bool = False) -> float | None:
    st = time.perf_counter()
    if global_size is not None: self._run_gpu(bufs, vals, tuple(global_size), tuple(local_size or (1,)))
    else: self._run(bufs, vals)
    return time.perf_counter() - st if wait else None
  def _run(self, bufs: tuple[memoryview, ...], vals: tuple[int, ...]) -> None:
    uops, jump = self.uops, self.jump
    var_names = sorted({u.arg[0] for u in uops if u.op is Ops.DEFINE_VAR})
    var_vals = dict(zip(var_names, vals))
    views: dict[int, memoryview] = {}
    v: dict[UOp, Any] = {}
    pc, n = 0, len(uops)
    while pc < n:
      u = uops[pc]
      op = u.op
      if op is Ops.RANGE:
        if u not in v or v[u] is None: v[u] = 0
        if v[u] >= v[u.src[0]]:
          v[u] = None
          pc = jump[pc] + 1
          continue
      elif op is Ops.ENDRANGE:
        r = u.src[0]
        v[r] += 1
        if v[r] < v[r.src[0]]:
          pc = jump[pc] + 1
          continue
        v[r] = None
      elif op is Ops.CONST: v[u] = u.arg
      elif op is Ops.DEFINE_GLOBAL:
        assert isinstance(u.dtype, PtrDType)
        views[u.arg] = bufs[self.gpos[u.arg]].cast(_fmt(u.dtype.base))  # type: ignore[call-overload]
        v[u] = u.arg
      elif op is Ops.DEFINE_VAR: v[u] = var_vals[u.arg[0]]
      elif op is Ops.LOAD:
        if len(u.src) == 3 and not v[u.src[2]]: v[u] = dtypes.as_const(0, u.dtype)
        else:
          idx = v[u.src[1]]
          buf = views[v[u.src[0]]]
          if not 0 <= idx < len(buf):
            raise IndexError(f"PYTHON: {self.name} reads index {idx} of a {len(buf)}-element buffer")
          v[u] = _from_raw(buf[idx], u.dtype)
      elif op is Ops.STORE:
        g = u.src[0]
        assert isinstance(g.dtype, PtrDType)
        x, idx, buf = v[u.src[2]], v[u.src[1]], views[v[g]]
        if len(u.src) < 4 or v[u.src[3]]:  # a gated store whose gate is off writes nothing
          if not 0 <= idx < len(buf):
            raise IndexError(f"PYTHON: {self.name} writes index {idx} of a {len(buf)}-element buffer")
          buf[idx] = _to_raw(x, g.dtype.base)
      elif op is Ops.DEFINE_ACC: v[u] = v[u.src[0]]
      elif op is Ops.ACC_ASSIGN: v[u.src[0]] = v[u.src[1]]
      elif op is Ops.CAST: v[u] = _cast(v[u.src[0]], u.src[0].dtype, u.dtype)
      elif op is Ops.BITCAST: v[u] = _bitcast(v[u.src[0]], u.src[0].dtype, u.dtype)
      elif op in GroupOp.ALU: v[u] = exec_alu(op, u.dtype, [v[s] for s in u.src])
      else: raise RuntimeError(f"PYTHON: can't run {op}")
      pc += 1

  # ***** GPU programs: every work-group's threads run each UOp together (SIMT), so barriers, shuffles and tensor
  # cores see the whole group; values are lists with one entry per thread (thread id x + X*(y + Y*z), as in CUDA) *****
  def _run_gpu(self, bufs: tuple[memoryview, ...], vals: tuple[int, ...], gsize: tuple[int, ...],
               lsize: tuple[int, ...]) -> None:
    var_vals = dict(zip(sorted({u.arg[0] for u in self.uops if u.op is Ops.DEFINE_VAR}), vals))
    views = {u.arg: bufs[self.gpos[u.arg]].cast(_fmt(u.dtype.base))  # type: ignore[call-overload]
             for u in self.uops if u.op is Ops.DEFINE_GLOBAL
             and isinstance(u.dtype, PtrDType)}
    ls = lsize + (1,) * (3 - len(lsize))
    n = prod(ls)
    lids = [(t % ls[0], t // ls[0] % ls[1], t // (ls[0] * ls[1])) for t in range(n)]
    for gid in itertools.product(*[range(g) for g in gsize]): self._run_group(views, var_vals, gid, lids)

  def _run_group(self, views: dict[int, memoryview], var_vals: dict[str, int], gid: tuple[int, ...],
                 lids: list[tuple[int, int, int]]) -> None:
    uops, jump, n = self.uops, self.jump, len(lids)
    v: dict[UOp, list[Any]] = {}
    mem: dict[UOp, Any] = {}   # DEFINE_GLOBAL / DEFINE_LOCAL -> its memory (a local is a list of Python values)
    count: dict[UOp, int] = {}
    def memory(u: UOp) -> Any:
      while u.op is Ops.BARRIER: u = u.src[0]
      return mem[u]
    pc = 0
    while pc < len(uops):
      u = uops[pc]
      op = u.op
      if op is Ops.RANGE:  # loop bounds are the same for every thread (constants or variables)
        if count.get(u) is None: count[u] = 0
        if count[u] >= v[u.src[0]][0]:
          count[u] = None  # type: ignore[assignment]
          pc = jump[pc] + 1
          continue
        v[u] = [count[u]] * n
      elif op is Ops.ENDRANGE:
        r = u.src[0]
        count[r] += 1
        if count[r] < v[r.src[0]][0]:
          v[r] = [count[r]] * n
          pc = jump[pc] + 1
          continue
        count[r] = None  # type: ignore[assignment]
      elif op is Ops.CONST:
        v[u] = [u.arg if u.dtype.count == 1 or isinstance(u.arg, tuple) else (u.arg,) * u.dtype.count] * n
      elif op is Ops.DEFINE_GLOBAL: mem[u] = views[u.arg]
      elif op is Ops.DEFINE_LOCAL: mem[u] = [0] * u.arg[1]
      elif op is Ops.BARRIER: pass  # every thread has run every UOp before this one
      elif op is Ops.DEFINE_VAR: v[u] = [var_vals[u.arg[0]]] * n
      elif op is Ops.SPECIAL:
        name, size = u.arg
        dim = int(name[-1])
        v[u] = [gid[dim]] * n if name.startswith("gidx") else [lid[dim] for lid in lids]
        if any(x >= size for x in v[u]): raise RuntimeError(f"PYTHON: {self.name}: {name} runs past its size {size}")
      elif op is Ops.LOAD:
        buf, glob = memory(u.src[0]), u.src[0].op is Ops.DEFINE_GLOBAL
        gate = v[u.src[2]] if len(u.src) == 3 else [True] * n
        v[u] = [self._read(buf, glob, i, u.dtype) if ok else dtypes.as_const(0, u.dtype)
                for i, ok in zip(v[u.src[1]], gate)]
      elif op is Ops.STORE:
        buf, dst = memory(u.src[0]), u.src[0]
        while dst.op is Ops.BARRIER: dst = dst.src[0]
        gate = v[u.src[3]] if len(u.src) == 4 else [True] * n
        assert isinstance(dst.dtype, PtrDType)
        for i, x, ok in zip(v[u.src[1]], v[u.src[2]], gate):
          if not ok: continue
          if not 0 <= i < len(buf):
            raise IndexError(f"PYTHON: {self.name} writes index {i} of a {len(buf)}-element buffer")
          buf[i] = _to_raw(x, dst.dtype.base) if dst.op is Ops.DEFINE_GLOBAL else x
      elif op is Ops.DEFINE_ACC: v[u] = list(v[u.src[0]])
      elif op is Ops.ACC_ASSIGN: v[u.src[0]] = v[u.src[1]]
      elif op is Ops.CAST: v[u] = [_cast(x, u.src[0].dtype, u.dtype) for x in v[u.src[0]]]
      elif op is Ops.BITCAST: v[u] = [_bitcast(x, u.src[0].dtype, u.dtype) for x in v[u.src[0]]]
      elif op is Ops.VECTORIZE: v[u] = [tuple(xs) for xs in zip(*(v[s] for s in u.src))]
      elif op is Ops.GEP: v[u] = [x[u.arg] for x in v[u.src[0]]]
      elif op is Ops.SHUFFLE: v[u] = shuffle_xor(v[u.src[0]], u.arg)
      elif op is Ops.WMMA: v[u] = mma_m16n8k16(v[u.src[0]], v[u.src[1]], v[u.src[2]], u.arg[3])
      elif op in GroupOp.ALU and u.dtype.count > 1:
        v[u] = [tuple(exec_alu(op, u.dtype.scalar(), list(e)) for e in zip(*xs)) for xs in zip(*(v[s] for s in u.src))]
      elif op in GroupOp.ALU: v[u] = [exec_alu(op, u.dtype, list(xs)) for xs in zip(*(v[s] for s in u.src))]
      else: raise RuntimeError(f"PYTHON: can't run {op} in a GPU program")
      pc += 1

  def _read(self, buf: Any, glob: bool, i: int, d: DType) -> Any:
    if not 0 <= i < len(buf): raise IndexError(f"PYTHON: {self.name} reads index {i} of a {len(buf)}-element buffer")
    return _from_raw(buf[i], d) if glob else buf[i]

WARP = 32

def shuffle_xor(vals: list[Any], mask: int) -> list[Any]:
  """__shfl_xor_sync(0xffffffff, x, mask) for every thread: each reads the lane whose index differs by `mask`."""
  if len(vals) % WARP or not 0 < mask < WARP:
    raise RuntimeError(f"PYTHON: a shuffle needs whole warps of {WARP} threads and a mask below {WARP}, got "
                       f"{len(vals)} threads and mask {mask}")
  return [vals[t ^ mask] for t in range(len(vals))]

def mma_fragment_layout(lane: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[tuple[int, int]]]:
  """Transcribed from the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"), written apart from
  the lowerer's index math on purpose: (row, col) of each element lane `lane` holds of A (16x16), B (16x8) and
  C/D (16x8)."""
  group, tig = lane >> 2, lane % 4
  a = [(group if i < 2 or 4 <= i < 6 else group + 8, tig * 2 + (i & 0x1) + (8 if i >= 4 else 0)) for i in range(8)]
  b = [(tig * 2 + (i & 0x1) + (8 if i >= 2 else 0), group) for i in range(4)]
  c = [(group if i < 2 else group + 8, tig * 2 + (i & 0x1)) for i in range(4)]
  return a, b, c

def mma_m16n8k16(a: list[tuple], b: list[tuple], c: list[tuple], dtype: DType) -> list[tuple]:
  """mma.sync.aligned.m16n8k16.row.col.f32.<dtype>.<dtype>.f32 for every warp of a work-group: gather each warp's A,
  B and C tiles from its lanes' fragments, D = A @ B + C (exact products, rounded to float32 once), scatter D back."""
  if len(a) % WARP: raise RuntimeError(f"PYTHON: an mma needs whole warps of {WARP} threads, got {len(a)} threads")
  out: list[tuple] = []
  for w in range(0, len(a), WARP):
    A = [[0.0] * 16 for _ in range(16)]
    B = [[0.0] * 8 for _ in range(16)]
    C = [[0.0] * 8 for _ in range(16)]
    for lane in range(WARP):
      fa, fb, fc = mma_fragment_layout(lane)
      for (r, col), x in zip(fa, a[w + lane]): A[r][col] = truncate_to(float(x), dtype)
      for (r, col), x in zip(fb, b[w + lane]): B[r][col] = truncate_to(float(x), dtype)
      for (r, col), x in zip(fc, c[w + lane]): C[r][col] = float(x)
    D = [[truncate_to(C[i][j] + sum(A[i][kk] * B[kk][j] for kk in range(16)), dtypes.float32) for j in range(8)]
         for i in range(16)]
    out += [tuple(D[r][col] for r, col in mma_fragment_layout(lane)[2]) for lane in range(WARP)]
  return out

class PythonDevice(Compiled):
  def __init__(self, device: str):
    renderer = PythonGPURenderer() if getenv("PYTHON_GPU", 0) else PythonRenderer()
    super().__init__(device, PythonAllocator(), renderer, PythonCompiler(), PythonProgram)
