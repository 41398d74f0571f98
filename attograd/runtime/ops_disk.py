"""The DISK devices: memory-mapped files. A DISK buffer is a view (offset, size) of a mapped file, so loading a model
makes tensors over its bytes without reading them; `.to(device)` copies exactly those bytes. No kernel runs here.
"DISK" maps the files the loaders open (nn/state.py), read-only; "DISK:path" is one file, as in tinygrad: opened
read-write (created or grown to the size asked for) when its first buffer is allocated, so `t.to("DISK:path")`,
`Tensor.empty(n, device="DISK:path")` and an assign into such a tensor write the file."""
from __future__ import annotations
import mmap, os, weakref
from typing import Any
from attograd.device import Allocator, Buffer, Compiled, Compiler
from attograd.dtype import DType
from attograd.renderer import Renderer

_NO_COMPUTE = ("DISK tensors are read-only views of files: no kernel runs on DISK. Move the tensor to a compute device "
               "first, e.g. t.to('CPU'), and apply casts, bitcasts and views there")

_MADV_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)  # Linux, macOS; absent on Windows

class DiskMapping:
  """One file (or bytes object) mapped read-only. Views keep it alive; the mapping closes with its last view."""
  def __init__(self, source: str | os.PathLike | bytes | bytearray | memoryview):
    if isinstance(source, (bytes, bytearray, memoryview)):
      self.path, self.mm = "<memory>", None
      self.data: memoryview = memoryview(source).cast("B")
    else:
      self.path = os.fspath(source)
      with open(self.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        # mmap refuses empty files; an empty file has no bytes to view anyway
        self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
      self.data = memoryview(self.mm) if self.mm is not None else memoryview(b"")
  @classmethod
  def of_mmap(cls, path: str, mm: mmap.mmap) -> DiskMapping:
    """A mapping over an mmap the caller opened (writable when the mmap is)."""
    self = cls.__new__(cls)
    self.path, self.mm, self.data = path, mm, memoryview(mm)
    return self
  @property
  def size(self) -> int: return self.data.nbytes
  def release(self, offset: int, nbytes: int) -> None:
    """Drop this process's pages of bytes [offset, offset+nbytes) of the file (they are read from it again if
    touched; the mappings are shared, so written bytes are in the file): a model file copied to a device is then not
    held in memory twice."""
    if self.mm is None or _MADV_DONTNEED is None or self.path == "<memory>": return
    start = offset - offset % mmap.PAGESIZE
    try: self.mm.madvise(_MADV_DONTNEED, start, min(offset + nbytes, self.size) - start)
    except (OSError, ValueError): pass  # an advice only
  def read(self, offset: int, nbytes: int) -> memoryview:
    """A zero-copy view of bytes [offset, offset+nbytes)."""
    if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
      raise ValueError(f"DISK: {self.path}: bytes [{offset}, {offset + nbytes}) are outside it ({self.size} bytes)")
    return self.data[offset:offset + nbytes]
  def __repr__(self) -> str: return f"<DiskMapping {self.path} {self.size} bytes>"

class DiskView:
  """What a DISK buffer holds instead of device memory: (mapping, byte offset, byte size)."""
  __slots__ = ("mapping", "offset", "nbytes")
  def __init__(self, mapping: DiskMapping, offset: int, nbytes: int):
    mapping.read(offset, nbytes)  # validates the range
    self.mapping, self.offset, self.nbytes = mapping, offset, nbytes
  def __repr__(self) -> str: return f"<DiskView {self.mapping.path} [{self.offset}, {self.offset + self.nbytes})>"

class DiskAllocator(Allocator):
  """Reads only: a DISK buffer can't be allocated fresh or written, since it is a view of a file."""
  def alloc(self, nbytes: int) -> Any: raise RuntimeError(f"DISK: can't allocate a {nbytes}-byte buffer. {_NO_COMPUTE}")
  def copyin(self, dest: Any, src: memoryview) -> None:
    raise RuntimeError(f"DISK: can't write into {dest}. {_NO_COMPUTE}")
  def copyout(self, dest: memoryview, src: DiskView) -> None:
    dest[:] = src.mapping.read(src.offset, src.nbytes)
    # the bytes now live on the device: the file's pages needn't stay in this process too (they fault in again, from
    # the page cache, if the file is read again)
    src.mapping.release(src.offset, src.nbytes)
  def offset_handle(self, buf: DiskView, nbytes: int, offset: int) -> DiskView:
    return DiskView(buf.mapping, buf.offset + offset, nbytes)

class FileAllocator(Allocator):
  """Buffers of a "DISK:path" device: views of its file, which is opened (and grown) on the first allocation."""
  def __init__(self, dev: DiskDevice): self.dev = dev
  def alloc(self, nbytes: int) -> DiskView: return DiskView(self.dev._might_open(nbytes), 0, nbytes)
  def free(self, buf: Any, nbytes: int) -> None: self.dev._might_close()
  def copyin(self, dest: DiskView, src: memoryview) -> None:
    if dest.mapping.data.readonly:
      raise PermissionError(f"DISK: {dest.mapping.path} is open read-only (no write permission); it can't be written")
    dest.mapping.data[dest.offset:dest.offset + dest.nbytes] = src
  offset_handle = DiskAllocator.offset_handle
  copyout = DiskAllocator.copyout  # (a shared mapping: written bytes are in the file, not in the dropped pages)

class DiskBuffer(Buffer):
  """A Buffer whose memory is a view of a mapped file. It holds no device memory, so it isn't counted in mem_used."""
  def __init__(self, device: str, view: DiskView, size: int, dtype: DType, allocator: Allocator, parent: Any = None):
    if view.nbytes != size * dtype.itemsize:
      raise ValueError(f"DISK: a view of {view.nbytes} bytes can't hold {size} elements of {dtype}")
    super().__init__(device, size, dtype)
    # parent: the allocated Buffer this is a view of, kept alive (it holds the file open) while the view is
    self._buf, self.allocator, self.parent = view, allocator, parent
  def __del__(self) -> None: pass
  def __repr__(self) -> str: return f"<DiskBuffer {self._buf} {self.size} {self.dtype}>"

class DiskRenderer(Renderer):
  def __init__(self) -> None: super().__init__(device="DISK")
  def prepare(self, sink: Any) -> Any: raise RuntimeError(_NO_COMPUTE)
  def render(self, name: str, uops: list) -> str: raise RuntimeError(_NO_COMPUTE)

class DiskCompiler(Compiler):
  def compile(self, src: str) -> bytes: raise RuntimeError(_NO_COMPUTE)

def _no_program(*args: Any, **kwargs: Any) -> Any: raise RuntimeError(_NO_COMPUTE)

class DiskDevice(Compiled):
  def __init__(self, device: str):
    self.path = device.partition(":")[2]  # "" for the loaders' device
    self.size: int | None = None  # bytes mapped, while a buffer of a "DISK:path" device is allocated
    self.fd: int | None = None
    self.refcount = 0  # allocated buffers of a "DISK:path" device
    self.writable = False
    self.mapping: DiskMapping | None = None
    super().__init__(device, FileAllocator(self) if self.path else DiskAllocator(), DiskRenderer(), DiskCompiler(),
                     _no_program)
    # one mapping per open file: loading the same file twice shares it
    self._mappings: weakref.WeakValueDictionary[tuple[Any, ...], DiskMapping] = weakref.WeakValueDictionary()
  def _might_open(self, nbytes: int) -> DiskMapping:
    """The file mapped with at least `nbytes` (created, or grown with zeros, when shorter), counted as one more user.
    A file we may not write is mapped read-only: reading it works, writing it raises."""
    if self.mapping is None or self.size is None or nbytes > self.size:
      if self.fd is None:
        try: self.fd, self.writable = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644), True
        except PermissionError: self.fd, self.writable = os.open(self.path, os.O_RDONLY), False
      writable = self.writable
      if os.fstat(self.fd).st_size < nbytes:
        if not writable:
          have = os.fstat(self.fd).st_size
          if self.refcount == 0:  # nothing else holds it open
            os.close(self.fd)
            self.fd = None
          raise ValueError(f"DISK: {self.path} has {have} bytes, {nbytes} asked for, and it is read-only to us")
        os.ftruncate(self.fd, nbytes)
      # a larger mapping for a larger buffer; buffers made before keep theirs (both see the same file pages)
      mm = mmap.mmap(self.fd, nbytes, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
      self.mapping, self.size, self.mem = DiskMapping.of_mmap(self.path, mm), nbytes, mm  # (mem: tinygrad's name)
    self.refcount += 1
    return self.mapping
  def _might_close(self) -> None:
    """One user fewer; the last one closes the file (mapped views still alive keep their pages)."""
    self.refcount -= 1
    if self.refcount > 0: return
    if self.fd is not None: os.close(self.fd)
    self.fd, self.size, self.mapping = None, None, None
    if hasattr(self, "mem"): del self.mem
  def open(self, source: str | os.PathLike | bytes | bytearray | memoryview | DiskMapping) -> DiskMapping:
    """The read-only mapping of a file path (shared while in use), or of bytes already in memory."""
    if isinstance(source, DiskMapping): return source
    if isinstance(source, (bytes, bytearray, memoryview)): return DiskMapping(source)
    st = os.stat(source)
    # a file rewritten in place gets a new mtime or size, and so a new mapping
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if (m := self._mappings.get(key)) is None: m = self._mappings[key] = DiskMapping(source)
    return m
  def buffer(self, mapping: DiskMapping, offset: int, size: int, dtype: DType) -> DiskBuffer:
    """`size` elements of `dtype` at byte `offset` of `mapping`, without reading them."""
    assert isinstance(self.allocator, DiskAllocator)
    return DiskBuffer(self.device, DiskView(mapping, offset, size * dtype.itemsize), size, dtype, self.allocator)
