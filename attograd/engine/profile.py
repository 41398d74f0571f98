"""The profiler: every schedule step, lowering, compile, kernel run and copy as a span in a Chrome trace / Perfetto
JSON file, one process row per device. On with PROFILE=1 (written at exit to PROFILE_PATH) or `with profile(path):`."""
from __future__ import annotations
import atexit, contextlib, json, os, threading, time
from typing import Any, Iterator
from attograd.helpers import ContextVar, getenv

PROFILE = ContextVar("PROFILE", 0)

class Profiler:
  """Collects trace events. `active` is read on hot paths: when False nothing else here runs."""
  def __init__(self) -> None:
    self.active = False
    self.events: list[dict[str, Any]] = []
    self.pids: dict[str, int] = {}
    self.lock = threading.Lock()

  def now(self) -> float: return time.perf_counter()

  def span(self, name: str, cat: str, device: str, start: float, end: float, **args: Any) -> None:
    """A complete event from `start` to `end` (perf_counter seconds) on `device`'s row."""
    with self.lock:
      if (pid := self.pids.get(device)) is None:
        pid = self.pids[device] = len(self.pids) + 1
        self.events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": device}})
      self.events.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": _TIDS[cat],
                          "ts": start * 1e6, "dur": max(end - start, 0.0) * 1e6, "args": args})

  def write(self, path: str) -> None:
    """Write the trace (Chrome's JSON object format, which Perfetto and chrome://tracing open)."""
    with self.lock: events = list(self.events)
    names = [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": cat}}
             for pid in self.pids.values() for cat, tid in _TIDS.items()]
    with open(path, "w") as f: json.dump({"traceEvents": names + events, "displayTimeUnit": "ms"}, f)

# one thread row per kind of work, so kernels are not hidden under the compiles that preceded them
_TIDS = {"schedule": 1, "lower": 2, "compile": 3, "kernel": 4, "copy": 5, "jit": 6}

PROFILER = Profiler()

@contextlib.contextmanager
def profile(path: str | None = None) -> Iterator[Profiler]:
  """Record everything run inside the block and write the trace to `path` (default PROFILE_PATH, else
  ./attograd_trace.json) when it ends. Open the file at ui.perfetto.dev or chrome://tracing."""
  path = path or getenv("PROFILE_PATH", "attograd_trace.json")
  was_active, PROFILER.active = PROFILER.active, True
  start = len(PROFILER.events)
  try: yield PROFILER
  finally:
    PROFILER.active = was_active
    if not was_active: _write_since(path, start)

def _write_since(path: str, start: int) -> None:
  p = Profiler()
  with PROFILER.lock: p.events, p.pids = PROFILER.events[start:], dict(PROFILER.pids)
  # the process-name records made before `start` are needed too
  p.events = [e for e in PROFILER.events[:start] if e["ph"] == "M"] + p.events
  p.write(path)

def _write_at_exit() -> None:
  path = getenv("PROFILE_PATH", "attograd_trace.json")
  PROFILER.write(path)
  print(f"PROFILE: trace of {sum(e['ph'] == 'X' for e in PROFILER.events)} events written to {os.path.abspath(path)}")

if PROFILE:
  PROFILER.active = True
  atexit.register(_write_at_exit)
