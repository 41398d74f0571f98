"""Programs cached on disk: a new process skips lowering and linearizing kernels it has seen before. A program's key
is a hash of the kernel's AST, the renderer, the actions asked for and attograd's own source."""
from __future__ import annotations
import dataclasses, functools, hashlib, json, os
from attograd.dtype import to_dtype
from attograd.helpers import NOOPT
from attograd.renderer import ProgramSpec, Renderer
from attograd.uop.ops import Ops, UOp, pretty_print

@functools.cache
def _code_version() -> str:
  """A hash of attograd's own source: a cached program is only reused by the code that made it."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  h = hashlib.sha256()
  for d, _, files in sorted(os.walk(root)):
    for f in sorted(files):
      if f.endswith(".py"):
        with open(os.path.join(d, f), "rb") as fh: h.update(f.encode() + fh.read())
  return h.hexdigest()

def _arg_uops(arg: object) -> list[UOp]:
  """The UOps inside an arg (symbolic sizes and strides of a VIEW's ShapeTracker), through tuples and dataclasses."""
  if isinstance(arg, UOp): return [arg]
  if isinstance(arg, (tuple, list)): return [u for a in arg for u in _arg_uops(a)]
  if dataclasses.is_dataclass(arg): return [u for f in dataclasses.fields(arg) for u in _arg_uops(getattr(arg, f.name))]
  return []

def ast_key(ast: UOp, renderer: Renderer, opts: list | None) -> str:
  ids: dict[UOp, int] = {}
  parts = [_code_version(), type(renderer).__name__, repr(sorted(vars(renderer).items(), key=lambda kv: kv[0])),
           repr(opts), str(NOOPT.value)]
  for u in ast.toposort():
    ids[u] = len(ids)
    parts.append(f"{u.op.name}|{u.dtype!r}|{u.arg!r}|{[ids[s] for s in u.src]}")
    # an arg's repr prints a big expression as its root and node count only: two kernels differing inside one
    # would share a key (and the program from disk), so expressions in args are keyed in full
    parts.extend(pretty_print(e, max_nodes=1 << 62) for e in _arg_uops(u.arg))
  return hashlib.sha256("\n".join(parts).encode()).hexdigest()

def spec_to_bytes(sp: ProgramSpec) -> bytes:
  return json.dumps({"name": sp.name, "src": sp.src, "device": sp.device, "globals": sp.globals, "outs": sp.outs,
                     "vars": [[v.arg[0], v.arg[1], v.arg[2], v.dtype.name] for v in sp.vars],
                     "op_estimate": sp.op_estimate,
                     "mem_estimate": sp.mem_estimate, "opts": [[o.op, o.axis, o.amount] for o in sp.applied_opts],
                     "global_size": sp.global_size, "local_size": sp.local_size, "lds": sp.lds_estimate}).encode()

def spec_from_bytes(data: bytes) -> ProgramSpec | None:
  from attograd.codegen.kernel import Opt
  try:
    d = json.loads(data)
    tup = lambda x: tuple(x) if x is not None else None  # noqa: E731
    # a Variable's dtype: int32, or int64 for one with bounds past int32's
    variables = tuple(UOp(Ops.DEFINE_VAR, to_dtype(v[3]), (), tuple(v[:3])) for v in d["vars"])
    return ProgramSpec(d["name"], d["src"], d["device"], (), tuple(d["globals"]), tuple(d["outs"]), variables,
                       d["op_estimate"],
                       d["mem_estimate"], tuple(Opt(*o) for o in d["opts"]), tup(d["global_size"]),
                       tup(d["local_size"]), d["lds"])
  except (ValueError, KeyError, TypeError, IndexError): return None  # an entry from another layout: rebuilt
