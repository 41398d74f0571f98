"""DISK tensors (views of files, runtime/ops_disk.py) at the Tensor level: a chain of views over a DISK buffer is
resolved to a buffer over its bytes (no kernel runs on DISK, so only views that are one contiguous byte range can be
read or written), and writes into such a view copy the value's bytes into the file."""
from __future__ import annotations
import os
from typing import TYPE_CHECKING, Any
from attograd.device import Buffer, Device
from attograd.dtype import DType, least_upper_dtype
from attograd.helpers import prod
from attograd.uop.ops import GroupOp, Ops, UOp
from attograd.uop.view import ShapeTracker, strides_for_shape
from attograd.engine.buffers import buffers, new_buffer_uop
from attograd.runtime.ops_disk import DiskBuffer, DiskMapping, DiskView
import attograd.tensor.pending as pending
if TYPE_CHECKING: from attograd.tensor.core import Tensor

def on_disk(device: Any) -> bool: return device.__class__ is str and device.startswith("DISK")

def _noncontiguous(what: str) -> RuntimeError:
  return RuntimeError(f"DISK: {what}: a non-contiguous view is not supported on DISK (no kernel runs there); move the "
                      "tensor to a compute device first, e.g. t.to('CPU')")

def resolve(t: Tensor) -> UOp:
  """t's graph (views and same-size bitcasts of a DISK buffer) as a BUFFER over exactly its bytes, reshaped to t's
  shape."""
  return _resolve(t.uop, type(t))

class DiskComputeError(NotImplementedError, AssertionError):
  """An op that computes (a cast, an add) on a DISK tensor: the NotImplementedError tinygrad raises for it, which is
  a RuntimeError like the DISK runtime's other refusals; also an AssertionError, which is what tinygrad's tests expect
  from an add or a cat of DISK slices (move them to a device first: `t.to(None)`)."""

def _resolve(u: UOp, tensor: type[Tensor]) -> UOp:
  chain: list[UOp] = []
  x = u
  while x.op in GroupOp.Movement or x.op in (Ops.BITCAST, Ops.DETACH, Ops.CONTIGUOUS):
    if x.op is Ops.BITCAST and x.dtype.itemsize != x.src[0].dtype.itemsize: break
    if x.op in GroupOp.Movement: chain.append(x)
    x = x.src[0]
  if x.op is Ops.COPY:  # a copy into the file not made yet (t.to("DISK:path")[1:]): made now, then viewed
    return _resolve(u.substitute({x: tensor(x).realize().uop}), tensor)
  if x.op is not Ops.BUFFER:
    # the same class as every other DISK compute refusal (runtime/ops_disk.py): a DISK device runs no kernel, by design
    raise DiskComputeError(f"DISK: {x.op.name.lower()} of a {x.dtype.name} tensor of shape {x.shape} can't run on "
                       f"{x.device or 'DISK'}: DISK tensors are views of files, nothing is computed there; move the "
                       "tensor first, e.g. t.to('CPU')")
  st = ShapeTracker.from_shape((x.arg[1],))
  for m in reversed(chain): st = st.apply(m.op, m.arg)
  st = st.simplify()
  n = prod(u.shape)
  v = st.views[-1]
  if n and (len(st.views) != 1 or v.mask is not None or v.strides != strides_for_shape(v.shape)):
    raise _noncontiguous(f"reading a view of shape {u.shape}")
  # always a fresh node, even for the whole buffer: a copy out of it is then a new graph, never a memoized result
  # from before the file was written
  return _sub_buffer(x, v.offset if n else 0, n, u.dtype, u.shape)

def _sub_buffer(base: UOp, elem_offset: int, n: int, dtype: DType, shape: tuple[int, ...]) -> UOp:
  """A BUFFER node over n elements of `dtype` at element `elem_offset` (in base's dtype) of base's buffer."""
  parent = buffers[base].allocate()
  view: DiskView = parent._buf
  off = view.offset + elem_offset * base.dtype.itemsize
  sub = DiskBuffer(parent.device, DiskView(view.mapping, off, n * dtype.itemsize), n, dtype, parent.allocator, parent)
  out = new_buffer_uop(parent.device, n, dtype, sub)
  return out if shape == (n,) else UOp(Ops.RESHAPE, dtype, (out,), shape)

def bitcast(t: Tensor, dtype: DType) -> Tensor:
  """A DISK view's bytes as `dtype` of another item size: the last axis is rescaled, as in tinygrad."""
  shape = t.shape
  nbytes = (shape[-1] if shape else 1) * t.dtype.itemsize
  if nbytes % dtype.itemsize:
    raise RuntimeError(f"bitcast: the last axis of shape {shape} ({nbytes} bytes of {t.dtype}) isn't a whole number "
                       f"of {dtype} ({dtype.itemsize} bytes)")
  if not shape: raise RuntimeError(f"bitcast: a 0-d {t.dtype} tensor can't become {dtype} of another item size")
  new_shape = shape[:-1] + (nbytes // dtype.itemsize,)
  u = resolve(t)
  base = u.base
  return t._new(_sub_buffer(base, 0, prod(new_shape), dtype, new_shape))

def assign(t: Tensor, x: Any) -> Tensor:
  """Write x's values into the bytes of the DISK view t. x may live on any device (a DISK x is read through the
  default device); it is broadcast to t's shape and cast to t's dtype there."""
  if not isinstance(x, type(t)): x = type(t)(x, dtype=t.dtype)
  if on_disk(x.device): x = x.to(Device.DEFAULT)
  if x.shape != t.shape: x = x._broadcast_to(t.shape)
  if x._weak is not None and least_upper_dtype(t.dtype, x.dtype) is not t.dtype:
    # a Python number's weak dtype defers to the target's only where it fits (as a write to a device checks)
    raise RuntimeError(f"assign dtype mismatch: a {x.dtype} value (a Python number) doesn't fit the {t.dtype} DISK "
                       f"target; cast it first (value.cast({t.dtype}))")
  if x.dtype != t.dtype: x = x.cast(t.dtype)
  target = resolve(t).base
  # a lazy write that reads the file's old bytes runs first (through a view of the file: a Buffer of its own, over the
  # same bytes, so every pending write runs; writing a file is rare)
  pending.flush_all()
  buf = buffers[target].allocate()
  # (no version bump: reads of DISK go through fresh nodes (resolve), so no memoized read of the old bytes is reused,
  # and a node whose value *is* the file, t.to("DISK:path"), stays valid)
  if buf.size: buf.copyin(memoryview(x._raw()))
  return t

def setitem(t: Tensor, indices: Any, value: Any) -> None:
  """t[indices] = value on DISK: basic indices only (the region must be one contiguous byte range)."""
  idx = indices if isinstance(indices, tuple) else (indices,)
  if any(isinstance(i, (type(t), list)) or type(i).__module__ == "numpy" for i in idx):
    raise RuntimeError(f"setitem: advanced (tensor) indexing is not supported for DISK tensors ({t.device}); index "
                       "with ints and slices")
  assign(t[indices], value)

def file_uop(path: os.PathLike, dtype: DType) -> UOp:
  """A whole file as a "DISK:path" buffer of `dtype` elements (a tail shorter than one element left out)."""
  p = os.fspath(path)
  size = os.stat(p).st_size  # raises FileNotFoundError for a missing file, before anything would create it
  dev = Device.canonicalize(f"DISK:{p}")
  n = size // dtype.itemsize
  return new_buffer_uop(dev, n, dtype, Buffer(dev, n, dtype))

def mapping_uop(mapping: DiskMapping, offset: int, n: int, dtype: DType) -> UOp:
  """A "DISK" buffer of n `dtype` elements over bytes [offset, offset + n*itemsize) of a memory-mapped file."""
  disk: Any = Device["DISK"]  # runtime/ops_disk.py's device: it makes buffers over a mapping
  return new_buffer_uop("DISK", n, dtype, disk.buffer(mapping, offset, n, dtype))

def mapping_view(t: Tensor) -> tuple[DiskMapping, int] | None:
  """(mapping, byte offset) of the bytes under a DISK tensor's contiguous view, else None."""
  if not on_disk(t.device): return None
  buf = buffers[resolve(t).base]
  return (buf._buf.mapping, buf._buf.offset) if isinstance(buf._buf, DiskView) else None
