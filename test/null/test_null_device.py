"""The NULL device: the same schedule and the same C kernels as CPU, built and "run" without any memory or compute, and
a clear error (or zeros, under NULL_ALLOW_COPYOUT=1) when its values are read. It needs no compiler, so it is tested
here with the device-free tests."""
import time
import numpy as np
import pytest
from attograd import Tensor, nn
from attograd.codegen import get_program
from attograd.device import Device
from attograd.engine.realize import run_linear
from attograd.helpers import Context, GlobalCounters
from attograd.renderer.cstyle import ClangRenderer
from attograd.uop.ops import Ops

def _model(device: str) -> Tensor:
  """A small network's forward and loss on `device`: a matmul, reduces, softmax, casts."""
  x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6), device=device)
  w = Tensor.ones(6, 5, device=device).contiguous()
  h = (x @ w).relu().softmax(-1)
  return (h.half().float().sum(0) * 2 - x[:, :5].mean(0)).contiguous()

def test_schedules_and_renders_what_cpu_would():
  null_linear, _ = _model("NULL").linear_with_vars()
  cpu_linear, _ = _model("CPU").linear_with_vars()  # scheduled only: CPU's compiler is never started
  assert len(null_linear.src) == len(cpu_linear.src) > 2
  assert [c.src[0].op for c in null_linear.src] == [c.src[0].op for c in cpu_linear.src]
  assert [c.src[0] for c in null_linear.src if c.src[0].op is Ops.SINK] == \
         [c.src[0] for c in cpu_linear.src if c.src[0].op is Ops.SINK]
  null_r, cpu_r = Device["NULL"].renderer, ClangRenderer("CPU", threads=False)
  for call in null_linear.src:
    if call.src[0].op is not Ops.SINK: continue
    assert call.device == "NULL"
    null_src, cpu_src = get_program(call.src[0], null_r).src, get_program(call.src[0], cpu_r).src
    assert null_src == cpu_src and "void " in null_src

def test_kernels_are_built_and_counted_but_nothing_is_stored():
  GlobalCounters.reset()
  out = _model("NULL")
  n = sum(c.src[0].op is Ops.SINK for c in out.linear_with_vars()[0].src)
  out = _model("NULL").realize()
  assert GlobalCounters.kernel_count == n
  assert out.uop.base.realized is not None and out.device == "NULL"
  # no memory behind a buffer: 32 GiB "allocates" at once
  st = time.perf_counter()
  (Tensor.empty(1 << 33, device="NULL") + 1).realize()
  assert time.perf_counter() - st < 5

def test_reading_values_raises():
  t = (Tensor([1.0, 2.0, 3.0], device="NULL") * 2).realize()
  for read in (t.numpy, t.tolist, lambda: t.to("CPU").numpy(), lambda: t.sum().item()):
    with pytest.raises(RuntimeError, match="NULL"): read()

def test_allow_copyout_reads_zeros():
  t = (Tensor([1.0, 2.0, 3.0], device="NULL") * 2).realize()
  with Context(NULL_ALLOW_COPYOUT=1):
    assert t.tolist() == [0.0, 0.0, 0.0]
    assert t.to("CPU").numpy().tolist() == [0.0, 0.0, 0.0]

def test_default_device_null_runs_a_training_step():
  old = Device.DEFAULT
  Device.DEFAULT = "NULL"
  try:
    layer, x = nn.Linear(8, 4), Tensor.empty(2, 8)
    opt = nn.optim.SGD(nn.state.get_parameters(layer), lr=0.1)
    with Tensor.train():
      opt.zero_grad()
      loss = layer(x).relu().sum()
      loss.backward()
      GlobalCounters.reset()
      opt.step()
    assert GlobalCounters.kernel_count >= 1 and layer.weight.device == "NULL"
  finally: Device.DEFAULT = old

def test_run_linear_on_null_allocates_the_outputs():
  a = Tensor.empty(10, device="NULL")
  linear, var_vals = (a + 1).linear_with_vars()
  assert a.uop.base.realized is None
  run_linear(linear, var_vals)
  assert a.uop.base.realized is not None

def test_copies_between_null_devices_read_nothing():
  # NULL -> NULL:1 moves no bytes through the host (a copyout there would raise): sharding works as on real devices
  a = (Tensor.arange(24, device="NULL").reshape(4, 6) + 1).realize()
  s = a.shard(("NULL:1", "NULL:2"), axis=1).realize()
  r = a.to(("NULL:1", "NULL:2")).realize()
  assert (s * 2).sum(0).realize().device == ("NULL:1", "NULL:2") and r.device == ("NULL:1", "NULL:2")
  with pytest.raises(RuntimeError, match="NULL"): s.numpy()

_MEMORY_CHECK = """
import gc
from attograd import Tensor, GlobalCounters
base, per = GlobalCounters.mem_used, dict(GlobalCounters.mem_used_per_device)
def used(dev): return GlobalCounters.mem_used_per_device[dev] - per.get(dev, 0)
# the process's first copy (the 1st contiguous()) is the node the schedule cache keys its graph by, a graph of
# constants being its own normal form: the cache outlives the tensor, but must not keep the result's buffer alive
z = Tensor.ones(25, device="NULL:6").contiguous().realize()
assert used("NULL:6") == 100
del z
gc.collect()
assert used("NULL:6") == 0, GlobalCounters.mem_used_per_device
a = Tensor.zeros(10, 10, device="NULL:3").contiguous().realize()
s = Tensor.ones(10, 10, device="NULL:3").contiguous().shard(("NULL:4", "NULL:5"), axis=0).realize()
gc.collect()
assert (used("NULL:3"), used("NULL:4"), used("NULL:5")) == (400, 200, 200), GlobalCounters.mem_used_per_device
assert GlobalCounters.mem_used - base == 800
del s
gc.collect()
assert (used("NULL:4"), used("NULL:5")) == (0, 0), GlobalCounters.mem_used_per_device
"""

def test_memory_used_is_counted_per_device():
  # in a fresh interpreter: the totals are process-wide, and what other tests leave alive (a requires_grad tensor keeps
  # the graphs of realized values) or free meanwhile would move them
  import subprocess, sys
  r = subprocess.run([sys.executable, "-c", _MEMORY_CHECK], capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]

def test_combining_two_devices_raises_what_tinygrad_and_attograd_code_catch():
  a, b = Tensor.empty(3, device="NULL"), Tensor.empty(3, device="NULL:1")
  for combine in (lambda: a + b, lambda: Tensor.empty(4, 3, device="NULL")[b.cast("int32")], lambda: a.assign(b)):
    with pytest.raises(ValueError, match="device mismatch"): combine()
    with pytest.raises(RuntimeError, match="device mismatch"): combine()

def test_ops_that_select_by_a_mask_check_devices_too():
  # gather, scatter and the sparse cross-entropy combine through where(): a condition on another device is refused
  # like any other mix of devices, rather than computed on the index's device
  x, idx = Tensor.zeros(3, 4, device="NULL"), Tensor.zeros(3, 4, dtype="int32", device="NULL:1")
  for combine in (lambda: x.gather(0, idx), lambda: x.scatter(0, idx.to("NULL"), Tensor.ones(3, 4, device="NULL:1")),
                  lambda: x[:2, :3].sparse_categorical_crossentropy(Tensor([0, 1], dtype="int32", device="NULL:1")),
                  lambda: (x > 0).where(Tensor.ones(3, 4, device="NULL:1"), 0.0)):
    with pytest.raises(RuntimeError, match="device mismatch"): combine()
  assert x.gather(0, idx.to("NULL")).device == "NULL"

def test_a_tuple_of_one_device_is_that_device():
  t = Tensor([1.0, 2.0], device=("NULL:1",))
  assert t.device == "NULL:1" and Tensor.zeros(2, device=["NULL:1"]).device == "NULL:1"
  assert (t + Tensor([3.0, 4.0], device="NULL:1")).device == "NULL:1"
  assert Tensor.empty(2, device="NULL").shard(("NULL:1",)).device == "NULL:1"
  assert Device.canonicalize(("NULL", "NULL:1")) == ("NULL", "NULL:1")

def test_realize_frees_a_result_without_the_garbage_collector():
  # the scheduler's passes must leave no reference cycle through the graph: one would keep a dropped result's buffer
  # (and the graph's) alive until the garbage collector runs
  import gc, weakref
  from attograd.engine.buffers import buffers
  a = Tensor.empty(16, device="NULL").realize()
  gc.disable()
  try:
    for _ in range(2):  # the first realize builds the schedule, the second takes it from the cache
      r = ((a + 1) * 2).relu().realize()
      ref = weakref.ref(buffers[r.uop.base])
      del r
      assert ref() is None
  finally: gc.enable()
