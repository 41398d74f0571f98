"""Lowering: a Kernel's AST becomes loops (RANGE), index arithmetic from each view, loads, reduces and stores."""
from __future__ import annotations
import functools, itertools
from attograd.codegen.kernel import Kernel
from attograd.dtype import dtypes
from attograd.helpers import prod
from attograd.uop.ops import GroupOp, Ops, UOp, graph_rewrite
from attograd.uop.symbolic import symbolic

def _identity(op: Ops, dtype) -> object:
  if op is Ops.ADD: return 0
  if op is Ops.MUL: return 1
  return dtypes.min(dtype)  # MAX

def lower(k: Kernel, vectors: bool = False, gpu: bool = False, global_max: tuple[int, ...] | None = None) -> UOp:
  """The kernel as a SINK of STOREs over RANGE loops (REDUCE nodes still carry their ranges). With vectors, the
  kernel's lane axis becomes the lanes of vector values where every use allows it; otherwise it is unrolled.
  gpu=True: output axes (and LOCAL/GROUP axes) are work-group and thread indices (SPECIAL) instead of loops."""
  if vectors and k.lane is not None and (vec := _lower(k, k.lane, gpu, global_max)) is not None: return vec
  out = _lower(k, None, gpu, global_max)
  assert out is not None
  return out

def _lower(k: Kernel, lane_ax: int | None, gpu: bool, global_max: tuple[int, ...] | None) -> UOp | None:
  d = dtypes.int32
  idxs: list[UOp] = []
  placeholders: dict[int, UOp] = {}
  specials = gpu_launch(k, global_max)[0] if gpu else {}
  for i, s in enumerate(k.full_shape):
    if s == 1: idxs.append(UOp.const(d, 0))
    elif i in specials: idxs.append(specials[i])
    elif i in k.upcasted or i in k.unrolled:
      placeholders[i] = UOp(Ops.DEFINE_VAR, d, (), (f"_unroll{i}", 0, s - 1))
      idxs.append(placeholders[i])
    else:
      kind = "reduce" if i >= k.first_reduce else ("parallel" if (k.parallel and i == _first_loop(k)) else "loop")
      idxs.append(UOp(Ops.RANGE, d, (UOp.const(d, s),), (i, kind)))
  out_idxs = [x if i < k.first_reduce else UOp.const(d, 0) for i, x in enumerate(idxs)]
  reduce_ranges = tuple(x for i, x in enumerate(idxs) if i >= k.first_reduce and x.op is Ops.RANGE)
  unroll_vars = [placeholders[i] for i in k.unrolled if i != lane_ax]

  memo: dict[UOp, UOp] = {}
  for u in k.ast.toposort():
    if u.op is Ops.VIEW: continue
    if u.op is Ops.LOAD:
      st = k.sts[u]
      idx, valid = st.to_indexed(idxs if st.shape == k.full_shape else out_idxs)
      memo[u] = _load(u, idx, valid)
    elif u.op is Ops.CONST and u.src:
      st = k.sts[u]
      _, valid = st.to_indexed(idxs if st.shape == k.full_shape else out_idxs)
      c = UOp.const(u.dtype, u.arg)
      memo[u] = c if valid.op is Ops.CONST and valid.arg else valid.where(c, UOp.const(u.dtype, 0))
    elif u.op is Ops.REDUCE_AXIS:
      src = memo[u.src[0]]
      op = u.arg[0]
      if unroll_vars:  # unrolled reduce axes: combine the copies before accumulating
        copies = [src.substitute(dict(zip(unroll_vars, (UOp.const(d, v) for v in vals))))
                  for vals in itertools.product(*[range(v.arg[2] + 1) for v in unroll_vars])]
        src = copies[0]
        for c in copies[1:]: src = UOp(op, src.dtype, (src, c))
      memo[u] = UOp(Ops.REDUCE, u.dtype, (src,) + reduce_ranges, op) if reduce_ranges else src
      if k.grouped: memo[u] = _group_reduce(k, memo[u], specials, op, len([x for x in memo if x.op is Ops.REDUCE_AXIS]))
    elif u.op is Ops.STORE:
      st = k.sts[u]
      idx, _ = st.to_indexed(out_idxs)
      memo[u] = UOp(Ops.STORE, dtypes.void, (u.src[0], idx, memo[u.src[2]]))
    elif u.op is Ops.SINK: memo[u] = UOp(Ops.SINK, dtypes.void, tuple(memo[s] for s in u.src))
    elif u.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR): memo[u] = u
    else: memo[u] = UOp(u.op, u.dtype, tuple(memo[s] for s in u.src), u.arg)
  sink = memo[k.ast]
  if k.grouped:  # every thread of a work-group holds the reduced value: the first one stores it
    first = functools.reduce(lambda a, b: a & b, [specials[a].eq(0) for a in k.grouped if a in specials])
    sink = UOp(Ops.SINK, dtypes.void, tuple(st.replace(src=st.src + (first,)) for st in sink.src))
  # upcast output axes: one copy of every store per unrolled position; the lane axis stays a variable for vectorize
  lane = placeholders[lane_ax] if lane_ax is not None else None
  up_vars = [placeholders[i] for i in k.upcasted if i != lane_ax]
  if up_vars:
    stores = []
    for vals in itertools.product(*[range(v.arg[2] + 1) for v in up_vars]):
      sub = sink.substitute(dict(zip(up_vars, (UOp.const(d, v) for v in vals))))
      stores.extend(sub.src)
    sink = UOp(Ops.SINK, dtypes.void, tuple(stores))
  sink = graph_rewrite(sink, symbolic + pm_lowered)
  if lane is None or lane_ax is None: return sink
  return vectorize(sink, lane, reduce_lane=lane_ax >= k.first_reduce)

# ***** GPU: thread indices and work-group reductions *****

def _special_dims(prefix: str, axes: list[int], shape: tuple[int, ...], maxes: tuple[int, ...] | None,
                  ) -> tuple[dict[int, UOp], tuple[int, ...]]:
  """Each axis gets an index from one launch dimension (the innermost axis -> dimension 0). Past 3 axes, or when a
  dimension exceeds its limit, outer axes share one dimension and are recovered with // and %."""
  groups = [[a] for a in reversed(axes)]  # in dimension order; each group lists its axes outermost first
  while len(groups) > 3: groups[-2:] = [groups[-1] + groups[-2]]
  if maxes is not None and any(prod(shape[a] for a in g) > m for g, m in zip(groups, maxes)): groups = [list(axes)]
  idx: dict[int, UOp] = {}
  sizes: list[int] = []
  for dim, g in enumerate(groups):
    sizes.append(prod(shape[a] for a in g))
    sp = UOp(Ops.SPECIAL, dtypes.int32, (), (f"{prefix}{dim}", sizes[-1]))
    for j, a in enumerate(g):
      inner = prod(shape[b] for b in g[j + 1:])
      x = sp // inner if inner > 1 else sp
      idx[a] = x % shape[a] if j > 0 else x
  return idx, tuple(sizes) if sizes else (1,)

def gpu_launch(k: Kernel, global_max: tuple[int, ...] | None = None,
               ) -> tuple[dict[int, UOp], tuple[int, ...], tuple[int, ...]]:
  """(index of each axis run by the GPU, global size in work-groups, local size in threads)."""
  shape = k.full_shape
  glob = [i for i in range(k.first_reduce) if shape[i] != 1 and i not in k.upcasted and i not in k.locals_]
  loc = [i for i in range(k.shape_len) if shape[i] != 1 and (i in k.locals_ or i in k.grouped)]
  gidx, gsize = _special_dims("gidx", glob, shape, global_max)
  lidx, lsize = _special_dims("lidx", loc, shape, None)
  return {**gidx, **lidx}, gsize, lsize

def _group_reduce(k: Kernel, partial: UOp, specials: dict[int, UOp], op: Ops, n: int) -> UOp:
  """Each thread's partial result goes to local memory; after a barrier every thread combines the work-group's."""
  loc = [i for i in range(k.shape_len) if k.full_shape[i] != 1 and (i in k.locals_ or i in k.grouped)]
  d = dtypes.int32
  slot, stride, strides = UOp.const(d, 0), 1, {}
  for a in reversed(loc):
    strides[a] = stride
    slot = slot + specials[a] * stride
    stride *= k.full_shape[a]
  buf = UOp(Ops.DEFINE_LOCAL, partial.dtype.ptr(stride), (), (f"temp{n}", stride))
  after = UOp(Ops.BARRIER, buf.dtype, (buf, UOp(Ops.STORE, dtypes.void, (buf, slot, partial))))
  ga = k.grouped[0]
  rng = UOp(Ops.RANGE, d, (UOp.const(d, k.full_shape[ga]),), (k.shape_len + n, "reduce"))
  others = slot - specials[ga] * strides[ga]
  return UOp(Ops.REDUCE, partial.dtype, (UOp(Ops.LOAD, partial.dtype, (after, others + rng * strides[ga])), rng), op)

# EXP2 and LOG2 too: CPU renderers decompose them into plain arithmetic on the lanes (codegen/transcendental.py)
_VEC_ALU = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.RECIP, Ops.EXP2, Ops.LOG2}
_VEC_DTYPES = (dtypes.float32, dtypes.float64)  # half vectors can't mix with float scalars in C
_MASK = {dtypes.float32: dtypes.int32, dtypes.float64: dtypes.int64}  # the lane mask type of a float vector

def _lane_base(idx: UOp, lane: UOp, stride: int = 1) -> UOp | None:
  """idx == base + stride*lane with base free of lane: the base, else None."""
  from attograd.uop.symbolic import build_sum, split_terms
  terms, const = split_terms(idx)
  if (lane, stride) not in terms: return None
  rest = [(t, c) for t, c in terms if t is not lane]
  if any(lane in t.toposort() for t, _ in rest): return None
  return build_sum(rest, const, idx.dtype)

def _lane_stride(idx: UOp, lane: UOp) -> int | None:
  from attograd.uop.symbolic import split_terms
  return next((c for t, c in split_terms(idx)[0] if t is lane), None)

def vectorize(sink: UOp, lane: UOp, reduce_lane: bool = False) -> UOp | None:
  """Turn every node that depends on `lane` into a vector of lane.arg[2]+1 elements. None when some use of the lane
  is not a contiguous load/store or float arithmetic (the caller then unrolls the lanes as scalars). A reduce lane
  (an unrolled reduce axis) accumulates in a vector that is summed across its lanes after the loop."""
  width = lane.arg[2] + 1
  dep: dict[UOp, bool] = {}
  out: dict[UOp, UOp] = {}
  index_only: set[UOp] = set()
  masks: dict[UOp, object] = {}  # comparison results kept as lane masks -> the float dtype they compared
  for u in sink.toposort():
    d = u is lane or any(dep[s] for s in u.src)
    dep[u] = d
    if not d:
      out[u] = u if all(out[s] is s for s in u.src) else UOp(u.op, u.dtype, tuple(out[s] for s in u.src), u.arg)
      continue
    if reduce_lane and u.op is Ops.REDUCE:
      if u.arg not in (Ops.ADD, Ops.MAX) or u.src[0] in index_only or u.dtype not in _VEC_DTYPES: return None
      acc = UOp(Ops.REDUCE, u.dtype.vec(width), (out[u.src[0]],) + u.src[1:], u.arg)
      lanes = [UOp(Ops.GEP, u.dtype, (acc,), i) for i in range(width)]
      while len(lanes) > 1:  # a balanced tree: fewer dependent ops
        lanes = [UOp(u.arg, u.dtype, (a, b)) for a, b in zip(lanes[::2], lanes[1::2])] + lanes[len(lanes) // 2 * 2:]
      out[u], dep[u] = lanes[0], False
      continue
    if u is lane or (u.dtype in dtypes.ints and u.op in GroupOp.ALU):
      index_only.add(u)  # index math: only a load/store address may use it
      continue
    if any(s in index_only for s in u.src) and u.op not in (Ops.LOAD, Ops.STORE): return None
    if u.op is Ops.CMPNE and u.src[0] in masks and u.src[1].op is Ops.CONST and u.src[1].arg is True:
      m = out[u.src[0]]  # logical not of a lane mask (x >= y is not(x < y)): every bit flipped
      out[u] = UOp(Ops.XOR, m.dtype, (m, UOp.const(m.dtype.scalar(), -1)))
      masks[u] = masks[u.src[0]]
      continue
    # comparisons of float lanes give lane masks (all bits set or clear, as wide as the compared floats)
    if u.op in GroupOp.Comparison and u.src[0].dtype in _VEC_DTYPES:
      out[u] = UOp(u.op, _MASK[u.src[0].dtype].vec(width), tuple(out[s] for s in u.src))
      masks[u] = u.src[0].dtype
      continue
    if u.op in (Ops.AND, Ops.OR) and all(s in masks for s in u.src) and len({masks[s] for s in u.src}) == 1:
      out[u] = UOp(u.op, out[u.src[0]].dtype, tuple(out[s] for s in u.src))
      masks[u] = masks[u.src[0]]
      continue
    if u.op is Ops.WHERE and u.dtype in _VEC_DTYPES and (masks.get(u.src[0]) is u.dtype or not dep[u.src[0]]):
      out[u] = UOp(Ops.WHERE, u.dtype.vec(width), tuple(out[s] for s in u.src))
      continue
    if u.op is Ops.MAX and u.dtype in _VEC_DTYPES:
      out[u] = UOp(Ops.MAX, u.dtype.vec(width), tuple(out[s] for s in u.src))
      continue
    if u.op is Ops.STORE and u.src[2] in masks: return None
    if u.dtype not in _VEC_DTYPES and u.op is not Ops.STORE and u.op is not Ops.SINK: return None
    if u.op is Ops.LOAD:
      if len(u.src) == 3 and dep[u.src[2]]: return None
      if (base := _lane_base(u.src[1], lane)) is not None:
        out[u] = UOp(Ops.LOAD, u.dtype.vec(width), (u.src[0], base) + u.src[2:])
      elif (stride := _lane_stride(u.src[1], lane)) is not None and \
           (base := _lane_base(u.src[1], lane, stride)) is not None:
        # lanes apart in memory: a gather of one scalar load per lane
        out[u] = UOp(Ops.VECTORIZE, u.dtype.vec(width),
                     tuple(UOp(Ops.LOAD, u.dtype, (u.src[0], base + i * stride) + u.src[2:]) for i in range(width)))
      else: return None
    elif u.op is Ops.STORE:
      if not dep[u.src[2]] or u.src[2] in index_only: return None
      if (base := _lane_base(u.src[1], lane)) is not None:
        out[u] = UOp(Ops.STORE, dtypes.void, (u.src[0], base, out[u.src[2]]))
      else:
        # lanes that land apart in memory: one scalar store per lane (cheap after a long reduce)
        if (stride := _lane_stride(u.src[1], lane)) is None or (base := _lane_base(u.src[1], lane, stride)) is None:
          return None
        v = out[u.src[2]]
        out[u] = UOp(Ops.SINK, dtypes.void, tuple(UOp(Ops.STORE, dtypes.void, (u.src[0], base + i * stride,
                                                                               UOp(Ops.GEP, v.dtype.scalar(), (v,), i)))
                                                  for i in range(width)))
    elif u.op is Ops.REDUCE and u.arg in (Ops.ADD, Ops.MUL, Ops.MAX) and u.src[0] not in index_only:
      out[u] = UOp(Ops.REDUCE, u.dtype.vec(width), (out[u.src[0]],) + u.src[1:], u.arg)
    elif u.op in _VEC_ALU and dtypes.is_float(u.dtype) and not any(s in index_only for s in u.src):
      out[u] = UOp(u.op, u.dtype.vec(width), tuple(out[s] for s in u.src), u.arg)
    elif u.op is Ops.SINK:
      out[u] = UOp(Ops.SINK, dtypes.void,
                   tuple(x for s in u.src for x in (out[s].src if out[s].op is Ops.SINK else (out[s],))))
    else: return None
  return out[sink]

def _first_loop(k: Kernel) -> int:
  for i, s in enumerate(k.full_shape):
    if s != 1 and i not in k.upcasted: return i
  return -1

def _load(u: UOp, idx: UOp, valid: UOp) -> UOp:
  glob = u.src[0]
  if valid.op is Ops.CONST and valid.arg: return UOp(Ops.LOAD, u.dtype, (glob, idx))
  return UOp(Ops.LOAD, u.dtype, (glob, idx, valid))

def _fold_gate(x: UOp) -> UOp | None:
  # a load whose gate is always false reads nothing; one whose gate is always true needs no gate
  if len(x.src) == 3 and x.src[2].op is Ops.CONST:
    return UOp(Ops.LOAD, x.dtype, x.src[:2]) if x.src[2].arg else UOp.const(x.dtype, 0)
  return None

from attograd.uop.ops import PatternMatcher, UPat  # noqa: E402
pm_lowered = PatternMatcher([
  (UPat(Ops.LOAD, name="x"), _fold_gate),
])

def estimate_ops(sink: UOp, k: Kernel) -> int:
  """ALU ops executed (for GFLOPS in DEBUG output)."""
  # a vector op does one op per lane; a REDUCE is one accumulate per element it reduces
  n_alu = sum(u.dtype.count for u in sink.toposort()
              if (u.op in GroupOp.ALU or u.op is Ops.REDUCE) and u.dtype.scalar() in dtypes.floats)
  return n_alu * prod(s for i, s in enumerate(k.full_shape) if i not in k.upcasted and i not in k.unrolled)
