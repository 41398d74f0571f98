"""Where realized values live: a realized node remembers, in its REALIZED slot (uop/state.py), the view of the
BUFFER now holding its value and that buffer's version then. The memo lives exactly as long as the node, and looking
it up is one dict access (no weakref per lookup). A write in place to that buffer, or to one it was computed from,
makes it stale."""
from __future__ import annotations
import weakref
from attograd.device import Buffer
from attograd.engine.buffers import buffers
from attograd.uop.ops import UOp
from attograd.uop.state import BUFFER, REALIZED, slots

def remember(node: UOp, view: UOp, deps: tuple[tuple[Buffer, int], ...] = ()) -> None:
  """node's value now lives in view's buffer, until that buffer or one of `deps` (the buffers it was computed from,
  with their versions then) is written in place."""
  b = slots(view.base).get(BUFFER)  # (buffers.get and put, without their calls: this runs on every realize)
  slots(node)[REALIZED] = (view, b.version if b is not None else 0, deps)

def remember_weakly(node: UOp) -> None:
  """node's memo keeps its view only while something else does: for a view that remembers node as its graph (its
  _origin), a strong memo would close a reference cycle (node -> view -> node) that keeps a training step's
  buffers alive until the garbage collector runs, so the next step got fresh, page-faulting memory."""
  if (m := (d := slots(node)).get(REALIZED)) is not None and m[0].__class__ is not weakref.ref:
    d[REALIZED] = (weakref.ref(m[0]),) + m[1:]

def lookup_realized(node: UOp) -> UOp | None:
  """The view now holding node's value, or None when it has none (or it went stale)."""
  if (m := (d := slots(node)).get(REALIZED)) is None: return None
  if m[0].__class__ is weakref.ref:
    if (v := m[0]()) is None:  # the view is gone, and with it the value
      del d[REALIZED]
      return None
    m = (v,) + m[1:]
  b = buffers.get(m[0].base)
  if (b is not None and m[1] != b.version) or any(d.version != v for d, v in m[2]):  # written in place since: stale
    del d[REALIZED]
    return None
  # a schedule made but never run (create_schedule alone, as tests and tools do) left its buffers unallocated
  if b is not None and b._buf is None and b.size: return None
  return m[0]
