"""Fusion: which nodes of a graph get a buffer of their own (the rest fuse into the kernels that read them), and each
kernel written as an AST whose movement ops have been pushed into the views of its loads."""
from __future__ import annotations
import functools
from typing import Any
from attograd.dtype import dtypes
from attograd.engine.buffers import IOTA_TAG
from attograd.helpers import prod
from attograd.uop.ops import GroupOp, KernelInfo, Ops, UOp, sint, sym_max
from attograd.uop.variables import ast_variables
from attograd.uop.view import ShapeTracker

# ***** 1. decide which nodes get their own buffer *****

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
      if len(rs) > 1 and red not in roots and not _recomputed(red, rs):
        roots[red] = None
        changed = True
  return roots

# a reduce read by several kernels is computed in each of them while all those computations together read at most
# this many elements: below it a kernel launch (and a buffer written and read back) costs more than reading the input
# again (a loss's sum read by two outputs). Measured on CPU, a.sum() + b[0] and a.sum() + 2 realized together:
# 10000 elements 50 us recomputed vs 52 us with the sum's own kernel, 16384 55 vs 55, 32761 72 vs 65
RECOMPUTE_MAX = 1 << 15

def _recomputed(red: UOp, readers: set[UOp]) -> bool:
  """Whether a reduce read by several kernels is computed by each of them rather than once into its own buffer."""
  return (n := _numel(red.src[0].shape) * len(readers)) <= RECOMPUTE_MAX and len(readers) <= 4 and n > 0

# ops whose value at all-zero inputs is not zero: a PAD above them, pushed down to their loads, leaves f(0) in the
# padded region, so the kernel selects 0 there instead (build_kernel_ast's gate); an integer division by the 0 a
# padded load reads would trap, so those ops get their own buffer instead
_PAD_UNSAFE = {Ops.EXP2, Ops.LOG2, Ops.RECIP, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.CMPEQ, Ops.POW}
_PAD_TRAPS = {Ops.IDIV, Ops.MOD}

def _reduces_in_kernel(root: UOp, roots: dict[UOp, None]) -> list[tuple[UOp, bool]]:
  """(node, can fuse here) for every reduce inside `root`'s kernel, and for every op below a PAD that would trap."""
  out: list[tuple[UOp, bool]] = []
  seen: set[tuple[UOp, bool, UOp | None, bool, bool]] = set()
  signature: list[tuple[Any, ...]] = []
  # (node, reached through reshapes only, the reduce it is below, below a PAD, read through an EXPAND below a reduce)
  start: UOp = root.src[0] if root.op is Ops.CONTIGUOUS else root.src[1] if root.op is Ops.ASSIGN else root
  stack: list[tuple[UOp, bool, UOp | None, bool, bool]] = [(start, True, None, False, False)]
  while stack:
    n, only_reshapes, red, padded, expanded = item = stack.pop()
    if item in seen: continue
    seen.add(item)
    if n is not root and (n in roots or _is_leaf(n)): continue
    if expanded and n.op in GroupOp.Elementwise and (costly := _costly(n, roots, red))[0]:
      # read through an EXPAND inside a reduce, each element would be recomputed for every output it feeds
      out.append((n, False))
      out.extend((r, False) for r in costly[1])
      continue
    if n.op is Ops.REDUCE_AXIS:
      sig = (n.src[0].shape, n.arg[1])
      ok = only_reshapes and red is None and (not signature or signature[0] == sig)
      out.append((n, ok))
      if not ok: continue
      if not signature: signature.append(sig)
      stack.append((n.src[0], True, n, False, False))
      continue
    if padded and n.op in _PAD_TRAPS:
      out.append((n, False))
      continue
    if n.op in (Ops.COPY,): continue
    keeps = only_reshapes and n.op not in GroupOp.Movement or n.op is Ops.RESHAPE and only_reshapes
    grows = n.op is Ops.EXPAND and red is not None and \
      any(a == 1 and b != 1 for a, b in zip(n.src[0].shape, n.shape))
    for s in n.src: stack.append((s, keeps, red, padded or n.op is Ops.PAD, expanded or grows))
  return out

def _invariant_in(n: UOp, red: UOp, roots: dict[UOp, None]) -> bool:
  """Whether n, read inside the reduce `red` (through the movement ops on the first path from the reduce's input down
  to n), has one value along all the reduced axes: a gather's index, read once per output. Its ops don't depend on the
  reduce loop's index, so they run once per output, outside that loop, however many ops they are."""
  top = red.src[0]
  parent: dict[UOp, UOp | None] = {top: None}
  stack = [top]
  while stack:
    u = stack.pop()
    if u is n: break
    if u is not top and (u in roots or _is_leaf(u) or u.op is Ops.REDUCE_AXIS): continue
    for s in u.src:
      if s not in parent:
        parent[s] = u
        stack.append(s)
  else: return False
  st, u = ShapeTracker.from_shape(n.shape), n
  while (p := parent[u]) is not None:  # the movement ops from n up to the reduce's input, nearest n first
    if p.op in GroupOp.Movement: st = st.apply(p.op, p.arg)
    u = p
  if st.shape != top.shape: return False
  strides = st.index_strides()
  return all(strides[a] == 0 for a in red.arg[1])

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

def _costly(n: UOp, roots: dict[UOp, None], red: UOp | None = None, limit: int = 3) -> tuple[bool, list[UOp]]:
  """Worth a buffer rather than recomputing per use: more than `limit` ALU ops below n inside this kernel, or more
  than one when n is no bigger than its inputs (relu(x + b) feeding a conv: a scalar add, compare and select per
  load otherwise, about a third of the weight gradient's time). A value computed on a grown view (a conv's
  unfolded windows) stays fused at that size: its buffer would hold every window. In that second case the reduces
  below n come back too: they get their own buffers rather than fusing into n's kernel, where nothing else could
  read them (the conv that produced x, which the activation's gradient reads again). A value computed from indices
  and constants alone (argmax's N - arange) reads no memory: its few integer ops are recomputed wherever it is read.
  Below the reduce `red`, a part with one value along the reduced axes (a gather's index, _invariant_in) runs once
  per output, outside the reduce loop: it counts as a load, not as ops recomputed."""
  count, stack, seen, biggest, reduces, loads = 0, [n], set(), 0, [], False
  while stack:
    u = stack.pop()
    if u in seen: continue
    seen.add(u)
    if u is not n and (u in roots or _is_leaf(u) or (red is not None and u.op in GroupOp.ALU and
                                                     _invariant_in(u, red, roots))):
      biggest = max(biggest, _numel(u.shape))
      loads = loads or u in roots or u.op in GroupOp.ALU or (u.op is Ops.BUFFER and u.arg[2:] != (IOTA_TAG,))
      if loads and count > limit: return True, []
      continue
    if u.op in GroupOp.ALU and not _is_cat(u):
      count += 1
      if loads and count > limit: return True, []
    if u.op is Ops.REDUCE_AXIS:  # a leaf here: its cost is the reduce's own kernel, not a per-load recompute
      biggest = max(biggest, _numel(u.shape))
      reduces.append(u)
      continue
    stack.extend(u.src)
  if not loads and not reduces: return False, []
  if count > limit: return True, []  # (the walk found its first load after its limit)
  return (True, reduces) if count > 1 and _numel(n.shape) <= biggest else (False, [])

def _numel(shape: tuple[sint, ...]) -> int: return prod(sym_max(s) for s in shape)

# ***** 2. write each kernel as an AST with views at the leaves *****

Chain = tuple[tuple[Ops, Any], ...]

@functools.lru_cache(maxsize=1 << 14)
def _chain_view(shape: tuple[sint, ...], chain: Chain) -> ShapeTracker:
  """The view a chain of movement ops (nearest the node first) makes of a node of this shape. Cached: an elementwise
  subtree reads all its nodes through one chain, and the graphs of successive steps repeat their chains."""
  st = ShapeTracker.from_shape(shape)
  for op, arg in chain: st = st.apply(op, arg)
  return st.simplify()

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
  # a node is written once per distinct view of it the kernel reads (its chain of movement ops as a ShapeTracker), not
  # once per path: paths whose chains read the same view share it (stack(a, a)[0] nested 24 deep reads each node
  # through 2 views; keyed by the chains themselves it was 2**24 paths)
  memo: dict[tuple[UOp, ShapeTracker], UOp] = {}
  def vk(n: UOp, chain: Chain) -> tuple[UOp, ShapeTracker]: return (n, _chain_view(n.shape, chain))
  stack: list[tuple[UOp, Chain, bool]] = [(value_root, root_chain, False)]
  while stack:
    n, chain, visited = stack.pop()
    key = vk(n, chain)
    if key in memo: continue
    # leaves: realized buffers (through movement ops), consts and variables
    leaf = n if n.op is Ops.BUFFER else (node_buffer.get(n) if n is not root else None)
    if leaf is not None or n.op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND):
      view = UOp(Ops.VIEW, dtypes.void, (), key[1])
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
        if vk(*child) not in memo: stack.append((child[0], child[1], False))
      elif n.op is Ops.PAD and _pad_unsafe(n.src[0], node_buffer, root):
        # the padded region computed f(0) from the zeros its loads read: select 0 there (a True seen through the pad
        # is False outside the region)
        inside = UOp(Ops.CONST, dtypes.bool, (UOp(Ops.VIEW, dtypes.void, (), vk(*child)[1]),), True)
        zero = UOp(Ops.CONST, n.dtype, (UOp(Ops.VIEW, dtypes.void, (), key[1]),), 0)
        memo[key] = UOp(Ops.WHERE, n.dtype, (inside, memo[vk(*child)], zero))
      else: memo[key] = memo[vk(*child)]
      continue
    if n.op is Ops.REDUCE_AXIS:
      child_key = vk(n.src[0], ())
      if not visited:
        stack.append((n, chain, True))
        if child_key not in memo: stack.append((n.src[0], (), False))
      else: memo[key] = UOp(Ops.REDUCE_AXIS, n.dtype, (memo[child_key],), n.arg)
      continue
    if n.op is Ops.CONTIGUOUS or n.op in GroupOp.Marker:
      if not visited:
        stack.append((n, chain, True))
        if vk(n.src[0], chain) not in memo: stack.append((n.src[0], chain, False))
      else: memo[key] = memo[vk(n.src[0], chain)]
      continue
    if not visited:
      stack.append((n, chain, True))
      stack.extend((s, chain, False) for s in n.src if vk(s, chain) not in memo)
    else:
      assert n.op in GroupOp.Elementwise, f"scheduler: unexpected {n.op} inside a kernel"
      memo[key] = UOp(n.op, n.dtype, tuple(memo[vk(s, chain)] for s in n.src), n.arg)
  value = memo[vk(value_root, root_chain)]
  out_st = _region_of(root.src[0], kshape) if root.op is Ops.ASSIGN else None
  out_view = UOp(Ops.VIEW, dtypes.void, (), out_st or ShapeTracker.from_shape(kshape))
  out_glob = UOp(Ops.DEFINE_GLOBAL, out_buf.dtype.ptr(out_buf.arg[1]), (), 0)
  # Tensor.contiguous(arg=opts): the actions asked for this kernel (CONTIGUOUS's arg is (its number, the opts))
  info = KernelInfo(opts_to_apply=root.arg[1]) if root.op is Ops.CONTIGUOUS and root.arg.__class__ is tuple else \
    KernelInfo()
  ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out_glob, out_view, value)),), info)
  if ast_variables(ast):  # buffer sizes differ from value to value: leave them out so one program serves all
    ast = ast.substitute({g: g.replace(dtype=g.dtype.base.ptr()) for g in ast.toposort() if g.op is Ops.DEFINE_GLOBAL})
  return ast, list(inputs)

def _pad_unsafe(x: UOp, node_buffer: dict[UOp, UOp], root: UOp) -> bool:
  """Whether x computes, in this kernel (down to the nodes it loads), an op whose value at 0 is not 0."""
  stack, seen = [x], set()
  while stack:
    u = stack.pop()
    if u in seen or u.op is Ops.BUFFER or (u is not root and u in node_buffer) or u.op is Ops.REDUCE_AXIS: continue
    seen.add(u)
    if u.op in _PAD_UNSAFE: return True
    if u.op in GroupOp.Elementwise or u.op in GroupOp.Movement or u.op in GroupOp.Marker or u.op is Ops.CONTIGUOUS:
      stack.extend(u.src)
  return False

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
