"""The Buffer behind each BUFFER node: new BUFFER nodes, and the table from a node to its Buffer (kept in the node's
BUFFER slot, uop/state.py)."""
from __future__ import annotations
from attograd.device import Buffer
from attograd.dtype import DType
from attograd.uop.ops import Ops, UOp
from attograd.uop.state import BUFFER, slots

class _BufferTable:
  """BUFFER node -> its Buffer, kept on the node itself: it lives exactly as long as the node, and a lookup is one
  dict access (a WeakKeyDictionary makes a weakref per lookup, which showed up in per-realize overhead)."""
  def __getitem__(self, u: UOp) -> Buffer:
    if (b := slots(u).get(BUFFER)) is None: raise KeyError(f"{u.op} has no Buffer")
    return b
  def get(self, u: UOp, default: Buffer | None = None) -> Buffer | None: return slots(u).get(BUFFER, default)
  def __setitem__(self, u: UOp, b: Buffer) -> None: slots(u)[BUFFER] = b
  def __contains__(self, u: UOp) -> bool: return BUFFER in slots(u)

# realized buffers: each BUFFER UOp (one per buffer version) points at its Buffer
buffers = _BufferTable()

_uid = 0
# a BUFFER arg's optional third element: the buffer holds 0..size-1 and is never written (Tensor.arange's), so kernels
# compute its values from their index math (Ops.IOTA) instead of loading them
IOTA_TAG = "iota"

# each device's DEVICE node, held for good (it holds nothing): every new buffer names its device, and the lookup here is
# cheaper than building the node again (new buffers are made on every realize and every TinyJit replay)
_device_nodes: dict[str, UOp] = {}

def new_buffer_uop(device: str, size: int, dtype: DType, buf: Buffer | None = None, iota: bool = False) -> UOp:
  """A fresh BUFFER node (its own identity) backed by `buf` or a new Buffer."""
  global _uid
  _uid += 1
  if (dn := _device_nodes.get(device)) is None: dn = _device_nodes[device] = UOp(Ops.DEVICE, arg=device)
  u = UOp(Ops.BUFFER, dtype, (dn,), (_uid, size, IOTA_TAG) if iota else (_uid, size))
  d = slots(u)
  d[BUFFER] = buf if buf is not None else Buffer(device, size, dtype)
  d["shape"], d["device"] = (size,), device  # what UOp.shape and UOp.device would compute, without their calls
  return u
