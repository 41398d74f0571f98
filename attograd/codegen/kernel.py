"""A kernel's loop space: the full shape, which axes reduce, every load's view over it, and the optimizer's actions
(Opt: UPCAST, UNROLL, LANES, THREAD, LOCAL, GROUP, PADTO, BLOCK, TC) that reshape that space before lowering. Which
actions to take is decided elsewhere: heuristic.py by default, opt/search.py under BEAM."""
from __future__ import annotations
from dataclasses import dataclass, field
from attograd.codegen.tc import TensorCore, apply_tc
from attograd.dtype import DType, dtypes
from attograd.helpers import prod
from attograd.uop.ops import Ops, UOp, sym_max
from attograd.uop.view import ShapeTracker, View, smul

@dataclass(frozen=True)
class Opt:
  """One action on an axis: UPCAST (unroll an output axis), UNROLL (unroll a reduce axis), LANES / RLANES (the same,
  and the unrolled axis becomes the lanes of vector registers), THREAD (run across cores).
  GPU only: LOCAL (split an output axis across a work-group's threads), GROUP / GROUPTOP (split a reduce axis across
  a work-group's threads, strided / in contiguous chunks, combined through local memory after a barrier).
  TC (GPUs with tensor cores; axis and amount unused): a half/bfloat16 matmul runs as 16x8x16 warp tiles.
  PADTO rounds an axis up to a multiple of `amount` (so it splits evenly); the padded positions are masked out.
  BLOCK splits an output axis into blocks of `amount` and runs the block loop outermost (cache blocking: a matmul
  walks one block of B's columns for every row before moving on, so that block stays in L2).
  KBLOCK splits the reduce axis of a kernel that stores its sum as it is into blocks of `amount`, and runs the block
  loop outside the output loops but the outermost: each block's partial sums are added to what the output holds from
  the blocks before (a matmul's row of A then stays in L1 while it meets every column of B's block)."""
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
  thread_if: UOp | None = None                          # symbolic sizes: the calls worth the cores (heuristic.py)
  lane: int | None = None                               # the upcast/unrolled axis emitted as vector lanes
  locals_: list[int] = field(default_factory=list)      # GPU: output axes run by the threads of one work-group
  grouped: list[int] = field(default_factory=list)      # GPU: reduce axes split across a work-group's threads
  applied: list[Opt] = field(default_factory=list)
  # what the target offers (set from the renderer): tensor-core input dtypes, and the warp size for shuffles (0: none)
  tensor_cores: tuple[DType, ...] = ()
  warp_size: int = 0
  tc: TensorCore | None = None                          # GPU: the matmul runs on tensor cores (Opt TC)
  # the reduce folds away into loads (a one-hot gather, codegen/lowerer.py pm_gather_fold): its axes are left whole,
  # since an unrolled or work-group-split reduce axis no longer matches the rule and would loop over every row.
  # Set by lowerer.new_kernel, which lowers the kernel once to find out (the loop space knows nothing of lowering)
  gathers: bool = False
  # PADTO masks: (terms, limit, gated) means sum(coef * index of axis) < limit must hold for the loads, masked
  # constants and stores in `gated` to touch memory (the rest of the padded positions read or store nothing)
  pads: list[tuple[tuple[tuple[int, int], ...], int, frozenset[UOp]]] = field(default_factory=list)
  # KBLOCK: the output axis that loops over the reduce's blocks (the output's view is constant along it)
  kblock: int | None = None

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
  def first_loop(self) -> int:
    """The outermost axis that stays a loop (not of size 1, not unrolled, not the KBLOCK loop): where THREAD runs the
    kernel across cores; -1 when there is none."""
    return next((i for i, s in enumerate(self.full_shape)
                 if s != 1 and i not in self.upcasted and i != self.kblock), -1)
  @property
  def output_shape(self) -> tuple[int, ...]:
    return tuple(s if i < self.first_reduce else 1 for i, s in enumerate(self.full_shape))
  def _is_full(self, st: ShapeTracker) -> bool: return st.shape == self.full_shape
  def load_strides(self, ax: int) -> list[int | None]:
    """The stride of every full-shape load along an axis (None where a mask or a second view gets in the way)."""
    return [st.index_strides()[ax] for st in self.full_loads()]
  def store_strides(self, ax: int) -> list[int | None]:
    return [st.index_strides()[ax] for u, st in self.sts.items() if u.op is Ops.STORE]
  def full_loads(self) -> list[ShapeTracker]:
    return [st for u, st in self.sts.items() if u.op is Ops.LOAD and self._is_full(st)]
  def _permute(self, perm: tuple[int, ...]) -> None:
    self.sts = {u: st.permute(perm) for u, st in self.sts.items()}
    self.full_shape = tuple(self.full_shape[i] for i in perm)
  def _reshape(self, new_full: tuple[int, ...], new_out: tuple[int, ...]) -> None:
    full, out = self.full_shape, self.output_shape
    self.sts = {u: st.reshape(new_full if st.shape == full else new_out) if st.shape in (full, out) else st
                for u, st in self.sts.items()}
    self.full_shape = new_full

  def split_axis(self, ax: int, outer: int, inner: int) -> None:
    """Axis ax becomes two neighbouring axes (outer, inner) of the same kind (output or reduce); every view follows.
    The actions' bookkeeping (which axes are upcast, local, padded...) is theirs to shift."""
    fr = self.first_reduce + (0 if ax >= self.first_reduce else 1)
    new_full = self.full_shape[:ax] + (outer, inner) + self.full_shape[ax + 1:]
    self._reshape(new_full, tuple(s if j < fr else 1 for j, s in enumerate(new_full)))
    self.first_reduce = fr

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
        new_full = self.full_shape[:i] + (smul(self.full_shape[i], self.full_shape[i + 1]),) + self.full_shape[i + 2:]
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
      if sh[i] != 1 and sh[i + 1] != 1 and stv[i] != smul(stv[i + 1], sh[i + 1]): return False
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
      if ax == self.kblock: raise ValueError(f"{opt}: axis {ax} loops over the reduce's blocks (KBLOCK)")
      # split the axis into (size/amt, amt); the new inner axis is unrolled
      is_reduce = ax >= self.first_reduce
      self.split_axis(ax, size // amt, amt)
      self.upcasted = [a + 1 if a > ax else a for a in self.upcasted]
      self.unrolled = [a + 1 if a > ax else a for a in self.unrolled]
      if self.lane is not None and self.lane > ax: self.lane += 1
      if self.kblock is not None and self.kblock > ax: self.kblock += 1
      self._split_pads(ax, amt)
      (self.unrolled if is_reduce else self.upcasted).append(ax + 1)
      if opt.op in ("LANES", "RLANES"): self.lane = ax + 1
      if self.locals_ or self.grouped: self._shift_gpu_axes(ax)
      if self.tc is not None: self.tc = self.tc.shifted(ax)
    elif opt.op == "THREAD": self.parallel = True
    elif opt.op in ("LOCAL", "GROUP", "GROUPTOP"): self._apply_gpu_opt(opt)
    elif opt.op == "TC": apply_tc(self, opt)
    elif opt.op == "PADTO": self._apply_padto(opt)
    elif opt.op == "BLOCK": self._apply_block(opt)
    elif opt.op == "KBLOCK": self._apply_kblock(opt)
    else: raise ValueError(f"unknown opt {opt}")
    self.applied.append(opt)

  # ***** padding (PADTO) *****
  # The rule for a padded axis: its extra positions are masked, so every load, masked constant and store that walks
  # the axis reads 0 there (and reads no memory), and stores nothing. An output axis may always be padded (padded
  # outputs are computed from zeros and thrown away), unless the kernel divides integers by a value that could then
  # be 0. A reduce axis may be padded only for a sum whose summand is provably 0 when those loads are 0 (see
  # _zero_at_pad): x*y, x+y, -x, casts, sqrt, where(c, x, y) with both sides 0... but not exp(x) or x < y.
  def _apply_padto(self, opt: Opt) -> None:
    ax, amt = opt.axis, opt.amount
    if not 0 <= ax < self.shape_len: raise ValueError(f"{opt}: axis {ax} out of range for shape {self.full_shape}")
    if ax in self.upcasted + self.unrolled + self.locals_ + self.grouped or ax == self.kblock:
      raise ValueError(f"{opt}: axis {ax} is already upcast, unrolled, local, grouped or reduce blocks")
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


  # ***** cache blocking (BLOCK) *****
  def _apply_block(self, opt: Opt) -> None:
    ax, amt = opt.axis, opt.amount
    if not 0 <= ax < self.first_reduce: raise ValueError(f"{opt}: BLOCK needs an output axis, not {ax}")
    if self.upcasted or self.unrolled or self.locals_ or self.grouped or self.lane is not None or \
       self.kblock is not None:
      raise ValueError(f"{opt}: BLOCK comes before the other actions (PADTO aside)")
    size = self.full_shape[ax]
    if amt < 2 or size % amt or amt == size: raise ValueError(f"{opt}: axis size {size} is not a multiple of {amt}")
    self.split_axis(ax, size // amt, amt)
    self._split_pads(ax, amt)
    # the block index moves to the front: axes before it shift in by one
    perm = (ax,) + tuple(i for i in range(self.shape_len) if i != ax)
    self._permute(perm)
    where = {old: new for new, old in enumerate(perm)}
    self.pads = [(tuple((where[a], c) for a, c in t), lim, g) for t, lim, g in self.pads]

  # ***** reduce blocking (KBLOCK) *****
  def kblock_unfit(self) -> str:
    """Why this kernel's reduce can't be split into blocks summed through its output (KBLOCK), or "" if it can."""
    stores = [u for u in self.ast.src if u.op is Ops.STORE]
    reduces = [u for u in self.ast.toposort() if u.op is Ops.REDUCE_AXIS]
    if len(self.ast.src) != 1 or len(stores) != 1 or len(reduces) != 1 or stores[0].src[2] is not reduces[0] or \
       reduces[0].arg[0] is not Ops.ADD or reduces[0].dtype not in (dtypes.float32, dtypes.float64):
      return "KBLOCK needs a kernel that stores one float sum as it is"
    if any(u.op is Ops.LOAD and u.src[0] is stores[0].src[0] for u in self.sts): return "the kernel reads its output"
    return ""

  def _apply_kblock(self, opt: Opt) -> None:
    """Split reduce axis `ax` into (blocks, amount) and move the block axis among the output axes, second: the
    outermost output axis (a BLOCK's block axis, if any) stays the loop that threads split, so that each thread adds
    to its own outputs, in one parallel region (a parallel loop inside the blocks' loop woke the other cores once per
    block: 2048x2048x128 on 2 busy cores 59 -> 7 GFLOPS). The output's view is constant along it: every block stores
    the full output, its sums added to the blocks' before (lowerer.lower_reduce_rule).
    Only for a kernel that stores one float sum as it is (no op after the reduce: the blocks' partial sums would go
    through it) into a buffer it doesn't read."""
    ax, amt = opt.axis, opt.amount
    if not self.first_reduce <= ax < self.shape_len or self.first_reduce == 0:
      raise ValueError(f"{opt}: KBLOCK needs a reduce axis of a kernel with output axes, not {ax}")
    if self.upcasted or self.unrolled or self.locals_ or self.grouped or self.lane is not None or self.tc is not None \
       or self.kblock is not None or self.parallel:
      raise ValueError(f"{opt}: KBLOCK comes before the other actions (PADTO and BLOCK aside)")
    if (why := self.kblock_unfit()): raise ValueError(f"{opt}: {why}")
    size = self.full_shape[ax]
    if amt < 2 or size % amt or amt == size: raise ValueError(f"{opt}: axis size {size} is not a multiple of {amt}")
    pos = 1
    self.split_axis(ax, size // amt, amt)
    self._split_pads(ax, amt)
    perm = tuple(range(pos)) + (ax,) + tuple(i for i in range(pos, self.shape_len) if i != ax)
    self._permute(perm)
    self.first_reduce += 1
    out = self.output_shape
    self.sts = {u: st.expand(out) if st.shape[pos] == 1 and st.shape != self.full_shape else st
                for u, st in self.sts.items()}
    where = {old: new for new, old in enumerate(perm)}
    self.pads = [(tuple((where[a], c) for a, c in t), lim, g) for t, lim, g in self.pads]
    self.kblock = pos

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
    if self.kblock is not None: raise ValueError(f"{opt}: a kernel with KBLOCK runs on the CPU")
    is_reduce = ax >= self.first_reduce
    if opt.op == "LOCAL" and is_reduce: raise ValueError(f"{opt}: LOCAL needs an output axis, {ax} is a reduce axis")
    if opt.op != "LOCAL":
      if not is_reduce: raise ValueError(f"{opt}: {opt.op} needs a reduce axis, {ax} is an output axis")
      if self.grouped or self.upcasted: raise ValueError(f"{opt}: one GROUP per kernel, and not with UPCAST")
    size = self.full_shape[ax]
    if amt < 1 or size % amt: raise ValueError(f"{opt}: axis size {size} is not divisible by {amt}")
    top = opt.op == "GROUPTOP"  # the work-group part is the outer one: each thread reduces one contiguous chunk
    self.split_axis(ax, *((amt, size // amt) if top else (size // amt, amt)))
    self.upcasted = [a + 1 if a > ax else a for a in self.upcasted]
    self.unrolled = [a + 1 if a > ax else a for a in self.unrolled]
    if self.lane is not None and self.lane > ax: self.lane += 1
    self._split_pads(ax, size // amt if top else amt)
    self._shift_gpu_axes(ax)
    (self.locals_ if opt.op == "LOCAL" else self.grouped).append(ax if top else ax + 1)


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
