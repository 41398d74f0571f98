"""Lowering: a Kernel's AST becomes loops (RANGE), index arithmetic from each view, loads, reduces and stores."""
from __future__ import annotations
import functools, itertools, math
from dataclasses import dataclass
from attograd.codegen.kernel import Kernel
from attograd.codegen.tc import TensorCore, tc_operand
from attograd.dtype import ConstType, DType, Invalid, dtypes
from attograd.helpers import prod
from attograd.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite, sym_max
from attograd.uop.symbolic import build_sum, fits, ints, is_vec, split_terms, symbolic
from attograd.uop.view import as_index

def reduce_identity(op: Ops, dtype: DType) -> ConstType:
  """The value a reduce's accumulator starts from."""
  if op is Ops.ADD: return 0
  if op is Ops.MUL: return 1
  return dtypes.min(dtype)  # MAX

def new_kernel(ast: UOp, tensor_cores: tuple[DType, ...] = (), warp_size: int = 0) -> Kernel:
  """The Kernel of an AST, knowing whether its reduce folds away into loads (Kernel.gathers), which takes lowering it
  once: every kernel the pipeline, BEAM and the heuristic optimize is made here."""
  k = Kernel(ast, tensor_cores=tensor_cores, warp_size=warp_size)
  # only an arange's index math can make a one-hot to fold (the aranges are among the views' owners, k.sts: the AST
  # is walked again only for the few kernels that have one)
  if any(u.op is Ops.IOTA for u in k.sts) and any(u.op is Ops.REDUCE_AXIS for u in ast.toposort()):
    k.gathers = _ast_folds(ast)
  return k

@functools.lru_cache(maxsize=256)
def _ast_folds(ast: UOp) -> bool:
  """reduce_folds of an AST's unoptimized kernel, once per AST: BEAM makes a kernel of the same AST for every
  candidate it tries (ASTs are hash-consed, so equal ones are one key)."""
  return reduce_folds(Kernel(ast))

def lower(k: Kernel, vectors: bool = False, gpu: bool = False, global_max: tuple[int, ...] | None = None) -> UOp:
  """The kernel as a SINK of STOREs over RANGE loops (REDUCE nodes still carry their ranges). With vectors, the
  kernel's lane axis becomes the lanes of vector values where every use allows it; otherwise it is unrolled.
  gpu=True: output axes (and LOCAL/GROUP axes) are work-group and thread indices (SPECIAL) instead of loops."""
  if gpu and k.kblock is not None:  # its block loop would be a thread index: the blocks' sums would race
    raise ValueError(f"KBLOCK: reduce blocks summed through the output need a CPU renderer, kernel {k.full_shape}")
  if k.tc is not None:
    if not gpu: raise ValueError(f"TC: tensor cores need a GPU renderer, kernel shape {k.full_shape}")
    return _lower_tc(k, global_max)
  if vectors and k.lane is not None and (vec := _lower(k, k.lane, gpu, global_max)) is not None: return vec
  out = _lower(k, None, gpu, global_max)
  assert out is not None
  return out

def _lower(k: Kernel, lane_ax: int | None, gpu: bool, global_max: tuple[int, ...] | None) -> UOp | None:
  d = k.index_dtype()
  idxs: list[UOp] = []
  placeholders: dict[int, UOp] = {}
  specials = gpu_indices(k, global_max) if gpu else {}
  for i, s in enumerate(k.full_shape):
    if s == 1: idxs.append(UOp.const(d, 0))
    elif i in specials: idxs.append(specials[i])
    elif i in k.upcasted or i in k.unrolled:
      placeholders[i] = UOp(Ops.DEFINE_VAR, d, (), (f"_unroll{i}", 0, s - 1))
      idxs.append(placeholders[i])
    else:
      kind = "reduce" if i >= k.first_reduce else ("parallel" if (k.parallel and i == k.first_loop()) else "loop")
      # a parallel loop over symbolic sizes carries when a call runs it across the cores (Kernel.thread_if)
      cond = (k.thread_if,) if kind == "parallel" and k.thread_if is not None else ()
      idxs.append(UOp(Ops.RANGE, d, (as_index(s, d),), (i, kind, *cond)))
  out_idxs = [x if i < k.first_reduce else UOp.const(d, 0) for i, x in enumerate(idxs)]
  reduce_ranges = tuple(x for i, x in enumerate(idxs) if i >= k.first_reduce and x.op is Ops.RANGE)
  unroll_vars = [placeholders[i] for i in k.unrolled if i != lane_ax]

  ctx = LowerCtx(k, d, idxs, out_idxs, reduce_ranges, unroll_vars, specials)
  sink = graph_rewrite(k.ast, pm_lower_ast, ctx)
  if k.grouped:  # every thread of a work-group holds the reduced value: the first one stores it
    first = functools.reduce(lambda a, b: a & b, [specials[a].eq(0) for a in k.grouped if a in specials])
    sink = UOp(Ops.SINK, dtypes.void, tuple(st.replace(src=st.src[:3] + ((st.src[3] & first) if len(st.src) == 4
                                                                             else first,)) for st in sink.src))
  # upcast output axes: one copy of every store per unrolled position; the lane axis stays a variable for vectorize
  lane = placeholders[lane_ax] if lane_ax is not None else None
  up_vars = [placeholders[i] for i in k.upcasted if i != lane_ax]
  if up_vars:
    copies = unrolled_copies(sink, up_vars, d, pm_simplify_lowered)
    sink = UOp(Ops.SINK, dtypes.void, tuple(st for c in copies for st in c.src))
  sink = graph_rewrite(sink, pm_simplify_lowered)
  if lane is None or lane_ax is None: return sink
  return vectorize(sink, lane, reduce_lane=lane_ax >= k.first_reduce)

def unrolled_copies(root: UOp, placeholders: list[UOp], d: DType, simplify: PatternMatcher | None = None) -> list[UOp]:
  """`root` with each combination of the unroll placeholders' values (in itertools.product order) substituted: one
  copy per combination. Only the nodes that depend on a placeholder are rebuilt, from one walk of the graph: the rest
  is shared by every copy (a substitute per copy walked and rebuilt the whole graph each time, a third of lowering a
  conv tile's 16 x 25 copies). With `simplify`, each rebuilt node is rewritten by it as soon as it is made, so the
  nodes above it are built over simplified sources: copies that load the same element (a conv window's positions
  overlap) become one node at once, instead of thousands of distinct unsimplified loads that a rewrite of the whole
  graph merges later (a conv tile: 22k nodes down to 1.2k)."""
  ph = set(placeholders)
  dep: dict[UOp, None] = {}
  for n in root.toposort():
    if n not in ph and any(s in ph or s in dep for s in n.src): dep[n] = None
  copies: list[UOp] = []
  done: dict[UOp, UOp] = {}  # the rewrites, shared by all copies
  for vals in itertools.product(*[range(v.arg[2] + 1) for v in placeholders]):
    new: dict[UOp, UOp] = {v: UOp.const(d, x) for v, x in zip(placeholders, vals)}
    for n in dep:
      nn = UOp(n.op, n.dtype, tuple([new.get(s, s) for s in n.src]), n.arg)
      new[n] = nn if simplify is None else graph_rewrite(nn, simplify, done=done)
    copies.append(new.get(root, root))
  return copies

# ***** the AST's ops as loads, reduces and stores over the loop indices: one rule per op *****

@dataclass
class LowerCtx:
  """What pm_lower_ast's rules read: the kernel, the index dtype, each axis's index (a loop, a thread index or an
  unroll placeholder), the same for a view of the output's shape (reduce axes at 0), the reduce loops, the unrolled
  reduce axes' placeholders and the GPU thread indices. The rules count the reduces (their local buffers' names) and,
  for a TC kernel, keep the matmul's operands."""
  k: Kernel
  d: DType
  idxs: list[UOp]
  out_idxs: list[UOp]
  reduce_ranges: tuple[UOp, ...] = ()
  unroll_vars: tuple[UOp, ...] | list[UOp] = ()
  specials: dict[int, UOp] | None = None
  n_reduce: int = 0
  tc_ab: tuple[UOp, UOp] | None = None

  def indexed(self, u: UOp) -> tuple[UOp, UOp]:
    """(index, validity) of the AST node u's view at the loop indices."""
    st = self.k.sts[u]
    return st.to_indexed(self.idxs if st.shape == self.k.full_shape else self.out_idxs, self.d)

def lower_load_rule(ctx: LowerCtx, x: UOp) -> UOp:
  idx, valid = ctx.indexed(x)
  return _load(x, idx, _pad_valid(ctx.k, x, ctx.idxs, valid))

def lower_const_rule(ctx: LowerCtx, x: UOp) -> UOp:
  """A constant under a view (a padded constant) is itself where the view is valid, else 0."""
  if x.arg is Invalid: return UOp(Ops.CONST, x.dtype, arg=Invalid)  # "any value", padded or not (invalid_gate)
  valid = _pad_valid(ctx.k, x, ctx.idxs, ctx.indexed(x)[1])
  c = UOp.const(x.dtype, x.arg)
  return c if valid.op is Ops.CONST and valid.arg else valid.where(c, UOp.const(x.dtype, 0))

def lower_iota_rule(ctx: LowerCtx, x: UOp) -> UOp:
  idx, valid = ctx.indexed(x)
  return _iota(x, idx, _pad_valid(ctx.k, x, ctx.idxs, valid))

def lower_store_rule(ctx: LowerCtx, x: UOp) -> UOp:
  """The output's store (padded outputs are not stored). Its value is lowered already, so x is a new node: the AST's
  store, which the kernel's views are kept for, is found by its buffer (a kernel stores each output once)."""
  ast_store = next(u for u in ctx.k.sts if u.op is Ops.STORE and u.src[0] is x.src[0])
  idx, _ = ctx.k.sts[ast_store].to_indexed(ctx.out_idxs, ctx.d)
  gate = _pad_valid(ctx.k, ast_store, ctx.idxs, UOp.const(dtypes.bool, True))
  value = x.src[2]
  if any(u.op is Ops.CONST and u.arg is Invalid for u in ctx.k.sts):  # (a constant is among the views' owners)
    valid, value = invalid_gate(value, {})
    if valid is False: valid = UOp.const(dtypes.bool, False)  # every element "any value": nothing is written
    if valid is not True: gate = valid if _true(gate) else gate & valid
  return UOp(Ops.STORE, dtypes.void, (x.src[0], idx, value) + (() if _true(gate) else (gate,)))

# ***** tinygrad's Invalid ("any value") *****

def invalid_gate(u: UOp, memo: dict[UOp, tuple[UOp | bool, UOp]]) -> tuple[UOp | bool, UOp]:
  """(where u has a value, u without Invalid) for a lowered value: an element that depends on Invalid through
  elementwise ops and WHERE picks is "any value", so its store is skipped (the gate). Under anything else (a reduce, a
  load's address) any value will do, and Invalid becomes 0."""
  if (r := memo.get(u)) is not None: return r
  if u.op is Ops.CONST and u.arg is Invalid: r = (False, UOp.const(u.dtype, 0))
  elif u.op is Ops.WHERE:
    (gc, c), (ga, a), (gb, b) = (invalid_gate(s, memo) for s in u.src)
    pick: UOp | bool = ga if ga is gb else c.where(_gate_uop(ga), _gate_uop(gb)) if isinstance(c, UOp) else True
    if ga is True and gb is False: pick = c
    elif ga is False and gb is True: pick = UOp(Ops.CMPNE, dtypes.bool, (c, UOp.const(dtypes.bool, True)))
    r = (_gate_and(gc, pick), u.replace(src=(c, a, b)))
  else:
    parts = [invalid_gate(s, memo) for s in u.src]
    new = u if all(v is s for (_, v), s in zip(parts, u.src)) else u.replace(src=tuple(v for _, v in parts))
    elementwise = u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST)
    g: UOp | bool = True
    if elementwise:
      for pg, _ in parts: g = _gate_and(g, pg)
    r = (g, new)
  memo[u] = r
  return r

def _gate_uop(g: UOp | bool) -> UOp: return g if isinstance(g, UOp) else UOp.const(dtypes.bool, g)
def _gate_and(a: UOp | bool, b: UOp | bool) -> UOp | bool:
  if a is False or b is False: return False
  if a is True: return b
  if b is True: return a
  return a & b

def lower_reduce_rule(ctx: LowerCtx, x: UOp) -> UOp:
  """A reduce over the kernel's reduce loops: unrolled reduce axes combine their copies first; GPU work-group axes
  combine through local memory (or warp shuffles). A TC kernel's reduce is a placeholder for one element of the
  accumulator (lowerer._lower_tc builds the tensor-core ops around it)."""
  src, op = x.src[0], x.arg[0]
  ctx.n_reduce += 1
  if (tc := ctx.k.tc) is not None:
    a, b = (tc_operand(s) for s in src.src)
    ctx.tc_ab = (b, a) if tc.swap else (a, b)
    return UOp(Ops.NOOP, x.dtype, (), "tc_acc")
  if ctx.unroll_vars:  # unrolled reduce axes: combine the copies before accumulating
    copies = unrolled_copies(src, list(ctx.unroll_vars), ctx.d, pm_simplify_lowered)
    src = copies[0]
    for c in copies[1:]: src = UOp(op, src.dtype, (src, c))
  out = UOp(Ops.REDUCE, x.dtype, (src,) + ctx.reduce_ranges, op) if ctx.reduce_ranges else src
  if (kb := ctx.k.kblock) is not None:  # reduce blocks (KBLOCK): add what the blocks before stored (none for the first)
    ast_store = next(u for u in ctx.k.sts if u.op is Ops.STORE)
    idx, _ = ctx.k.sts[ast_store].to_indexed(ctx.out_idxs, ctx.d)
    gate = _pad_valid(ctx.k, ast_store, ctx.idxs, UOp.const(ctx.d, 0) < ctx.idxs[kb])
    out = out + UOp(Ops.LOAD, x.dtype, (ast_store.src[0], idx, gate))
  return _group_reduce(ctx.k, out, ctx.specials or {}, op, ctx.n_reduce) if ctx.k.grouped else out

# the AST's own nodes have views as sources; what the rules make never does, so nothing is lowered twice. Every other
# op is rebuilt over its lowered sources by graph_rewrite itself
pm_lower_ast = PatternMatcher([
  (UPat(Ops.LOAD, src=(UPat(), UPat(Ops.VIEW)), name="x"), lower_load_rule),
  (UPat(Ops.CONST, src=(UPat(Ops.VIEW),), name="x"), lower_const_rule),
  (UPat(Ops.IOTA, src=(UPat(Ops.VIEW),), name="x"), lower_iota_rule),
  (UPat(Ops.STORE, src=(UPat(), UPat(Ops.VIEW), UPat()), name="x"), lower_store_rule),
  (UPat(Ops.REDUCE_AXIS, name="x"), lower_reduce_rule),
])

def reduce_folds(k: Kernel) -> bool:
  """Every reduce loop of the unoptimized kernel k folds away in lowering (a one-hot gather: pm_gather_fold)."""
  return (low := _lower(k, None, False, None)) is not None and not any(u.op is Ops.REDUCE for u in low.toposort())

# ***** GPU: thread indices and work-group reductions *****

def _special_dims(prefix: str, axes: list[int], shape: tuple[int, ...], maxes: tuple[int, ...] | None,
                  d: DType = dtypes.int32) -> dict[int, UOp]:
  """Each axis gets an index from one launch dimension (the innermost axis -> dimension 0). Past 3 axes, or when a
  dimension exceeds its limit, outer axes share one dimension and are recovered with // and %. The SPECIALs carry
  the dimensions' sizes: the launch sizes are read back from them (renderer.launch_dims)."""
  groups = [[a] for a in reversed(axes)]  # in dimension order; each group lists its axes outermost first
  while len(groups) > 3: groups[-2:] = [groups[-1] + groups[-2]]
  if maxes is not None and any(prod(shape[a] for a in g) > m for g, m in zip(groups, maxes)): groups = [list(axes)]
  idx: dict[int, UOp] = {}
  for dim, g in enumerate(groups):
    sp = UOp(Ops.SPECIAL, d, (), (f"{prefix}{dim}", prod(shape[a] for a in g)))
    for j, a in enumerate(g):
      inner = prod(shape[b] for b in g[j + 1:])
      x = sp // inner if inner > 1 else sp
      idx[a] = x % shape[a] if j > 0 else x
  return idx

def gpu_indices(k: Kernel, global_max: tuple[int, ...] | None = None) -> dict[int, UOp]:
  """The index of each axis run by the GPU: a work-group (gidx) or thread (lidx) index, or a part of one."""
  shape, d = k.full_shape, k.index_dtype()
  if k.tc is not None:  # one warp per work-group, one 16x8 output tile per warp
    # (the warp's lane index, lidx0, is made by _lower_tc)
    return _special_dims("gidx", [i for i in range(k.first_reduce) if shape[i] != 1 and i not in (k.tc.m, k.tc.n)
                                  and i not in k.upcasted], shape, global_max, d)
  # a symbolic axis stays a loop inside each thread: launch sizes are fixed when the program is built
  glob = [i for i in range(k.first_reduce) if shape[i] != 1 and i not in k.upcasted and i not in k.locals_
          and shape[i].__class__ is int]
  loc = [i for i in range(k.shape_len) if shape[i] != 1 and (i in k.locals_ or i in k.grouped)]
  return {**_special_dims("gidx", glob, shape, global_max, d), **_special_dims("lidx", loc, shape, None, d)}

def _group_reduce(k: Kernel, partial: UOp, specials: dict[int, UOp], op: Ops, n: int) -> UOp:
  """Each thread's partial result goes to local memory; after a barrier every thread combines the work-group's.
  With warp shuffles, groups of whole warps on the innermost thread dimension first combine within each warp."""
  loc = [i for i in range(k.shape_len) if k.full_shape[i] != 1 and (i in k.locals_ or i in k.grouped)]
  d = k.index_dtype()
  slot, stride, strides = UOp.const(d, 0), 1, {}
  for a in reversed(loc):
    strides[a] = stride
    slot = slot + specials[a] * stride
    stride *= k.full_shape[a]
  if k.warp_size and (w := _warp_reduce(k, partial, specials, op, n, loc, strides, stride)) is not None: return w
  buf = UOp(Ops.DEFINE_LOCAL, partial.dtype.ptr(stride), (), (f"temp{n}", stride))
  after = UOp(Ops.BARRIER, buf.dtype, (buf, UOp(Ops.STORE, dtypes.void, (buf, slot, partial))))
  ga = k.grouped[0]
  rng = UOp(Ops.RANGE, d, (UOp.const(d, k.full_shape[ga]),), (k.shape_len + n, "reduce"))
  others = slot - specials[ga] * strides[ga]
  return UOp(Ops.REDUCE, partial.dtype, (UOp(Ops.LOAD, partial.dtype, (after, others + rng * strides[ga])), rng), op)

# ***** GPU: warps (shuffles, tensor cores) *****

WARP = 32
SHUFFLE_DTYPES = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64,
                  dtypes.float16, dtypes.bfloat16)

def _warp_reduce(k: Kernel, partial: UOp, specials: dict[int, UOp], op: Ops, n: int, loc: list[int],
                 strides: dict[int, int], size: int) -> UOp | None:
  """A butterfly of xor shuffles leaves every lane of a warp holding the warp's total. A group of one warp needs
  nothing more; a bigger one stores one value per warp to local memory, and after a barrier every thread combines
  those. None when the group is not whole warps along thread dimension 0 (then local memory does it all)."""
  ga = k.grouped[0]
  g = k.full_shape[ga]
  if g % k.warp_size or strides[ga] != 1 or partial.dtype not in SHUFFLE_DTYPES or k.warp_size != WARP: return None
  mask = k.warp_size // 2
  while mask:
    partial = UOp(op, partial.dtype, (partial, UOp(Ops.SHUFFLE, partial.dtype, (partial,), mask)))
    mask //= 2
  if g == k.warp_size: return partial
  d, nw = k.index_dtype(), g // k.warp_size
  base = functools.reduce(lambda x, y: x + y, [specials[a] * (strides[a] // g * nw) for a in loc if a != ga],
                          UOp.const(d, 0))
  buf = UOp(Ops.DEFINE_LOCAL, partial.dtype.ptr(size // k.warp_size), (), (f"temp{n}", size // k.warp_size))
  lane0 = (specials[ga] % k.warp_size).eq(0)
  st = UOp(Ops.STORE, dtypes.void, (buf, base + specials[ga] // k.warp_size, partial, lane0))
  after = UOp(Ops.BARRIER, buf.dtype, (buf, st))
  rng = UOp(Ops.RANGE, d, (UOp.const(d, nw),), (k.shape_len + n, "reduce"))
  return UOp(Ops.REDUCE, partial.dtype, (UOp(Ops.LOAD, partial.dtype, (after, base + rng)), rng), op)

def tc_fragments(lane: UOp) -> tuple[list[tuple[UOp, UOp]], list[tuple[UOp, UOp]], list[tuple[UOp, UOp]]]:
  """For mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"): the (row, col) in
  the tile of each element a lane holds: A (16x16, 8 elements), B (16x8, 4), C and D (16x8, 4). With g = lane/4 and
  t = lane%4: a_i is at row g (+8 for i in 2,3,6,7), col 2t + i%2 (+8 for i >= 4); b_i at row 2t + i%2 (+8 for
  i >= 2), col g; c_i at row g (+8 for i >= 2), col 2t + i%2."""
  g, t = lane // 4, lane % 4
  a = [(g + 8 * ((i >> 1) & 1), t * 2 + (i & 1) + 8 * (i >> 2)) for i in range(8)]
  b = [(t * 2 + (i & 1) + 8 * (i >> 1), g) for i in range(4)]
  c = [(g + 8 * (i >> 1), t * 2 + (i & 1)) for i in range(4)]
  return a, b, c

def _lower_tc(k: Kernel, global_max: tuple[int, ...] | None) -> UOp:
  """A TC kernel: each warp (one work-group) computes one 16x8 output tile, or one per value of its upcast axes.
  Every lane loads its fragments of the A and B tiles straight from the inputs (tiles that share a fragment share
  its loads), the reduce loop steps over k in 16s with one WMMA per tile (accumulating in float32), and every lane
  runs the code after the reduce for, and stores, the 4 output elements of each tile it holds."""
  tc, d = k.tc, k.index_dtype()
  assert tc is not None
  specials = gpu_indices(k, global_max)
  lane = UOp(Ops.SPECIAL, d, (), ("lidx0", WARP))
  ph = {ax: UOp(Ops.DEFINE_VAR, d, (), (f"_tc{ax}", 0, k.full_shape[ax] - 1)) for ax in (tc.m, tc.n, tc.k)}
  ph.update({ax: UOp(Ops.DEFINE_VAR, d, (), (f"_unroll{ax}", 0, k.full_shape[ax] - 1)) for ax in k.upcasted})
  idxs: list[UOp] = []
  for i, s in enumerate(k.full_shape):
    if s == 1: idxs.append(UOp.const(d, 0))
    elif i in ph: idxs.append(ph[i])
    elif i in specials: idxs.append(specials[i])
    else: idxs.append(UOp(Ops.RANGE, d, (UOp.const(d, s),), (i, "reduce")))  # k's outer part
  out_idxs = [x if i < k.first_reduce else UOp.const(d, 0) for i, x in enumerate(idxs)]
  rng = tuple(x for x in idxs if x.op is Ops.RANGE)
  fa, fb, fc = tc_fragments(lane)
  acc_t = dtypes.float32.vec(4)
  ctx = LowerCtx(k, d, idxs, out_idxs, rng)
  lowered = graph_rewrite(k.ast, pm_lower_ast, ctx)
  assert ctx.tc_ab is not None
  ab = ctx.tc_ab
  acc = next(x for x in lowered.toposort() if x.op is Ops.NOOP)
  stores: list[UOp] = []
  for vals in itertools.product(*[range(k.full_shape[ax]) for ax in k.upcasted]):
    up = {ph[ax]: UOp.const(d, v) for ax, v in zip(k.upcasted, vals)}
    a, b = (x.substitute(up) for x in ab)
    av = [a.substitute({ph[tc.m]: r, ph[tc.k]: c}).cast(tc.dtype) for r, c in fa]
    bv = [b.substitute({ph[tc.k]: r, ph[tc.n]: c}).cast(tc.dtype) for r, c in fb]
    wmma = UOp(Ops.WMMA, acc_t, (UOp(Ops.VECTORIZE, tc.dtype.vec(8), tuple(av)),
                                 UOp(Ops.VECTORIZE, tc.dtype.vec(4), tuple(bv)), UOp.const(acc_t, 0.0)),
               (*TensorCore.dims, tc.dtype, dtypes.float32))
    red = UOp(Ops.REDUCE, acc_t, (wmma,) + rng, Ops.ADD) if rng else wmma
    stores += [st.substitute({**up, acc: UOp(Ops.GEP, dtypes.float32, (red,), i).cast(acc.dtype), ph[tc.m]: r,
                              ph[tc.n]: c}) for i, (r, c) in enumerate(fc) for st in lowered.src]
  return graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(stores)), pm_simplify_lowered)

# EXP2 and LOG2 too: CPU renderers decompose them into plain arithmetic on the lanes (codegen/transcendental.py)
_VEC_ALU = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.RECIP, Ops.EXP2, Ops.LOG2}
_VEC_DTYPES = (dtypes.float32, dtypes.float64)  # half vectors can't mix with float scalars in C
# integer values (loaded, then unpacked: quantized weights' nibbles) run as integer lanes: these ops, and casts to
# the float lanes. Shifts only by counts the bounds keep below the width (intsafe guards scalar shifts alone), and no
# division (a lane of 0 would trap)
_INT_VEC_ALU = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR}
_INT_LANES = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
              dtypes.uint64)
_MASK = {dtypes.float32: dtypes.int32, dtypes.float64: dtypes.int64}  # the lane mask type of a float vector

def _lane_base(idx: UOp, lane: UOp, stride: int = 1) -> UOp | None:
  """idx == base + stride*lane with base free of lane: the base, else None."""
  terms, const = split_terms(idx)
  if (lane, stride) not in terms: return None
  rest = [(t, c) for t, c in terms if t is not lane]
  if any(lane in t.toposort() for t, _ in rest): return None
  return build_sum(rest, const, idx.dtype)

def _lane_stride(idx: UOp, lane: UOp) -> int | None:
  return next((c for t, c in split_terms(idx)[0] if t is lane), None)

def vectorize(sink: UOp, lane: UOp, reduce_lane: bool = False) -> UOp | None:
  """Turn every node that depends on `lane` into a vector of lane.arg[2]+1 elements. None when some use of the lane
  is not a contiguous load/store, float arithmetic, or integer arithmetic on loaded values cast to floats (the caller
  then unrolls the lanes as scalars). A reduce lane
  (an unrolled reduce axis) accumulates in a vector that is summed across its lanes after the loop."""
  width = lane.arg[2] + 1
  dep: dict[UOp, bool] = {}
  out: dict[UOp, UOp] = {}
  index_only: set[UOp] = set()
  ivals: set[UOp] = set()  # integer values with lanes (loaded, unpacked): their vectors are in out
  masks: dict[UOp, object] = {}  # comparison results kept as lane masks -> the float dtype they compared
  # half values loaded with lanes: only a conversion to float32 lanes may use them (C has no arithmetic mixing half
  # vectors with float scalars); the scales of quantized weights stored as the file's float16 (nn/gguf.py)
  hvals: set[UOp] = set()
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
    if u.dtype in _INT_LANES and u.op in GroupOp.ALU and any(s in ivals for s in u.src):
      # arithmetic on integer values: integer lanes; index math among its operands becomes a vector of its lanes
      if u.op not in _INT_VEC_ALU or not all(s in ivals or s in index_only or not dep[s] for s in u.src): return None
      if u.op in (Ops.SHL, Ops.SHR) and not (0 <= u.src[1].vmin and u.src[1].vmax < u.dtype.itemsize * 8): return None
      out[u] = UOp(u.op, u.dtype.vec(width), tuple(_lane_vector(s, lane, width) if s in index_only else out[s]
                                                   for s in u.src), u.arg)
      ivals.add(u)
      continue
    if u is lane or (u.dtype in dtypes.ints and u.op in GroupOp.ALU) or \
       (u.dtype is dtypes.bool and u.op in GroupOp.ALU and all(s in index_only or not dep[s] for s in u.src)
        and any(s in index_only for s in u.src)) or \
       (u.op is Ops.CAST and u.dtype in dtypes.ints and u.src[0] in index_only):
      index_only.add(u)  # index math (and masks on it): only a load/store address or gate may use it
      continue
    if u.op is Ops.CAST and u.src[0] in index_only and u.dtype in _VEC_DTYPES:
      # index math as a float value (an arange, a bit of a word picked by the lane): its lanes as a vector
      out[u] = UOp(Ops.CAST, u.dtype.vec(width), (_lane_vector(u.src[0], lane, width),))
      continue
    if u.op is Ops.CAST and u.src[0] in hvals and u.dtype is dtypes.float32:
      out[u] = UOp(Ops.CAST, u.dtype.vec(width), (out[u.src[0]],))
      continue
    if any(s in hvals for s in u.src): return None
    if u.op in (Ops.CAST, Ops.BITCAST) and (u.src[0] in ivals or u.src[0].dtype in _VEC_DTYPES) and \
       (u.dtype in _INT_LANES or u.dtype in _VEC_DTYPES) and (u.op is Ops.CAST or u.dtype.itemsize ==
                                                               u.src[0].dtype.itemsize):
      # integer lanes to float lanes (or between integer widths, or a bitcast); not float to int, which C leaves
      # undefined out of range (intsafe guards the scalar cast only)
      if u.op is Ops.CAST and dtypes.is_float(u.src[0].dtype) and not dtypes.is_float(u.dtype): return None
      out[u] = UOp(u.op, u.dtype.vec(width), (out[u.src[0]],), u.arg)
      if u.dtype in _INT_LANES: ivals.add(u)
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
    if u.dtype not in _VEC_DTYPES and u.op not in (Ops.STORE, Ops.SINK) and \
       not (u.op is Ops.LOAD and (u.dtype in _INT_LANES or u.dtype is dtypes.float16)): return None
    if u.op is Ops.LOAD:
      if u.dtype in _INT_LANES: ivals.add(u)
      if u.dtype is dtypes.float16: hvals.add(u)
      if len(u.src) == 3 and dep[u.src[2]]:  # a mask that differs across the lanes (padding, a pad's edge)
        if (masked := _masked_vector_load(u, lane, width)) is None: return None
        out[u] = masked
      elif (base := _lane_base(u.src[1], lane)) is not None:
        out[u] = UOp(Ops.LOAD, u.dtype.vec(width), (u.src[0], base) + u.src[2:])
      elif (stride := _lane_stride(u.src[1], lane)) is not None and \
           (base := _lane_base(u.src[1], lane, stride)) is not None:
        # lanes apart in memory: a gather of one scalar load per lane
        out[u] = UOp(Ops.VECTORIZE, u.dtype.vec(width),
                     tuple(UOp(Ops.LOAD, u.dtype, (u.src[0], base + i * stride) + u.src[2:]) for i in range(width)))
      else: return None
    elif u.op is Ops.STORE:
      if not dep[u.src[2]] or u.src[2] in index_only: return None
      if len(u.src) == 4:  # a gated store (padded outputs): one scalar store per lane, each with its own gate
        if (stride := _lane_stride(u.src[1], lane)) is None or (base := _lane_base(u.src[1], lane, stride)) is None:
          return None
        v = out[u.src[2]]
        out[u] = UOp(Ops.SINK, dtypes.void, tuple(
          UOp(Ops.STORE, dtypes.void, (u.src[0], base + i * stride, UOp(Ops.GEP, v.dtype.scalar(), (v,), i),
                                       _at_lane(u.src[3], lane, i))) for i in range(width)))
      elif (base := _lane_base(u.src[1], lane)) is not None:
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

def _lane_vector(x: UOp, lane: UOp, width: int) -> UOp:
  """Index math x (a function of the lane) as a vector of its value on each lane: the lane itself becomes the vector
  0, 1, ..., width-1 and the integer ops over it vector ops (a shift count per lane, or a value shifted by one);
  other ops take one scalar expression per lane."""
  if x is lane: return UOp(Ops.VECTORIZE, x.dtype.vec(width), tuple(UOp.const(x.dtype, i) for i in range(width)))
  if lane not in x.toposort(): return x
  if x.dtype in _INT_LANES and (x.op in _INT_VEC_ALU or x.op is Ops.CAST and x.src[0].dtype in _INT_LANES) and \
     (x.op not in (Ops.SHL, Ops.SHR) or 0 <= x.src[1].vmin and x.src[1].vmax < x.dtype.itemsize * 8):
    return UOp(x.op, x.dtype.vec(width), tuple(_lane_vector(s, lane, width) for s in x.src), x.arg)
  return UOp(Ops.VECTORIZE, x.dtype.vec(width), tuple(_at_lane(x, lane, i) for i in range(width)))

def _at_lane(x: UOp, lane: UOp, i: int) -> UOp:
  return graph_rewrite(x.substitute({lane: UOp.const(lane.dtype, i)}), symbolic)

def _monotone_gate(gate: UOp, lane: UOp) -> bool:
  """gate is an AND of comparisons (or their negations) each linear in lane, so it holds on every lane when it
  holds on the first and the last."""
  def linear(x: UOp) -> bool: return all(t is lane or lane not in t.toposort() for t, _ in split_terms(x)[0])
  if gate.op is Ops.AND: return all(_monotone_gate(s, lane) for s in gate.src)
  if lane not in gate.toposort(): return True
  if gate.op is Ops.CMPNE and gate.src[1].op is Ops.CONST and gate.src[1].arg is True: gate = gate.src[0]
  return gate.op is Ops.CMPLT and gate.src[0].dtype in dtypes.ints and all(linear(s) for s in gate.src)

def _masked_vector_load(u: UOp, lane: UOp, width: int) -> UOp | None:
  """A load whose mask differs across the lanes: one vector load when every lane is valid (a predictable branch,
  and the compiler can unswitch the loop on it), else one gated scalar load per lane; no lane reads past its mask."""
  gate = u.src[2]
  if (stride := _lane_stride(u.src[1], lane)) is None or (base := _lane_base(u.src[1], lane, stride)) is None \
     or not _monotone_gate(gate, lane):
    return None
  gates = [_at_lane(gate, lane, i) for i in range(width)]
  vd = u.dtype.vec(width)
  if stride != 1:  # lanes apart in memory: a gather anyway
    return UOp(Ops.VECTORIZE, vd, tuple(UOp(Ops.LOAD, u.dtype, (u.src[0], base + i * stride, g))
                                        for i, g in enumerate(gates)))
  every = gates[0] & gates[-1]
  part = UOp(Ops.VECTORIZE, vd, tuple(UOp(Ops.LOAD, u.dtype, (u.src[0], base + i, g & every.logical_not()))
                                      for i, g in enumerate(gates)))
  return UOp(Ops.WHERE, vd, (every, UOp(Ops.LOAD, vd, (u.src[0], base, every)), part))

def _true(x: UOp) -> bool: return x.op is Ops.CONST and x.arg is True

def _pad_valid(k: Kernel, u: UOp, idxs: list[UOp], valid: UOp) -> UOp:
  """valid, and for a load/constant/store that walks a padded axis: its index there is below the real size."""
  for terms, limit, gated in k.pads:
    if u not in gated: continue
    x = functools.reduce(lambda a, b: a + b, [idxs[a] * c if c != 1 else idxs[a] for a, c in terms])
    valid = x < limit if _true(valid) else valid & (x < limit)
  return valid

def _load(u: UOp, idx: UOp, valid: UOp) -> UOp:
  glob = u.src[0]
  if valid.op is Ops.CONST and valid.arg: return UOp(Ops.LOAD, u.dtype, (glob, idx))
  return UOp(Ops.LOAD, u.dtype, (glob, idx, valid))

def _iota(u: UOp, idx: UOp, valid: UOp) -> UOp:
  """A buffer holding 0..n-1 read at idx is idx (0 where the view is masked, as a load there reads)."""
  val = idx.cast(u.dtype)
  return val if _true(valid) else valid.where(val, UOp.const(u.dtype, 0))

def _fold_gate(x: UOp) -> UOp | None:
  # a load whose gate is always false reads nothing; one whose gate is always true needs no gate
  if len(x.src) == 3 and x.src[2].op is Ops.CONST:
    return UOp(Ops.LOAD, x.dtype, x.src[:2]) if x.src[2].arg else UOp.const(x.dtype, 0)
  return None

def _fold_store_gate(x: UOp) -> UOp | None:
  return UOp(Ops.STORE, x.dtype, x.src[:3]) if len(x.src) == 4 and _true(x.src[3]) else None

def _drop_unused_ranges(x: UOp) -> UOp | None:
  """A reduce over loops its value doesn't depend on (a sum of an expand, e.g. Tensor.ones(2**40).sum()) runs no
  loop: a sum is the value times the loop sizes, a max the value. Exact for ints (both wrap the same way); for floats
  one rounding instead of one per step (a float32 accumulator stops growing at 2**24 adds of 1.0)."""
  if x.arg not in (Ops.ADD, Ops.MAX) or x.dtype.count > 1: return None
  used = {u for u in x.src[0].toposort() if u.op is Ops.RANGE}
  unused = [r for r in x.src[1:] if r not in used]
  if not unused: return None
  val = x.src[0]
  if x.arg is Ops.ADD:
    n = functools.reduce(lambda a, b: a * b, [r.src[0] for r in unused])
    # half's largest value is 65504: multiply in float32 so 0 * 100000 stays 0 rather than 0 * inf
    wide = dtypes.float32 if x.dtype in (dtypes.float16, dtypes.bfloat16) else x.dtype
    count = UOp.const(wide, n.arg) if n.op is Ops.CONST else n.cast(wide)
    val = (val.cast(wide) * count).cast(x.dtype)
  kept = tuple(r for r in x.src[1:] if r in used)
  return UOp(Ops.REDUCE, x.dtype, (val,) + kept, x.arg) if kept else val

# ***** gathers: a reduce over a one-hot select is one load *****

def _conjuncts(x: UOp) -> list[UOp]: return [c for s in x.src for c in _conjuncts(s)] if x.op is Ops.AND else [x]

def _is_zero(x: UOp) -> bool:
  return x.op is Ops.CONST and x.arg == 0 and not (isinstance(x.arg, float) and math.copysign(1.0, x.arg) < 0)

def _solve_for(cmp: UOp, r: UOp) -> tuple[UOp, UOp] | None:
  """cmp is `r == e` (either side, r maybe through int casts that keep its values) with e free of r: (e in r's dtype,
  0 <= e < n). The bounds are checked in a dtype that holds every value of e and n, so a wide index can't wrap into
  the range; e itself may then wrap when it is out of range, where nothing reads it (the result and the loads are
  gated by the bounds)."""
  n = r.src[0]
  for side, other in ((cmp.src[0], cmp.src[1]), (cmp.src[1], cmp.src[0])):
    while side.op is Ops.CAST and side.dtype in ints and side.src[0].dtype in ints and fits(r.vmin, r.vmax, side.dtype):
      side = side.src[0]
    if side is not r or other.dtype not in ints or r in other.toposort(): continue
    if fits(other.vmin, other.vmax, r.dtype): e = other.cast(r.dtype)
    elif fits(0, sym_max(n), other.dtype): e, n = other, n.cast(other.dtype)  # type: ignore[arg-type]  # n: a UOp
    else: continue
    return e.cast(r.dtype), (e < 0).logical_not() & (e < n)
  return None

def _gate_loads(x: UOp, r: UOp, valid: UOp) -> UOp:
  """x with every load whose address or gate depends on r gated by valid too: once r becomes a loaded index, an index
  out of range must read nothing (a select would still run the load, reading past the buffer)."""
  subs = {u: UOp(Ops.LOAD, u.dtype, u.src[:2] + ((u.src[2] & valid) if len(u.src) == 3 else valid,))
          for u in x.toposort() if u.op is Ops.LOAD and any(r in s.toposort() for s in u.src[1:])}
  return x.substitute(subs) if subs else x

def gather_fold_rule(x: UOp) -> UOp | None:
  """sum over r of where(r == e & c(r), v(r), 0) is where(0 <= e < n & c(e), v(e), 0): the one-hot reduction that
  X[idx] builds (and embeddings) becomes one load per output element instead of a loop over every row. Also max over
  r of a one-hot of unsigned values (any() of bools: where(..) is an AND, cast to uint8), whose other terms are the
  max's identity 0. Exact: the reduce adds (or maxes) one value to zeros. The loads it moves get the range as a gate."""
  if x.arg not in (Ops.ADD, Ops.MAX) or x.dtype.count > 1: return None
  val, cast = x.src[0], None
  if val.op is Ops.CAST and val.src[0].op in (Ops.WHERE, Ops.AND): val, cast = val.src[0], val.dtype
  if x.arg is Ops.MAX and not (dtypes.is_unsigned(x.dtype) or x.dtype is dtypes.bool): return None
  if val.op is Ops.WHERE and _is_zero(val.src[2]): conds, value = _conjuncts(val.src[0]), val.src[1]
  elif val.op is Ops.AND and val.dtype is dtypes.bool: conds, value = _conjuncts(val), UOp.const(dtypes.bool, True)
  elif val.op is Ops.MUL and x.arg is Ops.ADD and (hot := next((s for s in val.src if s.op is Ops.CAST and
                                                                 s.src[0].dtype is dtypes.bool), None)) is not None:
    # a one-hot as numbers times a value (an embedding's one_hot.cast(float) @ table): rows other than e add 0 * v(r),
    # so a nan or inf there no longer spreads to every output (it doesn't in torch's embedding either)
    conds, value = _conjuncts(hot.src[0]), val.src[1] if val.src[0] is hot else val.src[0]
  else: return None
  for r in x.src[1:]:
    for c in conds:
      if c.op is Ops.CMPEQ and (sol := _solve_for(c, r)) is not None: break
    else: continue
    e, valid = sol
    rest = [cc for cc in conds if cc is not c]
    out = functools.reduce(lambda a, b: a & b, rest, valid).where(value, value.const_like(0))
    out = _gate_loads(out, r, valid).substitute({r: e})
    out = out.cast(cast) if cast is not None else out
    others = tuple(rr for rr in x.src[1:] if rr is not r)
    return UOp(Ops.REDUCE, x.dtype, (out,) + others, x.arg) if others else out
  return None

def narrow_after_rule(x: UOp, a: UOp, b: UOp) -> UOp | None:
  """cast(a) + cast(b) -> cast(a + b) (and *) for ints cast down from one dtype: both wrap modulo the narrow width, so
  the result is the same. An index from two arange halves, (r // B) * B + r % B, is computed in int32 while a kernel
  too big for int32 indexes in int64: this brings the halves together, where the sum folds back to r.
  Only where a + b (a * b) never leaves the wide dtype: C leaves signed overflow undefined, so moving a uint32
  multiply that wraps (a hash's cast(i) * 0x7FEB352D) into int32 let gcc assume the loop index stays tiny (the rand
  kernel segfaulted)."""
  w = a.src[0].dtype
  if is_vec(x) or w not in ints or w.itemsize < x.dtype.itemsize: return None
  if b.op is Ops.CONST:
    if not fits(b.arg, b.arg, w): return None
    bw = UOp.const(w, b.arg)
  elif b.op is Ops.CAST and b.src[0].dtype is w: bw = b.src[0]
  else: return None
  (a0, a1), (b0, b1) = a.src[0].vmin_vmax, bw.vmin_vmax
  ends = (a0 + b0, a1 + b1) if x.op is Ops.ADD else (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
  if not fits(min(ends), max(ends), w): return None
  return UOp(x.op, w, (a.src[0], bw)).cast(x.dtype)

def _where_of_gated_load(g: UOp, ld: UOp) -> UOp | None:
  # where(g, load(.., gate g), 0): the load already reads 0 where g is false
  return ld if len(ld.src) == 3 and set(_conjuncts(g)) <= set(_conjuncts(ld.src[2])) else None

pm_gather_fold = PatternMatcher([
  (UPat(Ops.REDUCE, name="x"), gather_fold_rule),
  (UPat((Ops.ADD, Ops.MUL), dtype=ints, name="x", src=(UPat(Ops.CAST, dtype=ints, name="a"), UPat.var("b"))),
   narrow_after_rule),
  (UPat(Ops.WHERE, src=(UPat.var("g"), UPat(Ops.LOAD, name="ld"), UPat.cvar("z"))),
   lambda g, ld, z: _where_of_gated_load(g, ld) if _is_zero(z) else None),
])

def _plus_zero(c: UOp) -> bool: return c.arg == 0 and math.copysign(1.0, c.arg) > 0

def _fold_zero_add(inner: UOp, c: UOp) -> UOp | None:
  """(x + 0.0) + 0.0 is x + 0.0, bit for bit: a sum can't be -0.0 after +0.0 is added (only -0.0 changes, to +0.0,
  and NaN stays NaN), so the second add does nothing. x + 0.0 itself stays (it turns -0.0 into +0.0). A masked load
  summed with its neighbours whose masks fold to false leaves such chains: 468 of the 1943 lines of MNIST's biggest
  conv kernel were one."""
  return inner if _plus_zero(c) and any(s.op is Ops.CONST and _plus_zero(s) for s in inner.src) else None

pm_lowered = PatternMatcher([
  (UPat(Ops.ADD, dtype=dtypes.floats, src=(UPat(Ops.ADD, name="inner"), UPat.cvar("c"))), _fold_zero_add),
  (UPat(Ops.LOAD, name="x"), _fold_gate),
  (UPat(Ops.STORE, name="x"), _fold_store_gate),
  (UPat(Ops.REDUCE, name="x"), _drop_unused_ranges),
])

# what lowering ends with: index math simplified, gates folded, unused reduce loops dropped, gathers folded (built once:
# adding tables makes a new one)
pm_simplify_lowered = symbolic + pm_lowered + pm_gather_fold

def _reduce_in_float32(x: UOp) -> UOp | None:
  """A reduce over half, bfloat16 or fp8 accumulates in float32 and rounds once after its loop, on every device: the
  C and LLVM renderers hold bfloat16 and fp8 as their bits (an accumulator of bits would add bit patterns), and a
  half accumulator stops growing (a half sum of 4096 ones is 2048)."""
  d = x.dtype.scalar()
  if not dtypes.is_float(d) or d.itemsize >= 4: return None
  f32 = dtypes.float32.vec(x.dtype.count)
  return UOp(Ops.REDUCE, f32, (x.src[0].cast(f32),) + x.src[1:], x.arg).cast(x.dtype)
pm_reduce_acc = PatternMatcher([(UPat(Ops.REDUCE, name="x"), _reduce_in_float32)])
