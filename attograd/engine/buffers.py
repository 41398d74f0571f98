"""The Buffer behind each BUFFER node: new BUFFER nodes, and the table from a node to its Buffer (kept in the node's
BUFFER slot, uop/state.py)."""
from __future__ import annotations
from attograd.device import Buffer
from attograd.dtype import DType
from attograd.uop.ops import Ops, UOp
import attograd.uop.state as state
from attograd.uop.state import BUFFER, slots

# realized buffers: each BUFFER UOp (one per buffer version) points at its Buffer (the table lives with the slots it
# reads, in the uop layer, where tinygrad's tests import it from)
buffers = state.buffers

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

def new_buffer(device: str, size: int, dtype: DType, num: int | None = None) -> UOp:
  """tinygrad's UOp.new_buffer: a fresh BUFFER node of `size` elements of `dtype` on `device` with a Buffer of its own
  (not allocated until used); `num` names it (the same num, size and dtype give the same node)."""
  if dtype.name.startswith("weak"): raise TypeError(f"new_buffer: a buffer needs a concrete dtype, not {dtype}")
  if num is None: return new_buffer_uop(device, size, dtype)
  if (dn := _device_nodes.get(device)) is None: dn = _device_nodes[device] = UOp(Ops.DEVICE, arg=device)
  u = UOp(Ops.BUFFER, dtype, (dn,), (num, size))
  if u not in buffers: buffers[u] = Buffer(device, size, dtype)
  return u
