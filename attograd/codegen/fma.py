"""Fused multiply-adds, chosen by the code generator and never by the compiler.

The same expression is often computed by several kernels: a max-pool's backward recomputes the forward's values and
compares them with the max the forward kernel found, so the two must agree to the last bit. A C compiler allowed to
contract a*b+c into a fused multiply-add (gcc's -ffp-contract=fast, LLVM's `contract` flag, nvcc's --fmad=true) decides
per kernel, from how each product is used there and at which optimization level, so the same UOp could round
differently in two kernels: a max-pool gradient then lost rows or became NaN (0/0 where no position equalled the max).

So the compilers contract nothing, and this pass fuses every float32/float64 `a*b + c` (and `a*b - c`, `c - a*b`) into
one MULACC. It looks at one node at a time, never at its users, so a UOp's value is the same in every kernel that
computes it. The reduce accumulations the linearizer writes are fused there (codegen/linearize.py)."""
from __future__ import annotations
from attograd.dtype import DType, dtypes
from attograd.uop.ops import Ops, PatternMatcher, UOp, UPat

FMA_DTYPES = (dtypes.float32, dtypes.float64)

def mulacc(a: UOp, b: UOp, c: UOp, dtype: DType) -> UOp:
  # an operand may be a scalar in a vector op (C's vector types broadcast it): the result has the op's dtype
  return UOp(Ops.MULACC, dtype, (a, b, c))

def _add(x: UOp) -> UOp | None:
  # a left-leaning chain of adds of products (acc + p1 + p2 ...) keeps its order: the right operand's product first
  if x.dtype.scalar() not in FMA_DTYPES: return None
  a, b = x.src
  if b.op is Ops.MUL: return mulacc(b.src[0], b.src[1], a, x.dtype)
  if a.op is Ops.MUL: return mulacc(a.src[0], a.src[1], b, x.dtype)
  return None

def _sub(x: UOp) -> UOp | None:
  if x.dtype.scalar() not in FMA_DTYPES: return None
  a, b = x.src
  # negation is exact: a*b - c is fma(a, b, -c) and c - a*b is fma(-a, b, c)
  if a.op is Ops.MUL: return mulacc(a.src[0], a.src[1], UOp(Ops.NEG, b.dtype, (b,)), x.dtype)
  if b.op is Ops.MUL: return mulacc(UOp(Ops.NEG, b.src[0].dtype, (b.src[0],)), b.src[1], a, x.dtype)
  return None

pm_fma = PatternMatcher([(UPat(Ops.ADD, name="x"), _add), (UPat(Ops.SUB, name="x"), _sub)])
