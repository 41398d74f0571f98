"""Programs are unloaded when the runner cache lets them go: a long-running process that meets ever new kernels must not
run out of memory mappings (65530 by default; each loaded library holds ~5). CI failed on this once, deep in the suite:
`cannot apply additional memory protection after relocation: Cannot allocate memory`."""
from __future__ import annotations
import ctypes, gc, sys
import pytest
from attograd import Tensor
from attograd.device import Device, DeviceUnavailable
import attograd.engine.realize as realize

def _maps() -> int:
  with open("/proc/self/maps") as f: return sum(1 for _ in f)

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts mappings in /proc/self/maps")
@pytest.mark.parametrize("dev", ["CPU", "LLVM"])
def test_evicted_programs_are_unloaded(dev: str, monkeypatch: pytest.MonkeyPatch) -> None:
  try: Device[dev]
  except DeviceUnavailable as e: pytest.skip(f"{dev} unavailable: {e}")
  monkeypatch.setattr(realize.RUNNER_CACHE, "value", 16)
  for i in range(20): (Tensor.ones(1000 + i, device=dev) * 2.5).sum().realize()  # the cache is full from here on
  gc.collect()
  before = _maps()
  n = 150
  for i in range(n):
    x = (Tensor.ones(1100 + i, device=dev) * (i + 0.5)).sum()
    assert x.item() == pytest.approx((1100 + i) * (i + 0.5))
  gc.collect()
  assert len(realize._runners) <= 16
  # one library per kernel stays loaded without unloading (5 mappings on CPU, 2 on LLVM): allow far less than one
  assert _maps() - before < n // 5, f"{_maps() - before} new mappings after {n} kernels on {dev}"

def test_evicted_kernel_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(realize.RUNNER_CACHE, "value", 2)
  xs = [Tensor.arange(10 + i).float() for i in range(5)]
  for _ in range(2):  # the second round meets every kernel after it was evicted
    for i, x in enumerate(xs): assert (x * 3).sum().item() == 3 * sum(range(10 + i))

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_openmp_runtime_outlives_the_kernels() -> None:
  # the OpenMP runtime comes in with the first kernel library; when every library is unloaded it must stay mapped, or
  # its idle worker threads wake into unmapped code (a segfault, seen at interpreter exit)
  import subprocess, textwrap
  code = textwrap.dedent("""
    import gc
    from attograd import Device, Tensor
    from attograd.engine import realize
    if not getattr(Device["CPU"].compiler, "openmp", False): print("no-openmp"); raise SystemExit
    (Tensor.rand(256, 256) @ Tensor.rand(256, 256)).realize()   # a parallel kernel starts the worker threads
    omp = lambda: any(n in open("/proc/self/maps").read() for n in ("libgomp", "libomp", "libiomp"))
    assert omp(), "no OpenMP runtime loaded"
    realize._runners.clear(); gc.collect()                       # every kernel library unloaded
    print("kept" if omp() else "unloaded")
  """)
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  if r.stdout.strip() == "no-openmp": pytest.skip("the C compiler here has no OpenMP")
  assert r.stdout.strip() == "kept"

def test_programs_of_one_library_keep_their_own_argument_types() -> None:
  # a CDLL caches getattr's function object: two programs of one library and symbol shared it, so the argument types
  # one set were the other's, and the engine's direct call with its own arguments raised "this function takes at
  # least 2 arguments (1 given)" (tinygrad's test_double_store_after_different_sizes, in the conformance suite)
  from attograd.runtime.ops_cpu import CPUProgram, load_library
  dev = Device["CPU"]
  src = "void k(float* restrict a, float* restrict b) { a[0] = b[0] * 2.0f; }\n"
  lib = dev.compiler.compile_cached(src)
  p1, p2 = CPUProgram("k", lib), CPUProgram("k", lib)
  assert load_library(lib) is p1.lib is p2.lib and p1.fxn is not p2.fxn
  p1.fxn.argtypes = [ctypes.c_void_p] * 3
  assert p2.fxn.argtypes is None
