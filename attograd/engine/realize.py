"""Running a schedule: build each kernel once (cached by its AST), copy between devices, report with DEBUG.
A schedule's new kernels are lowered and their builds started before the first one runs: compiles run in parallel on
all cores and beside the lowering of later kernels, and each kernel waits only for its own program. Where the compiler
builds batches (CPU), small kernels share one compiler run per 64 KB of source. Where the device
has a quick tier (CPU: -O1), a big kernel starts from a quick build of its own and its optimized build, made in the
background once no first build is in flight, replaces it when ready; only the optimized one is kept in the disk cache.
A kernel of little work is built once, by the device's light compiler where it has one (CPU: -O1; LIGHT_BUILD).
While a TinyJit captures, every kernel run here is also reported to its recorder (engine/recorder.py)."""
from __future__ import annotations
import functools, os, threading, time, warnings
from collections import OrderedDict
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any
from attograd.codegen import get_program
from attograd.codegen.offsets import split_offsets
from attograd.device import Buffer, Compiled, Compiler, Device, batch_symbol, defer_frees_on_this_thread, with_symbol
from attograd.engine.nan import DEBUG_NAN, check_kernel
from attograd.engine.item import ScheduleItem
from attograd.engine.profile import PROFILER
from attograd.engine import recorder
import attograd.viz as viz
from attograd.viz import VIZ
from attograd.dtype import dtypes
from attograd.helpers import BEAM, CAPTURING, DEBUG, ContextVar, GlobalCounters, colored, prod
from attograd.renderer import Estimates, ProgramSpec
from attograd.uop.ops import CallInfo, Ops, UOp

# 0: optimized builds only; 1 (default): a kernel of QUICK_MIN_SRC bytes of source or more starts from a quick build
# of its own, its optimized build made in the background and swapped in when ready; 2: every kernel tiered (tests).
# Both builds give the same bits (compilers fuse no a*b+c, codegen/fma.py writes the fused ones), so a program swapped
# in the middle of a training step changes no value (before that, MNIST diverged with it on).
QUICK_BUILD = ContextVar("QUICK_BUILD", 1)
# a kernel this big costs gcc about twice as much at -O3 as at -O1 (MNIST's 34-93 KB conv kernels: 0.36-1.75 s of
# -O3, 0.23-0.99 s of -O1); below it both are mostly the ~40 ms of starting the compiler, and the kernel goes into an
# optimized batch with the other small ones (tiering it would only double the work)
QUICK_MIN_SRC = 16 << 10
# source bytes per quick translation unit (QUICK_BUILD=2: small kernels tiered too): enough to pay for one compiler
# process, small enough that the compiler starts while the kernels after it are still being lowered
QUICK_CHUNK = 64 << 10
# the same for a batch of optimized builds (Compiler.compile_batch): one compiler process per batch, not per kernel.
# A kernel of BATCH_ALONE bytes or more is built alone: starting gcc (~30 ms) is a small part of its build (100+ ms),
# and alone it builds in parallel with the rest (GPT-2's 40 KB matmuls, batched three at a time, serialized the
# prefill's builds). Most kernels are smaller (146 of the 203 first-run kernels in bench/ are under 4 KB)
BATCH_CHUNK, BATCH_ALONE = 64 << 10, 16 << 10
# a schedule's last small kernels are split across the cores in batches of at least this many bytes of source: a
# compiler process costs ~30 ms of CPU, what compiling ~8 KB of small kernels at -O3 does, so splitting less than this
# saves less time on an idle core than it costs a busy one (MNIST's first step: 2 kernels of 2 KB were 2 compiler
# runs)
BATCH_SPLIT = 16 << 10
# 1 (default): a kernel of little work is built by the device's light compiler (Compiler.light, CPU: -O1) as its final
# program, since it runs in microseconds at any level and -O3 costs about 1.4x the compiler time: at most LIGHT_OPS
# float operations, at most LIGHT_BYTES of memory, and at most LIGHT_WORK lines of source times bytes of memory (the
# integer ops, which the op count leaves out: rand(36864)'s hash, ~200 lines per element, ran 2-3 ms slower per call
# at -O1; a kernel at the limit runs up to ~0.4 ms slower). An optimizer's update of a small weight, a
# small random init, a loss's last reductions: MNIST's first training step has 61 such kernels of its 112 small ones
# (196 of their 404 KB of C)
LIGHT_BUILD = ContextVar("LIGHT_BUILD", 1)
LIGHT_OPS, LIGHT_BYTES, LIGHT_WORK = 1 << 18, 1 << 18, 8 << 20

def _compiler(dev: Compiled, spec: ProgramSpec) -> Compiler:
  """The compiler that builds `spec`'s final program: the light one for a kernel of little work, where there is one."""
  # (QUICK_BUILD=2 tiers every kernel, its final build the optimized one)
  if (light := dev.compiler.light) is not None and LIGHT_BUILD.value and QUICK_BUILD.value < 2 \
     and (ops := spec.op_estimate).__class__ is int and (mem := spec.mem_estimate).__class__ is int \
     and ops <= LIGHT_OPS and mem <= LIGHT_BYTES and spec.src.count("\n") * mem <= LIGHT_WORK:
    return light
  return dev.compiler

def _cores() -> int: return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

_pools: dict[str, ThreadPoolExecutor] = {}
def _pool(kind: str) -> ThreadPoolExecutor:
  """"build": first builds, which kernels wait for, one worker per core. "background": the optimized builds behind
  a quick tier, on all cores but one and at a lower priority, so the kernels already running keep their cores."""
  if (pool := _pools.get(kind)) is None:
    n = _cores() if kind == "build" else max(_cores() - 1, 1)
    pool = _pools[kind] = ThreadPoolExecutor(n, thread_name_prefix=f"attograd-{kind}",
                                             initializer=_background_thread if kind == "background" else _build_thread)
  return pool

# First builds in flight (submitted to the "build" pool, not yet done). An optimized build behind a quick tier starts
# only when there are none, and have been none for BACKGROUND_QUIET seconds: on a 2-core machine the two compete for
# the core the Python thread leaves, and a kernel waits on its first build. Between two schedules of one program (the
# Python thread running kernels, building the next graph, lowering its first kernels) there are briefly none: MNIST's
# first step started a 2.9 s -O3 build in such a gap, which then held up the -O1 builds of every later schedule
_first_builds = threading.Condition()
_first_in_flight = 0
_last_first_done = 0.0  # time.monotonic() when the last first build finished
_exiting = False
BACKGROUND_QUIET = 0.5

def _submit_first(fn: Any, *args: Any) -> Future:
  global _first_in_flight
  with _first_builds: _first_in_flight += 1
  fut = _pool("build").submit(fn, *args)
  fut.add_done_callback(_first_done)
  return fut

def _first_done(_: Future) -> None:
  global _first_in_flight, _last_first_done
  with _first_builds:
    _first_in_flight -= 1
    if _first_in_flight == 0:
      _last_first_done = time.monotonic()
      _first_builds.notify_all()

def _background_build(spec: ProgramSpec) -> bytes:
  """The optimized build behind a quick tier: once no first build has been in flight for BACKGROUND_QUIET seconds
  (and not at all at exit)."""
  with _first_builds:
    while not _exiting:
      if _first_in_flight == 0 and (left := _last_first_done + BACKGROUND_QUIET - time.monotonic()) <= 0: break
      _first_builds.wait(None if _first_in_flight else left)
  if _exiting: raise CancelledError(f"{spec.name}: the optimized build was dropped at exit")
  return _build(spec, Device[spec.device].compiler)

def _drop_queued_background_builds() -> None:
  # at exit, optimized builds not yet started are dropped instead of holding the process up (9 s of -O3 on 2 cores
  # after an MNIST step); those under way finish and are cached, and the next run builds the rest the same way
  global _exiting
  with _first_builds:
    _exiting = True
    _first_builds.notify_all()
  if (pool := _pools.get("background")) is not None: pool.shutdown(wait=False, cancel_futures=True)
# threading's exit hooks run before Python joins the pools' threads (which would first run every queued build)
if (_at_thread_exit := getattr(threading, "_register_atexit", None)) is not None:
  _at_thread_exit(_drop_queued_background_builds)

def _build_thread() -> None: defer_frees_on_this_thread()  # see device.py: buffers are freed on allocating threads

def _background_thread() -> None:
  defer_frees_on_this_thread()
  # Linux: a nice value belongs to one thread, and the compiler processes that thread starts inherit it
  try: os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 5)
  except (AttributeError, OSError): pass

def _lower(device: str, ast: UOp) -> ProgramSpec:
  st = PROFILER.now() if PROFILER.active else 0.0
  spec = get_program(ast, Device[device].renderer)
  if PROFILER.active:
    PROFILER.span(spec.name, "lower", device, st, PROFILER.now(), opts=[str(o) for o in spec.applied_opts])
  return spec

def _build(spec: ProgramSpec, compiler: Compiler | None = None) -> bytes:
  """The final build of one kernel (by `compiler`, else the one _compiler picks), from the disk cache when it was built
  before."""
  on, st = PROFILER.active, PROFILER.now()  # a build may have started before the profiler was turned on
  lib = (compiler or _compiler(Device[spec.device], spec)).compile_cached(spec.src)
  if on and PROFILER.active:
    PROFILER.span(spec.name, "compile", spec.device, st, PROFILER.now(), src_bytes=len(spec.src),
                  thread=threading.current_thread().name)
  return lib

def _build_batch(dev: Compiled, compiler: Compiler, specs: list[ProgramSpec], futs: list[Future[bytes]]) -> None:
  """The final builds of several kernels by `compiler` in one compiler run, each kernel's future
  getting the shared binary (and the disk cache a reference to it per kernel). If the batch fails (a kernel that does
  not compile), each kernel is built alone, so that each gets its own program or its own error."""
  try:
    on, st = PROFILER.active, PROFILER.now()
    assert compiler.compile_batch is not None, "only a compiler with compile_batch gets batches"
    try: lib: bytes | None = compiler.compile_batch([(sp.name, sp.src) for sp in specs])
    except Exception: lib = None
    if lib is not None:
      compiler.cache_batch([(sp.name, sp.src) for sp in specs], lib)
      if on and PROFILER.active:
        PROFILER.span(f"batch of {len(specs)} kernels", "compile", dev.device, st, PROFILER.now(),
                      kernels=[sp.name for sp in specs], src_bytes=sum(len(sp.src) for sp in specs),
                      thread=threading.current_thread().name)
      for sp, f in zip(specs, futs): f.set_result(with_symbol(lib, batch_symbol(sp.name, sp.src)))
      return
    for sp, f in zip(specs, futs):
      try: f.set_result(_build(sp, compiler))
      except Exception as e: f.set_exception(e)
  except BaseException as e:  # never leave a kernel waiting on a future nobody will set
    for f in futs:
      if not f.done(): f.set_exception(e)
    raise

def _quick(dev: Compiled, specs: list[ProgramSpec]) -> list[Any]:
  """One quick build of several kernels: a program for each."""
  assert dev.quick_build is not None
  on, st = PROFILER.active, PROFILER.now()
  prgs = dev.quick_build([(sp.name, sp.src) for sp in specs])
  if on and PROFILER.active:
    PROFILER.span(f"quick build of {len(specs)} kernels", "compile", dev.device, st, PROFILER.now(),
                  kernels=[sp.name for sp in specs], src_bytes=sum(len(sp.src) for sp in specs),
                  thread=threading.current_thread().name)
  return prgs

class CompiledRunner:
  """A kernel built for one device. Its program is built here, or comes from builds already under way: the optimized
  build, and maybe a quick one (one of a batch of kernels) that serves until the optimized program replaces it.
  `compiler` makes its final program: the device's optimized one behind a quick tier, else the one _compiler picks
  (decided here, once: a setting changed later doesn't move a kernel to another compiler's build)."""
  def __init__(self, spec: ProgramSpec, lib: bytes | None = None, optimized: Future[bytes] | None = None,
               quick: Future[list[Any]] | None = None, quick_index: int = 0, shifts: tuple[tuple[int, int], ...] = (),
               compiler: Compiler | None = None):
    self.spec = spec
    # (argument position, bytes): buffers whose address moves by that much on every call (codegen/offsets.py); a
    # buffer the program never reads (a load folded away: copysign's sign of an unsigned y) has no argument to move
    self.shifts = tuple((self.spec.globals.index(g), nbytes) for g, nbytes in shifts if g in self.spec.globals)
    self.dev = Device[spec.device]
    self.compiler = compiler or (self.dev.compiler if quick is not None else _compiler(self.dev, spec))
    self.var_names = [v.arg[0] for v in spec.vars if not v.arg[0].startswith("_")]
    # the Variables' dtypes, for the program to pass each as its width: only where one is int64 (() is all int32)
    dts = tuple(v.dtype for v in spec.vars if not v.arg[0].startswith("_"))
    self.var_dtypes = dts if any(d.itemsize == 8 for d in dts) else ()
    # GPU kernels launch with their work-group counts and sizes; C kernels loop over everything themselves
    self.launch = {} if spec.global_size is None else {"global_size": spec.global_size, "local_size": spec.local_size}
    self._optimized, self._quick, self._quick_index = optimized, quick, quick_index
    self.prg: Any = None
    # the program's ctypes function itself, once its argument types are set (a C kernel after its first call): the
    # untimed calls go straight to it, without the program object's Python call in between
    self._direct: Any = None
    if optimized is None: self.prg = self._program(_build(spec, self.compiler) if lib is None else lib)
  def _program(self, lib: bytes) -> Any: return self._wrap(self.dev.runtime(self.spec.name, lib))
  def _wrap(self, prg: Any) -> Any:
    if self.var_dtypes: prg.var_dtypes = self.var_dtypes  # (before its first call, which fixes its argument types)
    return _Shifted(prg, self.shifts) if self.shifts else prg
  def shifted(self, shifts: tuple[tuple[int, int], ...]) -> CompiledRunner:
    """A runner of this one's program (its builds, shared) on buffers whose addresses move by `shifts`."""
    if self._optimized is None and self._quick is None:  # built: from the disk cache (or built again, if not there)
      return CompiledRunner(self.spec, self.compiler.cached(self.spec.src), shifts=shifts, compiler=self.compiler)
    return CompiledRunner(self.spec, optimized=self._optimized, quick=self._quick, quick_index=self._quick_index,
                          shifts=shifts, compiler=self.compiler)
  def __call__(self, bufs: list[Buffer], var_vals: dict[str, int]) -> float:
    if self.prg is None or (self._optimized is not None and self._optimized.done()):
      self._settle()
    args = [bufs[i]._buf for i in self.spec.globals]
    if self._direct is not None and not (DEBUG.value >= 2 or PROFILER.active or VIZ.value):
      if self.var_names: self._direct(*args, *[var_vals[n] for n in self.var_names])
      else: self._direct(*args)
      return 0.0
    vals = tuple(var_vals[n] for n in self.var_names)
    if DEBUG >= 2 or PROFILER.active or VIZ:  # timed: the device's own timer on GPUs
      if self.launch: return self.prg(*args, vals=vals, wait=True, **self.launch)  # the device's own kernel timer
      st = time.perf_counter()
      self.prg(*args, vals=vals)
      return time.perf_counter() - st
    self.prg(*args, vals=vals, **self.launch)
    if not self.launch and (types := getattr(fxn := getattr(self.prg, "fxn", None), "argtypes", None)) is not None \
       and len(types) == len(args) + len(vals):
      self._direct = fxn
    return 0.0
  def _settle(self) -> None:
    """Take the optimized program if it is built (or if there is nothing else to wait for), else the quick one."""
    self._direct = None  # the program may change: the next call finds its function again
    opt = self._optimized
    if opt is not None and (opt.done() or self._quick is None):
      self._optimized = None
      try: lib = opt.result()
      except CancelledError:
        # a runner sharing this build took it over (finish), or it was dropped at exit: then the quick program stays
        if not _exiting: return self._take(_build(self.spec, self.compiler))
        if self.prg is None and self._quick is None: raise
      except Exception as e:
        if self.prg is None and self._quick is None: raise
        # the quick build of the same source worked: keep it, but say so (an optimizer crash in the compiler)
        warnings.warn(f"{self.spec.name}: the optimized build failed, the quick build stays: {e}", RuntimeWarning)
      else: return self._take(lib)
    if self.prg is None and self._quick is not None:
      try: self.prg = self._wrap(self._quick.result()[self._quick_index])
      except Exception:  # a batch fails as a whole: this kernel waits for its own build, which names its own error
        self._quick = None
        self._settle()
  def _take(self, lib: bytes) -> None:
    self.prg, self._quick = self._program(lib), None
  def finish(self) -> CompiledRunner:
    """Wait for the optimized program (a TinyJit records only those: its replays call them directly)."""
    if self._optimized is not None:
      # a background build still queued (behind others) is built now, here (a batch's futures are no pool's: kept)
      if self._quick is not None and self._optimized.cancel():
        self._optimized = _done(lambda: _build(self.spec, self.compiler))
      self._optimized.exception()  # waits for the build; its error, if any, is handled by _settle
      self._settle()
    elif self.prg is None: self._settle()
    return self

class _Shifted:
  """A program called with some of its buffers' addresses moved by a fixed number of bytes (codegen/offsets.py).
  It has no `fxn`: the engine and the JIT call it through __call__, which moves them."""
  def __init__(self, prg: Any, shifts: tuple[tuple[int, int], ...]): self.prg, self.shifts = prg, shifts
  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    moved = list(args)
    for pos, nbytes in self.shifts: moved[pos] += nbytes
    return self.prg(*moved, **kwargs)

def _done(fn: Any) -> Future:
  """A future already holding fn()'s result (or its error)."""
  f: Future = Future()
  try: f.set_result(fn())
  except Exception as e: f.set_exception(e)
  return f

class _Builds:
  """The builds a schedule starts on one device. With a quick tier, a big kernel (QUICK_MIN_SRC) gets a quick build
  of its own right away (in parallel with the lowering of the next kernels and the other builds), its optimized build
  queued in the background. Where the compiler batches, the other kernels are gathered up to BATCH_CHUNK bytes, one
  optimized build per batch (the schedule's last kernels split across the cores), those of little work in batches of
  their own for the light compiler (LIGHT_BUILD); QUICK_BUILD=2 gathers them into
  quick batches instead (QUICK_CHUNK). Otherwise each kernel gets its optimized build right away (in a pool when the
  compiler may run in threads, here otherwise)."""
  def __init__(self, dev: Compiled):
    self.dev, self.started_early = dev, False
    # the kernels gathered for a batch and their bytes of source, per compiler (the optimized one, the light one)
    self.batch: dict[Compiler, list[tuple[tuple[str, UOp], ProgramSpec]]] = {}
    self.size: dict[Compiler, int] = {}
    self.quick = dev.quick_build is not None and QUICK_BUILD.value >= 1
    self.quick_all = self.quick and QUICK_BUILD.value >= 2
    self.batches = dev.compiler.compile_batch is not None and dev.compiler.threadsafe
  def add(self, key: tuple[str, UOp], spec: ProgramSpec) -> None:
    batchable = self.dev.compiler.compile_batch is None or self.dev.compiler.batchable(spec.src)
    if self.quick_all:
      if not batchable or len(spec.src) >= QUICK_MIN_SRC: return self._tiered([(key, spec)])
      return self._gather(self.dev.compiler, key, spec, QUICK_CHUNK)
    # a kernel of little work is built once by the light compiler: no quick tier before it
    if (compiler := _compiler(self.dev, spec)) is self.dev.compiler and self.quick and len(spec.src) >= QUICK_MIN_SRC:
      return self._tiered([(key, spec)])
    if not self.batches or len(spec.src) >= BATCH_ALONE or not batchable: return self._optimized_only(key, spec)
    self._gather(compiler, key, spec, BATCH_CHUNK)
  def _gather(self, compiler: Compiler, key: tuple[str, UOp], spec: ProgramSpec, chunk: int) -> None:
    self.batch.setdefault(compiler, []).append((key, spec))
    self.size[compiler] = size = self.size.get(compiler, 0) + len(spec.src)
    if size >= chunk or self._early(): self._start_batches(compiler, 1)
  def _early(self) -> bool:
    """Whether the schedule's first small kernel starts building now, alone: when no first build is in flight, a
    core would idle while the next kernels are lowered, and the first kernel to run waits for its program (conv2d's
    first call: its input's padding kernel). Once per schedule: later ones gather into batches."""
    if self.started_early or _first_in_flight: return False
    self.started_early = True
    return True
  def _start_batches(self, compiler: Compiler, n: int) -> None:
    """The kernels gathered for `compiler` as up to n batches of about equal source size, each built in the pool."""
    batch = self.batch.pop(compiler, [])
    self.size.pop(compiler, None)
    groups: list[list[tuple[tuple[str, UOp], ProgramSpec]]] = [[] for _ in range(max(1, min(n, len(batch))))]
    sizes = [0] * len(groups)
    for key, spec in sorted(batch, key=lambda ks: -len(ks[1].src)):  # biggest first, each to the lightest
      i = sizes.index(min(sizes))
      groups[i].append((key, spec))
      sizes[i] += len(spec.src)
    for g in groups:
      if self.quick_all: self._tiered(g)
      elif len(g) == 1: self._optimized_only(*g[0])
      elif g:
        futs: list[Future[bytes]] = [Future() for _ in g]
        _submit_first(_build_batch, self.dev, compiler, [spec for _, spec in g], futs)
        for (key, spec), f in zip(g, futs): _runners[key] = CompiledRunner(spec, optimized=f, compiler=compiler)
  def flush(self) -> None:
    for compiler, size in list(self.size.items()):
      self._start_batches(compiler, min(_cores(), max(1, size // BATCH_SPLIT)))
  def _tiered(self, group: list[tuple[tuple[str, UOp], ProgramSpec]]) -> None:
    """One quick build of the group's kernels now, each kernel's optimized build queued in the background."""
    fut = _submit_first(_quick, self.dev, [sp for _, sp in group])
    for i, (key, spec) in enumerate(group):
      opt = _pool("background").submit(_background_build, spec)
      _runners[key] = CompiledRunner(spec, optimized=opt, quick=fut, quick_index=i)
  def _optimized_only(self, key: tuple[str, UOp], spec: ProgramSpec) -> None:
    compiler = _compiler(self.dev, spec)
    if compiler.threadsafe:
      _runners[key] = CompiledRunner(spec, optimized=_submit_first(_build, spec, compiler), compiler=compiler)
    else: _runners[key] = CompiledRunner(spec, compiler=compiler)

def _prepare(items: list[ScheduleItem]) -> None:
  """Lower the kernels of `items` that have no runner yet and start their builds, before any of them runs."""
  for si in items:  # the common case, every kernel built before: nothing else to set up
    if si.ast.op is not Ops.COPY and (si.bufs[0].device, si.ast) not in _runners: break
  else: return
  builds: dict[str, _Builds] = {}
  seen: set[tuple[str, UOp]] = set()  # a kernel run twice in a schedule is lowered once (its runner may be batched)
  moved: list[tuple[tuple[str, UOp], tuple[str, UOp], tuple[tuple[int, int], ...]]] = []
  for si in items:
    if si.ast.op is Ops.COPY or (key := (si.bufs[0].device, si.ast)) in _runners or key in seen: continue
    seen.add(key)
    if getattr(Device[key[0]].allocator, "host_addresses", False):
      # kernels that differ only in the offsets they read buffers at: one program, the addresses shifted per kernel
      ast, shifts = split_offsets(key[1])
      if shifts:
        moved.append((key, key := (key[0], ast), shifts))
        if key in _runners or key in seen: continue
        seen.add(key)
    spec = _lower(*key)
    dev = Device[key[0]]
    st = PROFILER.now() if PROFILER.active else 0.0
    if (lib := (compiler := _compiler(dev, spec)).cached(spec.src)) is not None:
      if PROFILER.active:
        PROFILER.span(spec.name, "compile", key[0], st, PROFILER.now(), src_bytes=len(spec.src), cached=True)
      _runners[key] = CompiledRunner(spec, lib, compiler=compiler)
    else:
      if (b := builds.get(key[0])) is None: b = builds[key[0]] = _Builds(dev)
      b.add(key, spec)
  for b in builds.values(): b.flush()
  for key, base, shifts in moved:
    if (r := _runners.get(base)) is not None: _runners[key] = r.shifted(shifts)

class _RunnerCache(OrderedDict):
  """The runners built in this process, least recently used first, at most RUNNER_CACHE of them. Every loaded program
  holds a few memory mappings (a shared library, JIT code pages) and the kernel's graph: a long-running process that
  meets ever new shapes (a server, a test suite) would otherwise reach the kernel's limit on mappings (65530) and fail
  to load the next library. An evicted runner is unloaded once nothing else (a TinyJit's capture) holds it; meeting
  its kernel again loads it from the disk cache."""
  def get(self, key: Any, default: Any = None) -> Any:
    if (r := super().get(key)) is None: return default
    self.move_to_end(key)
    return r
  def __setitem__(self, key: Any, value: Any) -> None:
    super().__setitem__(key, value)
    while len(self) > max(RUNNER_CACHE.value, 1): self.popitem(last=False)

RUNNER_CACHE = ContextVar("RUNNER_CACHE", 2048)
_runners: _RunnerCache = _RunnerCache()
def get_runner(device: str, ast: UOp) -> CompiledRunner:
  # a BEAM-searched kernel is another program: under BEAM (a JITBEAM capture) one built without it isn't reused
  key = (device, ast) if not (beam := BEAM.value) else (device, ast, beam)
  if (r := _runner_get(_runners, key)) is None:
    r = _runners[key] = CompiledRunner(_lower(device, ast))
    return r
  _runners.move_to_end(key)  # (_RunnerCache.get, without its two Python calls: this runs per kernel launch)
  return r
_runner_get = OrderedDict.get

def _copy(dst: Buffer, src: Buffer) -> None:
  dst.allocate()
  # two devices of one kind that copy between themselves without the host (NULL to NULL:1: nothing to move)
  if (transfer := getattr(dst.allocator, "transfer", None)) is not None and type(src.allocator) is type(dst.allocator):
    transfer(dst._buf, src._buf, dst.nbytes)
    return
  if hasattr(dst.allocator, "as_memoryview"):  # host memory: copy straight into it, no staging copy
    src.copyout(dst.allocator.as_memoryview(dst._buf, dst.nbytes))
    return
  mv = memoryview(bytearray(src.nbytes))
  src.copyout(mv)
  dst.copyin(mv)

class CopyRunner:
  """A COPY between devices, as a runner the JIT can record and replay like a kernel."""
  def __call__(self, bufs: list[Buffer], var_vals: dict[str, int]) -> float:
    _copy(bufs[0], bufs[1])
    return 0.0
copy_runner = CopyRunner()

def run_schedule(items: list[ScheduleItem]) -> None:
  _prepare(items)
  capturing = recorder.active() if CAPTURING.value else None  # a TinyJit's recorder, while one captures
  # the settings read once, through .value: `if FLAG:` and `FLAG >= 2` are Python calls, per kernel
  debug, viz_on, nan_check = DEBUG.value, VIZ.value, DEBUG_NAN.value
  plain = capturing is None and debug < 2 and not viz_on and not nan_check and not PROFILER.active
  for si in items:
    for b in si.bufs:
      if b._buf is None: b.allocate()
    if si.ast.op is Ops.COPY:
      if capturing is not None: capturing.kernel(copy_runner, si.bufs, {})
      st = PROFILER.now() if PROFILER.active else 0.0
      _copy(si.bufs[0], si.bufs[1])
      if PROFILER.active:
        PROFILER.span(f"copy {si.bufs[1].device} -> {si.bufs[0].device}", "copy", si.bufs[0].device, st, PROFILER.now(),
                      bytes=si.bufs[0].nbytes)
      GlobalCounters.global_mem += si.bufs[0].nbytes
      if debug >= 2:
        print(f"{colored('copy', 'yellow')} {si.bufs[0].nbytes:>10d} bytes {si.bufs[1].device} -> {si.bufs[0].device}")
      continue
    device = si.bufs[0].device
    runner = get_runner(device, si.ast)
    var_vals = {v.arg[0]: val for v, val in si.var_vals} if si.var_vals else {}
    if plain and (fxn := runner._direct) is not None and runner._optimized is None:
      # nothing watches this run (no capture, DEBUG, VIZ, profiler or NaN check) and the kernel's program is final:
      # its ctypes function called here, without the runner's call and its checks of the same settings
      args = [si.bufs[i]._buf for i in runner.spec.globals]
      if runner.var_names: fxn(*args, *[var_vals[n] for n in runner.var_names])
      else: fxn(*args)
    else:
      if capturing is not None: capturing.kernel(runner.finish(), si.bufs, var_vals)
      st = PROFILER.now() if PROFILER.active else 0.0
      et = runner(list(si.bufs), var_vals)
      if PROFILER.active: _profile_kernel(runner, si, st, et)
      if viz_on: viz.kernel_ran(device, si.ast, et)
      if nan_check: check_kernel(runner.spec.name, si.bufs, runner.spec.outs)
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += runner.spec.op_estimate
    mem = 0  # (the bytes it touches, counted here rather than in a comprehension: a call of its own per kernel)
    for i, n in _elements_touched(si.ast):
      b = si.bufs[i]
      mem += (n if n.__class__ is int and n < b.size else b.size) * b.dtype.itemsize
    GlobalCounters.global_mem += mem
    if debug >= 2:  # (never the direct call above: it is taken only below DEBUG=2)
      GlobalCounters.time_sum_s += et
      sp = runner.spec
      gflops = sp.op_estimate / et * 1e-9 if et > 0 else 0
      gbs = sum(b.nbytes for b in si.bufs) / et * 1e-9 if et > 0 else 0
      print(f"*** {device:7s} {GlobalCounters.kernel_count:4d} {sp.name:32s} {et*1e6:9.2f} us  {gflops:8.2f} GFLOPS "
            f"{gbs:8.2f} GB/s"
            + (f"  opts {list(sp.applied_opts)}" if DEBUG >= 3 else ""))

@functools.lru_cache(maxsize=4096)
def _elements_touched(ast: UOp) -> tuple[tuple[int, Any], ...]:
  """(buffer index, elements of it the kernel reads or writes) per buffer of a kernel, from its loads' and stores'
  views (each view's distinct elements: its unmasked extent along the dims it moves along), for GlobalCounters'
  global_mem: a write of a slice touches the slice, not the buffer. The caller caps each at the buffer's size."""
  n: dict[int, Any] = {}
  for u in ast.toposort():
    if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.DEFINE_GLOBAL:
      i, v = u.src[0].arg, u.src[1].arg.views[0]
      ext = [hi - lo for lo, hi in v.mask] if v.mask is not None else list(v.shape)
      n[i] = n.get(i, 0) + prod(e for e, st in zip(ext, v.strides) if st != 0)
  return tuple(n.items())

def _profile_kernel(runner: CompiledRunner, si: ScheduleItem, st: float, et: float) -> None:
  """A kernel's span: its measured time (the device's own timer on GPUs), placed where the call started."""
  sp = runner.spec
  nbytes = sum(b.nbytes for b in si.bufs)
  rate = (lambda x: round(x / et * 1e-9, 3)) if et > 0 else (lambda x: 0)
  PROFILER.span(sp.name, "kernel", si.bufs[0].device, st, st + et, flops=sp.op_estimate, bytes=nbytes,
                global_size=sp.global_size, local_size=sp.local_size, gflops=rate(sp.op_estimate), gbs=rate(nbytes))

# ***** tinygrad's LINEAR form of a schedule: Tensor.linear_with_vars() makes one, run_linear() runs it *****

def linear_of(items: list[ScheduleItem]) -> UOp:
  """A schedule as a LINEAR UOp with one CALL per item, in order. A CALL's src[0] is the kernel's AST (a SINK) or the
  COPY, src[1:] a BUFFER node per buffer it touches (outputs first, `.buffer` gives the Buffer), and its arg the
  ScheduleItem itself (so the LINEAR can be run later): `len(linear.src)` counts the kernels and copies."""
  from attograd.engine.buffers import new_buffer_uop
  return UOp(Ops.LINEAR, dtypes.void, tuple(
    UOp(Ops.CALL, dtypes.void, (si.ast, *(new_buffer_uop(b.device, b.size, b.dtype, b) for b in si.bufs)), arg=si)
    for si in items))

def _linear_items(linear: UOp, var_vals: dict[str, int] | None = None) -> list[ScheduleItem]:
  if not isinstance(linear, UOp) or linear.op is not Ops.LINEAR:
    raise TypeError(f"run_linear: expected the LINEAR UOp of Tensor.linear_with_vars(), got {linear!r:.80}")
  items: list[ScheduleItem] = [c.arg if isinstance(c.arg, ScheduleItem) else _call_item(c) for c in linear.src]
  if var_vals:  # values given by name replace those bound when the schedule was made
    items = [ScheduleItem(si.ast, si.bufs, tuple((v, var_vals.get(v.arg[0], val)) for v, val in si.var_vals))
             for si in items]
  return items

def _call_item(c: UOp) -> ScheduleItem:
  """The item of a CALL built by hand (UOp.call, tinygrad's): a kernel body over BUFFER nodes with Buffers."""
  from attograd.engine.buffers import buffers
  if c.op is not Ops.CALL or not isinstance(c.arg, CallInfo) or c.src[0].op is not Ops.SINK or \
     any(b.op is not Ops.BUFFER or b not in buffers for b in c.src[1:]):
    raise TypeError("run_linear: runs the LINEAR of Tensor.linear_with_vars(), or CALLs of a kernel body (a SINK) over "
                    "BUFFER nodes that have Buffers (UOp.new_buffer); a captured TinyJit's LINEAR "
                    "(jit.captured.linear) runs by calling the jitted function")
  return ScheduleItem(c.src[0], tuple(buffers[b] for b in c.src[1:]))

def compile_linear(linear: UOp) -> UOp:
  """Lower and build every kernel of a LINEAR (taken from the caches where built before), running none; returns it."""
  _prepare(_linear_items(linear))
  return linear

def estimate_uop(call: UOp) -> Estimates:
  """What one CALL of a LINEAR costs (tinygrad's estimate_uop): a kernel's Estimates (ops, lds, mem) from its built
  program (the one compile_linear or a run made, else built now), a copy's bytes."""
  if call.op is not Ops.CALL: raise TypeError(f"estimate_uop: expected a CALL of a LINEAR, got {call.op}")
  if (ast := call.src[0]).op is Ops.PROGRAM: return ast.src[0].arg.estimates or Estimates()
  si = _linear_items(UOp(Ops.LINEAR, dtypes.void, (call,)))[0]
  if si.ast.op is Ops.COPY: return Estimates(lds=(n := si.bufs[0].nbytes), mem=n)
  if si.ast.op is not Ops.SINK: return Estimates()
  dev = si.bufs[0].device
  spec = r.spec if (r := _runners.get((dev, si.ast))) is not None else get_program(si.ast, Device[dev].renderer)
  return spec.estimates

def run_linear(linear: UOp, var_vals: dict[str, int] | None = None, update_stats: bool = True) -> None:
  """Run the kernels and copies of a LINEAR made by Tensor.linear_with_vars(), in order; `var_vals` (Variable name to
  value) overrides the values bound when it was made. update_stats=False leaves GlobalCounters as they were."""
  items = _linear_items(linear, var_vals)
  if update_stats: return run_schedule(items)
  saved = {k: getattr(GlobalCounters, k) for k in ("global_ops", "global_mem", "time_sum_s", "kernel_count")}
  try: run_schedule(items)
  finally:
    for k, v in saved.items(): setattr(GlobalCounters, k, v)
