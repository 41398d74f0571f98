"""Kernel tuning the scheduler applies to a graph before cutting it into kernels, as one rule table (pm_tuning): which
work runs as more than one kernel so that every kernel keeps the cores and vector lanes busy (a long reduce split in
two stages, a copy of a padded input that windows read). The Tensor API builds the plain graph; these rules decide
how it runs."""
from __future__ import annotations
import functools, os
from attograd.device import Device
from attograd.dtype import dtypes
from attograd.helpers import prod
from attograd.uop import build
from attograd.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite
from attograd.uop.view import ShapeTracker

# ***** a long reduce to few outputs runs in two stages *****

SPLIT_MIN_REDUCE = 65536  # elements reduced per output, at least: shorter reduces are over before threads pay off

@functools.cache
def split_max_outputs(device: str) -> int:
  """A reduce to fewer outputs than this is split. A CPU kernel threads over its outputs, so with at least 8 per core
  every core gets a fair share (MNIST's 32-channel batch-norm sums on 2 cores ran as fast unsplit); a GPU gives each
  output a work-group, and fewer than 64 leave most of its compute units idle. A device that runs one thread splits
  nothing."""
  ren = Device[device].renderer
  if ren.has_local: return 64
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
  return 8 * cores if ren.has_threads else 0

def split_reduce_rule(ctx: Tuning, r: UOp) -> UOp | None:
  """A long reduce to fewer than split_max_outputs outputs: the first stage reduces to `split` partial values per
  output (enough rows to thread over), the second reduces those. The result has `r`'s shape again."""
  if r in ctx.made: return None  # a stage made here: split once
  x, (op, axes) = r.src[0], r.arg
  shape = x.shape
  red = prod(shape[a] for a in axes)
  outs = prod(s for i, s in enumerate(shape) if i not in axes)
  # a symbolic count isn't split: how to split it would depend on the Variable's value
  if red.__class__ is not int or outs.__class__ is not int or red < SPLIT_MIN_REDUCE or r.device.__class__ is not str \
     or outs >= split_max_outputs(r.device):
    return None
  # the reduced axes last, then the first of them split into (split, rest)
  perm = tuple(i for i in range(len(shape)) if i not in axes) + axes
  if perm != tuple(range(len(shape))): x = UOp(Ops.PERMUTE, x.dtype, (x,), perm)
  keep, rdims = tuple(shape[i] for i in range(len(shape)) if i not in axes), tuple(shape[a] for a in axes)
  n = len(keep)
  # split the first reduced dim when it can be (the other reduced dims stay as they are: folding (512, 20, 20)
  # into (128, 1600) would make the inner loop's index a chain of divisions that keeps it from vectorizing)
  if (split := next((s for s in range(256, 15, -1) if rdims[0] % s == 0 and red // s >= 1024), 0)):
    x = build.reshape(x, keep + (split, rdims[0] // split) + rdims[1:])
    first = UOp(Ops.REDUCE_AXIS, r.dtype, (x,), (op, tuple(range(n + 1, n + 1 + len(rdims)))))
  elif (split := next((s for s in (256, 128, 64, 32, 16) if red % s == 0 and red // s >= 1024), 0)):
    first = UOp(Ops.REDUCE_AXIS, r.dtype, (build.reshape(x, keep + (split, red // split)),), (op, (n + 1,)))
  else: return None
  second = UOp(Ops.REDUCE_AXIS, r.dtype, (first,), (op, (n,)))
  ctx.made.update((first, second))
  return build.reshape(second, r.shape)

# ***** a big padded input read through overlapping windows gets its own buffer *****

WINDOW_COPY_MIN = 1 << 16  # elements of the unpadded input, at least: below that the copy costs more than it saves

def window_copy_rule(ctx: Tuning, w: UOp, p: UOp) -> UOp | None:
  """A convolution's (or a pooling's) overlapping windows are shifted slices (SHRINKs) of the padded input, one per
  kernel position. Read straight from the input, every load checks the padding's bounds and the kernels can't use
  vector lanes; a copy of the padded input is read with whole rows and no checks (the copy is cheap next to the
  convolution). Every window reads the one copy (the same node: UOps are hash-consed)."""
  if _pad_key(p) not in ctx.windowed: return None
  copy = UOp(Ops.CONTIGUOUS, p.dtype, (p,))
  ctx.made.add(copy)
  return UOp(Ops.SHRINK, w.dtype, (copy,), w.arg)

def _pad_key(p: UOp) -> tuple:
  """A padded node by what it is, not by identity: the rewrite rebuilds a PAD whose sources changed (the gradient's
  padded input, over a forward convolution that got a copy), and the rebuilt node must still be recognized."""
  x = p.src[0]
  return (p.arg, p.dtype, x.op, x.arg, x.dtype, x.shape)

# ***** an operand read across vector lanes with a stride gets a copy laid out along them *****

LANE_COPY_MIN = 1 << 16  # outputs of the reduce, or elements of the copy, at least: below that a copy doesn't pay

def _chain_strides(u: UOp) -> tuple[tuple[int | None, ...], UOp, UOp] | None:
  """The stride along each dim of `u`, a movement chain (through one CAST) over a node whose values are laid out in
  order (a buffer or a computed node, which the kernel reads or recomputes in that order); the node below the chain's
  top EXPAND (the values without their broadcast, what a copy would hold); and the chain's base. None for a symbolic
  shape."""
  top = x = u.src[0] if u.op is Ops.CAST else u
  chain: list[UOp] = []
  while x.op in GroupOp.Movement:
    chain.append(x)
    x = x.src[0]
  if not all(s.__class__ is int for s in (*x.shape, *u.shape)): return None
  st = ShapeTracker.from_shape(x.shape)
  for m in reversed(chain): st = st.apply(m.op, m.arg)
  return st.index_strides(), top.src[0] if top.op is Ops.EXPAND else top, x

def _lane_copy_plan(r: UOp) -> tuple[int, int, UOp, UOp] | None:
  """lane_copy_rule's decision, without building anything: (the lane dim C, which operand, the values to copy, the
  chain's base), or None."""
  if r.arg[0] is not Ops.ADD or (m := r.src[0]).op is not Ops.MUL or len(m.src) != 2: return None
  shape, axes = m.shape, r.arg[1]
  if not all(s.__class__ is int for s in shape): return None
  outs = [i for i in range(len(shape)) if i not in axes and shape[i] > 1]
  reds = [i for i in axes if shape[i] > 1]
  if not outs or not reds: return None
  row, red_row = shape[outs[-1]], shape[reds[-1]]
  if row % 16 == 0 or red_row % 16 == 0 or min(row, red_row) >= 16: return None
  if (a := _chain_strides(m.src[0])) is None or (b := _chain_strides(m.src[1])) is None: return None
  best: tuple[int, int, UOp, UOp] | None = None
  for (p_strides, u, base), (q_strides, _, _), which in ((a, b, 0), (b, a, 1)):
    # of the output dims Q doesn't move along, P moves along C only (its vectors feed the accumulators of the others)
    if len(walked := [c for c in outs if q_strides[c] == 0 and p_strides[c] != 0]) != 1: continue
    cands = [c for c in walked if p_strides[c] not in (None, 1) and shape[c] % 8 == 0]
    if cands and (best is None or prod(u.shape) < prod(best[2].shape)): best = (cands[-1], which, u, base)
  if best is None: return None
  c, n_copy = best[0], prod(best[2].shape)
  if max(prod(shape[i] for i in outs), n_copy) < LANE_COPY_MIN or (n_copy >= LANE_COPY_MIN and shape[c] % 16):
    return None
  return best

def lane_copy_rule(ctx: Tuning, r: UOp) -> UOp | None:
  """A sum of products whose output rows and reduce rows are both too short for 16 vector lanes, one of them shorter
  than 16 (a convolution's 5x5 window over 20-wide output rows, its weight gradient's 20-wide rows of positions): the
  kernel's lanes run over another output dim C instead (the output channel), along which one operand doesn't move
  and the other moves with a stride, a gather per vector. That operand gets a copy with C innermost (its values
  without their broadcast), so every vector is one load. Of several such operands the smallest copy is made (a
  convolution's weight, or its output's gradient; never its windows, which move along the output positions too); a
  big copy pays only with 16 lanes. Once per reduce."""
  if r in ctx.made or (plan := _lane_copy_plan(r)) is None: return None
  c, which, u, base = plan
  m = r.src[0]
  perm = tuple(i for i in range(len(u.shape)) if i != c) + (c,)
  # values cast up for the accumulator (half to float) are copied in their own dtype and cast after the copy
  cast = base if base.op is Ops.CAST and base.src[0].dtype.itemsize < base.dtype.itemsize else None
  v = u.substitute({cast: cast.src[0]}) if cast is not None else u
  copy = UOp(Ops.CONTIGUOUS, v.dtype, (UOp(Ops.PERMUTE, v.dtype, (v,), perm),))
  back = UOp(Ops.PERMUTE, v.dtype, (copy,), tuple(perm.index(i) for i in range(len(perm))))
  ctx.made.add(back)
  if cast is not None: back = UOp(Ops.CAST, u.dtype, (back,))
  operand = build.expand(back, m.shape)
  if (old := m.src[which]).op is Ops.CAST: operand = UOp(Ops.CAST, old.dtype, (operand,))
  srcs = (operand, m.src[1]) if which == 0 else (m.src[0], operand)
  ctx.made.add(new := UOp(Ops.REDUCE_AXIS, r.dtype, (UOp(Ops.MUL, m.dtype, srcs),), r.arg))
  return new

# ***** the pass: one table *****

class Tuning:
  """The rules' context: the nodes they made (a rule fires once on them), and the padded nodes (by _pad_key) that at
  least two windows read, big enough for a copy to pay."""
  def __init__(self, topo: list[UOp]):
    self.made: set[UOp] = set()
    shrinks: dict[UOp, int] = {}
    for u in topo:
      if u.op is Ops.SHRINK and u.src[0].op is Ops.PAD: shrinks[u.src[0]] = shrinks.get(u.src[0], 0) + 1
    self.windowed = {_pad_key(p) for p, k in shrinks.items() if k >= 2 and any(b or a for b, a in p.arg)
                     and (n := prod(p.src[0].shape)).__class__ is int and n >= WINDOW_COPY_MIN}

pm_tuning = PatternMatcher([
  (UPat(Ops.REDUCE_AXIS, name="r"), split_reduce_rule),
  (UPat(Ops.REDUCE_AXIS, name="r"), lane_copy_rule),
  (UPat(Ops.SHRINK, src=(UPat(Ops.PAD, name="p"),), name="w"), window_copy_rule),
])

def tune_graph(outs: list[UOp], topo: list[UOp]) -> tuple[list[UOp], dict[UOp, UOp]]:
  """`outs` with the tuning rules applied, and for each rebuilt node the node of `outs`' graph it stands for (the
  second stage of a split reduce stands for the reduce: the same values, without the size-1 dims; a copy for the
  node copied)."""
  ctx, probe = Tuning(topo), Tuning([])
  if not ctx.windowed and not any(split_reduce_rule(probe, u) is not None or _lane_copy_plan(u) is not None
                                  for u in topo if u.op is Ops.REDUCE_AXIS):
    return outs, {}
  sink = UOp(Ops.SINK, dtypes.void, tuple(outs))
  new = graph_rewrite(sink, pm_tuning, ctx)
  return list(new.src), _correspondence(sink, new, ctx.made)

def _correspondence(old: UOp, new: UOp, made: set[UOp]) -> dict[UOp, UOp]:
  """new node -> old node, walking both graphs together: a rebuilt node has its old node's op and arg over the
  rebuilt sources, a split reduce became its second stage (reshaped where the shapes differ), a copied node its
  copy. The nodes below a split or a copy are not followed (rebuilt when another rule fired under them, they map to
  nothing)."""
  back: dict[UOp, UOp] = {}
  stack = [(old, new)]
  while stack:
    o, n = stack.pop()
    if o is n or n in back: continue
    back[n] = o
    if (second := n.src[0] if n.op is Ops.RESHAPE and o.op is not Ops.RESHAPE else n) in made:
      back[second] = o
      continue
    stack.extend(zip(o.src, n.src))
  return back
