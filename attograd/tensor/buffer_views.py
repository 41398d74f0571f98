"""Which views of a BUFFER node a Tensor op may treat as the buffer itself: realized values, whole buffers, the prefix a
symbolic shape uses, and the one-to-one views an assign can write through. Facts about UOps the Tensor layer, its
topic modules and the JIT share."""
from __future__ import annotations
from attograd.dtype import DType
from attograd.engine.buffers import IOTA_TAG
from attograd.uop.ops import GroupOp, Ops, UOp
from attograd.uop.view import ShapeTracker

def _is_realized(u: UOp) -> bool:
  return u.base.op is Ops.BUFFER or (u.op is Ops.MULTI and all(_is_realized(s) for s in u.src))

def view_root(u: UOp) -> UOp:
  """The node u views: under its movement ops, detaches and contiguous_backwards (they share its values)."""
  while u.op in GroupOp.Movement or u.op is Ops.DETACH or u.op is Ops.CONTIGUOUS_BACKWARD: u = u.src[0]
  return u

def _contiguous_view_of_buffer(u: UOp) -> bool:
  """A BUFFER seen whole through reshapes only."""
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u.op is Ops.BUFFER

def _prefix_of_buffer(u: UOp) -> bool:
  """The first elements of a BUFFER, through reshapes (how a symbolic shape's values sit in a buffer sized for the
  largest value of its Variables, here seen with their bound values)."""
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u.op is Ops.SHRINK and len(u.arg) == 1 and u.arg[0][0] == 0 and u.src[0].op is Ops.BUFFER

def _prefix_view_of_buffer(u: UOp) -> bool:
  """A view of a BUFFER whose elements are its first ones in order (reshapes, a permute undone, a shrink of the
  start): a kernel can be handed the buffer itself for it (Tensor.custom_kernel)."""
  chain: list[UOp] = []
  while u.op in GroupOp.Movement:
    chain.append(u)
    u = u.src[0]
  if u.op is not Ops.BUFFER or u.arg[2:] == (IOTA_TAG,): return False
  st = ShapeTracker.from_shape(u.shape)
  for m in reversed(chain): st = st.apply(m.op, m.arg)
  return len(st.views) == 1 and st.views[0].contiguous

def _is_whole_buffer(u: UOp) -> bool: return _contiguous_view_of_buffer(u)

_ONE_TO_ONE = (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE, Ops.FLIP)
def _writable_view(u: UOp) -> tuple[UOp, DType] | None:
  """(u as a chain of one-to-one views over its BUFFER in the buffer's dtype, that dtype) when an assign to u can
  write through it into the buffer; None for anything else (an expand or pad maps one element to many or none)."""
  chain = []
  while u.op in _ONE_TO_ONE or u.op is Ops.DETACH or \
        (u.op is Ops.BITCAST and u.dtype.itemsize == u.src[0].dtype.itemsize):
    if u.op in _ONE_TO_ONE: chain.append(u)
    u = u.src[0]
  if u.op is not Ops.BUFFER or u.arg[2:] == (IOTA_TAG,): return None
  for m in reversed(chain): u = UOp(m.op, u.dtype, (u,), m.arg)
  return u, u.dtype
