"""Device selection, the on-disk compile cache, missing-compiler errors, DEBUG output and GlobalCounters."""
from __future__ import annotations
import hashlib, os, struct, subprocess, sys, textwrap
import pytest
from attograd import Device, GlobalCounters, Tensor
from attograd.helpers import disk_cache_get, disk_cache_put, _cache_path
import attograd.helpers as helpers_mod

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def run_py(code: str, **env: str) -> subprocess.CompletedProcess:
  full_env = {**os.environ, "PYTHONPATH": ROOT, **env}
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env,
                        timeout=120)

@pytest.mark.parametrize("env, want", [({"DEV": "PYTHON"}, "PYTHON"), ({"PYTHON": "1"}, "PYTHON"),
                                       ({"CPU": "1"}, "CPU"), ({"CLANG": "1"}, "CPU"), ({"DEV": "cpu"}, "CPU")])
def test_default_device_from_env(env: dict, want: str) -> None:
  clean = {k: "" for k in ("DEV", "PYTHON", "CPU", "CLANG") if k not in env}
  r = run_py("from attograd import Device, Tensor; print(Device.DEFAULT, Tensor([1]).device)", **clean, **env)
  assert r.returncode == 0, r.stderr
  assert r.stdout.split() == [want, want]

def test_context_dev_sets_the_default_device_in_its_block() -> None:
  # a Context's DEV wins over the environment's inside the block; tinygrad's interface prefix and renderer suffix
  # name the same device; the default comes back after. In a fresh process, with DEV=PYTHON in the environment
  r = run_py("""
    from attograd import Context, Device, Tensor
    outer = Device.DEFAULT
    with Context(DEV="null"):
      inner = [Device.DEFAULT, Tensor.empty(1).device, Device.canonicalize(None)]
      with Context(DEV="USB+cpu:LLVM"): inner.append(Tensor.empty(1).device)
    with Context(DEV="NULL:1"): inner.append(Device.DEFAULT)
    with Context(DEV=":LLVM"): inner.append(Device.DEFAULT)  # no device named: the default stays
    print(outer, *inner, Tensor.empty(1).device)
  """, DEV="PYTHON")
  assert r.returncode == 0, r.stderr
  assert r.stdout.split() == ["PYTHON", "NULL", "NULL", "NULL", "CPU", "NULL:1", "PYTHON", "PYTHON"]

def test_canonical_names() -> None:
  assert Device.canonicalize("cpu") == "CPU" and Device.canonicalize("CPU:0") == "CPU"
  assert Device.canonicalize("CPU:1") == "CPU:1"
  with pytest.raises(ValueError, match="unknown device 'TPU'"): Device.canonicalize("TPU")
  with pytest.raises(ModuleNotFoundError, match="unknown device 'TYPO'"): Device["TYPO"]  # what tinygrad raises

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
  r = run_py("from attograd import Tensor; print((Tensor([1.0, 2.0]) * 3).sum().item())", DEV="PYTHON", CC="",
             PATH="/nonexistent")
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

def _read(path: str) -> bytes:
  with open(path, "rb") as f: return f.read()

def _write(path: str, data: bytes) -> None:
  with open(path, "wb") as f: f.write(data)

def test_disk_cache_swapped_entries_are_rejected(tmp_path, monkeypatch) -> None:
  # two whole, valid entries swapped on disk: each file's checksum still matches its payload, but not its name's key
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))
  disk_cache_put("t", "aa11", b"program one")
  disk_cache_put("t", "bb22", b"program two")
  pa, pb = _cache_path("t", "aa11"), _cache_path("t", "bb22")
  da, db = _read(pa), _read(pb)
  _write(pa, db)
  _write(pb, da)
  assert disk_cache_get("t", "aa11") is None and disk_cache_get("t", "bb22") is None
  assert not os.path.exists(pa) and not os.path.exists(pb)  # rebuilt on the next put
  disk_cache_put("u", "aa11", b"program one")  # the same key in another table is another entry too
  _write(_cache_path("t", "aa11"), _read(_cache_path("u", "aa11")))
  assert disk_cache_get("t", "aa11") is None and disk_cache_get("u", "aa11") == b"program one"

@pytest.mark.parametrize("damage", ["truncated", "header only", "empty", "old layout", "key length", "payload"])
def test_disk_cache_damaged_entries_are_rejected(tmp_path, monkeypatch, damage: str) -> None:
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))
  disk_cache_put("t", "cc33", b"a payload of some length")
  path, data = _cache_path("t", "cc33"), _read(_cache_path("t", "cc33"))
  head = helpers_mod._HEAD
  bad = {"truncated": data[:-3], "header only": data[:head], "empty": b"",
         # the first layout: magic, SHA-256 of the payload, payload (no key)
         "old layout": b"ATTOC001" + hashlib.sha256(b"a payload of some length").digest() + b"a payload of some length",
         "key length": data[:head - 4] + struct.pack("<I", 1 << 30) + data[head:],
         "payload": data[:-1] + b"X"}[damage]
  _write(path, bad)
  assert disk_cache_get("t", "cc33") is None and not os.path.exists(path)
  disk_cache_put("t", "cc33", b"again")
  assert disk_cache_get("t", "cc33") == b"again"

@pytest.mark.parametrize("table", ["program", "compile"])
def test_swapped_cached_kernels_are_rebuilt(tmp_path, table: str) -> None:
  # two kernels of the same name and shape (E_2) that differ in a constant: with their cached programs (or compiled
  # libraries) swapped on disk, a new process must still compute each one right
  code = "from attograd import Tensor; x = Tensor([1.0, 2.0]); print((x * 7 + 0.5).tolist(), (x * 3 - 1).tolist())"
  env = {"ATTOGRAD_CACHE_DIR": str(tmp_path), "DEV": "CPU"}
  first = run_py(code, **env)
  assert first.returncode == 0, first.stderr
  assert first.stdout == "[7.5, 14.5] [2.0, 5.0]\n"
  entries = sorted(os.path.join(d, f) for d, _, fs in os.walk(tmp_path / table) for f in fs)
  assert len(entries) == 2, entries
  a, b = _read(entries[0]), _read(entries[1])
  _write(entries[0], b)
  _write(entries[1], a)
  second = run_py(code, **env)
  assert second.returncode == 0, second.stderr
  assert second.stdout == first.stdout

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
  procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
           for _ in range(4)]
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
  from attograd.schedule import create_schedule
  x = Tensor.rand(1 << 20).realize()
  items, _ = create_schedule([(x * 2 + 1).uop])
  spec = get_program(items[-1].ast, Device["CPU"].renderer)
  if not Device["CPU"].compiler.openmp: pytest.skip("the C compiler has no OpenMP: kernels run on one core")
  assert "#pragma omp parallel for" in spec.src

def test_mixing_devices_is_an_error() -> None:
  a, b = Tensor([1.0], device="CPU"), Tensor([1.0], device="PYTHON")
  with pytest.raises(ValueError, match="device mismatch"): a + b
  assert (a + b.to("CPU")).item() == 2.0

def _vm_flags(addr: int) -> list[str]:
  """The kernel's flags of the memory mapping holding addr (/proc/self/smaps; "hg": madvise(MADV_HUGEPAGE))."""
  inside = False
  with open("/proc/self/smaps") as f:
    for line in f:
      head = line.split()[0]
      if "-" in head and not head.endswith(":"):
        lo, hi = (int(x, 16) for x in head.split("-"))
        inside = lo <= addr < hi
      elif inside and head == "VmFlags:": return line.split()[1:]
  raise AssertionError(f"no mapping holds {addr:#x}")

def _huge_page_check() -> None:
  """The advice test_big_host_data_asks_for_huge_pages checks, run in a process of its own."""
  import numpy as np
  from attograd.runtime.ops_cpu import HUGE_PAGE, HUGE_PAGE_MIN, MallocAllocator
  a = MallocAllocator()
  big, small, kept = a._alloc(HUGE_PAGE_MIN + HUGE_PAGE), a._alloc(HUGE_PAGE_MIN), a._alloc(HUGE_PAGE_MIN + HUGE_PAGE)
  try:
    a.copyin(big, memoryview(np.ones(HUGE_PAGE_MIN // 4 + HUGE_PAGE // 4, np.float32)).cast("B"))
    a.copyin(small, memoryview(np.ones(HUGE_PAGE_MIN // 4 - 16, np.float32)).cast("B"))  # 64 bytes short
    inside = lambda p: -(-p // HUGE_PAGE) * HUGE_PAGE  # noqa: E731  the first whole 2 MB page in the buffer
    assert "hg" in _vm_flags(inside(big)) and "hg" not in _vm_flags(inside(small))
    assert "hg" not in _vm_flags(inside(kept))  # only allocated
  finally:
    for buf, n in ((big, HUGE_PAGE_MIN + HUGE_PAGE), (small, HUGE_PAGE_MIN), (kept, HUGE_PAGE_MIN + HUGE_PAGE)):
      a._free(buf, n)

@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc/self/smaps")
def test_big_host_data_asks_for_huge_pages() -> None:
  # issue 20's sum row: NumPy and PyTorch read a big array on transparent huge pages (NumPy asks from 4 MB on), and
  # attograd's copy of it on 4 KB pages streamed 10% slower on one core (a TLB miss every 4 KB). Host data copied in
  # asks for them; a buffer a kernel writes first doesn't (this VM faulted new huge pages in slowly). Checked in a
  # fresh process: where malloc puts big blocks depends on what the process freed before (glibc moves its mmap
  # threshold up after a big free), and an earlier test's frees made the mappings here differ under xdist
  r = run_py(f"""
    import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
    from test_device import _huge_page_check
    _huge_page_check()
    print("ok")""")
  assert r.returncode == 0 and r.stdout.split()[-1:] == ["ok"], r.stdout + r.stderr
  import numpy as np
  from attograd.runtime.ops_cpu import HUGE_PAGE_MIN
  x = np.ones(HUGE_PAGE_MIN // 4, np.float32)
  assert Tensor(x, device="CPU").sum().item() == HUGE_PAGE_MIN // 4  # a 4 MB input copied in, read by a kernel

def test_device_default_is_the_default_devices_object_and_its_renderer_pickles(device: str) -> None:
  import pickle
  assert Device.default is Device[Device.DEFAULT] and Device[device].device == device
  r = pickle.loads(pickle.dumps(Device[device].renderer))
  assert type(r) is type(Device[device].renderer)
