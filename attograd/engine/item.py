"""ScheduleItem: one step of a schedule, the type the scheduler (schedule/, above) hands the engine to run. It lives in
a module of its own, importing only the device and the IR, so the scheduler can name it without importing the runner
(and, through it, the codegen and the rest of the engine)."""
from __future__ import annotations
from dataclasses import dataclass
from attograd.device import Buffer
from attograd.uop.ops import UOp

@dataclass(frozen=True)
class ScheduleItem:
  ast: UOp                       # SINK of STOREs (a kernel) or COPY
  bufs: tuple[Buffer, ...]       # outputs first, then inputs, in DEFINE_GLOBAL order
  var_vals: tuple[tuple[UOp, int], ...] = ()
