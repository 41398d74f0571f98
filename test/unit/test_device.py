"""Device selection, the on-disk compile cache, missing-compiler errors, DEBUG output and GlobalCounters."""
from __future__ import annotations
import os, subprocess, sys, textwrap
import pytest
from attograd import Device, GlobalCounters, Tensor
from attograd.device import disk_cache_get, disk_cache_put, _cache_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def run_py(code: str, **env: str) -> subprocess.CompletedProcess:
  full_env = {**os.environ, "PYTHONPATH": ROOT, **env}
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env, timeout=120)

@pytest.mark.parametrize("env, want", [({"DEV": "PYTHON"}, "PYTHON"), ({"PYTHON": "1"}, "PYTHON"), ({"CPU": "1"}, "CPU"),
                                       ({"CLANG": "1"}, "CPU"), ({"DEV": "cpu"}, "CPU")])
def test_default_device_from_env(env: dict, want: str) -> None:
  clean = {k: "" for k in ("DEV", "PYTHON", "CPU", "CLANG") if k not in env}
  r = run_py("from attograd import Device, Tensor; print(Device.DEFAULT, Tensor([1]).device)", **clean, **env)
  assert r.returncode == 0, r.stderr
  assert r.stdout.split() == [want, want]

def test_canonical_names() -> None:
  assert Device.canonicalize("cpu") == "CPU" and Device.canonicalize("CPU:0") == "CPU" and Device.canonicalize("CPU:1") == "CPU:1"
  with pytest.raises(ValueError, match="unknown device 'TPU'"): Device.canonicalize("TPU")

def test_unknown_device_in_tensor() -> None:
  with pytest.raises(ValueError, match="unknown device"): Tensor([1.0], device="NOPE")

def test_no_compiler_says_what_to_install() -> None:
  r = run_py("from attograd import Tensor; Tensor([1.0]).add(1).realize()", DEV="CPU", CC="", PATH="/nonexistent")
  assert r.returncode != 0
  assert "no C compiler found" in r.stderr and "DEV=PYTHON" in r.stderr

def test_bad_cc_env_is_named() -> None:
  r = run_py("from attograd import Tensor; Tensor([1.0]).add(1).realize()", DEV="CPU", CC="no-such-cc-xyz")
  assert r.returncode != 0 and "CC=no-such-cc-xyz" in r.stderr

def test_python_device_needs_no_compiler() -> None:
  r = run_py("from attograd import Tensor; print((Tensor([1.0, 2.0]) * 3).sum().item())", DEV="PYTHON", CC="", PATH="/nonexistent")
  assert r.returncode == 0, r.stderr
  assert r.stdout.strip() == "9.0"

def test_unavailable_device_reports_reason() -> None:
  ok, why = Device.available("METAL")
  assert not ok and why

def test_disk_cache_roundtrip_and_corruption(tmp_path, monkeypatch) -> None:
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))
  disk_cache_put("t", "abcd1234", b"payload")
  assert disk_cache_get("t", "abcd1234") == b"payload"
  path = _cache_path("t", "abcd1234")
  with open(path, "r+b") as f:  # flip a byte of the payload: the checksum no longer matches
    f.seek(-1, 2)
    f.write(b"X")
  assert disk_cache_get("t", "abcd1234") is None
  assert not os.path.exists(path)  # the corrupt entry is removed so it gets rebuilt

def test_corrupt_compiled_kernel_is_rebuilt(tmp_path) -> None:
  code = "from attograd import Tensor; print((Tensor([1.0, 2.0]) * 7 + 0.5).tolist())"
  env = {"ATTOGRAD_CACHE_DIR": str(tmp_path), "DEV": "CPU"}
  first = run_py(code, **env)
  assert first.returncode == 0, first.stderr
  entries = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "compile") for f in fs]
  assert entries
  for e in entries:
    with open(e, "wb") as f: f.write(b"garbage, not a library")
  second = run_py(code, **env)
  assert second.returncode == 0, second.stderr
  assert second.stdout == first.stdout == "[7.5, 14.5]\n"

def test_concurrent_processes_share_the_cache(tmp_path) -> None:
  code = "from attograd import Tensor; print((Tensor.arange(100).float() * 3).sum().item())"
  env = {**os.environ, "PYTHONPATH": ROOT, "ATTOGRAD_CACHE_DIR": str(tmp_path), "DEV": "CPU"}
  procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(4)]
  outs = [p.communicate(timeout=120) for p in procs]
  assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
  assert {o[0].strip() for o in outs} == {b"14850.0"}
  assert not [f for d, _, fs in os.walk(tmp_path) for f in fs if f.startswith(".tmp-")]  # no half-written entries left

def test_debug_levels() -> None:
  code = "from attograd import Tensor; a = Tensor([[1.0, 2.0], [3.0, 4.0]]); ((a * 2 + 1).relu().sum(axis=1)).realize()"
  r1 = run_py(code, DEBUG="1", DEV="CPU")
  assert "realize: 1 kernels" in r1.stdout, r1.stdout + r1.stderr
  r2 = run_py(code, DEBUG="2", DEV="CPU")
  assert "GFLOPS" in r2.stdout and "GB/s" in r2.stdout and "r_2_2" in r2.stdout
  r4 = run_py(code, DEBUG="4", DEV="CPU")
  assert "void r_2_2(" in r4.stdout and "for (int" in r4.stdout
  r5 = run_py(code, DEBUG="5", DEV="CPU")
  assert "REDUCE_AXIS" in r5.stdout and "STORE" in r5.stdout

def test_global_counters() -> None:
  a, b = Tensor.rand(64, 64).realize(), Tensor.rand(64, 64).realize()
  GlobalCounters.reset()
  (a * b + 1).sum().realize()
  assert GlobalCounters.kernel_count >= 1
  assert GlobalCounters.global_mem >= 64 * 64 * 4 * 2
  assert GlobalCounters.global_ops > 0

def test_large_kernels_are_threaded() -> None:
  from attograd.codegen import get_program
  from attograd.engine.schedule import create_schedule
  x = Tensor.rand(1 << 20).realize()
  items, _ = create_schedule([(x * 2 + 1).uop])
  spec = get_program(items[-1].ast, Device["CPU"].renderer)
  if not Device["CPU"].compiler.openmp: pytest.skip("the C compiler has no OpenMP: kernels run on one core")
  assert "#pragma omp parallel for" in spec.src

def test_mixing_devices_is_an_error() -> None:
  a, b = Tensor([1.0], device="CPU"), Tensor([1.0], device="PYTHON")
  with pytest.raises(ValueError, match="device mismatch"): a + b
  assert (a + b.to("CPU")).item() == 2.0
