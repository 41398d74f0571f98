"""VIZ=1: records every schedule, and for every kernel the UOp graph at each stage of the code generator with each
graph_rewrite's steps (the rule that fired, the node before and after), the linear program, the source, the applied
optimizations and the run times; at exit it serves them as a web page (viz/serve.py). Nothing here runs when off."""
from __future__ import annotations
import atexit, inspect, os, sys
from typing import Any, Callable
from attograd.helpers import ContextVar, getenv
from attograd.uop import ops as uops_mod
from attograd.uop.ops import PatternMatcher, UOp

VIZ = ContextVar("VIZ", 0)
MAX_NODES = 1500     # graphs larger than this are cut (the page says so)
MAX_STEPS = 2000     # rewrite steps kept per graph_rewrite
MAX_LOOSE = 300      # graph_rewrites outside kernels and schedules kept

class Recorder:
  """What the run did, as plain JSON-ready data."""
  def __init__(self) -> None:
    self.kernels: list[dict[str, Any]] = []
    self.schedules: list[dict[str, Any]] = []
    self.loose: list[dict[str, Any]] = []   # rewrites outside any kernel build (gradients, scheduling)
    self.current: dict[str, Any] | None = None  # the kernel being built
    self.by_key: dict[tuple[str, UOp], int] = {}

RECORDER = Recorder()

# ***** graphs as JSON *****

def _label(u: UOp) -> str:
  arg = "" if u.arg is None else (repr(u.arg) if len(repr(u.arg)) < 60 else repr(u.arg)[:57] + "...")
  return f"{u.op.name}\n{u.dtype}" + (f"\n{arg}" if arg else "")

def graph(root: UOp | list[UOp], limit: int = MAX_NODES) -> dict[str, Any]:
  """Nodes (id, label, op, src ids) of the graph under `root`, sources first; cut at `limit` nodes."""
  roots = root if isinstance(root, list) else [root]
  order: dict[UOp, None] = {}
  for r in roots:
    order.update(r.toposort())
    if len(order) > limit: break
  nodes = list(order)[:limit]
  ids = {n: i for i, n in enumerate(nodes)}
  return {"nodes": [{"id": ids[n], "label": _label(n), "op": n.op.name, "src": [ids[s] for s in n.src if s in ids]}
                    for n in nodes], "cut": len(order) > limit}

def _near(u: UOp, depth: int) -> dict[str, Any]:
  """`u` with its sources down to `depth` levels: what a rule saw or made."""
  keep: dict[UOp, None] = {}
  frontier = [u]
  for _ in range(depth + 1):
    nxt: list[Any] = []
    for n in frontier:
      if n not in keep:
        keep[n] = None
        nxt.extend(n.src)
    frontier = nxt
  nodes = list(keep)[::-1]
  ids = {n: i for i, n in enumerate(nodes)}
  return {"nodes": [{"id": ids[n], "label": _label(n), "op": n.op.name, "src": [ids[s] for s in n.src if s in ids]}
                    for n in nodes], "cut": False}

def uops_text(uops: list[UOp] | tuple[UOp, ...]) -> str:
  """The linear program, one line per UOp with its sources by line number."""
  ids = {u: i for i, u in enumerate(uops)}
  lines = []
  for i, u in enumerate(uops):
    src = ", ".join(f"%{ids[s]}" if s in ids else s.op.name for s in u.src)
    lines.append(f"%{i:<4d} {u.op.name:14s} {str(u.dtype):28s} [{src}] {'' if u.arg is None else repr(u.arg)}")
  return "\n".join(lines)

# ***** rule and matcher names *****

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # rule locations relative to it
_pm_names: dict[int, str] = {}
def _pm_name(pm: PatternMatcher) -> str:
  """The module-level name a matcher is bound to (`codegen.lowerer.pm_lower`), found once per matcher."""
  if (n := _pm_names.get(id(pm))) is not None: return n
  name = f"matcher of {len(pm.patterns)} rules"
  for mname, mod in list(sys.modules.items()):
    if not mname.startswith("attograd"): continue
    for k, v in list(vars(mod).items()):
      if v is pm: name = f"{mname.removeprefix('attograd.')}.{k}"
  _pm_names[id(pm)] = name
  return name

def _rule_name(fn: Callable[..., Any]) -> dict[str, Any]:
  code = fn.__code__
  try: src = inspect.getsourcelines(fn)[0][0].strip()
  except (OSError, TypeError, IndexError): src = ""
  where = f"{os.path.relpath(code.co_filename, _ROOT)}:{code.co_firstlineno}"
  return {"name": fn.__name__, "where": where, "source": src[:300]}

def _on_rewrite(pm: PatternMatcher, root: UOp, steps: list[tuple[UOp, UOp, Callable[..., Any]]], out: UOp) -> None:
  if not steps: return  # nothing fired: not worth a timeline entry
  kept = [{"rule": _rule_name(fn), "before": _near(b, 2), "after": _near(a, 3)} for b, a, fn in steps[:MAX_STEPS]]
  entry = {"kind": "rewrite", "name": _pm_name(pm), "input": graph(root), "output": graph(out), "n_steps": len(steps),
           "steps": kept}
  if RECORDER.current is not None: RECORDER.current["timeline"].append(entry)
  elif len(RECORDER.loose) < MAX_LOOSE: RECORDER.loose.append(entry)

# ***** what the other layers call (only when VIZ is on) *****

def begin_kernel(device: str, ast: UOp) -> None:
  first = {"kind": "graph", "name": "kernel AST (from the scheduler)", "graph": graph(ast)}
  RECORDER.current = {"device": device, "name": "?", "timeline": [first], "runs": []}

def stage(name: str, what: UOp | list[UOp] | tuple[UOp, ...] | str) -> None:
  """A snapshot of the kernel being built after a stage: a graph, a linear program or text (source, options)."""
  if (k := RECORDER.current) is None: return
  if isinstance(what, UOp): k["timeline"].append({"kind": "graph", "name": name, "graph": graph(what)})
  elif isinstance(what, str): k["timeline"].append({"kind": "text", "name": name, "text": what})
  else: k["timeline"].append({"kind": "text", "name": name, "text": uops_text(what)})

def end_kernel(device: str, ast: UOp, name: str, opts: tuple[Any, ...]) -> None:
  if (k := RECORDER.current) is None: return
  k["name"], k["opts"] = name, [str(o) for o in opts]
  RECORDER.by_key[(device, ast)] = len(RECORDER.kernels)
  RECORDER.kernels.append(k)
  RECORDER.current = None

def record_schedule(outs: list[UOp], n_items: int) -> None:
  RECORDER.schedules.append({"graph": graph(outs), "n_items": n_items, "kernels": []})

def kernel_ran(device: str, ast: UOp, seconds: float) -> None:
  """A kernel run: its time on its kernel's record, and its place in the latest schedule."""
  idx = RECORDER.by_key.get((device, ast))
  if idx is not None: RECORDER.kernels[idx]["runs"].append(seconds)
  if RECORDER.schedules and idx is not None: RECORDER.schedules[-1]["kernels"].append(idx)

def summary() -> dict[str, Any]:
  """The page's index: schedules and kernels without their (large) timelines."""
  ks = [{"i": i, "name": k["name"], "device": k["device"], "opts": k.get("opts", []), "runs": k["runs"],
         "stages": len(k["timeline"])} for i, k in enumerate(RECORDER.kernels)]
  ss = [{"i": i, "n_items": s["n_items"], "kernels": s["kernels"], "nodes": len(s["graph"]["nodes"])}
        for i, s in enumerate(RECORDER.schedules)]
  return {"kernels": ks, "schedules": ss, "loose": len(RECORDER.loose)}

def _serve_at_exit() -> None:
  from attograd.viz.serve import serve
  serve(RECORDER, getenv("VIZ_PORT", 8000), summary)

if VIZ:
  uops_mod.rewrite_tracer = _on_rewrite
  atexit.register(_serve_at_exit)
