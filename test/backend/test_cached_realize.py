"""The cached realize: a graph of a structure met before (issue 20's 10-op graph of 16 elements) finds its schedule
and programs in the caches. These tests count the work it does (nodes built, schedules made, kernels lowered, runner
calls), never its time, and check that new inputs still get new results."""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest
import attograd.codegen as codegen_mod
import attograd.schedule.create as create_mod
from attograd import Tensor
from attograd.engine import realize as realize_mod
from attograd.helpers import Context

def graph10(x: Any, y: Any, relu: Callable[[Any], Any]) -> Any:
  """bench/run.py's 10-op graph: one fused kernel."""
  a = relu((x + y) * x - y) * 2.0 + 1.0
  return relu(a * y - x) + 3.0

def np_relu(a: np.ndarray) -> np.ndarray: return np.maximum(a, np.float32(0))

def _inputs(seed: int) -> np.ndarray: return np.random.default_rng(seed).standard_normal(16, dtype=np.float32)

def _counting(monkeypatch: pytest.MonkeyPatch, mod: Any, name: str) -> list[int]:
  """Counts the calls of mod.name from now on."""
  calls, fn = [0], getattr(mod, name)
  def counted(*args: Any, **kwargs: Any) -> Any:
    calls[0] += 1
    return fn(*args, **kwargs)
  monkeypatch.setattr(mod, name, counted)
  return calls

def test_cached_realize_builds_only_the_placeholders(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
  # the normalized graph of a structure met before is in the hash-consing table (its schedule's key holds it): the
  # normalize pass finds its nodes there and builds only a placeholder per input buffer
  y = Tensor(_inputs(1)).realize()
  graph10(Tensor(_inputs(0)), y, Tensor.relu).realize()
  built = _counting(monkeypatch, create_mod, "new_uop")
  templates = _counting(monkeypatch, create_mod, "_make_template")
  xn = _inputs(2)
  out = graph10(Tensor(xn), y, Tensor.relu).numpy()
  assert (built[0], templates[0]) == (2, 0)
  np.testing.assert_allclose(out, graph10(xn, y.numpy(), np_relu), rtol=1e-5, atol=1e-5)

def test_cached_realize_lowers_nothing_and_new_inputs_get_new_results(device: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
  y = Tensor(_inputs(1)).realize()
  graph10(Tensor(_inputs(0)), y, Tensor.relu).realize()
  lowered = _counting(monkeypatch, codegen_mod, "get_program")
  monkeypatch.setattr(realize_mod, "get_program", codegen_mod.get_program)
  templates = _counting(monkeypatch, create_mod, "_make_template")
  for seed in (3, 4, 5):
    xn = _inputs(seed)
    got = graph10(Tensor(xn), y, Tensor.relu).numpy()
    np.testing.assert_allclose(got, graph10(xn, y.numpy(), np_relu), rtol=1e-5, atol=1e-5)
  assert (lowered[0], templates[0]) == (0, 0)

def test_cached_realize_calls_the_program_directly(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
  # where the runtime exposes the kernel's C function (CPU), an unwatched cached realize calls it without the
  # runner's own call; DEBUG=2 (which times each kernel) goes through the runner, and so does every other device
  y = Tensor(_inputs(1)).realize()
  for _ in range(2): graph10(Tensor(_inputs(0)), y, Tensor.relu).realize()
  through_runner = _counting(monkeypatch, realize_mod.CompiledRunner, "__call__")
  runners: list[realize_mod.CompiledRunner] = []
  get_runner = realize_mod.get_runner
  monkeypatch.setattr(realize_mod, "get_runner", lambda *a: runners.append(r := get_runner(*a)) or r)
  xn = _inputs(6)
  out = graph10(Tensor(xn), y, Tensor.relu).realize()
  assert len(runners) == 1
  runner = runners[0]
  assert through_runner[0] == (0 if runner._direct is not None else 1)
  np.testing.assert_allclose(out.numpy(), graph10(xn, y.numpy(), np_relu), rtol=1e-5, atol=1e-5)
  with Context(DEBUG=2):
    graph10(Tensor(_inputs(7)), y, Tensor.relu).realize()
  assert through_runner[0] == (1 if runner._direct is not None else 2)

def test_inputs_from_writable_and_readonly_memory(device: str) -> None:
  # a writable view is copied in from its own memory, a read-only one (bytes) through a private copy
  vals = np.arange(16, dtype=np.float32)
  np.testing.assert_array_equal(Tensor(vals.copy()).numpy(), vals)
  np.testing.assert_array_equal(Tensor(bytearray(vals.tobytes()), dtype="float32").numpy(), vals)
  np.testing.assert_array_equal(Tensor(vals.tobytes(), dtype="float32").numpy(), vals)
  ro = vals.copy()
  ro.flags.writeable = False
  np.testing.assert_array_equal(Tensor(ro).numpy(), vals)
