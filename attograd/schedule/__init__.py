"""The scheduler: a tensor graph -> kernels in dependency order (ScheduleItems) and the buffers they use. Fusion
decisions (kernels.py), the schedule cache (create.py), where realized values live (realized.py), and which
intermediates may share memory (memory.py). The engine (engine/) runs what it produces."""
from attograd.schedule.create import create_schedule
from attograd.schedule.realized import lookup_realized, remember, remember_weakly
from attograd.engine.item import ScheduleItem

__all__ = ["create_schedule", "lookup_realized", "remember", "remember_weakly", "ScheduleItem"]
