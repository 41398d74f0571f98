"""What a TinyJit capture records while its function runs, and how the code running kernels finds it. The JIT
installs a Recorder for the length of the capture (`with recording(rec):`); run_schedule reports every kernel and copy
it runs to it, the shape checks report the size facts they passed on, and the random functions note the buffers they
read their keys from. Outside a capture `active()` is None, and nothing is recorded."""
from __future__ import annotations
import contextvars
from contextlib import contextmanager
from typing import Any, Iterator

class JitError(Exception):
  """A misuse of TinyJit (tinygrad's name for it), raised by the JIT and by a Tensor read during a capture. Each one is
  also the builtin error it always was, so code that catches TypeError, ValueError or RuntimeError keeps working."""
class JitTypeError(JitError, TypeError): pass
class JitValueError(JitError, ValueError): pass
class JitRuntimeError(JitError, RuntimeError): pass

class Recorder:
  """One capture: the kernels run (runner, buffers, variable values, in order), the size facts over symbolic sizes
  that the traced function's checks passed on, as (a, b, is_eq, what) for a <= b (a == b when is_eq), checked again
  on each replay, whose kernels, built for the captured values, would otherwise read outside their buffers (x[:v] with
  v past x's size), and the random draws: (the uint32 Tensor holding the draw's key, the device, the count of words the
  device drew before it), so each replay writes the keys of its own draws."""
  __slots__ = ("owner", "kernels", "size_checks", "rng_draws")
  def __init__(self, owner: Any):
    self.owner = owner  # the TinyJit capturing: named when another jit is called inside it
    self.kernels: list[tuple[Any, tuple[Any, ...], dict[str, int]]] = []
    self.size_checks: list[tuple[Any, Any, bool, str]] = []
    self.rng_draws: list[tuple[Any, Any, int]] = []
  def kernel(self, runner: Any, bufs: tuple[Any, ...], var_vals: dict[str, int]) -> None:
    self.kernels.append((runner, bufs, var_vals))
  def size_check(self, a: Any, b: Any, is_eq: bool, what: str) -> None: self.size_checks.append((a, b, is_eq, what))

_current: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar("attograd_recorder", default=None)
# the Recorder installed now, or None: a C-level getter, as graph building reads it on every reshape and shrink
active = _current.get

@contextmanager
def recording(rec: Recorder) -> Iterator[Recorder]:
  """Record into `rec` inside the block (in this thread: other threads record nothing)."""
  token = _current.set(rec)
  try: yield rec
  finally: _current.reset(token)
