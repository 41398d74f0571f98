"""The memory planner: lifetimes and best-fit slots, reuse inside real schedules with unchanged results, intermediates
still referenced are kept, and a schedule over the memory limit fails before any kernel runs."""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest
from attograd import Context, Device, GlobalCounters, Tensor
from attograd.engine import memory
from attograd.engine.memory import MemoryLimitError, PooledBuffer, plan_memory
from attograd.engine.realize import run_schedule
from attograd.schedule import memory as schedule_memory
import attograd.tensor.core

@pytest.fixture(autouse=True)
def _pool_everything(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(schedule_memory, "POOL_MIN_BYTES", 0)  # the tests' buffers are tiny

def rnd(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

# ***** the planner on its own *****

SIZES = {"in": 100, "a": 400, "b": 400, "c": 200, "d": 400, "out": 50}
def info(k: Any) -> tuple[str, int]: return "CPU", SIZES[k]

def test_plan_reuses_dead_slots() -> None:
  # a chain: each kernel writes one buffer and reads the one before
  steps = [["a", "in"], ["b", "a"], ["c", "b"], ["d", "c"], ["out", "d"]]
  p = plan_memory(steps, info, {"a", "b", "c", "d"}, {"in"})
  assert len(p.slots) == 2  # ping-pong: a and b overlap, c reuses a's slot, d reuses b's
  assert p.slot_of["a"] == p.slot_of["c"] and p.slot_of["b"] == p.slot_of["d"] != p.slot_of["a"]
  assert p.peak["CPU"] == 100 + 400 + 400 and p.unpooled_peak["CPU"] == 100 + 400 * 3 + 200 + 50  # in, two slots
  assert p.at_peak["CPU"][0] in ("a", "b", "d")

def test_plan_best_fit_and_same_step() -> None:
  # c is written by the kernel that reads a last: it can't take a's slot (a is still read there)
  p = plan_memory([["a"], ["b"], ["c", "a"], ["d", "b", "c"]], info, {"a", "b", "c", "d"}, set())
  assert p.slot_of["c"] != p.slot_of["a"] and p.slot_of["d"] == p.slot_of["a"]
  # the smallest free slot that fits wins
  sizes = {"x": 1000, "y": 100, "z": 90, "w": 90}
  p = plan_memory([["x"], ["y"], ["z", "x", "y"], ["w", "z"]], lambda k: ("CPU", sizes[k]), set(sizes), set())
  assert p.slot_of["w"] == p.slot_of["y"]

# ***** real schedules *****

def _chain(x: Tensor, ws: list[Tensor]) -> Tensor:
  for w in ws: x = (x @ w).relu()  # each matmul (a reduce) ends its kernel: a chain of dead intermediates
  return x.sum()

def _np_chain(x: np.ndarray, ws: list[np.ndarray]) -> np.ndarray:
  for w in ws: x = np.maximum(x @ w, 0)
  return x.sum()

def _pooled_runs(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
  seen: list[list[Any]] = []
  def spy(items: Any) -> None:
    seen.append([b for si in items for b in si.bufs])
    run_schedule(items)
  monkeypatch.setattr(attograd.tensor.core, "run_schedule", spy)
  return seen

def test_schedule_reuses_and_matches(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
  x, ws = rnd(8, 16, seed=1), [rnd(16, 16, seed=2 + i) * 0.3 for i in range(5)]
  seen = _pooled_runs(monkeypatch)
  got = _chain(Tensor(x), [Tensor(w) for w in ws]).numpy()
  with Context(NO_MEMORY_PLANNER=1): ref = _chain(Tensor(x), [Tensor(w) for w in ws]).numpy()
  np.testing.assert_allclose(got, ref, rtol=1e-5)
  np.testing.assert_allclose(got, _np_chain(x, ws), rtol=1e-4)
  pooled = {id(b): b for b in seen[0] if isinstance(b, PooledBuffer)}
  assert len(pooled) >= 3 and len({id(b.slot) for b in pooled.values()}) < len(pooled)  # storage really is shared
  assert not any(isinstance(b, PooledBuffer) for b in seen[1])

@pytest.mark.parametrize("build", [
  lambda x: ((x.exp() @ x.T).softmax(1) @ x).sum(0),
  lambda x: (x.sum(1, keepdim=True) - x).max(1).relu() * x.mean(),
  lambda x: x.reshape(4, 2, 8).permute(1, 0, 2).contiguous().sum(2).sum(),
], ids=["attention", "reduces", "permute"])
def test_results_unchanged(build: Callable[[Tensor], Tensor]) -> None:
  x = rnd(8, 8, seed=3)
  got = build(Tensor(x)).numpy()
  with Context(NO_MEMORY_PLANNER=1): ref = build(Tensor(x)).numpy()
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)

def test_held_intermediate_is_kept_and_reused(monkeypatch: pytest.MonkeyPatch) -> None:
  x, w = rnd(4, 8, seed=4), rnd(8, 8, seed=5)
  a = (Tensor(x) @ Tensor(w)).relu().contiguous()  # held by this test: its value must survive the realize of b
  b = (a @ Tensor(w)).relu().sum()                   # (a @ w) is dead after b: pooled (the relu keeps it a kernel
                                                     # of its own: a sum of the product alone merges into one reduce)
  b.realize()
  k = GlobalCounters.kernel_count
  np.testing.assert_allclose(a.numpy(), np.maximum(x @ w, 0), rtol=1e-5)
  assert GlobalCounters.kernel_count == k  # a was remembered, not recomputed
  del a
  seen = _pooled_runs(monkeypatch)
  ((Tensor(x) @ Tensor(w)).relu().contiguous() @ Tensor(w)).relu().sum().realize()
  assert len({id(b) for b in seen[0] if isinstance(b, PooledBuffer)}) == 2  # nothing holds this graph: both pooled

def test_peak_reported_with_debug(capsys: pytest.CaptureFixture[str]) -> None:
  with Context(DEBUG=2): _chain(Tensor(rnd(8, 16)), [Tensor(rnd(16, 16, seed=i)) for i in range(4)]).realize()
  lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("memory:")]
  assert len(lines) == 1 and "peaks at" in lines[0] and "shared slots" in lines[0]

def test_limit_fails_before_any_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
  x = rnd(64, 64, seed=6)
  t = (Tensor(x) @ Tensor(x)).relu().sum(1)
  monkeypatch.setattr(Device["CPU"], "memory_limit", 20000, raising=False)
  k = GlobalCounters.kernel_count
  with pytest.raises(MemoryLimitError, match=r"needs \d+ bytes on CPU at its peak, over the limit of 20000 bytes.*"
                                             r"\(64, 64(, 1)?\) dtypes.float \(16384 bytes\)"):
    t.realize()
  assert GlobalCounters.kernel_count == k
  monkeypatch.setattr(Device["CPU"], "memory_limit", 0)
  np.testing.assert_allclose(t.numpy(), np.maximum(x @ x, 0).sum(1), rtol=1e-4)  # nothing half-done was remembered

def test_limit_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(memory, "getenv", lambda key, default=0: 100 if key == "MEMORY_LIMIT" else default)
  with pytest.raises(MemoryLimitError, match="limit of 100 bytes"): (Tensor(rnd(64)) + 1).realize()

def test_small_schedules_skip_the_liveness_pass(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(schedule_memory, "POOL_MIN_BYTES", 1 << 16)
  calls = []
  monkeypatch.setattr(schedule_memory, "held_nodes", lambda *a: calls.append(1) or set())
  _chain(Tensor(rnd(8, 16)), [Tensor(rnd(16, 16, seed=i)) for i in range(3)]).realize()
  assert calls == []
  _chain(Tensor(rnd(128, 128)), [Tensor(rnd(128, 128, seed=i)) for i in range(3)]).realize()  # 64 KB intermediates
  assert calls == [1]
