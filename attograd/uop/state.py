"""The state the layers above attach to UOps. A UOp's identity (op, dtype, src, arg) is immutable and hash-consed;
the facts learned about a node after it is built (which Buffer a BUFFER node stands for, where a realized node's value
now lives) are kept here, in named slots, instead of in tables that would need weak references on every lookup.

Every slot is listed in SLOTS with the layer that writes it. A slot's value lives exactly as long as its node.
(Storage is the node's instance dict, the same place `cached` properties land: one dict access per lookup, which
matters because the scheduler and realize look these up for every node of every graph.)"""
from __future__ import annotations
import operator
from typing import Any

BUFFER = "buffer"        # BUFFER node -> its device Buffer (written by engine/buffers.py)
REALIZED = "_realized"   # any node -> (view, buffer version, deps): where its value lives (schedule/realized.py)
PURE = "_pure"           # True on a node built only of constants, movement and ALU ops (schedule/create.py)
ORIGIN = "_origin"       # a realized BUFFER view -> the graph that computed it, for autograd (tensor.py, mixin/grad.py)

SLOTS: dict[str, str] = {BUFFER: "the Buffer of a BUFFER node", REALIZED: "where a realized node's value lives",
                         PURE: "built only from constants", ORIGIN: "the graph a realized value came from"}

# the slot dict of a node, for the hot loops that test or read slots of every node of a graph (the scheduler's
# normalize pass, the buffer table): `state.PURE in slots(u)`. A C-level getter: a Python function call per lookup
# cost about 5% of a small graph's realize.
slots = operator.attrgetter("__dict__")

def get(u: Any, slot: str, default: Any = None) -> Any:
  """The value in `slot` of node `u`, or `default` when it has none."""
  return u.__dict__.get(slot, default)

def has(u: Any, slot: str) -> bool: return slot in u.__dict__

def put(u: Any, slot: str, value: Any) -> None: u.__dict__[slot] = value

def drop(u: Any, slot: str) -> None:
  """Forget `slot` of `u` (nothing happens when it has none)."""
  u.__dict__.pop(slot, None)

class BufferTable:
  """BUFFER node -> its Buffer, kept on the node itself (the BUFFER slot): it lives exactly as long as the node, and a
  lookup is one dict access (a WeakKeyDictionary makes a weakref per lookup, which showed up in per-realize
  overhead). The engine fills it (engine/buffers.py); tinygrad's `buffers` table."""
  def __getitem__(self, u: Any) -> Any:
    if (b := u.__dict__.get(BUFFER)) is None: raise KeyError(f"{u.op} has no Buffer")
    return b
  def get(self, u: Any, default: Any = None) -> Any: return u.__dict__.get(BUFFER, default)
  def __setitem__(self, u: Any, b: Any) -> None: u.__dict__[BUFFER] = b
  def __contains__(self, u: Any) -> bool: return BUFFER in u.__dict__

# realized buffers: each BUFFER UOp (one per buffer version) points at its Buffer
buffers = BufferTable()
