"""Tensor-level UOp builders: graphs whose every node keeps a shape, with constants on a device and broadcast. The
Tensor layer, the gradient rules and whatever else builds tensor graphs from UOps (not from Tensors) share them."""
from __future__ import annotations
from attograd.dtype import ConstType, DType, dtypes
from attograd.uop.ops import GroupOp, Ops, UOp

def const(val: ConstType, dtype: DType, device: str) -> UOp:
  """A scalar constant on `device` (shape ())."""
  return UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),), dtypes.as_const(val, dtype))

def full_like(u: UOp, val: float) -> UOp:
  """A constant with `u`'s shape, dtype and device (a scalar CONST viewed through reshape and expand)."""
  return expand(reshape(const(val, u.dtype, u.device), (1,) * len(u.shape)), u.shape)

def zeros_like(u: UOp) -> UOp: return full_like(u, 0)

def alu(op: Ops, *src: UOp) -> UOp:
  """An elementwise op over sources of one shape: comparisons give bools, the rest the last source's dtype."""
  return UOp(op, dtypes.bool if op in GroupOp.Comparison else src[-1].dtype, src)

def add(a: UOp, b: UOp) -> UOp: return alu(Ops.ADD, a, b)
def mul(a: UOp, b: UOp) -> UOp: return alu(Ops.MUL, a, b)
def fdiv(a: UOp, b: UOp) -> UOp: return alu(Ops.FDIV, a, b)
def neg(a: UOp) -> UOp: return alu(Ops.NEG, a)
def mulc(a: UOp, c: float) -> UOp: return mul(a, full_like(a, c))
def where(c: UOp, a: UOp, b: UOp) -> UOp: return UOp(Ops.WHERE, a.dtype, (c, a, b))

def reshape(u: UOp, shape: tuple) -> UOp:
  """`u` reshaped (reshapes compose, and a reshape to the same shape is `u`)."""
  if u.shape == shape: return u
  if u.op is Ops.RESHAPE: u = u.src[0]  # reshapes compose
  return u if u.shape == shape else UOp(Ops.RESHAPE, u.dtype, (u,), shape)

def expand(u: UOp, shape: tuple) -> UOp: return u if u.shape == shape else UOp(Ops.EXPAND, u.dtype, (u,), shape)

def sum_axes(u: UOp, axes: tuple[int, ...]) -> UOp:
  """The sum over `axes` (kept as size-1 dims); `u` itself when there are none."""
  return UOp(Ops.REDUCE_AXIS, u.dtype, (u,), (Ops.ADD, axes)) if axes else u

