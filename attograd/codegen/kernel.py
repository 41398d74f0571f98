"""A kernel's loop space: the full shape, which axes reduce, every load's view over it, and the optimizations
(actions on axes) that reshape that space before lowering."""
from __future__ import annotations
from dataclasses import dataclass, field
from attograd.dtype import DType, dtypes
from attograd.helpers import DEBUG, NOOPT, prod
from attograd.uop.ops import Ops, UOp
from attograd.uop.view import ShapeTracker, View, _mul, is_symbolic
from attograd.uop.ops import sym_max

@dataclass(frozen=True)
class Opt:
  """One action on an axis: UPCAST (unroll an output axis), UNROLL (unroll a reduce axis), LANES / RLANES (the same,
  and the unrolled axis becomes the lanes of vector registers), THREAD (run across cores).
  GPU only: LOCAL (split an output axis across a work-group's threads), GROUP / GROUPTOP (split a reduce axis across
  a work-group's threads, strided / in contiguous chunks, combined through local memory after a barrier).
  TC (GPUs with tensor cores; axis and amount unused): a half/bfloat16 matmul runs as 16x8x16 warp tiles.
  PADTO rounds an axis up to a multiple of `amount` (so it splits evenly); the padded positions are masked out.
  BLOCK splits an output axis into blocks of `amount` and runs the block loop outermost (cache blocking: a matmul
  walks one block of B's columns for every row before moving on, so that block stays in L2)."""
  op: str
  axis: int
  amount: int

@dataclass(frozen=True)
class TensorCore:
  """Where a TC kernel's tile lives: output axes m (16 rows) and n (8 columns), reduce axis k (16), each the inner
  part of a split axis; the input dtype; swap: the MUL's second operand is the row-major A (m x k) tile."""
  m: int
  n: int
  k: int
  dtype: DType
  swap: bool
  dims = (16, 8, 16)
  def shifted(self, ax: int) -> TensorCore:
    """The same tile after axis `ax` was split in two."""
    m, n, k = (a + 1 if a > ax else a for a in (self.m, self.n, self.k))
    return TensorCore(m, n, k, self.dtype, self.swap)

def tc_operand(x: UOp) -> UOp:
  """A matmul operand as a tensor core reads it: Tensor.dot casts half/bfloat16 operands to float32 before multiplying
  (their products are exact there, and the sum accumulates in float32), which is what the tensor core does itself."""
  low = x.op is Ops.CAST and x.dtype is dtypes.float32 and x.src[0].dtype in (dtypes.float16, dtypes.bfloat16)
  return x.src[0] if low else x

def tc_input_dtype(mul: UOp) -> DType:
  """The dtype a tensor core would multiply in for this MUL: its operands' own (uncast) dtype when they agree."""
  a, b = (tc_operand(s).dtype for s in mul.src)
  return a if a is b else mul.dtype

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
  # what the target offers (set from the renderer): tensor-core input dtypes, and the warp size for shuffles (0: none)
  tensor_cores: tuple[DType, ...] = ()
  warp_size: int = 0
  tc: TensorCore | None = None                          # GPU: the matmul runs on tensor cores (Opt TC)
  # the reduce folds away into loads (a one-hot gather, codegen/lowerer.py pm_gather_fold): its axes are left whole,
  # since an unrolled or work-group-split reduce axis no longer matches the rule and would loop over every row
  gathers: bool = False
  # PADTO masks: (terms, limit, gated) means sum(coef * index of axis) < limit must hold for the loads, masked
  # constants and stores in `gated` to touch memory (the rest of the padded positions read or store nothing)
  pads: list[tuple[tuple[tuple[int, int], ...], int, frozenset[UOp]]] = field(default_factory=list)

  def __post_init__(self) -> None:
    topo = self.ast.toposort()
    for u in topo:
      if u.op is Ops.VIEW: continue
      if u.op in (Ops.LOAD, Ops.STORE, Ops.IOTA) or (u.op is Ops.CONST and u.src):
        view = u.src[1] if u.op in (Ops.LOAD, Ops.STORE) else u.src[0]
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
    if reduces and any(u.op is Ops.IOTA for u in topo):  # only an arange's index math can make a one-hot to fold
      from attograd.codegen.lowerer import reduce_folds
      self.gathers = reduce_folds(self)

  # ***** the loop space *****
  def index_bound(self) -> int:
    """The largest magnitude of any index, loop counter or partial sum of one in this kernel: every view's
    index_bound, and the loop space's size (thread indices and padding masks combine axes up to it)."""
    return max([sym_max(prod(self.full_shape))] + [st.index_bound() for st in self.sts.values()])
  def index_dtype(self) -> DType:
    """int32 index math where index_bound() proves it can't overflow, else int64."""
    return dtypes.int32 if self.index_bound() <= dtypes.max(dtypes.int32) else dtypes.int64
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
        new_full = self.full_shape[:i] + (_mul(self.full_shape[i], self.full_shape[i + 1]),) + self.full_shape[i + 2:]
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
      if sh[i] != 1 and sh[i + 1] != 1 and stv[i] != _mul(stv[i + 1], sh[i + 1]): return False
    return True

  # ***** optimizations *****
  def apply_opt(self, opt: Opt) -> None:
    ax, amt = opt.axis, opt.amount
    if self.gathers and ax >= self.first_reduce and opt.op in ("UNROLL", "RLANES", "GROUP", "GROUPTOP", "PADTO"):
      raise ValueError(f"{opt}: reduce axis {ax} folds to a gather (one load per output); splitting it would loop")
    if self.tc is not None and not (opt.op == "UPCAST" and ax < self.first_reduce and ax not in (self.tc.m, self.tc.n)):
      raise ValueError(f"{opt}: after TC only UPCAST of an output axis outside the tile (a warp then does several)")
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
      self._split_pads(ax, amt)
      (self.unrolled if is_reduce else self.upcasted).append(ax + 1)
      if opt.op in ("LANES", "RLANES"): self.lane = ax + 1
      if self.locals_ or self.grouped: self._shift_gpu_axes(ax)
      if self.tc is not None: self.tc = self.tc.shifted(ax)
    elif opt.op == "THREAD": self.parallel = True
    elif opt.op in ("LOCAL", "GROUP", "GROUPTOP"): self._apply_gpu_opt(opt)
    elif opt.op == "TC": self._apply_tc(opt)
    elif opt.op == "PADTO": self._apply_padto(opt)
    elif opt.op == "BLOCK": self._apply_block(opt)
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

  # ***** padding (PADTO) *****
  # The rule for a padded axis: its extra positions are masked, so every load, masked constant and store that walks
  # the axis reads 0 there (and reads no memory), and stores nothing. An output axis may always be padded (padded
  # outputs are computed from zeros and thrown away), unless the kernel divides integers by a value that could then
  # be 0. A reduce axis may be padded only for a sum whose summand is provably 0 when those loads are 0 (see
  # _zero_at_pad): x*y, x+y, -x, casts, sqrt, where(c, x, y) with both sides 0... but not exp(x) or x < y.
  def _apply_padto(self, opt: Opt) -> None:
    ax, amt = opt.axis, opt.amount
    if not 0 <= ax < self.shape_len: raise ValueError(f"{opt}: axis {ax} out of range for shape {self.full_shape}")
    if ax in self.upcasted + self.unrolled + self.locals_ + self.grouped:
      raise ValueError(f"{opt}: axis {ax} is already upcast, unrolled, local or grouped")
    size = self.full_shape[ax]
    if amt < 2 or size % amt == 0: raise ValueError(f"{opt}: axis size {size} is already a multiple of {amt}")
    new = -(-size // amt) * amt
    if new - size >= size: raise ValueError(f"{opt}: padding axis {ax} from {size} to {new} is mostly padding")
    topo = self.ast.toposort()
    if any(u.op in (Ops.IDIV, Ops.MOD) and not (u.src[1].op is Ops.CONST and u.src[1].arg != 0) for u in topo):
      raise ValueError(f"{opt}: the kernel divides integers by a loaded value, which a padded 0 could make trap")
    is_reduce = ax >= self.first_reduce
    full, out = self.full_shape, self.output_shape
    gated: set[UOp] = set()
    new_sts: dict[UOp, ShapeTracker] = {}
    for u, st in self.sts.items():
      if st.shape == full or (not is_reduce and st.shape == out):
        if st.index_strides()[ax] != 0: gated.add(u)  # walks the axis (or its mask does): masked at the padding
        new_sts[u] = _pad_view(st, ax, new)
      else: new_sts[u] = st
    if is_reduce:
      for r in (u for u in topo if u.op is Ops.REDUCE_AXIS):
        if r.arg[0] is not Ops.ADD or not _zero_at_pad(r.src[0], gated, {}):
          raise ValueError(f"{opt}: reduce axis {ax} can't be padded: the padded elements would not add 0 to the "
                           f"{r.arg[0].name} reduce")
    self.sts, self.full_shape = new_sts, full[:ax] + (new,) + full[ax + 1:]
    self.pads.append((((ax, 1),), size, frozenset(gated)))

  def _split_pads(self, ax: int, inner: int) -> None:
    """Axis ax was split into (ax, ax+1) with an inner size `inner`: the pad masks follow (index = outer*inner+i)."""
    def move(terms: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
      out: list[tuple[int, int]] = []
      for a, c in terms:
        if a == ax: out += [(ax, c * inner), (ax + 1, c)]
        else: out.append((a + 1 if a > ax else a, c))
      return tuple(out)
    self.pads = [(move(t), lim, g) for t, lim, g in self.pads]

  def _pad_odd_axes(self) -> None:
    """Heuristic: when no axis splits into 16 vector lanes, pad the best lane axis up to a multiple of 32 (the wide
    matmul tile) if that adds at most 1/32 more work, else of 16 (8, 4) for at most a quarter more (a sixteenth when
    8 lanes fit already); then pad an odd-sized output axis the lanes' loads repeat along to a multiple of 8 for a
    register tile. E.g. a 1023x1023 matmul runs as 1024x1024 tiles with the last row and column masked."""
    if not 0 < self.first_reduce < self.shape_len or self._windowed(): return
    def fits(ax: int, amts: tuple[int, ...]) -> bool: return any(self.full_shape[ax] % a == 0 for a in amts)
    def pad(ax: int, amts: tuple[int, ...], waste: int = 4) -> bool:
      size = self.full_shape[ax]
      for a in amts:
        if (-(-size // a) * a - size) * waste <= size:
          try: self.apply_opt(Opt("PADTO", ax, a))
          except ValueError: continue
          return True
      return False
    last = self.shape_len - 1
    outs = [ax for ax in range(self.first_reduce) if self._lane_ok(ax, strided_store=True)]
    # the output axis stored contiguously first, then the innermost; else the reduce axis (a dot product)
    order = sorted(outs, key=lambda ax: (not self._lane_ok(ax), -ax)) + ([last] if self._lane_ok(last) else [])
    if any(fits(ax, (32,)) for ax in order): return
    if any(fits(ax, (8,)) for ax in order):  # 8 or 16 lanes already: pad only when nearly free (1000 -> 1024)
      lane = next((ax for ax in order if fits(ax, (8,)) and self.full_shape[ax] >= 256 and pad(ax, (32,), waste=32)),
                  None)
      if lane is None and not any(fits(ax, (16,)) for ax in order):
        lane = next((ax for ax in order if fits(ax, (8,)) and pad(ax, (16,), waste=16)), None)
    else: lane = next((ax for ax in order if pad(ax, (32,), waste=32) or pad(ax, (16, 8, 4))), None)
    if lane is None or lane == last: return
    vec = [st for st in self._loads_full() if st.index_strides()[lane] == 1]
    tile = next((ax for ax in reversed(range(self.first_reduce)) if ax != lane
                 and any(st.index_strides()[ax] == 0 for st in vec)), None)
    if tile is not None and self.full_shape[tile] > 8 and not fits(tile, (8, 4)): pad(tile, (8, 4))

  # ***** cache blocking (BLOCK) *****
  def _apply_block(self, opt: Opt) -> None:
    ax, amt = opt.axis, opt.amount
    if not 0 <= ax < self.first_reduce: raise ValueError(f"{opt}: BLOCK needs an output axis, not {ax}")
    if self.upcasted or self.unrolled or self.locals_ or self.grouped or self.lane is not None:
      raise ValueError(f"{opt}: BLOCK comes before the other actions (PADTO aside)")
    size = self.full_shape[ax]
    if amt < 2 or size % amt or amt == size: raise ValueError(f"{opt}: axis size {size} is not a multiple of {amt}")
    new_full = self.full_shape[:ax] + (size // amt, amt) + self.full_shape[ax + 1:]
    self._reshape(new_full, tuple(s if j < self.first_reduce + 1 else 1 for j, s in enumerate(new_full)))
    self.first_reduce += 1
    self._split_pads(ax, amt)
    # the block index moves to the front: axes before it shift in by one
    perm = (ax,) + tuple(i for i in range(self.shape_len) if i != ax)
    self._permute(perm)
    where = {old: new for new, old in enumerate(perm)}
    self.pads = [(tuple((where[a], c) for a, c in t), lim, g) for t, lim, g in self.pads]

  def _block_for_cache(self, l2_bytes: int = 2 << 20) -> None:
    """Heuristic: a matmul whose B (the input walked along the lane axis and strided along the reduce) is over
    twice the L2 size gets its lane axis blocked, so that one block of B (reduce size x block) is about L2's size.
    (Measured on 2048x2048: blocks of 256 columns 18 -> 65 GFLOPS; 1024x1024 gains nothing, so it is left alone.)"""
    if not 0 < self.first_reduce < self.shape_len or self.first_reduce < 2 or self._windowed(): return
    last = self.shape_len - 1
    red = prod(self.full_shape[self.first_reduce:])
    for ax in reversed(range(self.first_reduce)):
      size = self.full_shape[ax]
      walk = [st for st in self._loads_full()
              if st.index_strides()[ax] == 1 and (st.index_strides()[last] or 0) >= size]
      if not walk or not self._lane_ok(ax): continue
      item = max(u.dtype.itemsize for u, st in self.sts.items() if u.op is Ops.LOAD and st in walk)
      if red * size * item <= 2 * l2_bytes: return
      blk = 32
      while blk * 2 * red * item <= l2_bytes and size % (blk * 2) == 0: blk *= 2
      if blk < size and size % blk == 0: self.apply_opt(Opt("BLOCK", ax, blk))
      return

  def _pad_for_locals(self) -> None:
    """GPU heuristic: an odd innermost output axis (1001) gets no work-group split at all; pad it to a multiple of
    32 (16, 8) when that adds at most a quarter more threads, and the padded threads store nothing."""
    if self.first_reduce == 0 or self.locals_ or self.grouped: return
    ax = self.first_reduce - 1
    size = self.full_shape[ax]
    if size.__class__ is not int or size < 32 or any(size % a == 0 for a in (32, 16, 8)): return  # type: ignore[operator]
    for a in (32, 16, 8):
      if (-(-size // a) * a - size) * 4 <= size:
        try: self.apply_opt(Opt("PADTO", ax, a))
        except ValueError: continue
        return

  def _windowed(self) -> bool:
    """Some load indexes an axis through a mask or a window (a conv, a stack): the padding and blocking heuristics
    leave those kernels to the window heuristics."""
    return any(None in st.index_strides() for st in self._loads_full())

  def _wide_tile(self, plan: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Heuristic: a float32 matmul tile of 8 rows x 16 lanes grows to 8 x 32 (16 accumulators of AVX-512's 32
    registers, half the loads of A per FMA): 1024x1024 28 -> 60 GFLOPS here."""
    lanes = [p for p in plan if p[0] == "LANES" and p[2] == 16]
    if len(lanes) != 1 or self.full_shape[lanes[0][1]] % 32: return []
    if any(u.dtype.itemsize > 4 for u in self.sts if u.op is Ops.LOAD): return []
    tall = [p for p in plan if p[0] == "UPCAST" and p[2] == 8 and p[1] < self.first_reduce]
    if len(tall) == 1 and len(plan) == 2: return [("UPCAST", lanes[0][1], 2)]
    # a convolution with its window unrolled and at most 8 accumulators: two vectors along the lane axis share
    # every broadcast operand (the sums go into the accumulators one product at a time, see linearize): 3x3 conv
    # forward and input gradient on 32x32 images 3.5 -> 2.7 and 4.1 -> 2.7 ms
    ups = [p[2] for p in plan if p[0] == "UPCAST"]
    if any(p[0] == "UNROLL" for p in plan) and ups and prod(ups) <= 8: return [("UPCAST", lanes[0][1], 2)]
    return []

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
    self._split_pads(ax, size // amt if top else amt)
    self._shift_gpu_axes(ax)
    (self.locals_ if opt.op == "LOCAL" else self.grouped).append(ax if top else ax + 1)

  def _tc_plan(self) -> TensorCore:
    """The axes a TC action would tile (before splitting them), or a ValueError saying why the kernel can't."""
    reduces = [u for u in self.ast.toposort() if u.op is Ops.REDUCE_AXIS]
    if len(reduces) != 1 or reduces[0].arg[0] is not Ops.ADD or reduces[0].src[0].op is not Ops.MUL:
      raise ValueError("TC: the kernel is not one sum of products")
    if self.first_reduce != self.shape_len - 1: raise ValueError(f"TC: needs one reduce axis, shape {self.full_shape}")
    mul = reduces[0].src[0]
    if (dt := tc_input_dtype(mul)) not in self.tensor_cores:
      raise ValueError(f"TC: no tensor cores for {dt} on this target (it has {list(self.tensor_cores)})")
    def strides(x: UOp, ax: int) -> list[int | None]:
      return [self.sts[u].index_strides()[ax] for u in x.toposort() if u.op is Ops.LOAD]
    (tm, tn, tk), kx = TensorCore.dims, self.shape_len - 1
    if self.full_shape[kx] % tk: raise ValueError(f"TC: reduce size {self.full_shape[kx]} is not a multiple of {tk}")
    for swap in (False, True):
      a, b = mul.src[::-1] if swap else mul.src
      sa = {ax: strides(a, ax) for ax in range(self.first_reduce)}
      sb = {ax: strides(b, ax) for ax in range(self.first_reduce)}
      # A varies along m and not n; B along n and not m; the innermost such axes that fit the tile
      ms = [ax for ax in range(self.first_reduce) if self.full_shape[ax] % tm == 0 and all(s == 0 for s in sb[ax])
            and any(s for s in sa[ax]) and None not in sa[ax]]
      ns = [ax for ax in range(self.first_reduce) if self.full_shape[ax] % tn == 0 and all(s == 0 for s in sa[ax])
            and any(s for s in sb[ax]) and None not in sb[ax]]
      if ms and ns: return TensorCore(ms[-1], ns[-1], kx, dt, swap)
    raise ValueError(f"TC: no output axes of shape {self.full_shape} fit {tm}x{tn} tiles of a matmul")

  def _apply_tc(self, opt: Opt) -> None:
    """Split m, n and k so that their inner parts are one warp's 16x8x16 tile (the lowerer maps them onto lanes)."""
    if self.applied: raise ValueError(f"{opt}: TC must be the first action, not after {self.applied}")
    plan = self._tc_plan()
    sizes = dict(zip((plan.m, plan.n, plan.k), TensorCore.dims))
    inner: dict[int, int] = {}
    for ax in sorted(sizes, reverse=True):  # the highest axis first: lower axes keep their indices
      size, amt = self.full_shape[ax], sizes[ax]
      new_full = self.full_shape[:ax] + (size // amt, amt) + self.full_shape[ax + 1:]
      fr = self.first_reduce + (0 if ax >= self.first_reduce else 1)
      self._reshape(new_full, tuple(s if j < fr else 1 for j, s in enumerate(new_full)))
      self.first_reduce = fr
      inner = {a + 1 if a > ax else a: v for a, v in inner.items()}
      inner[ax + 1] = ax
    by_orig = {v: a for a, v in inner.items()}
    self.tc = TensorCore(by_orig[plan.m], by_orig[plan.n], by_orig[plan.k], plan.dtype, plan.swap)

  def gpu_optimizations(self, local_max: int = 256) -> None:
    """A simple heuristic for GPU renderers: a half/bfloat16 matmul whose sizes are multiples of the tile runs on
    tensor cores (TC) where the target has them; reductions with few outputs split each reduce across a work-group
    (GROUPTOP); everything else puts up to `local_max` neighbouring outputs into one work-group (LOCAL)."""
    if NOOPT: return
    if self.tensor_cores and not is_symbolic(self.full_shape):
      try: self._tc_plan()
      except ValueError: pass
      else:
        self.apply_opt(Opt("TC", 0, 0))
        # each warp does up to 2x4 tiles: one A fragment serves 4 n-tiles, one B fragment 2 m-tiles
        assert self.tc is not None
        for which, amts in (("n", (4, 2)), ("m", (2,))):
          outer = getattr(self.tc, which) - 1  # the tile's axis is the inner part of a split axis
          if (amt := next((a for a in amts if self.full_shape[outer] % a == 0), 0)):
            self.apply_opt(Opt("UPCAST", outer, amt))
        if DEBUG >= 3: print(f"opts: {self.applied} full_shape={self.full_shape}")
        return
    out_size = sym_max(prod(self.full_shape[:self.first_reduce]))
    if self.first_reduce < self.shape_len and out_size <= 2048 and not self.gathers:
      ax = self.shape_len - 1  # the innermost reduce axis
      amt = next((a for a in (256, 128, 64, 32, 16) if a <= local_max and self.full_shape[ax] % a == 0
                  and self.full_shape[ax] >= 4 * a), 0)
      if amt:
        self.apply_opt(Opt("GROUPTOP", ax, amt))
        return
    self._pad_for_locals()
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
    4. big kernels split across CPU threads on the outermost axis.
    A kernel over symbolic sizes only gets the threads (its loop bounds are not known until it runs)."""
    if NOOPT: return
    if is_symbolic(self.full_shape):
      if self.first_reduce > 0 and sym_max(prod(self.full_shape)) >= 32768: self.apply_opt(Opt("THREAD", 0, 0))
      return
    if 0 < self.first_reduce < self.shape_len:
      self._pad_odd_axes()
      self._block_for_cache()
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
        amts: list[tuple[int, ...]] = [(4, 2), (4, 2)] if lane[0] == "RLANES" else [(8, 6, 5, 4, 3, 2)]
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
      plan += self._wide_tile(plan)
      if self.gathers: plan = [p for p in plan if p[1] < self.first_reduce]  # reduce axes stay whole: see `gathers`
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

def _pad_view(st: ShapeTracker, ax: int, new: int) -> ShapeTracker:
  """The view with axis `ax` lengthened to `new`, walking on with the same stride (the kernel masks the extra
  positions, so their addresses are never used); a partial mask on the axis keeps its bounds."""
  v = st.views[-1]
  mask = None
  if v.mask is not None:
    mask = tuple(((0, new) if m == (0, v.shape[ax]) else m) if i == ax else m for i, m in enumerate(v.mask))
  nv = View.create(v.shape[:ax] + (new,) + v.shape[ax + 1:], v.strides, v.offset, mask)
  return ShapeTracker(st.views[:-1] + (nv,))

_ZERO_KEEPING = {Ops.ADD, Ops.SUB, Ops.MAX, Ops.NEG, Ops.CAST, Ops.BITCAST, Ops.SQRT, Ops.SIN, Ops.TRUNC, Ops.OR,
                 Ops.XOR}

def _zero_at_pad(u: UOp, gated: set[UOp], memo: dict[UOp, bool]) -> bool:
  """Is u provably 0 at a padded position, where the loads (and masked constants) in `gated` read 0?"""
  if u in memo: return memo[u]
  if u in gated: r = True
  elif u.op is Ops.CONST: r = not u.src and u.arg == 0
  elif u.op in (Ops.MUL, Ops.AND): r = any(_zero_at_pad(s, gated, memo) for s in u.src)
  elif u.op is Ops.FDIV: r = _zero_at_pad(u.src[0], gated, memo) and u.src[1].op is Ops.CONST and u.src[1].arg != 0
  elif u.op is Ops.WHERE: r = all(_zero_at_pad(s, gated, memo) for s in u.src[1:])
  elif u.op in _ZERO_KEEPING: r = all(_zero_at_pad(s, gated, memo) for s in u.src)
  else: r = False
  memo[u] = r
  return r
