"""The C-family renderer: a rule table from linear UOps to C-like text (pm_render_c), shared by C for the CPU device,
OpenCL C, CUDA C and Metal; each dialect adds only its own rules and its types, constants and casts."""
from __future__ import annotations
import functools, math
from typing import Any, Callable
from attograd.dtype import DType, dtypes, float_to_bf16_bits, float_to_fp8_bits, PtrDType
from attograd.helpers import prod
from attograd.renderer import Fp8Format, Renderer, f32_bits, fp8_format, launch_dims, text_rules
from attograd.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite

# dtypes held in registers as their bits (an integer type) with no arithmetic of their own: math runs in float32
BITS_FLOATS = (dtypes.bfloat16,) + dtypes.fp8s
LOW_FLOATS = (dtypes.float16,) + BITS_FLOATS

def _promote_to_float(x: UOp, low: tuple[DType, ...] = LOW_FLOATS) -> UOp | None:
  """half, bfloat16 and fp8 arithmetic runs in float32 and rounds back, like NumPy does for half."""
  if x.op is Ops.CAST or x.op is Ops.BITCAST: return None
  if x.dtype in low or (x.op in GroupOp.Comparison and x.src[0].dtype in low):
    src = tuple(s.cast(dtypes.float32) if s.dtype in low else s for s in x.src)
    out_dtype = dtypes.bool if x.op in GroupOp.Comparison else dtypes.float32
    ret = UOp(x.op, out_dtype, src, x.arg)
    return ret if x.dtype is dtypes.bool else ret.cast(x.dtype)
  return None

def _mask_of(d: DType) -> DType: return (dtypes.int64 if d.scalar() is dtypes.float64 else dtypes.int32).vec(d.count)

pm_promote_half = PatternMatcher([(UPat(GroupOp.ALU, name="x"), _promote_to_float)])

# ***** ALU ops as expressions: each language's table of them is its code_for_op *****

# every entry is a function (renderer, *operand source text, dtype) -> expression
AluTable = dict[Ops, Callable[..., str]]

def _f(d: DType) -> str: return "f" if d is dtypes.float32 else ""  # C's float32 math functions end in f
def _infix(sym: str) -> Callable[..., str]: return lambda r, a, b, d: f"({a}{sym}{b})"
def _libm(fn: str) -> Callable[..., str]: return lambda r, x, d: f"{fn}{_f(d)}({x})"
def _call(fn: str) -> Callable[..., str]: return lambda r, *xs: f"{fn}({', '.join(xs[:-1])})"

INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.IDIV: "/", Ops.MOD: "%", Ops.CMPLT: "<",
         Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}

c_alu: AluTable = {
  **{op: _infix(sym) for op, sym in INFIX.items()},
  # NaN-propagating: (a > b || a != a) picks a NaN a; a NaN b loses every comparison
  Ops.MAX: lambda r, a, b, d: f"(({a}>{b}||{a}!={a})?{a}:{b})" if dtypes.is_float(d) else f"(({a}>{b})?{a}:{b})",
  Ops.WHERE: lambda r, c, a, b, d: f"({c}?{a}:{b})",
  Ops.POW: lambda r, a, b, d: f"pow{_f(d)}({a}, {b})",
  Ops.NEG: lambda r, x, d: f"(!{x})" if d is dtypes.bool else f"(-{x})",
  Ops.EXP2: _libm("exp2"), Ops.LOG2: _libm("log2"), Ops.SIN: _libm("sin"), Ops.SQRT: _libm("sqrt"),
  Ops.RECIP: lambda r, x, d: f"(1.0{_f(d)}/{x})",
  Ops.TRUNC: lambda r, x, d: f"trunc{_f(d)}({x})" if dtypes.is_float(d) else x,
  Ops.MULACC: lambda r, a, b, c, d: f"fma{_f(d)}({a}, {b}, {c})"}  # C99's and CUDA's fused multiply-add

def overloaded_alu(sin: str) -> AluTable:
  """Math for languages whose functions are overloaded on the type (OpenCL C, Metal): no f suffixes."""
  return {Ops.EXP2: _call("exp2"), Ops.LOG2: _call("log2"), Ops.SIN: _call(sin), Ops.SQRT: _call("sqrt"),
          Ops.POW: _call("pow"), Ops.TRUNC: lambda r, x, d: f"trunc({x})" if dtypes.is_float(d) else x,
          Ops.RECIP: lambda r, x, d: f"(({r.render_dtype(d)})1/{x})", Ops.MULACC: _call("fma")}

# ***** the C family's rules: one linear UOp -> its text *****

class CWriter:
  """The kernel being written: each value's name (or inline text) so far and the vector types it needs. It is the
  ctx of every rendering rule; the rules reach the language's types and constants through `ren`."""
  __slots__ = ("ren", "r", "vecs", "counters")
  def __init__(self, ren: CStyleLanguage):
    self.ren = ren
    self.r: dict[UOp, str] = {}
    self.vecs: set[DType] = set()
    self.counters: dict[str, int] = {}
  def __getitem__(self, u: UOp) -> str: return self.r[u]
  def newname(self, prefix: str) -> str:
    n = self.counters.get(prefix, 0)
    self.counters[prefix] = n + 1
    return f"{prefix}{n}"
  def name(self, u: UOp) -> str:
    """The name a value gets before its rule runs: fixed by its op (ridx3, gidx0), else a prefix and a count."""
    return FIXED_NAME[u.op](self, u) if u.op in FIXED_NAME else self.newname(NAME_PREFIX.get(u.op, "alu"))

# what a rule's text is, by op: the value itself (written inline where it is used), whole lines of the kernel's body,
# or (every other op) an expression the loop declares as `T name = expr;`
INLINE = frozenset({Ops.CONST, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR})
STATEMENTS = frozenset({Ops.SPECIAL, Ops.BARRIER, Ops.RANGE, Ops.ENDRANGE, Ops.ACC_ASSIGN, Ops.LOAD, Ops.STORE})
# the names the loop gives values before their rules run (a rule writing lines declares its own); others are alu<n>
FIXED_NAME: dict[Ops, Callable[[CWriter, UOp], str]] = {
  Ops.SPECIAL: lambda ctx, u: u.arg[0], Ops.DEFINE_LOCAL: lambda ctx, u: u.arg[0],
  Ops.RANGE: lambda ctx, u: f"ridx{u.arg[0]}", Ops.BARRIER: lambda ctx, u: ctx[u.src[0]]}  # a barrier is its buffer
NAME_PREFIX = {Ops.DEFINE_ACC: "acc", Ops.LOAD: "val"}
UNNAMED = INLINE | {Ops.STORE, Ops.ACC_ASSIGN, Ops.ENDRANGE}

def load_rule(ctx: CWriter, x: UOp) -> str:
  buf, idx, d = ctx[x.src[0]], ctx[x.src[1]], x.dtype
  if d.count > 1:  # vector lanes: an unaligned copy, zero where the gate is off
    copy = f"__builtin_memcpy(&{ctx[x]}, {buf} + {idx}, sizeof({ctx[x]}));"
    zero = ctx.ren.render_const(0.0 if dtypes.is_float(d) else 0, d)
    gated = f"if ({ctx[x.src[2]]}) {copy}" if len(x.src) == 3 else copy
    return f"{ctx.ren.render_dtype(d)} {ctx[x]} = {zero};\n{gated}"
  load = f"{buf}[{idx}]" if d is not dtypes.bool else f"({buf}[{idx}]!=0)"
  if len(x.src) == 3: load = f"({ctx[x.src[2]]}?{load}:{ctx.ren.render_const(dtypes.as_const(0, d), d)})"
  return f"{ctx.ren.render_dtype(d)} {ctx[x]} = {load};"

def store_rule(ctx: CWriter, x: UOp) -> str:
  buf, idx, v = ctx[x.src[0]], ctx[x.src[1]], x.src[2]
  if v.dtype.count > 1: return f"__builtin_memcpy({buf} + {idx}, &{ctx[v]}, sizeof({ctx[v]}));"
  val = f"(unsigned char)({ctx[v]})" if v.dtype is dtypes.bool else ctx[v]
  gate = f"if ({ctx[x.src[3]]}) " if len(x.src) == 4 else ""  # GPU: one thread of a work-group stores
  return f"{gate}{buf}[{idx}] = {val};"

def lane_select_rule(ctx: CWriter, x: UOp) -> str | None:
  """MAX, and WHERE on a vector condition, lane-wise through the bits: C has no ?: on vectors (MAX keeps NaN like
  the scalar form)."""
  d = x.dtype
  if d.count == 1 or (x.op is Ops.WHERE and x.src[0].dtype.count == 1): return None
  m = _mask_of(d)
  ctx.vecs.add(m)
  T, M = ctx.ren.render_dtype(d), ctx.ren.render_dtype(m)
  a, b = (f"(({ctx[s]})-({T}){{0}})" for s in x.src[-2:])  # a scalar operand becomes a vector, -0.0 intact
  s0, s1 = ctx[x.src[0]], ctx[x.src[1]]
  c = f"((({s0})>({s1}))|(({s0})!=({s0})))" if x.op is Ops.MAX else s0
  return f"({T})((({M}){c}&({M}){a})|(~({M}){c}&({M}){b}))"

def per_lane_rule(ctx: CWriter, x: UOp) -> str | None:
  """A math-library function has no vector form in C: one call per lane (float64; float32 is decomposed)."""
  d = x.dtype
  if d.count == 1: return None
  lanes = ", ".join(ctx.ren.alu[x.op](ctx.ren, f"{ctx[x.src[0]]}[{i}]", d.scalar()) for i in range(d.count))
  return f"(({ctx.ren.render_dtype(d)}){{{lanes}}})"

def vector_where_rule(ctx: CWriter, x: UOp) -> str | None:
  """A scalar condition choosing between vectors: both sides made vectors."""
  if x.dtype.count == 1: return None
  T = ctx.ren.render_dtype(x.dtype)
  return f"({ctx[x.src[0]]}?(({ctx[x.src[1]]})-({T}){{0}}):(({ctx[x.src[2]]})-({T}){{0}}))"

def alu_rule(ctx: CWriter, x: UOp) -> str | None:
  if (fn := ctx.ren.alu.get(x.op)) is None: return None
  return fn(ctx.ren, *[ctx[s] for s in x.src], x.dtype)

def range_rule(ctx: CWriter, x: UOp) -> str:
  i = ctx[x]
  return f"for ({ctx.ren.render_dtype(x.dtype)} {i} = 0; {i} < {ctx[x.src[0]]}; {i}++) {{"

pm_render_c = PatternMatcher([
  (UPat(Ops.CONST, name="x"), lambda ctx, x: ctx.ren.render_const(x.arg, x.dtype)),
  (UPat(Ops.DEFINE_GLOBAL, name="x"), lambda x: f"data{x.arg}"),
  (UPat(Ops.DEFINE_VAR, name="x"), lambda x: x.arg[0]),
  (UPat(Ops.RANGE, name="x"), range_rule),
  (UPat(Ops.ENDRANGE), lambda: "}"),
  (UPat(Ops.DEFINE_ACC, name="x"), lambda ctx, x: ctx[x.src[0]]),
  (UPat(Ops.ACC_ASSIGN, name="x"), lambda ctx, x: f"{ctx[x.src[0]]} = {ctx[x.src[1]]};"),
  (UPat(Ops.LOAD, name="x"), load_rule),
  (UPat(Ops.STORE, name="x"), store_rule),
  (UPat((Ops.MAX, Ops.WHERE), name="x"), lane_select_rule),
  (UPat((Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT), name="x"), per_lane_rule),
  (UPat(Ops.WHERE, name="x"), vector_where_rule),
  (UPat(GroupOp.ALU, name="x"), alu_rule),
  (UPat(Ops.CAST, name="x"), lambda ctx, x: ctx.ren.render_cast(ctx[x.src[0]], x.src[0].dtype, x.dtype)),
  (UPat(Ops.BITCAST, name="x"), lambda ctx, x: ctx.ren.render_bitcast(ctx[x.src[0]], x.src[0].dtype, x.dtype)),
  (UPat(Ops.GEP, name="x"), lambda ctx, x: f"{ctx[x.src[0]]}[{x.arg}]"),
  (UPat(Ops.VECTORIZE, name="x"),
   lambda ctx, x: f"(({ctx.ren.render_dtype(x.dtype)}){{{', '.join(ctx[s] for s in x.src)}}})"),
])

class CStyleLanguage(Renderer):
  kernel_prefix = "void"
  helper_prefix = "static inline "  # how the language declares a small function in the kernel's source
  buffer_prefix = ""
  restrict = "restrict"
  type_map: dict[DType, str] = {
    dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
    dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
    dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16", dtypes.bfloat16: "unsigned short",
    dtypes.float32: "float", dtypes.float64: "double", **{d: "unsigned char" for d in dtypes.fp8s}}
  storage_map: dict[DType, str] = {dtypes.bool: "unsigned char"}
  float_suffix = {dtypes.float32: "f", dtypes.float64: "", dtypes.float16: "f"}
  preamble = ""
  # GPU dialects: how work-group memory is declared (see pm_render_gpu)
  smem_prefix = ""
  dialect = "C-family"  # the language's name in errors
  alu: AluTable = c_alu  # the ALU ops it writes natively (code_for_op)
  dialect_rules: PatternMatcher | None = None  # the dialect's own rules, tried before the shared ones
  shared_rules: PatternMatcher = pm_render_c  # the rules it shares with its family (the GPU dialects add theirs)
  string_rewrite: PatternMatcher = pm_render_c  # every rule: one linear UOp -> its text (derived, see below)

  def __init_subclass__(cls, **kwargs: Any) -> None:
    """A dialect's table is its own rules, then the shared ones: stated once (a subclass may still set its own)."""
    super().__init_subclass__(**kwargs)
    if "string_rewrite" not in cls.__dict__:
      cls.string_rewrite = cls.shared_rules if cls.dialect_rules is None else cls.dialect_rules + cls.shared_rules

  def render_dtype(self, d: DType) -> str:
    if d.count > 1: return f"{self.type_map[d.scalar()].replace(' ', '_')}{d.count}"  # a typedef'd vector type
    return self.type_map[d]
  def render_vector_typedef(self, d: DType) -> str:
    # GCC has no vectors of _Bool: a bool vector (an eye matrix's (i==j) values, gathered to be cast) is bytes of 0/1
    elem = "unsigned char" if d.scalar() is dtypes.bool else self.type_map[d.scalar()]
    return f"typedef {elem} {self.render_dtype(d)} __attribute__((vector_size({d.size})));"
  def render_const(self, v: object, d: DType) -> str:
    if d.count > 1: return f"(({self.render_dtype(d)}){{0}} + {self.render_const(v, d.scalar())})"  # broadcast
    if d is dtypes.bool: return "1" if v else "0"
    if d in dtypes.fp8s:
      return f"(({self.type_map[d]}){float_to_fp8_bits(v, d)})"  # type: ignore[arg-type]
    if dtypes.is_float(d):
      assert isinstance(v, float)
      if math.isnan(v): return f"(({self.render_dtype(d)})NAN)" if d is not dtypes.bfloat16 else "0x7FC0"
      if math.isinf(v):
        if d is dtypes.bfloat16: return "0xFF80" if v < 0 else "0x7F80"
        return ("-" if v < 0 else "") + f"(({self.render_dtype(d)})INFINITY)"
      if d is dtypes.bfloat16:
        return f"{float_to_bf16_bits(v)}"
      s = repr(float(v))
      return f"({self.render_dtype(d)})" * (d is dtypes.float16) + s + self.float_suffix.get(d, "")
    if d in (dtypes.int64,): return f"{v}ll"
    if d is dtypes.uint64: return f"{v}ull"
    if d is dtypes.uint32: return f"{v}u"
    if d is dtypes.int32 and v == -2**31: return "(-2147483647-1)"
    return str(v)
  def render_cast(self, x: str, src: DType, dst: DType) -> str:
    # a C cast between vector types reinterprets the bits; converting lane values is a builtin (gcc >= 9, clang)
    if dst.count > 1: return f"__builtin_convertvector({x}, {self.render_dtype(dst)})"
    if src is dst: return x
    # bfloat16 and fp8 convert through float32 (as PyTorch's casts do) with the helpers in the kernel's preamble
    x, src = self.bits_to_float(x, src)
    if dst is dtypes.bfloat16: return f"__f32_to_bf16((float)({x}))"
    if dst in dtypes.fp8s: return f"__f32_to_{fp8_format(dst).name}((float)({x}))"
    if dst is dtypes.bool: return f"({x}!=0)"
    return f"({self.render_dtype(dst)})({x})"
  def bits_to_float(self, x: str, src: DType) -> tuple[str, DType]:
    """A bfloat16 or fp8 value (held as its bits) as a float32 expression; other values as they are."""
    if src is dtypes.bfloat16: return f"__bf16_to_f32({x})", dtypes.float32
    if src in dtypes.fp8s: return f"__{fp8_format(src).name}_to_f32({x})", dtypes.float32
    return x, src
  def f32_bits(self, x: str, to_bits: bool) -> str:
    """float32 <-> its uint32 bits, for the conversion helpers."""
    f32, u32 = dtypes.float32, dtypes.uint32
    return self.render_bitcast(x, f32, u32) if to_bits else self.render_bitcast(x, u32, f32)
  def fp8_helpers(self, uops: list[UOp]) -> str:
    """The fp8 <-> float32 conversion functions for the fp8 formats the kernel uses."""
    used = {u.dtype.scalar() for u in uops} | {u.dtype.base for u in uops if isinstance(u.dtype, PtrDType)}
    return "".join(_fp8_c_helpers(self, fp8_format(d)) for d in dtypes.fp8s if d in used)
  def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
    s, t = self.render_dtype(src), self.render_dtype(dst)
    # between vector types of one size a C cast reinterprets the bits (the memcpy below sends them through scalar
    # registers: gcc 12 then sign-extends int8 lanes one at a time)
    if src.count > 1 and dst.count > 1 and src.size == dst.size: return f"(({t})({x}))"
    # memcpy through a statement expression: well-defined in C, and compiles to a register move
    return f"(__extension__({{ {s} __s = ({x}); {t} __d; __builtin_memcpy(&__d, &__s, sizeof(__d)); __d; }}))"
  def dialect_expr(self, u: UOp, srcs: list[str]) -> str | None:
    """A dialect's own text for an op (its vector types, tensor cores, shuffles, thread indices) with operands named
    `srcs`: what the first of its own rules (`dialect_rules`) gives, or None where the shared C table renders it."""
    if self.dialect_rules is None: return None
    ctx = CWriter(self)
    ctx.r.update(zip(u.src, srcs))
    if u.op not in UNNAMED: ctx.r[u] = ctx.name(u)
    return text_rules(self.dialect_rules)(u, ctx)
  @property
  def code_for_op(self) -> dict[Ops, Callable[..., str]]:
    """The ALU ops this language writes as an expression of its own, each to a function of the operands' source
    text and the dtype (`code_for_op[Ops.ADD]("a", "b", dtypes.int32)` is "(a+b)"): tinygrad's table, by which its
    tests check what a renderer does natively. Ops missing here are rewritten into others before rendering."""
    return {op: functools.partial(fn, self) for op, fn in self.alu.items()}
  def render_buffer_arg(self, i: int, ctype: str) -> str: return f"{self.buffer_prefix}{ctype}* {self.restrict} data{i}"
  def render_var_arg(self, name: str, i: int, dtype: DType = dtypes.int32) -> str:
    """A Variable's kernel argument: int32, or int64 for one whose bounds pass int32's."""
    return f"const {self.render_dtype(dtype)} {name}"
  def render_signature(self, name: str, args: list[str], uops: list[UOp]) -> str:
    return f"{self.kernel_prefix} {name}({', '.join(args)})"

  def render(self, name: str, uops: list[UOp]) -> str:
    """Each UOp's text from the language's rule table, in program order; the loop only names values and indents."""
    ctx = CWriter(self)
    r, vecs, rewrite = ctx.r, ctx.vecs, text_rules(self.string_rewrite)
    lines: list[str] = []
    local_decls: list[str] = []
    depth = 1
    for u in uops:
      op = u.op
      if u.dtype.count > 1: vecs.add(u.dtype)
      if op not in UNNAMED: r[u] = ctx.name(u)
      if (text := rewrite(u, ctx)) is None:
        raise RuntimeError(f"{self.dialect} renderer ({type(self).__name__}): no rule renders {op} on {u.dtype}")
      if op in INLINE: r[u] = text
      elif op is Ops.DEFINE_LOCAL: local_decls.append("  " + text)
      elif op in STATEMENTS:
        if op is Ops.ENDRANGE: depth -= 1
        pad = "  " * depth
        lines.extend(pad + line for line in text.split("\n"))
        if op is Ops.RANGE: depth += 1
      else: lines.append(f"{'  ' * depth}{self.render_dtype(u.dtype)} {r[u]} = {text};")
    globals_ = {u.arg: u.dtype for u in uops if u.op is Ops.DEFINE_GLOBAL}
    args = [self.render_buffer_arg(i, self.storage_map.get(globals_[i].base, self.render_dtype(globals_[i].base)))
            for i in sorted(globals_)]
    variables = sorted({u.arg[0]: u.dtype for u in uops if u.op is Ops.DEFINE_VAR}.items())
    args += [self.render_var_arg(n, len(globals_) + j, d) for j, (n, d) in enumerate(variables)]
    typedefs = "".join(self.render_vector_typedef(v) + "\n" for v in sorted(vecs, key=lambda v: (v.name, v.count)))
    return (f"{self.render_preamble(uops)}{typedefs}{self.render_signature(name, args, uops)} {{\n"
            + "\n".join(local_decls + lines) + "\n}\n")
  def render_preamble(self, uops: list[UOp]) -> str: return self.preamble + self.fp8_helpers(uops)

  def prepare(self, sink: UOp) -> UOp:
    """The language's own rewrites on the lowered graph, before linearizing."""
    return graph_rewrite(sink, pm_promote_half) if not self.supports_float16 else graph_rewrite(sink, pm_bf16_only)

pm_bf16_only = PatternMatcher([(UPat(GroupOp.ALU, name="x"), lambda x: _promote_to_float(x, BITS_FLOATS))])

def _fp8_c_helpers(r: CStyleLanguage, f: Fp8Format) -> str:
  """fp8 <-> float32 as two C functions (no C dialect has fp8 arithmetic), on the float's bits with unsigned integer
  math: round to nearest even, fp8e4m3 saturating at +-448, fp8e5m2 overflowing to inf, NaN keeping its sign; the fnuz
  formats overflow to their one NaN, 0x80, and have no -0."""
  u8, u32, q = r.type_map[dtypes.uint8], r.type_map[dtypes.uint32], r.helper_prefix
  sh, m_mask = 23 - f.m_bits, (1 << f.m_bits) - 1
  as_bits, as_float = (lambda x: r.f32_bits(x, True)), (lambda x: r.f32_bits(x, False))
  if f.has_inf: special = f"if (e == {f.e_mask}u) return {as_float('s | (m ? 0x7FC00000u : 0x7F800000u)')};"
  elif f.fnuz: special = f"if (b == 0x80u) return {as_float('0x7FC00000u')};"
  else: special = f"if (e == {f.e_mask}u && m == {m_mask}u) return {as_float('s | 0x7FC00000u')};"
  subnormal = as_bits(f"(float)m * {f.unit!r}f")
  decode = (f"{q}float __{f.name}_to_f32({u8} b) {{\n"
            f"  {u32} s = (({u32})b & 0x80u) << 24, e = (({u32})b >> {f.m_bits}) & {f.e_mask}u,"
            f" m = ({u32})b & {m_mask}u;\n"
            f"  {special}\n"
            f"  if (e == 0u) return {as_float(f's | {subnormal}')};\n"
            f"  return {as_float(f's | ((e + {f.rebias}u) << 23) | (m << {sh})')};\n}}\n")
  # subnormal results: adding `magic` makes the FPU round |x| to a multiple of the subnormal step (nearest even) and
  # the low bits of the sum are that multiple; normal ones: rebias the exponent and round the mantissa to nearest even
  rounded = as_bits(f"{as_float('a')} + {f.magic!r}f")
  sub = f"({rounded} - {f32_bits(f.magic)}u)"
  # fnuz has no -0: a result that rounded to zero keeps no sign (s | 0 would be its NaN)
  if f.fnuz: subnormal_out = f"{{ {u32} r = {sub}; return ({u8})(r ? (s | r) : 0u); }}"
  else: subnormal_out = f"return ({u8})(s | {sub});"
  encode = (f"{q}{u8} __f32_to_{f.name}(float x) {{\n"
            f"  {u32} u = {as_bits('x')}, s = (u >> 24) & 0x80u, a = u & 0x7FFFFFFFu;\n"
            f"  if (a > 0x7F800000u) return ({u8})(s | {f.nan}u);\n"
            f"  if (a >= {f.overflow}u) return ({u8})(s | {f.over}u);\n"
            f"  if (a < {f.min_normal}u) {subnormal_out}\n"
            f"  return ({u8})(s | ((a - {f.rebias << 23}u + {(1 << (sh - 1)) - 1}u + ((a >> {sh}) & 1u)) >> {sh}));"
            "\n}\n")
  guard = f"ATTO_{f.name.upper()}"  # several kernels may share one source (CUDA's one translation unit of many)
  return f"#ifndef {guard}\n#define {guard}\n{decode}{encode}#endif\n"

def parallel_range_rule(ctx: CWriter, x: UOp) -> str | None:
  """The parallel loop's iterations run across the cores (OpenMP), when the compiler has it. Over symbolic sizes the
  loop carries a condition of the kernel's Variables (codegen's thread_condition): OpenMP's `if` clause tests it on
  every call, and a false one runs the loop on the calling thread alone, without waking the others."""
  if x.arg[1] != "parallel" or not ctx.ren.has_threads: return None
  clause = f" if({_sym_expr(ctx.ren, x.arg[2])})" if len(x.arg) > 2 else ""
  return f"#pragma omp parallel for{clause}\n" + range_rule(ctx, x)

def _sym_expr(ren: CStyleLanguage, u: UOp) -> str:
  """C for an expression of the kernel's Variables (its int arguments) that is not in the linear program."""
  if u.op is Ops.DEFINE_VAR: return u.arg[0]
  if u.op is Ops.CONST: return ren.render_const(u.arg, u.dtype)
  srcs = [_sym_expr(ren, s) for s in u.src]
  if u.op is Ops.CAST: return ren.render_cast(srcs[0], u.src[0].dtype, u.dtype)
  if (fn := ren.alu.get(u.op)) is None: raise RuntimeError(f"{ren.dialect} renderer: can't render {u.op} in a size")
  return fn(ren, *srcs, u.dtype)

def _byte_of(x: UOp) -> tuple[UOp, int, int, bool] | None:
  """(word, i, nibble, signed) when x is byte i of an int32 word (nn/gguf.py's dot4): `(w >> 8i) & 255` (unsigned,
  nibble -1), `(w >> (8i + 4h)) & 15` (unsigned: byte i of the word's nibbles h, (w >> 4h) & 0x0F0F0F0F, nibble h),
  or `(int)(signed char)(w >> 8i)` (signed, nibble -1)."""
  if x.dtype.scalar() is not dtypes.int32: return None
  if x.op is Ops.AND and x.src[1].op is Ops.CONST and x.src[1].arg in (15, 255):
    w, signed, mask = x.src[0], False, x.src[1].arg
  elif x.op is Ops.CAST and x.src[0].op is Ops.CAST and x.src[0].dtype.scalar() is dtypes.int8:
    w, signed, mask = x.src[0].src[0], True, 255
  else: return None
  sh = 0
  if w.op is Ops.SHR and w.src[1].op is Ops.CONST: w, sh = w.src[0], w.src[1].arg
  if w.dtype.scalar() is not dtypes.int32 or not isinstance(sh, int) or sh % (4 if mask == 15 else 8) or sh > 28:
    return None
  return (w, sh // 8, (sh % 8) // 4, signed) if mask == 15 else (w, sh // 8, -1, signed)

def dot4_rule(ctx: CWriter, x: UOp) -> str | None:
  """A sum of int32 lanes holding, for some words a and b (either may be one word for every lane), all four byte
  products (unsigned byte i of a) * (signed byte i of b) (nn/gguf.py's dot4; a's bytes may be its low or high
  nibbles): each such group is one
  vpdpbusd (x86 VNNI: 64 byte products per instruction), the other terms its accumulator. Exact: the same int32 sum,
  added in another order. The products' own lines stay, unused (the compiler drops them)."""
  if not ctx.ren.int8_dot or x.dtype != dtypes.int32.vec(16): return None
  terms: list[UOp] = []
  stack = [x]
  while stack:  # the leaves of the tree of adds under x
    u = stack.pop()
    if u.op is Ops.ADD and u.dtype == x.dtype: stack.extend(u.src)
    else: terms.append(u)
  groups: dict[tuple[UOp, int, UOp], dict[int, UOp]] = {}
  rest: list[UOp] = []
  for t in terms:
    p0, p1 = (_byte_of(s) for s in t.src) if t.op is Ops.MUL else (None, None)
    if p0 is not None and p1 is not None and p0[3] != p1[3] and p0[1] == p1[1]:
      ua, sb = (p0, p1) if p1[3] else (p1, p0)  # the unsigned byte, the signed one
      key = (ua[0], ua[2], sb[0])
      if ua[0].dtype in (x.dtype, x.dtype.scalar()) and sb[2] < 0 and ua[1] not in groups.setdefault(key, {}):
        groups[key][ua[1]] = t
        continue
    rest.append(t)
  whole = [k for k, g in groups.items() if len(g) == 4]
  rest += [t for k, g in groups.items() if k not in whole for t in g.values()]
  if not whole or any(u not in ctx.r for u in rest + [v for a, _, b in whole for v in (a, b)]): return None
  T = ctx.ren.render_dtype(x.dtype)
  acc = f"(({' + '.join(ctx[t] for t in rest)}) + ({T}){{0}})" if rest else f"({T}){{0}}"
  for a, h, b in whole:
    word = ctx[a] if h < 0 else f"(({ctx[a]} >> {4 * h}) & 252645135)" if h else f"({ctx[a]} & 252645135)"
    if a.dtype != x.dtype: word = f"({word}) + ({T}){{0}}"  # one word for every lane (nn/gguf.py's wide dot)
    acc = f"__builtin_ia32_vpdpbusd_v16si({acc}, {word}, ({ctx[b]}) + ({T}){{0}})"
  return acc

def _lane_tree(x: UOp, depth: int = 7) -> tuple[UOp, int, int] | None:
  """(v, first lane, lane count) when x is codegen's balanced tree of adds over neighbouring lanes of one vector v
  (lowerer.py's reduce over vector lanes: (v[0]+v[1])+(v[2]+v[3]) ...) of at most 2**depth lanes, else None."""
  if x.op is Ops.GEP and isinstance(x.arg, int): return (x.src[0], x.arg, 1)
  if x.op is not Ops.ADD or depth == 0 or (a := _lane_tree(x.src[0], depth - 1)) is None or \
     (b := _lane_tree(x.src[1], depth - 1)) is None: return None
  return (a[0], a[1], a[2] * 2) if a[0] is b[0] and a[2] == b[2] and a[1] + a[2] == b[1] else None

def lane_sum_rule(ctx: CWriter, x: UOp) -> str | None:
  """The sum of a float vector's lanes as a halving tree of whole-vector adds (__ATTO_LANE_SUM, _lane_sum_macro): the
  same adds as codegen's tree of single lanes, so the same result to the bit, in 2 shuffles and an add per level
  instead of an extract and an add per lane (gcc's SLP vectorizer, which would find it, is off). The lanes' own
  lines stay, unused (the compiler drops them). SmolLM2-shaped prefill's 8x768 @ 768x3072 (24 sums of 16 lanes per
  3 columns), one core: 381-408 -> 354-368 us best of 200."""
  if x.dtype not in (dtypes.float32, dtypes.float64) or (t := _lane_tree(x)) is None: return None
  v, first, n = t
  if first != 0 or n != v.dtype.count or n < 4 or v.dtype.scalar() != x.dtype: return None
  w = n // 2
  while w >= 2:  # the halves' vector types, which the macro declares values of
    ctx.vecs.add(x.dtype.vec(w))
    w //= 2
  return f"__ATTO_LANE_SUM_{ctx.ren.render_dtype(v.dtype)}({ctx[v]})"

def _lane_sum_macro(r: CStyleLanguage, d: DType) -> str:
  """lane_sum_rule's macro for the float vector type d: each level adds the even lanes to the odd ones (gcc 12+ and
  clang's __builtin_shufflevector), else the tree of single lanes as an expression. A macro, not a function: kernels
  built as one unit (a batch) may each define it, and an identical macro may be defined again."""
  n = d.count
  if d.scalar() not in (dtypes.float32, dtypes.float64) or n < 4 or n & (n - 1): return ""
  name = f"__ATTO_LANE_SUM_{r.render_dtype(d)}"
  steps, w = [f"{r.render_dtype(d)} __s{n} = (v);"], n
  while w > 2:
    h, t = w // 2, r.render_dtype(d.scalar().vec(w // 2))
    ev, od = ", ".join(str(i) for i in range(0, w, 2)), ", ".join(str(i) for i in range(1, w, 2))
    steps.append(f"{t} __s{h} = __builtin_shufflevector(__s{w}, __s{w}, {ev}) + "
                 f"__builtin_shufflevector(__s{w}, __s{w}, {od});")
    w = h
  shuffled = " ".join(steps + ["__s2[0] + __s2[1];"])
  def tree(lo: int, k: int) -> str:
    return f"__v[{lo}]" if k == 1 else f"({tree(lo, k // 2)}+{tree(lo + k // 2, k // 2)})"
  lanes = f"{r.render_dtype(d)} __v = (v); {tree(0, n)};"
  # (ATTO_LANE_SUM_SCALAR picks the single lanes: a test compares the two)
  return (f"\n#if !defined(ATTO_LANE_SUM_SCALAR) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12))\n"
          f"#define {name}(v) (__extension__({{ {shuffled} }}))\n#else\n"
          f"#define {name}(v) (__extension__({{ {lanes} }}))\n#endif")

pm_render_clang = PatternMatcher([(UPat(Ops.RANGE, name="x"), parallel_range_rule),
                                  (UPat(Ops.ADD, name="x"), dot4_rule),
                                  (UPat(Ops.ADD, name="x"), lane_sum_rule)])

def _clang_max(r: CStyleLanguage, a: str, b: str, d: DType) -> str:
  # a NaN-propagating max as bit operations: written as a condition (a > b || a != a), gcc makes it two branches,
  # and on data like a max-pool window's they mispredict half the time (the pool kernel ran 3.5x slower). Written
  # as plain selects (m = a > b ? a : b; a != a ? a : m), gcc 12 -O3 miscompiles it next to masked loads.
  if d is dtypes.float32: return f"__maxf({a},{b})"
  if d is dtypes.float64: return f"__maxd({a},{b})"
  return c_alu[Ops.MAX](r, a, b, d)

def _lanes_to_float_via_int32(x: UOp) -> UOp | None:
  """Byte or short lanes converted to floats go through int32 lanes: gcc 12 converts a vector of bytes one lane at a
  time (an extract and a scalar convert per lane: a Q4_1 matvec ran 8x slower), int32 lanes in one instruction.
  Exact: every such value is an int32."""
  src = x.src[0].dtype
  if x.dtype.count == 1 or not dtypes.is_float(x.dtype) or src.scalar().itemsize > 2 or dtypes.is_float(src) or \
     src.scalar() is dtypes.bool: return None
  return x.src[0].cast(dtypes.int32.vec(src.count)).cast(x.dtype)

pm_clang_lanes = PatternMatcher([(UPat(Ops.CAST, name="x"), _lanes_to_float_via_int32)])

# gcc's x86 builtins for a vector fused multiply-add, by (lane type, vector bytes): the macro that says the target has
# the instruction, and the call (512-bit ones take a lane mask, all lanes, and the rounding mode, the current one)
_X86_VECTOR_FMA = {
  (dtypes.float32, 16): ("__FMA__", "__builtin_ia32_vfmaddps({})"),
  (dtypes.float32, 32): ("__FMA__", "__builtin_ia32_vfmaddps256({})"),
  (dtypes.float32, 64): ("__AVX512F__", "__builtin_ia32_vfmaddps512_mask({}, (unsigned short)-1, 4)"),
  (dtypes.float64, 16): ("__FMA__", "__builtin_ia32_vfmaddpd({})"),
  (dtypes.float64, 32): ("__FMA__", "__builtin_ia32_vfmaddpd256({})"),
  (dtypes.float64, 64): ("__AVX512F__", "__builtin_ia32_vfmaddpd512_mask({}, (unsigned char)-1, 4)"),
}

class ClangRenderer(CStyleLanguage):
  """C for the CPU device, compiled by gcc or clang."""
  dialect = "C"
  # a vector's fused multiply-add: a helper per vector type (render_vector_typedef)
  alu = {**c_alu, Ops.MAX: _clang_max,
         Ops.MULACC: lambda r, a, b, c, d: f"__atto_fma_{r.render_dtype(d)}({a}, {b}, {c})" if d.count > 1
         else f"fma{_f(d)}({a}, {b}, {c})"}
  dialect_rules = pm_render_clang
  preamble = ("#include <math.h>\n"
              "static inline float __bf16_to_f32(unsigned short b) { unsigned int u = ((unsigned int)b) << 16; float f;"
              " __builtin_memcpy(&f, &u, 4); return f; }\n"
              "static inline unsigned short __f32_to_bf16(float f) { unsigned int u; __builtin_memcpy(&u, &f, 4);"
              " if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0; u += 0x7fff + ((u >> 16) & 1); return (unsigned "
              "short)(u >> 16); }\n"
              # one-lane vectors: their comparisons are lane masks, so the max is bit operations with no branch
              "typedef float __v1f __attribute__((vector_size(4))); typedef int __v1i "
              "__attribute__((vector_size(4)));\n"
              "typedef double __v1d __attribute__((vector_size(8))); typedef long long __v1l "
              "__attribute__((vector_size(8)));\n"
              "static inline float __maxf(float a, float b) { __v1f x = {a}, y = {b}; __v1i c = (x > y) | (x != x);"
              " return ((__v1f)((c & (__v1i)x) | (~c & (__v1i)y)))[0]; }\n"
              "static inline double __maxd(double a, double b) { __v1d x = {a}, y = {b}; __v1l c = (x > y) | (x != x);"
              " return ((__v1d)((c & (__v1l)x) | (~c & (__v1l)y)))[0]; }\n"
              # a value held in an SSE register from here on (see ClangRenderer.render_cast); nothing elsewhere
              "#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)\n"
              "#define __ATTO_IN_REG(v) __asm__(\"\" : \"+x\"(v))\n#else\n#define __ATTO_IN_REG(v) (void)0\n#endif\n"
              # 16 half lanes to float lanes: one vcvtph2ps with AVX-512 (gcc 12 converts the vector one lane at a
              # time, through a general register each), else the generic conversion
              "#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)\n"
              "typedef short __atto_v16hi __attribute__((vector_size(32))); typedef float __atto_v16sf "
              "__attribute__((vector_size(64)));\n"
              "#define __ATTO_HALF16_TO_FLOAT16(x) __builtin_ia32_vcvtph2ps512_mask((__atto_v16hi)(x), "
              "(__atto_v16sf){0}, (unsigned short)0xFFFF, 4)\n"
              "#else\n#define __ATTO_HALF16_TO_FLOAT16(x) __builtin_convertvector((x), float16)\n#endif\n")
  def __init__(self, device: str = "CPU", threads: bool = True, supports_float16: bool = True, fma: bool = False,
               int8_dot: bool = False):
    # OpenMP's workers sleep between kernels (runtime/ops_cpu.py sets passive waits: spinning ones collapse on a busy
    # machine), and waking one costs ~40 us here: a kernel is split across the cores when it has that much work for
    # each, 4M loop points (multiply-adds) or 4 MB of memory. SmolLM2 Q4_1 decode (matvecs of 0.3 to 1.3 MB, one
    # thread each now): 95 -> 125 tok/s on a loaded machine
    super().__init__(device=device, has_threads=threads, supports_float16=supports_float16, supports_vectors=True,
                     decompose_transcendentals=True, thread_min_work=1 << 22, thread_min_bytes=4 << 20, fma=fma,
                     int8_dot=int8_dot)
  def prepare(self, sink: UOp) -> UOp: return graph_rewrite(super().prepare(sink), pm_clang_lanes)
  def render_vector_typedef(self, d: DType) -> str: return self._typedef_and_fma(d) + _lane_sum_macro(self, d)
  def _typedef_and_fma(self, d: DType) -> str:
    # C has fma() for scalars only: a float vector's is a loop over its lanes, which `omp simd` (the compiler runs
    # with -fopenmp-simd) makes one vector instruction; without it gcc unrolls the loop into scalar ones. A macro, not
    # a function: kernels built as one unit (a batch) may each define it, where a function can't be defined twice
    td = super().render_vector_typedef(d)
    if not self.fma or d.scalar() not in (dtypes.float32, dtypes.float64): return td
    t, f = self.render_dtype(d), _f(d.scalar())
    # an operand may be a scalar (C broadcasts it in vector arithmetic): `x - 0` broadcasts it and is x, -0.0 too
    z = f"({t}){{0}}"
    loop = (f"#define __atto_fma_{t}(a, b, c) (__extension__({{ {t} __a = (a) - {z}, __b = (b) - {z}, "
            f"__c = (c) - {z}, __r; "
            f"_Pragma(\"omp simd\") for (int __i = 0; __i < {d.count}; __i++) "
            f"__r[__i] = __builtin_fma{f}(__a[__i], __b[__i], __c[__i]); __r; }}))")
    if (native := _X86_VECTOR_FMA.get((d.scalar(), d.size))) is None: return f"{td}\n{loop}"
    # gcc on x86 with the instruction: its builtin, the same single instruction the loop becomes, without a loop for
    # every multiply-add (a conv tile's 400 loops were half of gcc's time at -O1 and 70% at -O3: vectorizing and
    # unrolling each). Elsewhere (clang, other targets, older CPUs) the loop.
    cond, call = native
    args = f"(a) - {z}, (b) - {z}, (c) - {z}"
    return (f"{td}\n#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined({cond})\n"
            f"#define __atto_fma_{t}(a, b, c) {call.format(args)}\n#else\n{loop}\n#endif")
  def render_cast(self, x: str, src: DType, dst: DType) -> str:
    if src == dtypes.float16.vec(16) and dst == dtypes.float32.vec(16): return f"__ATTO_HALF16_TO_FLOAT16({x})"
    # byte or short lanes widened from a register (__ATTO_IN_REG, in the preamble): gcc 12 widens such a vector that
    # comes straight from memory one lane at a time, through general registers (a Q8_0 matvec ran 4x slower)
    if dst.count > 1 and dtypes.is_int(src) and src.scalar().itemsize <= 2 and src.size <= 16:
      t = self.render_dtype(src)
      return (f"(__extension__({{ {t} __v = ({x}); __ATTO_IN_REG(__v); "
              f"__builtin_convertvector(__v, {self.render_dtype(dst)}); }}))")
    return super().render_cast(x, src, dst)

# ***** GPU dialects *****

def _half_bits(v: float) -> int:
  import struct
  return struct.unpack("<H", struct.pack("<e", v))[0]

def define_local_rule(ctx: CWriter, x: UOp) -> str:
  assert isinstance(x.dtype, PtrDType)
  ctype = ctx.ren.storage_map.get(x.dtype.base, ctx.ren.render_dtype(x.dtype.base))
  return f"{ctx.ren.smem_prefix}{ctype} {x.arg[0]}[{x.arg[1]}];"

def special_rule(index: Callable[[str], str]) -> Callable[..., str]:
  """A thread index (gidx0, lidx1, ...) declared from the language's own builtin for it, `index(name)`."""
  return lambda ctx, x: f"{ctx.ren.render_dtype(x.dtype)} {x.arg[0]} = {index(x.arg[0])}; /* {x.arg[1]} */"

# shared by the GPU dialects; each adds its thread indices (SPECIAL) and work-group barrier (BARRIER)
pm_render_gpu = PatternMatcher([(UPat(Ops.DEFINE_LOCAL, name="x"), define_local_rule)])

class GPUCStyle(CStyleLanguage):
  """Shared by the GPU C dialects: no loops over outputs (threads instead), no vector lanes, float math for half
  when the device has no native half, and bfloat16 held as its 16 bits like the C renderer does."""
  half_bits = False   # True: half values live in registers as their 16 bits (no native half arithmetic)
  half_from_bits, half_to_bits = "__half_to_f32", "__f32_to_half"
  shared_rules = pm_render_gpu + pm_render_c
  def prepare(self, sink: UOp) -> UOp:
    return graph_rewrite(sink, pm_bf16_only if self.supports_float16 else pm_promote_half)
  def render_const(self, v: object, d: DType) -> str:
    if d is dtypes.float16 and self.half_bits:
      assert isinstance(v, float)
      return f"(({self.type_map[d]}){_half_bits(v)})"
    if d is dtypes.bfloat16: return f"(({self.type_map[d]}){super().render_const(v, d)})"
    return super().render_const(v, d)
  def render_cast(self, x: str, src: DType, dst: DType) -> str:
    if self.half_bits and dst is dtypes.float16:
      if src is dtypes.float16: return x
      return f"{self.half_to_bits}((float)({self.bits_to_float(x, src)[0]}))"
    if self.half_bits and src is dtypes.float16: x, src = f"{self.half_from_bits}({x})", dtypes.float32
    return super().render_cast(x, src, dst)

pm_render_opencl = PatternMatcher([
  (UPat(Ops.SPECIAL, name="x"), special_rule(lambda n: f"get_{'group' if n[0] == 'g' else 'local'}_id({n[-1]})")),
  (UPat(Ops.BARRIER), lambda: "barrier(CLK_LOCAL_MEM_FENCE);"),
])

class OpenCLRenderer(GPUCStyle):
  """OpenCL C. Without cl_khr_fp16, half is stored as half but computed in float (vload_half/vstore_half are core)."""
  kernel_prefix = "__kernel void"
  helper_prefix = ""
  buffer_prefix = "__global "
  smem_prefix = "__local "
  dialect = "OpenCL C"
  alu = {**c_alu, **overloaded_alu("sin")}
  dialect_rules = pm_render_opencl
  float_suffix = {dtypes.float32: "f", dtypes.float64: "", dtypes.float16: "f"}
  def __init__(self, device: str = "CL", fp16: bool = False, fp64: bool = True, local_max: int = 256):
    super().__init__(device=device, has_local=True, local_max=local_max, supports_float16=fp16, supports_vectors=False,
                     fma=True)
    self.fp16, self.fp64, self.half_bits = fp16, fp64, not fp16
    self.type_map = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short",
                     dtypes.uint16: "ushort", dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long",
                     dtypes.uint64: "ulong", dtypes.float16: "half" if fp16 else "ushort", dtypes.bfloat16: "ushort",
                     **{d: "uchar" for d in dtypes.fp8s}, dtypes.float32: "float",
                     dtypes.float64: "double"}
    self.storage_map = {dtypes.bool: "uchar"}
  def supported_dtypes(self) -> set[DType]:
    # double is an OpenCL extension; without cl_khr_fp64 a kernel that names it does not compile
    return super().supported_dtypes() - (set() if self.fp64 else {dtypes.float64})
  def render_const(self, v: object, d: DType) -> str:
    if d is dtypes.int64: return f"{v}l" if v != -2**63 else "(-9223372036854775807l-1)"
    if d is dtypes.uint64: return f"{v}ul"
    return super().render_const(v, d)
  def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
    # as_<type> has no bool: a bool's byte is 0 or 1, so a conversion is its bitcast (and any nonzero byte is true)
    if dtypes.bool in (src, dst): return f"(({self.render_dtype(dst)})({x}))"
    return f"as_{self.render_dtype(dst)}({x})"
  def render_preamble(self, uops: list[UOp]) -> str:
    used = {u.dtype.scalar() for u in uops} | {u.dtype.base for u in uops if isinstance(u.dtype, PtrDType)}
    out = []
    if self.fp64 and dtypes.float64 in used: out.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if self.fp16 and dtypes.float16 in used: out.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    if dtypes.bfloat16 in used:
      out.append("float __bf16_to_f32(ushort b) { return as_float(((uint)b) << 16); }")
      out.append("ushort __f32_to_bf16(float f) { uint u = as_uint(f);"
                 " if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0;"
                 " u += 0x7fff + ((u >> 16) & 1); return (ushort)(u >> 16); }")
    if self.half_bits and dtypes.float16 in used:
      out.append("float __half_to_f32(ushort b) { return vload_half(0, (__private const half*)&b); }")
      out.append("ushort __f32_to_half(float f) { ushort b; vstore_half_rte(f, 0, (__private half*)&b); return b; }")
    return "".join(x + "\n" for x in out) + self.fp8_helpers(uops)

def fuse_wmma_acc(uops: list[UOp]) -> list[UOp]:
  """After linearizing, a TC reduce reads `acc = acc + WMMA(a, b, 0)`: make it `acc = WMMA(a, b, acc)`, the
  tensor core's own accumulate (the emulator and the CUDA source both run this form)."""
  uses: dict[UOp, int] = {}
  for u in uops:
    for s in u.src: uses[s] = uses.get(s, 0) + 1
  fuse = {u for u in uops if u.op is Ops.ADD and u.src[0].op is Ops.DEFINE_ACC and u.src[1].op is Ops.WMMA and
          uses[u.src[1]] == 1 and u.src[1].src[2].op is Ops.CONST and u.src[1].src[2].arg == 0}
  dropped = {u.src[1] for u in fuse}
  remap: dict[UOp, UOp] = {}
  out: list[UOp] = []
  for u in uops:
    if u in dropped: continue
    if u in fuse:
      w = u.src[1]
      nu = remap[u] = UOp(Ops.WMMA, w.dtype, (remap.get(w.src[0], w.src[0]), remap.get(w.src[1], w.src[1]), u.src[0]),
                          w.arg)
    elif any(s in remap for s in u.src):
      nu = remap[u] = UOp(u.op, u.dtype, tuple(remap.get(s, s) for s in u.src), u.arg)
    else: nu = u
    out.append(nu)
  return out

_MMA_PTX = {dtypes.float16: "f16", dtypes.bfloat16: "bf16"}

pm_render_cuda = PatternMatcher([
  (UPat(Ops.SPECIAL, name="x"),
   special_rule(lambda n: f"{'blockIdx' if n[0] == 'g' else 'threadIdx'}.{'xyz'[int(n[-1])]}")),
  (UPat(Ops.BARRIER), lambda: "__syncthreads();"),
  # vectors (only tensor-core fragments and accumulators use them) are small structs of one array
  (UPat(Ops.GEP, name="x"), lambda ctx, x: f"{ctx[x.src[0]]}.v[{x.arg}]"),
  (UPat(Ops.VECTORIZE, name="x"),
   lambda ctx, x: f"{ctx.ren.render_dtype(x.dtype)}{{{{{', '.join(ctx[s] for s in x.src)}}}}}"),
  (UPat(Ops.WMMA, name="x"), lambda ctx, x: f"__atto_mma_{_MMA_PTX[x.arg[3]]}({', '.join(ctx[s] for s in x.src)})"),
  (UPat(Ops.SHUFFLE, name="x"), lambda ctx, x: f"__shfl_xor_sync(0xffffffffu, {ctx[x.src[0]]}, {x.arg})"),
])

class CUDARenderer(GPUCStyle):
  """CUDA C for NVRTC or nvcc. half and bfloat16 are stored natively and computed in float."""
  kernel_prefix = 'extern "C" __global__ void'
  helper_prefix = "__device__ __forceinline__ "
  restrict = "__restrict__"
  smem_prefix = "__shared__ "
  dialect = "CUDA C"
  dialect_rules = pm_render_cuda
  warp_size = 32  # reductions over a warp's lanes use __shfl_xor_sync
  def __init__(self, device: str = "CUDA", arch: str = "sm_80"):
    super().__init__(device=device, has_local=True, local_max=256, supports_float16=False, supports_vectors=False,
                     global_max=(2**31 - 1, 65535, 65535), fma=True)  # the compiler runs with --fmad=false
    self.arch = arch
    # mma.sync m16n8k16 with f16/bf16 inputs and f32 accumulators needs sm_80 (Ampere) or newer
    self.tensor_cores = (dtypes.float16, dtypes.bfloat16) if int(arch.removeprefix("sm_").rstrip("a")) >= 80 else ()
    self.type_map = {**CStyleLanguage.type_map, dtypes.bool: "bool", dtypes.float16: "half",
                     dtypes.bfloat16: "__nv_bfloat16"}
    self.storage_map = {dtypes.bool: "unsigned char"}
  def render(self, name: str, uops: list[UOp]) -> str: return super().render(name, fuse_wmma_acc(uops))
  def render_dtype(self, d: DType) -> str:
    return f"atto_{d.scalar().name}x{d.count}" if d.count > 1 else super().render_dtype(d)
  def render_vector_typedef(self, d: DType) -> str: return ""  # in the preamble, before the helpers that use them
  def render_const(self, v: object, d: DType) -> str:
    if d.count > 1: return f"{self.render_dtype(d)}{{{{{', '.join([self.render_const(v, d.scalar())] * d.count)}}}}}"
    # NVRTC has no math.h: NAN and INFINITY are spelled as bits
    if d in (dtypes.float16, dtypes.bfloat16):
      assert isinstance(v, float)
      if d is dtypes.float16: return f"__ushort_as_half({_half_bits(v)})"
      return f"__ushort_as_bfloat16({float_to_bf16_bits(v)})"
    if d is dtypes.float32 and isinstance(v, float) and not math.isfinite(v):
      return f"__int_as_float({0x7fc00000 if math.isnan(v) else (0xff800000 if v < 0 else 0x7f800000):#x})"
    if d is dtypes.float64 and isinstance(v, float) and not math.isfinite(v):
      bits = 0x7ff8000000000000 if math.isnan(v) else (0xfff0000000000000 if v < 0 else 0x7ff0000000000000)
      return f"__longlong_as_double({bits:#x}ll)"
    return super().render_const(v, d)
  def render_cast(self, x: str, src: DType, dst: DType) -> str:
    if src is dst: return x
    if src is dtypes.float16: x, src = f"__half2float({x})", dtypes.float32
    if src is dtypes.bfloat16: x, src = f"__bfloat162float({x})", dtypes.float32
    x, src = self.bits_to_float(x, src)  # fp8: our own helpers (cuda_fp8.h's casts saturate both formats)
    if dst is dtypes.float16: return f"__float2half_rn((float)({x}))"
    if dst is dtypes.bfloat16: return f"__float2bfloat16_rn((float)({x}))"
    if dst in dtypes.fp8s: return f"__f32_to_{fp8_format(dst).name}((float)({x}))"
    if dst is dtypes.bool: return f"({x}!=0)"
    return f"({self.render_dtype(dst)})({x})"
  def f32_bits(self, x: str, to_bits: bool) -> str:
    return f"__float_as_uint({x})" if to_bits else f"__uint_as_float({x})"
  def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
    return f"__atto_bitcast<{self.render_dtype(dst)}, {self.render_dtype(src)}>({x})"
  def render_signature(self, name: str, args: list[str], uops: list[UOp]) -> str:
    threads = prod(launch_dims(uops)[1])  # the work-group size it is launched with
    return f"{self.kernel_prefix} __launch_bounds__({threads}) {name}({', '.join(args)})"
  def render_preamble(self, uops: list[UOp]) -> str:
    used = {u.dtype.scalar() for u in uops} | {u.dtype.base for u in uops if isinstance(u.dtype, PtrDType)}
    out = []
    if dtypes.float16 in used: out.append("#include <cuda_fp16.h>")
    if dtypes.bfloat16 in used: out.append("#include <cuda_bf16.h>")
    if any(u.op is Ops.BITCAST for u in uops):
      out.append("#ifndef ATTO_BITCAST\n#define ATTO_BITCAST\ntemplate <class T, class F> __device__ __forceinline__ T "
                 "__atto_bitcast(F x) { union { F f; T t; } u; u.f = x; return u.t; }\n#endif")
    for v in sorted({u.dtype for u in uops if u.dtype.count > 1}, key=lambda v: self.render_dtype(v)):
      n = self.render_dtype(v)
      out.append(f"#ifndef {n.upper()}\n#define {n.upper()}\nstruct alignas({min(16, v.size)}) {n} "
                 f"{{ {self.render_dtype(v.scalar())} v[{v.count}]; }};\n#endif")
    out += [_mma_helper(self, t) for t in sorted({u.arg[3] for u in uops if u.op is Ops.WMMA}, key=lambda t: t.name)]
    return "".join(x + "\n" for x in out) + self.fp8_helpers(uops)

def _mma_helper(r: CUDARenderer, t: DType) -> str:
  """D = A*B + C for one warp: mma.sync m16n8k16, row-major A and column-major B fragments of `t` (two elements per
  32-bit register, the lower index in the low half), float32 C and D; the element layout is in lowerer.tc_fragments."""
  a, b, c = (r.render_dtype(x) for x in (t.vec(8), t.vec(4), dtypes.float32.vec(4)))
  p = _MMA_PTX[t]
  return (f"#ifndef ATTO_MMA_{p.upper()}\n#define ATTO_MMA_{p.upper()}\n"
          f"__device__ __forceinline__ {c} __atto_mma_{p}({a} a, {b} b, {c} c) {{\n"
          "  const unsigned *A = reinterpret_cast<const unsigned*>(a.v), *B = reinterpret_cast<const unsigned*>(b.v);\n"
          f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{p}.{p}.f32 "\n'
          '    "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"\n'
          '    : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3])\n'
          '    : "r"(A[0]), "r"(A[1]), "r"(A[2]), "r"(A[3]), "r"(B[0]), "r"(B[1]));\n'
          "  return c;\n}\n#endif")

pm_render_metal = PatternMatcher([
  (UPat(Ops.SPECIAL, name="x"), special_rule(lambda n: f"{'gid' if n[0] == 'g' else 'lid'}.{'xyz'[int(n[-1])]}")),
  (UPat(Ops.BARRIER), lambda: "threadgroup_barrier(mem_flags::mem_threadgroup);"),
])

class MetalRenderer(GPUCStyle):
  """Metal Shading Language: buffers are `device` pointers bound by [[buffer(i)]], thread positions come in as
  [[attributes]], work-group memory is `threadgroup`. half and bfloat are native types computed in float here."""
  kernel_prefix = "kernel void"
  buffer_prefix = "device "
  smem_prefix = "threadgroup "
  dialect = "Metal"
  alu = {**c_alu, **overloaded_alu("precise::sin")}
  dialect_rules = pm_render_metal
  restrict = ""
  def __init__(self, device: str = "METAL"):
    super().__init__(device=device, has_local=True, local_max=256, supports_float16=False, supports_vectors=False)
    self.type_map = {**CStyleLanguage.type_map, dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar",
                     dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong",
                     dtypes.float16: "half", dtypes.bfloat16: "bfloat",
                     **{d: "uchar" for d in dtypes.fp8s}}
    self.storage_map = {dtypes.bool: "uchar"}
  def supported_dtypes(self) -> set[DType]: return super().supported_dtypes() - {dtypes.float64}  # MSL has no double
  def render_buffer_arg(self, i: int, ctype: str) -> str: return f"device {ctype}* data{i} [[buffer({i})]]"
  def render_var_arg(self, name: str, i: int, dtype: DType = dtypes.int32) -> str:
    return f"constant {self.render_dtype(dtype)}& {name} [[buffer({i})]]"
  def render_signature(self, name: str, args: list[str], uops: list[UOp]) -> str:
    args = args + ["uint3 gid [[threadgroup_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"]
    return f"{self.kernel_prefix} {name}({', '.join(args)})"
  def render_const(self, v: object, d: DType) -> str:
    if d is dtypes.int64: return f"{v}l" if v != -2**63 else "(-9223372036854775807l-1)"
    if d is dtypes.uint64: return f"{v}ul"
    if d in (dtypes.float16, dtypes.bfloat16, dtypes.float32) and isinstance(v, float) and not math.isfinite(v):
      return f"(({self.render_dtype(d)}){'NAN' if math.isnan(v) else ('-' if v < 0 else '') + 'INFINITY'})"
    if d in (dtypes.float16, dtypes.bfloat16): return f"(({self.render_dtype(d)}){float(v)!r}f)"  # type: ignore[arg-type]
    return super().render_const(v, d)
  def render_cast(self, x: str, src: DType, dst: DType) -> str:
    if src is dst: return x
    x, src = self.bits_to_float(x, src) if src in dtypes.fp8s else (x, src)  # bfloat is a native type in Metal
    if dst in dtypes.fp8s: return f"__f32_to_{fp8_format(dst).name}((float)({x}))"
    if dst is dtypes.bool: return f"({x}!=0)"
    return f"({self.render_dtype(dst)})({x})"
  def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
    if dtypes.bool in (src, dst): return f"(({self.render_dtype(dst)})({x}))"  # as_type has no bool, as in OpenCL
    return f"as_type<{self.render_dtype(dst)}>({x})"
  def render_preamble(self, uops: list[UOp]) -> str:
    return "#include <metal_stdlib>\nusing namespace metal;\n" + self.fp8_helpers(uops)
