"""The PYTHON device: runs the same linear programs as every other backend, one UOp at a time, in plain Python.
It needs no compiler and is the executable reference for what a program means."""
from __future__ import annotations
import pickle, struct
from typing import Any
from attograd.device import Allocator, Compiled, Compiler
from attograd.dtype import DType, PtrDType, bf16_bits_to_float, dtypes, float_to_bf16_bits, truncate_to
from attograd.renderer import Renderer
from attograd.uop.ops import GroupOp, Ops, UOp, exec_alu

class PythonAllocator(Allocator):
  def alloc(self, nbytes: int) -> memoryview: return memoryview(bytearray(nbytes))
  def copyin(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def copyout(self, dest: memoryview, src: memoryview) -> None: dest[:] = src
  def as_memoryview(self, buf: memoryview, nbytes: int) -> memoryview: return buf[:nbytes]

class PythonRenderer(Renderer):
  """The 'source' is the program itself, serialized."""
  def __init__(self) -> None: super().__init__(device="PYTHON")
  def render(self, name: str, uops: list[UOp]) -> str: return pickle.dumps(uops).hex()
  def prepare(self, sink: UOp) -> UOp: return sink

class PythonCompiler(Compiler):
  cachekey = None
  def compile(self, src: str) -> bytes: return bytes.fromhex(src)

def _fmt(d: DType) -> str:
  # memoryview can't cast to half or bfloat16: those are read as raw 16-bit words
  return "H" if d in (dtypes.bfloat16, dtypes.float16) else ("B" if d is dtypes.bool else d.fmt)  # type: ignore[return-value]
def _h2f(x: int) -> float: return struct.unpack("<e", struct.pack("<H", x))[0]
def _f2h(x: float) -> int: return struct.unpack("<H", struct.pack("<e", truncate_to(x, dtypes.float16)))[0]
def _from_raw(x: Any, d: DType) -> Any:
  if d is dtypes.bfloat16: return bf16_bits_to_float(x)
  if d is dtypes.float16: return _h2f(x)
  return bool(x) if d is dtypes.bool else x
def _to_raw(x: Any, d: DType) -> Any:
  if d is dtypes.bfloat16: return float_to_bf16_bits(x)
  if d is dtypes.float16: return _f2h(x)
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
  def __call__(self, *bufs: memoryview, vals: tuple[int, ...] = ()) -> None:
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
        views[u.arg] = bufs[self.gpos[u.arg]].cast(_fmt(u.dtype.base))
        v[u] = u.arg
      elif op is Ops.DEFINE_VAR: v[u] = var_vals[u.arg[0]]
      elif op is Ops.LOAD:
        if len(u.src) == 3 and not v[u.src[2]]: v[u] = dtypes.as_const(0, u.dtype)
        else:
          idx = v[u.src[1]]
          buf = views[v[u.src[0]]]
          if not 0 <= idx < len(buf): raise IndexError(f"PYTHON: {self.name} reads index {idx} of a {len(buf)}-element buffer")
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

class PythonDevice(Compiled):
  def __init__(self, device: str):
    super().__init__(device, PythonAllocator(), PythonRenderer(), PythonCompiler(), PythonProgram)
