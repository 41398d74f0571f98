"""Reverse-mode autodiff over the UOp graph: `pm_gradient` holds one rule per differentiable op, and
`compute_gradient` walks the graph backwards applying them. Gradients are new UOp graphs, so they can be
differentiated again."""
from __future__ import annotations
import math
from typing import Any, cast
from attograd.dtype import dtypes
from attograd.uop.build import (add, alu, expand, fdiv, full_like, mul, mulc, neg, reshape, sum_axes,
                                where, zeros_like)
from attograd.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat

def _argsort(x: tuple[int, ...]) -> tuple[int, ...]: return tuple(sorted(range(len(x)), key=x.__getitem__))

# ***** the rules: (ctx = gradient of the node, the node) -> one gradient per source, None where none flows *****

def _max_rule(ctx: UOp, ret: UOp) -> tuple[UOp, UOp]:
  # ties split the gradient evenly between both sides, like torch.maximum
  a, b = ret.src
  half, zero = mulc(ctx, 0.5), zeros_like(ctx)
  tie = where(alu(Ops.CMPEQ, a, b), half, zero)
  return where(alu(Ops.CMPLT, b, a), ctx, tie), where(alu(Ops.CMPLT, a, b), ctx, tie)

def _pow_rule(ctx: UOp, ret: UOp) -> tuple[UOp, UOp]:
  # d/db b^e = e * b^(e-1), d/de b^e = b^e * ln(b) (0^e gives 0, or -inf for negative e)
  b, e = ret.src
  db = mul(e, alu(Ops.POW, b, add(e, full_like(e, -1))))
  de = mulc(mul(ret, alu(Ops.LOG2, b)), math.log(2))
  b0 = alu(Ops.CMPEQ, b, zeros_like(b))
  de = where(b0, where(alu(Ops.CMPLT, e, zeros_like(e)), full_like(e, -math.inf), zeros_like(e)), de)
  return mul(ctx, where(b0, where(alu(Ops.CMPEQ, e, zeros_like(e)), zeros_like(e), db), db)), mul(ctx, de)

def _reduce_rule(ctx: UOp, ret: UOp) -> tuple[UOp]:
  x = ret.src[0]
  op, axes = ret.arg
  g = expand(ctx, x.shape)
  if op is Ops.ADD: return (g,)
  if op is Ops.MAX:
    # the gradient goes to every position equal to the max, divided by how many there are
    is_max = alu(Ops.CMPEQ, x, expand(ret, x.shape)).cast(x.dtype)
    count = expand(sum_axes(is_max, axes), x.shape)
    return (mul(fdiv(is_max, count), g),)
  if op is Ops.MUL:
    # d prod / dx_i is the product of the others: with no zero that is prod/x_i; with one zero only the zero's
    # position gets the product of the nonzeros; with two or more zeros every gradient is 0
    is0 = alu(Ops.CMPEQ, x, zeros_like(x))
    safe = where(is0, full_like(x, 1), x)
    nz_prod = expand(UOp(Ops.REDUCE_AXIS, x.dtype, (safe,), (Ops.MUL, axes)), x.shape)
    zeros = expand(sum_axes(is0.cast(x.dtype), axes), x.shape)
    at_zero = where(alu(Ops.CMPEQ, zeros, full_like(x, 1)), nz_prod, zeros_like(x))
    no_zero = where(alu(Ops.CMPEQ, zeros, zeros_like(x)), fdiv(nz_prod, safe), zeros_like(x))
    return (mul(where(is0, at_zero, no_zero), g),)
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
  if ret.arg is None: return (UOp(Ops.COPY, ctx.dtype, (ctx, UOp(Ops.DEVICE, arg=ret.src[0].device))),) + \
    (None,) * (len(ret.src) - 1)
  rows = [UOp(Ops.SHRINK, ctx.dtype, (ctx,), tuple(b if i == ret.arg else (0, n) for i, n in enumerate(ctx.shape)))
          for b in ret.bounds]
  return tuple(UOp(Ops.COPY, ctx.dtype, (UOp(Ops.CONTIGUOUS, ctx.dtype, (r,)), UOp(Ops.DEVICE, arg=s.device)))
               for r, s in zip(rows, ret.src))

def _cos(x: UOp) -> UOp: return alu(Ops.SIN, add(neg(x), full_like(x, math.pi / 2)))

def _where_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp, UOp]:
  cond, zero = ret.src[0], zeros_like(ctx)
  return None, where(cond, ctx, zero), where(cond, zero, ctx)

def _expand_rule(ctx: UOp, ret: UOp) -> tuple[UOp]:
  return (sum_axes(ctx, tuple(i for i, (a, b) in enumerate(zip(ret.src[0].shape, ret.arg)) if a != b)),)

def _pad_rule(ctx: UOp, ret: UOp) -> tuple[UOp]:
  return (UOp(Ops.SHRINK, ctx.dtype, (ctx,), tuple((b, b + s) for s, (b, _) in zip(ret.src[0].shape, ret.arg))),)

def _shrink_rule(ctx: UOp, ret: UOp) -> tuple[UOp]:
  return (UOp(Ops.PAD, ctx.dtype, (ctx,), tuple((b, s - e) for s, (b, e) in zip(ret.src[0].shape, ret.arg))),)

# elementwise functions computed by formulas that differentiate badly (Tensor._custom_grad): (value, x) -> dx
def _sign(x: UOp) -> UOp:
  zero = zeros_like(x)
  return where(alu(Ops.CMPLT, zero, x), full_like(x, 1), where(alu(Ops.CMPLT, x, zero), full_like(x, -1), zero))

def _abs_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp]: return None, mul(ctx, _sign(ret.src[1]))  # 0 at 0, like torch
def _relu_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp]:
  x = ret.src[1]
  return None, where(alu(Ops.CMPLT, zeros_like(x), x), ctx, zeros_like(ctx))  # 0 at 0 and at NaN, like torch
def _log1p_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp]:
  x = ret.src[1]
  return None, fdiv(ctx, add(x, full_like(x, 1)))
def _expm1_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp]: return None, mul(ctx, add(ret, full_like(ret, 1)))
# ("old_values": a copy of a buffer's values taken before an in-place write, standing for the buffer's old node in
# the graph the write remembers: its value is the copy, its gradient goes to that node, tensor/autograd.py)
def _old_values_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp]: return None, ctx
# CUSTOM_GRAD markers by name: each rule gives the gradients of the marker's sources (None for the value itself).
# The rules written over UOps are here; those written with Tensor methods (conv2d, acosh, pow, max_unpool2d) are
# registered by the Tensor layer that makes their markers (tensor/grad_rules.py), and attograd.function's by it.
custom_grad_rules: dict[str, Any] = {"relu": _relu_rule, "abs": _abs_rule, "log1p": _log1p_rule, "expm1": _expm1_rule,
                                     "old_values": _old_values_rule}

def register_custom_grad(name: str, rule: Any) -> None:
  """Adds the gradient rule of the CUSTOM_GRAD markers named `name` (one rule per name)."""
  if name in custom_grad_rules: raise ValueError(f"gradient: a rule for the CUSTOM_GRAD marker {name!r} exists already")
  custom_grad_rules[name] = rule

def _nones(ret: UOp) -> tuple[None, ...]: return (None,) * len(ret.src)

pm_gradient = PatternMatcher([
  # elementwise
  (UPat(Ops.ADD), lambda ctx: (ctx, ctx)),
  (UPat(Ops.SUB), lambda ctx: (ctx, neg(ctx))),
  (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (mul(ctx, ret.src[1]), mul(ctx, ret.src[0]))),
  (UPat(Ops.FDIV, name="ret"), lambda ctx, ret: (fdiv(ctx, ret.src[1]), neg(fdiv(mul(ctx, ret), ret.src[1])))),
  (UPat(Ops.NEG), lambda ctx: (neg(ctx),)),
  (UPat(Ops.MAX, name="ret"), _max_rule),
  (UPat(Ops.POW, name="ret"), _pow_rule),
  (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (mulc(mul(ctx, ret), math.log(2)),)),
  (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (fdiv(ctx, mulc(ret.src[0], math.log(2))),)),
  (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (mul(ctx, _cos(ret.src[0])),)),
  (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (fdiv(ctx, mulc(ret, 2)),)),
  (UPat(Ops.RECIP, name="ret"), lambda ctx, ret: (neg(mul(mul(ctx, ret), ret)),)),
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
      grads[s] = acc = add(grads[s], sg) if s in grads else sg
      _warm(acc)
  return grads
