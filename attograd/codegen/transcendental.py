"""Transcendentals as plain arithmetic: EXP2 and LOG2 on float32 become range reduction, a polynomial and exponent
bit manipulation (adds, multiplies, shifts, bitcasts), so they run on vector lanes like any other float math; a libm
call per element can't. Used by CPU renderers that set `decompose_transcendentals`; GPUs keep their native exp2/log2.
half and bfloat16 are computed in float32 and rounded back. float64 stays a libm call.
"""
from __future__ import annotations
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
def _cmp(op: Ops, a: UOp, b: float) -> UOp:
  # a vector comparison is a lane mask as wide as the lanes (the vectorizer's convention), a scalar one a bool
  return UOp(op, _as(a, dtypes.int32) if a.dtype.count > 1 else dtypes.bool, (a, UOp.const(a.dtype.scalar(), b)))
def _isnan(x: UOp) -> UOp: return UOp(Ops.CMPNE, _as(x, dtypes.int32) if x.dtype.count > 1 else dtypes.bool, (x, x))
def _where(c: UOp, a: UOp | float, b: UOp | float) -> UOp:
  a, b = (v if isinstance(v, UOp) else UOp.const(dtypes.float32, v) for v in (a, b))
  width = max(c.dtype.count, a.dtype.count, b.dtype.count)  # a lane mask picks between constants: still lanes
  return UOp(Ops.WHERE, a.dtype.scalar().vec(width), (c, a, b))
def _horner(x: UOp, coeffs: tuple[float, ...]) -> UOp:
  acc = UOp.const(dtypes.float32, coeffs[-1])
  for c in reversed(coeffs[:-1]): acc = _alu(Ops.ADD, _alu(Ops.MUL, x, acc), c)
  return acc

# ***** the decompositions *****

def exp2_f32(x: UOp) -> UOp:
  """2^x: x = n + f with n an integer and |f| <= 1/2, 2^f by a polynomial, 2^n by writing n into exponent bits.
  n is split in two halves (each a normal float's exponent) so 2^x overflows to inf, and underflows through the
  denormals to 0, with a single rounding. NaN stays NaN, +inf -> inf, -inf -> 0."""
  # clamped to [-160, 160] by plain selects (a compare and a blend each; NaN passes through and is fixed at the end)
  xc = _where(_cmp(Ops.CMPLT, x, -160.0), -160.0, x)
  xc = _where(_cmp(Ops.CMPLT, xc, 160.0), xc, 160.0)
  n = _alu(Ops.SUB, _bitcast(_alu(Ops.ADD, xc, ROUND_MAGIC), dtypes.int32), ROUND_MAGIC_BITS)  # round(xc)
  # f = xc - n: n goes back to float by a conversion, not as (xc + magic) - magic, which reassociation would fold
  f = _alu(Ops.SUB, xc, UOp(Ops.CAST, x.dtype, (n,)))
  p = _alu(Ops.ADD, _alu(Ops.MUL, f, _horner(f, EXP2_POLY)), 1.0)  # 2^f in [0.70, 1.42]
  n1 = _alu(Ops.SHR, n, 1)
  n2 = _alu(Ops.SUB, n, n1)                                        # n1 + n2 = n, both in [-80, 80]
  p1 = _bitcast(_alu(Ops.ADD, _bitcast(p, dtypes.int32), _alu(Ops.SHL, n1, 23)), dtypes.float32)  # p*2^n1, exact
  s2 = _bitcast(_alu(Ops.SHL, _alu(Ops.ADD, n2, 127), 23), dtypes.float32)                      # 2^n2
  ret = _alu(Ops.MUL, p1, s2)
  return _where(_isnan(x), x, ret)                                 # NaN: its bits made n meaningless

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
