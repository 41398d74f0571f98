"""The ONNX operators, each written in Tensor ops: one function per operator, registered in one table by
(domain, name, first opset). The semantics are the ONNX spec's (onnx.ai/onnx/operators)."""
from __future__ import annotations
import functools, math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast
from attograd.dtype import DType, dtypes
from attograd.helpers import prod
from attograd.tensor import Tensor
from attograd.nn.onnx_types import OnnxError, onnx_dtype
if TYPE_CHECKING: from attograd.nn.onnx import Graph, OpContext

# ***** the table *****

@dataclass(frozen=True)
class OpImpl:
  fn: Callable[..., Any]
  since: int               # the first opset version of the domain this implementation serves
  consts: tuple[int, ...]  # inputs read as Python values (shapes, axes, counts), not Tensors
  ctx: bool                # takes an OpContext as `ctx` (subgraphs, output count, the graph's other values)

ONNX_OPS: dict[tuple[str, str], list[OpImpl]] = {}

def onnx_op(*names: str, domain: str = "", since: int = 1, consts: Sequence[int] = (), ctx: bool = False) -> Callable:
  """Register the decorated function as the operator(s) `names` (default: its own name) of `domain` from opset
  `since` on. Registering one (domain, name, since) twice is refused."""
  def register(fn: Callable) -> Callable:
    for name in names or (fn.__name__,):
      impls = ONNX_OPS.setdefault((domain, name), [])
      if any(i.since == since for i in impls): raise RuntimeError(f"onnx: operator {domain}:{name} since {since} twice")
      impls.append(OpImpl(fn, since, tuple(consts), ctx))
      impls.sort(key=lambda i: i.since)
    return fn
  return register

def lookup(domain: str, name: str, version: int) -> OpImpl | None:
  """The implementation of operator `name` for a model importing `domain` at `version` (the latest one at or below)."""
  best = None
  for impl in ONNX_OPS.get((domain, name), []):
    if impl.since <= version: best = impl
  if best is None and domain == "" and ONNX_OPS.get((domain, name)): best = ONNX_OPS[(domain, name)][0]
  return best

# ***** helpers *****

def _axis(axis: int, ndim: int, op: str) -> int:
  if not -ndim <= axis < max(ndim, 1): raise OnnxError(f"onnx {op}: axis {axis} is out of range for {ndim} dims")
  return axis + ndim if axis < 0 else axis

def _scalar(v: Any) -> Any:
  """A Python number from a number, a 1-element list, or a 1-element Tensor."""
  if isinstance(v, Tensor): v = v.tolist()
  while isinstance(v, list):
    if len(v) != 1: raise OnnxError(f"onnx: expected a single value, got {len(v)} values")
    v = v[0]
  return v

def _ints(v: Any) -> list[int] | None:
  if v is None: return None
  if isinstance(v, Tensor): v = v.tolist()
  return [int(x) for x in (v if isinstance(v, list) else [v])]

def _like_float(x: Tensor) -> DType: return x.dtype if dtypes.is_float(x.dtype) else dtypes.float32

def _channel(v: Tensor, ndim: int) -> Tensor:
  """A per-channel (C,) tensor shaped to broadcast against (N, C, *spatial)."""
  return v.reshape(1, -1, *[1] * (ndim - 2)) if ndim >= 2 else v

def _flat_pads(pads: Sequence[int], n: int) -> list[int]:
  """ONNX pads (begin of each spatial dim, then end of each) as attograd's flat list (last dim first, (before,
  after) each)."""
  return [p for i in reversed(range(n)) for p in (pads[i], pads[i + n])]

def _auto_pads(x: Tensor, auto_pad: str, pads: Sequence[int] | None, k_: Sequence[int], s_: Sequence[int],
               d_: Sequence[int]) -> list[int]:
  """Explicit ONNX pads (all begins, then all ends) for a conv or pool with attribute auto_pad."""
  n = len(k_)
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    begins, ends = [], []
    for i, k, s, d in zip(x.shape[-n:], k_, s_, d_):
      total = max(0, (math.ceil(i / s) - 1) * s + (k - 1) * d + 1 - i)
      small = total // 2
      begins.append(small if auto_pad == "SAME_UPPER" else total - small)
      ends.append(total - begins[-1])
    return begins + ends
  if auto_pad == "VALID": return [0] * (2 * n)
  if auto_pad not in ("NOTSET", ""): raise OnnxError(f"onnx: unknown auto_pad {auto_pad!r}")
  return list(pads) if pads else [0] * (2 * n)

def _spatial(x: Tensor, kernel_shape: Sequence[int], strides: Any, dilations: Any) -> tuple[list[int], list[int]]:
  n = len(kernel_shape)
  return list(strides) if strides else [1] * n, list(dilations) if dilations else [1] * n

def _keep(x: Tensor, dtype: DType) -> Tensor: return x if x.dtype is dtype else x.cast(dtype)

def _unary(name: str, fn: Callable[[Tensor], Tensor], float_only: bool = True) -> None:
  def op(x: Tensor) -> Tensor:
    if float_only and not dtypes.is_float(x.dtype):
      raise OnnxError(f"onnx {name}: needs a float tensor, got {x.dtype.name}")
    return _keep(fn(x), x.dtype)
  op.__name__ = name
  onnx_op(name)(op)

for _name, _fn in {"Exp": Tensor.exp, "Log": Tensor.log, "Sqrt": Tensor.sqrt, "Reciprocal": Tensor.reciprocal,
                   "Sin": Tensor.sin, "Cos": Tensor.cos, "Tan": Tensor.tan, "Asin": Tensor.asin, "Acos": Tensor.acos,
                   "Atan": Tensor.atan, "Sinh": Tensor.sinh, "Cosh": Tensor.cosh, "Asinh": Tensor.asinh,
                   "Acosh": Tensor.acosh, "Atanh": Tensor.atanh,
                   "Erf": Tensor.erf, "Sigmoid": Tensor.sigmoid, "Tanh": Tensor.tanh, "Softsign": Tensor.softsign,
                   "Softplus": lambda x: x.softplus(), "Mish": lambda x: x * x.softplus().tanh()}.items():
  _unary(_name, _fn)
for _name, _fn in {"Neg": Tensor.neg, "Abs": Tensor.abs, "Sign": Tensor.sign, "Floor": Tensor.floor,
                   "Ceil": Tensor.ceil, "Round": Tensor.round, "Relu": Tensor.relu}.items():
  _unary(_name, _fn, float_only=False)

# ***** elementwise *****

@onnx_op()
def Identity(x: Any) -> Any: return x
@onnx_op()
def Not(x: Tensor) -> Tensor: return x.logical_not()
@onnx_op()
def IsNaN(x: Tensor) -> Tensor: return x.isnan()
@onnx_op()
def IsInf(x: Tensor, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
  return x.isinf(bool(detect_positive), bool(detect_negative))

@onnx_op()
def Add(a: Tensor, b: Tensor, **_: Any) -> Tensor: return a + b
@onnx_op()
def Sub(a: Tensor, b: Tensor, **_: Any) -> Tensor: return a - b
@onnx_op()
def Mul(a: Tensor, b: Tensor, **_: Any) -> Tensor: return a * b
@onnx_op()
def Div(a: Tensor, b: Tensor, **_: Any) -> Tensor:
  return a.div(b, rounding_mode="trunc") if not dtypes.is_float(a.dtype) else a / b

@onnx_op()
def Pow(x: Tensor, y: Tensor) -> Tensor:
  # the result has the base's dtype (an int base with a float exponent is computed in float and truncated)
  if dtypes.is_float(x.dtype): return x.pow(y.cast(x.dtype))
  if dtypes.is_float(y.dtype): return x.cast(y.dtype).pow(y).cast(x.dtype)
  return x.pow(y.cast(x.dtype))

@onnx_op()
def Mod(a: Tensor, b: Tensor, fmod: int = 0) -> Tensor:
  # fmod=0: the remainder has the divisor's sign (Python's %), also for floats since opset 26
  if fmod or not dtypes.is_float(a.dtype): return a.fmod(b) if fmod else a % b
  r = a % b
  # a finite x mod an infinite y is x when they share a sign (or x is 0), else y (as NumPy's mod)
  same = (a >= 0).eq(b > 0) | a.eq(0)
  return (b.isinf() & a.isfinite()).where(same.where(a, b), r)

def _variadic(name: str, fn: Callable[[Tensor, Tensor], Tensor], mean: bool = False) -> None:
  def op(*xs: Tensor) -> Tensor:
    if not xs: raise OnnxError(f"onnx {name}: needs at least one input")
    out = functools.reduce(fn, xs)
    return out / len(xs) if mean else out
  op.__name__ = name
  onnx_op(name)(op)

_variadic("Sum", Tensor.add)
_variadic("Mean", Tensor.add, mean=True)
_variadic("Max", lambda a, b: _nan_or(a, b, a.maximum(b)))
_variadic("Min", lambda a, b: _nan_or(a, b, a.minimum(b)))

def _nan_or(a: Tensor, b: Tensor, r: Tensor) -> Tensor:
  """Max and Min propagate NaN (as NumPy's maximum does)."""
  if not dtypes.is_float(r.dtype): return r
  return a.isnan().where(a, b.isnan().where(b, r))

for _name, _cmp in {"Equal": Tensor.eq, "Less": Tensor.__lt__, "LessOrEqual": Tensor.__le__, "Greater": Tensor.__gt__,
                   "GreaterOrEqual": Tensor.__ge__, "And": Tensor.logical_and, "Or": Tensor.logical_or,
                   "Xor": Tensor.logical_xor, "BitwiseAnd": Tensor.bitwise_and, "BitwiseOr": Tensor.bitwise_or,
                   "BitwiseXor": Tensor.bitwise_xor}.items():
  onnx_op(_name)(lambda a, b, _cmp=_cmp, **_: _cmp(a, b))
onnx_op("BitwiseNot")(lambda x: x.bitwise_not())

@onnx_op()
def BitShift(x: Tensor, y: Tensor, direction: str) -> Tensor:
  if direction not in ("LEFT", "RIGHT"):
    raise OnnxError(f"onnx BitShift: direction must be LEFT or RIGHT, got {direction!r}")
  # a shift by the width or more, or by a negative amount, shifts every bit out (C leaves it undefined): LEFT gives 0,
  # RIGHT the sign fill
  width = x.dtype.itemsize * 8
  y = y.cast(x.dtype)
  out_of_range = (y >= width) if dtypes.is_unsigned(x.dtype) else ((y < 0) | (y >= width))
  safe = out_of_range.where(0, y).cast(x.dtype)
  if direction == "LEFT": return out_of_range.where(0, x.lshift(safe)).cast(x.dtype)
  fill = x.rshift(width - 1) if not dtypes.is_unsigned(x.dtype) else x * 0
  return out_of_range.where(fill, x.rshift(safe)).cast(x.dtype)

@onnx_op("BitCast")
def BitCast(x: Tensor, to: int) -> Tensor:
  d = onnx_dtype(to, "BitCast's `to`")
  if x.dtype is dtypes.bool or d is dtypes.bool: return x.cast(d)  # a bool's byte is 0 or 1 either way
  return x.bitcast(d)

@onnx_op()
def Where(c: Tensor, x: Tensor, y: Tensor) -> Tensor: return c.cast(dtypes.bool).where(x, y)

@onnx_op()
def Clip(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 (the spec's names)
  if min is None and max is None: return x
  lo = min.cast(x.dtype) if isinstance(min, Tensor) else min
  hi = max.cast(x.dtype) if isinstance(max, Tensor) else max
  return x.clip(lo, hi)

@onnx_op()
def Cast(x: Tensor, to: int, saturate: int = 1, round_mode: str = "up") -> Tensor:
  d = onnx_dtype(to, "Cast's `to`")
  if d is dtypes.bool: return x.ne(0)
  return x.cast(d)

@onnx_op()
def CastLike(x: Tensor, like: Tensor, saturate: int = 1, round_mode: str = "up") -> Tensor:
  return x.ne(0) if like.dtype is dtypes.bool else x.cast(like.dtype)

# activations

@onnx_op()
def LeakyRelu(x: Tensor, alpha: float = 0.01) -> Tensor: return (x < 0).where(x * alpha, x)
@onnx_op()
def PRelu(x: Tensor, slope: Tensor) -> Tensor: return (x < 0).where(x * slope, x)
@onnx_op()
def ThresholdedRelu(x: Tensor, alpha: float = 1.0) -> Tensor: return (x > alpha).where(x, 0.0).cast(x.dtype)
@onnx_op()
def Elu(x: Tensor, alpha: float = 1.0) -> Tensor: return (x < 0).where(alpha * x.expm1(), x)
@onnx_op()
def Celu(x: Tensor, alpha: float = 1.0) -> Tensor: return x.maximum(0) + (alpha * (x / alpha).expm1()).minimum(0)
@onnx_op()
def Selu(x: Tensor, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875) -> Tensor:
  return gamma * (x <= 0).where(alpha * x.exp() - alpha, x)
@onnx_op()
def HardSigmoid(x: Tensor, alpha: float = 0.2, beta: float = 0.5) -> Tensor: return (alpha * x + beta).clip(0, 1)
@onnx_op()
def HardSwish(x: Tensor) -> Tensor: return x * (x * (1 / 6) + 0.5).clip(0, 1)
@onnx_op()
def Shrink(x: Tensor, bias: float = 0.0, lambd: float = 0.5) -> Tensor:
  return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)
@onnx_op()
def Gelu(x: Tensor, approximate: str = "none") -> Tensor:
  if approximate == "tanh": return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
  return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())
@onnx_op("SwiGLU")
def SwiGLU(a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
  if a.shape != b.shape or a.dtype is not b.dtype:
    raise OnnxError(f"onnx SwiGLU: A and B need the same shape and dtype, got {a.shape} {a.dtype} and "
                    f"{b.shape} {b.dtype}")
  return a * (a * alpha).sigmoid() * b

@onnx_op()
def Swish(x: Tensor, alpha: float = 1.0) -> Tensor: return x * (x * alpha).sigmoid()

def _softmax_like(name: str, fn: Callable[[Tensor, int], Tensor]) -> None:
  def old(x: Tensor, axis: int = 1) -> Tensor:
    # before opset 13 the input is seen as 2-d: the dims before `axis` and those from it on
    a = _axis(axis, x.ndim, name)
    return fn(x.reshape(prod(x.shape[:a]), prod(x.shape[a:])), 1).reshape(x.shape)
  def new(x: Tensor, axis: int = -1) -> Tensor: return fn(x, _axis(axis, x.ndim, name))
  onnx_op(name, since=1)(old)
  onnx_op(name, since=13)(new)

def _hardmax(x: Tensor, axis: int) -> Tensor:
  idx = x.argmax(axis, keepdim=True)
  ar = Tensor.arange(x.shape[axis], device=x.device).reshape([-1 if i == axis else 1 for i in range(x.ndim)])
  return idx.eq(ar).cast(x.dtype)

_softmax_like("Softmax", lambda x, a: x.softmax(a))
_softmax_like("LogSoftmax", lambda x, a: x.log_softmax(a))
_softmax_like("Hardmax", _hardmax)

# ***** reductions *****

def _reduce_axes(data: Tensor, axes: Any, noop: int) -> tuple[int, ...] | None:
  """The axes to reduce (None: reduce nothing)."""
  ax = _ints(axes)
  if not ax: return None if noop else tuple(range(data.ndim))
  return tuple(sorted({_axis(a, data.ndim, "Reduce") for a in ax}))

def _reducer(name: str, fn: Callable[[Tensor, tuple[int, ...]], Tensor], empty: Callable[[DType], Any] | None = None,
             same_dtype: bool = True) -> None:
  def op(data: Tensor, axes: Any = None, keepdims: int = 1, noop_with_empty_axes: int = 0) -> Tensor:
    ax = _reduce_axes(data, axes, noop_with_empty_axes)
    if ax is None: return data
    if data.ndim == 0: return fn(data, ()) if name != "ReduceLogSumExp" else data
    if empty is not None and any(data.shape[a] == 0 for a in ax):
      shape = tuple(1 if i in ax else s for i, s in enumerate(data.shape))
      out = Tensor.full(shape, empty(data.dtype), dtype=data.dtype, device=data.device)
    else:
      out = fn(data, ax)
      out = out.reshape(tuple(1 if i in ax else s for i, s in enumerate(data.shape)))
    if not keepdims: out = out.reshape(tuple(s for i, s in enumerate(data.shape) if i not in ax))
    return _keep(out, data.dtype) if same_dtype else out
  op.__name__ = name
  # axes moved from an attribute to an input in opset 13 (ReduceSum) or 18 (the rest); both are read here
  onnx_op(name, consts=(1,))(op)

_reducer("ReduceSum", lambda x, a: x.sum(a))
_reducer("ReduceMean", lambda x, a: x.mean(a))
_reducer("ReduceProd", lambda x, a: x.prod(a))
_reducer("ReduceMax", lambda x, a: x.max(a), lambda d: -math.inf if dtypes.is_float(d) else dtypes.min(d))
_reducer("ReduceMin", lambda x, a: x.min(a), lambda d: math.inf if dtypes.is_float(d) else dtypes.max(d))
_reducer("ReduceSumSquare", lambda x, a: (x * x).sum(a))
_reducer("ReduceL1", lambda x, a: x.abs().sum(a))
_reducer("ReduceL2", lambda x, a: (x.cast(_like_float(x)).square().sum(a)).sqrt())
_reducer("ReduceLogSum", lambda x, a: x.cast(_like_float(x)).sum(a).log(), lambda d: -math.inf)
_reducer("ReduceLogSumExp", lambda x, a: x.cast(_like_float(x)).logsumexp(a), lambda d: -math.inf)

def _arg(name: str, largest: bool) -> None:
  def op(x: Tensor, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    a = _axis(axis, x.ndim, name)
    y = x if largest else (-x if not dtypes.is_unsigned(x.dtype) and x.dtype is not dtypes.bool else None)
    if y is None: return x.argmin(a, keepdim=bool(keepdims)).cast(dtypes.int64) if not select_last_index else \
      (x.shape[a] - 1 - x.flip(a).argmin(a, keepdim=bool(keepdims))).cast(dtypes.int64)
    if select_last_index: return (x.shape[a] - 1 - y.flip(a).argmax(a, keepdim=bool(keepdims))).cast(dtypes.int64)
    return y.argmax(a, keepdim=bool(keepdims)).cast(dtypes.int64)
  op.__name__ = name
  onnx_op(name)(op)

_arg("ArgMax", True)
_arg("ArgMin", False)

# ***** shapes and movement *****

@onnx_op()
def Shape(x: Tensor, end: int | None = None, start: int = 0) -> Tensor:
  return Tensor(list(x.shape[start:end]), dtype=dtypes.int64, device=x.device)

@onnx_op()
def Size(x: Tensor) -> Tensor: return Tensor(x.numel(), dtype=dtypes.int64, device=x.device)

@onnx_op(consts=(1,))
def Reshape(x: Tensor, shape: Any = None, allowzero: int = 0) -> Tensor:
  dims = _ints(shape)
  if dims is None: raise OnnxError("onnx Reshape: no shape given")
  dims = [x.shape[i] if d == 0 and not allowzero else d for i, d in enumerate(dims)]
  if -1 in dims:
    known = prod(d for d in dims if d != -1)
    if dims.count(-1) > 1 or known == 0 or x.numel() % known:
      raise OnnxError(f"onnx Reshape: can't reshape {x.shape} to {_ints(shape)}")
    dims[dims.index(-1)] = x.numel() // known
  return x.reshape(tuple(dims))

@onnx_op()
def Flatten(x: Tensor, axis: int = 1) -> Tensor:
  a = axis + x.ndim if axis < 0 else axis
  return x.reshape(prod(x.shape[:a]), prod(x.shape[a:]))

@onnx_op()
def Transpose(x: Tensor, perm: list[int] | None = None) -> Tensor:
  return x.permute(list(perm) if perm is not None else list(range(x.ndim))[::-1])

@onnx_op(consts=(1,))
def Squeeze(x: Tensor, axes: Any = None) -> Tensor:
  ax = _ints(axes)
  if ax is None: return x.reshape(tuple(s for s in x.shape if s != 1))
  ax = [_axis(a, x.ndim, "Squeeze") for a in ax]
  for a in ax:
    if x.shape[a] != 1: raise OnnxError(f"onnx Squeeze: dim {a} of {x.shape} is not 1")
  return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in ax))

@onnx_op(consts=(1,))
def Unsqueeze(x: Tensor, axes: Any = None) -> Tensor:
  ax = _ints(axes) or []
  n = x.ndim + len(ax)
  ax = sorted(_axis(a, n, "Unsqueeze") for a in ax)
  shape, src = [], iter(x.shape)
  for i in range(n): shape.append(1 if i in ax else next(src))
  return x.reshape(tuple(shape))

@onnx_op(consts=(1,))
def Expand(x: Tensor, shape: Any) -> Tensor:
  dims = _ints(shape) or []
  n = max(len(dims), x.ndim)
  xs, ds = (1,) * (n - x.ndim) + tuple(x.shape), (1,) * (n - len(dims)) + tuple(dims)
  out = []
  for a, b in zip(xs, ds):
    if a != b and 1 not in (a, b): raise OnnxError(f"onnx Expand: can't broadcast {x.shape} to {dims}")
    out.append(a if b == 1 else b)
  return x.reshape(xs).expand(tuple(out))

@onnx_op(consts=(1,))
def Tile(x: Tensor, repeats: Any) -> Tensor: return x.repeat(_ints(repeats))

@onnx_op()
def Concat(*xs: Tensor, axis: int) -> Tensor:
  a = _axis(axis, xs[0].ndim, "Concat")
  parts = [t for t in xs if t.shape[a] != 0] or [xs[0]]
  return parts[0].cat(*parts[1:], dim=a) if len(parts) > 1 else parts[0]

@onnx_op(consts=(1,), ctx=True)
def Split(x: Tensor, split: Any = None, axis: int = 0, num_outputs: int | None = None,
          ctx: OpContext | None = None) -> tuple:
  a = _axis(axis, x.ndim, "Split")
  n = x.shape[a]
  sizes = _ints(split)
  if sizes is None:
    k = num_outputs or (ctx.num_outputs if ctx else 1)
    if num_outputs: sizes = [min(math.ceil(n / k), n - i * math.ceil(n / k)) for i in range(k)]
    else:
      if n % k: raise OnnxError(f"onnx Split: dim {a} of {x.shape} doesn't split into {k} equal parts")
      sizes = [n // k] * k
  if sum(sizes) != n: raise OnnxError(f"onnx Split: sizes {sizes} don't add up to dim {a} of {x.shape}")
  out, start = [], 0
  for s in sizes:
    out.append(x.shrink(tuple((start, start + s) if i == a else None for i in range(x.ndim))))
    start += s
  return tuple(out)

def _slice_range(start: int, end: int, step: int, dim: int) -> tuple[int, int, int]:
  """ONNX's start/end clamping for one axis -> (first index, count, step)."""
  if step == 0: raise OnnxError("onnx Slice: step can't be 0")
  if start < 0: start += dim
  if end < 0: end += dim
  if step > 0:
    start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    count = max(0, (end - start + step - 1) // step)
  else:
    start, end = min(max(start, -1), dim - 1), min(max(end, -1), dim - 1)
    count = max(0, (start - end + (-step) - 1) // (-step))
  return start, count, step

def _take(x: Tensor, axis: int, start: int, count: int, step: int) -> Tensor:
  """count elements along axis from start, step apart (step may be negative)."""
  if step < 0:
    x = x.flip(axis)
    start, step = x.shape[axis] - 1 - start, -step
  if count == 0: return x.shrink(tuple((0, 0) if i == axis else None for i in range(x.ndim)))
  stop = start + (count - 1) * step + 1
  x = x.shrink(tuple((start, stop) if i == axis else None for i in range(x.ndim)))
  if step == 1: return x
  # every step-th element: pad to count*step, split into (count, step), keep column 0
  x = x.pad(tuple((0, count * step - (stop - start)) if i == axis else None for i in range(x.ndim)))
  x = x.reshape((*x.shape[:axis], count, step, *x.shape[axis + 1:]))
  return x.shrink(tuple((0, 1) if i == axis + 1 else None for i in range(x.ndim))).reshape(
    *x.shape[:axis], count, *x.shape[axis + 2:])

@onnx_op(consts=(1, 2, 3, 4))
def Slice(x: Tensor, starts: Any = None, ends: Any = None, axes: Any = None, steps: Any = None) -> Tensor:
  st, en = _ints(starts) or [], _ints(ends) or []
  ax = (_ints(axes) or []) if axes is not None else list(range(len(st)))
  sp = (_ints(steps) or []) if steps is not None else [1] * len(st)
  if not len(st) == len(en) == len(ax) == len(sp):
    raise OnnxError(f"onnx Slice: starts {st}, ends {en}, axes {ax} and steps {sp} need the same length")
  for s, e, a, p in zip(st, en, ax, sp):
    a = _axis(a, x.ndim, "Slice")
    x = _take(x, a, *_slice_range(s, e, p, x.shape[a]))
  return x

@onnx_op(consts=(1, 2, 3))
def Pad(x: Tensor, pads: Any = None, constant_value: Any = None, axes: Any = None, mode: str = "constant",
        value: float = 0.0) -> Tensor:
  p = _ints(pads) or []
  ax = [_axis(a, x.ndim, "Pad") for a in ((_ints(axes) or []) if axes is not None else range(x.ndim))]
  if len(p) != 2 * len(ax): raise OnnxError(f"onnx Pad: {len(p)} pads for {len(ax)} axes of {x.shape}")
  pairs: list[tuple[int, int]] = [(0, 0)] * x.ndim
  for i, a in enumerate(ax): pairs[a] = (p[i], p[i + len(ax)])
  if mode == "constant":
    cv = value if constant_value is None or constant_value == [] else _scalar(constant_value)
    if x.dtype is dtypes.bool: cv = bool(cv)
    elif not dtypes.is_float(x.dtype): cv = int(cv)
    return x.pad(tuple(pairs), value=cv)
  modes = {"reflect": "reflect", "edge": "replicate", "wrap": "circular"}
  if mode not in modes: raise OnnxError(f"onnx Pad: unknown mode {mode!r}")
  return x.pad(tuple(pairs), mode=modes[mode])

def _norm_index(idx: Tensor, n: int) -> Tensor:
  idx = idx.cast(dtypes.int32) if idx.dtype in (dtypes.int64, dtypes.uint64, dtypes.uint32) else idx
  return (idx < 0).where(idx + n, idx) if not dtypes.is_unsigned(idx.dtype) else idx

@onnx_op()
def Gather(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
  a = _axis(axis, x.ndim, "Gather")
  idx = _norm_index(indices, x.shape[a])
  # (pre, n, post) picked by one-hot (idx..., n): out = (pre, idx..., post)
  pre, post = x.shape[:a], x.shape[a + 1:]
  xi = x.reshape(prod(pre), x.shape[a], prod(post))
  flat = idx.reshape(1, -1, 1).expand(prod(pre), idx.numel(), prod(post))
  out = xi.gather(1, flat) if idx.numel() else Tensor.empty(prod(pre), 0, prod(post), dtype=x.dtype, device=x.device)
  return out.reshape((*pre, *idx.shape, *post))

@onnx_op()
def GatherElements(x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
  a = _axis(axis, x.ndim, "GatherElements")
  return x.gather(a, _norm_index(indices, x.shape[a]))

def _nd_linear(x: Tensor, indices: Tensor, batch_dims: int) -> tuple[Tensor, Tensor, int]:
  """GatherND/ScatterND indices (..., k) as linear indices into x reshaped to (batch*prod(k dims), *rest)."""
  k = indices.shape[-1]
  if batch_dims + k > x.ndim: raise OnnxError(f"onnx: index depth {k} + batch_dims {batch_dims} > rank of {x.shape}")
  bshape, ishape = x.shape[:batch_dims], x.shape[batch_dims:batch_dims + k]
  strides = [prod(ishape[j + 1:]) for j in range(k)]
  idx = indices.cast(dtypes.int32)
  lin = idx[..., 0] * 0
  for j in range(k):
    ij = idx[..., j]
    lin = lin + (ij < 0).where(ij + ishape[j], ij) * strides[j]
  nb = prod(bshape)
  if batch_dims:
    boff = Tensor.arange(nb, device=x.device).reshape((*bshape, *[1] * (indices.ndim - 1 - batch_dims))) * prod(ishape)
    lin = lin + boff
  return x.reshape(nb * prod(ishape), *x.shape[batch_dims + k:]), lin, k

@onnx_op()
def GatherND(x: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
  flat, lin, _ = _nd_linear(x, indices, batch_dims)
  return Gather(flat, lin, 0)

@onnx_op()
def ScatterND(x: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none") -> Tensor:
  flat, lin, k = _nd_linear(x, indices, 0)
  rest = flat.shape[1:]
  lin = lin.reshape(-1, *[1] * len(rest)).expand(lin.numel(), *rest)
  out = _scatter(flat, 0, lin, updates.reshape(-1, *rest), reduction, "ScatterND")
  return out.reshape(x.shape)

def _scatter(x: Tensor, axis: int, idx: Tensor, upd: Tensor, reduction: str, op: str) -> Tensor:
  if reduction in ("none", None): return x.scatter(axis, idx, upd)
  if reduction == "add": return x.scatter_reduce(axis, idx, upd, reduce="sum")
  if reduction == "mul": return x.scatter_reduce(axis, idx, upd, reduce="prod")
  if reduction in ("max", "min"):
    # each target's max (min) over the updates that hit it, then combined with the old value; targets hit by none
    # keep it
    n = x.shape[axis]
    hot = idx.unsqueeze(-1).eq(Tensor.arange(n, device=x.device).reshape((*[1] * idx.ndim, n)))  # (*idx, n)
    big = dtypes.min(x.dtype) if reduction == "max" else dtypes.max(x.dtype)
    if dtypes.is_float(x.dtype): big = -math.inf if reduction == "max" else math.inf
    vals = hot.where(upd.shrink(tuple((0, s) for s in idx.shape)).unsqueeze(-1), big)
    red = vals.max(axis) if reduction == "max" else vals.min(axis)            # (*idx without axis, n)
    red = red.unsqueeze(axis).transpose(axis, -1).squeeze(-1)               # n back at axis
    hit = hot.any(axis).unsqueeze(axis).transpose(axis, -1).squeeze(-1)
    pad = tuple((0, s - red.shape[i]) for i, s in enumerate(x.shape))
    red, hit = red.pad(pad), hit.pad(pad, value=False)
    comb = x.maximum(red) if reduction == "max" else x.minimum(red)
    return hit.where(comb, x)
  raise OnnxError(f"onnx {op}: unknown reduction {reduction!r}")

@onnx_op("ScatterElements", "Scatter")
def ScatterElements(x: Tensor, indices: Tensor, updates: Tensor, axis: int = 0, reduction: str = "none") -> Tensor:
  a = _axis(axis, x.ndim, "ScatterElements")
  return _scatter(x, a, _norm_index(indices, x.shape[a]), updates, reduction, "ScatterElements")

@onnx_op(consts=(1,))
def Compress(x: Tensor, condition: Any, axis: int | None = None) -> Tensor:
  if axis is None: x, axis = x.flatten(), 0
  a = _axis(axis, x.ndim, "Compress")
  keep = [i for i, c in enumerate(condition if isinstance(condition, list) else [condition]) if c and i < x.shape[a]]
  return Gather(x, Tensor(keep, dtype=dtypes.int32, device=x.device), a) if keep else \
    x.shrink(tuple((0, 0) if i == a else None for i in range(x.ndim)))

@onnx_op()
def NonZero(x: Tensor) -> Tensor:
  # the output's size depends on the values: they are read back (this ends a TinyJit-able graph here)
  flat = x.flatten().tolist() if x.ndim else [x.item()]
  hits = [i for i, v in enumerate(flat) if v]
  shape = x.shape if x.ndim else (1,)
  coords = [[(i // prod(shape[d + 1:])) % shape[d] for i in hits] for d in range(len(shape))]
  if not hits: return Tensor.empty(max(x.ndim, 1), 0, dtype=dtypes.int64, device=x.device)
  return Tensor(coords, dtype=dtypes.int64, device=x.device)

@onnx_op()
def DepthToSpace(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  bs = blocksize
  if mode == "DCR": y = x.reshape(b, bs, bs, c // (bs * bs), h, w).permute(0, 3, 4, 1, 5, 2)
  else: y = x.reshape(b, c // (bs * bs), bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
  return y.reshape(b, c // (bs * bs), h * bs, w * bs)

@onnx_op()
def SpaceToDepth(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  bs = blocksize
  y = x.reshape(b, c, h // bs, bs, w // bs, bs)
  y = y.permute(0, 3, 5, 1, 2, 4) if mode == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
  return y.reshape(b, c * bs * bs, h // bs, w // bs)

@onnx_op(consts=(1,))
def CenterCropPad(x: Tensor, shape: Any, axes: Any = None) -> Tensor:
  sizes = _ints(shape) or []
  ax = [_axis(a, x.ndim, "CenterCropPad") for a in ((_ints(axes) or []) if axes is not None else range(x.ndim))]
  for s, a in zip(sizes, ax):
    n = x.shape[a]
    if s < n: x = x.shrink(tuple(((n - s) // 2, (n - s) // 2 + s) if i == a else None for i in range(x.ndim)))
    elif s > n: x = x.pad(tuple(((s - n) // 2, (s - n) - (s - n) // 2) if i == a else None for i in range(x.ndim)))
  return x

@onnx_op(consts=(1,))
def Trilu(x: Tensor, k: Any = None, upper: int = 1) -> Tensor:
  kk = int(_scalar(k)) if k is not None and k != [] else 0
  return x.triu(kk) if upper else x.tril(kk)

@onnx_op()
def EyeLike(x: Tensor, dtype: int | None = None, k: int = 0) -> Tensor:
  n, m = x.shape
  d = onnx_dtype(dtype) if dtype is not None else x.dtype
  r = Tensor.arange(n, device=x.device).reshape(n, 1)
  c = Tensor.arange(m, device=x.device).reshape(1, m)
  return (c - r).eq(k).cast(d)

@onnx_op(consts=(1,))
def OneHot(indices: Tensor, depth: Any, values: Tensor, axis: int = -1) -> Tensor:
  n = int(_scalar(depth))
  a = _axis(axis, indices.ndim + 1, "OneHot")
  idx = indices.cast(dtypes.int64) if dtypes.is_float(indices.dtype) else indices
  idx = (idx < 0).where(idx + n, idx).unsqueeze(a)
  ar = Tensor.arange(n, device=indices.device).reshape([-1 if i == a else 1 for i in range(idx.ndim)])
  return idx.eq(ar.cast(idx.dtype)).where(values[1], values[0])

@onnx_op()
def Range(start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
  # the output has the inputs' dtype; its length depends on their values, which are read back
  s, l, d = _scalar(start), _scalar(limit), _scalar(delta)
  n = max(math.ceil((l - s) / d), 0)
  dtype = start.dtype if isinstance(start, Tensor) else dtypes.float32
  if n == 0: return Tensor.empty(0, dtype=dtype)
  return (Tensor.arange(n, dtype=dtype if not dtypes.is_float(dtype) else dtypes.float32) * d + s).cast(dtype)

@onnx_op(consts=(0,))
def ConstantOfShape(shape: Any, value: Tensor | None = None) -> Tensor:
  dims = _ints(shape) or []
  if value is None: return Tensor.full(tuple(dims), 0.0, dtype=dtypes.float32) if dims else Tensor(0.0)
  v = value.reshape(-1)[0].item() if value.numel() else 0
  if 0 in dims: return Tensor.empty(tuple(dims), dtype=value.dtype)
  return Tensor.full(tuple(dims), v, dtype=value.dtype)

@onnx_op()
def Constant(value: Tensor | None = None, value_float: float | None = None, value_floats: list[float] | None = None,
             value_int: int | None = None, value_ints: list[int] | None = None, sparse_value: Tensor | None = None,
             value_string: Any = None, value_strings: Any = None) -> Tensor:
  if value is not None: return value
  if sparse_value is not None: return sparse_value
  if value_float is not None: return Tensor(value_float, dtype=dtypes.float32)
  if value_floats is not None: return Tensor(list(value_floats), dtype=dtypes.float32)
  if value_int is not None: return Tensor(value_int, dtype=dtypes.int64)
  if value_ints is not None: return Tensor(list(value_ints), dtype=dtypes.int64)
  raise OnnxError("onnx Constant: string constants aren't supported")

def _cumulative(x: Tensor, axis: Any, exclusive: int, reverse: int, prod_: bool, op: str) -> Tensor:
  a = _axis(int(_scalar(axis)), x.ndim, op)
  y = x.flip(a) if reverse else x
  if exclusive:  # shift by one along the axis, the identity first
    n = y.shape[a]
    y = y.pad(tuple((1, 0) if i == a else None for i in range(y.ndim)), value=1 if prod_ else 0)
    y = y.shrink(tuple((0, n) if i == a else None for i in range(y.ndim)))
  out = y.cumprod(a) if prod_ else y.cumsum(a)
  return _keep(out.flip(a) if reverse else out, x.dtype)

@onnx_op(consts=(1,))
def CumSum(x: Tensor, axis: Any, exclusive: int = 0, reverse: int = 0) -> Tensor:
  return _cumulative(x, axis, exclusive, reverse, False, "CumSum")

@onnx_op(consts=(1,))
def CumProd(x: Tensor, axis: Any, exclusive: int = 0, reverse: int = 0) -> Tensor:
  return _cumulative(x, axis, exclusive, reverse, True, "CumProd")

@onnx_op(consts=(1,))
def TopK(x: Tensor, K: Any = None, axis: int = -1, largest: int = 1, sorted: int = 1,  # noqa: A002 (the spec's name)
         k: int | None = None) -> tuple:
  kk = int(_scalar(K)) if K is not None else int(k if k is not None else 1)
  a = _axis(axis, x.ndim, "TopK")
  vals, idx = x.topk(kk, a, bool(largest), True)
  return vals, idx.cast(dtypes.int64)

@onnx_op()
def ReverseSequence(x: Tensor, sequence_lens: Tensor, batch_axis: int = 1, time_axis: int = 0) -> Tensor:
  t, b = x.shape[time_axis], x.shape[batch_axis]
  tt = Tensor.arange(t, device=x.device).reshape(t, 1)
  lens = sequence_lens.cast(dtypes.int32).reshape(1, b)
  src = (tt < lens).where(lens - 1 - tt, tt)           # (t, b): the time step each output reads
  shape = [1] * x.ndim
  shape[time_axis], shape[batch_axis] = t, b
  src = (src if time_axis < batch_axis else src.T).reshape(shape).expand(x.shape)
  return x.gather(time_axis, src)

# ***** sequences and optionals *****

@onnx_op()
def SequenceEmpty(dtype: int | None = None) -> list: return []
@onnx_op()
def SequenceConstruct(*xs: Tensor) -> list: return list(xs)
@onnx_op()
def SequenceLength(seq: list) -> Tensor: return Tensor(len(seq), dtype=dtypes.int64)

def _pos(seq: list, position: Any, op: str, insert: bool = False) -> int:
  p = int(_scalar(position))
  n = len(seq) + (1 if insert else 0)
  if not -n <= p < n: raise OnnxError(f"onnx {op}: position {p} is out of range for a sequence of {len(seq)}")
  return p + n if p < 0 else p

@onnx_op(consts=(1,))
def SequenceAt(seq: list, position: Any) -> Tensor: return seq[_pos(seq, position, "SequenceAt")]
@onnx_op(consts=(2,))
def SequenceInsert(seq: list, t: Tensor, position: Any = None) -> list:
  out = list(seq)
  out.insert(len(seq) if position is None else _pos(seq, position, "SequenceInsert", True), t)
  return out
@onnx_op(consts=(1,))
def SequenceErase(seq: list, position: Any = None) -> list:
  out = list(seq)
  del out[-1 if position is None else _pos(seq, position, "SequenceErase")]
  return out

@onnx_op(consts=(1,))
def SplitToSequence(x: Tensor, split: Any = None, axis: int = 0, keepdims: int = 1) -> list:
  a = _axis(axis, x.ndim, "SplitToSequence")
  n = x.shape[a]
  if split is None:
    parts = Split(x, [1] * n, a)
    return [p.squeeze(a) for p in parts] if not keepdims else list(parts)
  if isinstance(split, list) and not (len(split) == 1 and isinstance(split, list) and False):
    return list(Split(x, split, a))
  size = int(split)
  return list(Split(x, [min(size, n - i) for i in range(0, n, size)], a))

@onnx_op()
def ConcatFromSequence(seq: list, axis: int, new_axis: int = 0) -> Tensor:
  if new_axis: return seq[0].stack(*seq[1:], dim=_axis(axis, seq[0].ndim + 1, "ConcatFromSequence"))
  return Concat(*seq, axis=axis)

@onnx_op(ctx=True)
def SequenceMap(seq: list, *extra: Any, body: Graph, ctx: OpContext) -> tuple:
  outs: list[list[Any]] = [[] for _ in body.outputs]
  for i in range(len(seq)):
    feeds = [seq[i]] + [e[i] if isinstance(e, list) else e for e in extra]
    for lst, v in zip(outs, ctx.run(body, feeds)): lst.append(v)
  return tuple(outs)

@onnx_op()
def Optional(x: Any = None, type: Any = None) -> Any: return x  # noqa: A002 (the spec's name)
@onnx_op()
def OptionalHasElement(x: Any = None) -> Tensor: return Tensor(x is not None)
@onnx_op()
def OptionalGetElement(x: Any = None) -> Any:
  if x is None: raise OnnxError("onnx OptionalGetElement: the optional is empty")
  return x

# ***** control flow *****

def _truth(t: Any, op: str) -> bool:
  v = _scalar(t)
  if not isinstance(v, (bool, int, float)): raise OnnxError(f"onnx {op}: condition must be one value, got {t!r}")
  return bool(v)

@onnx_op(ctx=True)
def If(cond: Tensor, then_branch: Graph, else_branch: Graph, ctx: OpContext) -> tuple:
  # the condition is read back: only the branch taken is built (the branches may compute different shapes)
  return tuple(ctx.run(then_branch if _truth(cond, "If") else else_branch, []))

@onnx_op(ctx=True)
def Loop(M: Any = None, cond: Any = None, *v_initial: Any, body: Graph, ctx: OpContext) -> tuple:
  trips = int(_scalar(M)) if M is not None else None
  go = _truth(cond, "Loop") if cond is not None else True
  carried, n_carried = list(v_initial), len(v_initial)
  scans: list[list[Tensor]] = [[] for _ in body.outputs[1 + n_carried:]]
  i = 0
  while go and (trips is None or i < trips):
    out = ctx.run(body, [Tensor(i, dtype=dtypes.int64), Tensor(go)] + carried)
    if cond is not None: go = _truth(out[0], "Loop")  # with no condition input, the body's is ignored (a for loop)
    carried = out[1:1 + n_carried]
    for lst, v in zip(scans, out[1 + n_carried:]): lst.append(v)
    i += 1
  stacked = []
  for vi, lst in zip(body.outputs[1 + n_carried:], scans):
    if lst: stacked.append(lst[0].stack(*lst[1:], dim=0) if isinstance(lst[0], Tensor) else lst)
    else: stacked.append(Tensor.empty(0, dtype=vi.dtype or dtypes.float32))
  return tuple(carried + stacked)

@onnx_op("Scan", ctx=True, since=8)
def Scan8(sequence_lens: Tensor | None, *args: Tensor, body: Graph, num_scan_inputs: int,
          directions: list[int] | None = None, ctx: OpContext) -> tuple:
  # opset 8: every input has a batch dim first; each batch element is its own scan (over dim 1 of the inputs)
  n_state = len(args) - num_scan_inputs
  B = args[0].shape[0]
  if sequence_lens is not None and any(n != args[n_state].shape[1] for n in sequence_lens.tolist()):
    raise OnnxError("onnx Scan (opset 8): sequence_lens shorter than the inputs aren't supported")
  per = [Scan(*[a[b] for a in args], body=body, num_scan_inputs=num_scan_inputs, scan_input_directions=directions,
              ctx=ctx) for b in range(B)]
  return tuple(per[0][i].stack(*[p[i] for p in per[1:]], dim=0) for i in range(len(per[0])))

@onnx_op(ctx=True, since=9)
def Scan(*args: Tensor, body: Graph, num_scan_inputs: int, scan_input_axes: list[int] | None = None,
         scan_input_directions: list[int] | None = None, scan_output_axes: list[int] | None = None,
         scan_output_directions: list[int] | None = None, ctx: OpContext) -> tuple:
  n_state = len(args) - num_scan_inputs
  state, xs = list(args[:n_state]), args[n_state:]
  in_axes = [_axis(a, x.ndim, "Scan") for a, x in zip(scan_input_axes or [0] * len(xs), xs)]
  in_dirs = scan_input_directions or [0] * len(xs)
  steps = xs[0].shape[in_axes[0]] if xs else 0
  n_out = len(body.outputs) - n_state
  outs: list[list[Tensor]] = [[] for _ in range(n_out)]
  for t in range(steps):
    feeds = []
    for x, a, d in zip(xs, in_axes, in_dirs):
      j = steps - 1 - t if d else t
      feeds.append(x.shrink(tuple((j, j + 1) if i == a else None for i in range(x.ndim))).squeeze(a))
    res = ctx.run(body, state + feeds)
    state = res[:n_state]
    for lst, v in zip(outs, res[n_state:]): lst.append(v)
  out_axes, out_dirs = scan_output_axes or [0] * n_out, scan_output_directions or [0] * n_out
  stacked = []
  for lst, a, d in zip(outs, out_axes, out_dirs):
    if d: lst = lst[::-1]
    stacked.append(lst[0].stack(*lst[1:], dim=_axis(a, lst[0].ndim + 1, "Scan")))
  return tuple(state + stacked)

# ***** convolution and pooling *****

@onnx_op()
def Conv(X: Tensor, W: Tensor, B: Tensor | None = None, auto_pad: str = "NOTSET", dilations: list[int] | None = None,
         group: int = 1, kernel_shape: list[int] | None = None, pads: list[int] | None = None,
         strides: list[int] | None = None) -> Tensor:
  k_ = list(kernel_shape) if kernel_shape else list(W.shape[2:])
  s_, d_ = _spatial(X, k_, strides, dilations)
  p = _auto_pads(X, auto_pad, pads, k_, s_, d_)
  return X.conv2d(W, B, groups=group, stride=tuple(s_), dilation=tuple(d_), padding=_flat_pads(p, len(k_)))

@onnx_op()
def ConvTranspose(X: Tensor, W: Tensor, B: Tensor | None = None, auto_pad: str = "NOTSET",
                  dilations: list[int] | None = None, group: int = 1, kernel_shape: list[int] | None = None,
                  output_padding: list[int] | None = None, output_shape: list[int] | None = None,
                  pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
  k_ = list(kernel_shape) if kernel_shape else list(W.shape[2:])
  n = len(k_)
  s_, d_ = _spatial(X, k_, strides, dilations)
  op_ = list(output_padding) if output_padding else [0] * n
  in_ = X.shape[2:]
  if output_shape is not None or (pads is None and auto_pad in ("SAME_UPPER", "SAME_LOWER")):
    out_ = list(output_shape)[-n:] if output_shape is not None else [i * s for i, s in zip(in_, s_)]
    total = [s * (i - 1) + o + (k - 1) * d + 1 - t for s, i, o, k, d, t in zip(s_, in_, op_, k_, d_, out_)]
    if auto_pad == "SAME_UPPER": begins = [t // 2 for t in total]
    else: begins = [t - t // 2 for t in total]
    p = begins + [t - b for t, b in zip(total, begins)]
  else: p = list(pads) if pads else [0] * (2 * n)
  # the full transposed convolution, then each dim cut by its pads (a negative pad grows it) and extended by the
  # output padding (positions no input reaches: zeros before the bias)
  out = X.conv_transpose2d(W, None, groups=group, stride=tuple(s_), dilation=tuple(d_), padding=0)
  out = out.pad(((0, 0), (0, 0)) + tuple((-p[i], -p[i + n] + op_[i]) for i in range(n)))
  return out + _channel(B, out.ndim) if B is not None else out

def _pool_setup(X: Tensor, kernel_shape: list[int], auto_pad: str, pads: Any, strides: Any, dilations: Any,
                ) -> tuple[list[int], list[int], list[int], list[int]]:
  k_ = list(kernel_shape)
  s_, d_ = _spatial(X, k_, strides, dilations)
  return k_, s_, d_, _auto_pads(X, auto_pad, pads, k_, s_, d_)

@onnx_op(ctx=True)
def MaxPool(X: Tensor, kernel_shape: list[int], auto_pad: str = "NOTSET", ceil_mode: int = 0,
            dilations: list[int] | None = None, pads: list[int] | None = None, storage_order: int = 0,
            strides: list[int] | None = None, ctx: OpContext | None = None) -> Any:
  k_, s_, d_, p = _pool_setup(X, kernel_shape, auto_pad, pads, strides, dilations)
  n = len(k_)
  flat = _flat_pads(p, n)
  want_idx = ctx is not None and ctx.num_outputs >= 2 and bool(ctx.node.outputs[1])
  # padding is the lowest value (-inf for floats); ceil_mode counts a last, partial window as in PyTorch
  pooled = X.max_pool2d(tuple(k_), tuple(s_), tuple(d_), flat, bool(ceil_mode), return_indices=want_idx)
  if not want_idx: return pooled
  # Indices: each max's position in the flattened (N, C, *spatial) input. max_pool2d's (the first max of a window) is
  # the row-major position within the spatial dims; storage_order 1 counts them column-major
  out, flat_idx = cast(tuple[Tensor, Tensor], pooled)
  sp = X.shape[2:]
  idx = flat_idx.cast(dtypes.int64)
  if storage_order:
    col, rest = Tensor.zeros_like(idx), idx
    for i in reversed(range(n)):  # the coordinate along dim i, times its column-major stride
      col = col + (rest % sp[i]) * prod(sp[:i])
      rest = rest // sp[i]
    idx = col
  base = Tensor.arange(X.shape[0] * X.shape[1], dtype=dtypes.int64, device=X.device).reshape(
    X.shape[0], X.shape[1], *[1] * n) * prod(sp)
  return out, idx + base

@onnx_op()
def AveragePool(X: Tensor, kernel_shape: list[int], auto_pad: str = "NOTSET", ceil_mode: int = 0,
                count_include_pad: int = 0, dilations: list[int] | None = None, pads: list[int] | None = None,
                strides: list[int] | None = None) -> Tensor:
  k_, s_, d_, p = _pool_setup(X, kernel_shape, auto_pad, pads, strides, dilations)
  out = X.avg_pool2d(tuple(k_), tuple(s_), tuple(d_), _flat_pads(p, len(k_)), bool(ceil_mode), bool(count_include_pad))
  return _keep(out, X.dtype)

@onnx_op()
def LpPool(X: Tensor, kernel_shape: list[int], auto_pad: str = "NOTSET", ceil_mode: int = 0,
           dilations: list[int] | None = None, p: int = 2, pads: list[int] | None = None,
           strides: list[int] | None = None) -> Tensor:
  k_, s_, d_, pp = _pool_setup(X, kernel_shape, auto_pad, pads, strides, dilations)
  n, flat = len(k_), _flat_pads(pp, len(k_))
  if ceil_mode:  # the extra end padding that gives the window count of a ceil_mode pooling (PyTorch's rule)
    o_ = cast(Tensor, X.max_pool2d(tuple(k_), tuple(s_), tuple(d_), flat, ceil_mode=True)).shape[-n:]
    for j, (i, s, k, d, o) in enumerate(zip(X.shape[-n:], s_, k_, d_, o_)):
      before, after = flat[2 * (n - 1 - j)], flat[2 * (n - 1 - j) + 1]
      flat[2 * (n - 1 - j) + 1] += max(0, s * (o - 1) + d * (k - 1) + 1 - (i + before + after))
  # each window's sum: the mean over the zero-padded input (every cell counts), times the window's size
  win_sum = X.abs().pow(p).pad(flat).avg_pool2d(tuple(k_), tuple(s_), tuple(d_)) * prod(k_)
  return win_sum.pow(1 / p)

@onnx_op()
def GlobalAveragePool(X: Tensor) -> Tensor: return X.mean(tuple(range(2, X.ndim)), keepdim=True).cast(X.dtype)
@onnx_op()
def GlobalMaxPool(X: Tensor) -> Tensor: return X.max(tuple(range(2, X.ndim)), keepdim=True)
@onnx_op()
def GlobalLpPool(X: Tensor, p: int = 2) -> Tensor:
  return X.abs().pow(p).sum(tuple(range(2, X.ndim)), keepdim=True).pow(1 / p)

@onnx_op(consts=(2,))
def MaxUnpool(X: Tensor, I: Tensor, output_shape: Any = None, kernel_shape: list[int] | None = None,  # noqa: E741
              pads: list[int] | None = None, strides: list[int] | None = None) -> Tensor:
  k_ = list(kernel_shape or [])
  n = len(k_)
  s_ = list(strides) if strides else [1] * n
  p = list(pads) if pads else [0] * (2 * n)
  if output_shape is not None: out_sp = list(_ints(output_shape) or [])[-n:]
  else: out_sp = [(i - 1) * s + k - p[j] - p[j + n] for j, (i, s, k) in enumerate(zip(X.shape[2:], s_, k_))]
  N, C = X.shape[:2]
  size = prod(out_sp)
  # indices count over the whole (N, C, *spatial) output: make them per (n, c) plane and scatter into each plane
  flat_i = I.reshape(N, C, -1).cast(dtypes.int32) - Tensor.arange(N * C, device=X.device).reshape(N, C, 1) * size
  out = Tensor.zeros(N, C, size, dtype=X.dtype, device=X.device).scatter(2, flat_i, X.reshape(N, C, -1))
  return out.reshape(N, C, *out_sp)

# ***** normalization *****

@onnx_op()
def BatchNormalization(X: Tensor, scale: Tensor, B: Tensor, input_mean: Tensor, input_var: Tensor,
                       epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0, spatial: int = 1,
                       is_test: int = 0, consumed_inputs: Any = None) -> Any:
  nd = X.ndim
  if training_mode:
    axes = tuple(i for i in range(nd) if i != 1)
    mean = X.mean(axes)
    var = (X - _channel(mean, nd)).square().mean(axes)
    y = (X - _channel(mean, nd)) * _channel((var + epsilon).rsqrt() * scale, nd) + _channel(B, nd)
    return y, input_mean * momentum + mean * (1 - momentum), input_var * momentum + var * (1 - momentum)
  inv = (input_var + epsilon).rsqrt() * scale
  return (X - _channel(input_mean, nd)) * _channel(inv, nd) + _channel(B, nd)

def _normalize(x: Tensor, axes: tuple[int, ...], eps: float,
               stash: DType | None = None) -> tuple[Tensor, Tensor, Tensor]:
  """(x - mean) / sqrt(var + eps) over axes, computed in `stash` dtype; also the mean and 1/std (kept dims)."""
  xs = x.cast(stash) if stash is not None else x
  mean = xs.mean(axes, keepdim=True)
  inv = (xs - mean).square().mean(axes, keepdim=True).add(eps).rsqrt()
  return ((xs - mean) * inv).cast(x.dtype), mean, inv

@onnx_op()
def InstanceNormalization(x: Tensor, scale: Tensor, B: Tensor, epsilon: float = 1e-5) -> Tensor:
  y = _normalize(x, tuple(range(2, x.ndim)), epsilon)[0]
  return y * _channel(scale, x.ndim) + _channel(B, x.ndim)

@onnx_op()
def LayerNormalization(X: Tensor, Scale: Tensor, B: Tensor | None = None, axis: int = -1, epsilon: float = 1e-5,
                       stash_type: int = 1) -> tuple:
  a = _axis(axis, X.ndim, "LayerNormalization")
  y, mean, inv = _normalize(X, tuple(range(a, X.ndim)), epsilon, onnx_dtype(stash_type))
  y = y * Scale
  return (y + B if B is not None else y), mean, inv

@onnx_op()
def GroupNormalization(X: Tensor, scale: Tensor, bias: Tensor, num_groups: int, epsilon: float = 1e-5,
                       stash_type: int = 1) -> Tensor:
  N, C = X.shape[0], X.shape[1]
  g = X.reshape(N, num_groups, -1)
  y = _normalize(g, (2,), epsilon, onnx_dtype(stash_type))[0].reshape(X.shape)
  if scale.shape[0] != C:  # opset 18 gave one scale and bias per group
    scale, bias = scale.repeat_interleave(C // num_groups), bias.repeat_interleave(C // num_groups)
  return y * _channel(scale, X.ndim) + _channel(bias, X.ndim)

def _rms_norm(X: Tensor, scale: Tensor, axes: tuple[int, ...], epsilon: float, stash: DType) -> tuple[Tensor, Tensor]:
  """X / rms(X) over `axes` (computed in `stash`) times scale, in X's dtype; and 1 / rms, which some ops return."""
  xs = X.cast(stash)
  inv = xs.square().mean(axes, keepdim=True).add(epsilon).rsqrt()
  return (xs * inv).cast(X.dtype) * scale, inv

@onnx_op()
def RMSNormalization(X: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:
  a = _axis(axis, X.ndim, "RMSNormalization")
  return _rms_norm(X, scale, tuple(range(a, X.ndim)), epsilon, onnx_dtype(stash_type))[0]

@onnx_op()
def SimplifiedLayerNormalization(X: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-5,
                                 stash_type: int = 1) -> tuple:
  # onnxruntime's RMSNorm in the ai.onnx domain (its LLaMA and T5 fusions emit it); also gives 1/rms
  a = _axis(axis, X.ndim, "SimplifiedLayerNormalization")
  return _rms_norm(X, scale, tuple(range(a, X.ndim)), epsilon, onnx_dtype(stash_type))

@onnx_op()
def LRN(x: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> Tensor:
  before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
  sq = (x * x).pad(tuple((before, after) if i == 1 else None for i in range(x.ndim)))
  C = x.shape[1]
  win = functools.reduce(Tensor.add, [sq.shrink(tuple((j, j + C) if i == 1 else None for i in range(x.ndim)))
                                      for j in range(size)])
  return x / (bias + (alpha / size) * win).pow(beta)

@onnx_op()
def MeanVarianceNormalization(X: Tensor, axes: list[int] | None = None) -> Tensor:
  ax = tuple(_axis(a, X.ndim, "MeanVarianceNormalization") for a in (axes if axes is not None else [0, 2, 3]))
  mean = X.mean(ax, keepdim=True)
  return (X - mean) / (X - mean).square().mean(ax, keepdim=True).sqrt()

@onnx_op()
def LpNormalization(x: Tensor, axis: int = -1, p: int = 2) -> Tensor:
  a = _axis(axis, x.ndim, "LpNormalization")
  norm = x.abs().sum(a, keepdim=True) if p == 1 else x.square().sum(a, keepdim=True).sqrt()
  return norm.eq(0).where(0.0, x / norm).cast(x.dtype)

# ***** linear algebra *****

@onnx_op()
def MatMul(a: Tensor, b: Tensor) -> Tensor: return a @ b

@onnx_op()
def Gemm(A: Tensor, B: Tensor, C: Tensor | None = None, alpha: float = 1.0, beta: float = 1.0, transA: int = 0,
         transB: int = 0, broadcast: int = 0) -> Tensor:
  a, b = (A.T if transA else A), (B.T if transB else B)
  out = a @ b
  if alpha != 1.0: out = out * alpha
  if C is not None: out = out + (C * beta if beta != 1.0 else C)
  return out.cast(A.dtype)

@onnx_op()
def Einsum(*xs: Tensor, equation: str) -> Tensor: return Tensor.einsum(equation, *xs)

def _zp(z: Tensor | None, like: Tensor) -> Tensor | int:
  return 0 if z is None else z.cast(dtypes.int32)

@onnx_op()
def MatMulInteger(A: Tensor, B: Tensor, a_zero_point: Tensor | None = None,
                  b_zero_point: Tensor | None = None) -> Tensor:
  az = _zp(a_zero_point, A)
  if isinstance(az, Tensor) and az.ndim == 1 and az.numel() > 1: az = az.reshape(-1, 1)
  return (A.cast(dtypes.int32) - az) @ (B.cast(dtypes.int32) - _zp(b_zero_point, B))

@onnx_op()
def ConvInteger(x: Tensor, w: Tensor, x_zero_point: Tensor | None = None, w_zero_point: Tensor | None = None,
                **kw: Any) -> Tensor:
  wz = _zp(w_zero_point, w)
  if isinstance(wz, Tensor) and wz.numel() > 1: wz = wz.reshape(-1, *[1] * (w.ndim - 1))
  return Conv(x.cast(dtypes.int32) - _zp(x_zero_point, x), w.cast(dtypes.int32) - wz, **kw)

# ***** losses and dropout *****

@onnx_op(consts=(1, 2))
def Dropout(data: Tensor, ratio: Any = None, training_mode: Any = None, seed: int | None = None,
            is_test: int = 1, consumed_inputs: Any = None) -> tuple:
  r = float(_scalar(ratio)) if ratio is not None and ratio != [] else 0.5
  train = bool(_scalar(training_mode)) if training_mode is not None else False
  if not train or r == 0: return data, Tensor.ones(data.shape, dtype=dtypes.bool, device=data.device)
  if seed is not None:
    # ONNX's reference draws the mask from NumPy's generator seeded with `seed`; match it where NumPy is there
    try:
      import numpy as np
      rand = Tensor(np.random.RandomState(seed).random_sample(tuple(data.shape)).astype("float32"), device=data.device)
    except ImportError: rand = Tensor.rand(data.shape, device=data.device)
  else: rand = Tensor.rand(data.shape, device=data.device)
  mask = rand >= r
  return (data * mask / (1.0 - r)).cast(data.dtype), mask

def _nll(x: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int | None, reduction: str) -> Tensor:
  """Negative log-likelihood of (N, C, *d) log-probabilities at (N, *d) class indices."""
  t = target.cast(dtypes.int32)
  keep = t.ne(ignore_index) if ignore_index is not None else Tensor.ones(t.shape, dtype=dtypes.bool, device=t.device)
  safe = keep.where(t, 0)
  picked = x.gather(1, safe.unsqueeze(1)).squeeze(1)
  w = (Gather(weight, safe) if weight is not None else picked.ones_like()) * keep
  loss = -picked * w
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  if reduction == "mean": return loss.sum() / w.sum()
  raise OnnxError(f"onnx: unknown reduction {reduction!r}")

@onnx_op()
def NegativeLogLikelihoodLoss(x: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,
                              reduction: str = "mean") -> Tensor:
  return _nll(x, target, weight, ignore_index, reduction).cast(x.dtype)

@onnx_op()
def SoftmaxCrossEntropyLoss(scores: Tensor, labels: Tensor, weights: Tensor | None = None,
                            ignore_index: int | None = None, reduction: str = "mean") -> tuple:
  logp = scores.log_softmax(1)
  return _nll(logp, labels, weights, ignore_index, reduction).cast(scores.dtype), logp

# ***** resampling *****

def _src_coord(o: int, n_in: int, n_out: int, scale: float, mode: str, roi: tuple[float, float] | None) -> float:
  """Resize: the input coordinate output position o maps to."""
  if mode == "half_pixel": return (o + 0.5) / scale - 0.5
  if mode == "half_pixel_symmetric":
    adj = n_out / (scale * n_in)
    return n_in / 2 * (1 - adj) + (o + 0.5) / scale - 0.5
  if mode == "pytorch_half_pixel": return (o + 0.5) / scale - 0.5 if n_out > 1 else 0.0
  if mode == "align_corners": return o * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
  if mode == "asymmetric": return o / scale
  if mode == "tf_crop_and_resize":
    s, e = roi if roi is not None else (0.0, 1.0)
    return s * (n_in - 1) + o * (e - s) * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.5 * (s + e) * (n_in - 1)
  raise OnnxError(f"onnx Resize: unknown coordinate_transformation_mode {mode!r}")

def _nearest(x: float, mode: str) -> int:
  if mode == "round_prefer_floor": return math.ceil(x - 0.5)
  if mode == "round_prefer_ceil": return math.floor(x + 0.5)
  if mode == "floor": return math.floor(x)
  if mode == "ceil": return math.ceil(x)
  raise OnnxError(f"onnx Resize: unknown nearest_mode {mode!r}")

def _cubic(t: float, A: float) -> float:
  t = abs(t)
  if t <= 1: return ((A + 2) * t - (A + 3)) * t * t + 1
  if t < 2: return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A
  return 0.0

def _weights(x: float, n_in: int, scale: float, mode: str, A: float, antialias: bool, exclude: bool
             ) -> list[tuple[int, float]]:
  """(input index, weight) pairs of one output of a linear or cubic Resize; indices past an edge read the edge."""
  base, frac = math.floor(x), x - math.floor(x)
  s = min(scale, 1.0) if antialias else 1.0
  if mode == "linear":
    start = math.floor(-1 / s) + 1
    taps = [(base + j, max(0.0, 1 - abs((j - frac) * s))) for j in range(start, 2 - start)]
  else:
    start = math.floor(-2 / s) + 1
    taps = [(base + j, _cubic((j - frac) * s, A)) for j in range(start, 2 - start)]
  if antialias or exclude:
    if exclude: taps = [(i, w if 0 <= i < n_in else 0.0) for i, w in taps]
    total = sum(w for _, w in taps)
    taps = [(i, w / total) for i, w in taps] if total else taps
  return [(min(max(i, 0), n_in - 1), w) for i, w in taps]

def _resize_axis(X: Tensor, ax: int, n_out: int, scale: float, roi: tuple[float, float] | None, mode: str,
                 ctm: str, nearest_mode: str, A: float, antialias: bool, exclude: bool, extrapolation: float) -> Tensor:
  n_in = X.shape[ax]
  coords = [_src_coord(o, n_in, n_out, scale, ctm, roi) for o in range(n_out)]
  outside = [ctm == "tf_crop_and_resize" and not 0 <= c <= n_in - 1 for c in coords]
  if mode == "nearest":
    idx = [min(max(_nearest(c, nearest_mode), 0), n_in - 1) for c in coords]
    out = Gather(X, Tensor(idx, dtype=dtypes.int32, device=X.device), ax)
  else:
    # linear and cubic: a (n_out, n_in) matrix of weights applied along the axis
    rows = [[0.0] * n_in for _ in range(n_out)]
    for o, c in enumerate(coords):
      if outside[o]: continue
      for i, w in _weights(c, n_in, scale, mode, A, antialias, exclude): rows[o][i] += w
    fd = dtypes.float64 if X.dtype is dtypes.float64 else dtypes.float32
    W = Tensor(rows, dtype=fd, device=X.device)
    out = (X.cast(fd).transpose(ax, -1) @ W.T).transpose(ax, -1)
    if not dtypes.is_float(X.dtype): out = out.round()
    out = out.cast(X.dtype)
  if any(outside):
    mask = Tensor(outside, device=X.device).reshape([-1 if i == ax else 1 for i in range(X.ndim)])
    out = mask.where(extrapolation, out).cast(X.dtype)
  return out

@onnx_op(consts=(1, 2, 3), since=10)
def Resize(X: Tensor, roi: Any = None, scales: Any = None, sizes: Any = None, antialias: int = 0,
           axes: list[int] | None = None, coordinate_transformation_mode: str = "half_pixel",
           cubic_coeff_a: float = -0.75, exclude_outside: int = 0, extrapolation_value: float = 0.0,
           keep_aspect_ratio_policy: str = "stretch", mode: str = "nearest",
           nearest_mode: str = "round_prefer_floor") -> Tensor:
  if mode not in ("nearest", "linear", "cubic"): raise OnnxError(f"onnx Resize: unknown mode {mode!r}")
  ax = [_axis(a, X.ndim, "Resize") for a in axes] if axes else list(range(X.ndim))
  sc = [float(s) for s in scales] if isinstance(scales, list) and scales else None
  sz = _ints(sizes) if isinstance(sizes, list) and sizes else None
  rois = [float(r) for r in roi] if isinstance(roi, list) and roi else None
  n_in = [X.shape[a] for a in ax]
  if sz is not None:
    if keep_aspect_ratio_policy in ("not_larger", "not_smaller"):
      pick = min if keep_aspect_ratio_policy == "not_larger" else max
      s = pick(o / i for o, i in zip(sz, n_in))
      sc, sz = [s] * len(ax), [int(s * i + 0.5) for i in n_in]
    else: sc = [o / i for o, i in zip(sz, n_in)]
  elif sc is not None: sz = [int(math.floor(i * s)) for i, s in zip(n_in, sc)]
  else: raise OnnxError("onnx Resize: needs scales or sizes")
  out = X
  for j, (a, n_out, s) in enumerate(zip(ax, sz, sc)):
    r = (rois[j], rois[j + len(ax)]) if rois is not None and len(rois) == 2 * len(ax) else None
    if n_out == n_in[j] and s == 1.0 and coordinate_transformation_mode != "tf_crop_and_resize": continue
    out = _resize_axis(out, a, n_out, s, r, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
                       bool(antialias), bool(exclude_outside), extrapolation_value)
  return out

@onnx_op(consts=(1,))
def Upsample(X: Tensor, scales: Any = None, mode: str = "nearest", height_scale: float | None = None,
             width_scale: float | None = None) -> Tensor:
  if scales is None and height_scale is not None: scales = [1.0, 1.0, height_scale, width_scale]
  return Resize(X, None, scales, None, coordinate_transformation_mode="asymmetric",
                mode="linear" if mode in ("linear", "bilinear") else mode, nearest_mode="floor")

@onnx_op(consts=(1,))
def AffineGrid(theta: Tensor, size: Any, align_corners: int = 0) -> Tensor:
  dims = _ints(size) or []
  N, sp = dims[0], dims[2:]
  axes = []
  for n in sp:
    if align_corners: axes.append([-1 + 2 * i / (n - 1) if n > 1 else 0.0 for i in range(n)])
    else: axes.append([(2 * i + 1) / n - 1 for i in range(n)])
  # base grid (*sp, nd+1): coordinates in (x, y[, z]) order, innermost dim first, then 1
  nd = len(sp)
  comps = []
  for j in reversed(range(nd)):
    along = Tensor(axes[j], device=theta.device).reshape([-1 if i == j else 1 for i in range(nd)])
    comps.append(along.expand(tuple(sp)))
  comps.append(Tensor.ones(tuple(sp), device=theta.device))
  base = comps[0].stack(*comps[1:], dim=-1).reshape(1, prod(sp), nd + 1).cast(theta.dtype)
  return (base @ theta.transpose(1, 2)).reshape(N, *sp, nd)

# ***** windows *****

def _window(name: str, a: tuple[float, float, float]) -> None:
  def op(size: Any, output_datatype: int = 1, periodic: int = 1) -> Tensor:
    n = int(_scalar(size))
    N = n if periodic else n - 1
    k = Tensor.arange(n, dtype=dtypes.float32)
    w = a[0] - a[1] * (k * (2 * math.pi / N)).cos() + a[2] * (k * (4 * math.pi / N)).cos()
    return w.cast(onnx_dtype(output_datatype))
  op.__name__ = name
  onnx_op(name, consts=(0,))(op)

_window("HannWindow", (0.5, 0.5, 0.0))
_window("HammingWindow", (25 / 46, 21 / 46, 0.0))
_window("BlackmanWindow", (0.42, 0.5, 0.08))

# ***** quantization *****

def _qparam(v: Tensor | None, x: Tensor, axis: int, block_size: int) -> Tensor | None:
  """A scale or zero point shaped to broadcast against x: one value, one per slice along axis, or per block."""
  if v is None or v.ndim == 0: return v
  if v.numel() == 1 and not block_size: return v.reshape(())
  a = _axis(axis, x.ndim, "QuantizeLinear")
  if block_size: return v.repeat_interleave(block_size, a).shrink(tuple((0, s) for s in x.shape))
  return v.reshape([-1 if i == a else 1 for i in range(x.ndim)])

def _saturate(x: Tensor, dtype: DType) -> Tensor: return x.clip(dtypes.min(dtype), dtypes.max(dtype)).cast(dtype)

@onnx_op()
def QuantizeLinear(x: Tensor, y_scale: Tensor, y_zero_point: Tensor | None = None, axis: int = 1, block_size: int = 0,
                   output_dtype: int = 0, saturate: int = 1, precision: int = 0) -> Tensor:
  out = y_zero_point.dtype if y_zero_point is not None else onnx_dtype(output_dtype) if output_dtype else dtypes.uint8
  s, z = _qparam(y_scale, x, axis, block_size), _qparam(y_zero_point, x, axis, block_size)
  assert s is not None
  fd = dtypes.float32 if x.dtype is not dtypes.float64 else x.dtype
  q = (x.cast(fd) / s.cast(fd)).round()
  if z is not None: q = q + z.cast(fd)
  return _saturate(q, out)

@onnx_op()
def DequantizeLinear(x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None = None, axis: int = 1,
                     block_size: int = 0, output_dtype: int = 0) -> Tensor:
  s, z = _qparam(x_scale, x, axis, block_size), _qparam(x_zero_point, x, axis, block_size)
  assert s is not None
  xi = x.cast(dtypes.int32) if x.dtype is not dtypes.int32 else x
  if z is not None: xi = xi - z.cast(dtypes.int32)
  out = onnx_dtype(output_dtype) if output_dtype else x_scale.dtype
  return (xi.cast(dtypes.float32) * s.cast(dtypes.float32)).cast(out)

@onnx_op()
def DynamicQuantizeLinear(x: Tensor) -> tuple:
  lo, hi = x.min().minimum(0), x.max().maximum(0)
  scale = (hi - lo) / 255
  zp = _saturate((0 - lo / scale).round(), dtypes.uint8)
  y = _saturate((x / scale).round() + zp.cast(x.dtype), dtypes.uint8)
  return y, scale, zp

def _requant(acc: Tensor, scale: Tensor, y_scale: Tensor, y_zero_point: Tensor | None) -> Tensor:
  q = (acc.cast(dtypes.float32) * (scale.cast(dtypes.float32) / y_scale.cast(dtypes.float32))).round()
  zp = y_zero_point if y_zero_point is not None else Tensor(0, dtype=dtypes.uint8)
  return _saturate(q + zp.cast(dtypes.float32), zp.dtype)

@onnx_op()
def QLinearMatMul(a: Tensor, a_scale: Tensor, a_zero_point: Tensor, b: Tensor, b_scale: Tensor, b_zero_point: Tensor,
                  y_scale: Tensor, y_zero_point: Tensor) -> Tensor:
  acc = MatMulInteger(a, b, a_zero_point, b_zero_point)
  bs = b_scale.reshape(1, -1) if b_scale.numel() > 1 else b_scale
  as_ = a_scale.reshape(-1, 1) if a_scale.numel() > 1 else a_scale
  return _requant(acc, as_ * bs, y_scale, y_zero_point)

@onnx_op()
def QLinearConv(x: Tensor, x_scale: Tensor, x_zero_point: Tensor, w: Tensor, w_scale: Tensor, w_zero_point: Tensor,
                y_scale: Tensor, y_zero_point: Tensor | None = None, B: Tensor | None = None, **kw: Any) -> Tensor:
  acc = ConvInteger(x, w, x_zero_point, w_zero_point, **kw)
  if B is not None: acc = acc + _channel(B.cast(dtypes.int32), acc.ndim)
  ws = _channel(w_scale.reshape(-1), acc.ndim) if w_scale.numel() > 1 else w_scale
  return _requant(acc, x_scale * ws, y_scale, y_zero_point)

def _qlinear_binary(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[..., Tensor]:
  def op(a: Tensor, a_scale: Tensor, a_zero_point: Tensor, b: Tensor, b_scale: Tensor, b_zero_point: Tensor,
         c_scale: Tensor, c_zero_point: Tensor | None = None) -> Tensor:
    fa = DequantizeLinear(a, a_scale, a_zero_point)
    fb = DequantizeLinear(b, b_scale, b_zero_point)
    return QuantizeLinear(fn(fa, fb), c_scale, c_zero_point)
  return op

onnx_op("QLinearAdd", domain="com.microsoft")(_qlinear_binary(Tensor.add))
onnx_op("QLinearMul", domain="com.microsoft")(_qlinear_binary(Tensor.mul))

@onnx_op(domain="com.microsoft")
def QLinearGlobalAveragePool(X: Tensor, x_scale: Tensor, x_zero_point: Tensor, y_scale: Tensor, y_zero_point: Tensor,
                             channels_last: int = 0) -> Tensor:
  # an integer sum of (x - zero point) times one float32 factor x_scale / (y_scale * n), as onnxruntime computes it (a
  # float mean rounds ties differently)
  if channels_last: X = X.permute(0, X.ndim - 1, *range(1, X.ndim - 1))
  axes = tuple(range(2, X.ndim))
  acc = (X.cast(dtypes.int32) - x_zero_point.cast(dtypes.int32)).sum(axes, keepdim=True)
  factor = x_scale.cast(dtypes.float32) / (y_scale.cast(dtypes.float32) * prod(X.shape[2:]))
  y = _saturate((acc.cast(dtypes.float32) * factor).round() + y_zero_point.cast(dtypes.float32), X.dtype)
  return y.permute(0, *range(2, y.ndim), 1) if channels_last else y

# ***** attention *****

@onnx_op(since=23)
def Attention(Q: Tensor, K: Tensor, V: Tensor, attn_mask: Tensor | None = None, past_key: Tensor | None = None,
              past_value: Tensor | None = None, nonpad_kv_seqlen: Tensor | None = None, is_causal: int = 0,
              kv_num_heads: int | None = None, q_num_heads: int | None = None, qk_matmul_output_mode: int = 0,
              scale: float | None = None, softcap: float = 0.0, softmax_precision: int | None = None) -> tuple:
  rank3, out_dtype = Q.ndim == 3, Q.dtype
  if out_dtype is dtypes.float16: Q, K, V = Q.float(), K.float(), V.float()
  if rank3:
    if q_num_heads is None or kv_num_heads is None:
      raise OnnxError("onnx Attention: 3-d inputs need q_num_heads and kv_num_heads")
    Q = Q.reshape(Q.shape[0], Q.shape[1], q_num_heads, -1).permute(0, 2, 1, 3)
    K = K.reshape(K.shape[0], K.shape[1], kv_num_heads, -1).permute(0, 2, 1, 3)
    V = V.reshape(V.shape[0], V.shape[1], kv_num_heads, -1).permute(0, 2, 1, 3)
  if past_key is not None: K = past_key.cat(K, dim=2)
  if past_value is not None: V = past_value.cat(V, dim=2)
  present_k, present_v = K, V
  hq, hk = Q.shape[1], K.shape[1]
  if hq != hk: K, V = K.repeat_interleave(hq // hk, 1), V.repeat_interleave(hq // hk, 1)
  L, S = Q.shape[2], K.shape[2]
  sc = scale if scale is not None else 1 / math.sqrt(Q.shape[-1])
  qk = (Q @ K.transpose(-1, -2)) * sc
  scores = qk
  bias = None
  if attn_mask is not None:
    m = attn_mask
    if m.shape[-1] < S:  # a shorter mask masks the rest out
      fill = False if m.dtype is dtypes.bool else -math.inf
      m = m.pad(tuple([None] * (m.ndim - 1) + [(0, S - m.shape[-1])]), value=fill)
    bias = m.where(0.0, -math.inf) if m.dtype is dtypes.bool else m
  if is_causal:
    keep = Tensor.ones(L, S, dtype=dtypes.bool, device=Q.device).tril(S - L if past_key is not None else 0)
    cb = keep.where(0.0, -math.inf)
    bias = cb if bias is None else bias + cb
  if nonpad_kv_seqlen is not None:
    lens = nonpad_kv_seqlen.cast(dtypes.int32).reshape(-1, 1, 1, 1)
    pm = Tensor.arange(S, device=Q.device).reshape(1, 1, 1, S) < lens
    pb = pm.where(0.0, -math.inf)
    bias = pb if bias is None else bias + pb
  if bias is not None: scores = scores + bias.cast(scores.dtype)
  if qk_matmul_output_mode == 1: qk = scores
  if softcap > 0: scores = (scores / softcap).tanh() * softcap
  if qk_matmul_output_mode == 2: qk = scores
  sdt = onnx_dtype(softmax_precision) if softmax_precision else scores.dtype
  probs = scores.cast(sdt).softmax(-1).cast(Q.dtype)
  if qk_matmul_output_mode == 3: qk = probs
  out = probs @ V
  if rank3: out = out.permute(0, 2, 1, 3).reshape(out.shape[0], L, -1)
  return tuple(t.cast(out_dtype) for t in (out, present_k, present_v, qk))

@onnx_op(since=23)
def RotaryEmbedding(X: Tensor, cos_cache: Tensor, sin_cache: Tensor, position_ids: Tensor | None = None,
                    interleaved: int = 0, num_heads: int = 0, rotary_embedding_dim: int = 0) -> Tensor:
  shape = X.shape
  if X.ndim == 3: X = X.reshape(shape[0], shape[1], num_heads, -1)       # (B, S, H, D)
  else: X = X.permute(0, 2, 1, 3)                                       # (B, H, S, D) -> (B, S, H, D)
  D = X.shape[-1]
  rd = rotary_embedding_dim or D
  xr, xp = X[..., :rd], X[..., rd:]
  if position_ids is not None:
    cos, sin = Gather(cos_cache, position_ids, 0), Gather(sin_cache, position_ids, 0)   # (B, S, rd/2)
  else: cos, sin = cos_cache, sin_cache                                                 # (B, S, rd/2)
  cos, sin = cos[..., :rd // 2].unsqueeze(2), sin[..., :rd // 2].unsqueeze(2)
  if interleaved: x1, x2 = xr[..., 0::2], xr[..., 1::2]
  else: x1, x2 = xr[..., :rd // 2], xr[..., rd // 2:]
  r1, r2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos
  rot = r1.stack(r2, dim=-1).reshape((*r1.shape[:-1], rd)) if interleaved else r1.cat(r2, dim=-1)
  out = rot.cat(xp, dim=-1) if rd < D else rot
  return out.reshape(shape) if len(shape) == 3 else out.permute(0, 2, 1, 3)

@onnx_op(since=24)
def TensorScatter(past_cache: Tensor, update: Tensor, write_indices: Tensor | None = None, axis: int = -2,
                  mode: str = "linear") -> Tensor:
  # a KV-cache write: update's rows along `axis` land in the cache at write_indices[b] + j, per batch entry b. Written
  # as a select over (cache row, update row) pairs so the indices stay on the device (no sync, TinyJit replays new
  # ones); in linear mode a row written past the cache's end is dropped (onnxruntime raises instead)
  op = "TensorScatter"
  if mode not in ("linear", "circular"): raise OnnxError(f"onnx {op}: mode must be linear or circular, got {mode!r}")
  a = _axis(axis, past_cache.ndim, op)
  if a == 0: raise OnnxError(f"onnx {op}: axis can't be the batch axis 0")
  others_match = update.ndim == past_cache.ndim and \
    all(u == c for i, (u, c) in enumerate(zip(update.shape, past_cache.shape)) if i != a)
  if not others_match or update.shape[a] > past_cache.shape[a] or update.dtype is not past_cache.dtype:
    raise OnnxError(f"onnx {op}: update {update.shape} {update.dtype.name} must match past_cache "
                    f"{past_cache.shape} {past_cache.dtype.name} except along axis {a}, and be no longer there")
  B, M, U = past_cache.shape[0], past_cache.shape[a], update.shape[a]
  if write_indices is not None and write_indices.shape != (B,):
    raise OnnxError(f"onnx {op}: write_indices must be ({B},), got {write_indices.shape}")
  cache, upd = past_cache.transpose(a, -1), update.transpose(a, -1)     # (B, ..., M) and (B, ..., U)
  lead = [1] * (cache.ndim - 2)
  start = write_indices.cast(dtypes.int32).reshape(B, *lead, 1) if write_indices is not None else 0
  pos = Tensor.arange(U, device=cache.device).reshape(1, *lead, U) + start  # (B, 1.., U): where each row goes
  if mode == "circular": pos = pos % M
  hit = pos.unsqueeze(-2).eq(Tensor.arange(M, device=cache.device).reshape(M, 1))  # (B, 1.., M, U)
  picked = hit.where(upd.unsqueeze(-2), 0).sum(-1).cast(cache.dtype)           # each cache row's update, if any
  out = hit.any(-1).where(picked, cache)
  return out.transpose(a, -1)

# ***** images *****

@onnx_op(since=20)
def ImageDecoder(encoded_stream: Tensor, pixel_format: str = "RGB") -> Tensor:
  # the result's shape depends on the stream's contents, so the bytes are read on the host and decoded there
  from attograd.nn.onnx_image import ImageError, decode_image
  if pixel_format not in ("RGB", "BGR", "Grayscale"):
    raise OnnxError(f"onnx ImageDecoder: pixel_format must be RGB, BGR or Grayscale, got {pixel_format!r}")
  if encoded_stream.dtype is not dtypes.uint8 or encoded_stream.ndim != 1:
    raise OnnxError(f"onnx ImageDecoder: encoded_stream must be 1-d uint8, got {encoded_stream.shape} "
                    f"{encoded_stream.dtype.name}")
  try: H, W, rgb = decode_image(bytes(encoded_stream.data()))
  except ImageError as e: raise OnnxError(f"onnx ImageDecoder: {e}") from None
  img = Tensor(rgb, device=encoded_stream.device).reshape(H, W, 3)
  if pixel_format == "BGR": return img.flip(-1)
  if pixel_format == "RGB": return img
  # ITU-R 601 luma in 16-bit fixed point, rounded, as Pillow's convert("L") (the spec's reference decoder)
  r, g, b = (img[..., i:i + 1].cast(dtypes.int32) for i in range(3))
  return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).cast(dtypes.uint8)

# ***** ai.onnx.ml *****

ML = "ai.onnx.ml"

@onnx_op(domain=ML, consts=(1,))
def ArrayFeatureExtractor(X: Tensor, Y: Any) -> Tensor:
  # the indices pick along the last axis; a 1-d X gives a (1, k) result, as onnxruntime's
  idx = [int(i) for i in _flatten(Y)]
  n = X.shape[-1]
  if bad := [i for i in idx if not 0 <= i < n]:
    raise OnnxError(f"onnx ArrayFeatureExtractor: indices {bad} are out of range for the last dim ({n}) of X {X.shape}")
  if not idx: raise OnnxError("onnx ArrayFeatureExtractor: needs at least one index")
  out = X[..., idx]
  return out.reshape(1, -1) if X.ndim == 1 else out

def _flatten(v: Any) -> list:
  return [x for item in v for x in _flatten(item)] if isinstance(v, list) else [v]

@onnx_op(domain=ML)
def Binarizer(X: Tensor, threshold: float = 0.0) -> Tensor:
  # 1 where X > threshold, else 0 (NaN gives 0, as the spec's reference: onnxruntime refuses NaN instead)
  if X.dtype is dtypes.bool or not (dtypes.is_float(X.dtype) or dtypes.is_int(X.dtype)):
    raise OnnxError(f"onnx Binarizer: needs a float or int tensor, got {X.dtype.name}")
  return (X > threshold).cast(X.dtype)

# ***** com.microsoft (onnxruntime's contrib operators, docs/ContribOperators.md) *****

MS = "com.microsoft"

def _hidden_vec(v: Tensor | None, H: int, op: str, name: str) -> None:
  """Refuse a per-hidden-unit parameter that isn't (H,)."""
  if v is not None and v.shape != (H,):
    raise OnnxError(f"onnx {op}: {name} must have shape ({H},) to match the input's last dim, got {v.shape}")

@onnx_op(domain=MS)
def BiasGelu(A: Tensor, B: Tensor) -> Tensor: return Gelu(A + B)

@onnx_op(domain=MS)
def FastGelu(X: Tensor, bias: Tensor | None = None) -> Tensor:
  return Gelu(X + bias if bias is not None else X, approximate="tanh")

onnx_op("Gelu", domain=MS)(lambda X: Gelu(X))

@onnx_op(domain=MS)
def QuickGelu(X: Tensor, alpha: float = 1.702) -> Tensor: return X * (X * alpha).sigmoid()

@onnx_op(domain=MS)
def BiasAdd(X: Tensor, bias: Tensor, skip: Tensor) -> Tensor:
  _hidden_vec(bias, X.shape[-1], "BiasAdd", "bias")
  return X + bias + skip

@onnx_op(domain=MS)
def SkipLayerNormalization(input: Tensor, skip: Tensor, gamma: Tensor, beta: Tensor | None = None,  # noqa: A002
                           bias: Tensor | None = None, epsilon: float = 1e-12) -> tuple:
  H = input.shape[-1]
  if skip.shape[-1:] != (H,) or skip.ndim > input.ndim:
    raise OnnxError(f"onnx SkipLayerNormalization: skip {skip.shape} doesn't broadcast to input {input.shape}")
  for name, v in (("gamma", gamma), ("beta", beta), ("bias", bias)): _hidden_vec(v, H, "SkipLayerNormalization", name)
  s = input + skip
  if bias is not None: s = s + bias
  # statistics in float32 (the `U` outputs), the result in the input's dtype
  y, mean, inv = _normalize(s, (s.ndim - 1,), epsilon, dtypes.float32)
  y = y * gamma
  return (y + beta if beta is not None else y), mean, inv, s

@onnx_op(domain=MS)
def SkipSimplifiedLayerNormalization(input: Tensor, skip: Tensor, gamma: Tensor,  # noqa: A002
                                     bias: Tensor | None = None, epsilon: float = 1e-12) -> tuple:
  H = input.shape[-1]
  for name, v in (("gamma", gamma), ("bias", bias)): _hidden_vec(v, H, "SkipSimplifiedLayerNormalization", name)
  s = input + skip
  if bias is not None: s = s + bias
  y, inv = _rms_norm(s, gamma, (-1,), epsilon, dtypes.float32)
  return y, None, inv, s

@onnx_op(domain=MS)
def EmbedLayerNormalization(input_ids: Tensor, segment_ids: Tensor | None, word_embedding: Tensor,
                            position_embedding: Tensor, segment_embedding: Tensor | None, gamma: Tensor, beta: Tensor,
                            mask: Tensor | None = None, position_ids: Tensor | None = None, epsilon: float = 1e-12,
                            mask_index_type: int = 1) -> tuple:
  # BERT's embedding layer: word + position (+ segment) embeddings, layer-normalized; mask_index counts each row's
  # unmasked tokens
  op = "EmbedLayerNormalization"
  if input_ids.ndim != 2: raise OnnxError(f"onnx {op}: input_ids must be (batch, sequence), got {input_ids.shape}")
  if (segment_ids is None) != (segment_embedding is None):
    raise OnnxError(f"onnx {op}: segment_ids and segment_embedding come together (got only one of them)")
  B, S = input_ids.shape
  H = word_embedding.shape[-1]
  for name, t in (("position_embedding", position_embedding), ("segment_embedding", segment_embedding)):
    if t is not None and (t.ndim != 2 or t.shape[1] != H):
      raise OnnxError(f"onnx {op}: {name} must be (n, {H}) like word_embedding {word_embedding.shape}, got {t.shape}")
  for name, v in (("gamma", gamma), ("beta", beta)): _hidden_vec(v, H, op, name)
  for name, t in (("segment_ids", segment_ids), ("mask", mask)):
    if t is not None and t.shape != (B, S): raise OnnxError(f"onnx {op}: {name} must be {(B, S)}, got {t.shape}")
  if position_ids is None: position_ids = Tensor.arange(S, device=input_ids.device).reshape(1, S)
  emb = Gather(word_embedding, input_ids) + Gather(position_embedding, position_ids).expand(B, S, H)
  if segment_ids is not None and segment_embedding is not None: emb = emb + Gather(segment_embedding, segment_ids)
  y = _normalize(emb, (2,), epsilon, dtypes.float32)[0] * gamma + beta
  if mask is not None: mask_index = mask.cast(dtypes.int32).sum(1).cast(dtypes.int32)
  else: mask_index = Tensor.zeros(B, dtype=dtypes.int32, device=input_ids.device)
  return y, mask_index, emb

def _contrib_mask(mask_index: Tensor, B: int, S: int, T: int, P: int) -> Tensor:
  """com.microsoft Attention's mask_index as a bool (B or 1, 1, S, T) that is True where a key is masked out."""
  m, keys = mask_index, Tensor.arange(T, device=mask_index.device).reshape(1, T)
  if m.ndim == 1 and m.shape[0] == B:          # right padding: each row's length
    return (keys >= m.cast(dtypes.int32).reshape(B, 1)).reshape(B, 1, 1, T)
  if m.ndim == 1 and m.shape[0] == 2 * B:      # left padding: exclusive ends, then inclusive starts
    end, start = m[:B].cast(dtypes.int32).reshape(B, 1), m[B:].cast(dtypes.int32).reshape(B, 1)
    return ((keys >= end) | (keys < start)).reshape(B, 1, 1, T)
  if m.ndim == 2 and m.shape == (B, T): return m.eq(0).reshape(B, 1, 1, T)
  if m.ndim == 3 and m.shape == (B, S, T): return m.eq(0).reshape(B, 1, S, T)
  raise OnnxError(f"onnx Attention (com.microsoft): mask_index must be ({B},), ({2 * B},), ({B}, {T}) or "
                  f"({B}, {S}, {T}), got {m.shape}")

@onnx_op("Attention", domain=MS)
def ContribAttention(input: Tensor, weights: Tensor, bias: Tensor | None = None,  # noqa: A002
                     mask_index: Tensor | None = None, past: Tensor | None = None,
                     attention_bias: Tensor | None = None, past_sequence_length: Tensor | None = None,
                     num_heads: int = 0, qkv_hidden_sizes: list[int] | None = None, unidirectional: int = 0,
                     scale: float | None = None, mask_filter_value: float = -10000.0, do_rotary: int = 0,
                     rotary_embedding_dim: int = 0, past_present_share_buffer: int = 0) -> tuple:
  # onnxruntime's fused multi-head self-attention (BERT, GPT-2): one projection to Q, K, V, then attention per head
  op = "Attention (com.microsoft)"
  if num_heads <= 0: raise OnnxError(f"onnx {op}: needs a positive num_heads, got {num_heads}")
  if input.ndim != 3: raise OnnxError(f"onnx {op}: input must be (batch, sequence, hidden), got {input.shape}")
  if do_rotary or past_present_share_buffer:
    # neither has a CPU reference in onnxruntime to check against: refused rather than guessed
    raise OnnxError(f"onnx {op}: do_rotary and past_present_share_buffer are not supported (onnxruntime's CPU "
                    "kernel refuses them too); export the model with MultiHeadAttention + RotaryEmbedding")
  B, S, Hin = input.shape
  if weights.ndim != 2 or weights.shape[0] != Hin:
    raise OnnxError(f"onnx {op}: weights must be ({Hin}, q+k+v hidden), got {weights.shape} for input {input.shape}")
  sizes = [int(s) for s in qkv_hidden_sizes] if qkv_hidden_sizes else [weights.shape[1] // 3] * 3
  if sum(sizes) != weights.shape[1] or any(s <= 0 or s % num_heads for s in sizes):
    raise OnnxError(f"onnx {op}: q, k, v hidden sizes {sizes} must be positive multiples of num_heads={num_heads} "
                    f"summing to the weights' {weights.shape[1]} columns")
  if bias is not None and bias.shape != (sum(sizes),):
    raise OnnxError(f"onnx {op}: bias must have shape ({sum(sizes)},), got {bias.shape}")
  qkv = input @ weights
  if bias is not None: qkv = qkv + bias
  q, k, v = (t.reshape(B, S, num_heads, -1).permute(0, 2, 1, 3) for t in qkv.split(sizes, dim=2))  # (B, N, S, h)
  P = 0
  if past is not None:
    if past.ndim != 5 or past.shape[:3] != (2, B, num_heads) or past.shape[4] != k.shape[3] or sizes[1] != sizes[2]:
      raise OnnxError(f"onnx {op}: past must be (2, {B}, {num_heads}, past_length, {k.shape[3]}) with equal k and v "
                      f"sizes, got {past.shape} and sizes {sizes}")
    P = past.shape[3]
    k, v = past[0].cat(k, dim=2), past[1].cat(v, dim=2)
  T = P + S
  present = k.stack(v) if sizes[1] == sizes[2] else None
  scores = (q @ k.transpose(-1, -2)) * (scale if scale else 1 / math.sqrt(q.shape[-1]))  # (B, N, S, T)
  masked: Tensor | None = None
  if mask_index is not None: masked = _contrib_mask(mask_index, B, S, T, P)
  if unidirectional:
    causal = Tensor.ones(S, T, dtype=dtypes.bool, device=input.device).tril(P).logical_not()
    masked = causal if masked is None else masked | causal
  if masked is not None: scores = scores + masked.where(mask_filter_value, 0.0).cast(scores.dtype)
  if attention_bias is not None: scores = scores + attention_bias.cast(scores.dtype)
  probs = scores.cast(dtypes.float32).softmax(-1).cast(v.dtype)
  out = (probs @ v).permute(0, 2, 1, 3).reshape(B, S, -1)
  return out, present

@onnx_op("RotaryEmbedding", domain=MS)
def ContribRotaryEmbedding(input: Tensor, position_ids: Tensor, cos_cache: Tensor, sin_cache: Tensor,  # noqa: A002
                           interleaved: int = 0, num_heads: int = 0, rotary_embedding_dim: int = 0,
                           is_packed_batching: int = 0, scale: float = 1.0) -> Tensor:
  # onnxruntime's RoPE: the inputs come in another order than ai.onnx's, and a one-element position_ids is the
  # position of the first token (the rest follow it)
  op = "RotaryEmbedding (com.microsoft)"
  if is_packed_batching: raise OnnxError(f"onnx {op}: is_packed_batching is not supported")
  if input.ndim not in (3, 4): raise OnnxError(f"onnx {op}: input must be 3-d or 4-d, got {input.shape}")
  B, S = input.shape[0], input.shape[1] if input.ndim == 3 else input.shape[2]
  if position_ids.numel() == 1:
    position_ids = (Tensor.arange(S, device=input.device).reshape(1, S) + position_ids.reshape(1, 1)).expand(B, S)
  elif position_ids.shape != (B, S):
    raise OnnxError(f"onnx {op}: position_ids must have one element or be {(B, S)}, got {position_ids.shape}")
  heads = num_heads
  if input.ndim == 3 and not heads:
    rd = rotary_embedding_dim or cos_cache.shape[-1] * 2
    heads = input.shape[2] // rd  # onnxruntime infers the head count from the cache width when it isn't given
  if input.ndim == 3 and (heads <= 0 or input.shape[2] % heads):
    raise OnnxError(f"onnx {op}: hidden size {input.shape[2]} doesn't split into num_heads={heads} heads")
  return RotaryEmbedding(input, cos_cache, sin_cache, position_ids.cast(dtypes.int64), interleaved=interleaved,
                         num_heads=heads, rotary_embedding_dim=rotary_embedding_dim)

# QuantizeLinear and DequantizeLinear under com.microsoft (onnxruntime's quantization tools emit them) are ai.onnx's
@onnx_op("QuantizeLinear", domain=MS)
def ContribQuantizeLinear(x: Tensor, y_scale: Tensor, y_zero_point: Tensor | None = None, axis: int = 1) -> Tensor:
  return QuantizeLinear(x, y_scale, y_zero_point, axis)

@onnx_op("DequantizeLinear", domain=MS)
def ContribDequantizeLinear(x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None = None, axis: int = 1) -> Tensor:
  return DequantizeLinear(x, x_scale, x_zero_point, axis)

# ***** training (ai.onnx.preview.training) *****

TRAINING = "ai.onnx.preview.training"

def _groups(inputs: tuple[Tensor, ...], k: int, op: str) -> list[tuple[Tensor, ...]]:
  if len(inputs) % k: raise OnnxError(f"onnx {op}: {len(inputs)} tensors don't form groups of {k}")
  n = len(inputs) // k
  return [tuple(inputs[j * n + i] for j in range(k)) for i in range(n)]

@onnx_op(domain=TRAINING)
def Adagrad(R: Tensor, T: Tensor, *inputs: Tensor, decay_factor: float = 0.0, epsilon: float = 0.0,
            norm_coefficient: float = 0.0) -> tuple:
  r = R / (1 + T.cast(R.dtype) * decay_factor)
  xs, hs = [], []
  for X, G, H in _groups(inputs, 3, "Adagrad"):
    g = norm_coefficient * X + G
    h = H + g * g
    xs.append(X - r * g / (h.sqrt() + epsilon))
    hs.append(h)
  return tuple(xs + hs)

@onnx_op(domain=TRAINING)
def Momentum(R: Tensor, T: Tensor, *inputs: Tensor, alpha: float, beta: float, mode: str,
             norm_coefficient: float) -> tuple:
  xs, vs = [], []
  b = (T > 0).where(beta, 1.0).cast(R.dtype)
  for X, G, V in _groups(inputs, 3, "Momentum"):
    g = norm_coefficient * X + G
    v = alpha * V + b * g
    xs.append(X - R * (v if mode == "standard" else g + alpha * v))
    vs.append(v)
  return tuple(xs + vs)

@onnx_op(domain=TRAINING)
def Adam(R: Tensor, T: Tensor, *inputs: Tensor, alpha: float = 0.9, beta: float = 0.999, epsilon: float = 0.0,
         norm_coefficient: float = 0.0, norm_coefficient_post: float = 0.0) -> tuple:
  t = T.cast(dtypes.float32)
  xs, vs, hs = [], [], []
  for X, G, V, H in _groups(inputs, 4, "Adam"):
    g = norm_coefficient * X + G
    v = alpha * V + (1 - alpha) * g
    h = beta * H + (1 - beta) * g * g
    bias_fix = (1 - Tensor(beta, device=R.device).pow(t)).sqrt() / (1 - Tensor(alpha, device=R.device).pow(t))
    rr = (T > 0).where(R * bias_fix, R)
    x = X - rr * v / (h.sqrt() + epsilon)
    xs.append(((1 - norm_coefficient_post) * x).cast(X.dtype))
    vs.append(v)
    hs.append(h)
  return tuple(xs + vs + hs)

@onnx_op(domain=TRAINING, ctx=True)
def Gradient(*inputs: Tensor, xs: list[str], y: str, zs: list[str] | None = None, ctx: OpContext) -> tuple:
  # the gradient of y with respect to the graph values named in xs, through the graph that computed y
  if y not in ctx.scope: raise OnnxError(f"onnx Gradient: no value named {y!r}")
  targets = [ctx.scope[x] for x in xs]
  return tuple(ctx.scope[y].sum().gradient(*targets))
