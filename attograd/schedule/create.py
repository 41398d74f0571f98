"""The whole schedule: a graph normalized (realized nodes replaced by their buffers, buffers by numbered placeholders,
bound Variables by the Variables), looked up in the schedule cache or cut into kernels (schedule/kernels.py), then
bound to real buffers, with its intermediates placed by the memory plan (schedule/memory.py)."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any
from attograd.engine import multi
from attograd.engine.buffers import buffers, new_buffer_uop
from attograd.engine.item import ScheduleItem
from attograd.helpers import prod
from attograd.schedule.fusion import fuse_graph
from attograd.schedule.kernels import _region_of, build_kernel_ast, find_kernel_roots
from attograd.schedule.memory import placeholder_bytes, plan_schedule
from attograd.schedule.realized import lookup_realized, remember, remember_weakly
from attograd.schedule.tuning import tune_graph
from attograd.uop.ops import GroupOp, Ops, UOp, UOpMetaClass, new_uop, sint, sym_max
from attograd.uop.state import BUFFER, PURE, REALIZED, slots
from attograd.uop.variables import SIZED, ast_variables, bind_size, map_arg, note_value, sym_arg, unbind_size

@dataclass(frozen=True)
class _Template:
  """A schedule over placeholder buffers: inputs are BUFFERs with arg (-k-1, size), new ones (-(k+1)-NEW, size)."""
  items: tuple[tuple[UOp, tuple[UOp, ...], tuple[UOp, ...]], ...]  # (ast, buffers, variables)
  new_bufs: tuple[UOp, ...]                   # placeholders to allocate, in order
  becomes: tuple[UOp | None, ...]             # per output: its new home (over placeholders)
  realized_roots: tuple[tuple[UOp, UOp], ...] # intermediate roots (normalized) -> their home
  assign_targets: tuple[UOp, ...] = ()        # buffers written in place
  inter_bytes: int = 0                        # the intermediates' bytes: below POOL_MIN_BYTES they are not pooled
  # the memory plans made for it, by the set of placeholders that were free to pool (schedule/memory.py)
  plans: dict[frozenset[UOp], Any] = field(default_factory=dict, compare=False, hash=False)

_NEW = 1 << 40
_schedule_cache: dict[tuple[UOp, ...], _Template] = {}

# a node built only from these over constants needs no normalizing (nor a walk below it) in any graph: its value
# doesn't depend on any buffer or Variable, so even a realized copy of it may be recomputed in place
_PURE = {Ops.CONST, Ops.DEVICE, Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP,
         Ops.CAST} | GroupOp.ALU

# ops that _normalize rebuilds over normalized sources with nothing else to do (not a BUFFER, marker, BIND, sized
# movement op or numbered CONTIGUOUS): _visit's first test, for the most common nodes
_PLAIN = frozenset(GroupOp.ALU) - {Ops.BUFFER, Ops.BIND, Ops.CONTIGUOUS, *GroupOp.Marker, *SIZED}

# _normalize recurses while a graph is shallower than this (a Python call per node is cheaper than an explicit stack's
# pushes and pops), and walks deeper parts with an explicit stack: graphs may be 100k nodes deep
_MAX_DEPTH = 400

class _Normalizing:
  """The state of one _normalize pass. (A class, not closures: recursive closures are a reference cycle, which would
  keep the graph, and its buffers, alive until the garbage collector runs.)"""
  __slots__ = ("inputs", "var_vals", "norm", "orig", "n_unique")
  def __init__(self) -> None:
    self.inputs: list[tuple[UOp, UOp]] = []  # (placeholder, real BUFFER)
    self.var_vals: dict[UOp, int] = {}
    self.norm: dict[UOp, UOp] = {}  # original node -> normalized node
    self.orig: dict[UOp, UOp] = {}  # normalized node -> original node
    self.n_unique = 0

def _normalize(outs: list[UOp]) -> tuple[list[UOp], list[tuple[UOp, UOp]], dict[UOp, UOp], dict[UOp, int]]:
  """One pass that resolves realized nodes to their buffers and replaces every BUFFER by a numbered placeholder,
  so that graphs of the same structure get the same (hash-consed) nodes. Bound Variables become the Variables
  themselves, so a graph differing only in the values of its Variables is the same graph too. Returns the normalized
  outputs, (placeholder, real buffer) pairs, normalized node -> original node, and the Variables' values."""
  st = _Normalizing()
  try: nouts = [_visit(o, 0, st) for o in outs]
  except RecursionError:  # called from deep in the caller's own recursion: the rest with the explicit stack (the walk
    nouts = [_walk(o, st) for o in outs]  # goes the same way and skips what is done, so the numbering is the same)
  return nouts, st.inputs, st.orig, st.var_vals

def _visit(n: UOp, depth: int, st: _Normalizing) -> UOp:
  """n normalized, its sources first, in order (placeholders are numbered by first appearance)."""
  if (nn := (norm := st.norm).get(n)) is not None: return nn
  if PURE in (d := slots(n)):  # constants through movement and ALU ops: the same node in every graph
    norm[n] = st.orig[n] = n
    return n
  # its value is in a buffer: use that view instead
  if REALIZED in d and (r := lookup_realized(n)) is not None and r is not n:
    nn = norm[n] = _visit(r, depth + 1, st)
    return nn
  if depth > _MAX_DEPTH: return _walk(n, st)
  if (op := n.op) not in _PLAIN:
    for s in n.src:
      if s not in norm: _visit(s, depth + 1, st)
    if op is Ops.CUSTOM_GRAD:  # (_rebuild's marker case, inline: relu's gradient marker is on many graphs' paths)
      nn = norm[n] = norm[n.src[0]]
      st.orig[n] = n
      return nn
    return _rebuild(n, st)
  # ALU ops and the like (most nodes): the same node over the normalized sources (_rebuild's last case, inline), the
  # sources visited and collected in one pass, in order (placeholders are numbered by first appearance). No list
  # comprehension (in this Python a call of its own, per node), and a constant source (a scalar operand, the most
  # common one) noted here without _visit's call
  src = n.src
  srcs: tuple[UOp, ...]
  if len(src) == 2:
    a, b = src
    if (na := norm.get(a)) is None: na = _visit(a, depth + 1, st)
    if (nb := norm.get(b)) is None:
      if PURE in slots(b): nb = norm[b] = st.orig[b] = b
      else: nb = _visit(b, depth + 1, st)
    srcs = (na, nb)
  else:
    found = []
    for s in src: found.append(x if (x := norm.get(s)) is not None else _visit(s, depth + 1, st))
    srcs = tuple(found)
  if srcs == src:
    nn = n
    if op in _PURE and all(PURE in slots(x) for x in srcs): d[PURE] = True
  # the node over placeholders is in the hash-consing table from the graph's first schedule (the cached key holds it):
  # found there directly, without new_uop's calls (a float arg needs new_uop's own key)
  elif (arg := n.arg).__class__ is float or (ref := _ucache_get((op, n.dtype, srcs, arg))) is None or \
       (nn := ref()) is None:
    nn = new_uop(op, n.dtype, srcs, arg)
  norm[n] = nn
  st.orig[nn] = n
  return nn

_ucache_get = UOpMetaClass.ucache.get  # the hash-consing table's lookup, for _visit's nodes met before

def _walk(root: UOp, st: _Normalizing) -> UOp:
  """_visit(root) with an explicit stack, for deep graphs: (node, 0) first seen, (node, 1) its sources done,
  (node, 2) a realized node whose view (pushed after it) is done."""
  norm = st.norm
  stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
  pop, push = stack.pop, stack.append
  while stack:
    n, state, alias = pop()
    if n in norm: continue
    if state == 0:
      if PURE in (d := slots(n)):
        norm[n] = st.orig[n] = n
        continue
      if REALIZED in d and (r := lookup_realized(n)) is not None and r is not n:
        push((n, 2, r))
        push((r, 0, None))
        continue
      push((n, 1, None))
      for s in reversed(n.src):
        if s not in norm: push((s, 0, None))
    elif state == 2: norm[n] = norm[alias]  # type: ignore[index]
    else: _rebuild(n, st)
  return norm[root]

def _rebuild(n: UOp, st: _Normalizing) -> UOp:
  """n over its normalized sources (each one already in st.norm), noted in st.norm and st.orig."""
  norm, op = st.norm, n.op
  if op is Ops.BUFFER:
    nn = new_uop(Ops.BUFFER, n.dtype, n.src, (-len(st.inputs) - 1, n.arg[1]) + n.arg[2:])  # keeps the iota tag
    st.inputs.append((nn, n))
  elif op in GroupOp.Marker:  # markers for autograd only: the value is their first source's
    nn = norm[n] = norm[n.src[0]]
    # the marker is a node of the graph of its own (its sources, e.g. a custom gradient's inputs, are references the
    # graph holds, not a Tensor's), keyed by itself: it must not take its value's place in `orig`
    st.orig[n] = n
    return nn
  elif op is Ops.BIND:
    nn = n.src[0]
    note_value(n, st.var_vals)
  elif op in SIZED and sym_arg(n.arg):
    src, arg = norm[n.src[0]], map_arg(n.arg, lambda x: unbind_size(x, st.var_vals))
    if op is Ops.RESHAPE and src.op is Ops.BUFFER and -_NEW < src.arg[0] < 0:
      # a whole input buffer seen with a symbolic shape: its placeholder takes the symbolic size, so inputs of
      # every size (one per value of the Variables) give the same graph
      ph = UOp(Ops.BUFFER, src.dtype, src.src, (src.arg[0], prod(arg)))
      st.inputs.append((ph, st.inputs[-src.arg[0] - 1][1]))
      src = ph
    nn = UOp(op, n.dtype, (src,), arg)
  elif op is Ops.CONTIGUOUS and n.arg is not None:  # a unique copy: number it by appearance in this graph
    st.n_unique += 1
    # (number, opts) for a Tensor.contiguous(arg=opts): the opts are part of the graph's structure
    nn = UOp(Ops.CONTIGUOUS, n.dtype, (norm[n.src[0]],), (st.n_unique, n.arg[1]) if n.arg.__class__ is tuple else
             st.n_unique)
  else:  # any other op: the same node over the normalized sources
    srcs = tuple(map(norm.__getitem__, n.src))
    if srcs == n.src:
      nn = n
      if op in _PURE and all(PURE in slots(x) for x in srcs): slots(n)[PURE] = True
    else: nn = new_uop(op, n.dtype, srcs, n.arg)
  norm[n] = nn
  st.orig[nn] = n
  return nn

def create_schedule(outs: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """Kernels (in dependency order) that compute `outs`, and for each output, the view of its new buffer.
  The same graph structure reuses its schedule: only buffers are bound anew."""
  if multi.active[0]: return _create_multi_schedule(outs)
  nouts, inputs, orig, var_vals = _normalize(outs)
  key = tuple(nouts)
  if (tmpl := _schedule_cache.get(key)) is None:
    if len(_schedule_cache) >= 4096: _schedule_cache.pop(next(iter(_schedule_cache)))  # bounded: oldest first
    tmpl = _schedule_cache[key] = _make_template(nouts)
  # bind placeholders to real buffers: inputs by position, new buffers freshly made
  bind: dict[UOp, UOp] = dict(inputs)
  # intermediates nobody can read afterwards share storage (and are not remembered); raises if over the memory limit
  pooled = plan_schedule(tmpl, orig, outs)
  for ph in tmpl.new_bufs: bind[ph] = new_buffer_uop(ph.device, ph.arg[1], ph.dtype, pooled.get(ph))
  try:
    # (each node's Buffer read from its slot, and lists rather than generators: this runs on every realize)
    items = [ScheduleItem(ast, tuple([slots(bind[b])[BUFFER] for b in bufs]),
                          tuple([(v, var_vals[v]) for v in vs]) if vs else ())
             for ast, bufs, vs in tmpl.items]
  except KeyError:  # a kernel reads a Variable nothing bound: say which, instead of a bare KeyError
    free = sorted({v.arg[0] for _, _, vs in tmpl.items for v in vs if v not in var_vals})
    if not free: raise
    raise _unbound_error(free) from None
  for ph in tmpl.assign_targets: buffers[bind[ph]].version += 1
  # a result stays valid while neither its buffer nor any buffer it was computed from is written again
  deps = tuple([(buf, buf.version) for _, u in inputs if (buf := slots(u).get(BUFFER)) is not None])
  becomes: dict[UOp, UOp] = {}
  # a node the normalize pass kept as it was (a graph of constants: nothing to number) is part of the cached key, which
  # outlives the tensor: its memo must not keep the result's buffer alive after the tensor is gone
  for o, no, home in zip(outs, nouts, tmpl.becomes):
    becomes[o] = b = o if home is None else bind.get(home, home) if home.op is Ops.BUFFER else \
      _rebind(home, bind, var_vals)
    if b is not o:
      remember(o, b, deps)
      if no is o: remember_weakly(o)
  for r, home in tmpl.realized_roots:
    if (orig_r := orig.get(r)) is not None and home.base not in pooled:
      remember(orig_r, _rebind(home, bind, var_vals), deps)
      if orig_r is r: remember_weakly(orig_r)
  return items, becomes

def _create_multi_schedule(outs: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """Graphs over several devices (engine/multi.py) lowered to one graph per device, scheduled together; an output
  over several devices becomes a MULTI of its shards' new homes."""
  lowered = multi.lower(outs)
  flat = list(dict.fromkeys(s for lo in lowered for s in (lo.src if lo.op is Ops.MULTI else (lo,))))
  multi.active[0] = False  # the per-device graphs hold no MULTI: schedule them the ordinary way
  try: items, becomes = create_schedule(flat)
  finally: multi.active[0] = True
  homes = {o: UOp(Ops.MULTI, o.dtype, tuple(becomes[s] for s in lo.src), lo.arg) if lo.op is Ops.MULTI else becomes[lo]
           for o, lo in zip(outs, lowered)}
  return items, homes

def _unbound_error(names: list[str]) -> RuntimeError:
  return RuntimeError(f"realize: Variable {', '.join(map(repr, names))} is unbound: a kernel needs its value; "
                      "use Variable(...).bind(value) where the tensor is built")

def _rebind(u: UOp, bind: dict[UOp, UOp], var_vals: dict[UOp, int]) -> UOp:
  """A view chain over a placeholder, over the real buffer instead (and its symbolic sizes bound again)."""
  if u.op is Ops.BUFFER: return bind.get(u, u)
  if u.op is Ops.DEFINE_VAR:
    if u not in var_vals: raise _unbound_error([u.arg[0]])
    return u.bind(var_vals[u])
  arg = map_arg(u.arg, lambda x: bind_size(x, var_vals)) if u.op in SIZED and sym_arg(u.arg) else u.arg
  return UOp(u.op, u.dtype, tuple(_rebind(s, bind, var_vals) for s in u.src), arg)

def _make_template(routs: list[UOp]) -> _Template:
  # shapes and devices of the normalized nodes, sources first (no deep recursion; a schedule-cache hit needs none)
  for u in (topo := _topo_of(routs)): _ = u.shape, u.device
  # the fusion rules (a permute or shrink of a reduce pushed into its input), then the tuning rules (a long reduce split
  # in two stages): `stands_for` maps a rebuilt node back to the node of the normalized graph whose value it holds,
  # the one a later graph will look up
  routs, topo, fused_from = fuse_graph(routs, topo)
  routs, stands_for = tune_graph(routs, topo)
  if fused_from: stands_for = {**fused_from, **{n: fused_from.get(o, o) for n, o in stands_for.items()}}
  roots = find_kernel_roots(routs)
  node_buffer: dict[UOp, UOp] = {}
  new_bufs: list[UOp] = []
  for r in roots:
    if r.op is Ops.ASSIGN:
      tgt = r.src[0].base
      if tgt.op is not Ops.BUFFER: raise RuntimeError("assign: the target must be a realized tensor")
      node_buffer[r] = tgt
    else:
      # a symbolic shape gets room for the largest value of its Variables (one buffer serves every value)
      ph = UOp(Ops.BUFFER, r.dtype, (UOp(Ops.DEVICE, arg=r.device),), (-_NEW - len(new_bufs), sym_max(prod(r.shape))))
      new_bufs.append(ph)
      node_buffer[r] = ph
  # order roots: a kernel runs after the kernels that produce its inputs
  order: list[UOp] = []
  for n in _topo_of(routs):
    if n in roots: order.append(n)
  items: list[tuple[UOp, tuple[UOp, ...], tuple[UOp, ...]]] = []  # (ast, buffers, variables)
  for r in order:
    if (n := prod(r.shape)).__class__ is int and n == 0: continue  # nothing to compute or copy: its buffer is empty
    if r.op is Ops.COPY:
      src = r.src[0]
      while src.op is Ops.RESHAPE: src = src.src[0]  # reshapes of a whole buffer are the same bytes
      src_buf = node_buffer.get(src, src)
      if src_buf.op is not Ops.BUFFER: raise RuntimeError("internal: COPY source must be a whole realized buffer")
      items.append((r, (node_buffer[r], src_buf), ()))
      continue
    ast, ins = build_kernel_ast(r, roots, node_buffer)
    items.append((ast, tuple([node_buffer[r]] + ins), ast_variables(ast)))
  # each output's new home: its buffer, viewed with its shape
  becomes: list[UOp | None] = []
  for ro in routs:
    if ro in node_buffer and ro.op is not Ops.ASSIGN: becomes.append(_view_of(node_buffer[ro], ro.shape))
    elif ro.op is Ops.ASSIGN and _region_of(ro.src[0], ro.shape) is not None: becomes.append(ro.src[0])  # the region
    elif ro.base in node_buffer: becomes.append(_apply_movements(ro, node_buffer))
    else: becomes.append(ro)  # already a view of a buffer (or a constant): its resolved form
  realized_roots = tuple((o, _view_of(node_buffer[r], o.shape)) for r in roots
                         if r not in routs and r.op is not Ops.ASSIGN for o in (stands_for.get(r, r),))
  targets = tuple(dict.fromkeys(node_buffer[r] for r in roots if r.op is Ops.ASSIGN))
  inter = sum(placeholder_bytes(h.base) for _, h in realized_roots)
  return _Template(tuple(items), tuple(new_bufs), tuple(becomes), realized_roots, targets, inter)

def _view_of(buf: UOp, shape: tuple[sint, ...]) -> UOp:
  if shape == (buf.arg[1],): return buf
  if (n := prod(shape)).__class__ is not int:  # the first n elements of a buffer sized for the largest n
    buf = UOp(Ops.SHRINK, buf.dtype, (buf,), ((0, n),))
  return UOp(Ops.RESHAPE, buf.dtype, (buf,), shape)

def _apply_movements(u: UOp, node_buffer: dict[UOp, UOp]) -> UOp:
  """Rebuild the movement ops over a node that now lives in a buffer."""
  chain = []
  while u.op in GroupOp.Movement:
    chain.append(u)
    u = u.src[0]
  out = _view_of(node_buffer[u], u.shape)
  for m in reversed(chain): out = UOp(m.op, m.dtype, (out,), m.arg)
  return out

def _topo_of(outs: list[UOp]) -> list[UOp]:
  topo: dict[UOp, None] = {}
  for o in outs: topo.update(o.toposort())
  return list(topo)
