"""Shared pytest setup: the `device` fixture runs a test once per backend, and the `slow` marker.

TEST_DEVICES=CPU (a comma list) limits the backends for a quick run; TEST_TIMEOUT=20 fails any test that runs longer
than 20 s (a hang in a pure-Python loop becomes a TimeoutError with a traceback instead of a stuck run).
"""
from __future__ import annotations
import os, signal, sys, threading
from typing import Iterator
import pytest

# PoCL (the CL device here) never unloads a kernel's library, and builds two per kernel (a generic one and one
# specialized to the launch's grid); each holds 4 memory mappings, and a process may have 65530. The device suite
# builds thousands of CL kernels per worker: one library per kernel keeps a worker well under the limit.
os.environ.setdefault("POCL_WORK_GROUP_SPECIALIZATION", "0")

sys.path.insert(0, os.path.dirname(__file__))  # so tests can `from helpers import ...` however pytest is started

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def _backends() -> list[str]:
  if (env := os.getenv("TEST_DEVICES")): return [d.strip().upper() for d in env.split(",") if d.strip()]
  names = ["CPU", "PYTHON"]
  # every device with a runtime joins the suite (one that can't start here is skipped with its reason);
  # looking for the file keeps collection free of imports
  for dev in ("CL", "LLVM", "CUDA", "METAL"):
    if os.path.exists(os.path.join(_ROOT, "attograd", "runtime", f"ops_{dev.lower()}.py")): names.append(dev)
  return names

BACKENDS = _backends()

def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line("markers", "slow: long-running test (deselect with -m 'not slow')")

# ***** per-device counts at the end of the run: which backends the device suite really ran on *****

_counts: dict[str, dict[str, int]] = {}
_skip_reason: dict[str, str] = {}

def _device_of(nodeid: str) -> str | None:
  if "[" not in nodeid: return None
  params = nodeid.rsplit("[", 1)[1].rstrip("]").split("-")
  return next((p for p in params if p in BACKENDS), None)

def pytest_runtest_logreport(report: pytest.TestReport) -> None:
  if (dev := _device_of(report.nodeid)) is None: return
  if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
    c = _counts.setdefault(dev, {"passed": 0, "failed": 0, "skipped": 0})
    c[report.outcome] = c.get(report.outcome, 0) + 1
    if report.skipped and isinstance(report.longrepr, tuple) and f"{dev} unavailable" in str(report.longrepr[2]):
      _skip_reason[dev] = str(report.longrepr[2]).removeprefix("Skipped: ")
      # one summary line per missing device, not one per test location
      report.longrepr = (os.path.join("test", "conftest.py"), 0, report.longrepr[2])

def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
  if not _counts: return
  terminalreporter.write_sep("=", "device suite")
  for dev in BACKENDS:
    c = _counts.get(dev, {})
    line = f"{dev:8s} passed {c.get('passed', 0):6d}  failed {c.get('failed', 0):4d}  skipped {c.get('skipped', 0):6d}"
    terminalreporter.write_line(line + (f"  ({_skip_reason[dev]})" if dev in _skip_reason else ""))

@pytest.fixture(params=BACKENDS)
def device(request: pytest.FixtureRequest) -> Iterator[str]:
  """The backend name; Device.DEFAULT is set to it for the test and restored after."""
  from attograd.device import Device
  name = request.param
  ok, why = Device.available(name)
  if not ok: pytest.skip(f"{name} unavailable: {why}")
  old = Device.DEFAULT
  Device.DEFAULT = name
  try: yield name
  finally: Device.DEFAULT = old

@pytest.fixture(autouse=True)
def _test_timeout() -> Iterator[None]:
  secs = float(os.getenv("TEST_TIMEOUT", "0") or 0)
  if secs <= 0 or not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
    yield
    return
  def on_alarm(signum: int, frame: object) -> None: raise TimeoutError(f"test ran longer than TEST_TIMEOUT={secs:g}s")
  old = signal.signal(signal.SIGALRM, on_alarm)
  signal.setitimer(signal.ITIMER_REAL, secs)
  try: yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)
