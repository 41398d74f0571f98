"""Variables in graphs: the symbolic sizes in movement args, bound to values and unbound again (the schedule cache and
the JIT key graphs by their Variables, not their values), and the Variables a kernel reads."""
from __future__ import annotations
import functools
from typing import Any
from attograd.uop.ops import BindMismatchError, Ops, UOp, sint, ssimp

# movement ops whose args hold sizes (and so maybe Variables)
SIZED = (Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK)

@functools.lru_cache(maxsize=8192)
def sym_arg(arg: Any) -> bool:
  """A movement arg holding a symbolic size (cached: args are hashable tuples and few are symbolic)."""
  return any(isinstance(a, UOp) or (isinstance(a, tuple) and any(isinstance(b, UOp) for b in a)) for a in arg)

def map_arg(arg: Any, f: Any) -> Any:
  """A movement arg with `f` applied to each size in it (flat, or in pairs: a pad or shrink)."""
  return tuple(tuple(f(b) for b in a) if isinstance(a, tuple) else f(a) for a in arg)

def note_value(bind: UOp, var_vals: dict[UOp, int]) -> None:
  """Collect a bound Variable's value; one graph can't bind the same Variable to two values."""
  var, val = bind.src[0], bind.src[1].arg
  if var_vals.setdefault(var, val) != val:
    raise BindMismatchError(f"bind mismatch on Variable {var.arg[0]!r}: bound to both {var_vals[var]} and {val} in one "
                            "graph; realize one of them first, or use two Variables")

def unbind_size(x: sint, var_vals: dict[UOp, int]) -> sint:
  """A size with its bound Variables unbound; their values go into `var_vals`."""
  if not isinstance(x, UOp): return x
  subs = {}
  for b in x.toposort():
    if b.op is Ops.BIND:
      subs[b] = b.src[0]
      note_value(b, var_vals)
  return ssimp(x.substitute(subs))

def bind_size(x: sint, var_vals: dict[UOp, int]) -> sint:
  """Each Variable in a size bound to its value (a one-pass rebuild: a BIND holds its Variable, so a rewrite to a
  fixed point would never end)."""
  if not isinstance(x, UOp): return x
  if x.op is Ops.DEFINE_VAR: return x.bind(var_vals[x])
  return x.replace(src=tuple(bind_size(s, var_vals) for s in x.src)) if x.src else x


def ast_variables(ast: UOp) -> tuple[UOp, ...]:
  """The Variables a kernel reads: as values, and inside its views' sizes, strides and masks."""
  out: set[UOp] = set()
  for u in ast.toposort():
    if u.op is Ops.DEFINE_VAR: out.add(u)
    elif u.op is Ops.VIEW: out.update(u.arg.variables())
  return tuple(sorted(out, key=lambda v: v.arg))

