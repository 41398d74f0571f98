"""The gradient rules of the CUSTOM_GRAD markers the Tensor layer makes whose backward is written with Tensor
methods (conv2d, acosh, pow, max_unpool2d): registered with gradient.py's table, which holds the rules over UOps."""
from __future__ import annotations
from attograd.gradient import register_custom_grad
from attograd.tensor.core import Tensor
from attograd.uop.ops import UOp

def _conv_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp, UOp, None]:
  """conv2d's custom backward, a marker (out, x, weight, padded x) whose `out` was computed from detached inputs:
  x gets the transposed convolution of the output's gradient with the weight (a forward conv with the flipped
  kernel), the weight gets the output's gradient times the windows of the padded x."""
  _, groups, stride, dilation, pads = ret.arg
  x, w, xpad = ret.src[1:]
  nk = len(stride)
  # the rows past the last window get no gradient: output_padding covers them (pads are PyTorch order, last dim first)
  k_, i_, o_ = w.shape[2:], x.shape[2:], ctx.shape[2:]
  extra = tuple(i_[j] + pads[2 * (nk - 1 - j)] + pads[2 * (nk - 1 - j) + 1] - dilation[j] * (k_[j] - 1) - 1
                - (o_[j] - 1) * stride[j] for j in range(nk))
  # the output's gradient in its own buffer: both gradients read it (the input's through a padded copy, the
  # weight's maybe through a channel-last one), which then copy a buffer instead of each recomputing its expression
  g = Tensor(ctx).contiguous()
  dx = g.conv_transpose2d(Tensor(w), None, groups, stride, dilation, list(pads), extra)
  dw = Tensor(xpad)._conv_weight_grad(g, w.shape, groups, stride, dilation)
  return None, dx.uop, dw.uop, None

def _acosh_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp]:
  """1 / sqrt(x^2 - 1), PyTorch's formula, which is finite below -1 too (where acosh itself is NaN); as
  sqrt(|x| - 1) sqrt(|x| + 1) it stays exact near 1 and doesn't overflow for large x."""
  a = Tensor(ret.src[1]).abs()
  return None, (Tensor(ctx) / ((a - 1).sqrt() * (a + 1).sqrt())).uop

def _pow_tensor_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp, UOp]:
  """Tensor.pow on floats, torch's rule: d/da = b * a^(b-1) (0 where b = 0, so 0 at a = 0 for b > 1), d/db = a^b ln(a)
  (0 where a = 0 and b >= 0)."""
  a, b, g = Tensor(ret.src[1]), Tensor(ret.src[2]), Tensor(ctx)
  da = b.eq(0).where(0.0, g * b * a.pow(b - 1))
  db = (a.eq(0) & (b >= 0)).where(0.0, g * Tensor(ret) * a.log())
  return None, da.uop, db.uop

def _max_unpool_rule(ctx: UOp, ret: UOp) -> tuple[None, UOp, None]:
  """max_unpool2d, a marker (out, values, indices) over the flattened pooled dims: each value's gradient is the
  output's gradient at its index (read once per value, so repeated indices each get it, as in PyTorch)."""
  return None, Tensor(ctx).gather(-1, Tensor(ret.src[2])).uop, None

register_custom_grad("conv2d", _conv_rule)
register_custom_grad("acosh", _acosh_rule)
register_custom_grad("pow", _pow_tensor_rule)
register_custom_grad("max_unpool2d", _max_unpool_rule)
