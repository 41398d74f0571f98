"""Renderers: a linear program of UOps -> source text for one language."""
from __future__ import annotations
import math, struct
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, cast
from attograd.dtype import DType, dtypes, fp8_bias, fp8_bits_to_float, fp8_max_code
from attograd.helpers import DEV, Target
from attograd.uop.ops import GroupOp, Ops, PatternMatcher, UOp, sint

@dataclass
class Renderer:
  """What a language can do. `extra_matcher` holds the language's own rewrite rules, run before rendering."""
  device: str = ""
  has_threads: bool = False
  extra_matcher: PatternMatcher | None = None
  supports_float16: bool = True
  supports_vectors: bool = False
  # EXP2/LOG2 rewritten into adds, multiplies and bit ops (codegen/transcendental.py) instead of math-library calls:
  # for CPUs, where that lets them run on vector lanes; GPUs have fast native exp2/log2
  decompose_transcendentals: bool = False
  global_max: tuple[int, ...] | None = None
  # GPU-style languages: output axes become work-group (gidx) and thread (lidx) indices instead of loops
  has_local: bool = False
  local_max: int = 256          # threads in one work-group
  # threads (has_threads): a kernel runs across cores when its loop space has at least thread_min_work points or it
  # moves at least thread_min_bytes of memory (where starting the other cores costs more than a tiny kernel's run)
  thread_min_work: int = 32768
  thread_min_bytes: int = 1 << 62
  # the language has a fused multiply-add (MULACC) that runs at the speed of a multiply: the code generator fuses
  # every float a*b+c into one (codegen/fma.py) and the compiler fuses nothing itself
  fma: bool = False
  # int8 dot products in one instruction (x86 VNNI's vpdpbusd on 16 int32 lanes): the renderer writes nn/gguf.py's
  # dot4 sums with it, and a quantized one-row matmul (a decode step) quantizes its activation row to int8 (as
  # llama.cpp does) only where this is set: elsewhere the same sums are a dozen ops per word, slower than floats
  int8_dot: bool = False
  def render(self, name: str, uops: list[UOp]) -> str: raise NotImplementedError("a Renderer subclass renders source")
  def prepare(self, sink: UOp) -> UOp:
    """The language's own rewrites of a lowered kernel before it is linearized (e.g. half math done in float)."""
    return sink
  def launch_sizes(self, uops: list[UOp]) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(global, local) sizes a kernel of this language is launched with: (None, None) where it runs its own loops."""
    return launch_dims(uops) if self.has_local else (None, None)
  @property
  def compiler(self) -> Any:
    """tinygrad's name: the Compiler of the device this renderer writes for (the device registers it when it opens; a
    layer below the device can't look it up): `renderer.compiler.compile(src)` builds a kernel written as source
    text (a hand-written kernel's PROGRAM). None for a renderer no device uses."""
    return _compilers.get(id(self))
  @property
  def target(self) -> Target:
    """tinygrad's name: the DEV target of this renderer's device (renderer and arch as DEV names them, e.g.
    DEV=NULL::gfx1100; empty where DEV says nothing of them). attograd's renderers read none of its fields."""
    return DEV.target(self.device)
  @property
  def supports_float4(self) -> bool:
    """tinygrad's name: kernels may load, store and compute with vector lanes (float4 and the like)."""
    return self.supports_vectors
  @property
  def has_shared(self) -> bool:
    """tinygrad's name: kernels have work-group shared memory (DEFINE_LOCAL); every GPU-style language here has it."""
    return self.has_local
  @property
  def code_for_op(self) -> dict:
    """ALU ops the language writes as source expressions, to functions of the operands' text and the dtype (tinygrad's
    table; the C family fills it). LLVM IR and the Python interpreter render no expressions: empty."""
    return {}
  def supported_dtypes(self) -> set[DType]:
    """The dtypes this language's kernels can load, store and compute with (tinygrad's API). Every renderer runs half,
    bfloat16 and fp8 at least through float32 conversions, so only a missing hardware type (double) takes one out."""
    return set(dtypes.all)

# what a linear program (codegen/linearize.py's output) holds: the ops every renderer's rule table must render, and
# those only GPU languages get (thread indices, work-group memory; warp shuffles and tensor cores where they have them)
PROGRAM_OPS = frozenset({Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR, Ops.CONST, Ops.RANGE, Ops.ENDRANGE, Ops.DEFINE_ACC,
                         Ops.ACC_ASSIGN, Ops.LOAD, Ops.STORE, Ops.CAST, Ops.BITCAST, Ops.GEP, Ops.VECTORIZE}
                        | GroupOp.ALU) - {Ops.MULACC}
FMA_OPS = frozenset({Ops.MULACC})  # in the programs of a language with fma only
GPU_OPS = frozenset({Ops.SPECIAL, Ops.DEFINE_LOCAL, Ops.BARRIER})
WARP_OPS = frozenset({Ops.SHUFFLE, Ops.WMMA})

def launch_dims(uops: list[UOp] | tuple[UOp, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
  """A GPU kernel's launch: work-groups per dimension (its gidx<d> thread indices) and threads per work-group (lidx<d>),
  1 in a dimension no index reads. The one source of launch sizes: the thread indices the program itself reads."""
  sizes: dict[str, dict[int, int]] = {"g": {}, "l": {}}
  for u in uops:
    if u.op is Ops.SPECIAL: sizes[u.arg[0][0]][int(u.arg[0][-1])] = u.arg[1]
  glob, loc = ({d: n[d] if d in n else 1 for d in range(max(n, default=0) + 1)} for n in (sizes["g"], sizes["l"]))
  return tuple(glob.values()), tuple(loc.values())

class Fp8Format(NamedTuple):
  """The constants of one fp8 format that its float32 conversion functions (C and LLVM IR) are written with: the
  kernels' versions of dtype.float_to_fp8_bits / fp8_bits_to_float, on the bits of a float32."""
  name: str           # for the helper functions' names: __f32_to_fp8e4m3, __fp8e4m3_to_f32
  m_bits: int         # mantissa bits
  e_mask: int         # the exponent field, shifted down
  rebias: int         # float32's exponent bias minus fp8's
  unit: float         # the subnormal step, 2**(1 - bias - m_bits): a subnormal is m * unit
  min_normal: int     # bits of the smallest normal fp8 value as a float32: below it, the result is subnormal
  magic: float        # a float32 whose ulp is `unit`: |x| + magic rounds |x| to a multiple of unit (nearest even)
  overflow: int       # float32 bits (of |x|) from which the result is `over` (e4m3: past 448; others: the rounding tie)
  over: int           # e4m3 saturates to 0x7E (+-448), e5m2 goes to inf (0x7C), fnuz to its NaN (0x80, the sign's bit)
  nan: int            # the NaN a NaN becomes, ORed with the sign: 0x7F, or 0x80 for fnuz (one NaN, no sign)
  has_inf: bool       # e5m2: exponent all ones is inf (mantissa 0) or NaN; e4m3fn: only S.1111.111 is NaN
  fnuz: bool          # no -0 (0x80 is the NaN, so a result of zero drops its sign) and every other code is a number

def f32_bits(x: float) -> int: return struct.unpack("<I", struct.pack("<f", x))[0]

def fp8_format(d: DType) -> Fp8Format:
  e_bits, m_bits = dtypes.finfo(d)
  bias, fnuz, top = fp8_bias(d), d in dtypes.fp8_fnuz, fp8_bits_to_float(fp8_max_code(d), d)
  # past the largest finite value `top`, results round to the next power of two and overflow from the tie between
  # them (e5m2: 61440, e4m3fnuz: 248); e4m3fn saturates anything past 448
  tie = top + 2.0 ** (math.frexp(top)[1] - 2 - m_bits)
  overflow = f32_bits(top) + 1 if d is dtypes.fp8e4m3 else f32_bits(tie)
  over = 0x80 if fnuz else 0x7E if d is dtypes.fp8e4m3 else 0x7C
  name = {dtypes.fp8e4m3: "fp8e4m3", dtypes.fp8e5m2: "fp8e5m2", dtypes.fp8e4m3fnuz: "fp8e4m3fnuz"}.get(d, "fp8e5m2fnuz")
  return Fp8Format(name, m_bits, (1 << e_bits) - 1, 127 - bias, 2.0 ** (1 - bias - m_bits), (127 + 1 - bias) << 23,
                   2.0 ** (23 + 1 - bias - m_bits), overflow, over, 0x80 if fnuz else 0x7F, d is dtypes.fp8e5m2, fnuz)

@dataclass(frozen=True)
class Estimates:
  """What one run of a kernel costs, in tinygrad's fields: `ops` (ALU ops on floats, the GFLOPS figure), `lds` (bytes
  its loads and stores move, each counted every time it runs: a load in a loop of 64 counts 64 times) and `mem`
  (bytes of the buffers it touches, each once)."""
  ops: sint = 0
  lds: sint = 0
  mem: sint = 0
  def __add__(self, o: Estimates) -> Estimates: return Estimates(self.ops + o.ops, self.lds + o.lds, self.mem + o.mem)
  @staticmethod
  def float_ops(uops: tuple[UOp, ...]) -> sint:
    """The `ops` of a linear program: each float ALU op's lanes (a MULACC counts 2) times the trip counts of the loops
    around it and the work-items launched, so an op after a reduce counts once per output, not once per summand.
    Index math (integers) is not counted."""
    def cost(u: UOp) -> int:
      if u.op is not Ops.MULACC and u.op not in GroupOp.ALU or u.dtype.scalar() not in dtypes.floats: return 0
      return u.dtype.count * (2 if u.op is Ops.MULACC else 1)
    return Estimates._per_run(uops, cost)
  @staticmethod
  def _per_run(uops: tuple[UOp, ...], cost: Callable[[UOp], int]) -> int:
    total, mults = 0, [1]
    for u in uops:
      if u.op is Ops.RANGE: mults.append(mults[-1] * int(u.src[0].vmax))
      elif u.op is Ops.ENDRANGE: mults.pop()
      elif u.op is Ops.SPECIAL: mults[-1] *= int(u.arg[1]) if u.arg[1].__class__ is int else int(u.arg[1].vmax)
      elif (c := cost(u)): total += c * mults[-1]
    return total
  @staticmethod
  def bytes_moved(uops: tuple[UOp, ...]) -> sint:
    """The `lds` of a linear program: each global LOAD and STORE's bytes (all its lanes) times the trip counts of the
    loops around it and the work-items (SPECIAL) launched; symbolic sizes count at their largest."""
    def cost(u: UOp) -> int:
      if u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_GLOBAL: return u.dtype.count * u.dtype.itemsize
      if u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_GLOBAL: return u.src[2].dtype.count * u.src[2].dtype.itemsize
      return 0
    return Estimates._per_run(uops, cost)

@dataclass(frozen=True)
class ProgramSpec:
  """A rendered kernel: its source, the buffers it reads and writes, its variables, and cost estimates."""
  name: str
  src: str
  device: str
  uops: tuple[UOp, ...] = ()
  globals: tuple[int, ...] = ()
  outs: tuple[int, ...] = (0,)
  vars: tuple[UOp, ...] = ()
  op_estimate: int = 0
  mem_estimate: int = 0
  applied_opts: tuple = field(default_factory=tuple)
  global_size: tuple[int, ...] | None = None   # GPU launch: work-groups per dimension (None: not a GPU kernel)
  local_size: tuple[int, ...] | None = None    # GPU launch: threads per work-group per dimension
  lds_estimate: sint = 0                        # bytes its loads and stores move in one run (Estimates.lds)
  @property
  def estimates(self) -> Estimates:
    """tinygrad's form of the cost figures: Estimates(ops, lds, mem)."""
    return Estimates(self.op_estimate, self.lds_estimate, self.mem_estimate)

# id of a device's renderer -> that device's Compiler (Renderer.compiler; kept out of the renderer's fields, which key
# the program cache on disk)
_compilers: dict[int, Any] = {}

def register_compiler(renderer: Renderer, compiler: Any) -> None:
  """Make `compiler` the renderer's Renderer.compiler (a device does, when it opens; the first one stays)."""
  _compilers.setdefault(id(renderer), compiler)

def text_rules(pm: PatternMatcher) -> Callable[[UOp, Any], str | None]:
  """A rendering table's rewrite, typed for what its rules return: a UOp's text (None where no rule matches)."""
  return cast(Callable[[UOp, Any], "str | None"], pm.rewrite)
