"""Transcendentals as plain arithmetic: EXP2 and LOG2 on float32 become range reduction, a polynomial and exponent
bit manipulation (adds, multiplies, shifts, bitcasts), so they run on vector lanes like any other float math; a libm
call per element can't. Used by CPU renderers that set `decompose_transcendentals`; GPUs keep their native exp2/log2.
half and bfloat16 are computed in float32 and rounded back. float64 stays a libm call.

exp(x) is EXP2(x * log2(e)) in the graph; rounding x * log2(e) loses |x * log2(e)| * 2^-24 of the exponent (61 ulp
of the result at x ~ 80). `pm_exp_reduce`, run for every renderer, does exp's range reduction on x itself instead:
n = round(x * log2(e)), r = x - n * ln2 with ln2 split in two (Cody and Waite), so r is exact to ~2^-40 relative.
"""
from __future__ import annotations
import math, struct
from attograd.dtype import DType, dtypes
from attograd.uop.ops import Ops, PatternMatcher, UOp, UPat

# 2^f ~= 1 + f*(c0 + f*(c1 + ...)) on f in [-0.5, 0.5]: a least-squares fit for relative error, ~1e-7 in float32
EXP2_POLY = (0.6931472420692444, 0.24022647738456726, 0.05550306662917137, 0.00961834192276001,
             0.001340688788332045, 0.00015388197789434344)
# log2((1+s)/(1-s)) ~= s*(d0 + z*(d1 + ...)), z = s*s, on |s| <= (sqrt2-1)/(sqrt2+1): the atanh series, refitted
LOG2_POLY = (2.885390043258667, 0.9617979526519775, 0.5767971277236938, 0.4297540485858917)
ROUND_MAGIC = 12582912.0     # 1.5*2^23: x + this has round-to-nearest(x) in its low mantissa bits (|x| < 2^22)
ROUND_MAGIC_BITS = 0x4B400000
SQRT_HALF_BITS = 0x3F3504F3  # the bits of sqrt(2)/2: mantissas are reduced into [sqrt(2)/2, sqrt(2))

# ***** building blocks, on a scalar or on vector lanes alike (constants stay scalar: renderers broadcast them) *****

def _as(x: UOp, scalar: DType) -> DType: return scalar.vec(x.dtype.count) if x.dtype.count > 1 else scalar
def _alu(op: Ops, a: UOp, b: UOp | float | int) -> UOp:
  if not isinstance(b, UOp): b = UOp.const(a.dtype.scalar(), b)
  return UOp(op, a.dtype, (a, b))
def _bitcast(x: UOp, scalar: DType) -> UOp: return UOp(Ops.BITCAST, _as(x, scalar), (x,))
def _mask(x: UOp) -> DType:
  # a vector comparison is a lane mask as wide as the lanes (the vectorizer's convention), a scalar one a bool
  if x.dtype.count == 1: return dtypes.bool
  return _as(x, dtypes.int64 if x.dtype.scalar() is dtypes.float64 else dtypes.int32)
def _cmp(op: Ops, a: UOp, b: float) -> UOp: return UOp(op, _mask(a), (a, UOp.const(a.dtype.scalar(), b)))
def _isnan(x: UOp) -> UOp: return UOp(Ops.CMPNE, _mask(x), (x, x))
def _where(c: UOp, a: UOp | float, b: UOp | float) -> UOp:
  ft = next((v.dtype.scalar() for v in (a, b) if isinstance(v, UOp)), dtypes.float32)
  a, b = (v if isinstance(v, UOp) else UOp.const(ft, v) for v in (a, b))
  width = max(c.dtype.count, a.dtype.count, b.dtype.count)  # a lane mask picks between constants: still lanes
  return UOp(Ops.WHERE, a.dtype.scalar().vec(width), (c, a, b))
def _horner(x: UOp, coeffs: tuple[float, ...]) -> UOp:
  acc = UOp.const(dtypes.float32, coeffs[-1])
  for c in reversed(coeffs[:-1]): acc = _alu(Ops.ADD, _alu(Ops.MUL, x, acc), c)
  return acc

# ***** the decompositions *****

def _clamp(x: UOp, lim: float) -> UOp:
  # plain selects (a compare and a blend each); NaN comes out as +lim and is fixed by the caller
  xc = _where(_cmp(Ops.CMPLT, x, -lim), -lim, x)
  return _where(_cmp(Ops.CMPLT, xc, lim), xc, lim)

# (int dtype of the same width, mantissa bits, exponent bias) of each float
_BITS = {dtypes.float32: (dtypes.int32, 23, 127), dtypes.float64: (dtypes.int64, 52, 1023)}

def _round(t: UOp) -> tuple[UOp, UOp]:
  """(n as an int, n as a float) with n = round(t), |t| < 2^(mantissa bits - 1): t + 1.5*2^m has n in its low bits.
  n goes back to float by a conversion, not as (t + magic) - magic, which reassociation would fold."""
  fd = t.dtype.scalar()
  it, m, _ = _BITS[fd]
  magic = 1.5 * 2.0 ** m
  magic_bits = int.from_bytes(struct.pack("<d" if fd is dtypes.float64 else "<f", magic), "little")
  n = _alu(Ops.SUB, _bitcast(_alu(Ops.ADD, t, magic), it), magic_bits)
  return n, UOp(Ops.CAST, t.dtype, (n,))

def _times_pow2(p: UOp, n: UOp) -> UOp:
  """p * 2^n for n within twice a normal float's exponent range: n is split in two halves, each written into the
  exponent bits of a float, so the product overflows to inf and underflows through the denormals with one rounding."""
  it, m, bias = _BITS[p.dtype.scalar()]
  n1 = _alu(Ops.SHR, n, 1)
  n2 = _alu(Ops.SUB, n, n1)
  s1, s2 = (_bitcast(_alu(Ops.SHL, _alu(Ops.ADD, k, bias), m), p.dtype.scalar()) for k in (n1, n2))
  return _alu(Ops.MUL, _alu(Ops.MUL, p, s1), s2)

def _exp2_poly(f: UOp, n: UOp) -> UOp:
  """2^f * 2^n for |f| <= 1/2 (float32): 2^f by the polynomial, in [0.70, 1.42], then n into its exponent bits."""
  p = _alu(Ops.ADD, _alu(Ops.MUL, f, _horner(f, EXP2_POLY)), 1.0)
  n1 = _alu(Ops.SHR, n, 1)
  n2 = _alu(Ops.SUB, n, n1)                                        # n1 + n2 = n, both in [-80, 80]
  p1 = _bitcast(_alu(Ops.ADD, _bitcast(p, dtypes.int32), _alu(Ops.SHL, n1, 23)), dtypes.float32)  # p*2^n1, exact
  s2 = _bitcast(_alu(Ops.SHL, _alu(Ops.ADD, n2, 127), 23), dtypes.float32)                      # 2^n2
  return _alu(Ops.MUL, p1, s2)

def exp2_f32(x: UOp) -> UOp:
  """2^x: x = n + f with n an integer and |f| <= 1/2, 2^f by a polynomial, 2^n by writing n into exponent bits.
  NaN stays NaN, +inf -> inf, -inf -> 0, and results past the float range overflow/underflow with one rounding."""
  xc = _clamp(x, 160.0)
  n, nf = _round(xc)
  ret = _exp2_poly(_alu(Ops.SUB, xc, nf), n)
  return _where(_isnan(x), x, ret)                                 # NaN: its bits made n meaningless

# ***** exp(x) = EXP2(x * log2(e)) with the reduction done on x *****

LOG2E = 1 / math.log(2)
# ln2 = HI + LO: HI has few enough mantissa bits that n * HI is exact for every n the clamp allows (9 bits for
# float32's |n| <= 160, 32 for float64's |n| <= 1100); x - n*HI is then exact too, since it is close to x
LN2_SPLIT = {dtypes.float32: (0.693359375, -2.1219444005469057e-04),
             dtypes.float64: (6.93147180369123816490e-01, 1.90821492927058770002e-10)}
# |x| past these overflows to inf / underflows to 0 whatever the exact value, and keeps 2^n in _times_pow2's range
EXP_CLAMP = {dtypes.float32: 110.0, dtypes.float64: 760.0}

def _exp_reduce(x: UOp, sign: float) -> tuple[UOp, UOp, UOp]:
  """(n as an int, f, the clamped x) with e^(sign*x) = 2^n * 2^f and |f| <= 1/2, f accurate to ~2^-40 relative."""
  fd = x.dtype.scalar()
  xs = x if sign > 0 else UOp(Ops.NEG, x.dtype, (x,))
  xc = _clamp(xs, EXP_CLAMP[fd])
  n, nf = _round(_alu(Ops.MUL, xc, LOG2E))
  hi, lo = LN2_SPLIT[fd]
  r = _alu(Ops.SUB, _alu(Ops.SUB, xc, _alu(Ops.MUL, nf, hi)), _alu(Ops.MUL, nf, lo))
  return n, _alu(Ops.MUL, r, LOG2E), xc

def exp_decomposed(x: UOp, sign: float) -> UOp:
  """e^(sign*x) on float32 lanes: the reduction on x, then exp2_f32's polynomial and exponent bits."""
  n, f, _ = _exp_reduce(x, sign)
  return _where(_isnan(x), x, _exp2_poly(f, n))

def exp_native(x: UOp, sign: float) -> UOp:
  """e^(sign*x) for a device's own EXP2 (and float64 on CPUs): the reduction on x, EXP2 of the small f, then 2^n
  into the exponent bits."""
  n, f, _ = _exp_reduce(x, sign)
  return _where(_isnan(x), x, _times_pow2(UOp(Ops.EXP2, f.dtype, (f,), "reduced"), n))

def _exp_sign(c: UOp) -> float | None:
  """+1 or -1 when the constant is +-log2(e) (Tensor.exp's and sigmoid's), else None."""
  v = c.arg[0] if isinstance(c.arg, tuple) and len(set(c.arg)) == 1 else c.arg
  if not isinstance(v, float): return None
  return 1.0 if v == LOG2E else -1.0 if v == -LOG2E else None

def exp_rule(ctx: bool, e: UOp, x: UOp, c: UOp) -> UOp | None:
  """EXP2(x * +-log2(e)), float32 or float64, not already reduced (arg "reduced"); ctx: the renderer decomposes."""
  if e.arg == "reduced" or (sign := _exp_sign(c)) is None or (fd := e.dtype.scalar()) not in _BITS: return None
  return exp_decomposed(x, sign) if ctx and fd is dtypes.float32 else exp_native(x, sign)

pm_exp_reduce = PatternMatcher([
  (UPat(Ops.EXP2, name="e", src=(UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c"))),)), exp_rule),
])

def log2_f32(x: UOp) -> UOp:
  """log2(x) = e + log2(m) with x = m*2^e and m in [sqrt(2)/2, sqrt(2)); log2(m) from s = (m-1)/(m+1) by an odd
  polynomial. Denormals are scaled up by 2^23 first. log2(0) = -inf, log2(negative) = NaN, inf -> inf, NaN -> NaN."""
  small = _cmp(Ops.CMPLT, x, 1.1754943508222875e-38)                # below the smallest normal float32
  xs = _where(small, _alu(Ops.MUL, x, 8388608.0), x)
  ix = _alu(Ops.SUB, _bitcast(xs, dtypes.int32), SQRT_HALF_BITS)
  e = _alu(Ops.SHR, ix, 23)                                         # arithmetic shift: the exponent, floored
  m = _bitcast(_alu(Ops.ADD, _alu(Ops.AND, ix, 0x007FFFFF), SQRT_HALF_BITS), dtypes.float32)
  s = _alu(Ops.FDIV, _alu(Ops.SUB, m, 1.0), _alu(Ops.ADD, m, 1.0))
  ef = _alu(Ops.ADD, UOp(Ops.CAST, x.dtype, (e,)), _where(small, -23.0, 0.0))
  ret = _alu(Ops.ADD, ef, _alu(Ops.MUL, s, _horner(_alu(Ops.MUL, s, s), LOG2_POLY)))
  ret = _where(_cmp(Ops.CMPLT, x, float("inf")), ret, x)            # +inf and NaN give themselves
  ret = _where(_cmp(Ops.CMPEQ, x, 0.0), float("-inf"), ret)
  return _where(_cmp(Ops.CMPLT, x, 0.0), float("nan"), ret)

# ***** the rules *****

_DECOMPOSE = {Ops.EXP2: exp2_f32, Ops.LOG2: log2_f32}
_IN_FLOAT = (dtypes.float16, dtypes.bfloat16)

def decompose_rule(x: UOp) -> UOp | None:
  """float32 math (scalar or lanes) is rewritten; half and bfloat16 go through float32."""
  sd = x.dtype.scalar()
  if sd is dtypes.float32: return _DECOMPOSE[x.op](x.src[0])
  if sd in _IN_FLOAT and x.dtype.count == 1:
    return UOp(x.op, dtypes.float32, (UOp(Ops.CAST, dtypes.float32, (x.src[0],)),)).cast(x.dtype)
  return None

pm_transcendental = PatternMatcher([(UPat((Ops.EXP2, Ops.LOG2), name="x"), decompose_rule)])
