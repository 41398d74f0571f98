"""The scheduler: cuts a tensor graph into kernels (fusion decisions) and writes each kernel as an AST
whose movement ops have been pushed into the views of its loads."""
from __future__ import annotations
import functools, weakref
from dataclasses import dataclass
from typing import Any
from attograd.dtype import DType, dtypes
from attograd.device import Buffer
from attograd.helpers import prod
from attograd.uop.ops import BindMismatchError, GroupOp, Ops, UOp, sint, ssimp, sym_max
from attograd.uop.view import ShapeTracker
from attograd.engine.memory import plan_schedule
from attograd.engine import multi

class _BufferTable:
  """BUFFER node -> its Buffer, kept on the node itself: it lives exactly as long as the node, and a lookup is one
  dict access (a WeakKeyDictionary makes a weakref per lookup, which showed up in per-realize overhead)."""
  def __getitem__(self, u: UOp) -> Buffer:
    if (b := u.__dict__.get("buffer")) is None: raise KeyError(f"{u.op} has no Buffer")
    return b
  def get(self, u: UOp, default: Buffer | None = None) -> Buffer | None: return u.__dict__.get("buffer", default)
  def __setitem__(self, u: UOp, b: Buffer) -> None: u.__dict__["buffer"] = b
  def __contains__(self, u: UOp) -> bool: return "buffer" in u.__dict__

# realized buffers: each BUFFER UOp (one per buffer version) points at its Buffer
buffers = _BufferTable()
# A realized node remembers, on itself, the view of the BUFFER now holding its value and that buffer's version then:
# the memo lives exactly as long as the node, and looking it up is one dict access (no weakref per lookup).

def remember(node: UOp, view: UOp, deps: tuple[tuple[Buffer, int], ...] = ()) -> None:
  """node's value now lives in view's buffer, until that buffer or one of `deps` (the buffers it was computed from,
  with their versions then) is written in place."""
  b = buffers.get(view.base)
  node.__dict__["_realized"] = (view, b.version if b is not None else 0, deps)

def remember_weakly(node: UOp) -> None:
  """node's memo keeps its view only while something else does: for a view that remembers node as its graph (its
  _origin), a strong memo would close a reference cycle (node -> view -> node) that keeps a training step's
  buffers alive until the garbage collector runs, so the next step got fresh, page-faulting memory."""
  if (m := node.__dict__.get("_realized")) is not None and m[0].__class__ is not weakref.ref:
    node.__dict__["_realized"] = (weakref.ref(m[0]),) + m[1:]

def lookup_realized(node: UOp) -> UOp | None:
  if (m := node.__dict__.get("_realized")) is None: return None
  if m[0].__class__ is weakref.ref:
    if (v := m[0]()) is None:  # the view is gone, and with it the value
      del node.__dict__["_realized"]
      return None
    m = (v,) + m[1:]
  b = buffers.get(m[0].base)
  if (b is not None and m[1] != b.version) or any(d.version != v for d, v in m[2]):  # written in place since: stale
    del node.__dict__["_realized"]
    return None
  # a schedule made but never run (create_schedule alone, as tests and tools do) left its buffers unallocated
  if b is not None and b._buf is None and b.size: return None
  return m[0]

_uid = 0
# a BUFFER arg's optional third element: the buffer holds 0..size-1 and is never written (Tensor.arange's), so kernels
# compute its values from their index math (Ops.IOTA) instead of loading them
IOTA_TAG = "iota"

def new_buffer_uop(device: str, size: int, dtype: DType, buf: Buffer | None = None, iota: bool = False) -> UOp:
  """A fresh BUFFER node (its own identity) backed by `buf` or a new Buffer."""
  global _uid
  _uid += 1
  u = UOp(Ops.BUFFER, dtype, (UOp(Ops.DEVICE, arg=device),), (_uid, size, IOTA_TAG) if iota else (_uid, size))
  buffers[u] = buf if buf is not None else Buffer(device, size, dtype)
  return u

@dataclass(frozen=True)
class ScheduleItem:
  ast: UOp                       # SINK of STOREs (a kernel) or COPY
  bufs: tuple[Buffer, ...]       # outputs first, then inputs, in DEFINE_GLOBAL order
  var_vals: tuple[tuple[UOp, int], ...] = ()

# ***** 1. replace already-realized nodes by their buffers (without walking below them) *****

def resolve(roots: list[UOp]) -> dict[UOp, UOp]:
  """Map every node reachable from `roots` to its current form, with realized subgraphs cut off."""
  done: dict[UOp, UOp] = {}
  stack: list[tuple[UOp, bool]] = [(r, False) for r in roots]
  while stack:
    n, visited = stack.pop()
    if n in done: continue
    if (r := lookup_realized(n)) is not None and not visited:
      done[n] = r
      continue
    if visited:
      src = tuple(done[s] for s in n.src)
      if n.op in GroupOp.Marker: done[n] = src[0]  # markers for autograd only
      elif all(a is b for a, b in zip(src, n.src)): done[n] = n
      else:
        done[n] = nn = UOp(n.op, n.dtype, src, n.arg)
        _ = nn.shape, nn.device
    else:
      stack.append((n, True))
      stack.extend((s, False) for s in n.src if s not in done)
  return done

# ***** 2. decide which nodes get their own buffer *****

def _is_leaf(u: UOp) -> bool: return u.op in (Ops.BUFFER, Ops.CONST, Ops.DEVICE, Ops.DEFINE_VAR, Ops.BIND)

def find_kernel_roots(outs: list[UOp]) -> dict[UOp, None]:
  """The nodes that must be materialized: outputs, CONTIGUOUS/COPY/ASSIGN, and reduces that can't fuse with their
  users."""
  topo: dict[UOp, None] = {}
  for o in outs: topo.update(o.toposort())
  roots: dict[UOp, None] = {}
  for u in topo:
    if u.op in (Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN): roots[u] = None
    if u.op in (Ops.COPY, Ops.ASSIGN):  # their sources are materialized first
      if not _is_leaf(u.src[0].base): roots[u.src[0].base] = None
  for o in outs:
    if not _is_leaf(o.base): roots[o.base] = None
  # a reduce fuses into one consumer kernel, reached only through reshapes, and not below another reduce
  changed = True
  while changed:
    changed = False
    users: dict[UOp, set[UOp]] = {}
    for r in list(roots):
      for red, ok in _reduces_in_kernel(r, roots):
        users.setdefault(red, set()).add(r)
        if not ok and red not in roots:
          roots[red] = None
          changed = True
    for red, rs in users.items():
      if len(rs) > 1 and red not in roots:
        roots[red] = None
        changed = True
  return roots

# ops whose value at all-zero inputs is not zero: a PAD above them can't be pushed down to their loads (the padded
# region would hold f(0), and integer division there would trap), so they get their own buffer instead
_PAD_UNSAFE = {Ops.EXP2, Ops.LOG2, Ops.RECIP, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.CMPEQ, Ops.POW}

def _reduces_in_kernel(root: UOp, roots: dict[UOp, None]) -> list[tuple[UOp, bool]]:
  """(node, can fuse here) for every reduce inside `root`'s kernel, and for every pad-unsafe op below a PAD."""
  out: list[tuple[UOp, bool]] = []
  seen: set[tuple[UOp, bool, bool, bool, bool]] = set()
  signature: list[tuple[Any, ...]] = []
  stack = [(root.src[0] if root.op is Ops.CONTIGUOUS else root, True, False, False, False)]
  if root.op in (Ops.ASSIGN,): stack = [(root.src[1], True, False, False, False)]
  while stack:
    n, only_reshapes, below_reduce, padded, expanded = stack.pop()
    if (n, only_reshapes, below_reduce, padded, expanded) in seen: continue
    seen.add((n, only_reshapes, below_reduce, padded, expanded))
    if n is not root and (n in roots or _is_leaf(n)): continue
    if expanded and n.op in GroupOp.Elementwise and (costly := _costly(n, roots))[0]:
      # read through an EXPAND inside a reduce, each element would be recomputed for every output it feeds
      out.append((n, False))
      out.extend((r, False) for r in costly[1])
      continue
    if n.op is Ops.REDUCE_AXIS:
      sig = (n.src[0].shape, n.arg[1])
      ok = only_reshapes and not below_reduce and (not signature or signature[0] == sig)
      out.append((n, ok))
      if not ok: continue
      if not signature: signature.append(sig)
      stack.append((n.src[0], True, True, False, False))
      continue
    if padded and n.op in _PAD_UNSAFE:
      out.append((n, False))
      continue
    if n.op in (Ops.COPY,): continue
    keeps = only_reshapes and n.op not in GroupOp.Movement or n.op is Ops.RESHAPE and only_reshapes
    grows = n.op is Ops.EXPAND and below_reduce and any(a == 1 and b != 1 for a, b in zip(n.src[0].shape, n.shape))
    for s in n.src: stack.append((s, keeps, below_reduce, padded or n.op is Ops.PAD, expanded or grows))
  return out

def _is_cat(u: UOp) -> bool:
  """A sum of padded pieces that don't overlap (what cat and stack build): each element reads one piece, so the adds
  cost nothing once the kernel unrolls the axis that selects the piece. Overlapping pads (a scatter-add) do cost."""
  if u.op is not Ops.ADD: return False
  pieces: list[UOp] = []
  stack = list(u.src)
  while stack:
    x = stack.pop()
    if x.op is Ops.ADD: stack.extend(x.src)
    elif x.op is Ops.PAD: pieces.append(x)
    else: return False
  def region(p: UOp) -> list[tuple[int, int]]: return [(b, n - a) for (b, a), n in zip(p.arg, p.shape)]
  regions = [region(p) for p in pieces]
  return all(any(r1[ax][1] <= r2[ax][0] or r2[ax][1] <= r1[ax][0] for ax in range(len(r1)))
             for i, r1 in enumerate(regions) for r2 in regions[i + 1:])

def _costly(n: UOp, roots: dict[UOp, None], limit: int = 3) -> tuple[bool, list[UOp]]:
  """Worth a buffer rather than recomputing per use: more than `limit` ALU ops below n inside this kernel, or more
  than one when n is no bigger than its inputs (relu(x + b) feeding a conv: a scalar add, compare and select per
  load otherwise, about a third of the weight gradient's time). A value computed on a grown view (a conv's
  unfolded windows) stays fused at that size: its buffer would hold every window. In that second case the reduces
  below n come back too: they get their own buffers rather than fusing into n's kernel, where nothing else could
  read them (the conv that produced x, which the activation's gradient reads again)."""
  count, stack, seen, biggest, reduces = 0, [n], set(), 0, []
  while stack:
    u = stack.pop()
    if u in seen: continue
    seen.add(u)
    if u is not n and (u in roots or _is_leaf(u)):
      biggest = max(biggest, _numel(u.shape))
      continue
    if u.op in GroupOp.ALU and not _is_cat(u):
      count += 1
      if count > limit: return True, []
    if u.op is Ops.REDUCE_AXIS:  # a leaf here: its cost is the reduce's own kernel, not a per-load recompute
      biggest = max(biggest, _numel(u.shape))
      reduces.append(u)
      continue
    stack.extend(u.src)
  return (True, reduces) if count > 1 and _numel(n.shape) <= biggest else (False, [])

def _numel(shape: tuple[sint, ...]) -> int: return prod(sym_max(s) for s in shape)

# ***** 3. write each kernel as an AST with views at the leaves *****

Chain = tuple[tuple[Ops, Any], ...]

def build_kernel_ast(root: UOp, roots: dict[UOp, None], node_buffer: dict[UOp, UOp]) -> tuple[UOp, list[UOp]]:
  """The kernel computing `root` into its buffer: SINK(STORE(out, VIEW, value)), and the BUFFER nodes it reads."""
  value_root = root.src[0] if root.op is Ops.CONTIGUOUS else (root.src[1] if root.op is Ops.ASSIGN else root)
  out_shape = root.shape
  reduces = [r for r, ok in _reduces_in_kernel(root, roots) if ok and r.op is Ops.REDUCE_AXIS]
  kshape = reduces[0].shape if reduces else out_shape
  inputs: dict[UOp, int] = {}
  out_buf = node_buffer[root]
  # a chain lists movement ops nearest-the-leaf first; the kernel's loop space is the reduce's output shape
  root_chain: Chain = ((Ops.RESHAPE, kshape),) if kshape != out_shape else ()
  memo: dict[tuple[UOp, Chain], UOp] = {}
  stack: list[tuple[UOp, Chain, bool]] = [(value_root, root_chain, False)]
  while stack:
    n, chain, visited = stack.pop()
    key = (n, chain)
    if key in memo: continue
    # leaves: realized buffers (through movement ops), consts and variables
    leaf = n if n.op is Ops.BUFFER else (node_buffer.get(n) if n is not root else None)
    if leaf is not None or n.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND):
      st = ShapeTracker.from_shape(n.shape)
      for op, arg in chain: st = st.apply(op, arg)
      view = UOp(Ops.VIEW, dtypes.void, (), st.simplify())
      if leaf is not None and leaf.arg[2:] == (IOTA_TAG,) and leaf is not out_buf:
        memo[key] = UOp(Ops.IOTA, leaf.dtype, (view,))  # its values are its indices: nothing to read
      elif leaf is not None:
        # an assign reading its own target uses the output pointer: two restrict pointers must not alias
        idx = 0 if leaf is out_buf else inputs.setdefault(leaf, len(inputs) + 1)
        glob = UOp(Ops.DEFINE_GLOBAL, leaf.dtype.ptr(leaf.arg[1]), (), idx)
        memo[key] = UOp(Ops.LOAD, leaf.dtype, (glob, view))
      elif n.op is Ops.CONST: memo[key] = UOp(Ops.CONST, n.dtype, (view,), n.arg)
      else: memo[key] = UOp(Ops.DEFINE_VAR, n.dtype, (), (n.src[0] if n.op is Ops.BIND else n).arg)
      continue
    if n.op in GroupOp.Movement:
      child = (n.src[0], ((n.op, n.arg),) + chain)
      if not visited:
        stack.append((n, chain, True))
        if child not in memo: stack.append((child[0], child[1], False))
      else: memo[key] = memo[child]
      continue
    if n.op is Ops.REDUCE_AXIS:
      child_key = (n.src[0], ())
      if not visited:
        stack.append((n, chain, True))
        if child_key not in memo: stack.append((n.src[0], (), False))
      else: memo[key] = UOp(Ops.REDUCE_AXIS, n.dtype, (memo[child_key],), n.arg)
      continue
    if n.op is Ops.CONTIGUOUS or n.op in GroupOp.Marker:
      if not visited:
        stack.append((n, chain, True))
        if (n.src[0], chain) not in memo: stack.append((n.src[0], chain, False))
      else: memo[key] = memo[(n.src[0], chain)]
      continue
    if not visited:
      stack.append((n, chain, True))
      stack.extend((s, chain, False) for s in n.src if (s, chain) not in memo)
    else:
      assert n.op in GroupOp.Elementwise, f"scheduler: unexpected {n.op} inside a kernel"
      memo[key] = UOp(n.op, n.dtype, tuple(memo[(s, chain)] for s in n.src), n.arg)
  value = memo[(value_root, root_chain)]
  out_st = _region_of(root.src[0], kshape) if root.op is Ops.ASSIGN else None
  out_view = UOp(Ops.VIEW, dtypes.void, (), out_st or ShapeTracker.from_shape(kshape))
  out_glob = UOp(Ops.DEFINE_GLOBAL, out_buf.dtype.ptr(out_buf.arg[1]), (), 0)
  ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out_glob, out_view, value)),))
  if ast_variables(ast):  # buffer sizes differ from value to value: leave them out so one program serves all
    ast = ast.substitute({g: g.replace(dtype=g.dtype.base.ptr()) for g in ast.toposort() if g.op is Ops.DEFINE_GLOBAL})
  return ast, list(inputs)

def _region_of(target: UOp, kshape: tuple[sint, ...]) -> ShapeTracker | None:
  """Where an ASSIGN into a view stores (a KV cache row at a symbolic position: shrink), as a view of the whole buffer
  in the kernel's loop shape; None for a whole-buffer target, which stores contiguously."""
  chain = []
  while target.op in GroupOp.Movement:
    chain.append(target)
    target = target.src[0]
  if all(m.op is Ops.RESHAPE for m in chain): return None
  st = ShapeTracker.from_shape(target.shape)
  for m in reversed(chain): st = st.apply(m.op, m.arg)
  return (st if kshape == st.shape else st.apply(Ops.RESHAPE, kshape)).simplify()

# ***** 4. the whole schedule *****

@dataclass(frozen=True)
class _Template:
  """A schedule over placeholder buffers: inputs are BUFFERs with arg (-k-1, size), new ones (-(k+1)-NEW, size)."""
  items: tuple[tuple[UOp, tuple[UOp, ...], tuple[UOp, ...]], ...]  # (ast, buffers, variables)
  new_bufs: tuple[UOp, ...]                   # placeholders to allocate, in order
  becomes: tuple[UOp | None, ...]             # per output: its new home (over placeholders)
  realized_roots: tuple[tuple[UOp, UOp], ...] # intermediate roots (normalized) -> their home
  assign_targets: tuple[UOp, ...] = ()        # buffers written in place

_NEW = 1 << 40
_schedule_cache: dict[tuple[UOp, ...], _Template] = {}

_SIZED = (Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK)

@functools.lru_cache(maxsize=8192)
def _sym_arg(arg: Any) -> bool:
  """A movement arg holding a symbolic size (cached: args are hashable tuples and few are symbolic)."""
  return any(isinstance(a, UOp) or (isinstance(a, tuple) and any(isinstance(b, UOp) for b in a)) for a in arg)

def _map_arg(arg: Any, f: Any) -> Any:
  return tuple(tuple(f(b) for b in a) if isinstance(a, tuple) else f(a) for a in arg)

def _note_value(bind: UOp, var_vals: dict[UOp, int]) -> None:
  """Collect a bound Variable's value; one graph can't bind the same Variable to two values."""
  var, val = bind.src[0], bind.src[1].arg
  if var_vals.setdefault(var, val) != val:
    raise BindMismatchError(f"bind mismatch on Variable {var.arg[0]!r}: bound to both {var_vals[var]} and {val} in one "
                            "graph; realize one of them first, or use two Variables")

def _unbind_size(x: sint, var_vals: dict[UOp, int]) -> sint:
  if not isinstance(x, UOp): return x
  subs = {}
  for b in x.toposort():
    if b.op is Ops.BIND:
      subs[b] = b.src[0]
      _note_value(b, var_vals)
  return ssimp(x.substitute(subs))

def _bind_size(x: sint, var_vals: dict[UOp, int]) -> sint:
  """Each Variable in a size bound to its value (a one-pass rebuild: a BIND holds its Variable, so a rewrite to a
  fixed point would never end)."""
  if not isinstance(x, UOp): return x
  if x.op is Ops.DEFINE_VAR: return x.bind(var_vals[x])
  return x.replace(src=tuple(_bind_size(s, var_vals) for s in x.src)) if x.src else x

# a node built only from these over constants needs no normalizing (nor a walk below it) in any graph: its value
# doesn't depend on any buffer or Variable, so even a realized copy of it may be recomputed in place
_PURE = {Ops.CONST, Ops.DEVICE, Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP,
         Ops.CAST} | GroupOp.ALU

def _normalize(outs: list[UOp]) -> tuple[list[UOp], list[tuple[UOp, UOp]], dict[UOp, UOp], dict[UOp, int]]:
  """One pass that resolves realized nodes to their buffers and replaces every BUFFER by a numbered placeholder,
  so that graphs of the same structure get the same (hash-consed) nodes. Bound Variables become the Variables
  themselves, so a graph differing only in the values of its Variables is the same graph too. Returns the normalized
  outputs, (placeholder, real buffer) pairs, normalized node -> original node, and the Variables' values."""
  inputs: list[tuple[UOp, UOp]] = []  # (placeholder, real BUFFER)
  var_vals: dict[UOp, int] = {}
  norm: dict[UOp, UOp] = {}
  orig: dict[UOp, UOp] = {}
  n_unique = [0]
  stack: list[tuple[UOp, int, UOp | None]] = [(o, 0, None) for o in reversed(outs)]
  while stack:
    n, state, alias = stack.pop()
    if n in norm: continue
    if state == 0:
      if "_pure" in n.__dict__:  # constants through movement and ALU ops: the same node in every graph
        norm[n] = orig[n] = n
        continue
      # its value is in a buffer: use that view instead
      if "_realized" in n.__dict__ and (r := lookup_realized(n)) is not None and r is not n:
        stack.append((n, 2, r))
        stack.append((r, 0, None))
        continue
      stack.append((n, 1, None))
      for s in reversed(n.src):
        if s not in norm: stack.append((s, 0, None))
      continue
    if state == 2:
      norm[n] = norm[alias]  # type: ignore[index]
      continue
    if n.op is Ops.BUFFER:
      nn = UOp(Ops.BUFFER, n.dtype, n.src, (-len(inputs) - 1, n.arg[1]) + n.arg[2:])  # keeps the iota tag
      inputs.append((nn, n))
    elif n.op in GroupOp.Marker:  # markers for autograd only: the value is their first source's
      norm[n] = norm[n.src[0]]
      # the marker is a node of the graph of its own (its sources, e.g. a custom gradient's inputs, are references the
      # graph holds, not a Tensor's), keyed by itself: it must not take its value's place in `orig`
      orig[n] = n
      continue
    elif n.op is Ops.BIND:
      nn = n.src[0]
      _note_value(n, var_vals)
    elif n.op in _SIZED and _sym_arg(n.arg):
      src, arg = norm[n.src[0]], _map_arg(n.arg, lambda x: _unbind_size(x, var_vals))
      if n.op is Ops.RESHAPE and src.op is Ops.BUFFER and -_NEW < src.arg[0] < 0:
        # a whole input buffer seen with a symbolic shape: its placeholder takes the symbolic size, so inputs of
        # every size (one per value of the Variables) give the same graph
        ph = UOp(Ops.BUFFER, src.dtype, src.src, (src.arg[0], ssimp(prod(arg))))
        inputs.append((ph, inputs[-src.arg[0] - 1][1]))
        src = ph
      nn = UOp(n.op, n.dtype, (src,), arg)
    elif n.op is Ops.CONTIGUOUS and n.arg is not None:  # a unique copy: number it by appearance in this graph
      n_unique[0] += 1
      nn = UOp(Ops.CONTIGUOUS, n.dtype, (norm[n.src[0]],), n_unique[0])
    else:
      srcs = tuple(map(norm.__getitem__, n.src))
      if srcs == n.src:
        nn = n
        if n.op in _PURE and all(x.__dict__.get("_pure") for x in srcs): n.__dict__["_pure"] = True
      else: nn = UOp(n.op, n.dtype, srcs, n.arg)
    norm[n] = nn
    orig[nn] = n
  return [norm[o] for o in outs], inputs, orig, var_vals

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
  bind: dict[UOp, UOp] = {}
  bind.update(inputs)
  # intermediates nobody can read afterwards share storage (and are not remembered); raises if over the memory limit
  pooled = plan_schedule(tmpl, orig, outs)
  for ph in tmpl.new_bufs: bind[ph] = new_buffer_uop(ph.device, ph.arg[1], ph.dtype, pooled.get(ph))
  try:
    items = [ScheduleItem(ast, tuple(buffers[bind[b]] for b in bufs), tuple((v, var_vals[v]) for v in vs))
             for ast, bufs, vs in tmpl.items]
  except KeyError:  # a kernel reads a Variable nothing bound: say which, instead of a bare KeyError
    free = sorted({v.arg[0] for _, _, vs in tmpl.items for v in vs if v not in var_vals})
    if not free: raise
    raise _unbound_error(free) from None
  for ph in tmpl.assign_targets: buffers[bind[ph]].version += 1
  # a result stays valid while neither its buffer nor any buffer it was computed from is written again
  deps = tuple((buf, buf.version) for _, u in inputs if (buf := buffers.get(u)) is not None)
  becomes: dict[UOp, UOp] = {}
  for o, home in zip(outs, tmpl.becomes):
    becomes[o] = b = o if home is None else _rebind(home, bind, var_vals)
    if b is not o: remember(o, b, deps)
  for r, home in tmpl.realized_roots:
    if (orig_r := orig.get(r)) is not None and home.base not in pooled:
      remember(orig_r, _rebind(home, bind, var_vals), deps)
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
  arg = _map_arg(u.arg, lambda x: _bind_size(x, var_vals)) if u.op in _SIZED and _sym_arg(u.arg) else u.arg
  return UOp(u.op, u.dtype, tuple(_rebind(s, bind, var_vals) for s in u.src), arg)

def _make_template(routs: list[UOp]) -> _Template:
  # shapes and devices of the normalized nodes, sources first (no deep recursion; a schedule-cache hit needs none)
  for u in _topo_of(routs): _ = u.shape, u.device
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
  realized_roots = tuple((r, _view_of(node_buffer[r], r.shape)) for r in roots
                         if r not in routs and r.op is not Ops.ASSIGN)
  targets = tuple(dict.fromkeys(node_buffer[r] for r in roots if r.op is Ops.ASSIGN))
  return _Template(tuple(items), tuple(new_bufs), tuple(becomes), realized_roots, targets)

def _view_of(buf: UOp, shape: tuple[sint, ...]) -> UOp:
  if shape == (buf.arg[1],): return buf
  if (n := ssimp(prod(shape))).__class__ is not int:  # the first n elements of a buffer sized for the largest n
    buf = UOp(Ops.SHRINK, buf.dtype, (buf,), ((0, n),))
  return UOp(Ops.RESHAPE, buf.dtype, (buf,), shape)

def ast_variables(ast: UOp) -> tuple[UOp, ...]:
  """The Variables a kernel reads: as values, and inside its views' sizes, strides and masks."""
  out: set[UOp] = set()
  for u in ast.toposort():
    if u.op is Ops.DEFINE_VAR: out.add(u)
    elif u.op is Ops.VIEW: out.update(u.arg.variables())
  return tuple(sorted(out, key=lambda v: v.arg))

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
