"""A kernel's loop space: the full shape, which axes reduce, every load's view over it, and the optimizations
(actions on axes) that reshape that space before lowering."""
from __future__ import annotations
from dataclasses import dataclass, field
from attograd.helpers import DEBUG, NOOPT, prod
from attograd.uop.ops import Ops, UOp
from attograd.uop.view import ShapeTracker

@dataclass(frozen=True)
class Opt:
  """One action on an axis: UPCAST (unroll an output axis), UNROLL (unroll a reduce axis), LANES / RLANES (the same,
  and the unrolled axis becomes the lanes of vector registers), THREAD (run across cores).
  GPU only: LOCAL (split an output axis across a work-group's threads), GROUP / GROUPTOP (split a reduce axis across
  a work-group's threads, strided / in contiguous chunks, combined through local memory after a barrier)."""
  op: str
  axis: int
  amount: int

@dataclass
class Kernel:
  ast: UOp
  full_shape: tuple[int, ...] = ()
  first_reduce: int = 0
  sts: dict[UOp, ShapeTracker] = field(default_factory=dict)
  upcasted: list[int] = field(default_factory=list)     # output axes unrolled into registers (axis indices)
  unrolled: list[int] = field(default_factory=list)     # reduce axes unrolled
  parallel: bool = False                                # run the outermost output axis across cores
  lane: int | None = None                               # the upcast/unrolled axis emitted as vector lanes
  locals_: list[int] = field(default_factory=list)      # GPU: output axes run by the threads of one work-group
  grouped: list[int] = field(default_factory=list)      # GPU: reduce axes split across a work-group's threads
  applied: list[Opt] = field(default_factory=list)

  def __post_init__(self) -> None:
    topo = self.ast.toposort()
    for u in topo:
      if u.op is Ops.VIEW: continue
      if u.op in (Ops.LOAD, Ops.STORE) or (u.op is Ops.CONST and u.src):
        view = u.src[1] if u.op is not Ops.CONST else u.src[0]
        self.sts[u] = view.arg
    reduces = [u for u in topo if u.op is Ops.REDUCE_AXIS]
    out_shape = self.ast.src[0].src[1].arg.shape
    self.full_shape = reduces[0].src[0].shape if reduces else out_shape
    self.reduce_axes = tuple(sorted(reduces[0].arg[1])) if reduces else ()
    self.out_rank_shape = out_shape
    # reduce axes go last, so that reduce loops nest inside the output loops
    if self.reduce_axes:
      perm = tuple(i for i in range(len(self.full_shape)) if i not in self.reduce_axes) + self.reduce_axes
      if perm != tuple(range(len(perm))): self._permute(perm)
    self.first_reduce = len(self.full_shape) - len(self.reduce_axes)
    self._simplify_axes()

  # ***** the loop space *****
  @property
  def shape_len(self) -> int: return len(self.full_shape)
  @property
  def output_shape(self) -> tuple[int, ...]:
    return tuple(s if i < self.first_reduce else 1 for i, s in enumerate(self.full_shape))
  def _is_full(self, st: ShapeTracker) -> bool: return st.shape == self.full_shape
  def _permute(self, perm: tuple[int, ...]) -> None:
    self.sts = {u: st.permute(perm) for u, st in self.sts.items()}
    self.full_shape = tuple(self.full_shape[i] for i in perm)
  def _reshape(self, new_full: tuple[int, ...], new_out: tuple[int, ...]) -> None:
    full, out = self.full_shape, self.output_shape
    self.sts = {u: st.reshape(new_full if st.shape == full else new_out) if st.shape in (full, out) else st
                for u, st in self.sts.items()}
    self.full_shape = new_full

  def _simplify_axes(self) -> None:
    """Drop size-1 axes and merge neighbours that every view walks as one strided run."""
    keep = [i for i, s in enumerate(self.full_shape) if s != 1]
    if len(keep) != len(self.full_shape):
      nfr = sum(1 for i in keep if i < self.first_reduce)
      new_full = tuple(self.full_shape[i] for i in keep)
      new_out = tuple(s if j < nfr else 1 for j, s in enumerate(new_full))
      self._reshape(new_full, new_out)
      self.first_reduce = nfr
    i = len(self.full_shape) - 2
    while i >= 0:
      same_kind = (i + 1 < self.first_reduce) or (i >= self.first_reduce)
      if same_kind and self._mergeable(i):
        new_full = self.full_shape[:i] + (self.full_shape[i] * self.full_shape[i + 1],) + self.full_shape[i + 2:]
        fr = self.first_reduce - (1 if i + 1 < self.first_reduce else 0)
        new_out = tuple(s if j < fr else 1 for j, s in enumerate(new_full))
        self._reshape(new_full, new_out)
        self.first_reduce = fr
      i -= 1

  def _mergeable(self, i: int) -> bool:
    for st in self.sts.values():
      v = st.views[-1]
      sh, stv = v.shape, v.strides
      if v.mask is not None and (v.mask[i] != (0, sh[i]) or v.mask[i + 1] != (0, sh[i + 1])):
        # a mask on the outer axis only still merges: (lo, hi) -> (lo*n, hi*n)
        if v.mask[i + 1] != (0, sh[i + 1]): return False
      if sh[i] != 1 and sh[i + 1] != 1 and stv[i] != stv[i + 1] * sh[i + 1]: return False
    return True

  # ***** optimizations *****
  def apply_opt(self, opt: Opt) -> None:
    ax, amt = opt.axis, opt.amount
    if opt.op in ("UPCAST", "UNROLL", "LANES", "RLANES"):
      if opt.op in ("LANES", "RLANES") and self.lane is not None:
        raise ValueError(f"{opt}: the kernel has lanes already")
      if (opt.op in ("UNROLL", "RLANES")) != (ax >= self.first_reduce):
        raise ValueError(f"{opt}: axis {ax} is {'a reduce' if ax >= self.first_reduce else 'an output'} axis")
      size = self.full_shape[ax]
      if size % amt: raise ValueError(f"{opt}: axis size {size} is not divisible by {amt}")
      # split the axis into (size/amt, amt); the new inner axis is unrolled
      new_full = self.full_shape[:ax] + (size // amt, amt) + self.full_shape[ax + 1:]
      is_reduce = ax >= self.first_reduce
      fr = self.first_reduce + (0 if is_reduce else 1)
      new_out = tuple(s if j < fr else 1 for j, s in enumerate(new_full))
      self._reshape(new_full, new_out)
      self.first_reduce = fr
      self.upcasted = [a + 1 if a > ax else a for a in self.upcasted]
      self.unrolled = [a + 1 if a > ax else a for a in self.unrolled]
      if self.lane is not None and self.lane > ax: self.lane += 1
      (self.unrolled if is_reduce else self.upcasted).append(ax + 1)
      if opt.op in ("LANES", "RLANES"): self.lane = ax + 1
      if self.locals_ or self.grouped: self._shift_gpu_axes(ax)
    elif opt.op == "THREAD": self.parallel = True
    elif opt.op in ("LOCAL", "GROUP", "GROUPTOP"): self._apply_gpu_opt(opt)
    else: raise ValueError(f"unknown opt {opt}")
    self.applied.append(opt)

  def _strides(self, ax: int) -> list[int | None]:
    """The stride of every full-shape load along an axis (None where a mask or a second view gets in the way)."""
    return [st.index_strides()[ax] for u, st in self.sts.items() if u.op is Ops.LOAD and self._is_full(st)]
  def _store_strides(self, ax: int) -> list[int | None]:
    return [st.index_strides()[ax] for u, st in self.sts.items() if u.op is Ops.STORE]
  def _lane_ok(self, ax: int, strided_store: bool = False) -> bool:
    """Vector lanes on `ax`: every load walks it contiguously or not at all, and at least one walks it; the stores
    walk it contiguously too (or, with strided_store, with any fixed stride: one scalar store per lane)."""
    ss = self._strides(ax)
    ok_store = (lambda x: x is not None) if strided_store else (lambda x: x in (0, 1))
    return all(s in (0, 1) for s in ss) and 1 in ss and all(ok_store(s) for s in self._store_strides(ax))

  # ***** GPU optimizations *****
  def _shift_gpu_axes(self, ax: int) -> None:
    self.locals_ = [a + 1 if a > ax else a for a in self.locals_]
    self.grouped = [a + 1 if a > ax else a for a in self.grouped]

  def _apply_gpu_opt(self, opt: Opt) -> None:
    """Split axis `ax` into two; the part of size `amt` runs across the threads of a work-group."""
    ax, amt = opt.axis, opt.amount
    if not 0 <= ax < self.shape_len: raise ValueError(f"{opt}: axis {ax} out of range for shape {self.full_shape}")
    if ax in self.upcasted + self.unrolled + self.locals_ + self.grouped:
      raise ValueError(f"{opt}: axis {ax} is already upcast, unrolled, local or grouped")
    is_reduce = ax >= self.first_reduce
    if opt.op == "LOCAL" and is_reduce: raise ValueError(f"{opt}: LOCAL needs an output axis, {ax} is a reduce axis")
    if opt.op != "LOCAL":
      if not is_reduce: raise ValueError(f"{opt}: {opt.op} needs a reduce axis, {ax} is an output axis")
      if self.grouped or self.upcasted: raise ValueError(f"{opt}: one GROUP per kernel, and not with UPCAST")
    size = self.full_shape[ax]
    if amt < 1 or size % amt: raise ValueError(f"{opt}: axis size {size} is not divisible by {amt}")
    top = opt.op == "GROUPTOP"  # the work-group part is the outer one: each thread reduces one contiguous chunk
    new_full = self.full_shape[:ax] + ((amt, size // amt) if top else (size // amt, amt)) + self.full_shape[ax + 1:]
    fr = self.first_reduce + (0 if is_reduce else 1)
    self._reshape(new_full, tuple(s if j < fr else 1 for j, s in enumerate(new_full)))
    self.first_reduce = fr
    self.upcasted = [a + 1 if a > ax else a for a in self.upcasted]
    self.unrolled = [a + 1 if a > ax else a for a in self.unrolled]
    if self.lane is not None and self.lane > ax: self.lane += 1
    self._shift_gpu_axes(ax)
    (self.locals_ if opt.op == "LOCAL" else self.grouped).append(ax if top else ax + 1)

  def gpu_optimizations(self, local_max: int = 256) -> None:
    """A simple heuristic for GPU renderers: reductions with few outputs split each reduce across a work-group
    (GROUPTOP); everything else puts up to `local_max` neighbouring outputs into one work-group (LOCAL)."""
    if NOOPT: return
    out_size = prod(self.full_shape[:self.first_reduce])
    if self.first_reduce < self.shape_len and out_size <= 2048:
      ax = self.shape_len - 1  # the innermost reduce axis
      amt = next((a for a in (256, 128, 64, 32, 16) if a <= local_max and self.full_shape[ax] % a == 0
                  and self.full_shape[ax] >= 4 * a), 0)
      if amt:
        self.apply_opt(Opt("GROUPTOP", ax, amt))
        return
    threads = 1
    for ax in reversed(range(self.first_reduce)):  # innermost output axes first: neighbours share cache lines
      if len(self.locals_) == 2: break
      fits = [a for a in (32, 16, 8, 4, 2) if threads * a <= min(local_max, 128) and self.full_shape[ax] % a == 0]
      amt = fits[0] if fits else 0
      if amt > 1:
        self.apply_opt(Opt("LOCAL", ax, amt))
        threads *= amt
    if DEBUG >= 3 and self.applied: print(f"opts: {self.applied} full_shape={self.full_shape}")

  def hand_coded_optimizations(self) -> None:
    """A small heuristic for reduce kernels:
    1. vector lanes on an axis every input walks contiguously or not at all: an output axis, else the innermost
       reduce axis (a dot product, summed across the lanes after the loop);
    2. short window axes (loads are masked along them: the pieces of a stack) unrolled whole, so each copy reads
       one piece with its mask folded away;
    3. register tiles on output axes along which the vector loads repeat, so one load feeds several accumulators;
    4. big kernels split across CPU threads on the outermost axis."""
    if NOOPT: return
    if 0 < self.first_reduce < self.shape_len:
      def amt_of(ax: int, amts: tuple[int, ...]) -> int:
        return next((a for a in amts if self.full_shape[ax] % a == 0 and self.full_shape[ax] >= a), 0)
      # the widest lanes win; on a tie, an axis the output is stored contiguously along, then the innermost
      cands = [(a, self._lane_ok(ax), ax) for ax in range(self.first_reduce)
               if self._lane_ok(ax, strided_store=True) and (a := amt_of(ax, (16, 8, 4)))]
      lane: tuple[str, int, int] | None = ("LANES", max(cands)[2], max(cands)[0]) if cands else None
      last = self.shape_len - 1
      if (lane is None or lane[2] < 8) and self._lane_ok(last) and (a := amt_of(last, (16, 8, 4))) \
         and (lane is None or a > lane[2]): lane = ("RLANES", last, a)
      extra_unroll: tuple[int, int] | None = None
      win_out = prod(sz for ax in range(self.first_reduce)
                     if (sz := self.full_shape[ax]) <= 7 and None in self._strides(ax))
      if (lane is None or lane[2] < 8) and win_out >= 4:
        # short rows everywhere: 16 lanes on an output axis that one input walks with a stride (a gather) and the
        # others not at all beat 4 contiguous ones, when each gathered vector feeds a window's worth of accumulators
        gathers = [ax for ax in range(self.first_reduce) if self.full_shape[ax] % 16 == 0 and
                   sum(1 for s in self._strides(ax) if s != 0) == 1 and None not in self._strides(ax)
                   and None not in self._store_strides(ax)]
        if gathers:
          lane = ("LANES", gathers[0], 16)
          # neighbouring reduce steps read overlapping window inputs: unrolling the innermost reduce axis lets the
          # copies share those loads (a weight gradient reads x[o + k] for every o and k)
          if (a := amt_of(self.shape_len - 1, (4, 2))): extra_unroll = (self.shape_len - 1, a)
      if extra_unroll is None: extra_unroll = self._window_reuse_unroll(lane, win_out)
      plan: list[tuple[str, int, int]] = [lane] if lane else []
      taken = {lane[1]} if lane else set()
      if extra_unroll is not None:
        plan.append(("UNROLL", *extra_unroll))
        taken.add(extra_unroll[0])
      # window axes, whole; the output ones count against the accumulator budget
      n_unroll, n_acc = 1, 1
      for ax in range(self.shape_len):
        if ax in taken or (sz := self.full_shape[ax]) > 7 or None not in self._strides(ax): continue
        if ax >= self.first_reduce and n_unroll * sz <= 49: plan.append(("UNROLL", ax, sz)); n_unroll *= sz  # noqa: E702
        elif ax < self.first_reduce and n_acc * sz <= 32: plan.append(("UPCAST", ax, sz)); n_acc *= sz  # noqa: E702
        else: continue
        taken.add(ax)
      if lane is not None:
        vec = [st for st in self._loads_full() if st.index_strides()[lane[1]] == 1]
        tiles = [ax for ax in reversed(range(self.first_reduce)) if any(st.index_strides()[ax] == 0 for st in vec)]
        if lane[0] == "RLANES":  # a dot product: the other input repeats along the other output axes
          tiles += [ax for ax in reversed(range(self.first_reduce)) if ax not in tiles
                    and any(st.index_strides()[ax] == 0 for st in self._loads_full() if st not in vec)]
        # one tall tile for a matmul-like kernel (8 accumulators hide the FMA latency), 4x4 for a dot product; short
        # rows (a small conv's 10 or 6 outputs) take a tile of 5 or 6 rather than 2
        amts = [(4, 2), (4, 2)] if lane[0] == "RLANES" else [(8, 6, 5, 4, 3, 2)]
        # a convolution (window axes unrolled in the reduce): a second, small tile, so that short rows still give
        # enough accumulators to hide the FMA latency
        if lane[0] == "LANES" and n_unroll > 1: amts.append((2,))
      else:
        # no vector lanes: scalar register tiles on broadcast axes (as for a matmul whose inputs are both strided)
        tiles = [ax for ax in reversed(range(self.first_reduce)) if any(s == 0 for s in self._strides(ax))]
        amts = [(4, 2), (4, 2)]
      for ax in [t for t in tiles if t not in taken][:len(amts)]:
        am = amts.pop(0)
        # lanes on the output channel of a conv's weight gradient: the biggest tile that fits beside the window's
        # accumulators (a tile on the input channel shares each gradient load); on a dot product it only costs
        if lane is not None and lane[0] == "LANES": am = tuple(a for a in am if n_acc * a <= 32)
        if (a := amt_of(ax, am) if self.full_shape[ax] > 4 else self.full_shape[ax]) > 1 and n_acc * a <= 32:
          plan.append(("UPCAST", ax, a))
          n_acc *= a
      for op, ax, amt in sorted(plan, key=lambda p: -p[1]): self.apply_opt(Opt(op, ax, amt))
    work = prod(self.full_shape)
    if self.first_reduce > 0 and work >= 32768 and self.full_shape[0] >= 2: self.apply_opt(Opt("THREAD", 0, 0))
    if DEBUG >= 3 and self.applied: print(f"opts: {self.applied} full_shape={self.full_shape}")
  def _window_reuse_unroll(self, lane: tuple[str, int, int] | None, win_out: int) -> tuple[int, int] | None:
    """A convolution's weight gradient: vector lanes on an output axis (the output channel) and the window offsets
    as output axes (register tiles). Position o with offset k reads x[o + k], so unrolling the innermost reduce axis
    (the output positions) lets neighbouring copies share those loads."""
    if lane is None or lane[0] != "LANES" or win_out < 4 or self.first_reduce == self.shape_len: return None
    last = self.shape_len - 1
    a = next((a for a in (4, 5, 3, 2) if self.full_shape[last] % a == 0 and self.full_shape[last] > a), 0)
    return (last, a) if a else None

  def _loads_full(self) -> list[ShapeTracker]:
    return [st for u, st in self.sts.items() if u.op is Ops.LOAD and self._is_full(st)]
