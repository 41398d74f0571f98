"""Total integer division, modulo and shifts: the answers NumPy gives where C's are undefined or trap.

The IR's IDIV and MOD truncate toward zero like C, and are defined everywhere: x // 0 == 0, x % 0 == 0, and
INT_MIN // -1 wraps to INT_MIN (INT_MIN % -1 == 0). SHL and SHR by the dtype's width or more, or by a negative
count, shift every bit out: SHL gives 0, SHR gives 0 or (signed, negative x) -1. These are the semantics of
`exec_alu` (the PYTHON device). C, OpenCL C and LLVM IR leave those cases undefined (x86 traps on the divisions
with SIGFPE, and shifts use the count modulo the width), so this pass guards them with selects before rendering.
A divisor or count the bounds prove safe (every divisor in index math, every constant shift) is left alone.
"""
from __future__ import annotations
from attograd.dtype import DType, dtypes
from attograd.uop.ops import Ops, PatternMatcher, UOp, UPat

_UNSIGNED_OF = {dtypes.int8: dtypes.uint8, dtypes.int16: dtypes.uint16, dtypes.int32: dtypes.uint32,
                dtypes.int64: dtypes.uint64}

def _bits(d: DType) -> int: return 1 if d is dtypes.bool else d.itemsize * 8

def _wrapping_neg(x: UOp) -> UOp:
  """-x with INT_MIN -> INT_MIN, computed on the unsigned type (negating INT_MIN is undefined in C)."""
  u = _UNSIGNED_OF[x.dtype]
  return (UOp.const(u, 0).alu(Ops.SUB, x.cast(u))).cast(x.dtype)

def total_divmod(x: UOp) -> UOp | None:
  a, b = x.src
  d = x.dtype
  if d.count > 1 or not dtypes.is_int(d) or x.arg == "safe": return None  # the vectorizer makes no int vectors
  signed = not dtypes.is_unsigned(d)
  may_be_zero = b.vmin <= 0 <= b.vmax
  may_overflow = signed and b.vmin <= -1 <= b.vmax and a.vmin == dtypes.min(d)
  if not may_be_zero and not may_overflow: return None
  if b.op is Ops.CONST:  # 0 or -1
    if b.arg == 0: return x.const_like(0)
    return _wrapping_neg(a) if x.op is Ops.IDIV else x.const_like(0)
  zero = b.eq(0)
  bad = zero | b.eq(-1) if may_overflow else zero
  # "safe": the divisor is never 0 or -1 now, so the rule doesn't fire on its own output
  res = UOp(x.op, d, (a, bad.where(b.const_like(1), b)), "safe")
  if not may_overflow: return zero.where(x.const_like(0), res)
  edge = _wrapping_neg(a) if x.op is Ops.IDIV else x.const_like(0)  # x // -1 == -x, x % -1 == 0
  return zero.where(x.const_like(0), b.eq(-1).where(edge, res))

def total_shift(x: UOp) -> UOp | None:
  a, b = x.src
  d = x.dtype
  if d.count > 1 or not (dtypes.is_int(d) or d is dtypes.bool) or x.arg == "safe": return None
  bits, unsigned = _bits(d), d is dtypes.bool or dtypes.is_unsigned(d)
  if 0 <= b.vmin and b.vmax < bits: return None
  # every bit shifted out: SHL leaves 0, SHR leaves the sign (x >> (bits-1) is 0 or -1, and 0 for unsigned x)
  out = x.const_like(0) if x.op is Ops.SHL or unsigned else a.alu(Ops.SHR, a.const_like(bits - 1))
  if b.op is Ops.CONST: return out
  # a negative count is a huge one, as NumPy sees it: compare as unsigned
  ok = (b if unsigned else b.cast(_UNSIGNED_OF[d])) < bits
  return ok.where(UOp(x.op, d, (a, ok.where(b, b.const_like(0))), "safe"), out)

def float_to_unsigned(x: UOp) -> UOp | None:
  """A float cast to an unsigned int wraps negatives modulo 2**bits (-1.0 -> 0xFFFFFFFF), as NumPy and PyTorch do on
  x86 and the PYTHON device does everywhere. C and LLVM leave it undefined, and gcc folds a constant -1.0 to 0: go
  through int64, which holds every such value (uint64: only the negatives, int64 can't hold 2**63 and up)."""
  (a,) = x.src
  d = x.dtype
  if d.count > 1 or not dtypes.is_unsigned(d) or not dtypes.is_float(a.dtype) or a.vmin >= 0: return None
  wrapped = a.cast(dtypes.int64).cast(d)
  return wrapped if d is not dtypes.uint64 else (a < 0).where(wrapped, UOp(Ops.CAST, d, (a,), "safe"))

pm_int_safety = PatternMatcher([
  (UPat(Ops.CAST, name="x"), lambda x: None if x.arg == "safe" else float_to_unsigned(x)),
  (UPat((Ops.IDIV, Ops.MOD), name="x"), total_divmod),
  (UPat((Ops.SHL, Ops.SHR), name="x"), total_shift),
])
