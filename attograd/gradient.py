"""Reverse-mode autodiff over the UOp graph: `pm_gradient` holds one rule per differentiable op, and
`compute_gradient` walks the graph backwards applying them. Gradients are new UOp graphs, so they can be
differentiated again."""
from __future__ import annotations
import math
from typing import Any, cast
from attograd.dtype import dtypes
from attograd.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat

# ***** tensor-level UOp builders: every node keeps a shape, constants carry a device and are broadcast *****

def full_like(u: UOp, val: float) -> UOp:
  """A constant with `u`'s shape, dtype and device (a scalar CONST viewed through reshape and expand)."""
  c = UOp(Ops.CONST, u.dtype, (UOp(Ops.DEVICE, arg=u.device),), dtypes.as_const(val, u.dtype))
  return _expand(reshape(c, (1,) * len(u.shape)), u.shape)

def _alu(op: Ops, *src: UOp) -> UOp:
  return UOp(op, dtypes.bool if op in GroupOp.Comparison else src[-1].dtype, src)

def _add(a: UOp, b: UOp) -> UOp: return _alu(Ops.ADD, a, b)
def _mul(a: UOp, b: UOp) -> UOp: return _alu(Ops.MUL, a, b)
def _div(a: UOp, b: UOp) -> UOp: return _alu(Ops.FDIV, a, b)
def _neg(a: UOp) -> UOp: return _alu(Ops.NEG, a)
def _mulc(a: UOp, c: float) -> UOp: return _mul(a, full_like(a, c))
def _where(c: UOp, a: UOp, b: UOp) -> UOp: return UOp(Ops.WHERE, a.dtype, (c, a, b))
def _zero(a: UOp) -> UOp: return full_like(a, 0)

def reshape(u: UOp, shape: tuple) -> UOp:
  """`u` reshaped (reshapes compose, and a reshape to the same shape is `u`)."""
  if u.shape == shape: return u
  if u.op is Ops.RESHAPE: u = u.src[0]  # reshapes compose
  return u if u.shape == shape else UOp(Ops.RESHAPE, u.dtype, (u,), shape)

def _expand(u: UOp, shape: tuple) -> UOp: return u if u.shape == shape else UOp(Ops.EXPAND, u.dtype, (u,), shape)

def _sum(u: UOp, axes: tuple[int, ...]) -> UOp:
  return UOp(Ops.REDUCE_AXIS, u.dtype, (u,), (Ops.ADD, axes)) if axes else u

def _argsort(x: tuple[int, ...]) -> tuple[int, ...]: return tuple(sorted(range(len(x)), key=x.__getitem__))

# ***** the rules: (ctx = gradient of the node, the node) -> one gradient per source, None where none flows *****

def _max_rule(ctx: UOp, ret: UOp) -> tuple[UOp, UOp]:
  # ties split the gradient evenly between both sides, like torch.maximum
  a, b = ret.src
  half, zero = _mulc(ctx, 0.5), _zero(ctx)
  tie = _where(_alu(Ops.CMPEQ, a, b), half, zero)
  return _where(_alu(Ops.CMPLT, b, a), ctx, tie), _where(_alu(Ops.CMPLT, a, b), ctx, tie)

def _pow_rule(ctx: UOp, ret: UOp) -> tuple[UOp, UOp]:
  # d/db b^e = e * b^(e-1), d/de b^e = b^e * ln(b) (0^e gives 0, or -inf for negative e)
  b, e = ret.src
  db = _mul(e, _alu(Ops.POW, b, _add(e, full_like(e, -1))))
  de = _mulc(_mul(ret, _alu(Ops.LOG2, b)), math.log(2))
  b0 = _alu(Ops.CMPEQ, b, _zero(b))
  de = _where(b0, _where(_alu(Ops.CMPLT, e, _zero(e)), full_like(e, -math.inf), _zero(e)), de)
  return _mul(ctx, _where(b0, _where(_alu(Ops.CMPEQ, e, _zero(e)), _zero(e), db), db)), _mul(ctx, de)

def _reduce_rule(ctx: UOp, ret: UOp) -> tuple[UOp]:
  x = ret.src[0]
  op, axes = ret.arg
  g = _expand(ctx, x.shape)
  if op is Ops.ADD: return (g,)
  if op is Ops.MAX:
    # the gradient goes to every position equal to the max, divided by how many there are
    is_max = _alu(Ops.CMPEQ, x, _expand(ret, x.shape)).cast(x.dtype)
    count = _expand(_sum(is_max, axes), x.shape)
    return (_mul(_div(is_max, count), g),)
  if op is Ops.MUL:
    # d prod / dx_i is the product of the others: with no zero that is prod/x_i; with one zero only the zero's
    # position gets the product of the nonzeros; with two or more zeros every gradient is 0
    is0 = _alu(Ops.CMPEQ, x, _zero(x))
    safe = _where(is0, full_like(x, 1), x)
    nz_prod = _expand(UOp(Ops.REDUCE_AXIS, x.dtype, (safe,), (Ops.MUL, axes)), x.shape)
    zeros = _expand(_sum(is0.cast(x.dtype), axes), x.shape)
    at_zero = _where(_alu(Ops.CMPEQ, zeros, full_like(x, 1)), nz_prod, _zero(x))
    no_zero = _where(_alu(Ops.CMPEQ, zeros, _zero(x)), _div(nz_prod, safe), _zero(x))
    return (_mul(_where(is0, at_zero, no_zero), g),)
  raise RuntimeError(f"gradient: no rule for a {op.name} reduce")

def _cast_rule(ctx: UOp, ret: UOp) -> tuple[UOp | None]:
  src = ret.src[0]
  return (ctx.cast(src.dtype) if dtypes.is_float(src.dtype) else None,)

def _copy_rule(ctx: UOp, ret: UOp) -> tuple[UOp | None, None]:
  # the gradient goes back to the source's device; COPY reads a whole buffer, so make one
  x = ret.src[0]
  if ctx.op is not Ops.BUFFER: ctx = UOp(Ops.CONTIGUOUS, ctx.dtype, (ctx,))
  return UOp(Ops.COPY, ctx.dtype, (ctx, UOp(Ops.DEVICE, arg=x.device))), None

def _multi_rule(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
  # each shard gets its rows of the gradient, on its device; whole copies are one value: only the first one gets it
  from attograd.engine.multi import bounds
  if ret.arg is None: return (UOp(Ops.COPY, ctx.dtype, (ctx, UOp(Ops.DEVICE, arg=ret.src[0].device))),) + \
    (None,) * (len(ret.src) - 1)
  rows = [UOp(Ops.SHRINK, ctx.dtype, (ctx,), tuple(b if i == ret.arg else (0, n) for i, n in enumerate(ctx.shape)))
          for b in bounds(ret)]
  return tuple(UOp(Ops.COPY, ctx.dtype, (UOp(Ops.CONTIGUOUS, ctx.dtype, (r,)), UOp(Ops.DEVICE, arg=s.device)))
               for r, s in zip(rows, ret.src))

def _cos(x: UOp) -> UOp: return _alu(Ops.SIN, _add(_neg(x), full_like(x, math.pi / 2)))

def _where_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp, UOp]:
  cond, zero = ret.src[0], _zero(ctx)
  return None, _where(cond, ctx, zero), _where(cond, zero, ctx)

def _expand_rule(ctx: UOp, ret: UOp) -> tuple[UOp]:
  return (_sum(ctx, tuple(i for i, (a, b) in enumerate(zip(ret.src[0].shape, ret.arg)) if a != b)),)

def _pad_rule(ctx: UOp, ret: UOp) -> tuple[UOp]:
  return (UOp(Ops.SHRINK, ctx.dtype, (ctx,), tuple((b, b + s) for s, (b, _) in zip(ret.src[0].shape, ret.arg))),)

def _shrink_rule(ctx: UOp, ret: UOp) -> tuple[UOp]:
  return (UOp(Ops.PAD, ctx.dtype, (ctx,), tuple((b, s - e) for s, (b, e) in zip(ret.src[0].shape, ret.arg))),)

# elementwise functions computed by formulas that differentiate badly (Tensor._custom_grad): (value, x) -> dx
def _sign(x: UOp) -> UOp:
  zero = _zero(x)
  return _where(_alu(Ops.CMPLT, zero, x), full_like(x, 1), _where(_alu(Ops.CMPLT, x, zero), full_like(x, -1), zero))

def _abs_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp]: return None, _mul(ctx, _sign(ret.src[1]))  # 0 at 0, like torch
def _relu_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp]:
  x = ret.src[1]
  return None, _where(_alu(Ops.CMPLT, _zero(x), x), ctx, _zero(ctx))  # 0 at 0 and at NaN, like torch
def _log1p_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp]:
  x = ret.src[1]
  return None, _div(ctx, _add(x, full_like(x, 1)))
def _expm1_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp]: return None, _mul(ctx, _add(ret, full_like(ret, 1)))
# CUSTOM_GRAD markers by name: each rule gives the gradients of the marker's sources (None for the value itself).
# The rules written over UOps are here; those written with Tensor methods (conv2d, acosh, pow, max_unpool2d) are
# registered by the Tensor layer that makes their markers (tensor/grad_rules.py), and attograd.function's by it.
custom_grad_rules: dict[str, Any] = {"relu": _relu_rule, "abs": _abs_rule, "log1p": _log1p_rule, "expm1": _expm1_rule}

def register_custom_grad(name: str, rule: Any) -> None:
  """Adds the gradient rule of the CUSTOM_GRAD markers named `name` (one rule per name)."""
  if name in custom_grad_rules: raise ValueError(f"gradient: a rule for the CUSTOM_GRAD marker {name!r} exists already")
  custom_grad_rules[name] = rule

def _nones(ret: UOp) -> tuple[None, ...]: return (None,) * len(ret.src)

pm_gradient = PatternMatcher([
  # elementwise
  (UPat(Ops.ADD), lambda ctx: (ctx, ctx)),
  (UPat(Ops.SUB), lambda ctx: (ctx, _neg(ctx))),
  (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (_mul(ctx, ret.src[1]), _mul(ctx, ret.src[0]))),
  (UPat(Ops.FDIV, name="ret"), lambda ctx, ret: (_div(ctx, ret.src[1]), _neg(_div(_mul(ctx, ret), ret.src[1])))),
  (UPat(Ops.NEG), lambda ctx: (_neg(ctx),)),
  (UPat(Ops.MAX, name="ret"), _max_rule),
  (UPat(Ops.POW, name="ret"), _pow_rule),
  (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (_mulc(_mul(ctx, ret), math.log(2)),)),
  (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (_div(ctx, _mulc(ret.src[0], math.log(2))),)),
  (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (_mul(ctx, _cos(ret.src[0])),)),
  (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (_div(ctx, _mulc(ret, 2)),)),
  (UPat(Ops.RECIP, name="ret"), lambda ctx, ret: (_neg(_mul(_mul(ctx, ret), ret)),)),
  (UPat(Ops.WHERE, name="ret"), _where_rule),
  (UPat(Ops.CAST, name="ret"), _cast_rule),
  # piecewise constant or integer-only: no gradient
  (UPat({Ops.TRUNC, Ops.BITCAST, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR} | GroupOp.Comparison,
        name="ret"), _nones),
  # reduce
  (UPat(Ops.REDUCE_AXIS, name="ret"), _reduce_rule),
  # movement: each moves the gradient back the other way
  (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (reshape(ctx, ret.src[0].shape),)),
  (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (UOp(Ops.PERMUTE, ctx.dtype, (ctx,), _argsort(ret.arg)),)),
  (UPat(Ops.EXPAND, name="ret"), _expand_rule),
  (UPat(Ops.PAD, name="ret"), _pad_rule),
  (UPat(Ops.SHRINK, name="ret"), _shrink_rule),
  (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (UOp(Ops.FLIP, ctx.dtype, (ctx,), ret.arg),)),
  # graph markers
  (UPat(Ops.CONTIGUOUS), lambda ctx: (ctx,)),
  (UPat(Ops.CUSTOM_GRAD, name="ret"), lambda ctx, ret: custom_grad_rules[ret.arg[0]](ctx, ret)),
  (UPat(Ops.CONTIGUOUS_BACKWARD), lambda ctx: (UOp(Ops.CONTIGUOUS, ctx.dtype, (ctx,)),)),
  (UPat(Ops.DETACH), lambda: (None,)),
  (UPat(Ops.COPY, name="ret"), _copy_rule),
  (UPat(Ops.MULTI, name="ret"), _multi_rule),
])

def _warm(u: UOp) -> None:
  # shape and device are cached properties computed recursively on first use: computing them node by node, sources
  # first, keeps that recursion shallow on graphs thousands of nodes deep
  _ = u.shape, u.device

# ops the walk never steps through: gradients stop at them
_stop = {Ops.DETACH, Ops.ASSIGN}

def _path_to_targets(root: UOp, targets: set[UOp]) -> tuple[list[UOp], set[UOp]]:
  """The nodes below `root` that lie on a path to some target, each after its sources (iterative, any depth), and
  that set with the targets added."""
  on_path: dict[UOp, bool] = {}
  order: list[UOp] = []
  for u in root.toposort():
    _warm(u)
    on_path[u] = u.op not in _stop and any(s in targets or on_path[s] for s in u.src)
    if on_path[u]: order.append(u)
  return order, set(order) | targets

def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  """The gradient of `root` (seeded with `root_grad`) with respect to every node on a path from it to `targets`."""
  if root_grad.shape != root.shape:
    raise ValueError(f"gradient: the seed gradient's shape {root_grad.shape} doesn't match the output's {root.shape}")
  grads: dict[UOp, UOp] = {root: root_grad}
  order, wanted = _path_to_targets(root, targets)
  for u in reversed(order):
    if (g := grads.get(u)) is None: continue
    local = cast("tuple[UOp | None, ...] | None", pm_gradient.rewrite(u, ctx=g))
    if local is None: raise RuntimeError(f"gradient: no rule to differentiate {u.op} ({u.dtype}, shape {u.shape})")
    assert len(local) == len(u.src), f"gradient rule for {u.op} gave {len(local)} grads for {len(u.src)} sources"
    for s, sg in zip(u.src, local):
      if sg is None or s not in wanted: continue
      assert sg.shape == s.shape, f"gradient rule for {u.op}: grad shape {sg.shape} != source shape {s.shape}"
      grads[s] = acc = _add(grads[s], sg) if s in grads else sg
      _warm(acc)
  return grads
