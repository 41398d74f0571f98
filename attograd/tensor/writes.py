"""Lazy in-place writes of realized buffers, realized together: the plan of one optimizer step (nn/optim.py), and
giving tensors buffers of their own to write. Tensor.assign's writes wait one by one for a realize that needs them
(tensor/pending.py), each its own schedule; a WritePlan's writes are realized together, so a whole optimizer step is
one schedule."""
from __future__ import annotations
from typing import Sequence
from attograd.helpers import ALLOW_DEVICE_USAGE
from attograd.engine.buffers import buffers, new_buffer_uop
from attograd.tensor.core import Tensor
from attograd.uop.ops import Ops, UOp

def realize_writes(ts: Sequence[Tensor]) -> None:
  """Realize `ts` together (writes and the values they read), without keeping the graphs behind the results for a
  later backward(): an optimizer's writes and gradients never need them, and holding them would keep a step's
  intermediates out of the memory planner's reuse."""
  Tensor._realize_all(ts, keep_graph=False)

def assign_together(writes: list[tuple[Tensor, Tensor]]) -> None:
  """target.assign(value) for each (target, value) pair, as one schedule instead of one each (a BatchNorm's three
  running statistics). The pairs are taken out of `writes`: the values must be the caller's temporaries, held by
  nothing else, since a live lazy tensor that reads a target is realized before the write to keep its value (here
  that would be every value, computed into buffers of their own first). No value may read another pair's target:
  each sees the targets as they were. Inside a @function body, where a realize raises, each is a Tensor.assign of
  its own (which runs at once there too), and so is every pair when one needs Tensor.assign's own casts,
  broadcasts or errors."""
  if not ALLOW_DEVICE_USAGE.value or any(v.device != t.device or v.dtype != t.dtype or v.shape != t.shape
                                         for t, v in writes):
    while writes:
      target, value = writes.pop(0)
      target._assign(value, value_private=True)
    return
  plan = WritePlan()
  while writes: plan.assign(*writes.pop(0))  # (no name here holds a value past its write)
  realize_writes(plan.tensors())

def _whole_buffer(t: Tensor) -> bool:
  """True when `t` is a realized buffer seen whole (through reshapes only): only those can be written in place."""
  return _whole(t.uop)

def _whole(u: UOp) -> bool:
  if u.op is Ops.MULTI: return all(_whole(s) for s in u.src)  # a tensor over several devices: each shard
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u.op is Ops.BUFFER

def _first_buffer(t: Tensor) -> UOp:
  return t.uop.src[0].base if t.uop.op is Ops.MULTI else t.uop.base

def _next_version(u: UOp) -> UOp:
  """A new BUFFER node over the same Buffer: the value after an in-place write (per shard over several devices)."""
  if u.op is Ops.MULTI: return UOp(Ops.MULTI, u.dtype, tuple(_next_version(s) for s in u.src), u.arg)
  base = u.base
  nxt = new_buffer_uop(base.device, base.arg[1], u.dtype, buffers[base])
  return nxt if u.shape == (base.arg[1],) else UOp(Ops.RESHAPE, u.dtype, (nxt,), u.shape)

class WritePlan:
  """One optimizer step as lazy tensors: gradients first (materialized), then an in-place write per tensor.

  Tensor.assign's writes run one schedule each; here the writes are realized together, so the whole step is one
  schedule. Two rules keep the writes safe when they run in one schedule:
  - a value that needs another tensor's *new* value reads it through the write returned by `assign`, so the
    scheduler runs that write first;
  - gradients may read parameters anywhere (a flip, a matmul), so they are computed into their own buffers before
    any write runs: they come first in `tensors()`.
  """
  def __init__(self) -> None:
    self.grads: list[Tensor] = []
    self.writes: list[Tensor] = []
  def grad(self, p: Tensor, g: Tensor) -> Tensor:
    """`g` as a tensor that is safe to read while the parameters are written."""
    if g.shape != p.shape: raise ValueError(f"step: a parameter of shape {p.shape} has a .grad of shape {g.shape}")
    if g.device != p.device: raise ValueError(f"step: a parameter on {p.device} has a .grad on {g.device}")
    if g.dtype != p.dtype: g = g.cast(p.dtype)
    if g.uop.base.op is not Ops.BUFFER:
      c = g.contiguous()
      # the parameter's own .grad becomes that buffer: read after the step, it is the gradient the step used (left
      # lazy, it would be computed again from the new weights)
      if g is p.grad: p.grad.uop, c = c.uop, p.grad
      self.grads.append(c)
      g = c
    return g
  def assign(self, target: Tensor, value: Tensor) -> Tensor:
    """Write `value` into `target`'s buffer when the plan is realized. Returns the write, to read the new value.

    `target` then refers to a new version of its buffer right away, as after Tensor.assign: graphs built from the
    old version (cached results included) are never mistaken for the new one.
    """
    # state the caller moved since (tinygrad's CPU offload: `for s in opt.m: s.to_("CPU")`) is a lazy copy: it gets a
    # buffer of its own on its new device first
    if not _whole_buffer(target): own_buffers([target])
    assert _whole_buffer(target), "optimizer state must be realized buffers"
    assert value.shape == target.shape, f"optimizer update of shape {value.shape} for a tensor of shape {target.shape}"
    if value.dtype != target.dtype: value = value.cast(target.dtype)
    write = Tensor(UOp(Ops.ASSIGN, target.dtype, (target.uop, value.uop)), device=target.device)
    self.writes.append(write)
    target.uop = _next_version(target.uop)
    return write
  def tensors(self) -> list[Tensor]: return self.grads + self.writes

def own_buffers(ts: Sequence[Tensor]) -> None:
  """Give each tensor a realized buffer of its own, so it can be written in place (one realize in the usual case).

  A lazy value is realized as itself, so graphs built from it before (a forward pass run before the optimizer was
  made) still reach it for backward(). What can't be written in place gets a copy in a fresh Tensor.empty: a
  constant, a non-contiguous view, and a buffer shared with another of `ts` (equal graphs are one node, so
  `Tensor.zeros(n).contiguous()` made twice realizes into one buffer).
  """
  uses: dict[UOp, int] = {}
  for t in ts: uses[t.uop] = uses.get(t.uop, 0) + 1
  lazy = [t for t in ts if not _whole_buffer(t) and t.uop.base.op is not Ops.CONST and uses[t.uop] == 1]
  # the lazy values and the copies of the others are one realize (an optimizer's lazily initialized weights and its
  # zero state: one schedule, whose small kernels share compiler runs, instead of two on a first run)
  plan, seen, lazy_ids = WritePlan(), set[int](), {id(t) for t in lazy}
  _copy_unwritable([t for t in ts if id(t) not in lazy_ids], plan, seen)
  if lazy or plan.writes: realize_writes(lazy + plan.tensors())
  # a lazy value that realized into something not writable in place (a view; a buffer another of `ts` holds)
  plan = WritePlan()
  _copy_unwritable(lazy, plan, seen)
  if plan.writes: realize_writes(plan.tensors())

def _copy_unwritable(ts: Sequence[Tensor], plan: WritePlan, seen: set[int]) -> None:
  """Plan a copy into a fresh buffer for each of `ts` that isn't a whole buffer, or whose buffer is in `seen`
  (the ids of the buffers already taken, which this adds to)."""
  for t in ts:
    if _whole_buffer(t) and id(buf := buffers[_first_buffer(t)]) not in seen:
      seen.add(id(buf))
      continue
    home = Tensor.empty(*t.shape, dtype=t.dtype, device=t.device)
    plan.assign(home, t)
    t.uop = home.uop
