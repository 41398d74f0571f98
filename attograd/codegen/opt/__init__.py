"""The code generator's optimization actions as tinygrad names them, and the search over them.

`Opt(OptOps.UPCAST, axis, arg)` and friends (this module) are the actions a user asks for on one kernel: through
`Tensor.contiguous(arg=(Opt(...), ...))` for the kernel that makes that tensor, or in a scheduled kernel's
`KernelInfo(opts_to_apply=...)` (attograd.uop.ops). `apply.py` maps them onto attograd's own loop-space actions
(`codegen/kernel.py`), numbering axes the way tinygrad does; an action that does not fit the kernel or the target
raises KernelOptError. `search.py` is BEAM=n; the default choice of actions is `codegen/heuristic.py`."""
from __future__ import annotations
from dataclasses import dataclass
from enum import Enum, auto

class OptOps(Enum):
  """UPCAST: unroll part of an output axis into registers; UNROLL: the same for a reduce axis; LOCAL: part of an output
  axis runs across a work-group's threads (GPU); GROUP / GROUPTOP: part of a reduce axis across a work-group's threads,
  strided / in contiguous chunks (GPU); THREAD: the outermost loop across CPU cores; PADTO: round an axis up to a
  multiple (the extra positions masked); SWAP: exchange two output axes' loop order; TC: a half matmul on tensor
  cores; NOLOCALS: forbid work-group actions after it."""
  TC = auto(); UPCAST = auto(); UNROLL = auto(); LOCAL = auto(); THREAD = auto() # noqa: E702
  GROUP = auto(); GROUPTOP = auto(); NOLOCALS = auto(); PADTO = auto(); SWAP = auto() # noqa: E702
  def __lt__(self, other: OptOps) -> bool: return self.value < other.value

@dataclass(frozen=True, order=True)
class Opt:
  """One action: `op` on `axis` (numbered as tinygrad numbers a kernel's axes: output axes first, then work-group,
  upcast, reduce and unrolled axes, each group in the order made; UNROLL counts reduce axes only, GROUP/GROUPTOP
  un-split reduce axes only) by `arg` (a size; 0: the whole axis; for SWAP the other axis; for TC a tuple)."""
  op: OptOps
  axis: int | None = None
  arg: int | tuple | None = None
  def __repr__(self) -> str: return f"Opt(op={self.op}, axis={self.axis}, arg={self.arg})"

class KernelOptError(ValueError):
  """An action that does not fit the kernel (an axis it does not have, a size that does not divide) or the target
  (work-groups on a CPU). A ValueError, as attograd's loop-space actions raise."""

def check(cond: bool, msg: str = "") -> None:
  if not cond: raise KernelOptError(msg)
