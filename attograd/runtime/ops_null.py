"""The NULL device: kernels are scheduled, lowered, rendered (as the CPU device's C) and "built", but nothing is stored
and nothing runs. It measures what a program would do (its kernels, how many, their source) on a machine that can't or
needn't run it: tinygrad's DEV=NULL. Reading a NULL buffer raises, unless NULL_ALLOW_COPYOUT=1 (it reads zeros)."""
from __future__ import annotations
from attograd.device import Allocator, Compiled, Compiler
from attograd.helpers import NULL_ALLOW_COPYOUT
from attograd.renderer.cstyle import ClangRenderer

class NullMemory:
  """The handle of a NULL buffer: its size, and no storage."""
  __slots__ = ("nbytes",)
  def __init__(self, nbytes: int): self.nbytes = nbytes
  def __repr__(self) -> str: return f"<NullMemory {self.nbytes} bytes>"

class NullAllocator(Allocator):
  """Memory that isn't there: writes are dropped, reads raise (or give zeros under NULL_ALLOW_COPYOUT=1)."""
  def alloc(self, nbytes: int) -> NullMemory: return NullMemory(nbytes)
  def copyin(self, dest: NullMemory, src: memoryview) -> None: pass
  def offset_handle(self, buf: NullMemory, nbytes: int, offset: int) -> NullMemory: return NullMemory(nbytes)
  def transfer(self, dest: NullMemory, src: NullMemory, nbytes: int) -> None:
    """A copy from one NULL device to another (sharding across NULL:1, NULL:2): nothing to move, and no read."""
  def copyout(self, dest: memoryview, src: NullMemory) -> None:
    if not NULL_ALLOW_COPYOUT:
      raise RuntimeError("NULL: a NULL buffer holds no values (kernels on the NULL device never run); compute on a "
                         "real device, or set NULL_ALLOW_COPYOUT=1 to read zeros")
    dest.cast("B")[:] = bytes(dest.nbytes)

class NullCompiler(Compiler):
  """The "binary" is the source itself: rendering is exercised, no compiler is needed (nor cached: it costs nothing)."""
  threadsafe = True
  def compile(self, src: str) -> bytes: return src.encode()

class NullProgram:
  """A kernel that does nothing when called."""
  def __init__(self, name: str, lib: bytes): self.name, self.lib = name, lib
  def __call__(self, *bufs: object, vals: tuple[int, ...] = (), wait: bool = False, **launch: object) -> float:
    return 0.0

class NullDevice(Compiled):
  """Renders with the CPU device's C renderer (single-threaded), so a NULL kernel's source is what CPU would build."""
  def __init__(self, device: str):
    super().__init__(device, NullAllocator(), ClangRenderer(device, threads=False), NullCompiler(), NullProgram)
