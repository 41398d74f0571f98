"""The profiler: `with profile(path)` and PROFILE=1 write a Chrome trace with every schedule, lowering, compile,
kernel, copy and jit replay, one process row per device, and cost nothing when off."""
from __future__ import annotations
import json, os, subprocess, sys
from attograd import Tensor, TinyJit, profile
from attograd.engine.profile import PROFILER

def _spans(path: str) -> list[dict]:
  with open(path) as f: trace = json.load(f)
  return [e for e in trace["traceEvents"] if e["ph"] == "X"]

def test_profile_block_records_every_step(device: str, tmp_path) -> None:
  path = str(tmp_path / "trace.json")
  with profile(path):
    a = Tensor.arange(64 * 64).reshape(64, 64).float() * 0.001
    (a @ a.T).relu().sum().realize()
  spans = _spans(path)
  cats = {e["cat"] for e in spans}
  assert {"schedule", "kernel"} <= cats
  kernels = [e for e in spans if e["cat"] == "kernel"]
  assert all(e["args"]["bytes"] > 0 and "flops" in e["args"] for e in kernels)
  assert any(e["args"]["flops"] >= 2 * 64 ** 3 for e in kernels)  # the matmul's FLOPs
  with open(path) as f: names = [e for e in json.load(f)["traceEvents"] if e["name"] == "process_name"]
  assert device in {e["args"]["name"] for e in names}
  assert not PROFILER.active  # off again after the block

def test_profile_records_compiles_copies_and_jit(tmp_path) -> None:
  path = str(tmp_path / "trace.json")
  with profile(path):
    x = Tensor([1.0, 2.0, 3.0]) * 7.25 + 0.5  # a kernel no earlier test compiled
    x.realize()
    x.to("PYTHON").realize()
    @TinyJit
    def f(t: Tensor) -> Tensor: return (t * 3).sum()
    for _ in range(3): f(Tensor([1.0, 2.0])).realize()
  spans = _spans(path)
  cats = [e["cat"] for e in spans]
  assert "lower" in cats and "compile" in cats and "copy" in cats and "jit" in cats
  copy = next(e for e in spans if e["cat"] == "copy")
  assert copy["args"]["bytes"] == 12 and copy["dur"] >= 0

def test_profile_env_writes_at_exit(tmp_path) -> None:
  path = tmp_path / "t.json"
  env = {**os.environ, "PROFILE": "1", "PROFILE_PATH": str(path)}
  code = "from attograd import Tensor; (Tensor([1.0, 2.0]) + 1).realize()"
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
  assert "trace of" in out.stdout
  assert any(e["cat"] == "kernel" for e in _spans(str(path)))

def test_profiler_off_records_nothing() -> None:
  n = len(PROFILER.events)
  (Tensor([4.0, 5.0]) * 2).realize()
  assert len(PROFILER.events) == n
