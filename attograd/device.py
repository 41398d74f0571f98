"""The device registry ("CPU", "PYTHON", "CL:1", ...), Buffer, and the Allocator/Compiler/Program contract every
runtime fills."""
from __future__ import annotations
import ctypes, hashlib, importlib, os, sys, threading
from typing import Any, Callable
from attograd.dtype import DType
from attograd.helpers import CCACHE, DEV, GlobalCounters, diskcache_get, diskcache_put, getenv
# the on-disk cache lives in helpers (tinygrad's diskcache_get/put are built on it); its users import it from here
from attograd.helpers import disk_cache_get, disk_cache_put  # noqa: F401

ALL_DEVICES = ["CPU", "PYTHON", "CL", "CUDA", "LLVM", "METAL", "DISK", "NULL"]
_ALIASES = {"CLANG": "CPU", "OPENCL": "CL", "NV": "CUDA"}
_GPU_ORDER = ["CUDA", "CL"]  # "GPU" names the first of these that starts here

class DeviceUnavailable(RuntimeError):
  """A backend could not start on this machine; the message says what is missing."""

class UnknownDeviceError(ValueError, ModuleNotFoundError):
  """A device name attograd doesn't know. A ValueError (a bad argument); also a ModuleNotFoundError, which tinygrad
  raises there (it looks for the device's runtime module), so code ported from tinygrad that catches that works."""

class _Device:
  def __init__(self) -> None:
    self._opened: dict[str, Compiled] = {}
    self._default: str | None = None
    self._dev_at_start = DEV.string  # DEV from the environment; a different DEV.value was set with Context
    self._registered: dict[str, Callable[[str], Compiled]] = {}
    self._gpu: str | None = None
  def register(self, name: str, make: Callable[[str], Compiled]) -> None:
    """Add a device that lives outside attograd: `make("NAME:1")` builds it (docs/adding-an-accelerator.md)."""
    base = name.upper()
    if not base.isidentifier(): raise ValueError(f"device name must be a plain word like 'TOY', got {name!r}")
    if base in ALL_DEVICES or base in _ALIASES: raise ValueError(f"device {base} is already registered")
    ALL_DEVICES.append(base)
    self._registered[base] = make
  def canonicalize(self, device: str | tuple[str, ...] | None) -> Any:  # a name, or a tuple of names for a tuple
    if device is None: return self.DEFAULT
    if device.__class__ in (tuple, list):
      # a tuple of one device is that device: a tensor split over one device is a tensor on it (as tinygrad accepts)
      if len(device) == 1: return self.canonicalize(device[0])  # type: ignore[index]
      return tuple(self.canonicalize(d) for d in device)  # type: ignore[union-attr]
    if not isinstance(device, str): raise TypeError(f"device must be a string like 'CPU' or 'PYTHON', got {device!r}")
    base, _, num = device.partition(":")
    base = _ALIASES.get(base.upper(), base.upper())
    if base == "GPU": base = self.best_gpu()
    if base not in ALL_DEVICES: raise UnknownDeviceError(f"unknown device {device!r}; known devices are {ALL_DEVICES}")
    # "DISK:path" names one file (tinygrad's spelling, any case of "disk"); the path is kept as written
    if base == "DISK" and num and not num.isdigit(): return f"DISK:{num}"
    if num and not num.isdigit(): raise ValueError(f"bad device number in {device!r}; write it like '{base}:1'")
    return base if num in ("", "0") or base == "DISK" else f"{base}:{num}"
  def __getitem__(self, device: str) -> Compiled:
    # a canonical name already opened (every allocation's lookup): no parsing
    if device.__class__ is str and (d := self._opened.get(device)) is not None: return d
    name = self.canonicalize(device)
    if (d := self._opened.get(name)) is not None: return d
    base = name.split(":")[0]
    if (make := self._registered.get(base)) is not None:
      self._opened[name] = dev = make(name)
      return dev
    try: mod = importlib.import_module(f"attograd.runtime.ops_{base.lower()}")
    except ModuleNotFoundError as e:
      if e.name is not None and e.name.startswith("attograd.runtime.ops_"):
        raise DeviceUnavailable(f"device {name} has no runtime in this version of attograd") from None
      raise
    dev = getattr(mod, f"{base.capitalize() if base != 'CPU' else 'CPU'}Device")(name)
    self._opened[name] = dev
    return dev
  def _dev_device(self, dev: str) -> str | None:
    """The device a DEV string names: its first target (';' separates them), without an interface ("USB+"); a part
    after ':' is attograd's device number if it is one, else tinygrad's renderer or arch, which attograd ignores.
    None when it names no device (":LLVM")."""
    base, _, rest = dev.split(";")[0].rpartition("+")[2].partition(":")
    if not base: return None
    num = rest.partition(":")[0]
    return self.canonicalize(f"{base}:{num}" if num.isdigit() else base)
  @property
  def DEFAULT(self) -> str:
    # a DEV set with Context (not the environment's) is the default inside its block
    if (dev := DEV.string) != self._dev_at_start and dev and (name := self._dev_device(dev)) is not None: return name
    if self._default is None:
      if (env := os.getenv("DEV")) and (name := self._dev_device(env)) is not None: self._default = name
      else:
        flags = [d for d in ALL_DEVICES + list(_ALIASES) + ["GPU"] if d != "DISK" and getenv(d, 0) == 1]
        self._default = self.canonicalize(flags[0]) if flags else "CPU"
    return self._default
  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None: self._default = self.canonicalize(name)
  @property
  def default(self) -> Any:
    """The default device's object (tinygrad's name): Device[Device.DEFAULT]."""
    return self[self.DEFAULT]
  def best_gpu(self) -> str:
    """The device "GPU" stands for: CUDA, else CL; DeviceUnavailable listing each one's reason when neither starts."""
    if self._gpu is None:
      why = []
      for name in _GPU_ORDER:
        ok, reason = self.available(name)
        if ok:
          self._gpu = name
          break
        why.append(reason)
      else: raise DeviceUnavailable("GPU: no GPU-style device can start here. " + " ".join(why))
    return self._gpu
  def available(self, name: str) -> tuple[bool, str]:
    """(True, "") if `name` can start here, else (False, the reason)."""
    try:
      self[name]
      return True, ""
    except DeviceUnavailable as e: return False, str(e)

Device = _Device()

def is_dtype_supported(dtype: DType, device: str | None = None) -> bool:
  """Whether tensors of `dtype` can be computed with on `device` (Device.DEFAULT if None): the dtype is in the
  device's `renderer.supported_dtypes()`. Opens the device, so a device that can't start raises DeviceUnavailable.

  >>> from attograd import dtypes
  >>> is_dtype_supported(dtypes.float32, "CPU")
  True
  """
  if not isinstance(dtype, DType):
    raise TypeError(f"is_dtype_supported: dtype must be a DType like dtypes.float16, got {dtype!r}")
  return dtype.scalar() in Device[Device.canonicalize(device)].renderer.supported_dtypes()

# ***** the contract a runtime fills *****

class Allocator:
  """Allocates device memory and copies bytes in and out of it."""
  def alloc(self, nbytes: int) -> Any: raise NotImplementedError("subclass must implement alloc")
  def free(self, buf: Any, nbytes: int) -> None: pass
  def copyin(self, dest: Any, src: memoryview) -> None: raise NotImplementedError("subclass must implement copyin")
  def copyout(self, dest: memoryview, src: Any) -> None: raise NotImplementedError("subclass must implement copyout")
  def offset_handle(self, buf: Any, nbytes: int, offset: int) -> Any:
    """A handle to `nbytes` of `buf`'s memory from byte `offset` on (a Buffer view's), sharing it."""
    raise RuntimeError(f"{type(self).__name__}: this device has no views into a buffer's memory (Buffer.view)")
  def free_view(self, handle: Any) -> None:
    """Let go of a handle offset_handle made (the memory stays its base's)."""

class LRUAllocator(Allocator):
  """Keeps freed buffers by size and hands them out again: a training step reuses last step's memory
  instead of asking the OS for fresh pages (which must be faulted in on first touch)."""
  def __init__(self, max_cached_bytes: int = 1 << 30):
    self.cache: dict[int, list[Any]] = {}
    self.cached_bytes, self.max_cached_bytes = 0, max_cached_bytes
  def alloc(self, nbytes: int) -> Any:
    if (lst := self.cache.get(nbytes)):
      self.cached_bytes -= nbytes
      buf = lst.pop()
      if not lst: del self.cache[nbytes]
      return buf
    try: return self._alloc(nbytes)
    except MemoryError:
      self.free_cache()
      return self._alloc(nbytes)
  def free(self, buf: Any, nbytes: int) -> None:
    if nbytes > self.max_cached_bytes or getenv("LRU", 1) == 0: return self._free(buf, nbytes)
    # the sizes freed longest ago go first when the cache is full: a full cache that refused new entries kept
    # buffers of sizes nobody asks for any more (an earlier workload's), and every step of the current one then
    # got fresh pages from the OS and faulted them in (MNIST training after the other benchmarks: ~1.5x slower)
    lst = self.cache.pop(nbytes, [])
    lst.append(buf)
    self.cache[nbytes] = lst  # now the most recent size
    self.cached_bytes += nbytes
    while self.cached_bytes > self.max_cached_bytes:
      old_n = next(iter(self.cache))
      old = self.cache[old_n]
      self._free(old.pop(0), old_n)
      self.cached_bytes -= old_n
      if not old: del self.cache[old_n]
  def free_cache(self) -> None:
    for nbytes, lst in self.cache.items():
      for b in lst: self._free(b, nbytes)
    self.cache.clear()
    self.cached_bytes = 0
  def _alloc(self, nbytes: int) -> Any: raise NotImplementedError("subclass must implement _alloc")
  def _free(self, buf: Any, nbytes: int) -> None: pass

# A kernel built as part of a batch (Compiler.compile_batch) is cached as a reference to the batch's binary, which is
# stored once under the "batch" table by its own hash, and the kernel's symbol in it. Kernels of one shape share a name
# (E_64), so in a batch each function is named by its source's hash too; the binary handed to the runtime then ends in
# that symbol (with_symbol), which the runtime uses instead of the kernel's name
_BATCH_REF, _SYMBOL = b"\0attograd-batch\0", b"\0attograd-symbol\0"

def batch_symbol(name: str, src: str) -> str: return f"{name}_{hashlib.sha256(src.encode()).hexdigest()[:16]}"
def with_symbol(lib: bytes, symbol: str) -> bytes: return lib + _SYMBOL + symbol.encode()
def split_symbol(lib: bytes) -> tuple[bytes, str | None]:
  """(the binary, the symbol to call) of what with_symbol made; (lib, None) for a kernel built alone."""
  if (i := lib.rfind(_SYMBOL, max(0, len(lib) - 512))) < 0: return lib, None
  return lib[:i], lib[i + len(_SYMBOL):].decode()

class Compiler:
  """Turns source text into a loadable binary, cached on disk by a hash of source and flags."""
  cachekey: str | None = None  # None: don't cache on disk
  threadsafe = False  # True: compile() may run in several threads at once (the engine builds kernels in parallel)
  # optional, for compilers that are costly to start: compile_batch([(name, src), ...]) is one binary holding every
  # kernel, each under batch_symbol(name, src), built exactly as each alone would be (one compiler run, not one each)
  compile_batch: Callable[[list[tuple[str, str]]], bytes] | None = None
  # optional: a compiler of the same target that builds faster and optimizes less (CPU: -O1), for kernels with so
  # little work that they run in microseconds either way; the engine (engine/realize.py) picks it per kernel, and its
  # programs are final (cached on disk under its own key), not a tier replaced later
  light: Compiler | None = None
  _tinygrad_table = False  # a cachekey given to __init__: the binaries live in tinygrad's diskcache table of that name
  def __init__(self, cachekey: str | None = None):
    """tinygrad's form: `Compiler(cachekey)` caches each binary under the source in the diskcache table `cachekey`
    (diskcache_get(cachekey, src) reads it), while CCACHE is on. attograd's compilers set cachekey on the class."""
    if cachekey is not None: self.cachekey, self._tinygrad_table = cachekey, True
  def compile(self, src: str) -> bytes: raise NotImplementedError("subclass must implement compile")
  def batchable(self, src: str) -> bool:
    """Whether this kernel may go into a batch (compile_batch), where the compiler has one."""
    return True
  def _disk_key(self, src: str) -> str | None:
    if self.cachekey is None or getenv("DISABLE_COMPILER_CACHE") or not CCACHE.value: return None
    return hashlib.sha256(f"{self.cachekey}\0{src}".encode()).hexdigest()
  def cached(self, src: str) -> bytes | None:
    """The binary from the disk cache, or None (not built before, or no caching): a lookup that never compiles. A
    kernel built in a batch gets the batch's binary (the kernel is in it under its own name)."""
    if (key := self._disk_key(src)) is None or (lib := disk_cache_get("compile", key)) is None: return None
    if not lib.startswith(_BATCH_REF): return lib
    bkey, _, sym = lib[len(_BATCH_REF):].decode().partition("\0")
    return None if (blib := disk_cache_get("batch", bkey)) is None else with_symbol(blib, sym)  # None: rebuilt
  def compile_cached(self, src: str) -> bytes:
    if (key := self._disk_key(src)) is None: return self.compile(src)
    if self._tinygrad_table:
      assert self.cachekey is not None
      if (got := diskcache_get(self.cachekey, src)) is not None: return got
      return diskcache_put(self.cachekey, src, self.compile(src))
    if (lib := self.cached(src)) is not None: return lib
    lib = self.compile(src)
    disk_cache_put("compile", key, lib)
    return lib
  def cache_batch(self, kernels: list[tuple[str, str]], lib: bytes) -> None:
    """Each kernel of [(name, src)] maps to `lib` (their batch's binary) in the disk cache: the binary is stored once,
    first, so a reader never finds a reference to a missing batch (one deleted later: the kernel is rebuilt alone)."""
    if not (keyed := [(k, name, src) for name, src in kernels if (k := self._disk_key(src)) is not None]): return
    bkey = hashlib.sha256(lib).hexdigest()
    disk_cache_put("batch", bkey, lib)
    for k, name, src in keyed: disk_cache_put("compile", k, _BATCH_REF + f"{bkey}\0{batch_symbol(name, src)}".encode())

class Compiled:
  """A device: its allocator, renderer, compiler and program class.
  A device may also offer `quick_build(kernels: list[tuple[name, src]]) -> list[program]`: a cheap build of several
  kernels at once (slower code), which the engine runs while the optimized builds are made in the background."""
  quick_build: Callable[[list[tuple[str, str]]], list[Any]] | None = None
  graph: Any = None  # tinygrad's graph runner class (CUDA graphs, ...): attograd's jit calls the kernels itself
  # a device whose programs C can call directly may offer call_batch(kernels) -> an object whose fxn(fns, args) runs
  # several kernels in one call, with batch_entry(program, source) -> (function address, address shifts, whether it
  # picks its thread count per call, when it wakes its threads) or None for a program it can't
  # (runtime/ops_cpu.py's CallBatch): a TinyJit replay calls runs of kernels that way
  call_batch: Callable[[list[Any]], Any] | None = None
  def batch_entry(self, prg: Any, src: str) -> tuple[int, dict[int, int], bool, Callable[..., int] | None] | None:
    return None
  def __init__(self, device: str, allocator: Allocator, renderer: Any, compiler: Compiler, runtime: Callable[..., Any]):
    self.device, self.allocator, self.renderer = device, allocator, renderer
    self.compiler, self.runtime = compiler, runtime
    if renderer is not None:  # (Renderer.compiler, tinygrad's name)
      from attograd.renderer import register_compiler
      register_compiler(renderer, compiler)
  def synchronize(self) -> None: pass
  def __repr__(self) -> str: return f"<{type(self).__name__} {self.device}>"

def var_ctypes(var_dtypes: tuple[DType, ...], n: int) -> list[Any]:
  """The ctypes of a kernel's `n` Variable arguments, in order: int64 where `var_dtypes` (a program's, set by its
  runner when a Variable's bounds pass int32's) says a 64-bit int, else int32."""
  return [ctypes.c_int64 if j < len(var_dtypes) and var_dtypes[j].itemsize == 8 else ctypes.c_int32 for j in range(n)]

def host_bytes(mv: memoryview) -> ctypes.Array:
  """A ctypes view of host bytes to copy from, without a copy (a private copy only when the memoryview is read-only)."""
  if mv.readonly: return ctypes.create_string_buffer(bytes(mv), mv.nbytes)
  return (ctypes.c_char * mv.nbytes).from_buffer(mv)

# ***** buffers *****

# The garbage collector runs on whichever thread allocates, attograd's compile threads too: a Buffer it finalizes
# there is not freed there (allocators are not thread-safe: two threads in one LRU cache handed a block out twice
# and corrupted an MNIST run; a GPU's free needs its context), but queued and freed by the next allocation
class _DeferFrees(threading.local):
  on = False  # the default for every thread, on the class: a getattr with a default costs an exception per miss
_defer = _DeferFrees()
_deferred_frees: list[tuple[Allocator, Any, int]] = []
def defer_frees_on_this_thread() -> None: _defer.on = True

def _free_deferred() -> None:
  while _deferred_frees:
    allocator, buf, nbytes = _deferred_frees.pop()
    allocator.free(buf, nbytes)

class Buffer:
  """`size` elements of `dtype` on `device`; memory is allocated on first use.

  A view (`buf.view(size, dtype, offset)`, tinygrad's sub-buffer) has no memory of its own: it is `nbytes` of its base
  buffer's memory from byte `offset` on, and writes through either show in the other. A view keeps its base alive;
  freeing the base (deallocate) takes the memory from under its views too, and reading a view whose memory was freed
  raises (a use after free), where a base buffer just gets new memory."""
  _base: Buffer | None = None  # a view's base buffer (None for a buffer with memory of its own)
  offset = 0  # a view's first byte in its base's memory
  options: Any = None  # tinygrad's BufferSpec (attograd's allocators take none)
  _views: Any = None  # a base's live views (a WeakSet, made with the first view): freeing the base frees their handles
  def __init__(self, device: str, size: int, dtype: DType, initial: bytes | memoryview | None = None,
               initial_value: bytes | memoryview | None = None, opaque: Any = None, options: Any = None,
               base: Buffer | None = None, offset: int = 0, preallocate: bool = False):
    # (initial_value: tinygrad's name of `initial`; opaque: the runtime's handle to memory this Buffer then owns)
    if size < 0: raise ValueError(f"Buffer size must be >= 0, got {size}")
    if initial is None: initial = initial_value
    self.device, self.size, self.dtype = device, size, dtype
    self._buf: Any = None
    self.version = 0  # bumped by every in-place write (assign), so stale memoized results are not reused
    if base is not None or offset or options is not None or opaque is not None:
      self._setup(base, offset, options, opaque)
    if initial is not None:
      self.allocate()
      mv = memoryview(initial)
      # a byte view of the right size (a new tensor's data): straight to the allocator, without copyin's call
      if mv.format == "B" and mv.ndim == 1 and mv.nbytes == size * dtype.itemsize:
        if mv.nbytes: self.allocator.copyin(self._buf, mv)
      else: self.copyin(mv)
    elif preallocate: self.allocate()
  def _setup(self, base: Buffer | None, offset: int, options: Any, opaque: Any) -> None:
    """The rarer constructor arguments, kept out of the common path (a new buffer is made on every realize)."""
    self.options = options
    if base is None:
      if offset: raise ValueError("Buffer: only a view (base=) has an offset")
      if opaque is not None: self._adopt(opaque)
      return
    if opaque is not None: raise ValueError("Buffer: a view has its base's memory, not an opaque handle of its own")
    if base._base is not None: raise ValueError("Buffer: a view's base must be a base buffer (view the view's base)")
    if base.device != self.device: raise ValueError(f"Buffer: a view on {self.device} of a base on {base.device}")
    if offset < 0 or offset + self.nbytes > base.nbytes:
      raise ValueError(f"Buffer: a view of bytes [{offset}, {offset + self.nbytes}) is outside its base's "
                       f"{base.nbytes} bytes")
    self.__class__ = BufferView  # (the view's methods: a base buffer's own carry no view checks)
    self._base, self.offset = base, offset
    if base._views is None:
      import weakref
      base._views = weakref.WeakSet()
    base._views.add(self)
  def _adopt(self, opaque: Any) -> None:
    """Take the runtime's handle `opaque` as this buffer's memory (freed with it)."""
    self.allocator = (Device._opened.get(self.device) or Device[self.device]).allocator
    self._buf = opaque
    GlobalCounters.mem_used += self.nbytes
    GlobalCounters.mem_used_per_device[self.device] += self.nbytes
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def base(self) -> Buffer: return self if self._base is None else self._base
  def is_allocated(self) -> bool:
    """Whether there is memory under this buffer (a view: under its base)."""
    return self._buf is not None
  def is_initialized(self) -> bool:
    """Whether this buffer itself holds a handle to allocated memory (a view may not yet, though its base does)."""
    return self._buf is not None
  @property
  def handle(self) -> Any:
    """The runtime's handle to this buffer's memory (a device pointer on CUDA, a host address on CPU, a mapping view
    on DISK), allocating it first: what a library outside attograd (NCCL, a custom kernel's launcher) is handed."""
    return self.allocate()._buf
  def ensure_allocated(self) -> Buffer:
    """tinygrad's name for allocate(), which already keeps the memory a buffer has."""
    return self.allocate()
  def allocate(self) -> Buffer:
    """Memory under this buffer, if it has none yet (a view: its base's, allocated first if need be). Returns self."""
    if self._buf is None:
      if _deferred_frees: _free_deferred()
      # (the open device without Device[]'s call: every new buffer comes here)
      self.allocator = (Device._opened.get(self.device) or Device[self.device]).allocator
      nbytes = self.size * self.dtype.itemsize  # (self.nbytes, without its call: every new buffer comes here)
      self._buf = self.allocator.alloc(nbytes or 1)
      GlobalCounters.mem_used += nbytes
      GlobalCounters.mem_used_per_device[self.device] += nbytes
    return self
  def __del__(self) -> None:
    if getattr(self, "_buf", None) is not None and sys is not None and not sys.is_finalizing():
      nbytes = self.size * self.dtype.itemsize
      GlobalCounters.mem_used -= nbytes
      GlobalCounters.mem_used_per_device[self.device] -= nbytes
      if _defer.on: _deferred_frees.append((self.allocator, self._buf, nbytes or 1))
      else: self.allocator.free(self._buf, nbytes or 1)
  def _drop_views(self) -> None:
    """Before the base's memory goes: its views' handles go first (they point into it)."""
    for v in list(self._views):
      if v._buf is not None: v.allocator.free_view(v._buf)
      v._buf, v._stale = None, True
  def deallocate(self) -> None:
    """Free the memory now (a jit's free_intermediates); the next use allocates it again, with undefined values.
    A view only lets go of its handle into its base's memory. Freeing a buffer that holds no memory raises
    AssertionError (as tinygrad's: a double free is a bug in the caller)."""
    if self._buf is None:
      raise AssertionError(f"deallocate: {self} holds no memory (never allocated, or freed already)")
    if self._views: self._drop_views()
    GlobalCounters.mem_used -= self.nbytes
    GlobalCounters.mem_used_per_device[self.device] -= self.nbytes
    self.allocator.free(self._buf, max(self.nbytes, 1))
    self._buf = None
  def view(self, size: int, dtype: DType, offset: int) -> Buffer:
    """`size` elements of `dtype` from byte `offset` of this buffer's memory, sharing it (a view of a view is a view
    of the same base). Allocated when used, or with ensure_allocated()."""
    return Buffer(self.device, size, dtype, base=self.base, offset=self.offset + offset)
  def copyin(self, mv: memoryview) -> Buffer:
    if mv.ndim != 1 or mv.format != "B": mv = mv.cast("B") if mv.nbytes else mv  # (a byte view already: as it is)
    if mv.nbytes != (nbytes := self.size * self.dtype.itemsize):
      raise ValueError(f"copyin: expected {nbytes} bytes for {self}, got {mv.nbytes}")
    if self._buf is None: self.allocate()
    if nbytes: self.allocator.copyin(self._buf, mv)
    return self
  def copyout(self, mv: memoryview) -> memoryview:
    mv = mv.cast("B") if mv.nbytes else mv
    if mv.nbytes != self.nbytes: raise ValueError(f"copyout: expected {self.nbytes} bytes for {self}, got {mv.nbytes}")
    self.allocate()
    if self.nbytes: self.allocator.copyout(mv, self._buf)
    return mv
  def copy_from(self, src: Buffer) -> Buffer:
    """Copy `src`'s bytes (any device) into this buffer's memory; both must be allocated. Returns self."""
    if self.nbytes != src.nbytes: raise AssertionError(f"copy_from: {src} has {src.nbytes} bytes, {self} {self.nbytes}")
    if not (self.is_initialized() and src.is_initialized()):
      raise AssertionError(f"copy_from: {src} -> {self} needs both allocated (ensure_allocated())")
    return self.copyin(src.as_memoryview())
  def as_bytes(self) -> bytes: return bytes(self.copyout(memoryview(bytearray(self.nbytes))))
  def numpy(self) -> Any:
    """A copy of the buffer's elements as a 1-D NumPy array (tinygrad's Buffer.numpy); a dtype NumPy lacks
    (bfloat16, fp8) is a TypeError saying so."""
    import numpy as np
    from attograd.dtype import to_np_dtype
    return np.frombuffer(self.as_bytes(), dtype=to_np_dtype(self.dtype)).copy()
  def as_memoryview(self, allow_zero_copy: bool = False, force_zero_copy: bool = False,
                    no_sync: bool = False) -> memoryview:
    """The bytes (tinygrad's name): a view of the memory itself where the device's buffers are host addresses (no
    copy; valid while this Buffer lives and sees later writes), else a copy (force_zero_copy: raise instead)."""
    self.allocate()
    if self.nbytes and hasattr(alloc := self.allocator, "as_memoryview"):
      return alloc.as_memoryview(self._buf, self.nbytes)
    if force_zero_copy: raise AssertionError(f"as_memoryview: {self.device}'s memory can't be read without a copy")
    return self.copyout(memoryview(bytearray(self.nbytes)))
  def __repr__(self) -> str: return f"<Buffer {self.device} {self.size} {self.dtype}>"

class BufferView(Buffer):
  """A Buffer made with base= (Buffer.view): `nbytes` of its base's memory from byte `offset`. Reading or writing it
  after it or its base was freed (or before it was allocated) raises AssertionError: that memory may be another's."""
  _base: Buffer
  _stale = False  # its handle went with its base's memory: its own deallocate is still allowed, once
  def is_allocated(self) -> bool: return self._base._buf is not None
  def is_initialized(self) -> bool: return self._buf is not None and self._base._buf is not None
  def allocate(self) -> Buffer:
    if self._buf is None:
      base = self._base.allocate()
      self.allocator, self._stale = base.allocator, False
      self._buf = self.allocator.offset_handle(base._buf, self.nbytes, self.offset)
    return self
  ensure_allocated = allocate
  def __del__(self) -> None:
    if getattr(self, "_buf", None) is not None and sys is not None and not sys.is_finalizing():
      self.allocator.free_view(self._buf)
  def deallocate(self) -> None:
    if self._buf is None:
      if not self._stale: raise AssertionError(f"deallocate: {self} holds no memory (never allocated, or freed)")
      self._stale = False
      return
    self.allocator.free_view(self._buf)
    self._buf = None
  def _check_live(self) -> None:
    if not self.is_initialized():
      raise AssertionError(f"{self}: a view used after its memory was freed (or before ensure_allocated())")
  def copyin(self, mv: memoryview) -> Buffer:
    self._check_live()
    return super().copyin(mv)
  def copyout(self, mv: memoryview) -> memoryview:
    self._check_live()
    return super().copyout(mv)
  def as_memoryview(self, allow_zero_copy: bool = False, force_zero_copy: bool = False,
                    no_sync: bool = False) -> memoryview:
    self._check_live()
    return super().as_memoryview(allow_zero_copy, force_zero_copy, no_sync)
  def __repr__(self) -> str: return f"<Buffer {self.device} {self.size} {self.dtype} offset:{self.offset}>"

class ExternalBuffer(Buffer):
  """Host memory owned by someone else (Tensor.from_blob), used in place on a device whose buffers are host
  addresses: never freed or counted here. Its owner may change it at any time, so its version changes on every look:
  a result computed from it is never reused, it is computed again from the memory as it is then."""
  def __init__(self, device: str, size: int, dtype: DType, address: int):
    self._looks = 0
    super().__init__(device, size, dtype)
    self.allocator, self._buf = Device[device].allocator, address
  @property  # type: ignore[override]
  def version(self) -> int:
    self._looks += 1
    return self._looks
  @version.setter
  def version(self, v: int) -> None: self._looks = max(self._looks, v)
  @staticmethod
  def supported(device: str) -> bool:
    """Whether `device`'s buffers are plain host addresses that a pointer can stand in for."""
    return bool(getattr(Device[device].allocator, "host_addresses", False))
  def allocate(self) -> Buffer: return self
  def deallocate(self) -> None: pass
  def __del__(self) -> None: pass
  def __repr__(self) -> str: return f"<ExternalBuffer {self.device} {self.size} {self.dtype} at {self._buf:#x}>"

def cpointer(addr: int) -> ctypes.c_void_p: return ctypes.c_void_p(addr)
