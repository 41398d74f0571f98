"""Building a schedule's kernels (engine/realize.py): all of a schedule's new kernels are lowered and their builds
started before the first one runs, compiles in parallel; on CPU a big first build starts as one quick -O1 build of a
batch of kernels, and the optimized build replaces it when ready (only that one is cached on disk)."""
from __future__ import annotations
import os, subprocess, threading
from typing import Any, Iterator
import numpy as np
import pytest
from attograd import Tensor, TinyJit
from attograd.device import Device
from attograd.engine import realize
from attograd.schedule import create_schedule
from attograd.helpers import Context
from attograd.codegen import get_program
from attograd.runtime.ops_cpu import ClangCompiler

@pytest.fixture
def empty_cache(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
  """No kernel built before: an empty disk cache and no runners in this process."""
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))
  monkeypatch.setattr(realize, "_runners", realize._RunnerCache())
  yield
  for r in realize._runners.values(): r.finish()  # no build left running into the next test

@pytest.fixture
def held_back(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
  """Optimized builds wait until the returned event is set: the quick programs are what runs until then."""
  gate, build = threading.Event(), realize._build
  def slow_build(spec: Any, *args: Any) -> bytes:
    assert gate.wait(60), "the test never released the optimized builds"
    return build(spec, *args)
  monkeypatch.setattr(realize, "_build", slow_build)
  yield gate
  gate.set()

def _graph(a: Tensor, b: Tensor) -> Tensor:
  """Three kernels: a product, its row sums over a broadcast, a scaled copy."""
  c = (a * b + 1).contiguous()
  return (c.sum(axis=1, keepdim=True) * c).contiguous() * 0.5

def _ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  c = a * b + 1
  return c.sum(axis=1, keepdims=True) * c * 0.5

def _runners_of(t: Tensor) -> list[realize.CompiledRunner]:
  items, _ = create_schedule([t.uop])
  keys = [(si.bufs[0].device, si.ast) for si in items]
  return [realize._runners[k] for k in keys if k in realize._runners]

def test_quick_build_matches_optimized() -> None:
  # one -O1 library for several kernels, two of them with the same name: each program computes what its own -O3 does
  dev = Device["CPU"]
  a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.full((3, 4), 0.25, np.float32)
  kernels = []
  for t in (Tensor(a) * Tensor(b) + 1, Tensor(a) - Tensor(b), (Tensor(a) * 3).sum(axis=0)):
    items, _ = create_schedule([t.uop])
    si = [si for si in items if si.ast.op.name == "SINK"][-1]
    kernels.append((si, get_program(si.ast, dev.renderer)))
  assert kernels[0][1].name == kernels[1][1].name  # same loops, same name: the batch must keep them apart
  assert dev.quick_build is not None
  quick = dev.quick_build([(sp.name, sp.src) for _, sp in kernels])
  for (si, sp), prg in zip(kernels, quick):
    outs = []
    for p in (prg, dev.runtime(sp.name, dev.compiler.compile(sp.src))):
      for b_ in si.bufs: b_.allocate()
      p(*[si.bufs[i]._buf for i in sp.globals])
      outs.append(np.frombuffer(si.bufs[0].copyout(memoryview(bytearray(si.bufs[0].nbytes))), np.float32).copy())
    np.testing.assert_array_equal(outs[0], outs[1])

def test_quick_build_rounds_as_optimized() -> None:
  # random floats, where a fused and an unfused a*b+c differ in the last bit: -O1 (quick) and -O3 (optimized) must
  # give the same bits, or a program swapped in mid-step changes values a later kernel compares with (a max-pool's
  # gradient: NaN in the MNIST run with QUICK_BUILD=2)
  dev = Device["CPU"]
  rng = np.random.default_rng(0)
  a, b, c = (Tensor(rng.standard_normal(4099).astype(np.float32)) for _ in range(3))
  t = ((a * b + c) * a - b * c) * (a * c + b)
  items, _ = create_schedule([t.uop])
  si = [si for si in items if si.ast.op.name == "SINK"][-1]
  sp = get_program(si.ast, dev.renderer)
  assert dev.quick_build is not None
  outs = []
  for p in (dev.quick_build([(sp.name, sp.src)])[0], dev.runtime(sp.name, dev.compiler.compile(sp.src))):
    for b_ in si.bufs: b_.allocate()
    p(*[si.bufs[i]._buf for i in sp.globals])
    outs.append(np.frombuffer(si.bufs[0].copyout(memoryview(bytearray(si.bufs[0].nbytes))), np.float32).copy())
  np.testing.assert_array_equal(outs[0], outs[1])

def test_quick_tier_serves_until_optimized(empty_cache: None, held_back: threading.Event) -> None:
  a, b = np.random.default_rng(0).standard_normal((2, 2, 16, 16), dtype=np.float32)
  with Context(QUICK_BUILD=2):
    out = _graph(Tensor(a), Tensor(b))
    np.testing.assert_allclose(out.numpy(), _ref(a, b), rtol=1e-5, atol=1e-5)
    runners = _runners_of(_graph(Tensor(a), Tensor(b)))
  assert len(runners) >= 2
  dev = Device["CPU"]
  for r in runners:
    # ran from the quick batch (its symbol is not the kernel's name); nothing is on disk yet
    assert r._optimized is not None and r.prg is not None and r.prg.fxn.__name__ != r.spec.name
    assert dev.compiler.cached(r.spec.src) is None
  held_back.set()
  for r in runners:
    r.finish()
    assert r._optimized is None and r.prg.fxn.__name__ == r.spec.name  # the optimized program replaced it
    assert dev.compiler.cached(r.spec.src) is not None  # and only it went to the disk cache
  np.testing.assert_allclose(_graph(Tensor(a), Tensor(b)).numpy(), _ref(a, b), rtol=1e-5, atol=1e-5)

def test_optimized_program_swapped_in_when_ready(empty_cache: None) -> None:
  a, b = np.random.default_rng(1).standard_normal((2, 3, 8, 8), dtype=np.float32)
  with Context(QUICK_BUILD=2):
    _graph(Tensor(a), Tensor(b)).realize()
    runners = _runners_of(_graph(Tensor(a), Tensor(b)))
    for r in runners:  # (an optimized build may even have beaten its quick batch: then it ran already)
      assert r._optimized is None or r._optimized.exception(timeout=120) is None
    np.testing.assert_allclose(_graph(Tensor(a), Tensor(b)).numpy(), _ref(a, b), rtol=1e-5, atol=1e-5)
  # a run after the builds finished picked them up without anyone waiting on them
  assert all(r._optimized is None and r.prg.fxn.__name__ == r.spec.name for r in runners)

def test_jit_records_only_optimized_programs(empty_cache: None) -> None:
  @TinyJit
  def f(x: Tensor, y: Tensor) -> Tensor: return _graph(x, y).realize()
  a, b = np.random.default_rng(2).standard_normal((2, 4, 8), dtype=np.float32)
  with Context(QUICK_BUILD=2):
    for _ in range(3): out = f(Tensor(a), Tensor(b))
  assert f.captured is not None
  rec = [r for r in realize._runners.values() if isinstance(r, realize.CompiledRunner)]
  assert rec and all(r._optimized is None and r.prg.fxn.__name__ == r.spec.name for r in rec)
  np.testing.assert_allclose(out.numpy(), _ref(a, b), rtol=1e-5, atol=1e-5)

def test_failed_quick_batch_waits_for_own_builds(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  def broken(kernels: list) -> list: raise RuntimeError("CPU: the C compiler failed (a test)")
  monkeypatch.setattr(Device["CPU"], "quick_build", broken)
  a, b = np.random.default_rng(3).standard_normal((2, 5, 7), dtype=np.float32)
  with Context(QUICK_BUILD=2):
    np.testing.assert_allclose(_graph(Tensor(a), Tensor(b)).numpy(), _ref(a, b), rtol=1e-5, atol=1e-5)

def test_compile_errors_still_name_the_kernel(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # a build in the pool that fails raises at the kernel's turn to run, with the compiler's own message
  def broken(self: ClangCompiler, src: str) -> bytes: raise RuntimeError("CPU: the C compiler failed: (a test)")
  monkeypatch.setattr(ClangCompiler, "compile", broken)
  with Context(QUICK_BUILD=0), pytest.raises(RuntimeError, match="the C compiler failed"):
    (Tensor([1.0, 2.0]) * 3.5 + 0.125).realize()

@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="parallel builds need two cores")
def test_schedule_builds_in_parallel(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # two compiles must be in flight at once: each waits at a barrier for the other (a serial build never gets past it)
  barrier, compile_, seen = threading.Barrier(2, timeout=60), ClangCompiler.compile, []
  def meeting(self: ClangCompiler, src: str) -> bytes:
    seen.append(src)
    if len(seen) <= 2:  # the first two meet; later ones go straight through
      try: barrier.wait()
      except threading.BrokenBarrierError: raise AssertionError("a schedule's kernels were built one after another")
    return compile_(self, src)
  monkeypatch.setattr(ClangCompiler, "compile", meeting)
  a, b = np.random.default_rng(4).standard_normal((2, 3, 4), dtype=np.float32)
  with Context(QUICK_BUILD=0):
    np.testing.assert_allclose(_graph(Tensor(a), Tensor(b)).numpy(), _ref(a, b), rtol=1e-5, atol=1e-5)

def test_exit_drops_queued_background_builds(tmp_path: Any) -> None:
  # a short script must not wait at exit for every optimized build still queued behind its quick ones: those under
  # way finish (and are cached), the queued ones are dropped
  import subprocess, sys
  log = tmp_path / "started.txt"
  code = (f"import os, time\nfrom attograd import Tensor\nfrom attograd.engine import realize\n"
          f"from attograd.helpers import Context\nbuild = realize._build\n"
          f"def slow(spec, *args):\n  open({str(log)!r}, 'a').write('x')\n  time.sleep(0.5)\n"
          f"  return build(spec, *args)\n"
          f"realize._build = slow\n"
          f"with Context(QUICK_BUILD=2):\n"
          f"  x = Tensor.arange(64).float()\n"
          f"  for i in range(40): x = (x * {1.5} + i).contiguous()\n"
          f"  x.realize()\n"
          # background builds start once the first builds are done: wait for one to be under way, then exit
          f"for _ in range(600):\n"
          f"  if os.path.exists({str(log)!r}): break\n"
          f"  time.sleep(0.1)\n")
  env = {**os.environ, "ATTOGRAD_CACHE_DIR": str(tmp_path / "cache")}
  subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
  assert 0 < len(log.read_text()) < 40

def test_background_builds_wait_for_first_builds(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # an optimized build behind a quick tier must not take a core from a first build that a kernel waits for: it
  # starts only once no first build is in flight
  gate, quick, built = threading.Event(), realize._quick, []
  def held_quick(dev: Any, specs: list) -> list:
    assert gate.wait(60), "the test never released the quick builds"
    return quick(dev, specs)
  build = realize._build
  monkeypatch.setattr(realize, "_quick", held_quick)
  monkeypatch.setattr(realize, "_build", lambda spec, *args: built.append(spec.name) or build(spec, *args))
  x, ref = _chain(4, seed=9)
  items, _ = create_schedule([x.uop])
  with Context(QUICK_BUILD=2): realize._prepare(items)
  runners = [r for r in realize._runners.values() if r._quick is not None]
  assert runners
  threading.Event().wait(0.5)
  assert built == []  # the quick builds are still in flight: no optimized build started
  gate.set()
  for r in runners: r.finish()
  assert sorted(built) == sorted(r.spec.name for r in runners)
  np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)

def test_background_builds_wait_for_a_quiet_moment(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # between two schedules of one program there are briefly no first builds in flight; an optimized build started
  # then held up the next schedule's first builds (MNIST's first step: a 2.9 s -O3 build). They start only once none
  # has been in flight for BACKGROUND_QUIET seconds
  import time
  monkeypatch.setattr(realize, "BACKGROUND_QUIET", 1.0)
  started: list[float] = []
  build = realize._build
  monkeypatch.setattr(realize, "_build", lambda spec, *args: started.append(time.monotonic()) or build(spec, *args))
  x, ref = _chain(3, seed=16)
  with Context(QUICK_BUILD=2): np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)  # on the quick programs
  quiet_from = realize._last_first_done
  assert quiet_from > 0
  for _ in range(600):
    if started: break
    time.sleep(0.05)
  assert started and min(started) >= quiet_from + 1.0 - 0.01, (min(started) - quiet_from) if started else None

def test_finish_builds_a_queued_background_build_now(empty_cache: None) -> None:
  # a TinyJit capture waits for a kernel's optimized program: it must not wait behind every background build queued
  # before it (MNIST: seconds of -O3), nor forever when the background workers are busy
  pool, gate = realize._pool("background"), threading.Event()
  blockers = [pool.submit(gate.wait, 300) for _ in range(pool._max_workers)]
  try:
    x, ref = _chain(3, seed=10)
    items, _ = create_schedule([x.uop])
    with Context(QUICK_BUILD=2): realize._prepare(items)
    runners = [r for r in realize._runners.values() if r._quick is not None]
    assert runners
    done = threading.Thread(target=lambda: [r.finish() for r in runners])
    done.start()
    done.join(60)
    assert not done.is_alive(), "finish() waited behind the busy background workers"
    for r in runners: assert r._optimized is None and r.prg.fxn.__name__ == r.spec.name  # the optimized program
    np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)
  finally:
    gate.set()
    for b in blockers: b.result()

def test_big_kernels_are_tiered_by_default(empty_cache: None, monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Any) -> None:
  # QUICK_BUILD=1 (the default): a kernel of QUICK_MIN_SRC bytes of source or more starts from a quick build, a
  # smaller one gets its optimized build only (kernels of little work get their light build only: not here)
  assert realize.QUICK_BUILD.value == 1
  monkeypatch.setattr(realize, "LIGHT_OPS", -1)
  for min_src, tiered in ((1 << 30, False), (0, True)):
    monkeypatch.setattr(realize, "QUICK_MIN_SRC", min_src)
    monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path / str(min_src)))  # nothing built before, on disk either
    realize._runners.clear()
    x, ref = _chain(2, seed=11)
    items, _ = create_schedule([x.uop])
    realize._prepare(items)
    runners = list(realize._runners.values())
    assert runners and all((r._quick is not None) == tiered for r in runners)
    np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)
    for r in runners: r.finish()

def test_buffers_dying_on_compile_threads_are_freed_by_the_next_allocation() -> None:
  # the garbage collector may finalize a Buffer on a compile thread; its memory goes back to the allocator only on
  # the next allocation's thread (allocators are not thread-safe)
  from attograd import dtypes
  from attograd.device import Buffer, _deferred_frees
  freed: list[int] = []
  class Spy:
    def free(self, buf: Any, nbytes: int) -> None: freed.append(nbytes)
  def on_compile_thread() -> None:
    realize._build_thread()
    b = Buffer("CPU", 8, dtypes.float32)
    b._buf, b.allocator = 1, Spy()  # a stand-in for memory: only its free is watched
    del b
  t = threading.Thread(target=on_compile_thread)
  t.start()
  t.join()
  assert freed == [] and len(_deferred_frees) == 1
  Buffer("CPU", 4, dtypes.float32).allocate()
  assert freed == [32] and not _deferred_frees

def _chain(n: int, seed: int = 5) -> tuple[Tensor, np.ndarray]:
  """n small kernels in one schedule, each a different op (so each is a new kernel with a distinct source)."""
  xn = np.random.default_rng(seed).standard_normal(64).astype(np.float32)
  x, ref = Tensor(xn), xn.copy()
  for i in range(n):
    x = (x * (1.0 + i / 8) + i).contiguous()
    ref = ref * np.float32(1.0 + i / 8) + np.float32(i)
  return x, ref

def _count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
  """The sources of every C compiler run from now on (ClangCompiler.compile, counted and then run)."""
  runs: list[str] = []
  compile_ = ClangCompiler.compile
  def counting(self: ClangCompiler, src: str) -> bytes:
    runs.append(src)
    return compile_(self, src)
  monkeypatch.setattr(ClangCompiler, "compile", counting)
  return runs

def test_schedule_of_new_kernels_costs_few_compiler_runs(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # 12 new kernels: one compiler run per batch (at most one per core here: the sources are small, and the first kernel
  # may start alone while the others are lowered), not one per kernel
  runs = _count_compiles(monkeypatch)
  x, ref = _chain(12)
  with Context(QUICK_BUILD=0): np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)
  assert 1 <= len(runs) <= len(os.sched_getaffinity(0)) + 1, len(runs)
  # each kernel's disk entry names the batch's binary: a new process (no runners) loads them without compiling
  realize._runners.clear()
  runs.clear()
  x, ref = _chain(12)
  with Context(QUICK_BUILD=0): np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)
  assert runs == []

def test_kernels_of_a_batch_share_one_library(empty_cache: None) -> None:
  x, ref = _chain(6, seed=6)
  with Context(QUICK_BUILD=0): np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)
  libs = {id(r.finish().prg.lib) for r in realize._runners.values()}
  assert len(libs) <= len(os.sched_getaffinity(0)) + 1  # one per batch (the first kernel's alone), loaded once

def test_failed_batch_builds_each_kernel_alone(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # a batch that does not compile (say one kernel the compiler rejects) costs no kernel its program: each is built
  # alone, and gets its own program or its own error
  def broken(self: ClangCompiler, kernels: list) -> bytes: raise RuntimeError("CPU: the C compiler failed (a test)")
  monkeypatch.setattr(ClangCompiler, "compile_batch", broken)
  x, ref = _chain(8, seed=7)
  with Context(QUICK_BUILD=0): np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)

def test_a_batch_missing_from_the_cache_is_rebuilt(empty_cache: None, tmp_path: Any) -> None:
  import shutil
  x, ref = _chain(5, seed=8)
  with Context(QUICK_BUILD=0): np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)
  assert (tmp_path / "batch").is_dir()
  shutil.rmtree(tmp_path / "batch")  # another process cleaned it: the kernels' references now lead nowhere
  realize._runners.clear()
  x, ref = _chain(5, seed=8)
  with Context(QUICK_BUILD=0): np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)

def test_a_kernel_twice_in_a_schedule_is_lowered_once(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # the same kernel on two inputs: its runner may still wait in a batch when the second one comes, which must not
  # lower (and build) it again
  lowered: list[Any] = []
  lower = realize._lower
  monkeypatch.setattr(realize, "_lower", lambda device, ast: lowered.append(ast) or lower(device, ast))
  xn, yn = np.arange(16, dtype=np.float32), np.ones(16, np.float32)
  a, b = (Tensor(xn) * 3 + 1).contiguous(), (Tensor(yn) * 3 + 1).contiguous()
  with Context(QUICK_BUILD=0): Tensor.realize(a, b)
  np.testing.assert_allclose(a.numpy(), xn * 3 + 1)
  np.testing.assert_allclose(b.numpy(), yn * 3 + 1)
  assert len(lowered) == len(set(lowered)) == 1

def test_first_small_kernel_builds_while_the_rest_are_lowered(empty_cache: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
  # the schedule's first kernel is the first to run: its build starts before the next kernel is lowered, not after
  # the whole schedule's lowering (conv2d's first call waited for its input padding's program)
  lowered: list[Any] = []
  lower = realize._lower
  def watching(device: str, ast: Any) -> Any:
    if lowered: assert (device, lowered[0]) in realize._runners, "the first kernel's build waited for the others"
    lowered.append(ast)
    return lower(device, ast)
  monkeypatch.setattr(realize, "_lower", watching)
  x, ref = _chain(4, seed=12)
  with Context(QUICK_BUILD=0): np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)
  assert len(lowered) == 4

# ***** kernels that differ only in the offset they read a buffer at: one program (codegen/offsets.py) *****

def _layers(n: int = 4, seed: int = 13) -> tuple[Tensor, np.ndarray, Tensor, np.ndarray]:
  """Weights of n layers stacked in one buffer (each layer a view at layer * 64 * 64), and an input."""
  rng = np.random.default_rng(seed)
  wn, xn = rng.standard_normal((n, 64, 64), dtype=np.float32), rng.standard_normal((8, 64), dtype=np.float32)
  return Tensor(wn).realize(), wn, Tensor(xn).realize(), xn

def test_layers_of_a_stacked_weight_share_one_program(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # GPT-2's linear layers read one packed weight at layer * size: eight builds of the same matmul, differing only in
  # that constant. One schedule of four such kernels lowers one and builds one; each runs on its own layer
  lowered: list[Any] = []
  lower = realize._lower
  monkeypatch.setattr(realize, "_lower", lambda device, ast: lowered.append(ast) or lower(device, ast))
  w, wn, x, xn = _layers()
  outs = [(x @ w[i]).contiguous() for i in range(4)]
  Tensor.realize(*outs)
  for i, o in enumerate(outs): np.testing.assert_allclose(o.numpy(), xn @ wn[i], rtol=1e-4, atol=1e-4)
  assert len(lowered) == 1, [lower("CPU", a).name for a in lowered]
  shifted = [r for r in realize._runners.values() if r.shifts]
  assert sorted(r.shifts[0][1] for r in shifted) == [i * 64 * 64 * 4 for i in range(1, 4)]

def test_a_later_layer_reuses_the_program_built_before(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # the layers one schedule at a time: layer 0's program (built, or still building) serves the others, shifted;
  # also with a quick tier whose optimized build is taken over by one runner while another still waits on it
  runs: list[str] = []
  compile_ = ClangCompiler._compile_with
  def counting(self: ClangCompiler, src: str, flags: list[str]) -> bytes:
    runs.append(src)
    return compile_(self, src, flags)
  monkeypatch.setattr(ClangCompiler, "_compile_with", counting)
  w, wn, x, xn = _layers(seed=14)
  with Context(QUICK_BUILD=2):
    for i in range(4):
      o = (x @ w[i]).contiguous()
      np.testing.assert_allclose(o.numpy(), xn @ wn[i], rtol=1e-4, atol=1e-4)
      if i == 1: [r.finish() for r in realize._runners.values()]
  name = next(r.spec.name for r in realize._runners.values() if r.shifts)
  assert sum(src.count(f" {name}(") for src in runs) <= 2  # its quick build and its optimized one, once each

def test_shifted_programs_replay_in_a_jit(empty_cache: None) -> None:
  w, wn, x, xn = _layers(seed=15)
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x @ w[1]).relu() @ w[3]
  for k in range(4):
    xk = xn + k
    np.testing.assert_allclose(f(Tensor(xk)).numpy(), np.maximum(xk @ wn[1], 0) @ wn[3], rtol=1e-3, atol=1e-3)

def test_fresh_process_compiles_layers_once(tmp_path: Any) -> None:
  # a new process with an empty kernel cache: the six layers' matmul is in the compiler's input once
  import subprocess, sys
  code = ("import numpy as np\nfrom attograd import Tensor\nfrom attograd.runtime.ops_cpu import ClangCompiler\n"
          "srcs = []\ncw = ClangCompiler._compile_with\n"
          "ClangCompiler._compile_with = lambda self, src, flags: srcs.append(src) or cw(self, src, flags)\n"
          "w = Tensor(np.ones((6, 64, 64), np.float32)).realize()\nx = Tensor(np.ones((8, 64), np.float32)).realize()\n"
          "outs = [(x @ w[i]).contiguous() for i in range(6)]\nTensor.realize(*outs)\n"
          "assert all((o.numpy() == 64).all() for o in outs)\n"
          "print(sum(s.count('void r_') for s in srcs))\n")
  env = {**os.environ, "ATTOGRAD_CACHE_DIR": str(tmp_path), "QUICK_BUILD": "0"}
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr
  assert int(out.stdout) == 1, out.stdout  # one matmul function compiled, not six (batched or not)

def test_a_few_small_kernels_are_one_batch(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # the kernels gathered after the first are too small to be worth a compiler process per core: one batch (the first
  # kernel may start alone while the others are lowered)
  runs = _count_compiles(monkeypatch)
  x, ref = _chain(5, seed=14)
  with Context(QUICK_BUILD=0): np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)
  assert 1 <= len(runs) <= 2, len(runs)

def test_compiler_probes_run_side_by_side(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
  # with an empty cache the CPU compiler's probes (OpenMP: a build and link; the target's features: one preprocessor
  # run) are compiler runs every first tensor waits for: they run at once, each waiting here until both have started
  # (run one after the other, the first would wait for the other in vain and the barrier breaks)
  from attograd.runtime.ops_cpu import find_c_compiler
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))
  started = threading.Barrier(2, timeout=30)
  for name in ("_has_openmp", "_target_features"):
    def probe(self: ClangCompiler, ident: str, _orig: Any = getattr(ClangCompiler, name)) -> Any:
      started.wait()
      return _orig(self, ident)
    monkeypatch.setattr(ClangCompiler, name, probe)
  cc = ClangCompiler(find_c_compiler())
  assert not started.broken and started.n_waiting == 0
  ref = Device["CPU"].compiler
  assert (cc.openmp, cc.fast_fma, cc.int8_dot) == (ref.openmp, ref.fast_fma, ref.int8_dot)

def test_target_features_are_what_compiles(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
  # the features read from the preprocessor's macros (one compiler run) answer what compiling the code that uses them
  # does with the kernels' flags (a compiler run each, as the probes were): fma() an instruction, and gcc's int8 dot
  # product builtin that renderer/cstyle.py writes
  from attograd.runtime.ops_cpu import find_c_compiler
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))
  cc = ClangCompiler(find_c_compiler())
  def compiles(src: str) -> bool:
    try: cc._compile_with(src, cc.flags)
    except RuntimeError: return False
    return True
  fma = compiles("#if !defined(__FP_FAST_FMAF) || !defined(__FP_FAST_FMA)\n#error no fast fma\n#endif\n"
                 "int f(void) { return 0; }")
  dot = compiles("typedef int v16 __attribute__((vector_size(64)));\n"
                 "v16 f(v16 c, v16 a, v16 b) { return __builtin_ia32_vpdpbusd_v16si(c, a, b); }")
  assert (cc.fast_fma, cc.int8_dot) == (fma, dot)
  # remembered on disk: a second compiler object runs no preprocessor
  runs: list[Any] = []
  run = subprocess.run
  monkeypatch.setattr(subprocess, "run", lambda args, *a, **k: runs.append(args) or run(args, *a, **k))
  again = ClangCompiler(find_c_compiler())
  assert (again.fast_fma, again.int8_dot) == (fma, dot) and not any("-dM" in r for r in runs)

def test_huge_kernels_use_the_priority_register_allocator_in_both_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
  # gcc's default register allocator is quadratic on a 100k-op chain: the quick (-O1) build of
  # test_deep_graph_no_recursion_error's kernel took 128 s with it and 3.6 s with the priority one, which the -O3
  # build already used
  from attograd.runtime import ops_cpu
  comp = Device["CPU"].compiler
  if not comp.gcc: pytest.skip("gcc's flag")
  seen: list[list[str]] = []
  monkeypatch.setattr(ops_cpu.ClangCompiler, "_compile_with", lambda self, src, flags: seen.append(flags) or b"")
  huge = "void k(float* restrict d) {\n" + "  d[0] += 1.0f;\n" * (ops_cpu.HUGE_KERNEL_LINES + 1) + "}\n"
  small = "void k(float* restrict d) {\n  d[0] += 1.0f;\n}\n"
  comp.compile(huge)
  comp.compile_quick([("k", huge)])
  comp.compile(small)
  comp.compile_quick([("k", small)])
  assert ["-fira-algorithm=priority" in f for f in seen] == [True, True, False, False]

def test_kernels_of_little_work_get_only_the_light_build(empty_cache: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # a kernel that does at most LIGHT_OPS operations on at most LIGHT_BYTES runs in microseconds at any optimization
  # level: it is built once by the device's light compiler (CPU: -O1), not tiered, and that program is final and
  # cached on disk under the light compiler's key; a bigger one gets the optimized compiler
  dev = Device["CPU"]
  assert dev.compiler.light is not None and "-O1" in dev.compiler.light.flags and "-O3" in dev.compiler.flags
  assert dev.compiler.light.cachekey != dev.compiler.cachekey
  rng = np.random.default_rng(21)
  small_n, big_n = 256, realize.LIGHT_BYTES  # float32: 1 KB, 4 x LIGHT_BYTES per buffer
  a, b = rng.standard_normal(small_n, dtype=np.float32), rng.standard_normal(big_n, dtype=np.float32)
  small, big = (Tensor(a) * 1.5 + 0.25).contiguous(), (Tensor(b) * 1.5 + 0.25).contiguous()
  runs = _count_compiles(monkeypatch)
  np.testing.assert_allclose(small.numpy(), a * np.float32(1.5) + np.float32(0.25), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(big.numpy(), b * np.float32(1.5) + np.float32(0.25), rtol=1e-5, atol=1e-6)
  (rs,), (rb,) = _runners_of((Tensor(a) * 1.5 + 0.25).contiguous()), _runners_of((Tensor(b) * 1.5 + 0.25).contiguous())
  assert rs.compiler is dev.compiler.light and rs._quick is None
  assert rb.compiler is dev.compiler
  assert dev.compiler.light.cached(rs.spec.src) is not None and dev.compiler.cached(rs.spec.src) is None
  assert dev.compiler.cached(rb.spec.src) is not None and dev.compiler.light.cached(rb.spec.src) is None
  assert len(runs) == 2  # one build each, no second tier
  # a new process (no runners) finds the light program on disk: nothing is compiled again
  realize._runners.clear()
  runs.clear()
  np.testing.assert_allclose((Tensor(a) * 1.5 + 0.25).numpy(), a * np.float32(1.5) + np.float32(0.25), rtol=1e-5,
                             atol=1e-6)
  assert runs == []

def test_kernels_of_many_integer_ops_get_the_optimized_build(empty_cache: None) -> None:
  # the op count has float ops only: a random draw's integer hash (~200 lines of C per element) over 36864 elements
  # ran 2-3 ms slower per call at -O1 though its float ops and bytes are few; the lines of source times the bytes
  # (LIGHT_WORK) keep it optimized, while a small draw stays light
  Tensor.manual_seed(3)
  big, small = Tensor.rand(36864), Tensor.rand(64)
  big.realize(small)
  dev = Device["CPU"]
  hashes = [r for r in realize._runners.values() if r.spec.src.count("\n") > 150]
  assert len(hashes) == 2 and all(r.spec.op_estimate <= realize.LIGHT_OPS for r in hashes)
  assert sorted(r.compiler is dev.compiler.light for r in hashes) == [False, True]
  assert all((r.compiler is dev.compiler.light) == (r.spec.mem_estimate < 4096) for r in hashes)

def test_light_build_can_be_turned_off(empty_cache: None) -> None:
  x, ref = _chain(3, seed=22)
  with Context(LIGHT_BUILD=0): np.testing.assert_allclose(x.numpy(), ref, rtol=1e-5)
  assert all(r.compiler is Device["CPU"].compiler for r in realize._runners.values())

def test_light_build_rounds_as_optimized(empty_cache: None) -> None:
  # the light build's -O1 must give the bits of the optimized -O3 (no a*b+c fused by one and not the other): a
  # kernel built light in one process and optimized in another computes the same values
  rng = np.random.default_rng(23)
  a, b, c = (rng.standard_normal(1021).astype(np.float32) for _ in range(3))
  def f() -> Tensor:
    ta, tb, tc = Tensor(a), Tensor(b), Tensor(c)
    return ((ta * tb + tc) * ta - tb * tc) * (ta * tc + tb)
  light = f().numpy()
  assert all(r.compiler is Device["CPU"].compiler.light for r in realize._runners.values())
  realize._runners.clear()
  with Context(LIGHT_BUILD=0): optimized = f().numpy()
  np.testing.assert_array_equal(light, optimized)
