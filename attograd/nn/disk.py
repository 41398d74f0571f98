"""DISK tensors over the bytes of a file, memory-mapped rather than read: what every loader of weight files (state.py,
gguf.py) hands out until the tensor is moved to a compute device."""
from __future__ import annotations
import os
from typing import Any
from attograd.device import Device
from attograd.dtype import DType, dtypes, to_dtype
from attograd.helpers import prod
from attograd.runtime.ops_disk import DiskMapping
from attograd.tensor.disk import mapping_uop, mapping_view
from attograd.tensor import Tensor

PathLike = str | os.PathLike

def disk_device() -> Any: return Device["DISK"]

def disk_tensor(source: PathLike | bytes | DiskMapping, offset: int = 0, shape: tuple[int, ...] | None = None,
                dtype: DType | str = dtypes.uint8) -> Tensor:
  """A DISK tensor over bytes [offset, offset + numel*itemsize) of a file, which is memory-mapped, not read.
  Move it with `.to(device)` to copy exactly those bytes; `shape=None` takes the rest of the file as one dim.

  >>> import tempfile; p = tempfile.mktemp(); _ = open(p, "wb").write(bytes(range(8)))
  >>> disk_tensor(p, 2, (2, 2)).to("CPU").tolist()
  [[2, 3], [4, 5]]
  """
  mapping = disk_device().open(source)
  d = to_dtype(dtype)
  if shape is None: shape = ((mapping.size - offset) // d.itemsize,)
  n = prod(shape)
  if offset < 0 or offset + n * d.itemsize > mapping.size:
    raise ValueError(f"disk_tensor: {mapping.path}: {n} elements of {d} at byte {offset} end at byte "
                     f"{offset + n * d.itemsize}, past the end of the file ({mapping.size} bytes)")
  t = Tensor(mapping_uop(mapping, offset, n, d), device="DISK")
  return t.reshape(tuple(shape)) if tuple(shape) != (n,) else t

def disk_view(t: Tensor) -> tuple[DiskMapping, int] | None:
  """(mapping, byte offset) when `t` is on a DISK device ("DISK", or one file's "DISK:path"), else None."""
  return mapping_view(t)

def mapping_of(src: PathLike | Tensor, op: str) -> tuple[DiskMapping, int, int]:
  """The bytes to parse: (mapping, start, size). A path is mapped; a uint8 Tensor is read (or reused if on DISK)."""
  if isinstance(src, Tensor):
    if src.dtype is not dtypes.uint8 or src.ndim != 1: raise TypeError(f"{op}: need a 1-D uint8 Tensor, got {src}")
    if (v := disk_view(src)) is not None: return v[0], v[1], src.numel()
    raw = src.data()
    return disk_device().open(raw.cast("B") if raw.nbytes else b""), 0, src.numel()
  mapping = disk_device().open(src)
  return mapping, 0, mapping.size
