"""The CPU runtime's choice of threads for a parallel kernel (runtime/ops_cpu.py ThreadChoice): all of OpenMP's threads
unless a call waits on threads that got no core, then whichever setting its recent calls measured faster."""
from __future__ import annotations
import numpy as np
import pytest
from attograd import Device, Tensor
from attograd.engine import realize
from attograd.runtime import ops_cpu
from attograd.runtime.ops_cpu import ThreadChoice

def _run(tc: ThreadChoice, timings: list[tuple[float, float, float]]) -> list[int]:
  """Feed (seconds on all threads: wall, own CPU; seconds on one thread) per call: the settings picked, in order."""
  picked = []
  for multi_wall, multi_cpu, single in timings:
    which = tc.pick()
    picked.append(which)
    tc.record(which, *((multi_wall, multi_cpu) if which == 0 else (single, single)))
  return picked

def test_idle_machine_stays_on_all_threads() -> None:
  # all threads take 1 ms, during which the calling thread works 0.9 ms (the others finish with it): no waiting
  assert _run(ThreadChoice(), [(1e-3, 0.9e-3, 1.8e-3)] * 500) == [0] * 500

def test_busy_cores_move_the_kernel_to_one_thread_and_back() -> None:
  tc = ThreadChoice()
  # the other core is busy: on all threads a call waits 10 ms for the thread without a core (1 ms of own work)
  busy = _run(tc, [(10e-3, 1e-3, 2e-3)] * 200)
  assert busy[:3] == [0, 0, 1]  # the first call isn't counted; the second waited: one thread is tried, and wins
  assert tc.best == 1 and sum(busy[3:]) >= 190  # a few trials of all threads, ever rarer
  trials = [i for i, w in enumerate(busy) if i > 2 and w == 0]
  assert len(trials) >= 3 and all(b - a > 4 for a, b in zip(trials, trials[1:]))
  assert trials[-1] - trials[-2] > trials[1] - trials[0]  # the interval grows while the trials lose
  # the machine goes idle: the next trial of all threads wins, and they stay
  idle = _run(tc, [(1e-3, 0.9e-3, 2e-3)] * 2000)
  assert tc.best == 0 and idle[-100:] == [0] * 100

def test_threads_come_back_soon_after_a_long_busy_spell() -> None:
  # issue 20: 5000 calls on busy cores (all threads wait 10 ms, one thread takes 2 ms) grew the interval between
  # trials of all threads to 4096 calls, so once the machine went idle the kernel ran up to 4096 more on one thread
  # (a matmul at half speed for seconds). A trial also comes once the calls since the last one took RETRY times the
  # slowest recent call on all threads (100 x 10 ms: 500 calls of 2 ms): trials cost ~1% of the time
  tc = ThreadChoice()
  busy = _run(tc, [(10e-3, 1e-3, 2e-3)] * 5000)
  assert tc.best == 1
  trials = [i for i, w in enumerate(busy) if i > 2 and w == 0]
  assert 10 <= len(trials) <= 30 and max(b - a for a, b in zip(trials, trials[1:])) <= 501
  idle = _run(tc, [(1e-3, 0.9e-3, 2e-3)] * 600)
  assert tc.best == 0 and idle[-40:] == [0] * 40

def test_parallel_kernels_choose_their_threads_and_compute_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
  a = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
  ta = Tensor(a).realize()
  want = a @ a
  np.testing.assert_allclose((ta @ ta).numpy(), want, rtol=1e-4, atol=1e-3)
  prgs = [r.prg for r in realize._runners.values() if getattr(r, "prg", None) is not None]
  big = [p for p in prgs if isinstance(p, ops_cpu.CPUProgram) and p.threads is not None]
  if (omp := ops_cpu._omp_threads()) is None: pytest.skip("no OpenMP, or one thread: nothing to choose")
  assert big, "the 512x512 matmul runs a parallel loop"
  # the engine's direct calls skip __call__: a parallel kernel's own function never gets its argument types set
  assert all(p.fxn.argtypes is None and p._fxn is not p.fxn for p in big)
  (Tensor(a[:4, :4]).realize() + 1).realize()  # a small kernel: no parallel loop
  cpu = [r for r in realize._runners.values() if isinstance(getattr(r, "prg", None), ops_cpu.CPUProgram)]
  assert any(r.prg.threads is None for r in cpu)
  # a program chooses threads exactly when its kernel has a parallel loop
  assert all((r.prg.threads is not None) == ("omp parallel" in r.spec.src) for r in cpu)
  # forced onto one thread (and back), the same numbers
  monkeypatch.setattr(ThreadChoice, "pick", lambda self: 1)
  try:
    for _ in range(3): np.testing.assert_allclose((ta @ ta).numpy(), want, rtol=1e-4, atol=1e-3)
    assert omp is not None and omp[2] == 1
  finally:
    monkeypatch.setattr(ThreadChoice, "pick", lambda self: 0)
    (ta @ ta).realize()
  assert omp[2] == omp[1] > 1


def test_quick_builds_of_parallel_kernels_choose_their_threads_too() -> None:
  # a quick build is one loaded library for many kernels, whose outlined parallel loops can't be looked up in it: the
  # source says which kernels have one (they got no ThreadChoice when the kernel cache was empty, the only time the
  # quick tier runs)
  a = np.random.default_rng(1).standard_normal((512, 512), dtype=np.float32)
  ta = Tensor(a).realize()
  (ta @ ta).realize()
  if ops_cpu._omp_threads() is None: pytest.skip("no OpenMP, or one thread: nothing to choose")
  specs = [r.spec for r in realize._runners.values() if isinstance(getattr(r, "prg", None), ops_cpu.CPUProgram)]
  par = next(s for s in specs if "omp parallel" in s.src)
  small = next(s for s in specs if "omp parallel" not in s.src)
  dev = Device["CPU"]
  assert isinstance(dev, ops_cpu.CPUDevice)
  quick = dev.quick_build([(par.name, par.src), (small.name, small.src)])
  assert quick[0].threads is not None and quick[1].threads is None

def test_a_parallel_loop_over_a_variable_is_one_program_for_every_value() -> None:
  # attention scores over the filled rows of an 8192-row cache: one program whose parallel loop asks OpenMP for the
  # cores only when the rows make it worth it (its `if` clause); right on one thread and on all of them
  if not Device["CPU"].compiler.openmp: pytest.skip("the C compiler has no OpenMP: kernels run on one core")
  from attograd.uop.ops import Variable
  rng = np.random.default_rng(2)
  cache, q = rng.standard_normal((3, 8192, 64), dtype=np.float32), rng.standard_normal((3, 3, 64), dtype=np.float32)
  tc, tq = Tensor(cache).realize(), Tensor(q).realize()
  n = Variable("n", 1, 8192)
  for filled in (1, 7, 8192, 300, 6000):
    got = (tq @ tc.shrink((None, (0, n.bind(filled)), None)).transpose(1, 2)).numpy()
    np.testing.assert_allclose(got, q @ cache[:, :filled].transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
  progs = [r for r in realize._runners.values() if "omp parallel for if(" in getattr(r.spec, "src", "")
           and [v.arg[0] for v in r.spec.vars] == ["n"]]
  assert len(progs) == 1, [r.spec.name for r in progs]
