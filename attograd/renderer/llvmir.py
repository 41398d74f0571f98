"""The LLVM IR renderer: the same linear UOp programs the C renderer gets, written as one LLVM IR function by a rule
table (pm_render_llvm, at the end) whose rules write each UOp's instructions and give its SSA value.

Loops become a header block with a phi for the index, accumulators become allocas (mem2reg turns them back into
phis), gated loads read index 0 instead and select zero, and the lowerer's vector lanes become LLVM vector types.
Half, bfloat16 and fp8 math runs in float (like the PYTHON device and NumPy); bfloat16 and fp8 are held as their bits.
A "parallel" loop is split by two trailing arguments (core_id, core_count): the runtime calls the kernel once per
thread, with the GIL released, instead of OpenMP.
"""
from __future__ import annotations
import math, struct
from attograd.dtype import DType, dtypes, float_to_bf16_bits, float_to_fp8_bits, PtrDType
from attograd.renderer import Fp8Format, Renderer, f32_bits, fp8_format, text_rules
from attograd.renderer.cstyle import pm_promote_half
from attograd.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite

# ***** types and instructions *****

llvm_type: dict[DType, str] = {
  dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16",
  dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "half",
  dtypes.bfloat16: "i16", dtypes.float32: "float", dtypes.float64: "double", **{d: "i8" for d in dtypes.fp8s}}
storage_type: dict[DType, str] = {dtypes.bool: "i8"}  # memory holds a bool as a byte

# fast-math flags matching the C compiler's: none. No contract: the code generator writes the fused multiply-adds
# itself (llvm.fma, see codegen/fma.py), so an expression rounds the same in every kernel. No nnan/ninf (NaN and inf
# are values here), no nsz (x+0.0 must turn -0.0 into 0.0), no reassoc: reductions get explicit vector accumulators
FMF = ""
float_binary = {Ops.ADD: "fadd", Ops.SUB: "fsub", Ops.MUL: "fmul", Ops.FDIV: "fdiv"}
# (signed, unsigned) instruction for each integer op; bool uses the unsigned column
int_binary = {Ops.ADD: ("add", "add"), Ops.SUB: ("sub", "sub"), Ops.MUL: ("mul", "mul"), Ops.IDIV: ("sdiv", "udiv"),
              Ops.MOD: ("srem", "urem"), Ops.AND: ("and", "and"), Ops.OR: ("or", "or"), Ops.XOR: ("xor", "xor"),
              Ops.SHL: ("shl", "shl"), Ops.SHR: ("ashr", "lshr")}
# (signed int, unsigned int, float) predicate; float != is unordered so NaN != NaN, like C
comparisons = {Ops.CMPLT: ("slt", "ult", "olt"), Ops.CMPNE: ("ne", "ne", "une"), Ops.CMPEQ: ("eq", "eq", "oeq")}
# math ops as LLVM intrinsics (the backend turns them into instructions or libm calls: exp2f, sinf, ...)
intrinsics = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc", Ops.POW: "pow",
              Ops.MULACC: "fma"}

# bfloat16 <-> float, defined once per module and always inlined (round to nearest even, NaN stays NaN), and
# double -> float rounded to odd: rounding that to half then equals rounding the double to half directly
BF16_HELPERS = """define internal float @__bf16_to_f32(i16 %b) alwaysinline {
  %u = zext i16 %b to i32
  %s = shl i32 %u, 16
  %f = bitcast i32 %s to float
  ret float %f
}
define internal i16 @__f32_to_bf16(float %f) alwaysinline {
  %u = bitcast float %f to i32
  %a = and i32 %u, 2147483647
  %nan = icmp ugt i32 %a, 2139095040
  %h = lshr i32 %u, 16
  %lsb = and i32 %h, 1
  %bias = add i32 %lsb, 32767
  %r = add i32 %u, %bias
  %rh = lshr i32 %r, 16
  %t = trunc i32 %rh to i16
  %o = select i1 %nan, i16 32704, i16 %t
  ret i16 %o
}
define internal float @__f64_to_f32_odd(double %d) alwaysinline {
  %f = fptrunc double %d to float
  %back = fpext float %f to double
  %exact = fcmp ueq double %back, %d
  %bits = bitcast float %f to i32
  %fa = call double @llvm.fabs.f64(double %back)
  %da = call double @llvm.fabs.f64(double %d)
  %away = fcmp ogt double %fa, %da
  %down = sub i32 %bits, 1
  %toward0 = select i1 %away, i32 %down, i32 %bits
  %odd = or i32 %toward0, 1
  %obits = select i1 %exact, i32 %bits, i32 %odd
  %o = bitcast i32 %obits to float
  ret float %o
}
declare double @llvm.fabs.f64(double)
"""

def fp8_helpers(f: Fp8Format) -> str:
  """fp8 <-> float for one format, the same integer math on a float's bits as the C helpers (renderer/cstyle.py)."""
  sh, m_mask = 23 - f.m_bits, (1 << f.m_bits) - 1
  # special values: e5m2's all-ones exponent is inf (mantissa 0) or NaN; e4m3fn's only special is NaN, S.1111.111;
  # fnuz's is its NaN 0x80, which has no sign (%sx: the sign the result gets)
  if f.has_inf: special = (f"  %isspec = icmp eq i32 %e, {f.e_mask}\n  %mz = icmp eq i32 %m, 0\n"
                           "  %spec = select i1 %mz, i32 2139095040, i32 2143289344\n  %sx = or i32 %s, 0\n")
  elif f.fnuz: special = ("  %isspec = icmp eq i32 %u, 128\n  %spec = add i32 0, 2143289344\n"
                          "  %sx = select i1 %isspec, i32 0, i32 %s\n")
  else: special = ("  %low = and i32 %u, 127\n  %isspec = icmp eq i32 %low, 127\n  %spec = add i32 0, 2143289344\n"
                   "  %sx = or i32 %s, 0\n")
  # fnuz has no -0: a result of zero keeps no sign (it would be 0x80, the NaN)
  if f.fnuz: sign_out = "  %nz = icmp ne i32 %v2, 0\n  %sz = select i1 %nz, i32 %s, i32 0\n  %v3 = or i32 %v2, %sz\n"
  else: sign_out = "  %v3 = or i32 %v2, %s\n"
  return (f"define internal float @__{f.name}_to_f32(i8 %b) alwaysinline {{\n"
          f"  %u = zext i8 %b to i32\n  %s0 = and i32 %u, 128\n  %s = shl i32 %s0, 24\n"
          f"  %e0 = lshr i32 %u, {f.m_bits}\n  %e = and i32 %e0, {f.e_mask}\n  %m = and i32 %u, {m_mask}\n{special}"
          f"  %mf = uitofp i32 %m to float\n  %subf = fmul float %mf, {float_literal(f.unit, dtypes.float32)}\n"
          f"  %sub = bitcast float %subf to i32\n  %eb = add i32 %e, {f.rebias}\n  %ebs = shl i32 %eb, 23\n"
          f"  %ms = shl i32 %m, {sh}\n  %norm = or i32 %ebs, %ms\n  %isz = icmp eq i32 %e, 0\n"
          f"  %mag0 = select i1 %isz, i32 %sub, i32 %norm\n  %mag = select i1 %isspec, i32 %spec, i32 %mag0\n"
          f"  %bits = or i32 %mag, %sx\n  %o = bitcast i32 %bits to float\n  ret float %o\n}}\n"
          # subnormal results: |x| + magic rounds |x| to a multiple of the subnormal step (the FPU's nearest even);
          # normal ones: rebias the exponent and round the mantissa to nearest even (wrapping i32 math is defined)
          f"define internal i8 @__f32_to_{f.name}(float %x) alwaysinline {{\n"
          f"  %u = bitcast float %x to i32\n  %sh = lshr i32 %u, 24\n  %s = and i32 %sh, 128\n"
          f"  %a = and i32 %u, 2147483647\n  %af = bitcast i32 %a to float\n"
          f"  %r = fadd float %af, {float_literal(f.magic, dtypes.float32)}\n  %rb = bitcast float %r to i32\n"
          f"  %sub = sub i32 %rb, {f32_bits(f.magic)}\n  %lsb0 = lshr i32 %a, {sh}\n  %lsb = and i32 %lsb0, 1\n"
          f"  %t0 = sub i32 %a, {f.rebias << 23}\n  %t1 = add i32 %t0, {(1 << (sh - 1)) - 1}\n"
          f"  %t2 = add i32 %t1, %lsb\n  %norm = lshr i32 %t2, {sh}\n  %issub = icmp ult i32 %a, {f.min_normal}\n"
          f"  %v0 = select i1 %issub, i32 %sub, i32 %norm\n  %ovf = icmp uge i32 %a, {f.overflow}\n"
          f"  %v1 = select i1 %ovf, i32 {f.over}, i32 %v0\n  %nan = icmp ugt i32 %a, 2139095040\n"
          f"  %v2 = select i1 %nan, i32 {f.nan}, i32 %v1\n{sign_out}  %o = trunc i32 %v3 to i8\n"
          f"  ret i8 %o\n}}\n")

def ltype(d: DType) -> str:
  """The LLVM type of a value of dtype `d` (vectors as <N x T>)."""
  return f"<{d.count} x {llvm_type[d.scalar()]}>" if d.count > 1 else llvm_type[d]

def float_literal(v: float, d: DType) -> str:
  """LLVM writes float/double constants as the hex bits of a double (exact for every float32 value); half as 0xH."""
  if d is dtypes.float16: return "0xH" + struct.pack(">e", v).hex().upper()
  if d is dtypes.float32 and not math.isnan(v) and not math.isinf(v): v = struct.unpack("<f", struct.pack("<f", v))[0]
  return "0x" + struct.pack(">d", v).hex().upper()

def render_const(v: object, d: DType) -> str:
  if d.count > 1:
    lane = f"{ltype(d.scalar())} {render_const(v, d.scalar())}"
    return "<" + ", ".join([lane] * d.count) + ">"
  if d is dtypes.bool: return "true" if v else "false"
  if d is dtypes.bfloat16:
    return str(float_to_bf16_bits(float(v)))  # type: ignore[arg-type]
  if d in dtypes.fp8s:
    return str(float_to_fp8_bits(float(v), d))  # type: ignore[arg-type]
  if dtypes.is_float(d): return float_literal(float(v), d)  # type: ignore[arg-type]
  return str(int(v))  # type: ignore[call-overload]

class LLVMRenderer(Renderer):
  """LLVM IR (opaque pointers, LLVM 15 or newer) for the LLVM device."""
  def __init__(self, device: str = "LLVM", fma: bool = True):
    super().__init__(device=device, has_threads=True, supports_float16=False, supports_vectors=True,
                     decompose_transcendentals=True, fma=fma)
  def prepare(self, sink: UOp) -> UOp: return graph_rewrite(sink, pm_promote_half)
  def render(self, name: str, uops: list[UOp]) -> str: return _FunctionWriter(name, uops).write()

class _FunctionWriter:
  """The function being written, in one pass over a linear program: SSA instructions in basic blocks. The ctx of
  pm_render_llvm's rules, which write through ins() and label() and return each op's value."""
  def __init__(self, name: str, uops: list[UOp]):
    self.name, self.uops = name, uops
    self.lines: list[str] = []
    self.allocas: list[str] = []
    self.decls: set[str] = set()
    self.r: dict[UOp, str] = {}
    self.accs: dict[UOp, str] = {}  # DEFINE_ACC -> its alloca
    self.loops: dict[UOp, tuple[str, str]] = {}  # open RANGE -> (label prefix, next-index name)
    self.n = 0
    self.block = "entry"
    self.parallel = 0

  def tmp(self, prefix: str = "v") -> str:
    self.n += 1
    return f"%{prefix}{self.n}"
  def ins(self, expr: str) -> str:
    """Emit `%vN = expr` and return %vN."""
    name = self.tmp()
    self.lines.append(f"  {name} = {expr}")
    return name
  def label(self, lbl: str) -> None:
    self.lines.append(f"{lbl}:")
    self.block = lbl

  def val(self, u: UOp, like: DType | None = None) -> str:
    """The SSA value of `u` (an accumulator is loaded here), splatted to a vector when `like` is one."""
    if u in self.accs: v = self.ins(f"load {ltype(u.dtype)}, ptr {self.accs[u]}")
    elif u.op is Ops.CONST: v = render_const(u.arg, u.dtype if like is None or like.count == 1 else like)
    else: v = self.r[u]
    if like is not None and like.count > 1 and u.dtype.count == 1 and u.op is not Ops.CONST:
      one = self.ins(f"insertelement {ltype(like)} poison, {ltype(u.dtype)} {v}, i32 0")
      v = self.ins(f"shufflevector {ltype(like)} {one}, {ltype(like)} poison, <{like.count} x i32> zeroinitializer")
    return v

  def cast(self, x: str, src: DType, dst: DType) -> str:
    """C conversion semantics; bfloat16 and fp8 go through float, half through the LLVM half type."""
    if src is dst: return x
    if src is dtypes.bfloat16 or src in dtypes.fp8s:
      fn = "__bf16_to_f32(i16" if src is dtypes.bfloat16 else f"__{fp8_format(src).name}_to_f32(i8"
      x, src = self.ins(f"call float @{fn} {x})"), dtypes.float32
      if dst is dtypes.float32: return x
    if dst is dtypes.bfloat16 or dst in dtypes.fp8s:
      if src is not dtypes.float32: x = self.cast(x, src, dtypes.float32)
      fn = "i16 @__f32_to_bf16" if dst is dtypes.bfloat16 else f"i8 @__f32_to_{fp8_format(dst).name}"
      return self.ins(f"call {fn}(float {x})")
    s, t = ltype(src), ltype(dst)
    if dst is dtypes.bool:
      return self.ins(f"fcmp une {s} {x}, {render_const(0.0, src)}" if dtypes.is_float(src) else f"icmp ne {s} {x}, 0")
    if src is dtypes.float64 and dst is dtypes.float16:  # no instruction does this; avoid the __truncdfhf2 libcall
      return self.ins(f"fptrunc float {self.ins(f'call float @__f64_to_f32_odd(double {x})')} to half")
    if dtypes.is_float(src) and dtypes.is_float(dst):
      return self.ins(f"{'fpext' if src.itemsize < dst.itemsize else 'fptrunc'} {s} {x} to {t}")
    signed = dtypes.is_int(src) and not dtypes.is_unsigned(src)
    if dtypes.is_float(dst): return self.ins(f"{'sitofp' if signed else 'uitofp'} {s} {x} to {t}")
    if dtypes.is_float(src):
      # the PYTHON device's rule: truncate, then wrap to the width (-1.5 -> uint8 is 255); NaN and inf give the
      # smallest value (0 for unsigned). Exact for values in [-2**63, 2**64); LLVM's plain fptosi would be poison.
      if src is dtypes.float16: x, src, s = self.ins(f"fpext half {x} to float"), dtypes.float32, "float"
      fsuf = "f32" if src is dtypes.float32 else "f64"
      for fn in (f"llvm.fptosi.sat.i64.{fsuf}", f"llvm.fptoui.sat.i64.{fsuf}"):
        self.decls.add(f"declare i64 @{fn}({s})")
      self.decls.add(f"declare {s} @llvm.fabs.{fsuf}({s})")
      low = self.ins(f"call i64 @llvm.fptosi.sat.i64.{fsuf}({s} {x})")
      high = self.ins(f"call i64 @llvm.fptoui.sat.i64.{fsuf}({s} {x})")
      big = self.ins(f"fcmp oge {s} {x}, {render_const(2.0 ** 63, src)}")
      wide = self.ins(f"select i1 {big}, i64 {high}, i64 {low}")
      out = wide if dst.itemsize == 8 else self.ins(f"trunc i64 {wide} to {t}")
      mag = self.ins(f"call {s} @llvm.fabs.{fsuf}({s} {x})")
      special = self.ins(f"fcmp ueq {s} {mag}, {render_const(math.inf, src)}")  # NaN or +-inf
      return self.ins(f"select i1 {special}, {t} {dtypes.min(dst)}, {t} {out}")
    sbits, tbits = (1 if src is dtypes.bool else src.itemsize * 8), dst.itemsize * 8
    if sbits == tbits: return x
    if sbits > tbits: return self.ins(f"trunc {s} {x} to {t}")
    return self.ins(f"{'sext' if signed else 'zext'} {s} {x} to {t}")

  def address(self, buf: UOp, idx: UOp) -> str:
    assert isinstance(buf.dtype, PtrDType)
    st = storage_type.get(buf.dtype.base, llvm_type[buf.dtype.base])
    return self.ins(f"getelementptr inbounds {st}, ptr {self.r[buf]}, {ltype(idx.dtype)} {self.val(idx)}")

  def load(self, u: UOp) -> str:
    buf, d = u.src[0], u.dtype
    assert isinstance(buf.dtype, PtrDType)
    align = buf.dtype.base.itemsize
    st = ltype(d) if d is not dtypes.bool else "i8"
    if len(u.src) == 3 and d.count > 1:  # a gated vector: branch around the load
      gate, pre = self.val(u.src[2]), self.block
      n = self.tmp("g")[1:]
      self.lines.append(f"  br i1 {gate}, label %{n}_load, label %{n}_join")
      self.label(f"{n}_load")
      v = self.ins(f"load {st}, ptr {self.address(buf, u.src[1])}, align {align}")
      self.lines.append(f"  br label %{n}_join")
      self.label(f"{n}_join")
      return self.ins(f"phi {st} [{v}, %{n}_load], [{render_const(dtypes.as_const(0, d.scalar()), d)}, %{pre}]")
    if len(u.src) == 3:  # a gated scalar: read element 0 (always there) when the gate is off, then select zero
      gate = self.val(u.src[2])
      it = ltype(u.src[1].dtype)
      idx = self.ins(f"select i1 {gate}, {it} {self.val(u.src[1])}, {it} 0")
      st_ = storage_type.get(buf.dtype.base, llvm_type[buf.dtype.base])
      addr = self.ins(f"getelementptr inbounds {st_}, ptr {self.r[buf]}, {it} {idx}")
      v = self.ins(f"load {st}, ptr {addr}, align {align}")
      if d is dtypes.bool: v = self.ins(f"icmp ne i8 {v}, 0")
      return self.ins(f"select i1 {gate}, {ltype(d)} {v}, {ltype(d)} {render_const(dtypes.as_const(0, d), d)}")
    v = self.ins(f"load {st}, ptr {self.address(buf, u.src[1])}, align {align}")
    return self.ins(f"icmp ne i8 {v}, 0") if d is dtypes.bool else v

  def store(self, u: UOp) -> str:
    buf, x = u.src[0], u.src[2]
    assert isinstance(buf.dtype, PtrDType)
    v, t = self.val(x), ltype(x.dtype)
    if x.dtype is dtypes.bool: v, t = self.ins(f"zext i1 {v} to i8"), "i8"
    if len(u.src) == 4:  # a gated store (padded outputs): branch around it
      gate, n = self.val(u.src[3]), self.tmp("s")[1:]
      self.lines.append(f"  br i1 {gate}, label %{n}_store, label %{n}_join")
      self.label(f"{n}_store")
    self.lines.append(f"  store {t} {v}, ptr {self.address(buf, u.src[1])}, align {buf.dtype.base.itemsize}")
    if len(u.src) == 4:
      self.lines.append(f"  br label %{n}_join")
      self.label(f"{n}_join")
    return ""
  def open_loop(self, u: UOp) -> str:
    """A loop header: a phi for the index, the exit test, and the body's block (the value is the index)."""
    lp = self.tmp("loop")[1:]
    idx, nxt = f"%{lp}_i", f"%{lp}_next"
    lo, hi, it = "0", self.val(u.src[0]), ltype(u.dtype)  # it: i32, or i64 in a kernel with 64-bit indices
    if u.arg[1] == "parallel":  # this thread's share: [id*chunk, min((id+1)*chunk, n)), chunk = ceil(n/count)
      # (the runtime only compares the size with its core count: a 64-bit one is capped to fit the i32 constant)
      self.parallel = min(u.src[0].arg, 2**31 - 1) if u.src[0].op is Ops.CONST else -1
      cid, cnt = ("%core_id", "%core_count") if it == "i32" else \
        (self.ins(f"sext i32 %core_id to {it}"), self.ins(f"sext i32 %core_count to {it}"))
      up = self.ins(f"add {it} {hi}, {self.ins(f'sub {it} {cnt}, 1')}")
      chunk = self.ins(f"sdiv {it} {up}, {cnt}")
      lo = self.ins(f"mul {it} {cid}, {chunk}")
      end = self.ins(f"add {it} {lo}, {chunk}")
      hi = self.ins(f"select i1 {self.ins(f'icmp slt {it} {end}, {hi}')}, {it} {end}, {it} {hi}")
    pre = self.block
    self.lines.append(f"  br label %{lp}_head")
    self.label(f"{lp}_head")
    self.lines.append(f"  {idx} = phi {it} [{lo}, %{pre}], [{nxt}, %{lp}_latch]")
    go = self.ins(f"icmp slt {it} {idx}, {hi}")
    self.lines.append(f"  br i1 {go}, label %{lp}_body, label %{lp}_exit")
    self.label(f"{lp}_body")
    self.loops[u] = (lp, nxt)
    return idx
  def close_loop(self, u: UOp) -> str:
    lp, nxt = self.loops.pop(u.src[0])
    self.lines.append(f"  br label %{lp}_latch")
    self.label(f"{lp}_latch")
    self.lines.append(f"  {nxt} = add nuw nsw {ltype(u.src[0].dtype)} {self.r[u.src[0]]}, 1")
    self.lines.append(f"  br label %{lp}_head")
    self.label(f"{lp}_exit")
    return ""
  def define_acc(self, u: UOp) -> str:
    """An accumulator lives in an alloca (mem2reg makes it a phi); val() loads it where it is read."""
    slot = self.tmp("acc")
    self.allocas.append(f"  {slot} = alloca {ltype(u.dtype)}")
    self.lines.append(f"  store {ltype(u.dtype)} {self.val(u.src[0])}, ptr {slot}")
    self.accs[u] = slot
    return ""
  def statement(self, line: str) -> str:
    self.lines.append(line)
    return ""

  def write(self) -> str:
    rewrite = text_rules(pm_render_llvm)
    for u in self.uops:
      # a rule gives the op's SSA value (or inline constant), or "" for a statement (its lines are already written)
      if (v := rewrite(u, self)) is None: raise RuntimeError(f"LLVM IR renderer: no rule renders {u.op} on {u.dtype}")
      if v: self.r[u] = v
    globals_ = sorted({u.arg for u in self.uops if u.op is Ops.DEFINE_GLOBAL})
    args = [f"ptr noalias nocapture %data{i}" for i in globals_]
    variables = sorted({u.arg[0]: u.dtype for u in self.uops if u.op is Ops.DEFINE_VAR}.items())
    args += [f"{ltype(d)} %var_{n}" for n, d in variables]  # i32, or i64 for a Variable with bounds past int32's
    args += ["i32 %core_id", "i32 %core_count"]  # which share of the parallel loop to run; (0, 1) runs all of it
    body = "\n".join(["entry:"] + self.allocas + self.lines + ["  ret void"])
    decls = "".join(d + "\n" for d in sorted(self.decls) if d not in BF16_HELPERS)
    # the runtime reads how far the kernel can be split: 0 not at all, -1 a variable number of ways, else n ways
    split = f"@{self.name}_parallel = constant i32 {self.parallel}\n"
    used = {u.dtype.scalar() for u in self.uops} | {u.dtype.base for u in self.uops if isinstance(u.dtype, PtrDType)}
    helpers = BF16_HELPERS + "".join(fp8_helpers(fp8_format(d)) for d in dtypes.fp8s if d in used)
    return f"{helpers}{decls}{split}define void @{self.name}({', '.join(args)}) nounwind {{\n{body}\n}}\n"

# ***** the rules: one linear UOp -> its SSA value, written into the function's blocks *****

def _operands(ctx: _FunctionWriter, x: UOp) -> tuple[list[str], DType | None]:
  """The operands' values, splatted to the op's vector type where it has lanes (a comparison: its operands' lanes)."""
  d = x.dtype
  if d.count > 1 and x.op not in comparisons: vec: DType | None = d
  elif x.src[0].dtype.count > 1: vec = x.src[0].dtype
  else: vec = x.src[1].dtype if len(x.src) > 1 and x.src[1].dtype.count > 1 else None
  return [ctx.val(s, vec) for s in x.src], vec

def _unsigned(d: DType) -> bool: return dtypes.is_unsigned(d) or d is dtypes.bool

def where_rule(ctx: _FunctionWriter, x: UOp) -> str:
  d, cd = x.dtype, x.src[0].dtype
  c, a, b = ctx.val(x.src[0]), ctx.val(x.src[1], d), ctx.val(x.src[2], d)
  if cd.count > 1 and cd.scalar() is not dtypes.bool:  # a lane mask (all bits set or clear) from a comparison
    c = ctx.ins(f"trunc {ltype(cd)} {c} to <{cd.count} x i1>")
  ct = f"<{cd.count} x i1>" if cd.count > 1 else "i1"
  return ctx.ins(f"select {ct} {c}, {ltype(d)} {a}, {ltype(d)} {b}")

def lane_mask_rule(ctx: _FunctionWriter, x: UOp) -> str | None:
  """AND and OR of vector lane masks (from comparisons): bit operations on the lanes' integer type."""
  d = x.dtype
  if d.count == 1 or d.scalar() is dtypes.bool: return None
  t = ltype(d)
  return ctx.ins(f"{'and' if x.op is Ops.AND else 'or'} {t} {ctx.val(x.src[0], d)}, {ctx.val(x.src[1], d)}")

def compare_rule(ctx: _FunctionWriter, x: UOp) -> str:
  d, sd = x.dtype, x.src[0].dtype.scalar()
  xs, vec = _operands(ctx, x)
  is_f = dtypes.is_float(sd)
  pred = comparisons[x.op][2 if is_f else (1 if _unsigned(sd) else 0)]
  st = ltype(vec) if vec is not None else ltype(x.src[0].dtype)
  res = ctx.ins(f"{'fcmp' if is_f else 'icmp'} {pred} {st} {xs[0]}, {xs[1]}")
  # a vector comparison is a lane mask: all bits set where true, as wide as the compared lanes
  return ctx.ins(f"sext <{d.count} x i1> {res} to {ltype(d)}") if d.count > 1 and d.scalar() is not dtypes.bool else res

def neg_rule(ctx: _FunctionWriter, x: UOp) -> str:
  xs, _ = _operands(ctx, x)
  sd, t = x.dtype.scalar(), ltype(x.dtype)
  if dtypes.is_float(sd): return ctx.ins(f"fneg {FMF} {t} {xs[0]}")
  return ctx.ins(f"xor i1 {xs[0]}, true" if sd is dtypes.bool else f"sub {t} 0, {xs[0]}")

def max_rule(ctx: _FunctionWriter, x: UOp) -> str:
  xs, _ = _operands(ctx, x)
  d, t = x.dtype, ltype(x.dtype)
  bt = f"<{d.count} x i1>" if d.count > 1 else "i1"
  if dtypes.is_float(d.scalar()):  # (a > b || a != a) ? a : b, the C renderer's NaN-propagating max
    gt, nan = ctx.ins(f"fcmp ogt {t} {xs[0]}, {xs[1]}"), ctx.ins(f"fcmp uno {t} {xs[0]}, {xs[0]}")
    pick = ctx.ins(f"or {bt} {gt}, {nan}")
  else: pick = ctx.ins(f"icmp {'ugt' if _unsigned(d.scalar()) else 'sgt'} {t} {xs[0]}, {xs[1]}")
  return ctx.ins(f"select {bt} {pick}, {t} {xs[0]}, {t} {xs[1]}")

def intrinsic_rule(ctx: _FunctionWriter, x: UOp) -> str:
  xs, _ = _operands(ctx, x)
  d, sd, t = x.dtype, x.dtype.scalar(), ltype(x.dtype)
  if not dtypes.is_float(sd):
    if x.op is Ops.TRUNC: return xs[0]
    raise RuntimeError(f"LLVM IR renderer: {x.op} needs a float operand, got {sd}")
  suffix = {dtypes.float32: "f32", dtypes.float64: "f64"}[sd]
  fn = f"llvm.{intrinsics[x.op]}.{'v' + str(d.count) if d.count > 1 else ''}{suffix}"
  ctx.decls.add(f"declare {t} @{fn}({', '.join([t] * len(xs))})")
  return ctx.ins(f"call {t} @{fn}({', '.join(f'{t} {v}' for v in xs)})")

def binary_rule(ctx: _FunctionWriter, x: UOp) -> str | None:
  sd, t = x.dtype.scalar(), ltype(x.dtype)
  is_f = dtypes.is_float(sd)
  if x.op not in (float_binary if is_f else int_binary): return None  # no such instruction (FDIV on ints, ...)
  xs, _ = _operands(ctx, x)
  # x / 0, INT_MIN / -1 and shifts by the width or more were guarded by codegen/intsafe.py
  instr = float_binary[x.op] + f" {FMF}" if is_f else int_binary[x.op][1 if _unsigned(sd) else 0]
  return ctx.ins(f"{instr} {t} {xs[0]}, {xs[1]}")

def bitcast_rule(ctx: _FunctionWriter, x: UOp) -> str:
  s, t, v = ltype(x.src[0].dtype), ltype(x.dtype), ctx.val(x.src[0])
  # a bool is an i1 in registers and a byte (0 or 1) in memory: its bitcast to a byte is that byte
  if s == "i1": return ctx.ins(f"zext i1 {v} to {t}")
  if t == "i1": return ctx.ins(f"icmp ne {s} {v}, 0")
  return v if s == t else ctx.ins(f"bitcast {s} {v} to {t}")

def vectorize_rule(ctx: _FunctionWriter, x: UOp) -> str:
  v = "poison"
  for i, s in enumerate(x.src):
    v = ctx.ins(f"insertelement {ltype(x.dtype)} {v}, {ltype(s.dtype)} {ctx.val(s)}, i32 {i}")
  return v

pm_render_llvm = PatternMatcher([
  (UPat(Ops.DEFINE_GLOBAL, name="x"), lambda x: f"%data{x.arg}"),
  (UPat(Ops.DEFINE_VAR, name="x"), lambda x: f"%var_{x.arg[0]}"),
  (UPat(Ops.CONST, name="x"), lambda x: render_const(x.arg, x.dtype)),
  (UPat(Ops.RANGE, name="x"), lambda ctx, x: ctx.open_loop(x)),
  (UPat(Ops.ENDRANGE, name="x"), lambda ctx, x: ctx.close_loop(x)),
  (UPat(Ops.DEFINE_ACC, name="x"), lambda ctx, x: ctx.define_acc(x)),
  (UPat(Ops.ACC_ASSIGN, name="x"), lambda ctx, x: ctx.statement(
    f"  store {ltype(x.src[0].dtype)} {ctx.val(x.src[1])}, ptr {ctx.accs[x.src[0]]}")),
  (UPat(Ops.LOAD, name="x"), lambda ctx, x: ctx.load(x)),
  (UPat(Ops.STORE, name="x"), lambda ctx, x: ctx.store(x)),
  (UPat(Ops.CAST, name="x"), lambda ctx, x: ctx.cast(ctx.val(x.src[0]), x.src[0].dtype, x.dtype)),
  (UPat(Ops.BITCAST, name="x"), bitcast_rule),
  (UPat(Ops.GEP, name="x"),
   lambda ctx, x: ctx.ins(f"extractelement {ltype(x.src[0].dtype)} {ctx.val(x.src[0])}, i32 {x.arg}")),
  (UPat(Ops.VECTORIZE, name="x"), vectorize_rule),
  (UPat(Ops.WHERE, name="x"), where_rule),
  (UPat((Ops.AND, Ops.OR), name="x"), lane_mask_rule),
  (UPat(tuple(comparisons), name="x"), compare_rule),
  (UPat(Ops.NEG, name="x"), neg_rule),
  (UPat(Ops.RECIP, name="x"), lambda ctx, x: ctx.ins(f"fdiv {FMF} {ltype(x.dtype)} {render_const(1.0, x.dtype)}, "
                                                      f"{_operands(ctx, x)[0][0]}")),
  (UPat(Ops.MAX, name="x"), max_rule),
  (UPat(tuple(intrinsics), name="x"), intrinsic_rule),
  (UPat(tuple(float_binary) + tuple(int_binary), name="x"), binary_rule),
])
