"""The scheduler's part of memory planning: which of a schedule's intermediates nobody can read once it has run (their
original nodes are unreachable), so that they may share storage (the pool, engine/memory.py), and the schedule's plan,
made once per template and set of poolable intermediates and checked against the device's memory limit."""
from __future__ import annotations
import itertools, sys
from collections import Counter
from typing import Any, Hashable, TYPE_CHECKING
from attograd.device import Buffer
from attograd.dtype import dtypes
from attograd.engine.memory import NO_MEMORY_PLANNER, Plan, PooledBuffer, check_plan, memory_limit, plan_memory
from attograd.helpers import DEBUG
from attograd.uop.ops import Ops, UOp, sym_max
if TYPE_CHECKING:
  from attograd.schedule.create import _Template

# a schedule whose intermediates add up to less than this is not pooled
POOL_MIN_BYTES = 1 << 16

# ***** a schedule: pool the intermediates nobody can read afterwards *****

def _internal_refs(orig: dict[UOp, UOp]) -> Counter[int]:
  """References to each node that the graph (its nodes' sources) and `orig` itself hold, by id. A function of its
  own: no loop variable of it may still hold a node when the counts are compared."""
  counts = Counter(map(id, orig.values()))
  counts.update(map(id, orig.keys() & set(orig.values())))  # a key that is a graph node is one more reference
  counts.update(map(id, itertools.chain.from_iterable(v.src for v in set(orig.values()))))
  return counts

def _raw_surplus(orig: dict[UOp, UOp]) -> dict[int, int]:
  """For every node of the graph: references to it beyond those the graph itself (and `orig`) holds, plus a constant
  that is the same for every node."""
  internal = _internal_refs(orig)
  return {id(v): sys.getrefcount(v) - internal[id(v)] for v in orig.values()}

_sentinel_top: list[UOp] = []
def _sentinel() -> UOp:
  """A node whose source (the sentinel) nothing but this node holds."""
  if not _sentinel_top:
    leaf = UOp(Ops.DEFINE_VAR, dtypes.int32, arg=("_memory_sentinel", 0, 1))
    _sentinel_top.append(UOp(Ops.NEG, dtypes.int32, (UOp(Ops.NEG, dtypes.int32, (leaf,)),)))
  return _sentinel_top[0]

def held_nodes(orig: dict[UOp, UOp], outs: set[UOp], roots: list[UOp]) -> set[UOp]:
  """The original nodes of `roots` (normalized nodes: keys of `orig`) that stay reachable after this schedule: those
  below a node something outside the graph references (a Tensor, a graph built on it), not counting paths through
  the outputs (they will be realized, so nothing needs what is below them).

  Reference counts are compared with those of a sentinel node that only the graph holds, measured in the same pass
  (the constant part of a count depends on the Python version). A wrong guess costs memory or a recomputation,
  never a wrong result: a pooled intermediate is not remembered."""
  top = _sentinel()
  orig[top] = top
  orig[top.src[0]] = top.src[0]  # no local name may hold the sentinel: that would be a reference of its own
  try: surplus = _raw_surplus(orig)
  finally:
    del orig[top.src[0]]
    del orig[top]
  base = surplus[id(top.src[0])]
  targets = {o for r in roots if (o := orig.get(r)) is not None}  # made only now: they would count as references
  nodes = set(orig.values())
  stack = [v for v in nodes if surplus[id(v)] > base and v not in outs]
  seen: set[UOp] = set()
  found: set[UOp] = set()
  while stack and len(found) < len(targets):  # done as soon as every target is known to be held
    v = stack.pop()
    if v in seen: continue
    seen.add(v)
    if v in targets: found.add(v)
    for x in v.src:
      if x in nodes and x not in seen and x not in outs: stack.append(x)
  return found

_NONE: frozenset = frozenset()

def plan_schedule(tmpl: _Template, orig: dict[UOp, UOp], outs: list[UOp]) -> dict[UOp, Buffer]:
  """Pooled buffers for the template's intermediates whose original node nobody can reach after this schedule (so
  their values are not remembered), and a check of the schedule's peak. Returns placeholder -> its pooled Buffer."""
  cands: frozenset[UOp] = _NONE
  # small intermediates aren't worth the liveness pass (a walk over the graph on every realize)
  if tmpl.inter_bytes >= POOL_MIN_BYTES and not NO_MEMORY_PLANNER:
    homes = {home.base for home in tmpl.becomes if home is not None}  # an output can be a view of an intermediate
    roots = [(r, b) for r, home in tmpl.realized_roots if (b := home.base) not in homes]
    held = held_nodes(orig, set(outs), [r for r, _ in roots])
    cands = frozenset(b for r, b in roots if (o := orig.get(r)) is None or o not in held)
  cache: dict[frozenset[UOp], Plan] = tmpl.plans
  if (plan := cache.get(cands)) is None:
    new = set(tmpl.new_bufs)
    resident = {b for _, bufs, _ in tmpl.items for b in bufs if b not in new}
    plan = cache[cands] = plan_memory([bufs for _, bufs, _ in tmpl.items], _ph_info, set(cands), resident)
  if DEBUG.value >= 2 or any(map(memory_limit, plan.peak)):  # (.value, and map: this runs on every realize)
    shapes = {h.base: h.shape for h in list(tmpl.becomes) + [h for _, h in tmpl.realized_roots] if h is not None}
    check_plan(plan, lambda k: _describe(k, shapes.get(k)), f"a schedule of {len(tmpl.items)} kernels")
  if not plan.slot_of: return {}
  slots = [Buffer(dev, nb, dtypes.uint8) for dev, nb in plan.slots]
  return {ph: PooledBuffer(ph.device, ph.arg[1], ph.dtype, slots[j]) for ph, j in plan.slot_of.items()}

def placeholder_bytes(ph: UOp) -> int: return sym_max(ph.arg[1]) * ph.dtype.itemsize  # a symbolic one at its largest

def _ph_info(k: Hashable) -> tuple[str, int]:
  assert isinstance(k, UOp)
  return k.device, placeholder_bytes(k)

def _describe(k: UOp, shape: Any = None) -> str:
  return f"{shape or (k.arg[1],)} {k.dtype} ({placeholder_bytes(k)} bytes)"
