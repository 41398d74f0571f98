"""Shared pytest setup: the `device` fixture runs a test once per backend, and the `slow` marker.

TEST_DEVICES=CPU (a comma list) limits the backends for a quick run; TEST_TIMEOUT=20 fails any test that runs longer
than 20 s (a hang in a pure-Python loop becomes a TimeoutError with a traceback instead of a stuck run).
"""
from __future__ import annotations
import os, signal, sys, threading
from typing import Iterator
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # so tests can `from helpers import ...` however pytest is started

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def _backends() -> list[str]:
  if (env := os.getenv("TEST_DEVICES")): return [d.strip().upper() for d in env.split(",") if d.strip()]
  names = ["CPU", "PYTHON"]
  # CL joins the suite once it has a runtime; looking for the file keeps collection free of imports
  if os.path.exists(os.path.join(_ROOT, "attograd", "runtime", "ops_cl.py")): names.append("CL")
  if os.path.exists(os.path.join(_ROOT, "attograd", "runtime", "ops_llvm.py")): names.append("LLVM")
  return names

BACKENDS = _backends()

def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line("markers", "slow: long-running test (deselect with -m 'not slow')")

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
