"""Linearize: order a lowered kernel graph into a flat program with explicit loops and accumulators.

Nodes are emitted as late as their inputs allow, reduce loops that share ranges are fused into one loop,
and work that does not depend on a reduce loop's index is emitted before the loop opens.
"""
from __future__ import annotations
from attograd.dtype import dtypes
from attograd.uop.ops import Ops, UOp
from attograd.codegen.fma import FMA_DTYPES, mulacc
from attograd.codegen.lowerer import reduce_identity

def linearize(sink: UOp, fma: bool = False) -> list[UOp]:
  """`fma`: the language has fused multiply-adds (codegen/fma.py): a float product summed into an accumulator is
  one MULACC."""
  topo = list(sink.toposort())
  deps: dict[UOp, frozenset[UOp]] = {}
  for u in topo:
    if u.op is Ops.RANGE: deps[u] = frozenset([u])
    elif u.op is Ops.REDUCE: deps[u] = deps[u.src[0]].union(*[deps[s] for s in u.src[1:]]) - frozenset(u.src[1:])
    else: deps[u] = frozenset().union(*[deps[s] for s in u.src]) if u.src else frozenset()
  reduces = [u for u in topo if u.op is Ops.REDUCE]
  has_barrier = any(u.op is Ops.BARRIER for u in topo)
  out: list[UOp] = []
  # emitted nodes an open scope can use: one set for lookups (a node is tested many times per kernel, and a list of
  # per-scope sets made each test a loop: a third of lowering a big conv), and what each scope added, to close it
  visible: set[UOp] = set()
  scopes: list[list[UOp]] = [[]]
  acc_of: dict[UOp, UOp] = {}
  n_acc = [0]

  def show(u: UOp) -> None:
    if u not in visible:
      visible.add(u)
      scopes[-1].append(u)
  def open_scope(rng: UOp) -> None:
    scopes.append([])
    show(rng)
    open_rngs.append(rng)
    open_now[0] = open_now[0] | {rng}
  def close_scope() -> None:
    visible.difference_update(scopes.pop())
    open_rngs.pop()
    open_now[0] = frozenset(open_rngs)

  def emit_tree(roots: UOp | list[UOp], hoist: bool = False) -> None:
    # post-order over what is not yet visible; REDUCE nodes open their own loops.
    # hoist=True emits only what the open loops can already compute (loop-invariant code motion).
    # A DAG: each node is expanded once, or shared subgraphs blow up exponentially. Once per call, over all of its
    # roots: a hoisting pass over each of a register tile's stores walked the whole shared kernel again for every store
    # (48 stores of a conv: a third of lowering the MNIST step's kernels); what one root left unemitted, the next can't
    # emit either (the open loops are the same)
    expanded: set[UOp] = set()
    for root in (roots if isinstance(roots, list) else [roots]):
      emit_one(root, hoist, expanded)

  def emit_one(root: UOp, hoist: bool, expanded: set[UOp]) -> None:
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
      u, done = stack.pop()
      if u in visible: continue
      if not done:
        if u in expanded: continue
        expanded.add(u)
      if hoist and (u.op in (Ops.STORE, Ops.REDUCE, Ops.RANGE) or not deps[u] <= open_now[0]):
        stack.extend([(s, False) for s in u.src if s not in visible])
        continue
      if u.op is Ops.REDUCE:
        if not done:
          stack.append((u, True))
          continue
        emit_reduce_group(u)
        continue
      if done:
        if hoist and not all(s in visible for s in u.src): continue  # depends on a reduce not yet emitted
        if u not in visible:
          out.append(u)
          show(u)
        continue
      stack.append((u, True))
      stack.extend([(s, False) for s in u.src if s not in visible])

  def emit_reduce_group(r: UOp) -> None:
    rngs = r.src[1:]
    group = [x for x in reduces if x.src[1:] == rngs and x not in acc_of and deps[x] <= open_now[0]]
    if r not in group: group.append(r)
    for x in group:
      init = UOp.const(x.dtype, reduce_identity(x.arg, x.dtype))
      if init not in visible:
        out.append(init)
        show(init)
      acc = UOp(Ops.DEFINE_ACC, x.dtype, (init,), n_acc[0])
      n_acc[0] += 1
      out.append(acc)
      acc_of[x] = acc
    emit_tree([x.src[0] for x in group], hoist=True)  # loop-invariant work first
    for x in group if has_barrier else ():  # GPU: what a barrier waits for is done once, before the loop reading it
      for b in [n for n in x.src[0].toposort() if n.op is Ops.BARRIER]: emit_tree(b)
    for rng in rngs:
      out.append(rng)
      open_scope(rng)
    # many float accumulators summing unrolled products (a conv's or matmul's register tile): each product goes
    # straight into its accumulator (one fused multiply-add each), position by position across the tile, so an
    # operand shared by the tile is loaded once per position and few values are live at a time. Past 16 of them
    # (a 5x5 weight gradient's 25) the tree's fewer live values win: 16 vector registers are left for operands
    chain = 8 <= len(group) <= 16 and all(x.arg is Ops.ADD and dtypes.is_float(x.dtype) for x in group)
    terms = {x: _terms(x.src[0]) if chain else [x.src[0]] for x in group}
    new = {x: acc_of[x] for x in group}
    for i in range(max(len(t) for t in terms.values())):
      for x in group:
        if i >= len(terms[x]): continue
        t = terms[x][i]
        if fma and x.arg is Ops.ADD and t.op is Ops.MUL and x.dtype.scalar() in FMA_DTYPES:
          emit_tree(list(t.src))
          new[x] = mulacc(t.src[0], t.src[1], new[x], x.dtype)
        else:
          emit_tree(t)
          new[x] = UOp(x.arg, x.dtype, (new[x], t))
        out.append(new[x])
    for x in group: out.append(UOp(Ops.ACC_ASSIGN, dtypes.void, (acc_of[x], new[x])))
    for rng in reversed(rngs):
      out.append(UOp(Ops.ENDRANGE, dtypes.void, (rng,)))
      close_scope()
    for x in group: show(x)

  def _terms(u: UOp) -> list[UOp]:  # a left-leaning chain of adds of products: its innermost operand, then each product
    out: list[UOp] = []
    while (u.op is Ops.ADD and u.src[1].op is Ops.MUL) or u.op is Ops.MULACC:  # fused: MULACC(a, b, rest)
      out.append(u.src[1] if u.op is Ops.ADD else UOp(Ops.MUL, u.dtype, u.src[:2]))
      u = u.src[0] if u.op is Ops.ADD else u.src[2]
    return [u] + out[::-1]

  open_rngs: list[UOp] = []
  open_now: list[frozenset[UOp]] = [frozenset()]  # the open ranges as a set, kept as they open and close

  # output loops: every range a store depends on, outermost axis first
  out_ranges = sorted({r for st in sink.src for r in deps[st]}, key=lambda r: r.arg[0])
  # work is emitted in the outermost loop that can compute it: C compilers hoist loop-invariant loads themselves,
  # but gcc may instead sink one into a branch and then fail to vectorize the loop (a masked load of one address)
  emit_tree(list(sink.src), hoist=True)
  for rng in out_ranges:
    out.append(rng)
    open_scope(rng)
    if rng is not out_ranges[-1]: emit_tree(list(sink.src), hoist=True)
  for st in sink.src: emit_tree(st)
  for rng in reversed(out_ranges):
    out.append(UOp(Ops.ENDRANGE, dtypes.void, (rng,)))
    close_scope()

  # point every use of a REDUCE at its accumulator
  remap: dict[UOp, UOp] = dict(acc_of)
  lin: list[UOp] = []
  for u in out:
    if any(s in remap for s in u.src):
      nu = UOp(u.op, u.dtype, tuple(remap.get(s, s) for s in u.src), u.arg)
      remap[u] = nu
      u = nu
    lin.append(u)
  return lin
