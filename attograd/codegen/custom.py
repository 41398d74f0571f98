"""A hand-written kernel body (tinygrad's kernel-building API: UOp.placeholder, UOp.range, `buf[i].store(x)`, .end,
.sink; see Ops.PARAM) compiled to a linear program, as the pipeline in codegen/__init__.py would leave one.

The body says what each loop does, so nothing is searched or reordered: loops run where the body puts them, in one
thread. The statements (STOREs) run in the order the body's graph gives them (a statement after what it depends on:
`.after()` and the buffer views it writes through); each runs inside every loop its values and its target depend on,
and a loop closes at its END. A loop a statement needs that isn't open yet opens around it (loops opened together,
outer first by axis_id). Each statement reads memory afresh: a value read before a store is read again after it.
A REG or LOCAL placeholder (an accumulator) becomes one register per element, so it is indexed by constants."""
from __future__ import annotations
from attograd.helpers import DEBUG
from attograd.dtype import AddrSpace, DType, dtypes, least_upper_dtype
from attograd.renderer import Estimates, ProgramSpec, Renderer
from attograd.uop.ops import GroupOp, KernelInfo, Ops, ProgramInfo, UOp, graph_rewrite, shape_str
from attograd.uop.view import ShapeTracker

class CustomKernelError(ValueError):
  """A kernel body that can't be compiled as written (the message names the node and why)."""

def is_custom_kernel(ast: UOp) -> bool:
  """A hand-written body (a SINK over placeholders, PARAMs; or a PROGRAM of source text), not the scheduler's kernel
  AST (whose SINK carries a KernelInfo too, so that can't tell them apart)."""
  if ast.op is Ops.PROGRAM: return True
  return ast.op is Ops.SINK and any(u.op is Ops.PARAM for u in ast.toposort())

def _view_chain(v: UOp) -> tuple[UOp, list[UOp]]:
  """The PARAM under a buffer view, and the movement ops on the way up from it."""
  ops: list[UOp] = []
  while v.op is not Ops.PARAM:
    if v.op is Ops.AFTER: v = v.src[0]
    elif v.op in GroupOp.Movement:
      ops.append(v)
      v = v.src[0]
    else: raise CustomKernelError(f"a kernel body indexes a buffer view (placeholders and their reshapes, permutes, "
                                  f"shrinks, ...), not a {v.op}")
  return v, ops[::-1]

def _address(index: UOp, idxs: list[UOp]) -> tuple[UOp, UOp, UOp]:
  """(the PARAM, the flat element index, its validity) of `index`, the INDEX node, at the index values `idxs`."""
  p, ops = _view_chain(index.src[0])
  if p.arg.shape is None: raise CustomKernelError(f"placeholder {p.arg.slot} has no shape: give UOp.param a shape")
  st = ShapeTracker.from_shape(p.arg.shape)
  for m in ops: st = st.apply(m.op, m.arg)
  if len(idxs) != len(st.shape):
    raise CustomKernelError(f"a buffer view of shape {shape_str(st.shape)} is indexed with {len(idxs)} indices; a read "
                            "or a store needs one per dim")
  idx, valid = st.to_indexed([i.cast(dtypes.int32) for i in idxs], dtypes.int32)
  return p, idx.simplify(), valid.simplify()

class _Builder:
  def __init__(self, renderer: Renderer, sink: UOp):
    self.ren, self.sink = renderer, sink
    self.topo = list(sink.toposort())
    self.out: list[UOp] = []
    self.globals: dict[int, UOp] = {}      # slot -> DEFINE_GLOBAL
    self.accs: dict[tuple[UOp, int], UOp] = {}  # (REG/LOCAL PARAM, element) -> DEFINE_ACC
    self.open: list[tuple[UOp, UOp]] = []  # open loops, outermost first: (the body's RANGE, the program's RANGE)
    self.placed: set[UOp] = set()          # program nodes every later statement sees (globals, registers, Variables)
    self.written: set[int] = set()
    self.n_loops = 0
    self.reduced: dict[UOp, UOp] = {}    # a REDUCE computed in the loops open now -> its accumulator
    self.reduced_at: dict[UOp, int] = {}  # ... and how many loops were open then
    self.ops, self.trips = 0, 1
    # the loops each node runs in: those of its sources, less the ones an END closed
    self.live: dict[UOp, frozenset[UOp]] = {}
    for u in self.topo:
      if u.op is Ops.END: self.live[u] = self.live[u.src[0]] - frozenset(u.src[1:])
      elif u.op is Ops.REDUCE: self.live[u] = self.live[u.src[0]] - frozenset(u.src[1:])
      else:
        s = frozenset().union(*[self.live[x] for x in u.src]) if u.src else frozenset()
        self.live[u] = s | {u} if u.op is Ops.RANGE else s

  def build(self) -> list[UOp]:
    for u in self.topo:  # buffer arguments first, by slot; registers next
      if u.op is not Ops.PARAM: continue
      if u.arg.addrspace is AddrSpace.GLOBAL:
        if (g := self.globals.get(u.arg.slot)) is not None and g.dtype.base is not u.dtype:  # type: ignore[attr-defined]
          raise CustomKernelError(f"placeholder slot {u.arg.slot} is used with two dtypes, {g.dtype.base} and "  # type: ignore[attr-defined]
                                  f"{u.dtype}")
        size = 1
        for d in u.arg.shape or (-1,): size *= d if d.__class__ is int else -1
        self.globals[u.arg.slot] = UOp(Ops.DEFINE_GLOBAL, u.dtype.ptr(size if size > 0 else -1), (), u.arg.slot)
      elif u.arg.addrspace is AddrSpace.ALU:
        raise CustomKernelError("a scalar (ALU) param in a kernel body: use a Variable (UOp.variable)")
    for slot in sorted(self.globals): self._place(self.globals[slot])
    for u in self.topo:
      if u.op is Ops.INDEX and not u.shape and (p := _view_chain(u.src[0])[0]).arg.addrspace is not AddrSpace.GLOBAL:
        self._acc(p, u)
    for u in self.topo:
      if u.op is Ops.STORE: self._store(u)
      elif u.op is Ops.END: self._close(set(u.src[1:]))
    self._close({r for r, _ in self.open})
    return self.out

  def _place(self, u: UOp) -> None:
    self.out.append(u)
    self.placed.add(u)

  def _acc(self, p: UOp, index: UOp) -> UOp:
    """The register of element `index` (an INDEX node) of the REG/LOCAL placeholder p."""
    _, idx, valid = _address(index, list(index.src[1:]))
    if idx.op is not Ops.CONST or valid.op is not Ops.CONST or not valid.arg:
      raise CustomKernelError(f"a REG/LOCAL placeholder (slot {p.arg.slot}) is indexed by constants (each element is "
                              f"a register); got the index {idx.render()}")
    if (acc := self.accs.get((p, idx.arg))) is None:
      acc = self.accs[(p, idx.arg)] = UOp(Ops.DEFINE_ACC, p.dtype, (UOp.const(p.dtype, 0),), len(self.accs))
      self._place(acc.src[0])
      self._place(acc)
    return acc

  # ***** loops *****
  def _ensure_open(self, need: frozenset[UOp]) -> None:
    opened = {r for r, _ in self.open}
    todo = [r for r in need if r not in opened]
    while todo:
      ready = [r for r in todo if self.live[r.src[0]] <= opened]
      if not ready: raise CustomKernelError("loops whose sizes depend on each other in a cycle")
      r = min(ready, key=lambda x: x.arg[0] if isinstance(x.arg, tuple) else 0)
      todo.remove(r)
      end = self._emit(self._lower(r.src[0], {}))
      self.n_loops += 1
      rng = UOp(Ops.RANGE, end.dtype, (end,), (self.n_loops, "loop"))
      self.out.append(rng)
      self.open.append((r, rng))
      opened.add(r)
      self.trips *= end.arg if end.op is Ops.CONST else 1
  def _close(self, rngs: set[UOp]) -> None:
    """Close the loops `rngs` (and any opened inside them that no END closed)."""
    while self.open and any(r in rngs for r, _ in self.open):
      r, rng = self.open.pop()
      for red in [x for x, at in self.reduced_at.items() if at > len(self.open)]:  # their accumulators are gone
        del self.reduced[red], self.reduced_at[red]
      self.out.append(UOp(Ops.ENDRANGE, dtypes.void, (rng,)))
      if rng.src[0].op is Ops.CONST and rng.src[0].arg: self.trips //= rng.src[0].arg

  # ***** statements and values *****
  def _store(self, st: UOp) -> None:
    self._ensure_open(self.live[st])
    target, value = st.src[0], st.src[1]
    if target.op is not Ops.INDEX or target.shape:
      raise CustomKernelError(f"a store's target is one element of a buffer (buf[i, ...]), not a {target.op} of shape "
                              f"{shape_str(target.shape)}")
    memo: dict[UOp, UOp] = {}
    p = _view_chain(target.src[0])[0]
    val = self._lower(value, memo)
    if val.dtype != p.dtype: val = val.cast(p.dtype)
    if p.arg.addrspace is not AddrSpace.GLOBAL:
      self._emit(UOp(Ops.ACC_ASSIGN, dtypes.void, (self._acc(p, target), val)))
      return
    _, idx, valid = _address(target, [self._lower(i, memo) for i in target.src[1:]])
    if valid.op is Ops.CONST and not valid.arg: return  # stores only into padding: nothing
    self.written.add(p.arg.slot)
    g = self.globals[p.arg.slot]
    self._emit(UOp(Ops.STORE, dtypes.void, (g, idx, val) + (() if valid.op is Ops.CONST else (valid,))))

  def _lower(self, u: UOp, memo: dict[UOp, UOp]) -> UOp:
    """The program's graph of the body's value `u` (loads of buffers, registers, the open loops' indices)."""
    if (r := memo.get(u)) is not None: return r
    op = u.op
    if op is Ops.CONST: r = UOp.const(_concrete(u.dtype), u.arg)
    elif op is Ops.RANGE:
      r = next((rng for b, rng in self.open if b is u), None)
      if r is None: raise CustomKernelError(f"loop {u.arg[0]} is read outside its END")
    elif op is Ops.DEFINE_VAR: r = u
    elif op is Ops.BIND: r = u.src[0]
    elif op is Ops.AFTER or (op is Ops.LOAD and len(u.src) == 1): r = self._lower(u.src[0], memo)
    elif op is Ops.INDEX:
      if u.shape: raise CustomKernelError("a value in a kernel body is one element; index every dim of the buffer "
                                          f"view (left: shape {shape_str(u.shape)})")
      p = _view_chain(u.src[0])[0]
      if p.arg.addrspace is not AddrSpace.GLOBAL: r = self._acc(p, u)
      else:
        _, idx, valid = _address(u, [self._lower(i, memo) for i in u.src[1:]])
        g = self.globals[p.arg.slot]
        if valid.op is Ops.CONST and not valid.arg: r = UOp.const(u.dtype, 0)
        else: r = UOp(Ops.LOAD, u.dtype, (g, idx) + (() if valid.op is Ops.CONST else (valid,)))
    elif op is Ops.REDUCE: r = self._reduce(u, memo)
    elif op in (Ops.CAST, Ops.BITCAST): r = UOp(op, _concrete(u.dtype), (self._lower(u.src[0], memo),))
    elif op in GroupOp.ALU:
      src = [self._lower(s, memo) for s in u.src]
      u = u.replace(dtype=_concrete(u.dtype))
      if op is Ops.WHERE: src[1:] = _same_dtype(src[1:], u.dtype)
      elif op in GroupOp.Comparison: src = _same_dtype(src, least_upper_dtype(*(s.dtype for s in src)))
      elif op not in (Ops.SHL, Ops.SHR): src = _same_dtype(src, u.dtype)
      r = UOp(op, u.dtype, tuple(src))
    else: raise CustomKernelError(f"a kernel body computes with loads, loop indices, constants and ALU ops; got {op}")
    memo[u] = r
    return r

  def _reduce(self, u: UOp, memo: dict[UOp, UOp]) -> UOp:
    """A REDUCE's value: an accumulator declared here, its loops opened inside the ones open now, the value folded in,
    the loops closed. Reduces inside it that don't use its loops are computed first, outside them. The result stands
    while the loops open now do (a later statement in them reuses it)."""
    if (hit := self.reduced.get(u)) is not None: return hit
    own = frozenset(u.src[1:])
    for n in u.src[0].toposort():  # the inner reduces that don't run in this one's loops: before it
      if n.op is Ops.REDUCE and n is not u and not (self.live[n] & own): self._lower(n, memo)
    d = _concrete(u.dtype)
    ident = 0 if u.arg is Ops.ADD else 1 if u.arg is Ops.MUL else dtypes.min(d)
    acc = UOp(Ops.DEFINE_ACC, d, (UOp.const(d, ident),), ("reduce", len(self.reduced)))
    self._emit(acc)
    self.placed.add(acc)
    depth = len(self.open)
    opened = {r for r, _ in self.open}
    self._ensure_open(frozenset(r for r in own if r not in opened) | (self.live[u.src[0]] - own - opened))
    inner = dict(memo)
    val = self._lower(u.src[0], inner)
    if val.dtype != d: val = val.cast(d)
    self._emit(UOp(Ops.ACC_ASSIGN, dtypes.void, (acc, UOp(u.arg, d, (acc, val)))))
    while len(self.open) > depth: self._close({self.open[-1][0]})
    self.reduced[u] = acc
    self.reduced_at[u] = depth
    return acc

  def _emit(self, x: UOp) -> UOp:
    """Put the program nodes of `x` (a statement or a value) in the program, after the language's rewrites."""
    x = self._rewrite(x)
    seen: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(x, False)]
    while stack:
      n, ready = stack.pop()
      if n in seen or n in self.placed or any(n is rng for _, rng in self.open): continue
      if ready:
        seen.add(n)
        if n.op is Ops.DEFINE_VAR: self.placed.add(n)
        elif n.op in GroupOp.ALU: self.ops += self.trips
        self.out.append(n)
      else:
        stack.append((n, True))
        stack.extend((s, False) for s in reversed(n.src))
    return x

  def _rewrite(self, x: UOp) -> UOp:
    from attograd.codegen.intsafe import pm_int_safety
    from attograd.codegen.transcendental import pm_exp_reduce, pm_transcendental
    s = UOp(Ops.SINK, dtypes.void, (x,))
    s = graph_rewrite(s, pm_int_safety)
    s = graph_rewrite(s, pm_exp_reduce, self.ren.decompose_transcendentals)
    if self.ren.decompose_transcendentals: s = graph_rewrite(s, pm_transcendental)
    return self.ren.prepare(s).src[0]

def _concrete(d: DType) -> DType:
  """A weak dtype (tinygrad's weakint, weakfloat: `x.cast(dtypes.weakint)` for an index) as what a kernel computes it
  in: int32, float32."""
  return dtypes.int32 if d is dtypes.weakint else dtypes.float32 if d is dtypes.weakfloat else d

def _same_dtype(src: list[UOp], d: DType) -> list[UOp]: return [s if s.dtype == d else s.cast(d) for s in src]

def source_program(prg: UOp, renderer: Renderer) -> ProgramSpec:
  """The program of a kernel given as source text: PROGRAM(SINK of the placeholders it takes, LINEAR, SOURCE[,
  BINARY]). Its function's name is the SINK's KernelInfo name (or the ProgramInfo's); its buffer arguments are the
  placeholders in the SINK's order (or ProgramInfo.globals). The device's compiler builds the source (from its disk
  cache when built before), so the BINARY given is what that build makes; the program is opaque: every argument
  counts as written."""
  src = next((u.arg for u in prg.src if u.op is Ops.SOURCE), None)
  if prg.src[0].op is not Ops.SINK or not isinstance(src, str):
    raise CustomKernelError("a PROGRAM kernel is (SINK of its placeholders, LINEAR, SOURCE(arg=the source text), ...)")
  sink, info = prg.src[0], prg.arg
  if renderer.device == "PYTHON": raise CustomKernelError("the PYTHON device runs no source text; use CPU")
  named = info if isinstance(info, ProgramInfo) else sink.arg if isinstance(sink.arg, KernelInfo) else None
  if named is None: raise CustomKernelError("a PROGRAM kernel names its function: sink(arg=KernelInfo(name=...))")
  glob = tuple(info.globals) if isinstance(info, ProgramInfo) and info.globals else \
    tuple(p.arg.slot for x in sink.src if (p := _param_of(x)) is not None)
  return ProgramSpec(named.function_name, src, renderer.device, (), glob, glob, (), 0, 0, (),
                     *((None, None) if not renderer.has_local or not isinstance(info, ProgramInfo) else
                       (info.global_size, info.local_size or (1, 1, 1))))

def _param_of(u: UOp) -> UOp | None:
  while u.op in GroupOp.Movement or u.op is Ops.AFTER: u = u.src[0]
  return u if u.op is Ops.PARAM else None

def custom_program(ast: UOp, renderer: Renderer) -> ProgramSpec:
  """The program of a hand-written kernel body (a SINK over its statements)."""
  if ast.op is Ops.PROGRAM: return source_program(ast, renderer)
  b = _Builder(renderer, ast)
  uops = b.build()
  name = ast.arg.function_name if isinstance(ast.arg, KernelInfo) else "custom"
  if not name or name[0].isdigit(): name = f"k_{name}"
  src = renderer.render(name, uops)
  if DEBUG >= 4: print(src)
  glob = tuple(sorted(b.globals))
  variables = tuple(sorted({u for u in uops if u.op is Ops.DEFINE_VAR}, key=lambda v: v.arg[0]))
  mem = sum(max(g.dtype.bufsize, 0) * g.dtype.itemsize for g in b.globals.values())  # type: ignore[attr-defined]
  ops = b.ops
  if isinstance(ast.arg, KernelInfo) and isinstance(est := ast.arg.estimates, Estimates): ops, mem = est.ops, est.mem
  gsz, lsz = renderer.launch_sizes(uops)
  return ProgramSpec(name, src, renderer.device, tuple(uops), glob, tuple(sorted(b.written)), variables, ops, mem,
                     (), gsz, lsz)
