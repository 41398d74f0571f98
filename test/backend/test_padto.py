"""PADTO: odd axes padded up to a multiple (then split into lanes and tiles) give NumPy's numbers on every device, the
padding never reads or writes memory (the PYTHON device raises on any out-of-range index), and a reduce axis is only
padded when the padded zeros add nothing."""
from __future__ import annotations
from typing import Callable, Iterator
import numpy as np
import pytest
from attograd import Device, Tensor
from attograd.codegen import get_program
from attograd.codegen import heuristic
from attograd.codegen.heuristic import gpu_optimizations
from attograd.codegen.kernel import Kernel, Opt
from attograd.codegen.lowerer import new_kernel
from attograd.schedule import create_schedule

Plan = Callable[[Kernel], None]

_KEEP: list[object] = []  # runners made under a forced plan stay alive: llvmlite crashes freeing two MCJIT engines

@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Plan], None]]:
  """forced(plan): every kernel realized in this test gets its actions from plan(kernel) instead of the heuristic."""
  import attograd.codegen as cg
  import attograd.engine.realize as rz
  monkeypatch.setattr(cg, "CACHE_PROGRAMS", 0)
  runners = rz._RunnerCache()
  monkeypatch.setattr(rz, "_runners", runners)
  def use(plan: Plan) -> None:
    monkeypatch.setattr(heuristic, "hand_coded_optimizations", lambda k, *_: plan(k))
    monkeypatch.setattr(heuristic, "gpu_optimizations", lambda k, local_max=256: plan(k))
  yield use
  _KEEP.extend(runners.values())

def pad_all(amt: int, lanes: bool = True, reduce: bool = True) -> Plan:
  """Pad every axis that isn't a multiple of amt (where allowed), then split each padded-or-divisible axis by amt:
  vector lanes on the innermost one, register tiles / unrolls on the rest."""
  def plan(k: Kernel) -> None:
    for ax in range(k.shape_len):
      if not reduce and ax >= k.first_reduce: continue
      try: k.apply_opt(Opt("PADTO", ax, amt))
      except ValueError: pass
    lane_done = not lanes
    for ax in reversed(range(k.shape_len)):
      if k.full_shape[ax] % amt or k.full_shape[ax] < amt: continue
      red = ax >= k.first_reduce
      op = ("UNROLL" if red else "UPCAST") if lane_done else ("RLANES" if red else "LANES")
      lane_done = True
      k.apply_opt(Opt(op, ax, amt))
  return plan

def applied(t: Tensor, device: str = "CPU") -> list[Opt]:
  items, _ = create_schedule([t.uop])
  return list(get_program(items[-1].ast, Device[device].renderer).applied_opts)

def _rng(seed: int = 0) -> np.random.Generator: return np.random.default_rng(seed)

# ***** the action on every device *****

@pytest.mark.parametrize("m,k,n", [(1, 3, 7), (3, 7, 17), (17, 33, 7), (7, 1, 33), (33, 17, 31), (13, 29, 3)])
@pytest.mark.parametrize("amt", [4, 8])
def test_padded_matmul(device: str, forced, m: int, k: int, n: int, amt: int) -> None:
  forced(pad_all(amt))
  a, b = _rng().standard_normal((m, k), dtype=np.float32), _rng(1).standard_normal((k, n), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("shape", [(3, 7), (17, 33), (1, 31), (29, 1), (37, 5)])
def test_padded_sums_and_means(device: str, forced, shape: tuple[int, int]) -> None:
  forced(pad_all(4))
  x, y = _rng().standard_normal(shape, dtype=np.float32), _rng(1).standard_normal(shape, dtype=np.float32)
  tx, ty = Tensor(x), Tensor(y)
  np.testing.assert_allclose(tx.sum(axis=1).numpy(), x.sum(axis=1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(tx.sum(axis=0).numpy(), x.sum(axis=0), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(tx.mean(axis=1, keepdim=True).numpy(), x.mean(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose((tx * ty).sum(axis=1).numpy(), (x * y).sum(axis=1), rtol=1e-5, atol=1e-5)
  # not padded (exp(0) = 1, max's identity isn't 0): the reduce axis stays as it is, the output axis is still padded
  np.testing.assert_allclose(tx.exp().sum(axis=1).numpy(), np.exp(x).sum(axis=1), rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(tx.max(axis=1).numpy(), x.max(axis=1))
  np.testing.assert_allclose((tx - ty).abs().sum(axis=0).numpy(), np.abs(x - y).sum(axis=0), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("shape", [(3, 5), (17, 7), (7, 33)])
def test_padded_elementwise_and_non_contiguous(device: str, forced, shape: tuple[int, int]) -> None:
  forced(pad_all(4))
  x, y = _rng().standard_normal(shape, dtype=np.float32), _rng(1).standard_normal(shape[::-1], dtype=np.float32)
  tx, ty = Tensor(x), Tensor(y)
  np.testing.assert_allclose((tx + ty.T).numpy(), x + y.T, rtol=1e-6)                  # a transposed input
  np.testing.assert_allclose((tx.T * 2).exp().numpy(), np.exp(x.T * 2), rtol=1e-5)      # a transposed output
  np.testing.assert_allclose((tx[::2, 1:] - 1).numpy(), x[::2, 1:] - 1, rtol=1e-6)      # strided slices
  np.testing.assert_allclose((tx[:, :1] * ty.T).numpy(), x[:, :1] * y.T, rtol=1e-6)     # a broadcast
  np.testing.assert_allclose((tx @ ty).numpy(), x @ y, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((tx.T @ tx).numpy(), x.T @ x, rtol=1e-4, atol=1e-4)        # both inputs strided

@pytest.mark.parametrize("shape", [(5, 7), (17, 3)])
def test_padded_axes_over_masked_views(device: str, forced, shape: tuple[int, int]) -> None:
  """Inputs that are themselves padded (their own masks) or shrunk, under padded loops."""
  forced(pad_all(4))
  x = _rng().standard_normal(shape, dtype=np.float32)
  tx = Tensor(x)
  xp = np.pad(x, ((1, 2), (3, 0)))
  np.testing.assert_allclose(tx.pad(((1, 2), (3, 0))).numpy(), xp, rtol=1e-6)
  np.testing.assert_allclose(tx.pad(((1, 2), (3, 0))).sum(axis=1).numpy(), xp.sum(axis=1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(tx.pad(((0, 0), (2, 5))).sum(axis=0).numpy(), np.pad(x, ((0, 0), (2, 5))).sum(axis=0),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose((tx.pad(((0, 0), (1, 1))) @ tx.T.pad(((1, 1), (0, 0)))).numpy(),
                             np.pad(x, ((0, 0), (1, 1))) @ np.pad(x.T, ((1, 1), (0, 0))), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(tx[1:, 1:].sum(axis=1).numpy(), x[1:, 1:].sum(axis=1), rtol=1e-5, atol=1e-5)
  ones = Tensor.ones(*shape).contiguous().sum(axis=1)  # a masked constant summed over a padded axis
  np.testing.assert_allclose(ones.numpy(), np.full(shape[0], shape[1], np.float32))

def test_padded_integer_and_double_reduces(device: str, forced) -> None:
  forced(pad_all(4))
  xi = _rng().integers(-50, 50, (7, 13)).astype(np.int32)
  np.testing.assert_array_equal(Tensor(xi).sum(axis=1).numpy(), xi.sum(axis=1))
  np.testing.assert_array_equal((Tensor(xi) * 3 + 1).numpy(), xi * 3 + 1)
  xd = _rng().standard_normal((9, 11))
  np.testing.assert_allclose((Tensor(xd) @ Tensor(xd.T)).numpy(), xd @ xd.T, rtol=1e-10)

# ***** which kernels may be padded *****

def _kernel(t: Tensor) -> Kernel:
  items, _ = create_schedule([t.uop])
  return new_kernel(items[-1].ast)

def test_reduce_padding_rule() -> None:
  x, y = Tensor.rand(5, 7).realize(), Tensor.rand(5, 7).realize()
  for ok in (x.sum(1), (x * y).sum(1), (x - y).sum(1), (x * 2).sqrt().sum(1), (x.cast("float64") * y).sum(1)):
    k = _kernel(ok)
    k.apply_opt(Opt("PADTO", 1, 4))
    assert k.full_shape == (5, 8) and k.applied[-1].op == "PADTO"
  for bad in (x.exp().sum(1), x.max(1), (x + 1).sum(1), (x < y).sum(1), (x / y).sum(1)):
    with pytest.raises(ValueError, match="can't be padded"): _kernel(bad).apply_opt(Opt("PADTO", 1, 4))
  # the output axis of those is always fine
  k = _kernel(x.exp().sum(1))
  k.apply_opt(Opt("PADTO", 0, 4))
  assert k.full_shape == (8, 7)

def test_padto_refuses_what_it_cant_do() -> None:
  x = Tensor.rand(5, 7).realize()
  k = _kernel(x.sum(1))
  with pytest.raises(ValueError, match="already a multiple"): k.apply_opt(Opt("PADTO", 1, 7))
  with pytest.raises(ValueError, match="mostly padding"): k.apply_opt(Opt("PADTO", 1, 16))
  with pytest.raises(ValueError, match="out of range"): k.apply_opt(Opt("PADTO", 3, 4))
  xi = Tensor(np.arange(1, 36, dtype=np.int32).reshape(5, 7)).realize()
  with pytest.raises(ValueError, match="divides integers"): _kernel(xi // (xi + 1)).apply_opt(Opt("PADTO", 0, 8))
  k = _kernel(x.sum(1))
  k.apply_opt(Opt("UPCAST", 0, 5))
  with pytest.raises(ValueError, match="already upcast"): k.apply_opt(Opt("PADTO", 1, 5))

# ***** the heuristic uses it *****

@pytest.mark.parametrize("n", [1023, 999, 1001])
def test_heuristic_pads_odd_matmuls_into_lanes_and_tiles(n: int) -> None:
  rng = _rng()
  a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  # the product as Tensor.dot builds it, without its cache-line padding of tb's rows: the kernel's own padding
  def prod() -> Tensor: return (ta.reshape(n, 1, n) * tb.T.reshape(1, n, n)).sum(-1)
  np.testing.assert_allclose(prod().numpy(), a @ b, rtol=1e-3, atol=1e-3)
  items, _ = create_schedule([prod().uop])  # (only after realizing: scheduling first upsets the realize)
  prg = get_program(items[-1].ast, Device["CPU"].renderer)
  ops = [(o.op, o.amount) for o in prg.applied_opts]
  assert ("PADTO", 32) in ops and ("LANES", 16) in ops and ("UPCAST", 8) in ops and ("UPCAST", 2) in ops, ops
  assert "vector_size(64)" in prg.src  # real vectors, not the scalar fallback

@pytest.mark.parametrize("n", [17, 33, 1001])
def test_heuristic_pads_odd_row_sums_into_lanes(n: int) -> None:
  x = _rng().standard_normal((9, n), dtype=np.float32)
  tx = Tensor(x).realize()
  np.testing.assert_allclose(tx.sum(axis=1).numpy(), x.sum(axis=1), rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(tx.exp().sum(axis=1).numpy(), np.exp(x).sum(axis=1), rtol=1e-5)
  ops = [o.op for o in applied(tx.sum(axis=1))]
  assert ops[:2] == ["PADTO", "RLANES"], ops
  assert "PADTO" not in [o.op for o in applied(tx.exp().sum(axis=1))]  # exp(0) = 1: not padded

def test_heuristic_leaves_even_sizes_alone() -> None:
  a = Tensor.rand(64, 64).realize()
  assert "PADTO" not in [o.op for o in applied(a @ a)]
  assert "PADTO" not in [o.op for o in applied(a.sum(axis=1))]

def test_beam_can_choose_padding() -> None:
  from attograd.codegen.opt.search import _actions, _kernel as beam_kernel
  ta, tb = Tensor.rand(17, 33).realize(), Tensor.rand(33, 7).realize()
  items, _ = create_schedule([(ta @ tb).uop])
  ast = items[-1].ast
  acts = _actions(new_kernel(ast))
  assert Opt("PADTO", 0, 4) in acts and Opt("PADTO", 1, 8) in acts and Opt("PADTO", 2, 16) in acts
  k = beam_kernel(ast, [Opt("PADTO", 1, 8), Opt("LANES", 1, 8)])
  assert k is not None and k.full_shape == (17, 1, 8, 33)

def test_forced_padding_stays_vectorized(forced) -> None:
  """Lanes over a padded axis are real vectors (a masked vector load for the partial ones), not the scalar fallback."""
  forced(pad_all(8))
  a, b = _rng().standard_normal((17, 33), dtype=np.float32), _rng(1).standard_normal((33, 7), dtype=np.float32)
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4)
  for t in (ta @ tb, ta.sum(axis=1), (ta.T + 1)):
    items, _ = create_schedule([t.uop])
    prg = get_program(items[-1].ast, Device["CPU"].renderer)
    assert "PADTO" in [o.op for o in prg.applied_opts] and "vector_size(32)" in prg.src, prg.src

# ***** cache blocking (BLOCK) *****

def block_plan(ax: int, blk: int, pad: int = 0) -> Plan:
  def plan(k: Kernel) -> None:
    if pad: k.apply_opt(Opt("PADTO", ax, pad))
    k.apply_opt(Opt("BLOCK", ax, blk))
    pad_all(4, reduce=False)(k)
  return plan

@pytest.mark.parametrize("m,k,n,blk,pad", [(8, 12, 32, 8, 0), (5, 7, 48, 16, 0), (9, 3, 13, 8, 8), (6, 17, 30, 16, 16)])
def test_blocked_matmul(device: str, forced, m: int, k: int, n: int, blk: int, pad: int) -> None:
  forced(block_plan(1, blk, pad))
  a, b = _rng().standard_normal((m, k), dtype=np.float32), _rng(1).standard_normal((k, n), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b) + 1).relu().numpy(), np.maximum(a @ b + 1, 0), rtol=1e-4, atol=1e-4)

def test_block_moves_the_block_loop_outermost() -> None:
  k = _kernel(Tensor.rand(24, 10).realize() @ Tensor.rand(10, 64).realize())
  k.apply_opt(Opt("BLOCK", 1, 16))
  assert k.full_shape == (4, 24, 16, 10) and k.first_reduce == 3
  with pytest.raises(ValueError, match="not a multiple"): k.apply_opt(Opt("BLOCK", 1, 5))
  k.apply_opt(Opt("LANES", 2, 16))
  with pytest.raises(ValueError, match="before the other actions"): k.apply_opt(Opt("BLOCK", 1, 8))
  with pytest.raises(ValueError, match="output axis"): _kernel(Tensor.rand(4, 6).realize().sum(1)).apply_opt(
    Opt("BLOCK", 1, 2))

def test_heuristic_blocks_big_matmuls_only() -> None:
  def opts(n: int) -> list[tuple[str, int]]:
    items, _ = create_schedule([(Tensor.empty(n, n) @ Tensor.empty(n, n)).uop])
    return [(o.op, o.amount) for o in get_program(items[-1].ast, Device["CPU"].renderer).applied_opts]
  assert ("BLOCK", 256) in opts(2048) and ("UPCAST", 2) in opts(2048)  # the 8x32 tile
  assert "BLOCK" not in [o for o, _ in opts(512)] and ("UPCAST", 2) in opts(512)
  from attograd.codegen.opt.search import _actions
  assert Opt("BLOCK", 1, 64) in _actions(_kernel(Tensor.empty(256, 256) @ Tensor.empty(256, 256)))

# ***** reduce blocking (KBLOCK) *****

def kblock_plan(blk: int, kc: int, pad: int = 0, lanes: int = 4, tile: int = 2, thread: bool = True) -> Plan:
  """Rows padded to `pad`, columns in blocks of blk (none if 0), the reduce in blocks of kc, lanes on the columns, a
  tile of rows, threads."""
  def plan(k: Kernel) -> None:
    if (k.first_reduce, k.shape_len) != (2, 3): return  # the matmul only
    if pad: k.apply_opt(Opt("PADTO", 0, pad))
    if blk: k.apply_opt(Opt("BLOCK", 1, blk))
    k.apply_opt(Opt("KBLOCK", k.shape_len - 1, kc))
    rows, cols = k.first_reduce - 2, k.first_reduce - 1
    if k.full_shape[cols] % lanes == 0: k.apply_opt(Opt("LANES", cols, lanes))
    if k.full_shape[rows] % tile == 0: k.apply_opt(Opt("UPCAST", rows, tile))
    if thread: k.apply_opt(Opt("THREAD", 0, 0))
  return plan

@pytest.mark.parametrize("m,k,n,blk,kc,pad", [(8, 12, 32, 16, 4, 0), (9, 21, 48, 16, 7, 4), (6, 30, 20, 0, 10, 0),
                                              (5, 9, 8, 0, 3, 2), (16, 64, 64, 32, 16, 0)])
def test_kblocked_matmul(device: str, forced, m: int, k: int, n: int, blk: int, kc: int, pad: int) -> None:
  """Each block of the reduce adds its sums to what the blocks before stored; the first reads nothing (the output
  starts as garbage: NaNs here), padded rows read and store nothing."""
  if Device[device].renderer.has_local: pytest.skip("KBLOCK is a CPU action (its block loop would be a thread index)")
  forced(kblock_plan(blk, kc, pad))
  a, b = _rng().standard_normal((m, k), dtype=np.float32), _rng(1).standard_normal((k, n), dtype=np.float32)
  garbage = Tensor.full((m, n), float("nan")).contiguous().realize()
  del garbage  # its memory is free for the matmul's output (the allocator reuses it)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(Tensor(a.astype(np.float64)).dot(Tensor(b.astype(np.float64))).numpy(), a @ b.astype(
    np.float64), rtol=1e-6, atol=1e-6)

def test_kblock_moves_the_reduce_blocks_among_the_output_loops() -> None:
  k = _kernel(Tensor.rand(24, 12).realize() @ Tensor.rand(12, 64).realize())
  k.apply_opt(Opt("BLOCK", 1, 16))
  k.apply_opt(Opt("KBLOCK", 3, 4))
  # after the column blocks (the loop threads split): each thread adds to its own columns only
  assert k.full_shape == (4, 3, 24, 16, 4) and k.first_reduce == 4 and k.kblock == 1
  with pytest.raises(ValueError, match="comes before"): k.apply_opt(Opt("KBLOCK", 4, 2))
  with pytest.raises(ValueError, match="reduce's blocks"): k.apply_opt(Opt("UPCAST", 1, 3))
  with pytest.raises(ValueError, match="reduce blocks"): k.apply_opt(Opt("PADTO", 1, 4))
  k2 = _kernel(Tensor.rand(24, 12).realize() @ Tensor.rand(12, 64).realize())
  k2.apply_opt(Opt("KBLOCK", 2, 3))
  assert k2.full_shape == (24, 4, 64, 3) and k2.kblock == 1
  k2.apply_opt(Opt("UPCAST", 0, 2))  # a split before the blocks' axis moves it
  assert k2.full_shape == (12, 2, 4, 64, 3) and k2.kblock == 2
  k2.apply_opt(Opt("THREAD", 0, 0))
  src = get_program(k2.ast, Device["CPU"].renderer, list(k2.applied)).src
  # one parallel region: the threads split the rows, the reduce blocks' loop runs inside each thread's rows
  assert src.count("#pragma omp parallel for") == 1, src
  assert src.index("#pragma omp parallel for") < src.index("for (int ridx0") < src.index("for (int ridx2"), src

def test_kblock_refuses_what_the_partial_sums_would_break() -> None:
  a, b = Tensor.rand(8, 12).realize(), Tensor.rand(12, 8).realize()
  for t in ((a @ b).relu(), a @ b + 1, (a.half() @ b.half()), (a < 0.5).sum(1), (a @ b).cast("float16")):
    with pytest.raises(ValueError, match="one float sum"): _kernel(t).apply_opt(Opt("KBLOCK", 2 if t.ndim == 2 else 1,
                                                                                     2 if t.ndim == 2 else 4))
  with pytest.raises(ValueError, match="not a multiple"): _kernel(a @ b).apply_opt(Opt("KBLOCK", 2, 5))
  with pytest.raises(ValueError, match="reduce axis"): _kernel(a @ b).apply_opt(Opt("KBLOCK", 1, 4))
  from attograd.codegen.lowerer import lower
  k = _kernel(a @ b)
  k.apply_opt(Opt("KBLOCK", 2, 4))
  with pytest.raises(ValueError, match="CPU renderer"): lower(k, gpu=True)

def test_heuristic_blocks_long_reduces_of_big_matmuls() -> None:
  def opts(m: int, k: int, n: int) -> list[tuple[str, int]]:
    items, _ = create_schedule([(Tensor.empty(m, k) @ Tensor.empty(k, n)).uop])
    return [(o.op, o.amount) for o in get_program(items[-1].ast, Device["CPU"].renderer).applied_opts]
  # rows 4 KB apart share L1's sets: blocked
  for n in (768, 1024, 2048): assert ("KBLOCK", 256) in opts(n, n, n)
  assert ("BLOCK", 256) in opts(1024, 1024, 1024) and ("BLOCK", 256) in opts(2048, 2048, 2048)
  # the threads split the column blocks: 4 of 192 columns rather than 3 of 256, 8 of 288 rather than 9 of 256
  assert ("BLOCK", 192) in opts(768, 768, 768) and ("BLOCK", 288) in opts(128, 768, 2304)
  assert ("KBLOCK", 256) in opts(2048, 2048, 128) and "BLOCK" not in [o for o, _ in opts(2048, 2048, 128)]
  assert ("KBLOCK", 341) in opts(1023, 1023, 1023)  # a divisor of 1023 near 256; rows and columns padded to 1024
  # 8 rows of a 2000 long reduce overflow L1: 2016 padded columns in blocks of 224
  assert ("BLOCK", 224) in opts(2000, 2000, 2000) and ("KBLOCK", 250) in opts(2000, 2000, 2000)
  # rows spread over L1's sets, short reduces, few rows, no block of columns, a matrix-vector product: left alone
  for m, k, n in ((1000, 1000, 1000), (512, 512, 512), (1500, 1500, 1500), (32, 2048, 2048), (1024, 4096, 1)):
    assert "KBLOCK" not in [o for o, _ in opts(m, k, n)], (m, k, n)
  # 1500 rows padded to 1504 for 8-row tiles (8x32, not 6x16)
  assert ("PADTO", 8) in opts(1500, 1500, 1500) and ("UPCAST", 8) in opts(1500, 1500, 1500)

@pytest.mark.parametrize("m,k,n,ta,tb", [(64, 600, 512, False, False), (100, 1023, 512, False, False),
                                         (72, 768, 512, True, False), (64, 640, 512, False, True)])
def test_heuristic_kblocked_matmul_numbers(m: int, k: int, n: int, ta: bool, tb: bool) -> None:
  """The heuristic's reduce blocks (where it picks them) give NumPy's numbers, transposed operands included."""
  a, b = _rng().standard_normal((m, k), dtype=np.float32), _rng(1).standard_normal((k, n), dtype=np.float32)
  x = Tensor(np.ascontiguousarray(a.T)).realize().T if ta else Tensor(a).realize()
  y = Tensor(np.ascontiguousarray(b.T)).realize().T if tb else Tensor(b).realize()
  if not tb: assert "KBLOCK" in [o.op for o in applied(x @ y)]
  np.testing.assert_allclose((x @ y).numpy(), a @ b, rtol=1e-4, atol=1e-3)

def test_heuristic_pads_odd_rows_to_a_tall_tile() -> None:
  # columns that split into the 8x32 tile already: odd rows pad to 8 when nearly free (they took a tile of 3 rows
  # at 1023, of 7 at 1001: 29 and 11 GFLOPS), else stay as they were (10 rows of MNIST's last layer's gradient)
  for m, k, n in ((1023, 1024, 1024), (1001, 40, 64)):
    ops = [(o.op, o.axis, o.amount) for o in applied(Tensor.empty(m, k) @ Tensor.empty(k, n))]
    assert ("PADTO", 0, 8) in ops and [o for o in ops if o[0] == "UPCAST"][-1][2] == 8, (m, ops)
  assert "PADTO" not in [o.op for o in applied(Tensor.empty(10, 512) @ Tensor.empty(512, 576))]
  a, b = _rng().standard_normal((1001, 40), dtype=np.float32), _rng(1).standard_normal((40, 64), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)

def test_gpu_heuristic_pads_odd_axes_for_work_groups() -> None:
  from attograd.renderer.cstyle import OpenCLRenderer
  x = Tensor.empty(37, 1001)
  items, _ = create_schedule([(x.exp() + 1).uop])
  k = new_kernel(items[-1].ast)
  gpu_optimizations(k, OpenCLRenderer().local_max)
  assert [(o.op, o.amount) for o in k.applied][:2] == [("PADTO", 32), ("LOCAL", 32)], k.applied

@pytest.mark.parametrize("shape", [(3, 1001), (37, 33)])
def test_gpu_heuristic_padding_matches_numpy(device: str, shape: tuple[int, int]) -> None:
  if device not in ("CL", "CUDA", "METAL"): pytest.skip("the work-group heuristic runs on GPU devices")
  x = _rng().standard_normal(shape, dtype=np.float32)
  np.testing.assert_allclose((Tensor(x) * 2 + 1).numpy(), x * 2 + 1, rtol=1e-6)
  np.testing.assert_allclose(Tensor(x).sum(axis=1).numpy(), x.sum(axis=1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose((Tensor(x).T @ Tensor(x)).numpy(), x.T @ x, rtol=1e-4, atol=1e-4)
