"""The LLVM device: kernels rendered to LLVM IR, optimized and compiled to machine code in-process, no C compiler.

Two ways to reach LLVM, tried in order: the `llvmlite` wheel (`pip install attograd[llvm]`), else the system's
libLLVM (15 or newer) through its C API with ctypes. Either way the object file is cached on disk and loaded by an
in-process JIT linker (llvmlite's MCJIT, or ORC's LLJIT), so neither gcc nor ld ever runs. Memory is host memory,
shared with the CPU device's allocator. Set LLVM_BACKEND=llvmlite or LLVM_BACKEND=libllvm to force one, and
LLVM_THREADS=n to cap the threads a parallel kernel uses (default: the cores this process may run on).
"""
from __future__ import annotations
import ctypes, ctypes.util, glob, os, platform, struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from attograd.device import Compiled, Compiler, DeviceUnavailable, var_ctypes
from attograd.dtype import DType
from attograd.renderer.llvmir import LLVMRenderer
from attograd.runtime.ops_cpu import MallocAllocator

OPT_PIPELINE = "default<O3>"

def _runtime_library() -> str | None:
  """Code generation may call helper routines (__truncdfhf2, __extendhfsf2 on CPUs without F16C, ...); on Linux they
  live in libgcc_s, a runtime library that is installed without any compiler. Loaded globally so the JIT finds them."""
  path = ctypes.util.find_library("gcc_s")
  if path is None: return None
  try: ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
  except OSError: return None
  return path

def elf_undefined_symbols(obj: bytes) -> list[str]:
  """Names an ELF64 object file uses but does not define ([] for other formats): what the JIT must find elsewhere."""
  if obj[:5] != b"\x7fELF\x02": return []
  shoff, shentsize, shnum = struct.unpack_from("<Q", obj, 0x28)[0], *struct.unpack_from("<HH", obj, 0x3A)
  sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
  out = []
  for _, sh_type, _, _, off, size, link, _, _, entsize in sections:
    if sh_type != 2: continue  # SHT_SYMTAB
    stroff = sections[link][4]
    for at in range(off, off + size, entsize):
      name, _, _, shndx = struct.unpack_from("<IBBH", obj, at)
      if shndx == 0 and name: out.append(obj[stroff + name:obj.index(b"\0", stroff + name)].decode())
  return out

# The large code model: a kernel reaches its constants and the library functions it calls through 64-bit addresses.
# The JIT maps a kernel's code and its read-only data (constant pools) separately, wherever the process has room; the
# small model's 32-bit offsets between them overflow once the two land more than 2 GB apart, which a long-running
# process with a few GB of mappings meets sooner or later. MCJIT then aborts the process on an assertion ("isInt<32>
# (RealOffset)" in RuntimeDyldELF: a test-suite worker died that way in a kernel calling pow). It costs a movabs per
# constant, hoisted out of the loops.
CODE_MODEL = "large"

# ***** llvmlite *****

class _Llvmlite:
  """llvmlite: parse, run the O3 pipeline, emit an object; MCJIT links it into this process."""
  name = "llvmlite"
  def __init__(self) -> None:
    import llvmlite.binding as llvm  # type: ignore[import-untyped]
    self.llvm = llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    self.triple = llvm.get_process_triple()
    cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    if (rt := _runtime_library()) is not None: llvm.load_library_permanently(rt)
    self._target_machine = lambda: llvm.Target.from_triple(self.triple).create_target_machine(
      cpu=cpu, features=features, opt=3, reloc="static", codemodel=CODE_MODEL)
    self.tm = self._target_machine()
    self.ident = f"llvmlite:{llvm.llvm_version_info}:{self.triple}:{cpu}:{features}:{CODE_MODEL}"
    self.fast_fma = _fast_fma(features)
  def compile(self, src: str) -> bytes:
    llvm = self.llvm
    mod = llvm.parse_assembly(src)
    mod.triple, mod.data_layout = self.triple, str(self.tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(self.tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return self.tm.emit_object(mod)
  def load(self, obj: bytes, names: list[str]) -> tuple[list[int], Any]:
    llvm = self.llvm
    empty = llvm.parse_assembly("")
    empty.triple = self.triple
    # MCJIT crashes on a symbol it cannot resolve, so check first (e.g. a compiler-rt helper no library provides)
    process = ctypes.CDLL(None)  # dlsym over the global scope: the program, libm, libgcc_s, ...
    missing = [n for n in elf_undefined_symbols(obj) if not llvm.address_of_symbol(n) and not hasattr(process, n)]
    if missing:
      raise RuntimeError(f"LLVM: kernel {names[0]} calls {missing}, which no library loaded in this process defines")
    # an engine takes ownership of its target machine and deletes it with itself: each engine gets its own
    engine = llvm.create_mcjit_compiler(empty, self._target_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    addrs = [engine.get_global_value_address(n) for n in names]
    if not all(addrs): raise RuntimeError(f"LLVM: {names} not all found in the kernel's object file")
    return addrs, engine  # the engine owns the code: keep it alive as long as the function (freed with it)

# ***** the system libLLVM through the C API *****

def _find_libllvm() -> str | None:
  if (path := os.getenv("LIBLLVM")): return path
  found = []
  dirs = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"]
  for d in dirs + sorted(glob.glob("/usr/lib/llvm-*/lib")):
    found += glob.glob(os.path.join(d, "libLLVM-[0-9]*.so")) + glob.glob(os.path.join(d, "libLLVM.so.[0-9]*"))
  def version(p: str) -> int:
    digits = "".join(c if c.isdigit() else " " for c in os.path.basename(p)).split()
    return int(digits[0]) if digits else 0
  found = [p for p in found if version(p) >= 15]  # opaque pointers (`ptr`) are the default from LLVM 15
  return max(found, key=version) if found else None

class _LibLLVM:
  """libLLVM's C API: LLVMRunPasses for O3, LLVMTargetMachineEmitToMemoryBuffer for the object, ORC LLJIT to link it."""
  name = "libllvm"
  def __init__(self) -> None:
    path = _find_libllvm()
    if path is None: raise OSError("no libLLVM 15 or newer found (set LIBLLVM=/path/to/libLLVM.so)")
    self.lib = lib = ctypes.CDLL(path)
    vp, cp = ctypes.c_void_p, ctypes.c_char_p
    sigs: dict[str, tuple[Any, list[Any]]] = {
      "LLVMContextCreate": (vp, []), "LLVMCreateMemoryBufferWithMemoryRangeCopy": (vp, [cp, ctypes.c_size_t, cp]),
      "LLVMParseIRInContext": (ctypes.c_int, [vp, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)]),
      "LLVMGetDefaultTargetTriple": (vp, []), "LLVMGetHostCPUName": (vp, []), "LLVMGetHostCPUFeatures": (vp, []),
      "LLVMNormalizeTargetTriple": (vp, [cp]),
      "LLVMGetTargetFromTriple": (ctypes.c_int, [cp, ctypes.POINTER(vp), ctypes.POINTER(vp)]),
      "LLVMCreateTargetMachine": (vp, [vp, cp, cp, cp, ctypes.c_int, ctypes.c_int, ctypes.c_int]),
      "LLVMCreateTargetDataLayout": (vp, [vp]), "LLVMSetModuleDataLayout": (None, [vp, vp]),
      "LLVMSetTarget": (None, [vp, cp]),
      "LLVMCreatePassBuilderOptions": (vp, []), "LLVMDisposePassBuilderOptions": (None, [vp]),
      "LLVMRunPasses": (vp, [vp, cp, vp, vp]), "LLVMGetErrorMessage": (vp, [vp]),
      "LLVMDisposeErrorMessage": (None, [vp]),
      "LLVMVerifyModule": (ctypes.c_int, [vp, ctypes.c_int, ctypes.POINTER(vp)]),
      "LLVMTargetMachineEmitToMemoryBuffer": (ctypes.c_int, [vp, vp, ctypes.c_int, ctypes.POINTER(vp),
                                                             ctypes.POINTER(vp)]),
      "LLVMGetBufferStart": (vp, [vp]), "LLVMGetBufferSize": (ctypes.c_size_t, [vp]),
      "LLVMDisposeMemoryBuffer": (None, [vp]),
      "LLVMDisposeModule": (None, [vp]), "LLVMDisposeMessage": (None, [vp]),
      "LLVMOrcCreateLLJITBuilder": (vp, []), "LLVMOrcCreateLLJIT": (vp, [ctypes.POINTER(vp), vp]),
      "LLVMOrcLLJITGetMainJITDylib": (vp, [vp]), "LLVMOrcLLJITGetGlobalPrefix": (ctypes.c_char, [vp]),
      "LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess": (vp, [ctypes.POINTER(vp), ctypes.c_char, vp, vp]),
      "LLVMOrcJITDylibAddGenerator": (None, [vp, vp]), "LLVMOrcLLJITAddObjectFile": (vp, [vp, vp, vp]),
      "LLVMOrcLLJITLookup": (vp, [vp, ctypes.POINTER(ctypes.c_uint64), cp]), "LLVMOrcDisposeLLJIT": (vp, [vp])}
    for fn, (res, args) in sigs.items():
      f = getattr(lib, fn)
      f.restype, f.argtypes = res, args
    arch = {"x86_64": "X86", "AMD64": "X86", "aarch64": "AArch64", "arm64": "AArch64"}.get(platform.machine())
    if arch is None: raise OSError(f"no LLVM target known for machine {platform.machine()}")
    for part in ("TargetInfo", "Target", "TargetMC", "AsmPrinter"): getattr(lib, f"LLVMInitialize{arch}{part}")()
    self.triple = self._take(lib.LLVMNormalizeTargetTriple(self._take(lib.LLVMGetDefaultTargetTriple()).encode()))
    cpu, features = self._take(lib.LLVMGetHostCPUName()), self._take(lib.LLVMGetHostCPUFeatures())
    target, err = ctypes.c_void_p(), ctypes.c_void_p()
    if lib.LLVMGetTargetFromTriple(self.triple.encode(), ctypes.byref(target), ctypes.byref(err)):
      raise OSError(f"libLLVM has no target for {self.triple}: {self._take(err.value)}")
    # 3 = CodeGenLevelAggressive, 1 = RelocStatic, 6 = CodeModelLarge (see CODE_MODEL)
    self.tm = lib.LLVMCreateTargetMachine(target, self.triple.encode(), cpu.encode(), features.encode(), 3, 1, 6)
    self.ctx = lib.LLVMContextCreate()
    _runtime_library()
    self.ident = f"libllvm:{os.path.basename(path)}:{self.triple}:{cpu}:{features}:{CODE_MODEL}"
    self.fast_fma = _fast_fma(features)
  def _take(self, p: int | None) -> str:
    """An LLVM-owned message as a str; the message is freed."""
    if not p: return ""
    s = ctypes.string_at(p).decode(errors="replace")
    self.lib.LLVMDisposeMessage(p)
    return s
  def _error(self, err: int | None, what: str) -> None:
    if not err: return
    msg = self.lib.LLVMGetErrorMessage(err)
    text = ctypes.string_at(msg).decode(errors="replace")
    self.lib.LLVMDisposeErrorMessage(msg)
    raise RuntimeError(f"LLVM: {what} failed: {text}")
  def compile(self, src: str) -> bytes:
    lib = self.lib
    data = src.encode()
    buf = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(data, len(data), b"kernel")
    mod, msg = ctypes.c_void_p(), ctypes.c_void_p()
    if lib.LLVMParseIRInContext(self.ctx, buf, ctypes.byref(mod), ctypes.byref(msg)):  # takes the buffer
      raise RuntimeError(f"LLVM: the IR does not parse: {self._take(msg.value)}\n--- source ---\n{src}")
    try:
      if lib.LLVMVerifyModule(mod, 2, ctypes.byref(msg)):  # 2 = LLVMReturnStatusAction
        raise RuntimeError(f"LLVM: the IR is invalid: {self._take(msg.value)}\n--- source ---\n{src}")
      self._take(msg.value)
      lib.LLVMSetTarget(mod, self.triple.encode())
      lib.LLVMSetModuleDataLayout(mod, lib.LLVMCreateTargetDataLayout(self.tm))
      opts = lib.LLVMCreatePassBuilderOptions()
      try: self._error(lib.LLVMRunPasses(mod, OPT_PIPELINE.encode(), self.tm, opts), "the O3 pipeline")
      finally: lib.LLVMDisposePassBuilderOptions(opts)
      out = ctypes.c_void_p()
      if lib.LLVMTargetMachineEmitToMemoryBuffer(self.tm, mod, 1, ctypes.byref(msg), ctypes.byref(out)):  # 1 = object
        raise RuntimeError(f"LLVM: code generation failed: {self._take(msg.value)}")
      obj = ctypes.string_at(lib.LLVMGetBufferStart(out), lib.LLVMGetBufferSize(out))
      lib.LLVMDisposeMemoryBuffer(out)
      return obj
    finally: lib.LLVMDisposeModule(mod)
  def load(self, obj: bytes, names: list[str]) -> tuple[list[int], Any]:
    lib = self.lib
    jit = ctypes.c_void_p()
    self._error(lib.LLVMOrcCreateLLJIT(ctypes.byref(jit), lib.LLVMOrcCreateLLJITBuilder()), "creating a JIT")
    jd, gen = lib.LLVMOrcLLJITGetMainJITDylib(jit), ctypes.c_void_p()
    # libm's exp2f, sinf, ... resolve to this process's own symbols
    prefix = lib.LLVMOrcLLJITGetGlobalPrefix(jit)
    self._error(lib.LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(ctypes.byref(gen), prefix, None, None),
                "a symbol generator")
    lib.LLVMOrcJITDylibAddGenerator(jd, gen)
    buf = lib.LLVMCreateMemoryBufferWithMemoryRangeCopy(obj, len(obj), names[0].encode())
    self._error(lib.LLVMOrcLLJITAddObjectFile(jit, jd, buf), "adding the object file")
    addrs = []
    for n in names:
      addr = ctypes.c_uint64()
      self._error(lib.LLVMOrcLLJITLookup(jit, ctypes.byref(addr), n.encode()), f"finding {n}")
      addrs.append(addr.value)
    # the JIT owns the code: it lives as long as the returned keepalive, then its code pages are unmapped
    return addrs, _Disposer(lib.LLVMOrcDisposeLLJIT, jit)

class _Disposer:
  """Calls `dispose(obj)` when garbage collected."""
  def __init__(self, dispose: Any, obj: Any): self.dispose, self.obj = dispose, obj
  def __del__(self) -> None:
    try: self.dispose(self.obj)
    except Exception: pass

def _open_backend() -> Any:
  """llvmlite if it imports, else libLLVM; the error names what each attempt lacked."""
  want = os.getenv("LLVM_BACKEND", "").lower()
  if want not in ("", "llvmlite", "libllvm"):
    raise DeviceUnavailable(f"LLVM: LLVM_BACKEND={want!r}; use 'llvmlite' or 'libllvm'")
  reasons = []
  for cls in (_Llvmlite, _LibLLVM):
    if want and cls.name != want: continue
    try: return cls()
    except (ImportError, OSError, AttributeError) as e: reasons.append(f"{cls.name}: {e}")
  raise DeviceUnavailable("LLVM: no LLVM to compile with (" + "; ".join(reasons) + "). Install it with "
                          "`pip install llvmlite` (or `pip install attograd[llvm]`), "
                          "or a system libLLVM 15+ (`apt-get install libllvm15`).")

# ***** the device *****

class LLVMCompiler(Compiler):
  def __init__(self, backend: Any):
    self.backend = backend
    self.cachekey = f"llvm:{backend.ident}:{OPT_PIPELINE}"
  def compile(self, src: str) -> bytes:
    _bury()
    return self.backend.compile(src)

# Programs let go of their JIT (its code and module) here, not in their own __del__: the garbage collector may run that
# on any thread (a compile thread, a kernel share), while this thread uses LLVM's context, which is not thread-safe.
# Compiles and loads happen on one thread at a time (LLVMCompiler.threadsafe is False); each disposes the dead first.
_graveyard: list[Any] = []
def _bury() -> None:
  while _graveyard: _graveyard.pop()  # the last reference: the engine (or LLJIT) is disposed here

def _cores() -> int:
  # read on every new kernel (not helpers.getenv, which caches): tests and users can change it between kernels
  want = os.getenv("LLVM_THREADS", "")
  if want:
    if not want.isdigit() or int(want) < 1: raise ValueError(f"LLVM_THREADS={want!r} should be a positive integer")
    return int(want)
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

_pool: ThreadPoolExecutor | None = None
def _thread_pool() -> ThreadPoolExecutor:
  global _pool
  if _pool is None: _pool = ThreadPoolExecutor(max_workers=max(_cores() - 1, 1), thread_name_prefix="attograd-llvm")
  return _pool

class LLVMProgram:
  """A kernel linked into this process; call it with buffer addresses and variable values.
  A kernel with a parallel loop runs as one call per core, each taking a share of that loop; ctypes releases the
  GIL during each call, so the shares run at the same time (the caller's thread runs share 0)."""
  # the Variables' dtypes, set by the runner where one is int64 (passed as 64 bits); () means all int32
  var_dtypes: tuple[DType, ...] = ()
  def __init__(self, name: str, lib: bytes, backend: Any):
    self.name = name
    _bury()
    (self.addr, split_addr), self._keepalive = backend.load(lib, [name, f"{name}_parallel"])
    split = ctypes.c_int32.from_address(split_addr).value  # 0: no parallel loop, -1: its size is a variable
    self.threads = 1 if split == 0 else (_cores() if split < 0 else min(_cores(), split))
    # not named `fxn`: callers (TinyJit) call that directly, but this function takes (share, shares) after the args
    self._cfn: Any = None
  def __call__(self, *bufs: int, vals: tuple[int, ...] = ()) -> None:
    if self._cfn is None:
      args = [ctypes.c_void_p] * len(bufs) + var_ctypes(self.var_dtypes, len(vals)) + [ctypes.c_int] * 2
      self._cfn = ctypes.CFUNCTYPE(None, *args)(self.addr)
    n = self.threads
    if n == 1: return self._cfn(*bufs, *vals, 0, 1)
    rest = [_thread_pool().submit(self._cfn, *bufs, *vals, i, n) for i in range(1, n)]  # type: ignore[call-arg]
    self._cfn(*bufs, *vals, 0, n)
    for r in rest: r.result()
  # the graveyard is bound here: at interpreter exit the module's globals are cleared while programs are still freed
  def __del__(self, _graves: list[Any] = _graveyard) -> None:
    if (keep := getattr(self, "_keepalive", None)) is not None: _graves.append(keep)

def _fast_fma(features: str) -> bool:
  """Whether llvm.fma is an instruction on this host (x86 needs the FMA extension; ARM64 always has one)."""
  return "+fma" in features.split(",") if platform.machine() in ("x86_64", "AMD64") else True

class LlvmDevice(Compiled):
  def __init__(self, device: str):
    backend = _open_backend()
    super().__init__(device, MallocAllocator(), LLVMRenderer(device, fma=backend.fast_fma), LLVMCompiler(backend),
                     lambda name, lib: LLVMProgram(name, lib, backend))
