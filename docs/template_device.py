"""A template runtime for a new attograd device, runnable as the toy device "TOY" (docs/adding-an-accelerator.md).

TOY is deliberately small but complete: memory is Python bytearrays (standing in for device memory you can only reach
through copyin/copyout), kernels are C from the C renderer with one extra rewrite rule, compiled by the CPU device's C
compiler, and launched by turning buffer handles into addresses. Copy this file, keep the four classes and replace
each body with your accelerator's calls; every method the framework calls says so below.

test/backend/test_device_template.py registers TOY and runs part of the device suite on it, so this file cannot rot.
"""
from __future__ import annotations
import ctypes
from attograd.device import Allocator, Compiled, Compiler, Device
from attograd.renderer.cstyle import ClangRenderer
from attograd.runtime.ops_cpu import ClangCompiler, CPUProgram, find_c_compiler
from attograd.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite

# ***** 1. Allocator: device memory and the copies in and out of it *****

class ToyAllocator(Allocator):
  """Returns an opaque handle per buffer. The framework never looks inside a handle: it only passes it back to
  free/copyin/copyout here and to the Program's __call__. On a GPU the handle would be a device pointer."""
  def alloc(self, nbytes: int) -> bytearray:
    # Called once per buffer, on first use, with nbytes >= 1 (empty tensors still get 1 byte).
    # Raise MemoryError when the device is full: LRUAllocator subclasses then free their cache and retry.
    return bytearray(nbytes)
  def free(self, buf: bytearray, nbytes: int) -> None:
    # Called when the Buffer is garbage collected. Subclass LRUAllocator (and write _alloc/_free instead of
    # alloc/free) to keep freed buffers for reuse: training loops allocate the same sizes every step.
    pass
  def copyin(self, dest: bytearray, src: memoryview) -> None:
    # Host -> device. `src` is a flat byte memoryview of exactly the buffer's size; it may be read-only.
    dest[:] = src
  def copyout(self, dest: memoryview, src: bytearray) -> None:
    # Device -> host, into a writable byte memoryview of exactly the buffer's size. Wait for pending kernels first
    # if launches are asynchronous (copyout is what makes results visible to .numpy() and .tolist()).
    dest[:] = src
  # Optional, host memory only: `as_memoryview(buf, nbytes)` lets copies between devices skip a staging copy
  # (see engine/realize.py _copy). A real accelerator leaves it out.

# ***** 2. Renderer: the linear UOp program -> source text *****

# A renderer's own rewrite rules run on the lowered graph before it is linearized (Renderer.prepare). Rules are data:
# (pattern, function) pairs; the function returns a replacement UOp or None to leave the node alone. This one shows
# the usual job, decomposing an op the target language lacks: RECIP(x) becomes 1 / x.
def _recip_to_div(x: UOp) -> UOp: return UOp(Ops.FDIV, x.dtype, (x.const_like(1.0), x.src[0]))
pm_toy = PatternMatcher([(UPat(Ops.RECIP, name="x"), _recip_to_div)])

class ToyRenderer(ClangRenderer):
  """C, like the CPU device, without OpenMP. A new C-like language overrides the class attributes of
  CStyleLanguage (kernel_prefix, buffer_prefix, type_map, infix, ...) and the few render_* / code_for_* methods."""
  def __init__(self, device: str = "TOY"):
    # has_threads=False: no "parallel" loops; supports_float16=False: half math is done in float and rounded back;
    # supports_vectors=True (set by ClangRenderer): the lowerer may hand us float vectors (dtype.count > 1).
    super().__init__(device, threads=False, supports_float16=False)
  def prepare(self, sink: UOp) -> UOp:
    # Called by codegen.get_program between lowering and linearizing: our rules first, then the C ones.
    return super().prepare(graph_rewrite(sink, pm_toy))
  # render(name, uops) -> str is inherited: one C function named `name`, taking the buffers (DEFINE_GLOBAL, in arg
  # order) and then the int variables (DEFINE_VAR, sorted by name). The Program below calls it in that order.

# ***** 3. Compiler: source -> bytes *****

class ToyCompiler(Compiler):
  """compile(src) returns the bytes the Program loads. Compiler.compile_cached stores them in the on-disk cache
  under a hash of (cachekey, src), so cachekey must change whenever the bytes would (compiler version, flags,
  target)."""
  def __init__(self) -> None:
    self.cc = ClangCompiler(find_c_compiler())  # raises DeviceUnavailable with a hint when there is no compiler
    self.cachekey = f"toy:{self.cc.cachekey}"   # set cachekey = None to never cache (e.g. while debugging)
  def compile(self, src: str) -> bytes:
    # Raise an error that includes the source when compiling fails: it is the first thing anyone needs to see.
    return self.cc.compile(src)

# ***** 4. Program: load the bytes once, launch many times *****

class ToyProgram:
  """Built once per kernel as runtime(name, lib); then called as prg(*buffer_handles, vals=(int, ...))."""
  def __init__(self, name: str, lib: bytes):
    self.name = name
    self.prg = CPUProgram(name, lib)  # a GPU runtime would load a module and look up the kernel function here
  def __call__(self, *bufs: bytearray, vals: tuple[int, ...] = ()) -> None:
    # bufs: the allocator's handles, in the kernel's argument order; vals: the symbolic variables' values.
    # Launch and return; a device with async launches returns at once and waits in synchronize/copyout.
    addrs = [ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b)) for b in bufs]
    self.prg(*addrs, vals=vals)

# ***** the device: the four parts under one name *****

class ToyDevice(Compiled):
  def __init__(self, device: str):
    # `device` is the canonical name ("TOY", "TOY:1"); the number picks one of several physical devices.
    # Raise DeviceUnavailable (with what to install) when the device can't start: Device.available reports it.
    super().__init__(device, ToyAllocator(), ToyRenderer(device), ToyCompiler(), ToyProgram)
  def synchronize(self) -> None:
    # Wait for every launched kernel. TOY runs kernels synchronously, so there is nothing to wait for.
    pass

def register() -> None:
  """Make "TOY" a device name. A device inside attograd needs no call: attograd/runtime/ops_toy.py with a class
  ToyDevice is found by name (and "TOY" added to ALL_DEVICES in attograd/device.py)."""
  Device.register("TOY", ToyDevice)
