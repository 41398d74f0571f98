"""The CPU device: kernels rendered to C, compiled by the system's gcc or clang, loaded with ctypes, threaded with
OpenMP."""
from __future__ import annotations
import _ctypes, ctypes, ctypes.util, hashlib, os, re, shutil, subprocess, tempfile, weakref
from attograd.device import (Compiled, LRUAllocator, Compiler, DeviceUnavailable, batch_symbol, disk_cache_get,
                             disk_cache_put, host_bytes, split_symbol)
from attograd.renderer.cstyle import ClangRenderer

# OpenMP threads sleep between kernels instead of spinning: spinning workers steal the cores that other processes
# (and the Python thread launching the next kernel) need, which made busy machines up to 20x slower; on an idle
# machine the two measured the same here. Set before the first kernel loads libgomp; the environment still wins.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]

class MallocAllocator(LRUAllocator):
  """64-byte aligned host memory; a buffer is its address."""
  host_addresses = True  # so any host address can be a buffer (Tensor.from_blob's ExternalBuffer)
  def _alloc(self, nbytes: int) -> int:
    p = ctypes.c_void_p()
    if _libc.posix_memalign(ctypes.byref(p), 64, nbytes) != 0 or not p.value:
      raise MemoryError(f"CPU: could not allocate {nbytes} bytes")
    return p.value
  def _free(self, buf: int, nbytes: int) -> None: _libc.free(buf)
  def copyin(self, dest: int, src: memoryview) -> None:
    ctypes.memmove(dest, host_bytes(src), src.nbytes)
  def copyout(self, dest: memoryview, src: int) -> None:
    ctypes.memmove((ctypes.c_char * dest.nbytes).from_buffer(dest), src, dest.nbytes)
  def as_memoryview(self, buf: int, nbytes: int) -> memoryview:
    return memoryview((ctypes.c_char * nbytes).from_address(buf)).cast("B")

def find_c_compiler() -> str:
  """$CC, else cc, gcc or clang on PATH."""
  if (cc := os.getenv("CC")):
    path = shutil.which(cc.split()[0])
    if path is None:
      raise DeviceUnavailable(f"CPU: CC={cc} is not an executable on PATH. Install it, unset CC, or run with "
                              "DEV=PYTHON.")
    return cc
  for cand in ("cc", "gcc", "clang"):
    if shutil.which(cand): return cand
  raise DeviceUnavailable("CPU: no C compiler found (looked for $CC, cc, gcc and clang). Install one (e.g. `apt-get "
                          "install gcc` or `apt-get install clang`), or run with DEV=PYTHON, which needs no compiler.")

HUGE_KERNEL_LINES = 20_000

def _big_stack() -> None:
  """In the compiler's process: a stack as big as allowed. cc1 recurses along a long expression chain and overflowed
  the default 8 MB on 100k dependent ops (an internal compiler error)."""
  import resource  # POSIX only, like preexec_fn
  soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
  if soft != resource.RLIM_INFINITY: resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))

class ClangCompiler(Compiler):
  threadsafe = True  # each compile is its own process
  def __init__(self, cc: str):
    self.cc = cc.split()
    try: version = subprocess.run(self.cc + ["--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
      raise DeviceUnavailable(f"CPU: could not run the C compiler {cc!r}: {e}") from None
    ident = hashlib.sha256(f"{cc}\0{version}".encode()).hexdigest()
    # IEEE semantics for NaN, inf and signed zero: no -fno-signed-zeros (with it gcc folds x*0.0 to 0 even for NaN
    # and inf, and x+0.0 to x for -0.0) and no -fassociative-math (which needs it). Reductions vectorize without
    # them: the renderer gives a reduce explicit vector accumulators and combines their lanes itself. Kept: no errno
    # from libm and no trapping (values are unchanged). -ffp-contract=off: the compiler fuses no a*b+c itself, since
    # it would decide per kernel (how a product is used there, the optimization level) and the same expression
    # computed by two kernels could round differently (a max-pool gradient compares a recomputed value with the
    # forward's max: rows lost their gradient, or got 0/0). The code generator writes fma() instead (codegen/fma.py),
    # where the target has a fast one, and -fopenmp-simd lets a vector's fma loop become one instruction.
    # -fno-tree-slp-vectorize: gcc 12's SLP vectorizer miscompiles a max-reduce over bools at -O3 -march=native
    # (the value 254 comes out of a 0/1 reduction; test_ops.py::test_reduce[*-all-(0, 2)-*] pins it). Loop
    # vectorization, which elementwise kernels and reductions rely on, stays on.
    self.flags = ["-shared", "-fPIC", "-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math",
                  "-ffp-contract=off", "-fno-strict-aliasing", "-fno-tree-slp-vectorize", "-w"]
    # -fno-tree-reassoc (gcc only): a conv's or matmul's tile is rendered as one fused multiply-add per product in
    # the order that keeps its shared operand in a register; gcc's reassociation re-trees those sums into a
    # multiply and an add per product and reloads the operand (MNIST conv input gradient 43 -> 36 ms)
    # -fno-tree-vrp (gcc only): gcc 12 -O3 -march=native miscompiles two float selects on a masked load, e.g.
    # `v = ok ? p[i] : 0; out = 0 < v ? v : (v < 0 ? 0 : v)` (a relu of a padded input) stores 0 for some positive v
    # (test_ops.py::test_op_on_view[*-pad-relu] pins it); turning off value range propagation avoids it
    self.gcc = "Free Software Foundation" in version and "clang" not in version
    if self.gcc: self.flags += ["-fno-tree-reassoc", "-fno-tree-vrp"]
    if self.gcc or "clang" in version: self.flags.append("-fopenmp-simd")
    self.openmp = self._has_openmp(ident)
    self.fast_fma = self._has_fast_fma(ident)
    if self.openmp: self.flags.append("-fopenmp")
    self.cachekey = f"cpu:{ident}:{' '.join(self.flags)}"
  def _has_fast_fma(self, ident: str) -> bool:
    """Whether fma() is an instruction for this target (else a slow library call: no fused multiply-adds then)."""
    key = hashlib.sha256(f"fast_fma\0{ident}\0{' '.join(self.flags)}".encode()).hexdigest()
    if (hit := disk_cache_get("probe", key)) is not None: return hit == b"1"
    try:
      self._compile_with("#if !defined(__FP_FAST_FMAF) || !defined(__FP_FAST_FMA)\n#error no fast fma\n#endif\n"
                         "int f(void) { return 0; }", self.flags)
      ok = True
    except RuntimeError: ok = False
    disk_cache_put("probe", key, b"1" if ok else b"0")
    return ok
  def _has_openmp(self, ident: str) -> bool:
    key = hashlib.sha256(f"openmp\0{ident}".encode()).hexdigest()
    if (hit := disk_cache_get("probe", key)) is not None: return hit == b"1"
    try:
      self._compile_with("int f(void) { int s = 0;\n#pragma omp parallel for reduction(+:s)\n"
                         "for (int i = 0; i < 4; i++) s += i;\nreturn s; }", self.flags + ["-fopenmp"])
      ok = True
    except RuntimeError: ok = False
    disk_cache_put("probe", key, b"1" if ok else b"0")
    return ok
  def _compile_with(self, src: str, flags: list[str]) -> bytes:
    with tempfile.TemporaryDirectory() as d:
      out = os.path.join(d, "k.so")
      p = subprocess.run(self.cc + flags + ["-x", "c", "-", "-o", out, "-lm"], input=src.encode(), capture_output=True,
                         preexec_fn=_big_stack if src.count("\n") > HUGE_KERNEL_LINES else None)
      if p.returncode != 0:
        raise RuntimeError(f"CPU: the C compiler failed:\n{p.stderr.decode(errors='replace')}\n--- source ---\n{src}")
      with open(out, "rb") as f: return f.read()
  def compile(self, src: str) -> bytes:
    # a huge kernel (a 100k-op chain of dependent float adds, which no flag may reassociate and fold): gcc's default
    # register allocator takes minutes on it (quadratic), the priority one seconds
    huge = self.gcc and src.count("\n") > HUGE_KERNEL_LINES
    return self._compile_with(src, self.flags + ["-fira-algorithm=priority"] * huge)
  def batchable(self, src: str) -> bool:
    # a kernel with helper functions of its own (fp8 conversions) would define them twice in one unit
    pre = ClangRenderer.preamble
    return "static " not in (src[len(pre):] if src.startswith(pre) else src)
  def compile_batch(self, kernels: list[tuple[str, str]]) -> bytes:
    """Several kernels as one translation unit with the usual flags, each function under batch_symbol: one compiler
    process instead of one per kernel (~30 ms each just to start gcc, as and ld; 60 of bench's first-run kernels
    17.6 -> 10.7 s of gcc, on a busy machine). The functions are independent, so each compiles as it would alone
    (their disassembly is the same, but for alignment padding)."""
    kernels = list(dict.fromkeys(kernels))  # the same kernel twice (on two devices) is one function
    return self.compile(_one_unit([src for _, src in kernels], [(n, batch_symbol(n, src)) for n, src in kernels]))
  def compile_quick(self, kernels: list[tuple[str, str]]) -> tuple[bytes, list[str]]:
    """Several kernels as one translation unit at -O1, for a first run: one compiler process instead of one per
    kernel, and -O1 costs half of -O3 while its code runs ~1.35x slower (MNIST step, measured). Each kernel's
    function is renamed to a unique symbol (names may repeat here). Returns the library and each kernel's symbol."""
    syms = [f"__atto_quick{i}_{name}" for i, (name, _) in enumerate(kernels)]
    src = _one_unit([src for _, src in kernels], list(zip([name for name, _ in kernels], syms)))
    flags = [f if not re.fullmatch(r"-O[0-9s]|-Ofast", f) else "-O1" for f in self.flags]
    return self._compile_with(src, flags), syms

def _one_unit(srcs: list[str], renames: list[tuple[str, str]]) -> str:
  """Kernels' sources as one translation unit: the shared helpers once (static functions can't repeat), then each
  kernel, its function renamed by a #define around it (kernels of one shape share a name)."""
  pre = ClangRenderer.preamble
  parts = [pre]
  for src, (name, sym) in zip(srcs, renames):
    body = src[len(pre):] if src.startswith(pre) else src
    parts.append(f"#define {name} {sym}\n{body}\n#undef {name}\n")
  return "".join(parts)

# libraries loaded now, by the hash of their bytes: the kernels of one batch share their library (each kernel's
# program is made from the same bytes), so it is mapped once
_loaded: weakref.WeakValueDictionary[bytes, ctypes.CDLL] = weakref.WeakValueDictionary()

def load_library(lib: bytes) -> ctypes.CDLL:
  if (dll := _loaded.get(key := hashlib.sha256(lib).digest())) is not None: return dll
  _loaded[key] = dll = _load_new(lib)
  return dll

def _load_new(lib: bytes) -> ctypes.CDLL:
  # dlopen needs a file, and caches by path: every library gets a fresh, unique name
  tmpdir = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
  with tempfile.NamedTemporaryFile(suffix=".so", delete=False, dir=tmpdir) as f:
    f.write(lib)
  try: dll = ctypes.CDLL(f.name, mode=int(os.environ.get("_ATTO_DLMODE", "0")) or ctypes.DEFAULT_MODE)
  finally: os.unlink(f.name)
  if not _openmp_pinned: _pin_openmp_runtime()
  # ctypes never unloads a library; each holds ~5 memory mappings, and a process has at most 65530 of them. Unload it
  # when its last function is gone (a function object keeps its library alive); not at interpreter exit, where it
  # would only race the process's end
  weakref.finalize(dll, _dlclose, dll._handle).atexit = False
  return dll

# The kernels' OpenMP runtime (libgomp, or LLVM's libomp) is loaded as a dependency of the first kernel library, and
# unloaded with the last one: its worker threads, asleep inside it, then woke into unmapped code (a segfault, seen at
# interpreter exit when every library was closed, in ~1 of 40 runs on a busy machine). Once loaded it stays.
_openmp_pinned = False
def _pin_openmp_runtime() -> None:
  global _openmp_pinned
  for name in ("libgomp.so.1", "libomp.so", "libomp.so.5", "libiomp5.so"):
    # RTLD_NOLOAD: only if this process already has it; RTLD_NODELETE: never unmapped from now on
    try: ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_NODELETE)  # type: ignore[attr-defined]
    except (OSError, AttributeError): continue
    _openmp_pinned = True

def _dlclose(handle: int) -> None:
  try: _ctypes.dlclose(handle)
  except OSError: pass

class CPUProgram:
  """A compiled kernel; call it with buffer addresses and variable values. `lib` is the library's bytes, or a
  library already loaded (a quick build holds many kernels: it is loaded once)."""
  def __init__(self, name: str, lib: bytes | ctypes.CDLL):
    if not isinstance(lib, ctypes.CDLL):
      lib, sym = split_symbol(lib)  # a kernel built in a batch: its function's name there
      name = sym or name
    self.lib = lib if isinstance(lib, ctypes.CDLL) else load_library(lib)
    self.fxn = getattr(self.lib, name)
    self.fxn.restype = None
    self._argtypes_set = False
  def __call__(self, *bufs: int, vals: tuple[int, ...] = ()) -> None:
    if not self._argtypes_set:
      self.fxn.argtypes = [ctypes.c_void_p] * len(bufs) + [ctypes.c_int] * len(vals)
      self._argtypes_set = True
    self.fxn(*bufs, *vals)

class CPUDevice(Compiled):
  def __init__(self, device: str):
    cc = find_c_compiler()
    compiler = ClangCompiler(cc)
    super().__init__(device, MallocAllocator(), ClangRenderer(device, threads=compiler.openmp, fma=compiler.fast_fma),
                     compiler, CPUProgram)
  def quick_build(self, kernels: list[tuple[str, str]]) -> list[CPUProgram]:
    """One -O1 library for all of `kernels` ([(name, src)]), loaded once: a program per kernel."""
    assert isinstance(self.compiler, ClangCompiler)
    lib, syms = self.compiler.compile_quick(kernels)
    handle = load_library(lib)
    return [CPUProgram(sym, handle) for sym in syms]
