"""Fusion rewrites applied to a graph before it is cut into kernels, as one rule table (pm_fusion): a permute or
shrink of a reduce's result is pushed into the reduce's input, so the reduce fuses with the kernel that reads it
(a kernel's loop space is its reduce's output, which it can read straight or through reshapes only); a reduce of a
reduce of the same op is one reduce; a pad of nothing is zeros."""
from __future__ import annotations
from attograd.dtype import dtypes
from attograd.helpers import prod
from attograd.uop import build
from attograd.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite

# the movement ops pushed down, and the ops they are pushed through (elementwise ops don't care about the order in
# which their elements are computed; a BITCAST to another size changes the last dim's length, so it stops)
_PUSHED = (Ops.PERMUTE, Ops.SHRINK)
_THROUGH = (GroupOp.Elementwise - {Ops.BITCAST}) | {Ops.RESHAPE}

class Fusion:
  """The rules' context, for one round over one graph: how many nodes (or outputs) read each node, the reduces a
  pushed view can reach (read by that view's path alone: a reduce read elsewhere has a buffer of its own anyway, and
  pushing would compute it twice), and the nodes the rules made (each stands for the node it replaced)."""
  def __init__(self, outs: list[UOp], topo: list[UOp], made: set[UOp]):
    self.made = made
    self.users: dict[UOp, int] = {}
    for o in outs: self.users[o] = self.users.get(o, 0) + 1
    for u in topo:
      for s in u.src: self.users[s] = self.users.get(s, 0) + 1
    self.reaches: dict[UOp, bool] = {}
    for u in topo:  # sources first: each node's answer from its sources'
      if self.users.get(u, 0) != 1: self.reaches[u] = False
      elif u.op is Ops.REDUCE_AXIS: self.reaches[u] = True
      elif u.op in _THROUGH and (u.op is not Ops.RESHAPE or _squeeze_map(u) is not None):
        self.reaches[u] = any(self.reaches.get(s, False) for s in u.src)
      elif u.op in _PUSHED: self.reaches[u] = self.reaches.get(u.src[0], False)
      else: self.reaches[u] = False

  def pushable(self, x: UOp) -> bool: return self.reaches.get(x, False)

def _squeeze_map(r: UOp) -> list[int] | None:
  """For a RESHAPE that only adds or removes size-1 dims: for each dim of its input larger than 1, the dim of its
  output it becomes. None for any other reshape."""
  ins, outs = r.src[0].shape, r.shape
  big_in = [i for i, s in enumerate(ins) if s != 1]
  big_out = [i for i, s in enumerate(outs) if s != 1]
  if len(big_in) != len(big_out) or any(ins[i] != outs[o] for i, o in zip(big_in, big_out)): return None
  return big_out

def _made(ctx: Fusion, u: UOp) -> UOp:
  ctx.made.add(u)
  return u

def permute_reduce_rule(ctx: Fusion, m: UOp, r: UOp) -> UOp | None:
  """PERMUTE(REDUCE(x)) -> REDUCE(PERMUTE(x)): the reduced dims are 1 in the output, so the same permutation of the
  input, with the reduced axes renumbered, gives the same values."""
  if not ctx.pushable(r): return None
  axes = tuple(sorted(m.arg.index(a) for a in r.arg[1]))
  x = UOp(Ops.PERMUTE, r.src[0].dtype, (r.src[0],), m.arg)
  return _made(ctx, UOp(Ops.REDUCE_AXIS, r.dtype, (x,), (r.arg[0], axes)))

def shrink_reduce_rule(ctx: Fusion, m: UOp, r: UOp) -> UOp | None:
  """SHRINK(REDUCE(x)) -> REDUCE(SHRINK(x)): only the outputs kept are computed (a reduced dim is 1, so its range is
  the whole input dim)."""
  if not ctx.pushable(r): return None
  x = r.src[0]
  arg = tuple((0, x.shape[i]) if i in r.arg[1] else be for i, be in enumerate(m.arg))
  return _made(ctx, UOp(Ops.REDUCE_AXIS, r.dtype, (UOp(Ops.SHRINK, x.dtype, (x,), arg),), r.arg))

def through_elementwise_rule(ctx: Fusion, m: UOp, e: UOp) -> UOp | None:
  """A permute or shrink of an elementwise op is the op of its sources' permutes or shrinks (each source has the op's
  shape), on the way to a reduce below."""
  if not ctx.pushable(e) or any(s.shape != e.shape for s in e.src): return None
  return _made(ctx, UOp(e.op, m.dtype, tuple(UOp(m.op, s.dtype, (s,), m.arg) for s in e.src), e.arg))

def through_squeeze_rule(ctx: Fusion, m: UOp, r: UOp) -> UOp | None:
  """A permute or shrink of a reshape that only adds or drops size-1 dims (a sum without keepdim) is that reshape of
  the same permute or shrink of its input, on the way to a reduce below."""
  if not ctx.pushable(r) or (to := _squeeze_map(r)) is None: return None
  x = r.src[0]
  big = [i for i, s in enumerate(x.shape) if s != 1]  # big[k] becomes output dim to[k]
  if m.op is Ops.PERMUTE:
    # the input's big dims in the order the permute puts their output dims; the size-1 dims stay where they are
    order = sorted(range(len(big)), key=lambda k: m.arg.index(to[k]))
    perm = list(range(len(x.shape)))
    for slot, k in zip(big, order): perm[slot] = big[k]
    new = UOp(Ops.PERMUTE, x.dtype, (x,), tuple(perm))
  else:
    arg = [(0, s) for s in x.shape]
    for k, i in enumerate(big): arg[i] = m.arg[to[k]]
    new = UOp(Ops.SHRINK, x.dtype, (x,), tuple(arg))
  return _made(ctx, UOp(Ops.RESHAPE, m.dtype, (new,), m.shape))

def pad_of_nothing_rule(ctx: Fusion, p: UOp) -> UOp | None:
  """A pad of a node without elements is all padding, zeros: the node is never read (a zero-size slice of a reduce
  then leaves the reduce one reader fewer, free to fuse with the other)."""
  if (n := prod(p.src[0].shape)).__class__ is not int or n != 0: return None
  return _made(ctx, build.zeros_like(p))

def _merge_reduces(ctx: Fusion, outer: UOp, inner: UOp, m: UOp | None) -> UOp | None:
  """REDUCE(REDUCE(x)) of one op (through a reshape that only adds or drops size-1 dims, as a sum without keepdim
  leaves it) is one REDUCE of x over both sets of axes: x.sum(1).sum(0) is x.sum((0, 1)), one kernel."""
  op = outer.arg[0]
  if inner.arg[0] is not op or op not in (Ops.ADD, Ops.MAX, Ops.MUL) or inner.dtype != outer.dtype or \
     ctx.users.get(inner) != 1 or (m is not None and ctx.users.get(m) != 1):
    return None
  axes = set(inner.arg[1])
  if m is None: axes |= set(outer.arg[1])
  else:
    if (to := _squeeze_map(m)) is None: return None
    big = [i for i, s in enumerate(inner.shape) if s != 1]  # big[k] becomes m's dim to[k]
    axes |= {big[k] for k, d in enumerate(to) if d in outer.arg[1]}
  merged = UOp(Ops.REDUCE_AXIS, outer.dtype, (inner.src[0],), (op, tuple(sorted(axes))))
  if merged.shape != outer.shape: merged = UOp(Ops.RESHAPE, outer.dtype, (merged,), outer.shape)
  return _made(ctx, merged)

def reduce_of_reduce_rule(ctx: Fusion, outer: UOp, inner: UOp) -> UOp | None:
  return _merge_reduces(ctx, outer, inner, None)

def reduce_of_squeezed_reduce_rule(ctx: Fusion, outer: UOp, m: UOp, inner: UOp) -> UOp | None:
  return _merge_reduces(ctx, outer, inner, m)

pm_fusion = PatternMatcher([
  (UPat(Ops.PAD, name="p"), pad_of_nothing_rule),
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.REDUCE_AXIS, name="inner"),), name="outer"), reduce_of_reduce_rule),
  (UPat(Ops.REDUCE_AXIS, src=(UPat(Ops.RESHAPE, src=(UPat(Ops.REDUCE_AXIS, name="inner"),), name="m"),), name="outer"),
   reduce_of_squeezed_reduce_rule),
  (UPat(Ops.PERMUTE, src=(UPat(Ops.REDUCE_AXIS, name="r"),), name="m"), permute_reduce_rule),
  (UPat(Ops.SHRINK, src=(UPat(Ops.REDUCE_AXIS, name="r"),), name="m"), shrink_reduce_rule),
  (UPat(_PUSHED, src=(UPat(Ops.RESHAPE, name="r"),), name="m"), through_squeeze_rule),
  (UPat(_PUSHED, src=(UPat(_THROUGH - {Ops.RESHAPE}, name="e"),), name="m"), through_elementwise_rule),
])

def _may_fire(ctx: Fusion, u: UOp) -> bool:
  """Whether a rule may match at u (a quick test on the graph, so that a graph none of them fits isn't rewritten)."""
  if u.op in _PUSHED: return ctx.pushable(u.src[0])
  if u.op is Ops.PAD: return (n := prod(u.src[0].shape)).__class__ is int and n == 0
  if u.op is not Ops.REDUCE_AXIS: return False
  x = u.src[0].src[0] if u.src[0].op is Ops.RESHAPE else u.src[0]
  return x.op is Ops.REDUCE_AXIS and x.arg[0] is u.arg[0]

_MAX_ROUNDS = 16  # each round pushes every view one step past what the last round's rewrites made; bounded anyway

def fuse_graph(outs: list[UOp], topo: list[UOp]) -> tuple[list[UOp], list[UOp], dict[UOp, UOp]]:
  """`outs` with pm_fusion applied until nothing matches, their graph's nodes (sources first), and for each rebuilt
  node the node of the given graph it stands for. A round's context (who reads what) is of the graph as that round
  found it."""
  made: set[UOp] = set()
  old = sink = UOp(Ops.SINK, dtypes.void, tuple(outs))
  for _ in range(_MAX_ROUNDS):
    ctx = Fusion(list(sink.src), topo, made)
    if not any(_may_fire(ctx, u) for u in topo): break
    if (new := graph_rewrite(sink, pm_fusion, ctx)) is sink: break
    sink, topo = new, list(new.toposort())[:-1]
  if sink is old: return outs, topo, {}
  return list(sink.src), topo, _correspondence(old, sink, made)

def _correspondence(old: UOp, new: UOp, made: set[UOp]) -> dict[UOp, UOp]:
  """new node -> old node of the same value, walking both graphs from the outputs: a node a rule made stands for the
  node it replaced; a node rebuilt over rewritten sources has its old node's op and arg (no rule's result has the op
  of the node it replaced, so an op that differs is a rule's result rewritten again: not followed)."""
  back: dict[UOp, UOp] = {}
  stack = [(old, new)]
  while stack:
    o, n = stack.pop()
    if o is n or n in back: continue
    if n in made: back[n] = o
    elif n.op is o.op and n.arg == o.arg and len(n.src) == len(o.src):
      back[n] = o
      stack.extend(zip(o.src, n.src))
  return back
