"""Kernel optimizations: register tiles, vector lanes and their fallbacks give the same numbers as NumPy."""
from __future__ import annotations
import re
import numpy as np
import pytest
from attograd import Device, Tensor, dtypes
from attograd.codegen import get_program
from attograd.schedule import create_schedule
from attograd.helpers import Context
from attograd.renderer.cstyle import ClangRenderer

def _src(t: Tensor) -> str:
  items, _ = create_schedule([t.uop])
  return get_program(items[-1].ast, Device["CPU"].renderer).src

@pytest.mark.parametrize("m,k,n", [(32, 48, 64), (64, 17, 32), (48, 64, 16), (4, 8, 32), (33, 16, 48)])
def test_matmul_tiles_match_numpy(m: int, k: int, n: int) -> None:
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("shape,dtype", [((64, 768), np.float32), ((8, 96), np.float64), ((3, 1024), np.float32)])
def test_lane_sum_macro_adds_as_the_tree_of_lanes(shape: tuple[int, int], dtype: type) -> None:
  # a sum over vector lanes ends in the halving tree of whole-vector adds (cstyle.lane_sum_rule): the same result, to
  # the bit, as the tree of single lanes it replaces (its #else, forced by ATTO_LANE_SUM_SCALAR)
  import ctypes
  from attograd.runtime.ops_cpu import CPUProgram
  x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
  items, _ = create_schedule([Tensor(x).realize().sum(1).uop])
  spec = get_program(items[-1].ast, Device["CPU"].renderer)
  assert "__ATTO_LANE_SUM_" in spec.src
  comp = Device["CPU"].compiler
  outs = []
  for extra in ([], ["-DATTO_LANE_SUM_SCALAR"]):
    out = np.zeros(shape[0], dtype)
    prg = CPUProgram(spec.name, comp._compile_with(spec.src, comp.flags + extra))  # type: ignore[attr-defined]
    prg.fxn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    prg.fxn(out.ctypes.data, x.ctypes.data)
    outs.append(out)
  np.testing.assert_allclose(outs[0], x.sum(1), rtol=1e-5, atol=1e-5)
  assert outs[0].tobytes() == outs[1].tobytes()

def test_matmul_uses_vector_lanes() -> None:
  a, b = Tensor.rand(64, 64).realize(), Tensor.rand(64, 64).realize()
  src = _src(a @ b)
  assert "__attribute__((vector_size(64)))" in src and "float16 acc0" in src

def test_noopt_gives_plain_loops() -> None:
  a, b = Tensor.rand(64, 64).realize(), Tensor.rand(64, 64).realize()
  with Context(NOOPT=1): src = _src(a @ b)
  assert "vector_size" not in src.replace(ClangRenderer.preamble, "")  # (the preamble's max uses one-lane vectors)

@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
def test_tiled_matmul_dtypes(dtype: str) -> None:
  rng = np.random.default_rng(1)
  a, b = rng.integers(-3, 4, (32, 32)).astype(dtype), rng.integers(-3, 4, (32, 48)).astype(dtype)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy().astype(np.float64), a.astype(np.float64) @ b, rtol=1e-3)

def test_lane_fallback_for_non_contiguous_output() -> None:
  # the transposed store is not contiguous along the lane: the lanes are unrolled as scalars instead
  rng = np.random.default_rng(2)
  a, b = rng.standard_normal((32, 16), dtype=np.float32), rng.standard_normal((16, 32), dtype=np.float32)
  out = (Tensor(a) @ Tensor(b)).T.contiguous()
  np.testing.assert_allclose(out.numpy(), (a @ b).T, rtol=1e-4, atol=1e-4)

def test_broadcast_reduce_with_padding_and_max() -> None:
  # a padded input and a max reduce over a broadcast: lanes with gates or max fall back to scalars
  rng = np.random.default_rng(3)
  x, w = rng.standard_normal((16, 1, 30), dtype=np.float32), rng.standard_normal((1, 32, 32), dtype=np.float32)
  tx = Tensor(x).pad(((0, 0), (0, 0), (1, 1)))
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1)))
  np.testing.assert_allclose((tx * Tensor(w)).sum(-1).numpy(), (xp * w).sum(-1), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((tx * Tensor(w)).max(-1).numpy(), (xp * w).max(-1), rtol=1e-5)

def test_large_matmul_cpu() -> None:
  rng = np.random.default_rng(4)
  a, b = rng.standard_normal((256, 128), dtype=np.float32), rng.standard_normal((128, 192), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-3)

def _opts(t: Tensor) -> list:
  items, _ = create_schedule([t.uop])
  return [o.op for o in get_program(items[-1].ast, Device["CPU"].renderer).applied_opts]

@pytest.mark.parametrize("m,k,n", [(32, 64, 32), (8, 48, 12), (5, 48, 7)])
def test_dot_product_form_reduces_across_lanes(m: int, k: int, n: int) -> None:
  # a @ b.T walks the reduce axis contiguously in both inputs: the lanes run along it and are summed at the end
  rng = np.random.default_rng(5)
  a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((n, k), dtype=np.float32)
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  assert "RLANES" in _opts(ta @ tb.T)
  assert "[15]" in _src(ta @ tb.T) or k % 16  # the horizontal sum reads every lane
  np.testing.assert_allclose((ta @ tb.T).numpy(), a @ b.T, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_vector_selects_match_numpy(dtype: str) -> None:
  # relu, where and maximum on vector lanes go through bit masks; NaN and -0.0 must come out as in NumPy (relu as in
  # PyTorch: relu(nan) is nan)
  rng = np.random.default_rng(6)
  a, b = rng.standard_normal((32, 32)).astype(dtype), rng.standard_normal((32, 32)).astype(dtype)
  a[0, :4] = [np.nan, -0.0, 0.0, np.inf]
  b[1, :3] = [np.nan, -np.inf, -0.0]
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  for got, want in [(ta.relu() @ tb, np.where(a < 0, 0, a) @ b), (ta.maximum(tb) @ tb, np.maximum(a, b) @ b),
                    ((ta < tb).where(ta, tb * 2) @ tb, np.where(a < b, a, b * 2) @ b)]:
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
  src = _src(ta @ tb.relu())  # the relu'd input is the one read along the lanes: a lane mask, no scalar select
  assert "vector_size" in src and "?" not in src.split("for", 1)[1]
  # a select on the accumulated lanes, stored straight to memory
  np.testing.assert_allclose((ta @ tb).relu().numpy(), np.where(a @ b < 0, 0, a @ b), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((ta @ tb).maximum(tb).numpy(), np.maximum(a @ b, b), rtol=1e-4, atol=1e-4)

def test_window_axes_unroll_and_strides() -> None:
  # conv windows are stacked slices: the window axes are unrolled whole and the output row gets vector lanes
  x, w = Tensor.rand(2, 8, 18, 18).realize(), Tensor.rand(16, 8, 3, 3).realize()
  opts = _opts(x.conv2d(w))
  assert opts.count("UNROLL") == 2 and "LANES" in opts
  # strides come from the simplified index math, also through stacked views whose composition is linear
  from attograd.uop.view import ShapeTracker
  tiled = ShapeTracker.from_shape((10,)).reshape((1, 10)).expand((3, 10)).reshape((30,)).pad(((0, 3),))
  window = tiled.reshape((3, 11)).shrink(((0, 3), (0, 8)))  # element (k, o) is x[k + o]
  assert len(window.views) > 1 and window.index_strides() == (1, 1)
  mixed = ShapeTracker.from_shape((4, 10)).permute((1, 0)).reshape((40,)).reshape((5, 8))
  assert mixed.index_strides() == (2, None)

def test_stack_is_free_but_scatter_add_is_not() -> None:
  from attograd.schedule.kernels import _is_cat
  a = Tensor.rand(4, 5)
  stacked = Tensor.stack(a, a * 2, dim=0).uop
  assert _is_cat(stacked)
  overlapping = (a.pad(((1, 0), (0, 0))) + a.pad(((0, 1), (0, 0)))).uop
  assert not _is_cat(overlapping)

def test_short_rows_use_channel_lanes_with_strided_stores_and_gathers() -> None:
  # 6-wide output rows: the forward conv runs 16 lanes over output channels (stored one lane at a time) and the
  # weight gradient gathers the output gradient across channels; both agree with plain loops (NOOPT)
  rng = np.random.default_rng(7)
  x, w = rng.standard_normal((64, 16, 8, 8), dtype=np.float32), rng.standard_normal((32, 16, 3, 3), dtype=np.float32)
  def run() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    out = tx.conv2d(tw)
    (out * out).sum().backward()
    return out.numpy(), tx.grad.numpy(), tw.grad.numpy()
  got = run()
  with Context(NOOPT=1): want = run()
  for g, e in zip(got, want): np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-3)
  tx, tw = Tensor(x).realize(), Tensor(w).realize()
  src = _src(tx.conv2d(tw))
  assert "vector_size(64)" in src and "[15];" in src  # lanes over channels, one store per lane
  tdo = Tensor(rng.standard_normal((64, 32, 6, 6), dtype=np.float32)).realize()
  items, _ = create_schedule([(tx.conv2d(tw.requires_grad_()) * tdo).sum().gradient(tw)[0].uop])
  srcs = [get_program(si.ast, Device["CPU"].renderer).src for si in items if si.ast.op is not None]
  assert any("((float16){" in s for s in srcs)  # the gathered vector

def test_contiguous_backward() -> None:
  x = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  y = (x * 2).T.contiguous_backward()
  (y * Tensor([[1.0, 10.0], [100.0, 1000.0]])).sum().backward()
  assert y.tolist() == [[2.0, 6.0], [4.0, 8.0]]
  assert x.grad.tolist() == [[2.0, 200.0], [20.0, 2000.0]]

def test_programs_come_back_from_the_disk_cache(tmp_path, monkeypatch) -> None:
  # a new process skips lowering: the program for a kernel it has seen comes from the cache, equal to a fresh build
  import attograd.codegen as cg
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))  # an empty disk cache
  a, b = Tensor.rand(32, 48).realize(), Tensor.rand(48, 16).realize()
  items, _ = create_schedule([(a @ b).relu().uop])
  ast, r = items[-1].ast, Device["CPU"].renderer
  built = cg._build_program(ast, r)
  first, calls = cg.get_program(ast, r), []
  monkeypatch.setattr(cg, "_build_program", lambda *args: calls.append(args) or built)
  again = cg.get_program(ast, r)
  assert not calls, "the second get_program was built again instead of read from the cache"
  for f in ("name", "src", "globals", "vars", "op_estimate", "mem_estimate", "lds_estimate", "applied_opts"):
    assert getattr(again, f) == getattr(built, f) == getattr(first, f), f
  assert cg.spec_from_bytes(b"not json") is None  # a corrupt entry is rebuilt, not trusted

def test_disk_cache_keeps_a_variables_dtype() -> None:
  # a Variable with bounds past int32's is an int64 argument: a program read back from disk must pass it so
  import attograd.codegen as cg
  from attograd.uop.ops import Variable
  n, k = Variable("n", 0, 2**40).bind(2**35), Variable("k", 0, 9).bind(2)
  items, _ = create_schedule([Tensor(n + k).clone().uop])
  sp = get_program(items[-1].ast, Device["CPU"].renderer)
  back = cg.spec_from_bytes(cg.spec_to_bytes(sp))
  assert back is not None and [(v.arg, v.dtype) for v in back.vars] == [(v.arg, v.dtype) for v in sp.vars]
  assert {v.arg[0]: v.dtype for v in back.vars} == {"k": dtypes.int32, "n": dtypes.int64}

def test_program_key_sees_all_of_a_big_symbolic_view() -> None:
  # a VIEW's repr prints an expression of more than 60 nodes as its root and node count: two kernels whose views
  # differ only inside one got the same disk-cache key, so the second would run the first's program
  from attograd.codegen.program_cache import ast_key as _ast_key
  from attograd.uop.ops import Ops, UOp, Variable
  from attograd.uop.view import ShapeTracker, View
  def kernel(last: int) -> UOp:
    e = Variable("n", 1, 64)
    for i in range(30): e = e * 3 + (i if i < 29 else last)
    st = ShapeTracker((View(shape=(e, 4), strides=(4, 1), offset=0, mask=None, contiguous=True),))
    return UOp(Ops.SINK, src=(UOp(Ops.VIEW, arg=st),))
  a, b = kernel(1), kernel(2)
  assert len(a.src[0].arg.views[0].shape[0].toposort()) > 60 and repr(a.src[0].arg) == repr(b.src[0].arg)
  r = Device["CPU"].renderer
  assert _ast_key(a, r, None) != _ast_key(b, r, None) and _ast_key(a, r, None) == _ast_key(kernel(1), r, None)

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_max_reduce_on_lanes(dtype: str) -> None:
  # a max over contiguous rows runs on reduce lanes, one over columns on output lanes; NaN wins as in NumPy
  rng = np.random.default_rng(8)
  x = rng.standard_normal((64, 96)).astype(dtype)
  x[3, 17], x[5, :] = np.nan, -np.inf
  tx = Tensor(x).realize()
  assert "RLANES" in _opts(tx.max(1))
  np.testing.assert_array_equal(tx.max(1).numpy(), x.max(1))
  np.testing.assert_array_equal(tx.max(0).numpy(), x.max(0))
  np.testing.assert_allclose(tx.softmax(-1).numpy()[6:], (np.exp(x - x.max(1, keepdims=True)) /
                             np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True))[6:], rtol=1e-5, atol=1e-6)

def test_beam_search_times_candidates_and_caches_the_winner(tmp_path, monkeypatch) -> None:
  import attograd.codegen.opt.search as search
  from attograd.codegen import _build_program as build
  from attograd.codegen.lowerer import new_kernel
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))  # an empty disk cache
  monkeypatch.setattr(search, "MAX_ROUNDS", 1)
  monkeypatch.setattr(search, "MAX_CANDIDATES", 8)
  rng = np.random.default_rng(9)
  a, b = rng.standard_normal((32, 64), dtype=np.float32), rng.standard_normal((64, 48), dtype=np.float32)
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  items, _ = create_schedule([(ta @ tb).uop])
  ast, r = items[-1].ast, Device["CPU"].renderer
  timings: list[object] = []
  real_time = search._time
  monkeypatch.setattr(search, "_time", lambda spec, bufs: timings.append(spec) or real_time(spec, bufs))
  k = search.beam_search(new_kernel(ast), r, 2, build)
  assert 2 < len(timings) <= 10, "the seeds and up to MAX_CANDIDATES candidates are timed"
  # the kernel comes back with the winner's actions taken: one of the candidates timed
  assert k.ast is ast and tuple(k.applied) in {spec.applied_opts for spec in timings}  # type: ignore[attr-defined]
  again = search.beam_search(new_kernel(ast), r, 2, build)
  assert again.applied == k.applied and len(timings) <= 10, "the second search comes from the disk cache"
  n = len(timings)
  with Context(IGNORE_BEAM_CACHE=1): search.beam_search(new_kernel(ast), r, 2, build)
  assert len(timings) > n, "IGNORE_BEAM_CACHE=1 searches again instead of reading the disk cache"
  with Context(BEAM=2): np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)

def test_loop_invariant_load_before_inner_loop() -> None:
  # y[i] is loaded once per row, outside the loop over the row: gcc otherwise sank such a load into the branch of
  # a where() and then could not vectorize the row loop (a masked load of one address)
  rng = np.random.default_rng(4)
  x, y = rng.standard_normal((32, 400), dtype=np.float32), rng.standard_normal((32, 1), dtype=np.float32)
  tx, ty = Tensor(x).realize(), Tensor(y).realize()
  out = (tx > 0).where(tx * ty + ty, 0.0)
  with Context(NOOPT=1): src = _src(out)
  inner = src.index("for (int ridx1")
  assert re.search(r"= data\d\[ridx0\];", src[:inner]) and not re.search(r"data\d\[ridx0\]", src[inner:]), src
  np.testing.assert_allclose(out.numpy(), np.where(x > 0, x * y + y, 0), rtol=1e-6)

def test_long_reduce_split_keeps_its_dims() -> None:
  # a per-channel sum over (batch, h, w) is split in two stages along the batch dim; folding batch and h*w into
  # one axis first would index the inner loop with divisions and modulos (no vector code)
  rng = np.random.default_rng(5)
  x = rng.standard_normal((512, 4, 20, 20), dtype=np.float32)
  t = Tensor(x).realize().sum((0, 2, 3))
  items, _ = create_schedule([t.uop])
  assert len(items) == 2
  first = get_program(items[0].ast, Device["CPU"].renderer).src
  assert "%" not in first and "/" not in first.split("{", 3)[-1], first
  np.testing.assert_allclose(t.numpy(), x.sum((0, 2, 3)), rtol=1e-4)

def test_long_row_sum_unrolls_its_lone_accumulator() -> None:
  # a big sum's first stage sums rows on 16 lanes into one accumulator: unrolled by 4, four vector loads are added
  # off the loop-carried chain, and one add per four vectors goes into the accumulator
  x = np.random.default_rng(6).uniform(0, 1, 1 << 20).astype(np.float32)
  t = Tensor(x).realize().sum()
  items, _ = create_schedule([t.uop])
  first = get_program(items[0].ast, Device["CPU"].renderer).src
  loop = first[first.index("for (int ridx1"):]
  assert len(re.findall(r"float16 acc\d+ = ", first)) == 1, first
  assert len(re.findall(r"__builtin_memcpy\(&val\d+, data1", loop)) == 4, first
  assert len(re.findall(r"acc0 = ", loop)) == 1, first
  np.testing.assert_allclose(t.numpy(), x.astype(np.float64).sum(), rtol=1e-5)

@pytest.mark.parametrize("rows", [8, 6, 5])
def test_few_rows_dot_product_keeps_all_rows_in_registers_and_splits_the_weights(rows: int) -> None:
  # a prefill of a few tokens times a weight matrix (x @ w.T): all the rows, whole, times 3 weight rows (24
  # accumulators at 8 rows), so each weight row is read once; the cores split the weight rows, not the tokens
  rng = np.random.default_rng(7)
  x, w = rng.standard_normal((rows, 768), dtype=np.float32), rng.standard_normal((1536, 768), dtype=np.float32)
  tx, tw = Tensor(x).realize(), Tensor(w).realize()
  items, _ = create_schedule([(tx @ tw.T).uop])
  prg = get_program(items[-1].ast, Device["CPU"].renderer)
  ups = sorted(o.amount for o in prg.applied_opts if o.op == "UPCAST")
  assert ups == sorted([rows, 3]), prg.applied_opts
  assert len(re.findall(r"float16 acc\d+ = ", prg.src)) == rows * 3, prg.src
  if Device["CPU"].compiler.openmp:
    assert re.search(r"#pragma omp parallel for\n\s*for \(int \w+ = 0; \w+ < 512;", prg.src), prg.src
  np.testing.assert_allclose((tx @ tw.T).numpy(), x @ w.T, rtol=1e-4, atol=1e-3)

def test_a_whole_upcast_first_axis_still_lets_the_next_loop_run_across_cores() -> None:
  # 4 rows times a 4.7 MB weight matrix: the rows are upcast whole, leaving axis 0 of size 1; THREAD goes to the
  # weight rows' loop (it asked for axis 0 to be 2 or more, and such a kernel ran on one core)
  if not Device["CPU"].compiler.openmp: pytest.skip("the C compiler has no OpenMP: kernels run on one core")
  rng = np.random.default_rng(8)
  x, w = rng.standard_normal((4, 768), dtype=np.float32), rng.standard_normal((1536, 768), dtype=np.float32)
  tx, tw = Tensor(x).realize(), Tensor(w).realize()
  assert re.search(r"#pragma omp parallel for\n\s*for \(int \w+ = 0; \w+ < 384;", _src(tx @ tw.T)), _src(tx @ tw.T)
  np.testing.assert_allclose((tx @ tw.T).numpy(), x @ w.T, rtol=1e-4, atol=1e-3)

def test_float_max_without_branches_matches_numpy_with_nan() -> None:
  # max renders as mask operations on one-lane vectors (no branches); NaN wins from either side, as in NumPy
  a = np.array([1.0, np.nan, 3.0, -np.inf, np.inf, 0.0, np.nan, -2.0], dtype=np.float32)
  b = np.array([2.0, 1.0, np.nan, -1.0, np.nan, -0.0, np.nan, -np.inf], dtype=np.float32)
  for dt in (np.float32, np.float64):
    np.testing.assert_array_equal(Tensor(a.astype(dt)).maximum(Tensor(b.astype(dt))).numpy(),
                                  np.maximum(a, b).astype(dt))
    # a padded operand (masked loads next to the max: gcc 12 miscompiled that once max was written as selects)
    pa, pb = np.pad(a.reshape(2, 4), ((1, 0), (0, 2))), np.pad(b.reshape(2, 4), ((1, 0), (0, 2)))
    pads = ((1, 0), (0, 2))
    got = Tensor(a.reshape(2, 4).astype(dt)).pad(pads).maximum(Tensor(b.reshape(2, 4).astype(dt)).pad(pads))
    np.testing.assert_array_equal(got.numpy(), np.maximum(pa, pb).astype(dt))

def test_conv_tile_accumulates_one_product_at_a_time() -> None:
  # a 3x3 conv over 32-wide rows: 16 lanes x 2 along the row times 8 output channels, 16 accumulators; each
  # product goes straight into its accumulator (acc + p0 + p1 + ...: one fused multiply-add each, written by the
  # code generator as fma(x, w, acc), the shared operand loaded once)
  x, w = Tensor.rand(2, 8, 34, 34).realize(), Tensor.rand(16, 8, 3, 3).realize()
  src = _src(x.conv2d(w))
  accs = set(re.findall(r"float16 (acc\d+) = ", src))
  assert len(accs) >= 16, src
  fmas = dict((acc_in, out) for out, acc_in in re.findall(r"(alu\d+) = __atto_fma_float16\([^;]*, (\w+)\);", src))
  for acc in accs:  # follow the chain from acc: 9 fused multiply-adds into it
    cur, n = acc, 0
    while (nxt := fmas.get(cur)) is not None: cur, n = nxt, n + 1
    assert n == 9, f"{acc}: {n} fused multiply-adds"
  xn, wn = x.numpy(), w.numpy()
  want = np.zeros((2, 16, 32, 32), np.float32)
  for i in range(3):
    for j in range(3): want += np.einsum("nchw,oc->nohw", xn[:, :, i:i + 32, j:j + 32], wn[:, :, i, j])
  np.testing.assert_allclose(x.conv2d(w).numpy(), want, rtol=1e-4, atol=1e-4)

def test_gcc_keeps_the_written_sum_order() -> None:
  # gcc's reassociation would re-tree those sums (a multiply and an add per product); clang doesn't know the flag
  import subprocess
  comp = Device["CPU"].compiler
  version = subprocess.run(comp.cc + ["--version"], capture_output=True, text=True).stdout
  is_gcc = "Free Software Foundation" in version and "clang" not in version
  assert ("-fno-tree-reassoc" in comp.flags) == is_gcc

def test_vector_fma_builtin_and_lane_loop_give_the_same_bits() -> None:
  # a vector fused multiply-add is gcc's x86 builtin where the target has the instruction, else a loop over the lanes
  # (renderer/cstyle.py); both round each a*b+c once, so a kernel built either way gives the same bits
  from attograd.runtime.ops_cpu import CPUProgram
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((64, 48), dtype=np.float32), rng.standard_normal((48, 64), dtype=np.float32)
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  got = (ta @ tb).numpy()
  np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
  items, _ = create_schedule([(ta @ tb).uop])
  sp = get_program(items[-1].ast, Device["CPU"].renderer)
  if "__atto_fma_float" not in sp.src: pytest.skip("this target has no fast fma: the code generator fuses nothing")
  assert "__builtin_fma" in sp.src  # the lane loop, for targets without the builtin
  comp = Device["CPU"].compiler
  out = np.empty((64, 64), np.float32)
  bufs = items[-1].bufs  # the output first, then the inputs (realized: host addresses)
  # the same source built without the macros that select the builtins: the lane loop
  prg = CPUProgram(sp.name, comp._compile_with(sp.src, comp.flags + ["-U__FMA__", "-U__AVX512F__"]))
  prg(*[out.ctypes.data if g == 0 else bufs[g]._buf for g in sp.globals])
  np.testing.assert_array_equal(out, got)

# ***** the pipeline: a list of named passes; lowering one rule per AST op *****

def _ast(t: Tensor):
  items, _ = create_schedule([t.uop])
  return items[-1].ast

def test_the_pipeline_is_a_list_of_named_passes_and_viz_shows_each(monkeypatch: pytest.MonkeyPatch) -> None:
  import attograd.codegen as cg
  from attograd import viz
  from attograd.renderer.cstyle import OpenCLRenderer
  from attograd.uop.ops import PatternMatcher
  cpu, gpu = ClangRenderer(fma=True), OpenCLRenderer()
  names = [name for name, _, _ in cg.passes(cpu, None)]
  assert names[0] == "optimization actions applied" and names[-1] == "linearized program"
  assert len(set(names)) == len(names)
  tables = {name for name, step, _ in cg.passes(cpu, None) if isinstance(step, PatternMatcher)}
  assert {"integer safety", "float32 accumulators", "exp range reduction", "transcendentals as arithmetic",
          "fused multiply-adds"} == tables
  # GPUs keep their native exp2/log2: that pass is not in their list; a target without a fast fma fuses nothing
  assert [n for n, _, _ in cg.passes(gpu, None)] == [n for n in names if n != "transcendentals as arithmetic"]
  assert "fused multiply-adds" not in [n for n, _, _ in cg.passes(ClangRenderer(fma=False), None)]
  a = Tensor.rand(16, 16).realize()
  ast = _ast((a @ a).exp())
  seen: list[str] = []
  monkeypatch.setattr(cg, "VIZ", 1)
  monkeypatch.setattr(viz, "begin_kernel", lambda *a: None)
  monkeypatch.setattr(viz, "end_kernel", lambda *a: None)
  monkeypatch.setattr(viz, "stage", lambda name, what: seen.append(name))
  sp = cg._build_program(ast, cpu)
  assert seen == names + ["CPU source"] and sp.src

@pytest.mark.parametrize("make", [lambda a: a.sum(axis=1), lambda a: a.pad(((1, 1), (0, 2))).max(axis=0),
                                  lambda a: Tensor.arange(16).reshape(4, 4).float() + a[:4, :4],
                                  lambda a: (a[:, :5] + 2).T.contiguous()], ids=["sum", "pad_max", "iota", "permute"])
def test_lowering_leaves_no_ast_op(make) -> None:
  # every op of the scheduler's AST (loads and stores through views, padded constants, aranges, reduces over axes) has
  # a rule in pm_lower_ast, and none of them is left after lowering
  from attograd.codegen.lowerer import lower, new_kernel, pm_lower_ast
  from attograd.uop.ops import Ops
  assert {Ops.LOAD, Ops.CONST, Ops.IOTA, Ops.STORE, Ops.REDUCE_AXIS} <= set(pm_lower_ast.pdict)
  k = new_kernel(_ast(make(Tensor.rand(8, 6).realize())))
  ops = {u.op for u in lower(k).toposort()}
  assert not ops & {Ops.VIEW, Ops.REDUCE_AXIS, Ops.IOTA} and Ops.STORE in ops

# ***** integer lanes: quantized weights unpacked in vector registers *****

def _nibble_dot(q: Tensor, x: Tensor) -> Tensor:
  """Q4-style: bytes q (N, 16) widened, their low and high nibbles cut out by a shift along a broadcast axis (no
  division in the index math), times x (2, 16), summed per row."""
  from attograd.dtype import dtypes
  shifts = (Tensor.arange(2, dtype=dtypes.int32) * 4).reshape(1, 2, 1)  # counts known to be below 32: lanes
  nib = (q.cast(dtypes.int32).reshape(q.shape[0], 1, 16) >> shifts) & 15
  return (nib.float() * x.reshape(1, 2, 16)).sum((1, 2))

def _np_nibble_dot(q: np.ndarray, x: np.ndarray) -> np.ndarray:
  nib = np.stack([q & 15, q >> 4], axis=1).astype(np.float32)
  return (nib * x.reshape(1, 2, 16)).sum((1, 2))

def test_integer_lanes_unpack_nibbles(device: str) -> None:
  # the bytes load as one vector, widen, shift and mask as int32 lanes and become float lanes: a dot product on
  # RLANES, as for float inputs (before, any integer value in the lanes unrolled the kernel to scalars)
  rng = np.random.default_rng(6)
  q, x = rng.integers(0, 256, (64, 16), dtype=np.uint8), rng.standard_normal(32, dtype=np.float32)
  out = _nibble_dot(Tensor(q), Tensor(x))
  np.testing.assert_allclose(out.numpy(), _np_nibble_dot(q, x), rtol=1e-5, atol=1e-4)
  if device == "CPU":
    src = _src(_nibble_dot(Tensor(q).realize(), Tensor(x).realize()))
    assert "RLANES" in _opts(_nibble_dot(Tensor(q).realize(), Tensor(x).realize()))
    assert "unsigned_char16 val" in src and re.search(r"int16 alu\d+ = \(alu\d+>>", src), src
    # bytes to floats through int32 lanes, widened from a register (gcc 12 converts a byte vector lane by lane)
    assert "__ATTO_IN_REG(__v); __builtin_convertvector(__v, int16)" in src, src

def test_nibble_halves_share_their_bytes(device: str) -> None:
  # a Q4 matvec over several blocks: the two nibble halves are unrolled, so a block's 16 bytes are loaded and widened
  # once, its high nibbles are a shift by a constant 4 and need no mask (the bounds show x >> 4 < 16)
  from attograd.dtype import dtypes
  rng = np.random.default_rng(10)
  q, x = rng.integers(0, 256, (32, 4, 16), dtype=np.uint8), rng.standard_normal((4, 2, 16), dtype=np.float32)
  def f(tq: Tensor, tx: Tensor) -> Tensor:
    shifts = (Tensor.arange(2, dtype=dtypes.int32) * 4).reshape(1, 1, 2, 1)
    nib = (tq.cast(dtypes.int32).reshape(32, 4, 1, 16) >> shifts) & 15
    return (nib.float() * tx.reshape(1, 4, 2, 16)).sum((1, 2, 3))
  want = (np.stack([q & 15, q >> 4], axis=2).astype(np.float32) * x).sum((1, 2, 3))
  np.testing.assert_allclose(f(Tensor(q), Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-4)
  if device == "CPU":
    src = _src(f(Tensor(q).realize(), Tensor(x).realize()))
    body = src[src.index("for ("):]
    assert re.search(r"int16 alu\d+ = \(alu\d+>>4\);", body) and re.search(r"int16 alu\d+ = \(alu\d+&15\);", body), src
    assert body.count("__builtin_convertvector(__v, int16)") == body.count("unsigned_char16 val"), src
    assert not re.search(r"\(alu\d+>>4\)&15", body) and body.count("&15)") == body.count(">>4)"), src

def test_integer_lanes_int8_bitcast(device: str) -> None:
  # Q8_0-style: uint8 bytes read as int8 (a bitcast of the lanes), widened to floats
  from attograd.dtype import dtypes
  rng = np.random.default_rng(7)
  q, x = rng.integers(0, 256, (32, 32), dtype=np.uint8), rng.standard_normal(32, dtype=np.float32)
  def f(tq: Tensor, tx: Tensor) -> Tensor: return (tq.bitcast(dtypes.int8).float() * tx.reshape(1, 32)).sum(1)
  np.testing.assert_allclose(f(Tensor(q), Tensor(x)).numpy(), (q.view(np.int8) * x).sum(1), rtol=1e-5, atol=1e-3)
  if device == "CPU":
    src = _src(f(Tensor(q).realize(), Tensor(x).realize()))
    assert "((signed_char16)(val" in src and "__builtin_convertvector(__v, int16)" in src, src

def test_integer_lanes_shift_by_lane(device: str) -> None:
  # Q5-style: one int32 word per row, bit j of it for element j: with the lanes on the elements, the lane index
  # becomes a vector of shift counts
  from attograd.dtype import dtypes
  rng = np.random.default_rng(8)
  w = rng.integers(-2**31, 2**31, (3, 1), dtype=np.int64).astype(np.int32)
  x = rng.standard_normal(32, dtype=np.float32)
  def f(tw: Tensor, tx: Tensor) -> Tensor:
    bits = (tw.reshape(3, 1, 1) >> Tensor.arange(32, dtype=dtypes.int32).reshape(1, 2, 16)) & 1
    return (bits.float() * tx.reshape(1, 2, 16)).sum((1, 2))
  want = (((w >> np.arange(32, dtype=np.int32)) & 1).astype(np.float32) * x).sum(1)
  np.testing.assert_allclose(f(Tensor(w), Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-4)
  if device == "CPU":
    src = _src(f(Tensor(w).realize(), Tensor(x).realize()))
    assert "((int16){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})" in src and "float16 acc0" in src, src

def test_integer_lanes_unbounded_shift_and_division_stay_scalar(device: str) -> None:
  # a shift by a loaded count (maybe past the width: the integer safety pass guards scalar shifts only) and an
  # integer division (a lane of 0 would trap) are not run as lanes; the numbers are still NumPy's
  rng = np.random.default_rng(9)
  a, s = rng.integers(0, 1000, (8, 16), dtype=np.int32), rng.integers(0, 40, (8, 16), dtype=np.int32)
  x = rng.standard_normal(16, dtype=np.float32)
  ta, ts, tx = Tensor(a), Tensor(s), Tensor(x)
  shifted = np.where(s < 32, a >> np.minimum(s, 31), 0)
  np.testing.assert_allclose(((ta >> ts).float() * tx).sum(1).numpy(), (shifted * x).sum(1), rtol=1e-5, atol=1e-3)
  d = rng.integers(1, 7, (8, 16), dtype=np.int32)
  np.testing.assert_allclose(((ta // Tensor(d)).float() * tx).sum(1).numpy(), ((a // d) * x).sum(1), rtol=1e-5,
                             atol=1e-3)
  if device == "CPU":
    for t in ((ta.realize() >> ts.realize()), ta.realize() // Tensor(d).realize()):
      assert "int16 alu" not in _src((t.float() * tx.realize()).sum(1))

def test_half_lanes_convert_to_float_lanes(device: str) -> None:
  # a quantized matvec's float16 scales (16 rows interleaved): the half values load as one vector and convert to
  # float lanes (one vcvtph2ps with AVX-512; gcc 12's generic conversion goes lane by lane), where before any half
  # load unrolled the kernel's lanes to scalars. A half value used otherwise (stored as half) keeps scalar lanes
  rng = np.random.default_rng(11)
  sc, x = rng.standard_normal((8, 4, 16)).astype(np.float16), rng.standard_normal((8, 4, 16), dtype=np.float32)
  def f(ts: Tensor, tx: Tensor) -> Tensor: return (ts.float() * tx).sum(1)
  want = (sc.astype(np.float32) * x).sum(1)
  np.testing.assert_allclose(f(Tensor(sc), Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal((Tensor(sc) * 2).numpy(), sc * 2)
  if device == "CPU":
    src = _src(f(Tensor(sc).realize(), Tensor(x).realize()))
    assert "float16 acc0" in src and "__ATTO_HALF16_TO_FLOAT16(val" in src, src
    assert "_Float1616" not in _src(Tensor(sc).realize() * 2)

# ***** kernels over a symbolic size: lanes and tiles on their constant axes *****

def test_symbolic_attention_kernels_get_lanes_and_tiles(device: str) -> None:
  # decode attention over the filled positions (a Variable): q @ k^T reduces the constant head dim on RLANES with the
  # group's query heads as a tile (they share each key load); p @ v has its lanes on the head dim of the output
  from attograd import Variable
  rng = np.random.default_rng(10)
  kc, vc = rng.standard_normal((3, 40, 64), dtype=np.float32), rng.standard_normal((3, 40, 64), dtype=np.float32)
  q = rng.standard_normal((3, 3, 64), dtype=np.float32)
  tk, tv, tq = Tensor(kc).realize(), Tensor(vc).realize(), Tensor(q).realize()
  n = Variable("n", 1, 40)
  for filled in (1, 17, 40):
    end = n.bind(filled)
    keys, values = tk.shrink((None, (0, end), None)), tv.shrink((None, (0, end), None))
    scores = (tq @ keys.transpose(1, 2)).contiguous()
    out = (scores @ values).contiguous()
    s_np = q @ kc[:, :filled].transpose(0, 2, 1)
    np.testing.assert_allclose(scores.numpy(), s_np, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.numpy(), s_np @ vc[:, :filled], rtol=1e-4, atol=1e-3)
  if device == "CPU":
    end = n.bind(17)
    keys, values = tk.shrink((None, (0, end), None)), tv.shrink((None, (0, end), None))
    s = (tq @ keys.transpose(1, 2)).contiguous().realize()
    assert {"RLANES", "UPCAST"} <= set(_opts(tq @ keys.transpose(1, 2)))
    assert {"LANES", "UPCAST"} <= set(_opts(s @ values))

def test_symbolic_reduces_without_lanes_keep_an_accumulator_per_row(device: str) -> None:
  # softmax's max and sum over the filled positions, 9 rows: the rows are accumulators of their own (9 chains of
  # dependent maxes side by side, not one after another), each still summed in position order
  from attograd import Variable
  s = np.random.default_rng(11).standard_normal((3, 3, 50), dtype=np.float32)
  ts, n = Tensor(s).realize(), Variable("n", 1, 50)
  for filled in (1, 9, 50):
    part = ts.shrink((None, None, (0, n.bind(filled))))
    np.testing.assert_array_equal(part.max(-1).numpy(), s[:, :, :filled].max(-1))
    np.testing.assert_allclose(part.sum(-1).numpy(), s[:, :, :filled].sum(-1), rtol=1e-5, atol=1e-6)
  if device == "CPU":
    part = ts.shrink((None, None, (0, n.bind(9))))
    assert _opts(part.max(-1)) == ["UPCAST"] and _opts(part.sum(-1)) == ["UPCAST"]

def test_threads_only_for_kernels_worth_waking_the_cores() -> None:
  # OpenMP's workers sleep between kernels (passive waits) and waking one costs tens of microseconds: a decode-sized
  # matvec (1.3 MB, 330k multiply-adds) runs on one core; one that moves 16 MB, or a big elementwise kernel, is split
  if not Device["CPU"].compiler.openmp: pytest.skip("the C compiler has no OpenMP: kernels run on one core")
  small, big = Tensor.rand(576, 576).realize(), Tensor.rand(2048, 2048).realize()
  x, y = Tensor.rand(1, 576).realize(), Tensor.rand(1, 2048).realize()
  assert "#pragma omp parallel" not in _src((x.reshape(1, 1, 576) * small.reshape(1, 576, 576)).sum(-1))
  assert "#pragma omp parallel" in _src((y.reshape(1, 1, 2048) * big.reshape(1, 2048, 2048)).sum(-1))
  r = ClangRenderer()
  assert (r.thread_min_work, r.thread_min_bytes) == (1 << 22, 4 << 20)
  from attograd.renderer.llvmir import LLVMRenderer
  assert LLVMRenderer().thread_min_work == 32768  # LLVM's own thread pool: the old rule

@pytest.mark.parametrize("kw", [dict(kernel_size=(8, 8, 8), stride=5, padding=1, count_include_pad=False),
                                dict(kernel_size=(8, 8, 8), stride=1), dict(kernel_size=(12, 12), stride=1)])
def test_big_window_kernels_stay_loops_and_build_fast(kw: dict) -> None:
  # issue 14: an 8x8x8 pooling window fully unrolled took 31 s in gcc and 30 s in lowering for one realize. A window
  # stays a loop (the heuristic unrolls at most 49 window positions), so each kernel of the forward and backward pass
  # is small, and lowers and compiles well within the 2 s bound
  import time
  from attograd.codegen import _build_program
  from attograd.helpers import prod
  from attograd.uop.ops import Ops
  shape = (1, 2, 16, 16, 16) if len(kw["kernel_size"]) == 3 else (1, 2, 24, 24)
  x = Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32), requires_grad=True)
  y = x.avg_pool2d(**kw).square().sum()
  y.backward()
  assert x.grad is not None
  items, _ = create_schedule([x.grad.uop, y.uop])
  dev = Device["CPU"]
  for si in (si for si in items if si.ast.op is Ops.SINK):
    st = time.perf_counter()
    sp = _build_program(si.ast, dev.renderer)
    dev.compiler.compile(sp.src)
    took = time.perf_counter() - st
    unrolled = prod([o.amount for o in sp.applied_opts if o.op in ("UNROLL", "RLANES")])
    assert unrolled <= 49 and len(sp.src) < 32 << 10, (sp.name, sp.applied_opts, len(sp.src))
    assert took < 2.0, f"{sp.name}: {took:.2f} s to lower and compile"

def test_to_program_shows_the_linear_program(device: str) -> None:
  # tinygrad's form of a built kernel: PROGRAM(the AST, LINEAR(the linear program)), its ProgramSpec as the arg. The
  # random stream is computed in 32-bit words: no 64-bit int appears in a rand kernel
  from attograd.codegen import to_program
  from attograd.uop.ops import Ops
  renderer = Device[device].renderer
  calls = [c for c in Tensor.rand(20, device=device).schedule_linear().src if c.src[0].op is Ops.SINK]
  assert len(calls) == 1
  ast = calls[0].src[0]
  prg = to_program(ast, renderer=renderer)
  assert prg.op is Ops.PROGRAM and prg.src[0].src == ast.src and prg.src[1].op is Ops.LINEAR
  assert prg.src[0].arg.name == prg.arg.name and prg.src[2].op is Ops.SOURCE and prg.src[2].arg == prg.arg.src
  want = get_program(ast, renderer)
  assert prg.arg.name == want.name and prg.arg.src == want.src  # the program the device runs
  assert any(u.op is Ops.STORE for u in prg.src[1].src)
  assert not {u.dtype for u in prg.src[1].src} & {dtypes.int64, dtypes.uint64}

def test_bool_vector_cast_to_floats(device: str) -> None:
  # u @ diag(s): the kernel gathers (r == j) for 4 lanes into a bool vector and casts it to float4; C has no _Bool
  # vectors (gcc refused the typedef), so a bool vector is 4 bytes of 0/1 there
  u = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4), device=device).realize()
  s = Tensor(np.arange(4, dtype=np.float32) + 1, device=device).realize()
  np.testing.assert_allclose((u @ (s.unsqueeze(-2) * Tensor.eye(4, device=device))).numpy(),
                             u.numpy() @ np.diag(s.numpy()))
