"""Views and values in a hand-written kernel body (tinygrad's kernel-building API, see UOp.placeholder and Ops.PARAM).

A placeholder is a UOp without a device, so the Tensor's methods UOp borrows (tensor/uop_methods.py) can't build on
it: here are the few a kernel body uses, on the kernel's own terms. Movement ops on a placeholder are views of its
buffer (the compiler turns them into index math), `buf[i, j]` is an element (INDEX), and `/` on an element's value is
the ALU op. tensor/uop_methods.py routes a borrowed name here when its UOp is part of a kernel body."""
from __future__ import annotations
import dataclasses, math
from typing import Any, Callable
from attograd.dtype import AddrSpace, ConstType
from attograd.dtype import dtypes
from attograd.helpers import prod
from attograd.uop.ops import GroupOp, Ops, UOp, shape_str

def is_kernel_view(u: UOp) -> bool:
  """A view of a kernel's buffer: a PARAM seen through movement ops, AFTERs and partial indexing."""
  while u.op in GroupOp.Movement or u.op is Ops.AFTER or (u.op is Ops.INDEX and u.shape): u = u.src[0]
  return u.op is Ops.PARAM

def is_kernel_value(u: UOp) -> bool:
  """A deviceless value computed in a kernel body: one that reads a kernel buffer or a loop index."""
  return u.device is None and any(n.op is Ops.PARAM or (n.op is Ops.RANGE and n.arg.__class__ is tuple and
                                                       not isinstance(n.arg[1], str)) for n in u.toposort())

def view_param(u: UOp) -> UOp | None:
  """The PARAM a kernel buffer view (or one element of it) is a view of, else None."""
  while u.op in GroupOp.Movement or u.op in (Ops.AFTER, Ops.INDEX): u = u.src[0]
  return u if u.op is Ops.PARAM else None

def written_slots(body: UOp) -> set[int]:
  """The argument slots a kernel body stores into."""
  return {p.arg.slot for st in body.toposort() if st.op is Ops.STORE and (p := view_param(st.src[0])) is not None
          and p.arg.addrspace is AddrSpace.GLOBAL}

def fold_constant_args(body: UOp, consts: dict[int, ConstType]) -> tuple[UOp, list[int]]:
  """The body with every read of argument slot s in `consts` (slots it doesn't store into) as the constant
  consts[s], and the arguments it still reads renumbered 0.. in slot order; returns it and those arguments' old
  slots, in their new order (a constant argument needs no buffer)."""
  subs: dict[UOp, UOp] = {}
  for u in body.toposort():
    if u.op is Ops.INDEX and not u.shape and (p := view_param(u)) is not None and \
       p.arg.addrspace is AddrSpace.GLOBAL and p.arg.slot in consts:
      subs[u] = UOp.const(u.dtype, consts[p.arg.slot])
  if subs: body = body.substitute(subs)
  params = [p for p in body.toposort() if p.op is Ops.PARAM and p.arg.addrspace is AddrSpace.GLOBAL]
  kept = sorted({p.arg.slot for p in params})
  ren = {p: p.replace(arg=dataclasses.replace(p.arg, slot=kept.index(p.arg.slot))) for p in params
         if kept.index(p.arg.slot) != p.arg.slot}
  return (body.substitute(ren) if ren else body), kept

def _dims(args: tuple[Any, ...]) -> tuple[Any, ...]:
  return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args

def _axis(u: UOp, a: int) -> int:
  if not -len(u.shape) <= a < len(u.shape):
    raise IndexError(f"axis {a} is out of range for a kernel buffer view of shape {shape_str(u.shape)}")
  return a % len(u.shape)

def reshape(u: UOp, *shape: Any) -> UOp:
  new = list(_dims(shape))
  if new.count(-1) > 1: raise ValueError("reshape: at most one -1")
  if -1 in new: new[new.index(-1)] = prod(u.shape) // prod(d for d in new if d != -1)
  if prod(new) != prod(u.shape):
    raise ValueError(f"reshape: a kernel buffer view of shape {shape_str(u.shape)} can't be seen as {tuple(new)}")
  return u if tuple(new) == u.shape else UOp(Ops.RESHAPE, u.dtype, (u,), tuple(new))

def flatten(u: UOp, start_dim: int = 0, end_dim: int = -1) -> UOp:
  if not u.shape: return reshape(u, 1)
  s, e = _axis(u, start_dim), _axis(u, end_dim)
  return reshape(u, *u.shape[:s], prod(u.shape[s:e + 1]), *u.shape[e + 1:])

def permute(u: UOp, *order: Any) -> UOp:
  o = tuple(_axis(u, a) for a in _dims(order))
  if sorted(o) != list(range(len(u.shape))): raise ValueError(f"permute: {o} is not an order of {len(u.shape)} dims")
  return u if o == tuple(range(len(o))) else UOp(Ops.PERMUTE, u.dtype, (u,), o)

def transpose(u: UOp, dim0: int = 1, dim1: int = 0) -> UOp:
  o = list(range(len(u.shape)))
  a, b = _axis(u, dim0), _axis(u, dim1)
  o[a], o[b] = o[b], o[a]
  return permute(u, *o)

def shrink(u: UOp, arg: tuple[tuple[int, int] | None, ...]) -> UOp:
  full = tuple((0, s) if a is None else (a[0], a[1]) for a, s in zip(arg, u.shape))
  if any(not 0 <= b <= e <= s for (b, e), s in zip(full, u.shape)):
    raise ValueError(f"shrink: {full} is outside a kernel buffer view of shape {shape_str(u.shape)}")
  return u if all(b == 0 and e == s for (b, e), s in zip(full, u.shape)) else UOp(Ops.SHRINK, u.dtype, (u,), full)

def pad(u: UOp, arg: tuple[tuple[int, int] | None, ...]) -> UOp:
  full = tuple((0, 0) if a is None else (a[0], a[1]) for a in arg)
  return u if all(p == (0, 0) for p in full) else UOp(Ops.PAD, u.dtype, (u,), full)

def flip(u: UOp, *axis: Any) -> UOp:
  axes = {_axis(u, a) for a in _dims(axis)}
  return UOp(Ops.FLIP, u.dtype, (u,), tuple(i in axes for i in range(len(u.shape)))) if axes else u

def expand(u: UOp, *shape: Any) -> UOp:
  new = tuple(s if n == -1 else n for s, n in zip(u.shape, _dims(shape)))
  if any(s != n and s != 1 for s, n in zip(u.shape, new)) or len(new) != len(u.shape):
    raise ValueError(f"expand: a kernel buffer view of shape {shape_str(u.shape)} can't expand to {new}")
  return u if new == u.shape else UOp(Ops.EXPAND, u.dtype, (u,), new)

def numel(u: UOp) -> int: return prod(u.shape)

def getitem(u: UOp, idx: Any) -> UOp:
  """`buf[i, j]`: ints and index values select elements (the leading dims after slicing); slices cut a dim and keep
  it, as in tinygrad (the selected dims come first, the sliced ones stay as the element view's dims)."""
  items = list(idx) if isinstance(idx, tuple) else [idx]
  base = u.src[0] if u.op is Ops.INDEX else u
  done = list(u.src[1:]) if u.op is Ops.INDEX else []
  rest = base.shape[len(done):]
  if items.count(Ellipsis) > 1: raise IndexError("a kernel buffer view's index takes one ... at most")
  if Ellipsis in items:  # ... stands for full slices of the dims the rest doesn't name
    at = items.index(Ellipsis)
    items[at:at + 1] = [slice(None)] * (len(rest) - len(items) + 1)
  if len(items) > len(rest): raise IndexError(f"{len(items)} indices for a kernel buffer view of shape "
                                              f"{shape_str(rest)}")
  if any(x is None for x in items):
    raise IndexError("a kernel buffer view takes ints, index values, slices and ... (no None)")
  items += [slice(None)] * (len(rest) - len(items))
  if not any(isinstance(x, slice) for x in items): return base.index(*done, *items)
  if done: raise IndexError("slice a kernel buffer view before selecting elements of it")
  bounds = []
  for x, s in zip(items, rest):
    if isinstance(x, slice):
      b, e, st = x.indices(s)
      if st != 1: raise IndexError("a kernel buffer view's slices take no step")
      bounds.append((b, e))
    else: bounds.append((0, s))
  v = shrink(base, tuple(bounds))
  sel = [i for i, x in enumerate(items) if not isinstance(x, slice)]
  v = permute(v, *sel, *[i for i, x in enumerate(items) if isinstance(x, slice)])
  return v.index(*[items[i] for i in sel]) if sel else v

def truediv(a: UOp, b: Any) -> UOp:
  bu = b if isinstance(b, UOp) else a.const_like(b)
  if not dtypes.is_float(a.dtype): raise TypeError(f"/ in a kernel body divides floats, not {a.dtype}; use // for ints")
  return UOp(Ops.FDIV, a.dtype, (a, bu))

def rtruediv(a: UOp, b: Any) -> UOp: return truediv(a.const_like(b), a)

def _float(a: UOp) -> UOp: return a if dtypes.is_float(a.dtype) else a.cast(dtypes.float32)
def _unary(op: Ops) -> Callable[[UOp], UOp]:
  def fn(a: UOp) -> UOp:
    x = _float(a)
    return UOp(op, x.dtype, (x,))
  return fn
def exp(a: UOp) -> UOp: return _unary(Ops.EXP2)(_float(a) * (1 / math.log(2)))
def log(a: UOp) -> UOp: return _unary(Ops.LOG2)(a) * math.log(2)
def absolute(a: UOp) -> UOp: return (a < 0).where(-a, a)

# the borrowed Tensor names a kernel buffer view answers itself; VALUE_METHODS: those of a value computed in a body
VIEW_METHODS: dict[str, Callable[..., Any]] = {
  "reshape": reshape, "flatten": flatten, "permute": permute, "transpose": transpose, "shrink": shrink, "pad": pad,
  "flip": flip, "expand": expand, "numel": numel, "__getitem__": getitem}
VALUE_METHODS: dict[str, Callable[..., Any]] = {
  "__truediv__": truediv, "__rtruediv__": rtruediv, "div": truediv, "exp2": _unary(Ops.EXP2), "log2": _unary(Ops.LOG2),
  "sqrt": _unary(Ops.SQRT), "sin": _unary(Ops.SIN), "reciprocal": _unary(Ops.RECIP), "exp": exp, "log": log,
  "abs": absolute, "__abs__": absolute}
