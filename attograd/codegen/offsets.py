"""Kernels that differ only in where they start reading a buffer share one program. A model's layers stacked in one
buffer (GPT-2's weights, read as views at layer * size) make one kernel per layer, the same but for a constant
offset baked into its index math: eight builds of one 60 KB matmul in the first generation. Where a device's buffers
are host addresses, that offset becomes a shift of the buffer's address instead, made when the kernel is called,
and the layers' kernels are one AST, lowered and compiled once."""
from __future__ import annotations
from attograd.dtype import PtrDType
from attograd.uop.ops import Ops, UOp
from attograd.uop.view import ShapeTracker, View

# shifts keep a buffer's address aligned to this many bytes (its own alignment: vector loads stay where they were)
SHIFT_ALIGN = 64

def split_offsets(ast: UOp) -> tuple[UOp, tuple[tuple[int, int], ...]]:
  """`ast` with the constant offset that every load of an input buffer shares taken out of its views (rounded down
  to SHIFT_ALIGN bytes), and (global index, bytes) for each buffer whose address is to be shifted by that much.
  A buffer that is written, read through anything but a view, or at a symbolic offset is left as it is, as are
  views whose offsets differ by less than the alignment."""
  users: dict[UOp, list[UOp]] = {}
  for u in ast.toposort():
    for s in u.src:
      if s.op is Ops.DEFINE_GLOBAL: users.setdefault(s, []).append(u)
  subs: dict[UOp, UOp] = {}
  shifts: list[tuple[int, int]] = []
  for g, us in users.items():
    if not isinstance(g.dtype, PtrDType) or SHIFT_ALIGN % (item := g.dtype.itemsize): continue
    if not all(u.op is Ops.LOAD and len(u.src) == 2 and u.src[0] is g and u.src[1].op is Ops.VIEW
               and isinstance(u.src[1].arg, ShapeTracker) for u in us): continue
    offs = [u.src[1].arg.views[0].offset for u in us]
    if not all(o.__class__ is int for o in offs): continue
    step = SHIFT_ALIGN // item
    if (m := min(offs) // step * step) <= 0: continue
    for u in us:
      st: ShapeTracker = u.src[1].arg
      v = st.views[0]
      moved = ShapeTracker((View.create(v.shape, v.strides, v.offset - m, v.mask),) + st.views[1:])
      subs[u] = u.replace(src=(g, u.src[1].replace(arg=moved)))
    shifts.append((g.arg, m * item))
  return (ast.substitute(subs) if subs else ast), tuple(sorted(shifts))
