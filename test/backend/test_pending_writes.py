"""Lazy assign (tensor/pending.py): Tensor.assign into a realized buffer runs when a realize needs that buffer, with
the values an eager write at that line would give."""
from __future__ import annotations
import numpy as np
from attograd import GlobalCounters, Tensor, TinyJit
import attograd.tensor.pending as pending

def _kernels(fn) -> int:
  k0 = GlobalCounters.kernel_count
  fn()
  return GlobalCounters.kernel_count - k0

def test_write_runs_at_the_realize(device: str) -> None:
  w = Tensor([1.0, 2.0, 3.0], device=device).realize()
  assert _kernels(lambda: w.assign(w * 3 - 1)) == 0
  assert pending.pending
  assert _kernels(w.realize) == 1 and not pending.pending
  assert _kernels(w.realize) == 0 and w.tolist() == [2.0, 5.0, 8.0]

def test_reading_a_view_runs_the_write_into_its_buffer(device: str) -> None:
  # the write is keyed by the memory it writes: the whole tensor, a reshape or a graph over any of them finds it
  x = Tensor.zeros(2, 3, device=device).contiguous().realize()
  flat = x.reshape(6)
  x[1:].assign(Tensor.ones(1, 3, device=device) * 7)
  assert (flat + 1).tolist() == [1.0, 1.0, 1.0, 8.0, 8.0, 8.0]
  assert x.tolist() == [[0.0, 0.0, 0.0], [7.0, 7.0, 7.0]]

def test_old_value_readers_keep_their_values(device: str) -> None:
  # built before the write, a lazy tensor keeps the values of then, however late it is read, and mixed with the
  # new values after
  w = Tensor([1.0, 2.0], device=device).realize()
  before = w * 10
  w.assign(Tensor([5.0, 6.0], device=device))
  mix = before + w
  assert mix.tolist() == [15.0, 26.0] and before.tolist() == [10.0, 20.0] and w.tolist() == [5.0, 6.0]

def test_reads_between_two_writes(device: str) -> None:
  x = Tensor([1.0], device=device).realize()
  reads = [x + 0]
  for step in (lambda v: v * 2, lambda v: v + 3, lambda v: v * v):
    x.assign(step(x))
    reads.append(x + 0)
  # read newest first: each still sees the state after the writes made before it was built, and no later one
  assert [r.item() for r in reversed(reads)] == [25.0, 5.0, 2.0, 1.0]

def test_two_writes_in_order_across_buffers(device: str) -> None:
  # b's value reads a's new value, and a's value reads b's old one: realizing only b runs a's write first, and a
  # later realize of a doesn't run it again
  a = Tensor([2.0, 2.0], device=device).realize()
  b = Tensor([3.0, 3.0], device=device).realize()
  a += b
  b += a
  assert b.tolist() == [8.0, 8.0]
  assert _kernels(a.realize) == 0 and a.tolist() == [5.0, 5.0]

def test_write_after_a_pending_read_of_its_target(device: str) -> None:
  # a's pending write reads b; b is written after: a still reads b's values from before b's write
  a = Tensor([0.0, 0.0], device=device).realize()
  b = Tensor([1.0, 2.0], device=device).realize()
  a.assign(b * 2)
  b.assign(Tensor([9.0, 9.0], device=device))
  assert b.tolist() == [9.0, 9.0] and a.tolist() == [2.0, 4.0]

def test_a_write_nothing_read_is_dropped(device: str) -> None:
  t = Tensor.empty(4, device=device)
  t.assign(Tensor.full((4,), 1.0, device=device))
  t.assign(Tensor.full((4,), 2.0, device=device))
  assert _kernels(t.realize) == 1 and t.tolist() == [2.0] * 4

def test_a_write_read_in_between_is_kept(device: str) -> None:
  t = Tensor.zeros(2, device=device).contiguous().realize()
  u = Tensor.zeros(2, device=device).contiguous().realize()
  t.assign(Tensor.full((2,), 1.0, device=device))
  u.assign(t + 1)  # reads the first write's values (pending too)
  t.assign(Tensor.full((2,), 5.0, device=device))
  assert u.tolist() == [2.0, 2.0] and t.tolist() == [5.0, 5.0]

def test_realize_together(device: str) -> None:
  a = Tensor([1.0, 1.0], device=device).realize()
  b = Tensor([2.0, 2.0], device=device).realize()
  a.assign(a * 4)
  b.assign(b + a)
  assert _kernels(lambda: Tensor.realize(a, b)) == 2 and not pending.pending
  assert a.tolist() == [4.0, 4.0] and b.tolist() == [6.0, 6.0]

def test_setitem_is_lazy_after_a_pending_assign(device: str) -> None:
  # setitem into a realized buffer is lazy too (as in tinygrad): it waits behind the pending assign, and both run, in
  # order, at the next realize
  x = Tensor.zeros(4, device=device).contiguous().realize()
  x.assign(x + 1)
  n = len(pending.pending)
  assert _kernels(lambda: x.__setitem__(slice(0, 2), 7.0)) == 0 and len(pending.pending) == n + 1
  assert _kernels(x.realize) == 2 and not pending.pending
  assert x.tolist() == [7.0, 7.0, 1.0, 1.0]

def test_jit_runs_earlier_writes_once(device: str) -> None:
  # a write made before a jitted call runs before the call, not inside the capture (which would replay it each call)
  @TinyJit
  def f(t: Tensor) -> Tensor: return (t * 2).contiguous()
  x = Tensor([1.0, 2.0], device=device).realize()
  outs = []
  for i in range(4):
    x.assign(x + 1)
    outs.append(f(x).tolist())
  assert outs == [[4.0, 6.0], [6.0, 8.0], [8.0, 10.0], [10.0, 12.0]] and x.tolist() == [5.0, 6.0]

def test_write_inside_jit_is_replayed(device: str) -> None:
  @TinyJit
  def step(t: Tensor) -> None:
    t.assign(t + 1)
    t.realize()
  x = Tensor([0.0], device=device).realize()
  for _ in range(5): step(x)
  assert x.item() == 5.0

def test_sum_over_size_one_axes_is_not_a_view(device: str) -> None:
  # nothing to combine, but the result is a tensor of its own (PyTorch's): writing it leaves the input alone, and a
  # pending write into the input is read by it
  x = Tensor([[1.0, 2.0]], device=device).realize()
  s = x.sum(0, keepdim=True)
  s += 1
  assert x.tolist() == [[1.0, 2.0]] and s.tolist() == [[2.0, 3.0]]
  x.assign(x * 5)
  assert x.max(0).tolist() == [5.0, 10.0]

def test_optimizer_step_reader_sees_a_pending_write(device: str) -> None:
  # a lazy tensor reading a weight the step writes is computed in the step's schedule, before the write; what it reads
  # of another buffer with a pending write is that write's new values
  from attograd.nn.optim import SGD
  p = Tensor([1.0, 2.0], device=device, requires_grad=True).realize()
  q = Tensor([10.0, 10.0], device=device).realize()
  opt = SGD([p], lr=1.0)
  (p * 3).sum().backward()
  q.assign(q + 5)
  r = p * q
  with Tensor.train(): opt.step()
  assert r.tolist() == [15.0, 30.0] and p.tolist() == [-2.0, -1.0] and q.tolist() == [15.0, 15.0]

def test_disk_write_after_a_pending_read_of_the_file(device: str, tmp_path) -> None:
  # a pending write reads the file through a view; writing the file after must not change what it reads
  path = tmp_path / "w.bin"
  path.write_bytes(np.array([1.0, 2.0], dtype=np.float32).tobytes())
  f = Tensor(path, dtype="float32")
  a = Tensor.zeros(2, device=device).contiguous().realize()
  a.assign(f[0:2].to(device) * 10)
  f.assign(Tensor([7.0, 8.0]))
  assert a.tolist() == [10.0, 20.0] and f.to(device).tolist() == [7.0, 8.0]

def test_schedule_linear_takes_the_pending_write(device: str) -> None:
  # a schedule made but not run carries the writes it needs, ahead of its own kernels
  from attograd.engine.realize import run_linear
  x = Tensor([1.0, 2.0], device=device).realize()
  x.assign(x * 3)
  y = x + 1
  linear = y.schedule_linear()
  assert len(linear.src) == 2 and not pending.pending
  run_linear(linear, {})
  assert y.tolist() == [4.0, 7.0] and x.tolist() == [3.0, 6.0]

def test_random_programs_match_eager_writes(device: str) -> None:
  # random mixes of whole, slice and view assigns, +=, setitem, lazy readers (some mixing an old reader with new
  # values), reads and realizes of three buffers: every value read is that of a program whose writes ran at their
  # lines (numpy's). Views taken at the start keep seeing each buffer's current values
  rng = np.random.default_rng(14)
  for _ in range(16):
    ref = {n: rng.integers(0, 5, 6).astype(np.float32) for n in "abc"}
    ts = {n: Tensor(ref[n], device=device).realize() for n in "abc"}
    views = {n: ts[n].reshape(2, 3) for n in "abc"}
    readers: list[tuple[Tensor, np.ndarray]] = []
    for _ in range(14):
      n, m = rng.choice(list("abc"), 2)
      k, lo = float(rng.integers(1, 4)), int(rng.integers(0, 3))
      op = int(rng.integers(0, 10))
      if op == 0:
        ts[n].assign(ts[n] * k + ts[m])
        ref[n] = ref[n] * k + ref[m]
      elif op == 1:
        ts[n][lo:lo + 3].assign(ts[m][lo + 1:lo + 4] + k)
        ref[n][lo:lo + 3] = ref[m][lo + 1:lo + 4] + k
      elif op == 2:
        ts[n] += ts[m].flip(0)
        ref[n] = ref[n] + ref[m][::-1]
      elif op == 3:
        ts[n][lo] = k
        ref[n][lo] = k
      elif op == 4: readers.append((ts[n] * k - ts[m], ref[n] * k - ref[m]))
      elif op == 5 and readers:
        t, want = readers[int(rng.integers(len(readers)))]
        np.testing.assert_equal(t.numpy(), want)
      elif op == 6 and readers:
        t, want = readers[int(rng.integers(len(readers)))]
        readers.append((t + ts[n], want + ref[n]))
      elif op == 7:  # a column written through a view taken at the start
        views[n].T[lo].assign(views[m].T[(lo + 1) % 3] * k)
        col = ref[n].reshape(2, 3)
        col[:, lo] = ref[m].reshape(2, 3)[:, (lo + 1) % 3] * k
      elif op == 8: Tensor.realize(*ts.values())
      else: np.testing.assert_equal(views[n].numpy().reshape(6), ref[n])
    for t, want in reversed(readers): np.testing.assert_equal(t.numpy(), want)
    for n in "abc": np.testing.assert_equal(ts[n].numpy(), ref[n])

def test_reader_equal_to_a_realized_one_keeps_its_values(device: str) -> None:
  # m2 is the very node m1 was realized from: its value is remembered from b's buffer, which the write makes stale,
  # so m2 is a reader of b too (else it would be computed again from the new values)
  for write in (lambda b: b[0:1].assign(Tensor([100.0], device=device)), lambda b: b.assign(b * 0)):
    x = Tensor([1.0, 2.0], device=device).realize()
    b = Tensor([10.0, 20.0], device=device).realize()
    r = (x * 2).contiguous().realize()
    m1, m2 = r + b, r + b
    m1.numpy()
    write(b)
    assert m2.tolist() == [12.0, 24.0] and m1.tolist() == [12.0, 24.0]

def test_setitem_of_a_slice_writes_only_the_slice(device: str) -> None:
  x = Tensor.zeros(100, device=device).contiguous().realize()
  # (requires_grad=False: a value backward() may fill the .grad of is written at once, the written tensor
  # remembering its graph; test_grad_semantics.py has that case)
  v = Tensor.ones(30, device=device).contiguous().realize()
  v.requires_grad = False
  GlobalCounters.reset()
  n = len(pending.pending)  # (earlier tests' writes to buffers nothing reads again may still wait)
  x[20:50] = v
  x[60] = 5.0
  assert GlobalCounters.kernel_count == 0 and len(pending.pending) == n + 2
  x.realize()
  # two kernels over their regions: 30 elements read and written, then one written (not the whole 100 each time)
  assert GlobalCounters.kernel_count == 2 and GlobalCounters.global_mem == (30 * 2 + 1) * 4
  want = np.zeros(100, np.float32)
  want[20:50], want[60] = 1.0, 5.0
  np.testing.assert_equal(x.numpy(), want)

# ***** Tensor.callify (tinygrad's): a buffer of its own now, the value written there at the first realize *****

def test_callify_gives_a_buffer_and_computes_lazily(device: str) -> None:
  a, b = Tensor([1.0, 2.0, 3.0], device=device), Tensor([4.0, 5.0, 6.0], device=device)
  c, d = a + b, a * b
  assert _kernels(lambda: c.callify(d)) == 0
  assert c.uop.base.op.name == "BUFFER" and d.uop.base.op.name == "BUFFER" and c.uop.base is not d.uop.base
  e = c * 2  # built on c's buffer: reading it runs c's write first
  assert e.tolist() == [10.0, 14.0, 18.0] and d.tolist() == [4.0, 10.0, 18.0]
  assert _kernels(lambda: c.callify(d)) == 0 and c.tolist() == [5.0, 7.0, 9.0]  # a buffer already: left alone

def test_callify_of_a_weak_constant_and_an_int_and_a_reduce(device: str) -> None:
  w = Tensor(2.0, device=device) + Tensor(3.0, device=device)  # a weak float: its buffer is float32
  w.callify()
  assert w.dtype == Tensor([1.0]).dtype and w.item() == 5.0
  i = Tensor([1, 2], device=device) + 3
  assert i.callify().tolist() == [4, 5]
  r = Tensor([1.0, 2.0, 3.0, 4.0], device=device).sum()
  assert r.callify().item() == 10.0

def test_callify_keeps_the_gradient_path(device: str) -> None:
  w = Tensor([1.0, 2.0], device=device, requires_grad=True)
  y = (w * w).callify()
  (y * 3).sum().backward()
  assert w.grad is not None and w.grad.tolist() == [6.0, 12.0]
