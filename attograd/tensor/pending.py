"""Lazy in-place writes: Tensor.assign records its write here and returns; the write runs when something needs the
memory it writes, as in tinygrad.

A write waits until a realize reads or writes the Buffer it writes (any node over that Buffer: the tensor written, a
view of it, a graph built on it), until a write that must come after it runs, or until something reads the Buffer's
memory directly (a TinyJit call, a pickle, a DISK write). Pending writes run one schedule each, in the order they
were made, before the schedule that needed them, so each computes exactly what it would have computed when its line
ran: the lazy tensors that read the old values were given their values when the write was made (Tensor._assign), and
every write that reads or writes a Buffer a later write touches runs before it.

The order is kept per Buffer, not per graph node: a write is keyed by the memory it writes, so a view or another
version node of the same Buffer finds it too."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Iterable
from attograd.device import Buffer
from attograd.engine.buffers import buffers
from attograd.engine.item import ScheduleItem
from attograd.engine.realize import run_schedule
from attograd.schedule import create_schedule, lookup_realized
from attograd.uop.ops import Ops, UOp
from attograd.uop.state import REALIZED, slots

@dataclass(eq=False)
class Write:
  """One ASSIGN waiting to run: the Buffers it writes (a sharded target: one per shard) and those its graph reads."""
  assign: UOp
  targets: frozenset[Buffer]
  reads: frozenset[Buffer]
  whole: bool  # it writes every element of its (single) target: an earlier write nothing read is dead

# the pending writes, oldest first
pending: list[Write] = []

# past this many pending writes the oldest runs: a write to a tensor the program dropped (`Tensor.empty(n).assign(v)`
# never read) would otherwise hold its value's graph and buffers for good
MAX_PENDING = 256

def _touched(roots: Iterable[UOp]) -> tuple[set[Buffer], set[Buffer]]:
  """(the Buffers `roots` read, those their ASSIGNs write). A node realized before reads its home's Buffer too: the
  memo stands for its graph until a write makes it stale, which is why both count."""
  reads: set[Buffer] = set()
  writes: set[Buffer] = set()
  seen: set[UOp] = set()
  stack = list(roots)
  while stack:
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    if n.op is Ops.BUFFER:
      if (b := buffers.get(n)) is not None: reads.add(b)
      continue
    if n.op is Ops.ASSIGN:
      t = n.src[0].base
      writes.update(b for s in (t.src if t.op is Ops.MULTI else (t,)) if (b := buffers.get(s.base)) is not None)
    if REALIZED in slots(n) and (r := lookup_realized(n)) is not None and r is not n: stack.append(r)
    stack.extend(n.src)
  return reads, writes

def add(assign: UOp, whole: bool) -> None:
  """Record the write `assign` (an ASSIGN over a realized buffer, or a MULTI of them) to run when it is needed. A whole
  write makes the earlier pending writes to its Buffer dead when nothing read the Buffer after them (the lazy readers
  of a write's old values were realized when it was made, so only pending writes can read them)."""
  reads, targets = _touched([assign])
  reads -= targets
  value_reads, _ = _touched([assign.src[1]])
  w = Write(assign, frozenset(targets), frozenset(reads), whole and len(targets) == 1)
  if w.whole and not (targets & value_reads):
    read_since: set[Buffer] = set()
    for p in reversed(pending[:]):
      if p.targets == w.targets and not (p.targets & read_since): pending.remove(p)
      read_since |= p.reads
  pending.append(w)
  if len(pending) > MAX_PENDING: _run([pending.pop(0)], None)

def needed(reads: set[Buffer], writes: set[Buffer]) -> list[Write]:
  """The pending writes that must run before a schedule reading `reads` and writing `writes`, oldest first: those
  writing a Buffer it reads or writes, those reading a Buffer it writes, and so on back for each of them."""
  out: list[Write] = []
  reads, writes = set(reads), set(writes)
  for w in reversed(pending):
    if (w.targets & reads) or (w.targets & writes) or (w.reads & writes):
      out.append(w)
      reads |= w.reads
      writes |= w.targets
  out.reverse()
  return out

def flush_for(roots: Iterable[UOp], defer: list[ScheduleItem] | None = None) -> None:
  """Run the pending writes a schedule of `roots` needs (defer: their items go there instead of running)."""
  if not pending: return
  reads, writes = _touched(roots)
  if (todo := needed(reads, writes)): _run(todo, defer)

def flush_all() -> None:
  """Run every pending write (before a TinyJit call reads its inputs' memory, or a DISK write)."""
  if pending: _run(list(pending), None)

def _run(todo: list[Write], defer: list[ScheduleItem] | None) -> None:
  for w in todo:
    pending.remove(w)  # first: a write's own schedule must not find it pending
    items = create_schedule([w.assign])[0]
    if defer is not None: defer.extend(items)
    else: run_schedule(items)
