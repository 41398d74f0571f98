"""engine/recorder.py: what a TinyJit capture records, reached only through the Recorder installed for it."""
from __future__ import annotations
import threading
import numpy as np
import pytest
from attograd import Device, Tensor, TinyJit, Variable
from attograd.dtype import dtypes
from attograd.engine import recorder
from attograd.engine.realize import CompiledRunner

def test_nothing_active_outside_a_capture(device: str) -> None:
  assert recorder.active() is None
  (Tensor([1.0, 2.0], device=device) + 1).realize()  # runs, records nowhere
  assert recorder.active() is None

def test_kernels_run_inside_the_block_are_reported(device: str) -> None:
  x = Tensor([1.0, 2.0, 3.0], device=device).realize()
  with recorder.recording(recorder.Recorder("test")) as rec:
    assert recorder.active() is rec
    out = (x * 2 + 1).realize()
  assert recorder.active() is None
  assert len(rec.kernels) == 1 and isinstance(rec.kernels[0][0], CompiledRunner)
  assert out.uop.base.realized is rec.kernels[0][1][0]  # the kernel's output buffer is the result's
  np.testing.assert_equal(out.numpy(), [3.0, 5.0, 7.0])

def test_nested_recording_restores_the_outer_one() -> None:
  outer, inner = recorder.Recorder("outer"), recorder.Recorder("inner")
  with recorder.recording(outer):
    with recorder.recording(inner): assert recorder.active() is inner
    assert recorder.active() is outer
  assert recorder.active() is None

def test_other_threads_record_nothing() -> None:
  seen = []
  with recorder.recording(recorder.Recorder("test")):
    th = threading.Thread(target=lambda: seen.append(recorder.active()))
    th.start()
    th.join()
  assert seen == [None]

def test_size_checks_and_rng_go_to_the_recorder() -> None:
  v = Variable("rec_n", 1, 8).bind(3)
  with recorder.recording(recorder.Recorder("test")) as rec:
    Tensor.arange(8).shrink(((0, v),))
    r = Tensor.rand(4)
  assert [c[3].startswith("shrink") for c in rec.size_checks] == [True, True, True]
  # the draw's key buffer is noted, with its device and place in the stream, so a replay can write its own key
  assert len(rec.rng_draws) == 1
  key, device, start = rec.rng_draws[0]
  assert key.uop.base in r.uop.toposort() and key.dtype == dtypes.uint32 and key.shape == (2,)
  assert device == Device.DEFAULT and start == Tensor._rng_host[device][1] - 4
  Tensor.rand(4)
  assert len(rec.rng_draws) == 1  # and only while it is installed

def test_a_capture_that_raises_leaves_no_recorder(device: str) -> None:
  calls = [0]
  @TinyJit
  def f(x: Tensor) -> Tensor:
    calls[0] += 1
    if calls[0] == 2: raise KeyError("boom")  # the capturing call
    return (x + 1).sum()
  f(Tensor([1.0, 2.0], device=device))
  with pytest.raises(KeyError): f(Tensor([1.0, 2.0], device=device))
  assert recorder.active() is None
  for i in range(3): assert f(Tensor([1.0, float(i)], device=device)).item() == 3.0 + i  # captures, then replays
