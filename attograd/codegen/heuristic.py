"""The default optimizer: a hand-written heuristic that picks actions (kernel.Opt) for a kernel, one function for CPU
renderers (vector lanes, register tiles, unrolls, threads, padding and cache blocking) and one for GPU renderers
(tensor cores, work-groups). BEAM search (opt/search.py) replaces it by timing real runs."""
from __future__ import annotations
import functools
from attograd.codegen.kernel import Kernel, Opt
from attograd.codegen.tc import tc_plan
from attograd.helpers import DEBUG, NOOPT, prod
from attograd.dtype import dtypes
from attograd.uop.ops import Ops, UOp, sint, sym_max, unbind_sint
from attograd.uop.view import is_symbolic

def gpu_optimizations(k: Kernel, local_max: int = 256) -> None:
  """A simple heuristic for GPU renderers: a half/bfloat16 matmul whose sizes are multiples of the tile runs on
  tensor cores (TC) where the target has them; reductions with few outputs split each reduce across a work-group
  (GROUPTOP); everything else puts up to `local_max` neighbouring outputs into one work-group (LOCAL)."""
  if NOOPT: return
  if k.tensor_cores and not is_symbolic(k.full_shape):
    try: tc_plan(k)
    except ValueError: pass
    else:
      k.apply_opt(Opt("TC", 0, 0))
      # each warp does up to 2x4 tiles: one A fragment serves 4 n-tiles, one B fragment 2 m-tiles
      assert k.tc is not None
      for which, amts in (("n", (4, 2)), ("m", (2,))):
        outer = getattr(k.tc, which) - 1  # the tile's axis is the inner part of a split axis
        if (amt := next((a for a in amts if k.full_shape[outer] % a == 0), 0)):
          k.apply_opt(Opt("UPCAST", outer, amt))
      if DEBUG >= 3: print(f"opts: {k.applied} full_shape={k.full_shape}")
      return
  out_size = sym_max(prod(k.full_shape[:k.first_reduce]))
  if k.first_reduce < k.shape_len and out_size <= 2048 and not k.gathers:
    ax = k.shape_len - 1  # the innermost reduce axis
    amt = next((a for a in (256, 128, 64, 32, 16) if a <= local_max and k.full_shape[ax] % a == 0
                and k.full_shape[ax] >= 4 * a), 0)
    if amt:
      k.apply_opt(Opt("GROUPTOP", ax, amt))
      return
  _pad_for_locals(k)
  threads = 1
  for ax in reversed(range(k.first_reduce)):  # innermost output axes first: neighbours share cache lines
    if len(k.locals_) == 2: break
    fits = [a for a in (32, 16, 8, 4, 2) if threads * a <= min(local_max, 128) and k.full_shape[ax] % a == 0]
    amt = fits[0] if fits else 0
    if amt > 1:
      k.apply_opt(Opt("LOCAL", ax, amt))
      threads *= amt
  if DEBUG >= 3 and k.applied: print(f"opts: {k.applied} full_shape={k.full_shape}")


def _worth_threads(k: Kernel, work: int, thread_min: tuple[int, int]) -> bool:
  """Enough work to split across cores: thread_min is (loop points, bytes of memory moved), either one enough."""
  if work >= thread_min[0]: return True
  globs = {u.src[0] for u in k.sts if u.op in (Ops.LOAD, Ops.STORE)}
  return sum(sym_max(g.dtype.bufsize) * g.dtype.itemsize for g in globs) >= thread_min[1]  # type: ignore[attr-defined,misc]

def thread_work(k: Kernel) -> tuple[sint, sint]:
  """What a kernel over symbolic sizes does per call, as expressions of its Variables: (loop points, bytes its loads
  and stores walk: for each, the sizes of the axes along which its index moves, times its element size). Not its
  buffers' sizes, as _worth_threads counts for a kernel of constant sizes: attention over the filled positions
  reads a part of a KV cache that grows with them, in a buffer of the whole context."""
  nbytes: sint = 0
  for u, st in k.sts.items():
    if u.op not in (Ops.LOAD, Ops.STORE): continue
    # int64: a big buffer's bytes can pass int32 where its element count (an index) does not
    walked = prod([s for s, stride in zip(st.shape, st.index_strides()) if stride != 0])
    nbytes = nbytes + walked * u.src[0].dtype.itemsize if walked.__class__ is int else \
      nbytes + walked.cast(dtypes.int64) * u.src[0].dtype.itemsize  # type: ignore[union-attr]
  return prod(k.full_shape), nbytes

def thread_condition(k: Kernel, thread_min: tuple[int, int]) -> UOp | None:
  """For a parallel kernel over symbolic sizes: when a call is worth starting the other cores, a bool expression of
  its Variables (the renderer's runtime test, OpenMP's `if` clause: one program serves a KV cache of 10 filled
  positions, where waking the threads costs more than the work, and of 8000); None where every call is (or where
  the sizes are constants: the choice was made when compiling)."""
  if not k.parallel or not is_symbolic(k.full_shape): return None
  work, nbytes = thread_work(k)
  def least(x: sint) -> int: return x if x.__class__ is int else int(unbind_sint(x).simplify().vmin)  # type: ignore
  if least(work) >= thread_min[0] or least(nbytes) >= thread_min[1]: return None
  # (a constant part was below its threshold at the smallest sizes, so at every size: only the symbolic ones count)
  parts = [UOp.const(x.dtype, m - 1) < x for x, m in zip((work, nbytes), thread_min)  # type: ignore[attr-defined]
           if isinstance(x, UOp)]
  return functools.reduce(lambda a, b: a | b, parts).simplify() if parts else None

def hand_coded_optimizations(k: Kernel, thread_min: tuple[int, int] = (32768, 1 << 62)) -> None:
  """A small heuristic for reduce kernels:
  1. vector lanes on an axis every input walks contiguously or not at all: an output axis, else the innermost
     reduce axis (a dot product, summed across the lanes after the loop);
  2. short window axes (loads are masked along them: the pieces of a stack) unrolled whole, so each copy reads
     one piece with its mask folded away;
  3. register tiles on output axes along which the vector loads repeat, so one load feeds several accumulators;
  4. big kernels split across CPU threads on the outermost axis (thread_min: the renderer's thread_min_work and
     thread_min_bytes, the least work worth starting the other cores for).
  A kernel over symbolic sizes gets lanes and tiles on its constant axes only (_symbolic_lanes), and the threads."""
  if NOOPT: return
  if is_symbolic(k.full_shape):
    if 0 < k.first_reduce: _symbolic_lanes(k)
    if 0 < k.first_reduce < k.shape_len and k.lane is None: _symbolic_accumulators(k)
    # worth it at the largest sizes: then each call decides by its own sizes (thread_condition)
    if k.first_reduce > 0 and any(sym_max(x) >= m for x, m in zip(thread_work(k), thread_min)):
      k.apply_opt(Opt("THREAD", 0, 0))
    return
  if 0 < k.first_reduce < k.shape_len:
    _pad_odd_axes(k)
    if not _block_reduce(k): _block_for_cache(k)
    def amt_of(ax: int, amts: tuple[int, ...]) -> int:
      return next((a for a in amts if k.full_shape[ax] % a == 0 and k.full_shape[ax] >= a), 0)
    # the widest lanes win; on a tie, an axis the output is stored contiguously along, then the innermost
    cands = [(a, _lane_ok(k, ax), ax) for ax in range(k.first_reduce)
             if _lane_ok(k, ax, strided_store=True) and (a := amt_of(ax, (16, 8, 4)))]
    lane: tuple[str, int, int] | None = ("LANES", max(cands)[2], max(cands)[0]) if cands else None
    last = k.shape_len - 1
    if (lane is None or lane[2] < 8) and _lane_ok(k, last) and (a := amt_of(last, (16, 8, 4))) \
       and (lane is None or a > lane[2]): lane = ("RLANES", last, a)
    extra_unroll: tuple[int, int] | None = None
    win_out = prod(sz for ax in range(k.first_reduce)
                   if (sz := k.full_shape[ax]) <= 7 and None in k.load_strides(ax))
    if (lane is None or lane[2] < 8) and win_out >= 4:
      # short rows everywhere: 16 lanes on an output axis that one input walks with a stride (a gather) and the
      # others not at all beat 4 contiguous ones, when each gathered vector feeds a window's worth of accumulators
      gathers = [ax for ax in range(k.first_reduce) if k.full_shape[ax] % 16 == 0 and
                 sum(1 for s in k.load_strides(ax) if s != 0) == 1 and None not in k.load_strides(ax)
                 and None not in k.store_strides(ax)]
      if gathers:
        lane = ("LANES", gathers[0], 16)
        # neighbouring reduce steps read overlapping window inputs: unrolling the innermost reduce axis lets the
        # copies share those loads (a weight gradient reads x[o + k] for every o and k)
        if (a := amt_of(k.shape_len - 1, (4, 2))): extra_unroll = (k.shape_len - 1, a)
    if extra_unroll is None: extra_unroll = _window_reuse_unroll(k, lane, win_out)
    plan: list[tuple[str, int, int]] = [lane] if lane else []
    taken = {lane[1]} if lane else set()
    if extra_unroll is not None:
      plan.append(("UNROLL", *extra_unroll))
      taken.add(extra_unroll[0])
    # window axes, whole; the output ones count against the accumulator budget
    n_unroll, n_acc = 1, 1
    for ax in range(k.shape_len):
      if ax in taken or (sz := k.full_shape[ax]) > 7 or None not in k.load_strides(ax): continue
      if ax >= k.first_reduce and n_unroll * sz <= 49: plan.append(("UNROLL", ax, sz)); n_unroll *= sz  # noqa: E702
      elif ax < k.first_reduce and n_acc * sz <= 32: plan.append(("UPCAST", ax, sz)); n_acc *= sz  # noqa: E702
      else: continue
      taken.add(ax)
    # a field axis of a dot product on RLANES (a quantized block's two nibble halves), whole: its copies share the
    # loads that repeat along it (the block's bytes), and each copy's shift is a constant (SmolLM2 Q4_1 decode +13%).
    # Only while a reduce loop remains (the blocks): the lanes' sum is taken where the loop's accumulator is
    if lane is not None and lane[0] == "RLANES":
      for ax in range(k.first_reduce, k.shape_len):
        looped = [a for a in range(k.first_reduce, k.shape_len) if a not in taken and a != ax and k.full_shape[a] > 1]
        if ax not in taken and k.full_shape[ax] == 2 and any(s == 0 for s in k.load_strides(ax)) and \
           any(s != 0 for s in k.load_strides(ax)) and n_unroll * 2 <= 49 and looped:
          plan.append(("UNROLL", ax, 2))
          n_unroll *= 2
          taken.add(ax)
    if lane is not None:
      vec = [st for st in k.full_loads() if st.index_strides()[lane[1]] == 1]
      tiles = [ax for ax in reversed(range(k.first_reduce)) if any(st.index_strides()[ax] == 0 for st in vec)]
      if lane[0] == "RLANES":  # a dot product: the other input repeats along the other output axes
        tiles += [ax for ax in reversed(range(k.first_reduce)) if ax not in tiles
                  and any(st.index_strides()[ax] == 0 for st in k.full_loads() if st not in vec)]
      # one tall tile for a matmul-like kernel (8 accumulators hide the FMA latency), 4x4 for a dot product; short
      # rows (a small conv's 10 or 6 outputs) take a tile of 5 or 6 rather than 2
      amts: list[tuple[int, ...]] = [(4, 2), (4, 2)] if lane[0] == "RLANES" else [(8, 6, 5, 4, 3, 2)]
      if lane[0] == "RLANES" and (few := _few_rows(k, [t for t in tiles if t not in taken])):
        amts = [_FEW_ROWS_TILE, (few,)]
      # a convolution (window axes unrolled in the reduce): a second, small tile, so that short rows still give
      # enough accumulators to hide the FMA latency
      if lane[0] == "LANES" and n_unroll > 1: amts.append((2,))
    else:
      # no vector lanes: scalar register tiles on broadcast axes (as for a matmul whose inputs are both strided)
      tiles = [ax for ax in reversed(range(k.first_reduce)) if any(s == 0 for s in k.load_strides(ax))]
      amts = [(4, 2), (4, 2)]
    for ax in [t for t in tiles if t not in taken][:len(amts)]:
      am = amts.pop(0)
      # lanes on the output channel of a conv's weight gradient: the biggest tile that fits beside the window's
      # accumulators (a tile on the input channel shares each gradient load); on a dot product it only costs
      if lane is not None and lane[0] == "LANES": am = tuple(a for a in am if n_acc * a <= 32)
      if (a := amt_of(ax, am) if k.full_shape[ax] > 4 else k.full_shape[ax]) > 1 and n_acc * a <= 32:
        plan.append(("UPCAST", ax, a))
        n_acc *= a
    plan += _wide_tile(k, plan)
    plan += _unroll_lone_accumulator(k, plan)
    if k.gathers: plan = [p for p in plan if p[1] < k.first_reduce]  # reduce axes stay whole: see `gathers`
    for op, ax, amt in sorted(plan, key=lambda p: -p[1]): k.apply_opt(Opt(op, ax, amt))
  work = prod(k.full_shape)
  if k.first_reduce > 0 and _worth_threads(k, work, thread_min) and \
     0 <= (loop := k.first_loop()) < k.first_reduce and k.full_shape[loop] >= 2:
    k.apply_opt(Opt("THREAD", 0, 0))
  if DEBUG >= 3 and k.applied: print(f"opts: {k.applied} full_shape={k.full_shape}")


_FEW_ROWS_TILE = (3, 2)  # the weight rows per tile beside _few_rows' rows, the first that divides

def _few_rows(k: Kernel, tiles: list[int]) -> int:
  """A dot product over a few rows (a prefill's 5 to 8 tokens times a weight matrix): the rows' axis, the second
  tile (the one the weights repeat along), whole, when it has 5 to 8 of them; 0 otherwise. Then each weight row is
  read once, by one core: on a 4x4 tile the two cores split the rows and each read every weight row, and each
  output's lane sum came after only 4 rows' FMAs. Its size is returned, the other tile taking 3 (or 2) weight rows:
  up to 24 accumulators. GPT-2-shaped kernels, 11 interleaved rounds over 300 MB of weights, one thread (medians):
  8x768 @ 768x3072 979 -> 761 us, 8x3072 @ 3072x768 1055 -> 812 us, 8x768 @ 768x768 269 -> 289 us (two threads:
  635 -> 316 us). 4 weight rows (32 accumulators) measured the same as 3."""
  if len(tiles) < 2 or not 4 < (rows := k.full_shape[tiles[1]]) <= 8: return 0
  return rows

def _unroll_lone_accumulator(k: Kernel, plan: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
  """A long row summed on vector lanes into one accumulator (a big sum's first stage): each step's add waits on the
  one before. Unrolled by 4, four loads are added together off that chain and the carried add comes once per four
  vectors. A 16M float32 sum's first stage, the kernel alone: 60-68 -> 90-112 GB/s on a quiet moment of this 2-core
  machine (in C, both cores); under other processes' load, median 28 -> 32 GB/s (200 alternating runs)."""
  if [p[0] for p in plan] != ["RLANES"] or k.first_reduce != k.shape_len - 1: return []
  _, ax, amt = plan[0]
  steps = k.full_shape[ax] // amt
  return [("UNROLL", ax, 4)] if steps % 4 == 0 and steps >= 64 else []

def _symbolic_lanes(k: Kernel) -> None:
  """Heuristic for a reduce kernel over a symbolic size (attention over the filled positions): vector lanes on a
  constant axis that every load walks contiguously or not at all (the head dim: the innermost reduce axis of q @ k^T,
  an output axis of p @ v), then whole constant output axes of up to 8 along which some load repeats, as register
  tiles (the query heads of a group share each key and value load), up to 32 accumulators. The symbolic loops stay
  whole (their bounds are known when the kernel runs)."""
  def const(ax: int) -> bool: return k.full_shape[ax].__class__ is int
  def amt(ax: int) -> int: return next((a for a in (16, 8, 4) if k.full_shape[ax] % a == 0), 0)  # type: ignore[operator]
  last = k.shape_len - 1
  if const(last) and last >= k.first_reduce and _lane_ok(k, last) and (a := amt(last)):
    k.apply_opt(Opt("RLANES", last, a))
  else:
    ax = next((ax for ax in reversed(range(k.first_reduce)) if const(ax) and _lane_ok(k, ax) and amt(ax)), None)
    if ax is None: return
    k.apply_opt(Opt("LANES", ax, amt(ax)))
  n_acc = 1
  for ax in reversed(range(k.first_reduce)):
    size = k.full_shape[ax]
    if ax in k.upcasted or not const(ax) or not 1 < size <= 8 or n_acc * size > 32: continue  # type: ignore[operator]
    if any(s == 0 for s in k.load_strides(ax)):
      k.apply_opt(Opt("UPCAST", ax, size))  # type: ignore[arg-type]
      n_acc *= size  # type: ignore[operator]

def _symbolic_accumulators(k: Kernel, most: int = 16) -> None:
  """A reduce over a symbolic size with no vector lanes (softmax's max and sum over the filled positions, 9 rows of
  them): its constant output axes, whole, as up to `most` accumulators. Each one's chain of dependent adds or maxes
  then runs beside the others' instead of one after another (SmolLM2's max over 9 x 150 scores: 4.2 -> 1 us)."""
  n_acc = 1
  for ax in reversed(range(k.first_reduce)):
    size = k.full_shape[ax]
    if size.__class__ is not int or not 1 < size <= most // n_acc: continue  # type: ignore[operator]
    k.apply_opt(Opt("UPCAST", ax, size))  # type: ignore[arg-type]
    n_acc *= size  # type: ignore[operator]

def _lane_ok(k: Kernel, ax: int, strided_store: bool = False) -> bool:
  """Vector lanes on `ax`: every load walks it contiguously or not at all, and at least one walks it; the stores
  walk it contiguously too (or, with strided_store, with any fixed stride: one scalar store per lane)."""
  ss = k.load_strides(ax)
  ok_store = (lambda x: x is not None) if strided_store else (lambda x: x in (0, 1))
  return all(s in (0, 1) for s in ss) and 1 in ss and all(ok_store(s) for s in k.store_strides(ax))

def _window_reuse_unroll(k: Kernel, lane: tuple[str, int, int] | None, win_out: int) -> tuple[int, int] | None:
  """A convolution's weight gradient: vector lanes on an output axis (the output channel) and the window offsets
  as output axes (register tiles). Position o with offset k reads x[o + k], so unrolling the innermost reduce axis
  (the output positions) lets neighbouring copies share those loads."""
  if lane is None or lane[0] != "LANES" or win_out < 4 or k.first_reduce == k.shape_len: return None
  last = k.shape_len - 1
  a = next((a for a in (4, 5, 3, 2) if k.full_shape[last] % a == 0 and k.full_shape[last] > a), 0)
  return (last, a) if a else None

def _pad_odd_axes(k: Kernel) -> None:
  """Heuristic: when no axis splits into 16 vector lanes, pad the best lane axis up to a multiple of 32 (the wide
  matmul tile) if that adds at most 1/32 more work, else of 16 (8, 4) for at most a quarter more (a sixteenth when
  8 lanes fit already); then pad an odd-sized output axis the lanes' loads repeat along to a multiple of 8 for a
  register tile. E.g. a 1023x1023 matmul runs as 1024x1024 tiles with the last row and column masked."""
  if not 0 < k.first_reduce < k.shape_len or _windowed(k): return
  fitted = False  # the lane axis needed no padding: its kernel was left as it was unless a tall tile is nearly free
  def fits(ax: int, amts: tuple[int, ...]) -> bool: return any(k.full_shape[ax] % a == 0 for a in amts)
  def pad(ax: int, amts: tuple[int, ...], waste: int = 4) -> bool:
    size = k.full_shape[ax]
    for a in amts:
      if (-(-size // a) * a - size) * waste <= size:
        try: k.apply_opt(Opt("PADTO", ax, a))
        except ValueError: continue
        return True
    return False
  last = k.shape_len - 1
  outs = [ax for ax in range(k.first_reduce) if _lane_ok(k, ax, strided_store=True)]
  # the output axis stored contiguously first, then the innermost; else the reduce axis (a dot product)
  order = sorted(outs, key=lambda ax: (not _lane_ok(k, ax), -ax)) + ([last] if _lane_ok(k, last) else [])
  # a lane axis that splits into the 8x32 tile's columns already: only the tile's rows may need padding (1023 rows of
  # a 1023x1024 @ 1024x1024 took a tile of 3 rows, 29 GFLOPS)
  if (lane := next((ax for ax in order if fits(ax, (32,))), None)) is not None: fitted = True
  elif any(fits(ax, (8,)) for ax in order):  # 8 or 16 lanes already: pad only when nearly free (1000 -> 1024)
    lane = next((ax for ax in order if fits(ax, (8,)) and k.full_shape[ax] >= 256 and pad(ax, (32,), waste=32)),
                None)
    if lane is None and not any(fits(ax, (16,)) for ax in order):
      lane = next((ax for ax in order if fits(ax, (8,)) and pad(ax, (16,), waste=16)), None)
  else: lane = next((ax for ax in order if pad(ax, (32,), waste=32) or pad(ax, (16, 8, 4))), None)
  if lane is None or lane == last: return
  vec = [st for st in k.full_loads() if st.index_strides()[lane] == 1]
  tile = next((ax for ax in reversed(range(k.first_reduce)) if ax != lane
               and any(st.index_strides()[ax] == 0 for st in vec)), None)
  # a tall tile of 8 rows when that is nearly free (1500 -> 1504 rows: 8x32 tiles instead of 6x16, 154 -> 230 GFLOPS
  # on one core), else 8 or 4 rows for at most a quarter more
  if tile is None or k.full_shape[tile] <= 8 or fits(tile, (8,)) or pad(tile, (8,), waste=32): return
  if not fits(tile, (4,)) and not fitted: pad(tile, (8, 4))

def _block_for_cache(k: Kernel, l2_bytes: int = 2 << 20) -> None:
  """Heuristic: a matmul whose B (the input walked along the lane axis and strided along the reduce) is over
  twice the L2 size gets its lane axis blocked, so that one block of B (reduce size x block) is about L2's size.
  (Measured on 2048x2048: blocks of 256 columns 18 -> 65 GFLOPS; 1024x1024 gains nothing, so it is left alone.)"""
  if not 0 < k.first_reduce < k.shape_len or k.first_reduce < 2 or _windowed(k): return
  last = k.shape_len - 1
  red = prod(k.full_shape[k.first_reduce:])
  for ax in reversed(range(k.first_reduce)):
    size = k.full_shape[ax]
    walk = [st for st in k.full_loads()
            if st.index_strides()[ax] == 1 and (st.index_strides()[last] or 0) >= size]
    if not walk or not _lane_ok(k, ax): continue
    item = max(u.dtype.itemsize for u, st in k.sts.items() if u.op is Ops.LOAD and st in walk)
    if red * size * item <= 2 * l2_bytes: return
    blk = 32
    while blk * 2 * red * item <= l2_bytes and size % (blk * 2) == 0: blk *= 2
    if blk < size and size % blk == 0: k.apply_opt(Opt("BLOCK", ax, blk))
    return

def _block_reduce(k: Kernel, l1_bytes: int = 32 << 10, l2_bytes: int = 2 << 20) -> bool:
  """Heuristic: a float32 matmul (at least 64 rows, a reduce over 512 long) whose rows of A evict each other from L1
  gets its reduce in blocks of about 256 (KBLOCK) inside blocks of about 256 columns (BLOCK): a register tile's
  8 rows of A (8 x 256) then stay in L1 while they meet every column of B's block, and that block (256 x 256) stays
  in L2 for every row. The rows evict each other when a tile's 8 rows of the reduce overflow L1 (while B is too big
  for L2), or when a row stride makes them share few of L1's sets (1 KB apart, or next to it). One core, interleaved:
  1024 1.13-1.17x, 2048 1.74-1.87x, 1023 1.07x, 768 1.26x, 1536 1.23x, 2000 2.5x, 64x4096x4096 1.66x, 512x3000x1000
  1.5x; strides that spread over the sets (1000, 64x2000x64) measured 0.92-0.97x blocked, so they are left alone."""
  if k.first_reduce != 2 or k.shape_len != 3 or _windowed(k) or k.kblock_unfit() or k.full_shape[2] <= 512: return False
  if any(u.dtype.itemsize != 4 for u in k.sts if u.op is Ops.LOAD): return False
  red = k.full_shape[2]
  # 256 rows this many floats apart touch at most half of L1's 64 sets (4 KB a way): 1024 and 2048 one, 768 four,
  # 1023 seventeen; 777 or 1000 drift through all of them
  def aliased(stride: int) -> bool: return len({i * stride * 4 // 64 % 64 for i in range(256)}) <= 32
  strides = [s for st in k.full_loads() for s in st.index_strides() if s not in (0, 1)]
  rows_alias = any(s is not None and aliased(s) for s in strides)
  def near_256(size: int, step: int) -> int:
    return min((d for d in range(128, 513, step) if size % d == 0), key=lambda d: abs(d - 256), default=0)
  if not (kc := near_256(red, 1)): return False
  for ax in (1, 0):
    size = k.full_shape[ax]
    walk = [st for st in k.full_loads() if st.index_strides()[ax] == 1 and (st.index_strides()[2] or 0) > 1]
    # columns in blocks of a multiple of the 8x32 tile's 32 (the whole axis when it is short)
    if not walk or not _lane_ok(k, ax) or k.full_shape[1 - ax] < 64 or size < 32 or size % 32: continue
    # a reduce too long for L1 matters only when B is too big to stay in L2 meanwhile (64x2000x64: 0.97x blocked),
    # and nothing does when both inputs fit in half of L2
    if not rows_alias and not (8 * red * 4 > l1_bytes and red * size * 4 > l2_bytes // 2): return False
    if (k.full_shape[1 - ax] + size) * red * 4 <= l2_bytes // 2: return False
    if size > 512:
      # the threads split the column blocks: a count of blocks that 4 (else 2) divides, then the size nearest 256
      # (768: 4 blocks of 192, not 3 of 256, whose 2:1 split ran 128x3072x768 at 0.81x on 2 threads)
      blks = [d for d in range(128, 513, 32) if size % d == 0]
      if not blks: continue
      k.apply_opt(Opt("BLOCK", ax, min(blks, key=lambda d: (size // d % 4 != 0, size // d % 2 != 0, abs(d - 256)))))
    k.apply_opt(Opt("KBLOCK", k.shape_len - 1, kc))  # the reduce axis, after BLOCK's block axis if any
    return True
  return False

def _pad_for_locals(k: Kernel) -> None:
  """GPU heuristic: an odd innermost output axis (1001) gets no work-group split at all; pad it to a multiple of
  32 (16, 8) when that adds at most a quarter more threads, and the padded threads store nothing."""
  if k.first_reduce == 0 or k.locals_ or k.grouped: return
  ax = k.first_reduce - 1
  size = k.full_shape[ax]
  if size.__class__ is not int or size < 32 or any(size % a == 0 for a in (32, 16, 8)): return  # type: ignore[operator]
  for a in (32, 16, 8):
    if (-(-size // a) * a - size) * 4 <= size:
      try: k.apply_opt(Opt("PADTO", ax, a))
      except ValueError: continue
      return

def _windowed(k: Kernel) -> bool:
  """Some load indexes an axis through a mask or a window (a conv, a stack): the padding and blocking heuristics
  leave those kernels to the window heuristics."""
  return any(None in st.index_strides() for st in k.full_loads())

def _wide_tile(k: Kernel, plan: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
  """Heuristic: a float32 matmul tile of 8 rows x 16 lanes grows to 8 x 32 (16 accumulators of AVX-512's 32
  registers, half the loads of A per FMA): 1024x1024 28 -> 60 GFLOPS here."""
  lanes = [p for p in plan if p[0] == "LANES" and p[2] == 16]
  if len(lanes) != 1 or k.full_shape[lanes[0][1]] % 32: return []
  if any(u.dtype.itemsize > 4 for u in k.sts if u.op is Ops.LOAD): return []
  tall = [p for p in plan if p[0] == "UPCAST" and p[2] == 8 and p[1] < k.first_reduce]
  if len(tall) == 1 and len(plan) == 2: return [("UPCAST", lanes[0][1], 2)]
  # a convolution with its window unrolled and at most 8 accumulators: two vectors along the lane axis share
  # every broadcast operand (the sums go into the accumulators one product at a time, see linearize): 3x3 conv
  # forward and input gradient on 32x32 images 3.5 -> 2.7 and 4.1 -> 2.7 ms
  ups = [p[2] for p in plan if p[0] == "UPCAST"]
  if any(p[0] == "UNROLL" for p in plan) and ups and prod(ups) <= 8: return [("UPCAST", lanes[0][1], 2)]
  return []
