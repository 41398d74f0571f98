"""The CPU device: kernels rendered to C, compiled by the system's gcc or clang, loaded with ctypes, threaded with
OpenMP."""
from __future__ import annotations
import _ctypes, copy, ctypes, ctypes.util, hashlib, mmap, os, re, shutil, subprocess, tempfile, time, weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable
from attograd.device import (Compiled, LRUAllocator, Compiler, DeviceUnavailable, batch_symbol, disk_cache_get,
                             disk_cache_put, host_bytes, split_symbol, var_ctypes)
from attograd.dtype import DType
from attograd.renderer.cstyle import ClangRenderer

# OpenMP threads sleep between kernels instead of spinning: spinning workers steal the cores that other processes
# (and the Python thread launching the next kernel) need, which made busy machines up to 20x slower; on an idle
# machine the two measured the same here. Set before the first kernel loads libgomp; the environment still wins.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

# Host data of at least HUGE_PAGE_MIN bytes copied into a buffer (a data set, a model's weights: read again and again)
# asks for transparent huge pages first (Linux's madvise, as NumPy does for its arrays from 4 MB on; the machines
# here give huge pages only to memory that asks): a stream through 4 KB pages misses the TLB every 4 KB. The 16M
# float32 sum on one thread, CPU time per call (two processes in turns): 1.89 -> 1.71 ms median; PyTorch's, on
# NumPy's huge-page array, 1.71-1.85 ms. Buffers that kernels write first (a training step's intermediates) stay on
# small pages: on this development VM, memory its host had not backed yet took 0.5-1.3 s per 512 MB to fault in as
# huge pages (a C memset alike), and with every big buffer advised the MNIST first step took 2.15-2.30 s against
# 1.49-1.51 s (warm kernel cache, 3 runs each, in turns)
HUGE_PAGE, HUGE_PAGE_MIN = 1 << 21, 1 << 22
_MADV_HUGEPAGE: int | None = getattr(mmap, "MADV_HUGEPAGE", None)

def advise_huge_pages(addr: int, nbytes: int) -> None:
  """Ask for huge pages for the whole 2 MB pages inside [addr, addr + nbytes) (advice only: where the OS has none,
  madvise refuses and the memory stays on small pages). Memory already touched keeps its pages."""
  lo, hi = -(-addr // HUGE_PAGE) * HUGE_PAGE, (addr + nbytes) // HUGE_PAGE * HUGE_PAGE
  if _MADV_HUGEPAGE is not None and hi > lo: _libc.madvise(lo, hi - lo, _MADV_HUGEPAGE)

_SMALL_COPY = 1 << 16  # bytes: copies up to this size go through memoryviews (MallocAllocator.copyin)

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
    # a small copy of bytes goes through a memoryview of the destination: ctypes.memmove's call alone (its arguments
    # converted by ctypes) costs more than that whole copy (a new 16-element tensor: 1.2 -> 0.7 us). A big one through
    # memmove, which lets other threads run while it copies
    if (n := src.nbytes) <= _SMALL_COPY and src.format == "B":
      memoryview((ctypes.c_char * n).from_address(dest)).cast("B")[:] = src
      return
    if n >= HUGE_PAGE_MIN: advise_huge_pages(dest, n)
    # a writable view is read in place through the address of its first byte: a ctypes array of its length (what
    # host_bytes makes) is a new array type per size and costs more than the copy itself for small tensors
    if not src.readonly: ctypes.memmove(dest, ctypes.addressof(ctypes.c_char.from_buffer(src)), n)
    else: ctypes.memmove(dest, host_bytes(src), n)
  def copyout(self, dest: memoryview, src: int) -> None:
    if (n := dest.nbytes) <= _SMALL_COPY and dest.format == "B":  # (as copyin's)
      dest[:] = memoryview((ctypes.c_char * n).from_address(src)).cast("B")
    else: ctypes.memmove((ctypes.c_char * n).from_buffer(dest), src, n)
  def as_memoryview(self, buf: int, nbytes: int) -> memoryview:
    return memoryview((ctypes.c_char * nbytes).from_address(buf)).cast("B")
  def offset_handle(self, buf: int, nbytes: int, offset: int) -> int: return buf + offset

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

# gcc's quick (-O1) build of a big kernel: no loop invariant motion (see compile_quick), and value numbering that
# gives up on a load after 100 alias queries instead of 1000: a conv kernel's hundreds of vector loads and scalar
# stores made -O1 walk them for a third of its time. MNIST's 11 big kernels: 3.45 -> 2.89 s of gcc CPU time, and
# their run time the same (217 vs 218 ms, one thread). The --param is given from gcc 8 on.
QUICK_GCC_FLAGS = ["-fno-tree-loop-im", "--param=sccvn-max-alias-queries-per-access=100"]

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
    self.gcc_major = int(m.group(1)) if self.gcc and (m := re.search(r" (\d+)\.\d+\.\d+", version)) else 0
    if self.gcc: self.flags += ["-fno-tree-reassoc", "-fno-tree-vrp"]
    if self.gcc or "clang" in version: self.flags.append("-fopenmp-simd")
    # the probes, on the first run of a new cache: OpenMP is a build and link (~40-70 ms), the target's features one
    # run of the preprocessor (~10 ms), side by side: the first tensor's device waits for the longer one. (A compile
    # per feature, three builds at once, took 55 ms of conv2d's 0.37 s first call on an idle 2-core machine)
    with ThreadPoolExecutor(2) as pool:
      openmp, features = pool.submit(self._has_openmp, ident), pool.submit(self._target_features, ident)
      self.openmp, (self.fast_fma, self.int8_dot) = openmp.result(), features.result()
    if self.openmp: self.flags.append("-fopenmp")
    self.cachekey = f"cpu:{ident}:{' '.join(self.flags)}"
    # the light build of kernels with little work (Compiler.light): the quick tier's flags, its programs final and
    # cached on disk under their own key
    self.light = light = copy.copy(self)
    light.flags, light.light = self._quick_flags(), None
    light.cachekey = f"cpu:{ident}:{' '.join(light.flags)}"
  def _quick_flags(self) -> list[str]:
    """The usual flags at -O1, without the costliest of its passes (QUICK_GCC_FLAGS; see compile_quick)."""
    flags = [f if not re.fullmatch(r"-O[0-9s]|-Ofast", f) else "-O1" for f in self.flags]
    return flags + ((QUICK_GCC_FLAGS if self.gcc_major >= 8 else QUICK_GCC_FLAGS[:1]) if self.gcc else [])
  def _probe(self, key_text: str, src: str, flags: list[str]) -> bool:
    """Whether `src` compiles with `flags`, remembered on disk under `key_text` (one compiler run per machine)."""
    key = hashlib.sha256(key_text.encode()).hexdigest()
    if (hit := disk_cache_get("probe", key)) is not None: return hit == b"1"
    try:
      self._compile_with(src, flags)
      ok = True
    except RuntimeError: ok = False
    disk_cache_put("probe", key, b"1" if ok else b"0")
    return ok
  def _target_features(self, ident: str) -> tuple[bool, bool]:
    """(fast fma, int8 dot) from the macros the compiler predefines with the kernels' flags (one preprocessor run,
    remembered on disk): whether fma() is an instruction for this target (else a slow library call: no fused
    multiply-adds then), and whether the target has AVX-512 VNNI's int8 dot product on 16 lanes, which gcc compiles
    from the builtin renderer/cstyle.py writes (gcc's name: with clang and other compilers the kernels keep the plain
    integer ops)."""
    key = hashlib.sha256(f"features\0{ident}\0{' '.join(self.flags)}".encode()).hexdigest()
    if (hit := disk_cache_get("probe", key)) is not None and len(hit) == 2: return hit[0:1] == b"1", hit[1:2] == b"1"
    try:
      p = subprocess.run(self.cc + self.flags + ["-dM", "-E", "-x", "c", "-"], input=b"", capture_output=True,
                         timeout=60)
      text = p.stdout.decode(errors="replace") if p.returncode == 0 else ""
      macros = set(re.findall(r"^#define (\w+)", text, re.M))
    except (OSError, subprocess.TimeoutExpired): macros = set()
    fma = {"__FP_FAST_FMAF", "__FP_FAST_FMA"} <= macros
    dot = {"__GNUC__", "__AVX512F__", "__AVX512VNNI__"} <= macros and "__clang__" not in macros
    disk_cache_put("probe", key, (b"1" if fma else b"0") + (b"1" if dot else b"0"))
    return fma, dot
  def _has_openmp(self, ident: str) -> bool:
    return self._probe(f"openmp\0{ident}", "int f(void) { int s = 0;\n#pragma omp parallel for reduction(+:s)\n"
                       "for (int i = 0; i < 4; i++) s += i;\nreturn s; }", self.flags + ["-fopenmp"])
  def _compile_with(self, src: str, flags: list[str]) -> bytes:
    with tempfile.TemporaryDirectory() as d:
      out = os.path.join(d, "k.so")
      p = subprocess.run(self.cc + flags + ["-x", "c", "-", "-o", out, "-lm"], input=src.encode(), capture_output=True,
                         preexec_fn=_big_stack if src.count("\n") > HUGE_KERNEL_LINES else None)
      if p.returncode != 0:
        raise RuntimeError(f"CPU: the C compiler failed:\n{p.stderr.decode(errors='replace')}\n--- source ---\n{src}")
      with open(out, "rb") as f: return f.read()
  def _huge(self, src: str) -> list[str]:
    """Flags for a huge kernel (a 100k-op chain of dependent float adds, which no flag may reassociate and fold):
    gcc's default register allocator takes minutes on it (quadratic), the priority one seconds, at -O3 and at -O1
    alike (the quick build of that chain: 128 s -> 3.6 s)."""
    return ["-fira-algorithm=priority"] if self.gcc and src.count("\n") > HUGE_KERNEL_LINES else []
  def compile(self, src: str) -> bytes: return self._compile_with(src, self.flags + self._huge(src))
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
    kernel, and -O1 costs half of -O3. MNIST's big conv kernels (34-93 KB of C, explicit vector tiles) run about as
    fast at -O1 as at -O3 (524 vs 537 ms for the 11 of them); scalar code is slower (~1.35x for a whole MNIST step).
    gcc's loop invariant motion is left out (a quarter of -O1's time on the biggest, 0.99 -> 0.71 s; the renderer
    already puts each index term in the loop it belongs to), and so is most of the alias walking of its value
    numbering (QUICK_GCC_FLAGS). Each kernel's function is renamed to a unique symbol (names may repeat here).
    Returns the library and each kernel's symbol."""
    syms = [f"__atto_quick{i}_{name}" for i, (name, _) in enumerate(kernels)]
    src = _one_unit([src for _, src in kernels], list(zip([name for name, _ in kernels], syms)))
    flags = self._quick_flags()
    return self._compile_with(src, flags + self._huge(src)), syms

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

class ThreadChoice:
  """Whether a parallel kernel runs on all of OpenMP's threads (0) or on one (1), chosen by timing its calls. On a
  machine whose other cores are busy, a parallel loop waits at its end for a thread that got no core: a 512x512
  matmul ran at 17 GFLOPS on 2 threads and 204 on one, with the 2 cores shared by 6 processes. So a call on all
  threads that waited (its wall time over WAITED times the calling thread's own CPU time) is followed by a trial on
  one thread; then the faster setting (by its best of the last WINDOW calls) runs. While one thread runs, all of them
  are tried again after `interval` calls (FIRST_CHECK at first), and after a waited call on all threads one thread
  is tried again no sooner: an interval that doubles each time a trial loses (so a slow trial costs less and less)
  and restarts on a flip. While one thread runs, all of them are also tried once the calls since the last trial took
  RETRY times the slowest of the last calls on all threads (what a losing trial may cost): trials then cost ~1/RETRY
  of the time, and a kernel gets its threads back soon after a long busy spell ends (after 5000 busy calls it ran up
  to 4096 more at half speed). An idle machine never waits long, so there a kernel never runs on one thread. The
  first call is not counted."""
  WINDOW, FIRST_CHECK, MAX_INTERVAL, WAITED, RETRY = 3, 4, 4096, 1.5, 100
  def __init__(self) -> None:
    self.calls, self.best, self.trial = 0, 0, False
    self.recent: tuple[list[float], list[float]] = ([], [])  # the last seconds on all threads, on one thread
    self.interval, self.next_check = self.FIRST_CHECK, 0
    self.since_trial_s = 0.0  # the seconds of the calls since the last trial
  def pick(self) -> int: return 1 - self.best if self.trial else self.best
  def record(self, which: int, wall: float, cpu: float) -> None:
    c, self.calls, was_trial, self.trial = self.calls, self.calls + 1, self.trial, False
    if c == 0: return
    r = self.recent[which]
    r.append(wall)
    del r[:-self.WINDOW]
    if self.recent[0] and self.recent[1]:
      faster = 0 if min(self.recent[0]) <= min(self.recent[1]) else 1
      if faster != self.best: self.best, self.interval, self.next_check = faster, self.FIRST_CHECK, 0
      elif was_trial: self.interval = min(self.interval * 2, self.MAX_INTERVAL)
      if was_trial or faster != self.best: self.next_check = self.calls + self.interval
    self.since_trial_s = 0.0 if was_trial else self.since_trial_s + wall
    late = self.best == 1 and self.recent[0] and self.since_trial_s >= self.RETRY * max(self.recent[0])
    if self.calls >= self.next_check or late:
      self.trial = self.best == 1 or (which == 0 and wall > self.WAITED * cpu)

_omp: list[object] = []  # [omp_set_num_threads, the threads a parallel loop gets by default, the count set now]

def _omp_threads() -> list[object] | None:
  """OpenMP's thread-count controls, from the runtime the kernels loaded (None before one is loaded, without one, or
  with one thread)."""
  if not _omp:
    for name in ("libgomp.so.1", "libomp.so", "libomp.so.5", "libiomp5.so"):
      try: rt = ctypes.CDLL(name, mode=os.RTLD_NOLOAD)  # type: ignore[attr-defined]
      except (OSError, AttributeError): continue
      rt.omp_set_num_threads.argtypes, rt.omp_set_num_threads.restype = [ctypes.c_int], None
      n = int(rt.omp_get_max_threads())
      _omp.extend([rt.omp_set_num_threads, n, n])
      break
  return _omp if _omp and _omp[1] > 1 else None  # type: ignore[operator]

class CPUProgram:
  """A compiled kernel; call it with buffer addresses and variable values. `lib` is the library's bytes, or a
  library already loaded (a quick build holds many kernels: it is loaded once; `parallel` then says whether this
  kernel has a parallel loop, which its bytes say otherwise). A kernel with a parallel loop
  (gcc outlines it as NAME._omp_fn.N) runs on all threads or on one, as ThreadChoice times best, so it is always
  called through __call__: the engine and the JIT call `fxn` directly only once its argument types are set, and
  __call__ sets them on its own copy of the function (`_fxn`) instead."""
  # the Variables' dtypes, set by the runner where one is int64 (passed as 64 bits); () means all int32
  var_dtypes: tuple[DType, ...] = ()
  def __init__(self, name: str, lib: bytes | ctypes.CDLL, parallel: bool = False):
    if not isinstance(lib, ctypes.CDLL):
      lib, sym = split_symbol(lib)  # a kernel built in a batch: its function's name there
      name = sym or name
      parallel = f"{name}._omp_fn.".encode() in lib
    self.lib = lib if isinstance(lib, ctypes.CDLL) else load_library(lib)
    # lib[name], not getattr: a CDLL caches the attribute, so every program of one library and symbol would share one
    # function object and each one's argument types would be the last set by any of them
    self.fxn = self.lib[name]
    self.fxn.restype = None
    self.threads = ThreadChoice() if parallel and _omp_threads() is not None else None
    self._fxn = self.fxn if self.threads is None else self.lib[name]  # lib[name]: a new function object
    self._fxn.restype = None
    self._argtypes_set = False
  def __call__(self, *bufs: int, vals: tuple[int, ...] = ()) -> None:
    fxn = self._fxn
    if not self._argtypes_set:
      fxn.argtypes = [ctypes.c_void_p] * len(bufs) + var_ctypes(self.var_dtypes, len(vals))
      self._argtypes_set = True
    if (tc := self.threads) is None: return fxn(*bufs, *vals)
    omp = _omp_threads()
    assert omp is not None
    which = tc.pick()
    if omp[2] != (want := 1 if which else omp[1]):
      omp[0](want)  # type: ignore[operator]
      omp[2] = want
    st, cpu = time.perf_counter(), time.thread_time()
    fxn(*bufs, *vals)
    tc.record(which, time.perf_counter() - st, time.thread_time() - cpu)

_IF_CLAUSE = re.compile(r"#pragma omp parallel for if\((.*)\)\s*$", re.M)  # renderer/cstyle.py's parallel_range_rule
_INT_PARAM = re.compile(r"const int (\w+)")

class CallBatch:
  """Kernels called one after another from C, in one ctypes call: each kernel's call through ctypes costs ~0.5 us of
  argument conversion, and its Python objects (cold in cache after the kernels streamed their data through it) more;
  a TinyJit replay of SmolLM2's decode step made 820 of them. `kernels`: per kernel (function address, buffer
  arguments, int arguments, {buffer argument: bytes its address moves}). The arguments live in `args` (int64, the
  kernels' in order), where the replay writes each call's buffer addresses and variable values; `fns` holds the
  functions. The generated source depends on the kernels' signatures alone: it compiles once per shape of batch."""
  def __init__(self, compiler: Compiler, kernels: list[tuple[int, int, int, dict[int, int]]]):
    lines, k = [], 0
    for i, (_, nb, ni, shifts) in enumerate(kernels):
      sig = ", ".join(["void*"] * nb + ["int"] * ni) or "void"
      vals = [f"(void*)(a[{k + j}] + {shifts[j]})" if shifts.get(j) else f"(void*)a[{k + j}]" for j in range(nb)]
      vals += [f"(int)a[{k + nb + j}]" for j in range(ni)]
      lines.append(f"  ((void (*)({sig}))f[{i}])({', '.join(vals)});")
      k += nb + ni
    src = "void atto_call_batch(void** f, long long* a) {\n" + "\n".join(lines) + "\n}\n"
    self.lib = load_library(compiler.compile_cached(src))
    self.fxn = self.lib.atto_call_batch
    self.fxn.argtypes, self.fxn.restype = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64)], None
    self.fns = (ctypes.c_void_p * len(kernels))(*[addr for addr, _, _, _ in kernels])
    self.args = (ctypes.c_int64 * max(k, 1))()
  def __call__(self) -> None: self.fxn(self.fns, self.args)

class CPUDevice(Compiled):
  def __init__(self, device: str):
    cc = find_c_compiler()
    compiler = ClangCompiler(cc)
    super().__init__(device, MallocAllocator(), ClangRenderer(device, threads=compiler.openmp, fma=compiler.fast_fma,
                                                                  int8_dot=compiler.int8_dot),
                     compiler, CPUProgram)
  def call_batch(self, kernels: list[tuple[int, int, int, dict[int, int]]]) -> CallBatch:  # type: ignore[override]
    """One C call running `kernels` (see CallBatch)."""
    return CallBatch(self.compiler, kernels)
  def batch_entry(self, prg: Any, src: str) -> tuple[int, dict[int, int], bool, Callable[..., int] | None] | None:
    """(function address, {buffer argument: address shift}, whether ThreadChoice picks its thread count per call,
    and then its parallel loop's `if` clause as a function of the kernel's int arguments, or None without one) of a
    program `src` a CallBatch can call directly, else None. A batch may call a program with a ThreadChoice while
    that clause is false: it runs on the calling thread then, whatever OpenMP's thread count."""
    shifts = dict(getattr(prg, "shifts", ()))
    prg = getattr(prg, "prg", prg) if shifts else prg  # realize._Shifted: the program, its buffers moved
    if not isinstance(prg, CPUProgram) or not (addr := ctypes.cast(prg.fxn, ctypes.c_void_p).value): return None
    # a batch passes every Variable as an int: a kernel taking a 64-bit one (bounds past int32's) is called alone
    if prg.var_dtypes and any(d.itemsize != 4 for d in prg.var_dtypes): return None
    if prg.threads is None: return (addr, shifts, False, None)
    clauses, head = _IF_CLAUSE.findall(src), re.search(r"void \w+\((.*?)\) \{", src)
    if len(clauses) != 1 or src.count("#pragma omp parallel") != 1 or head is None: return (addr, shifts, True, None)
    ints = _INT_PARAM.findall(head.group(1))
    cond = f"int atto_wakes({', '.join(f'int {n}' for n in ints) or 'void'}) {{ return ({clauses[0]}) != 0; }}\n"
    fn = load_library(self.compiler.compile_cached(cond)).atto_wakes
    fn.argtypes, fn.restype = [ctypes.c_int] * len(ints), ctypes.c_int
    return (addr, shifts, True, fn)
  def quick_build(self, kernels: list[tuple[str, str]]) -> list[CPUProgram]:
    """One -O1 library for all of `kernels` ([(name, src)]), loaded once: a program per kernel."""
    assert isinstance(self.compiler, ClangCompiler)
    lib, syms = self.compiler.compile_quick(kernels)
    handle = load_library(lib)
    # a loaded library's local symbols (the outlined NAME._omp_fn.N) can't be looked up: the source says instead
    return [CPUProgram(sym, handle, parallel="#pragma omp parallel" in src) for sym, (_, src) in zip(syms, kernels)]
