"""How many kernels a graph becomes: elementwise chains and reduces fuse, shared work runs once, deep graphs work."""
from __future__ import annotations
from typing import Callable
import numpy as np
import pytest
from helpers import compare
from attograd import GlobalCounters, Tensor

N, M = 4, 6  # (N, M) inputs: small enough for the PYTHON device

def realized(*shape: int, seed: int = 0) -> tuple[Tensor, np.ndarray]:
  x = np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)
  return Tensor(x).realize(), x

def count_kernels(fn: Callable[[], None]) -> int:
  GlobalCounters.reset()
  fn()
  return GlobalCounters.kernel_count

def test_elementwise_then_reduce_is_one_kernel(device: str) -> None:
  (a, an), (b, bn) = realized(N, M), realized(N, M, seed=1)
  out = ((a * 2 + b).relu() * 3).sum(axis=1)
  assert count_kernels(out.realize) == 1
  compare(out, (np.maximum(an * 2 + bn, 0) * 3).sum(axis=1), atol=1e-5)

def test_elementwise_chain_of_10_is_one_kernel(device: str) -> None:
  (a, an), (b, bn) = realized(N, M), realized(N, M, seed=1)
  t, x = a, an
  for i in range(10):
    t = (t * b + i) if i % 2 else (t - b).relu()
    x = (x * bn + i) if i % 2 else np.maximum(x - bn, 0)
  assert count_kernels(t.realize) == 1
  compare(t, x, atol=1e-4, rtol=1e-4)

def test_unary_chain_is_one_kernel(device: str) -> None:
  a, an = realized(N, M)
  out = a.exp().neg().sigmoid().sqrt().log2().abs().floor().maximum(0.5).sin().tanh()
  assert count_kernels(out.realize) == 1

def test_softmax_at_most_3_kernels(device: str) -> None:
  x, xn = realized(N, M)
  e = (x - x.max(1, keepdim=True)).exp()
  out = e / e.sum(1, keepdim=True)
  n = count_kernels(out.realize)
  assert 1 <= n <= 3, f"softmax took {n} kernels"
  en = np.exp(xn - xn.max(1, keepdims=True))
  compare(out, en / en.sum(1, keepdims=True), atol=1e-6)

def test_shared_reduce_runs_once(device: str) -> None:
  x, xn = realized(N, M)
  r = x.sum(1, keepdim=True)
  a, b = x - r, x * r
  assert count_kernels(lambda: Tensor.realize(a, b)) == 3
  rn = xn.sum(1, keepdims=True)
  compare(a, xn - rn, atol=1e-5)
  compare(b, xn * rn, atol=1e-5)

def test_two_outputs_of_elementwise_share_inputs(device: str) -> None:
  (x, xn), (y, yn) = realized(N, M), realized(N, M, seed=1)
  a, b = x + y, x * y
  n = count_kernels(lambda: Tensor.realize(a, b))
  assert 1 <= n <= 2
  compare(a, xn + yn)
  compare(b, xn * yn)

def test_realized_tensor_runs_nothing(device: str) -> None:
  x, _ = realized(N, M)
  assert count_kernels(x.realize) == 0
  out = (x + 1).realize()
  assert count_kernels(out.realize) == 0
  assert count_kernels(out.numpy) == 0

def test_reduce_then_elementwise_is_one_kernel(device: str) -> None:
  x, xn = realized(N, M)
  out = x.sum(1) * 2 + 1
  assert count_kernels(out.realize) == 1
  compare(out, xn.sum(1) * 2 + 1, atol=1e-5)

def test_full_reduce_is_one_kernel(device: str) -> None:
  x, xn = realized(N, M)
  out = (x * x).sum()
  assert count_kernels(out.realize) == 1
  compare(out, (xn * xn).sum(), atol=1e-5)

def test_matmul_is_one_kernel(device: str) -> None:
  (a, an), (b, bn) = realized(N, 5), realized(5, M, seed=1)
  out = a @ b
  assert count_kernels(out.realize) == 1
  compare(out, an @ bn, atol=1e-5)

def test_big_matmul_pads_right_operand_rows_to_cache_lines(device: str) -> None:
  # (512, 512) @ (512, 513): the rows of b start mid cache line, so a zero-padded copy of b (528 columns) runs first
  # and the product keeps its first 513 columns (Tensor.dot's _aligned_cols)
  if device == "PYTHON": pytest.skip("the PYTHON device interprets 135M multiply-adds")
  (a, an), (b, bn) = realized(512, 512), realized(512, 513, seed=1)
  out = a @ b
  assert out.shape == (512, 513)
  assert count_kernels(out.realize) == 2
  compare(out, an @ bn, atol=1e-2, rtol=1e-4)
  # rows already on cache lines (528 columns), or too few rows for the multiply-adds to dominate: no copy
  c, cn = realized(512, 528, seed=2)
  assert count_kernels((a @ c).realize) == 1
  d, dn = realized(511, 512, seed=3)
  assert count_kernels((d @ b).realize) == 1
  compare(d @ b, dn @ bn, atol=1e-2, rtol=1e-4)
  # the gradients flow through the padded copy
  a.requires_grad_(), b.requires_grad_()
  (a @ b).sum().backward()
  ones = np.ones((512, 513), np.float32)
  compare(a.grad, ones @ bn.T, atol=1e-2, rtol=1e-4)
  compare(b.grad, an.T @ ones, atol=1e-2, rtol=1e-4)

def test_activation_read_by_a_matmul_gets_a_buffer(device: str) -> None:
  # relu(a + bias) would be recomputed for every column of the product: it gets a buffer (2 kernels); one op on
  # the operand (a cast, a scale) stays fused
  (a, an), (b, bn) = realized(N, 5), realized(5, M, seed=1)
  bias, biasn = realized(5, seed=2)
  out = (a + bias).relu() @ b
  assert count_kernels(out.realize) == 2
  compare(out, np.maximum(an + biasn, 0) @ bn, atol=1e-5)
  (a, an), (b, bn) = realized(N, 5), realized(5, M, seed=1)
  out = (a * 2) @ b
  assert count_kernels(out.realize) == 1
  compare(out, (an * 2) @ bn, atol=1e-5)

def test_product_under_a_buffered_activation_is_kept(device: str) -> None:
  # relu(a @ w1 + bias) gets a buffer; the product below it gets its own, so a later use of a @ w1 (the
  # activation's gradient reads it) reads it back instead of multiplying again
  (a, an), (w1, w1n), (w2, w2n) = realized(N, 16), realized(16, 8, seed=1), realized(8, M, seed=2)
  bias, biasn = realized(8, seed=3)
  h = a @ w1
  out = (h + bias).relu() @ w2
  out.realize()
  GlobalCounters.reset()
  again = (h * 2).realize()
  assert GlobalCounters.kernel_count == 1 and GlobalCounters.global_ops <= 2 * N * 8, GlobalCounters.global_ops
  compare(again, an @ w1n * 2, atol=1e-4)
  compare(out, np.maximum(an @ w1n + biasn, 0) @ w2n, atol=1e-4)

def test_conv_input_windows_stay_fused(device: str) -> None:
  # the activation feeding a conv is materialized at its own size, never as the unfolded windows
  x, xn = realized(2, 3, 6, 6)
  w, wn = realized(4, 3, 3, 3, seed=1)
  GlobalCounters.reset()
  out = (x + 1).relu().conv2d(w)
  out.realize()
  assert GlobalCounters.kernel_count <= 2
  assert GlobalCounters.global_mem <= 4 * (2 * 3 * 6 * 6 * 3 + 4 * 27 + 2 * 4 * 4 * 4 * 2)
  xr = np.maximum(xn + 1, 0)
  want = np.zeros((2, 4, 4, 4), np.float32)
  for i in range(4):
    for j in range(4): want[:, :, i, j] = np.einsum("nchw,ochw->no", xr[:, :, i:i + 3, j:j + 3], wn)
  compare(out, want, atol=1e-4)

def test_movement_then_compute_is_one_kernel(device: str) -> None:
  x, xn = realized(N, M)
  out = x.permute(1, 0).flip(0).pad(((1, 1), (0, 0))) * 2
  assert count_kernels(out.realize) == 1
  compare(out, np.pad(xn.T[::-1], ((1, 1), (0, 0))) * 2)

def test_same_graph_twice_same_count(device: str) -> None:
  (a, _), (b, _) = realized(N, M), realized(N, M, seed=1)
  counts = [count_kernels(((a * b).sum(0) + 1).realize) for _ in range(2)]
  assert counts[0] == counts[1] == 1

# ***** deep graphs *****

@pytest.mark.slow
def test_deep_graph_no_recursion_error(device: str) -> None:
  if device != "CPU": pytest.skip("CPU only: 100k ops")
  x = Tensor([1.0])
  for _ in range(100_000): x = x + 1
  assert x.item() == 100001.0

def test_moderately_deep_graph(device: str) -> None:
  x = Tensor([1.0]).realize()
  for _ in range(2_000): x = x + 1
  assert x.item() == 2001.0

def test_deep_graph_realized_near_the_recursion_limit(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
  # the normalize pass recurses over shallow graphs: called with little recursion left (deep in the caller's own
  # recursion) it finishes with the explicit stack, and the graph is still one kernel with the right value
  import sys
  import attograd.schedule.create as create
  walks: list[int] = []
  walk = create._walk
  monkeypatch.setattr(create, "_walk", lambda *a: walks.append(1) or walk(*a))
  x = Tensor([1.0]).realize()
  for _ in range(300): x = x + 1
  def depth() -> int:
    f, n = sys._getframe(), 0
    while f is not None: f, n = f.f_back, n + 1
    return n
  def deep(k: int) -> int: return deep(k - 1) if k else count_kernels(x.realize)
  assert deep(sys.getrecursionlimit() - depth() - 60) == 1
  assert walks and x.item() == 301.0

def test_deep_graph_realized_in_steps(device: str) -> None:
  x = Tensor([0.0, 1.0])
  for i in range(200):
    x = x * 1 + 1
    if i % 50 == 49: x.realize()
  assert x.tolist() == [200.0, 201.0]

def test_a_schedule_never_run_leaves_no_stale_results() -> None:
  # create_schedule alone (as tools and the CUDA compile tests do) must not make the same expression read buffers
  # that no kernel ever wrote
  import numpy as np
  from attograd.schedule import create_schedule
  x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
  def expr() -> Tensor: return ((x * 2).sum(1).reshape(3, 1) + x).exp2().sum(0)
  create_schedule([expr().uop])
  np.testing.assert_allclose(expr().numpy(), np.exp2((np.arange(12).reshape(3, 4) * 2).sum(1, keepdims=True)
                                                    + np.arange(12).reshape(3, 4)).sum(0), rtol=1e-6)

def test_a_node_read_along_many_paths_is_written_once_per_view(device: str) -> None:
  # stack(a, a)[0] reads `a` along two paths (one all padding): 24 levels are 2**24 paths, but only 2 views per node;
  # keyed by path, building this kernel never finished
  import time
  x, xn = realized(N, M)
  a, b = x, x + 1
  for _ in range(24): a, b = Tensor.stack(a, b)[0], Tensor.stack(b, a)[1]
  st = time.perf_counter()
  out = (a * 2 + b).realize()
  assert time.perf_counter() - st < 20
  np.testing.assert_allclose(out.numpy(), xn * 2 + xn, rtol=1e-6)

# ***** the scheduler's tuning rules (schedule/tuning.py) *****

def test_long_reduce_runs_in_two_stages_chosen_by_the_scheduler(device: str) -> None:
  # the Tensor graph holds one plain reduce; the scheduler splits it (2 kernels) on a threaded CPU
  from helpers import cpu_only
  from attograd.uop.ops import Ops
  cpu_only(device, "the split depends on the device's threads")
  xn = np.random.default_rng(7).uniform(-1, 1, (4, 1 << 16)).astype(np.float32)
  x = Tensor(xn).realize()
  s = x.sum(1)
  assert sum(1 for u in s.uop.toposort() if u.op is Ops.REDUCE_AXIS) == 1
  assert count_kernels(s.realize) == 2
  compare(s, xn.astype(np.float64).sum(1), atol=1e-2, rtol=1e-5)
  m = x.max(1)
  assert count_kernels(m.realize) == 2
  compare(m, xn.max(1))

def test_split_reduce_read_twice_is_remembered(device: str) -> None:
  # a split reduce read by two kernels gets a buffer; a later graph reading the same reduce reads that buffer (the
  # scheduler maps its rebuilt second stage back to the reduce of the Tensor's graph) instead of reducing again
  from helpers import cpu_only
  cpu_only(device, "the split depends on the device's threads")
  xn = np.random.default_rng(8).uniform(-1, 1, (2, 1 << 16)).astype(np.float32)
  x = Tensor(xn).realize()
  r = x.sum(1, keepdim=True)
  a, b = x - r, (x * r).sum(1)
  Tensor.realize(a, b)
  again = r * 2
  assert count_kernels(again.realize) == 1
  compare(again, xn.astype(np.float64).sum(1, keepdims=True) * 2, atol=1e-2, rtol=1e-5)
  rn = xn.astype(np.float64).sum(1, keepdims=True)
  compare(a, xn - rn, atol=1e-3)
  compare(b, (xn * rn).sum(1), atol=1e-1, rtol=1e-4)

def test_split_reduce_gradient(device: str) -> None:
  # the gradient is that of the plain reduce (the split is below autograd): sum's is ones, max's goes to the max
  from helpers import cpu_only
  cpu_only(device, "the split depends on the device's threads")
  xn = np.random.default_rng(9).uniform(-1, 1, (3, 1 << 16)).astype(np.float32)
  x = Tensor(xn, requires_grad=True)
  (x.sum(1) * Tensor([1.0, 2.0, 3.0]) + x.max(1)).sum().backward()
  want = np.broadcast_to(np.array([[1.0], [2.0], [3.0]], np.float32), xn.shape).copy()
  want[np.arange(3), xn.argmax(1)] += 1
  compare(x.grad, want)

def test_big_padded_input_read_by_windows_gets_one_copy(device: str) -> None:
  # the windows of a padded conv read a copy of the padded input (whole rows, no bounds checks): one copy kernel and
  # the conv; with the weight's gradient in the same schedule, both read the one copy
  from helpers import cpu_only
  from attograd.schedule import create_schedule
  cpu_only(device, "65536-element inputs")
  rng = np.random.default_rng(10)
  xn, wn = rng.standard_normal((2, 8, 64, 64), dtype=np.float32), rng.standard_normal((4, 8, 3, 3), dtype=np.float32)
  x, w = Tensor(xn).realize(), Tensor(wn, requires_grad=True).realize()
  padded = 2 * 8 * 66 * 66
  out = x.conv2d(w, padding=1)
  items, _ = create_schedule([out.uop])
  assert [it.bufs[0].size for it in items] == [padded, 2 * 4 * 64 * 64]
  loss = out.square().sum()
  loss.backward()
  items, _ = create_schedule([out.uop, loss.uop, w.grad.uop])
  assert [it.bufs[0].size for it in items].count(padded) == 1
  Tensor.realize(out, loss, w.grad)
  t = __import__("torch")
  tw = t.tensor(wn, requires_grad=True)
  tout = t.nn.functional.conv2d(t.tensor(xn), tw, padding=1)
  tout.square().sum().backward()
  compare(out, tout.detach().numpy(), atol=1e-4, rtol=1e-4)
  compare(w.grad, tw.grad.numpy(), atol=1e-1, rtol=1e-4)

def test_small_or_unpadded_reads_get_no_copy(device: str) -> None:
  # below 65536 elements the windows read the input directly; a slice that cuts the padding away reads no padding
  from helpers import cpu_only
  cpu_only(device, "65536-element inputs")
  x, xn = realized(2, 8, 64, 64)
  out = x.pad(((0, 0), (0, 0), (1, 1), (1, 1)))[:, :, 1:-1, 1:-1] * 2
  assert count_kernels(out.realize) == 1
  compare(out, xn * 2)
  y, yn = realized(2, 3, 8, 8)
  w, wn = realized(4, 3, 3, 3, seed=1)
  assert count_kernels(y.conv2d(w, padding=1).realize) == 1

def test_short_conv_rows_read_a_lane_copy_of_the_weight_and_gradient(device: str) -> None:
  # 20-wide output rows and a 5x5 window are too short for 16 vector lanes, so the kernels' lanes run over the output
  # channels; the scheduler (not conv2d) gives the operand read across them with a stride a copy laid out along them:
  # the weight in the forward, the output's gradient in the weight's gradient
  from helpers import cpu_only
  from attograd.schedule import create_schedule
  from attograd.uop.ops import Ops
  cpu_only(device, "a 65536-output convolution")
  rng = np.random.default_rng(11)
  xn, wn = rng.standard_normal((8, 32, 24, 24), dtype=np.float32), rng.standard_normal((32, 32, 5, 5), dtype=np.float32)
  x, w = Tensor(xn).realize(), Tensor(wn, requires_grad=True).realize()
  out = x.conv2d(w)
  assert not any(u.op is Ops.CONTIGUOUS for u in out.uop.toposort())
  items, _ = create_schedule([out.uop])
  assert [it.bufs[0].size for it in items] == [32 * 32 * 25, 8 * 32 * 20 * 20]
  loss = (out * out.detach()).sum()  # the output's gradient is a computed value, not a buffer
  loss.backward()
  items, _ = create_schedule([w.grad.uop])
  assert [it.bufs[0].size for it in items][-2:] == [8 * 32 * 20 * 20, 32 * 32 * 25]
  Tensor.realize(out, w.grad)
  t = __import__("torch")
  tw = t.tensor(wn, requires_grad=True)
  tout = t.nn.functional.conv2d(t.tensor(xn), tw)
  (tout * tout.detach()).sum().backward()
  compare(out, tout.detach().numpy(), atol=1e-3, rtol=1e-4)
  compare(w.grad, tw.grad.numpy(), atol=1e-1, rtol=1e-3)

def test_matmul_and_long_conv_rows_get_no_lane_copy(device: str) -> None:
  # a matmul of odd sizes reads no overlapping windows: its sizes are padded in the kernel instead; a conv whose
  # output rows fill 16 lanes reads its weight in place
  from helpers import cpu_only
  cpu_only(device, "a 65536-output matmul")
  a, an = realized(300, 300)
  b, bn = realized(300, 300, seed=1)
  assert count_kernels((a @ b).realize) == 1
  x, _ = realized(2, 8, 34, 34)
  w, _ = realized(16, 8, 3, 3, seed=1)
  assert count_kernels(x.conv2d(w).realize) == 1

def test_parameters_are_computed_lazily_and_together(device: str) -> None:
  # a layer's random parameters get buffers of their own without a kernel run each: they are computed together with
  # what first reads them (here one realize), not one schedule and one compiler run per parameter at construction
  from attograd import nn
  GlobalCounters.reset()
  layers = [nn.Linear(6, 4), nn.Linear(6, 4), nn.Linear(4, 2)]
  params = nn.state.get_parameters(layers)
  assert GlobalCounters.kernel_count == 0
  assert count_kernels(lambda: Tensor.realize(*params)) == len(params)
  (w0, w1) = (layers[0].weight.numpy(), layers[1].weight.numpy())
  assert (np.abs(w0) <= 6 ** -0.5).all() and not np.array_equal(w0, w1)  # two layers of one shape: their own values
  # equal constants asked for gradients are still two tensors, each with its own gradient
  a, b = Tensor.ones(3, requires_grad=True), Tensor.ones(3, requires_grad=True)
  (a * 2 + b * 3).sum().backward()
  assert a.grad is not None and b.grad is not None
  compare(a.grad, np.full(3, 2.0, np.float32))
  compare(b.grad, np.full(3, 3.0, np.float32))

# ***** no-ops schedule nothing *****

def test_contiguous_of_a_whole_buffer_is_that_buffer(device: str) -> None:
  # a buffer seen through reshapes is already contiguous: contiguous() returns it (no copy, as in PyTorch), so a
  # write through one shows in the other
  x, xn = realized(N * M)
  y = x.reshape(N, M).contiguous()
  assert count_kernels(y.realize) == 0
  y.assign(Tensor.ones(N, M)).realize()
  compare(x, np.ones(N * M, np.float32))
  # one that isn't (an expand) still gets its copy, and a contiguous() of that copy is the copy
  z = x.reshape(N, M)[:, :1].expand(N, M).contiguous().contiguous()
  assert count_kernels(z.realize) == 1
  compare(z, np.ones((N, M), np.float32))

def test_zero_size_results_run_no_kernel(device: str) -> None:
  x = Tensor.empty(2, 3, 0)
  out = (x + 1) * 2
  assert count_kernels(out.realize) == 0
  assert out.shape == (2, 3, 0) and out.numpy().shape == (2, 3, 0)
  f = Tensor.zeros(2).contiguous().realize()
  empty = f[:0]
  assert count_kernels(lambda: empty.assign(Tensor.ones(0)).realize()) == 0
  compare(f, np.zeros(2, np.float32))
  # a reduce over a zero-size dim is not empty: it gives the identity
  compare(Tensor.empty(3, 0).sum(1), np.zeros(3, np.float32))
  compare(Tensor.empty(3, 0).max(1), np.full(3, -np.inf, np.float32))

# ***** the scheduler's fusion rules (schedule/fusion.py) *****

def test_permuted_reduce_fuses_with_its_reader(device: str) -> None:
  # the permute is pushed into the reduce's input: one kernel, not a reduce and a permuted read of its buffer
  (x, xn), (b, bn) = realized(N, M, 5), realized(5, N, seed=1)
  out = x.sum(1).T + b
  assert count_kernels(out.realize) == 1
  compare(out, xn.sum(1).T + bn, atol=1e-5)
  (a, an), (w, wn), (c, cn) = realized(N, 5), realized(5, M, seed=1), realized(M, N, seed=2)
  out = (a @ w).T * c
  assert count_kernels(out.realize) == 1
  compare(out, (an @ wn).T * cn, atol=1e-5)

def test_sliced_reduce_computes_only_the_slice(device: str) -> None:
  (x, xn), (b, bn), (b2, _) = realized(2 * N, M), realized(N, seed=1), realized(2 * N, seed=2)
  count_kernels((x.max(1) + b2).exp().realize)
  whole = GlobalCounters.global_ops
  out = (x.max(1)[1:N + 1] + b).exp()
  assert count_kernels(out.realize) == 1
  assert GlobalCounters.global_ops <= whole * 0.6, (GlobalCounters.global_ops, whole)  # N rows reduced, not 2N
  compare(out, np.exp(xn.max(1)[1:N + 1] + bn), rtol=1e-5)

def test_view_pushed_through_casts_and_reshapes(device: str) -> None:
  from attograd import dtypes
  (x, xn), (b, bn) = realized(2, 3, N, N), realized(N * N, seed=1)
  out = x.sum((0, 1)).cast(dtypes.half).permute(1, 0).reshape(N, N, 1).permute(1, 0, 2).reshape(N * N) + b.half()
  assert count_kernels(out.realize) == 1
  want = xn.sum((0, 1)).astype(np.float16).T.reshape(N, N, 1).transpose(1, 0, 2).reshape(N * N) + bn.astype(np.float16)
  compare(out, want, atol=1e-2, rtol=1e-2)

def test_reduce_read_twice_keeps_its_buffer(device: str) -> None:
  x, xn = realized(N, M)
  r = x.sum(1, keepdim=True)
  a, b = r.T + 1, (x * r)[1:3]
  assert count_kernels(lambda: Tensor.realize(a, b)) == 3
  rn = xn.sum(1, keepdims=True)
  compare(a, rn.T + 1, atol=1e-5)
  compare(b, (xn * rn)[1:3], atol=1e-4)
  again = r * 3  # the reduce's buffer is remembered for later graphs
  assert count_kernels(again.realize) == 1
  compare(again, rn * 3, atol=1e-4)

def test_pushed_reduce_result_is_remembered(device: str) -> None:
  # the reduce computed permuted (it stands for the permute of the graph) is read again by a later graph
  x, xn = realized(N, M, 5)
  t = x.sum(2).T
  s = (t.exp() + 1).sum()
  Tensor.realize(t, s)
  assert count_kernels((t * 2).realize) == 1
  compare(t * 2, xn.sum(2).T * 2, atol=1e-4)
  compare(s, (np.exp(xn.sum(2).T) + 1).sum(), rtol=1e-4)

def test_small_reduce_read_by_two_kernels_is_computed_in_each(device: str) -> None:
  # a launch costs more than reading 16x16 elements again: each output's kernel sums x itself (2 kernels, not 3)
  (x, xn), (y, yn) = realized(16, 16), realized(16, 16, seed=1)
  a, b = x.sum() + 2, (x.sum() - y.sum()) * 4
  assert count_kernels(lambda: Tensor.realize(a, b)) == 2
  compare(a, xn.sum() + 2, atol=1e-3)
  compare(b, (xn.sum() - yn.sum()) * 4, atol=1e-2)
  # a bigger one is computed once into its own buffer, which both read
  (x, xn) = realized(200, 200)
  a, b = x.sum() + 2, x.sum() * 3
  assert count_kernels(lambda: Tensor.realize(a, b)) == 3
  compare(a, xn.sum() + 2, atol=1e-2, rtol=1e-4)
  compare(b, xn.sum() * 3, atol=1e-2, rtol=1e-4)

def test_index_math_is_recomputed_not_buffered(device: str) -> None:
  # argmax's N - arange reads no memory: it fuses into the kernel that picks the index (2 kernels: the max, the pick)
  x, xn = realized(N, 32)
  out = x.argmax(-1)
  assert count_kernels(out.realize) == 2
  np.testing.assert_equal(out.numpy(), xn.argmax(-1))
  out = x.argmin(0)
  assert count_kernels(out.realize) == 2
  np.testing.assert_equal(out.numpy(), xn.argmin(0))

def test_gather_computes_its_index_in_its_own_kernel(device: str) -> None:
  # the index's wrap of negatives has one value per output, along the one-hot's reduce: it runs in the gather's
  # kernel (1 kernel, not a kernel for the index and one for the gather), and the gather still folds to one load per
  # output element (far fewer ops than the one-hot's rows x outputs)
  x, xn = realized(64, 8)
  idx = Tensor(np.array([0, 3, -1, 5, -64], np.int32)).realize()
  out = x[idx]
  assert count_kernels(out.realize) == 1
  assert GlobalCounters.global_ops < 5 * 8 * 64
  compare(out, xn[[0, 3, -1, 5, -64]])
  out = x[idx, idx.abs() % 8]
  assert count_kernels(out.realize) == 1
  compare(out, xn[[0, 3, -1, 5, -64], [0, 3, 1, 5, 0]])

def test_reduce_of_a_reduce_is_one_kernel(device: str) -> None:
  x, xn = realized(N, M, 5)
  out = (x * 2).sum(2).sum(0)
  assert count_kernels(out.realize) == 1
  compare(out, (xn * 2).sum(2).sum(0), atol=1e-4)
  out = x.max(1).max(1) + 1
  assert count_kernels(out.realize) == 1
  compare(out, xn.max(1).max(1) + 1)

def test_zero_size_slice_of_a_reduce_padded_back(device: str) -> None:
  # the empty slice is all padding: the reduce is read once, and fuses
  x, xn = realized(1, M)
  r = x.sum(1, keepdim=True).reshape(1)
  out = r * 2 + (r[1:] * 3).pad(((1, 0),))
  assert count_kernels(out.realize) == 1
  compare(out, xn.sum(1) * 2, atol=1e-5)
