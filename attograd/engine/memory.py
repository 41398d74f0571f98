"""The memory pool: buffers that live only inside one schedule (or one captured jit) share storage when their
lifetimes don't overlap, and the peak memory is known, and checked against the device's limit, before any kernel
runs. Here: the lifetimes and best fit (plan_memory), the peak check, the pooled buffers, and the jit's own plan; the
scheduler decides which of a schedule's intermediates may be pooled (schedule/memory.py)."""
from __future__ import annotations
import gc
from dataclasses import dataclass
from typing import Any, Callable, Generic, Hashable, Sequence, TypeVar
from attograd.device import Buffer, Device
from attograd.engine.buffers import buffers
from attograd.helpers import DEBUG, ContextVar, getenv
from attograd.dtype import dtypes
from attograd.uop.ops import Ops, UOpMetaClass

# NO_MEMORY_PLANNER=1 gives every buffer its own storage (to compare results, or to rule the planner out)
NO_MEMORY_PLANNER = ContextVar("NO_MEMORY_PLANNER", 0)

class MemoryLimitError(MemoryError):
  """A schedule needs more memory at its peak than its device's limit allows (raised before any kernel runs)."""

class PooledBuffer(Buffer):
  """A buffer whose storage is a slot it shares with other buffers whose lifetimes don't overlap with its own.
  The slot owns the memory: this buffer only points into it."""
  def __init__(self, device: str, size: int, dtype: Any, slot: Buffer):
    super().__init__(device, size, dtype)
    self.slot = slot
  def allocate(self) -> Buffer:
    if self._buf is None:
      s = self.slot.allocate()
      self.allocator = s.allocator
      # host memoryviews are sliced to this buffer's size (copies check sizes); device handles are shared as is
      self._buf = s._buf[:max(self.nbytes, 1)] if isinstance(s._buf, memoryview) else s._buf
    return self
  def deallocate(self) -> None: self._buf = None  # the slot frees the memory
  def __del__(self) -> None: pass  # the slot frees the memory

# ***** lifetimes and best fit *****

K = TypeVar("K", bound=Hashable)  # what a plan places: placeholder UOps (schedules) or Buffers (the jit)

@dataclass
class Plan(Generic[K]):
  """Which slot each pooled buffer uses, the slots' sizes, and the peak bytes per device with and without pooling."""
  slot_of: dict[K, int]
  slots: list[tuple[str, int]]  # (device, bytes)
  peak: dict[str, int]
  unpooled_peak: dict[str, int]
  at_peak: dict[str, list[K]]  # per device, the buffers (not slots) alive at the peak, largest first

def plan_memory(steps: Sequence[Sequence[K]], info: Callable[[K], tuple[str, int]],
                pooled: set[K], resident: set[K]) -> Plan[K]:
  """Plan storage for buffers used by `steps` (each step: the buffers one kernel touches, the written one first).

  `pooled` buffers live from their first to their last use and share slots (greedy best fit by bytes, per device;
  each must be written by its first use). `resident` ones exist before the steps and after them. The rest are made
  at their first use and kept to the end."""
  first: dict[K, int] = {}
  last: dict[K, int] = {}
  for i, step in enumerate(steps):
    for k in step:
      if k not in first: first[k] = i
      last[k] = i
  n = len(steps)
  slot_of: dict[K, int] = {}
  slots: list[list[Any]] = []  # [device, bytes, first step, last step]
  for k in sorted((k for k in pooled if k in first), key=lambda k: (first[k], -info(k)[1])):
    dev, nb = info(k)
    free = [j for j, s in enumerate(slots) if s[0] == dev and s[3] < first[k]]
    fits = [j for j in free if slots[j][1] >= nb]
    if fits: j = min(fits, key=lambda j: slots[j][1])     # the smallest slot that fits
    elif free: j = max(free, key=lambda j: slots[j][1])   # else grow the largest free one (nothing is allocated yet)
    else:
      slots.append([dev, nb, first[k], last[k]])
      j = len(slots) - 1
    slots[j][1], slots[j][3] = max(slots[j][1], nb), last[k]
    slot_of[k] = j
  # live bytes per device per step: a difference array of (device, start, end inclusive, bytes) spans
  def peaks(spans: list[tuple[str, int, int, int]]) -> tuple[dict[str, int], dict[str, int]]:
    delta: dict[str, list[int]] = {}
    for dev, a, b, nb in spans:
      d = delta.setdefault(dev, [0] * (n + 1))
      d[a] += nb
      d[b + 1] -= nb
    peak, when = {}, {}
    for dev, d in delta.items():
      live, best, at = 0, 0, 0
      for i in range(n):
        live += d[i]
        if live > best: best, at = live, i
      peak[dev], when[dev] = best, at
    return peak, when
  own = [k for k in first if k not in pooled]
  spans = [(info(k)[0], 0 if k in resident else first[k], n - 1, info(k)[1]) for k in own]
  peak, when = peaks(spans + [(s[0], s[2], s[3], s[1]) for s in slots])
  unpooled, _ = peaks(spans + [(info(k)[0], first[k], n - 1, info(k)[1]) for k in slot_of])
  at_peak: dict[str, list[K]] = {}
  for k in first:
    dev, nb = info(k)
    i = when.get(dev, 0)
    alive = first[k] <= i <= last[k] if k in slot_of else (k in resident or first[k] <= i)
    if alive: at_peak.setdefault(dev, []).append(k)
  for ks in at_peak.values(): ks.sort(key=lambda k: -info(k)[1])
  return Plan(slot_of, [(s[0], s[1]) for s in slots], peak, unpooled, at_peak)

def memory_limit(device: str) -> int:
  """The most bytes a schedule may use on `device` at its peak: `Device[d].memory_limit` if set, else $MEMORY_LIMIT,
  else no limit (0)."""
  dev = Device._opened.get(device) or Device[device]  # the open device without parsing its name: this runs per realize
  return int(getattr(dev, "memory_limit", 0) or getenv("MEMORY_LIMIT", 0))

def _fmt_bytes(n: int) -> str: return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n} bytes"

def check_plan(plan: Plan[K], describe: Callable[[K], str], what: str) -> None:
  """Report the peak with DEBUG>=2; raise MemoryLimitError if it is over a device's limit."""
  for dev, pk in plan.peak.items():
    if DEBUG >= 2:
      npool = sum(1 for s in plan.slots if s[0] == dev)
      saved = plan.unpooled_peak.get(dev, pk) - pk
      print(f"memory: {what} on {dev} peaks at {_fmt_bytes(pk)} ({len(plan.slot_of)} buffers in {npool} shared slots, "
            f"saving {_fmt_bytes(saved)})")
    if (lim := memory_limit(dev)) and pk > lim:
      biggest = ", ".join(describe(k) for k in plan.at_peak.get(dev, [])[:3])
      raise MemoryLimitError(f"{what} needs {pk} bytes on {dev} at its peak, over the limit of {lim} bytes; the "
                             f"largest buffers then: {biggest}. Raise Device[{dev!r}].memory_limit (or MEMORY_LIMIT), "
                             "or make the work smaller")

def _describe(b: Buffer) -> str: return f"({b.size},) {b.dtype} ({b.nbytes} bytes)"

# ***** a captured jit: pool every buffer only the jit still uses *****

Recording = list[tuple[Any, tuple[Buffer, ...], dict[str, int]]]

def plan_jit(rec: Recording, inputs: list[Buffer], outputs: list[Buffer]) -> Recording:
  """The recorded kernels with the buffers that nothing but the recording references (dead once the captured call
  returned) moved into shared slots. A buffer qualifies only if its first use writes it whole."""
  if NO_MEMORY_PLANNER: return rec
  gc.collect()  # once per capture: let cycles holding tensors go, so the buffers they held show as free
  live = UOpMetaClass.live()
  held = {id(b) for u in live if u.op is Ops.BUFFER and (b := buffers.get(u)) is not None}
  del live
  keep = {id(b) for b in inputs + outputs}
  seen: set[int] = set()
  pooled: set[Buffer] = set()
  for runner, bufs, _ in rec:
    written = _written(runner, bufs)
    for i, b in enumerate(bufs):
      if id(b) in seen: continue
      seen.add(id(b))
      # written whole by its first use (and not read by it), and nobody outside the recording can reach it
      if i in written and not any(x is b for j, x in enumerate(bufs) if j not in written) and id(b) not in held \
         and id(b) not in keep and type(b) in (Buffer, PooledBuffer):
        pooled.add(b)
  resident = {b for _, bufs, _ in rec for b in bufs if b not in pooled}
  plan = plan_memory([_ordered(r, bufs) for r, bufs, _ in rec], lambda b: (b.device, b.nbytes), pooled, resident)
  check_plan(plan, _describe, "the captured jit")
  if not plan.slot_of: return rec
  slots = [Buffer(dev, nb, dtypes.uint8) for dev, nb in plan.slots]
  new: dict[int, Buffer] = {id(b): PooledBuffer(b.device, b.size, b.dtype, slots[j]) for b, j in plan.slot_of.items()}  # type: ignore[attr-defined]
  return [(r, tuple(new.get(id(b), b) for b in bufs), vv) for r, bufs, vv in rec]

def _written(runner: Any, bufs: tuple[Buffer, ...]) -> set[int]:
  spec = getattr(runner, "spec", None)
  return set(spec.outs) if spec is not None else {0}

def _ordered(runner: Any, bufs: tuple[Buffer, ...]) -> list[Buffer]:
  w = _written(runner, bufs)
  return [bufs[i] for i in sorted(w)] + [b for i, b in enumerate(bufs) if i not in w]
