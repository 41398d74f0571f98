"""Kernel tuning the scheduler applies to a graph before cutting it into kernels, as rule tables: which work runs as
more than one kernel so that every kernel keeps the cores and vector lanes busy. The Tensor API builds the plain
graph; these rules decide how it runs."""
from __future__ import annotations
import functools, os
from attograd.device import Device
from attograd.dtype import dtypes
from attograd.helpers import prod
from attograd.uop import build
from attograd.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite

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

def split_reduce_rule(ctx: set[UOp], r: UOp) -> UOp | None:
  """A long reduce to fewer than split_max_outputs outputs: the first stage reduces to `split` partial values per
  output (enough rows to thread over), the second reduces those. The result has `r`'s shape again."""
  if r in ctx: return None  # a stage made here: split once
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
  ctx.update((first, second))
  return build.reshape(second, r.shape)

pm_split_reduce = PatternMatcher([(UPat(Ops.REDUCE_AXIS, name="r"), split_reduce_rule)])

# ***** the passes, in order *****

def tune_graph(outs: list[UOp], topo: list[UOp]) -> tuple[list[UOp], dict[UOp, UOp]]:
  """`outs` with the tuning rules applied, and for each rebuilt node the node of `outs`' graph it stands for (the
  second stage of a split reduce stands for the reduce: the same values, without the size-1 dims)."""
  if not any(u.op is Ops.REDUCE_AXIS and split_reduce_rule(set(), u) is not None for u in topo): return outs, {}
  sink, stages = UOp(Ops.SINK, dtypes.void, tuple(outs)), set[UOp]()
  new = graph_rewrite(sink, pm_split_reduce, stages)
  return list(new.src), _correspondence(sink, new, stages)

def _correspondence(old: UOp, new: UOp, stages: set[UOp]) -> dict[UOp, UOp]:
  """new node -> old node, walking both graphs together: a rebuilt node has its old node's op and arg over the
  rebuilt sources, and a split reduce became its second stage (reshaped where the shapes differ). The nodes below a
  split (its input, rebuilt when another split is under it) are not followed: they map to nothing."""
  back: dict[UOp, UOp] = {}
  stack = [(old, new)]
  while stack:
    o, n = stack.pop()
    if o is n or n in back: continue
    back[n] = o
    if (second := n.src[0] if n.op is Ops.RESHAPE and o.op is not Ops.RESHAPE else n) in stages:
      back[second] = o
      continue
    stack.extend(zip(o.src, n.src))
  return back
