"""UOp's tensor methods, lent by the Tensor. tinygrad 0.14's UOp has the Tensor's graph-building methods
(`u.sum(1)`, `u.argmax()`, `u / 3`, `u[1:, None]`, `UOp.arange(5)`), and `fn(t).uop is fn(t.uop)`: the two calls
build one hash-consed node.

The uop layer can't import the Tensor (it sits far below it), so the Tensor lends them, here and only here, when
`attograd.tensor` loads. Each name in LENT becomes a UOp method that wraps the UOp in a Tensor (no copy, nothing
realized), calls the Tensor's method and returns the result's `.uop` (a tuple or list of Tensors as one of UOps): the
graph is the Tensor method's by construction, with nothing to keep in step. A UOp argument that stands for a tensor
(one on a device, or a deviceless constant expression such as `UOp.const(2)`) is wrapped the same way; a deviceless
expression over Variables stays a UOp, the symbolic size or index the Tensor's methods take as it is. LENT_STATIC are
the creation functions (`UOp.arange`, `UOp.zeros`, `UOp.einsum`, ...).

SHARED are names UOp has for index math and symbolic sizes (`+`, `*`, `//`, `<`, `eq`, `where`, ...): on a UOp on a
device (a tensor-level graph), or with a device-bound UOp operand, they are the Tensor's, with its broadcasting and
dtype promotion; on deviceless UOps they stay UOp's own, which the code generator's index math and the symbolic
simplifier build with.

Not lent: what realizes or reads values (`numpy`, `item`, `tolist`, `data`, `realize`, `backward`), moves between
devices or writes buffers (`to`, `shard`, `assign`, `replace`, setitem), draws from the global random stream (`rand`,
`randn`, `dropout`, `multinomial`, the initializers), hashes round by round with a realize per round (`keccak`,
`hash`), and UOp's own names, which keep UOp's meaning (`shape`, `dtype`, `device`, `size`, `const`, `const_like`,
`alu`, `replace`; `==` and `hash()` are identity, as UOps are dictionary keys). `cast` is UOp's, and the same graph as
the Tensor's for a strong dtype. The pure random functions of an explicit key and counter (`threefry`, `random_bits`,
`_rand`) are lent. A lent method whose result depends on the data (`nonzero()` or `masked_select()` without `size`, a
boolean mask index) realizes what it reads, as the Tensor's does. On a kernel body's deviceless buffer views and
values (tinygrad's hand-written kernels) the few names such a body uses (`reshape`, `flatten`, `[i, j]`, `/`, ...) are
uop/kernel.py's instead."""
from __future__ import annotations
from typing import Any, Callable
from attograd.uop import kernel
from attograd.uop.ops import Ops, UOp
from attograd.engine.buffers import new_buffer
from attograd.tensor.buffer_views import _prefix_view_of_buffer
from attograd.tensor.core import Tensor

# instance methods: math, movement, reduce, indexing, nn functions, linear algebra, scans, autograd's graph builders
LENT: tuple[str, ...] = (
  # elementwise math
  "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atanh", "bitwise_and", "bitwise_not", "bitwise_or",
  "bitwise_xor", "ceil", "clamp", "clip", "copysign", "cos", "cosh", "div", "erf", "exp", "exp2", "expm1", "floor",
  "floordiv", "fmod", "isclose", "allclose", "isfinite", "isinf", "isnan", "lerp", "log", "log10", "log1p", "log2",
  "logaddexp", "logical_and", "logical_or", "logical_xor", "lshift", "rshift", "mod", "mul", "neg", "pow",
  "reciprocal", "round", "rsqrt", "sign", "sin", "sinh", "sqrt", "square", "sub", "tan", "tanh", "trunc", "ge", "gt",
  "le", "lt", "ufix", "usum", "uprod",
  # dtype conversions (cast itself is UOp's own)
  "bitcast", "bfloat16", "bool", "char", "double", "float", "half", "int", "long", "short", "is_floating_point",
  # activations
  "celu", "elu", "gelu", "hardsigmoid", "hardswish", "hardtanh", "leaky_relu", "logsigmoid", "mish", "quick_gelu",
  "relu", "relu6", "selu", "sigmoid", "silu", "softplus", "softsign", "swish",
  # movement
  "chunk", "expand", "flatten", "flip", "pad", "pad_to", "permute", "repeat", "repeat_interleave", "reshape", "roll",
  "shrink", "shrink_to", "split", "squeeze", "squeeze_axes", "transpose", "unflatten", "unfold", "unsqueeze", "view",
  "rearrange", "cat", "stack", "meshgrid", "diag", "diagonal", "triu", "tril",
  # reductions and scans
  "sum", "prod", "max", "min", "mean", "var", "std", "var_mean", "std_mean", "any", "all", "argmax", "argmin",
  "logsumexp", "logcumsumexp", "cumsum", "cumprod", "cummax", "cummin", "softmax", "log_softmax", "softmin",
  "sort", "argsort", "topk", "numel",
  # indexing and scatter
  "gather", "scatter", "scatter_reduce", "masked_fill", "masked_select", "nonzero", "one_hot",
  # nn functions
  "avg_pool2d", "max_pool2d", "max_unpool2d", "conv2d", "conv_transpose2d", "image_conv2d", "image_dot", "dot",
  "matmul", "linear", "batchnorm", "layernorm", "normalize", "interpolate", "scaled_dot_product_attention",
  "sequential", "binary_crossentropy", "binary_crossentropy_logits", "cross_entropy", "sparse_categorical_crossentropy",
  "nll_loss", "l1_loss", "mse_loss", "smooth_l1_loss",
  # linear algebra, the pure Threefry cipher (keccak and hash realize round by round: not lent)
  "qr", "svd", "newton_schulz", "threefry",
  # new graphs of this one's shape, and autograd's markers and gradients
  "full_like", "zeros_like", "ones_like", "empty_like", "clone", "contiguous", "contiguous_backward", "detach",
  "gradient",
  # operators UOp has no meaning of its own for
  "__getitem__", "__truediv__", "__rtruediv__", "__rfloordiv__", "__rmod__", "__pow__", "__rpow__", "__matmul__",
  "__rmatmul__", "__xor__", "__rxor__", "__rand__", "__ror__", "__lshift__", "__rshift__", "__invert__", "__abs__",
)

# creation functions (static on both): graphs of constants, new (unwritten) buffers, einsum over UOps, and the random
# words and values of an explicit key and counter
LENT_STATIC: tuple[str, ...] = ("arange", "linspace", "eye", "full", "zeros", "ones", "empty", "invalids", "einsum",
                                "random_bits", "_threefry_random_bits", "_bits_to_rand", "_rand")

# UOp's own operators and methods: the Tensor's on a device-bound UOp, UOp's on deviceless ones (see the docstring)
SHARED: tuple[str, ...] = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__floordiv__",
                           "__mod__", "__neg__", "__lt__", "__gt__", "__le__", "__ge__", "__and__", "__or__", "eq",
                           "ne", "maximum", "minimum", "logical_not", "where")

_SIZE_OPS = (Ops.DEFINE_VAR, Ops.BIND)

def _is_size(u: UOp) -> bool:
  """A deviceless expression over Variables: a symbolic size or index, which the Tensor's methods take as a UOp."""
  return u.device is None and any(n.op in _SIZE_OPS for n in u.toposort())

def _arg(x: Any) -> Any:
  """An argument for the Tensor method: a UOp that stands for a tensor as a Tensor of it (in tuples and lists too)."""
  if x.__class__ is UOp: return x if _is_size(x) else Tensor(x)
  if x.__class__ is tuple or x.__class__ is list:
    return x.__class__(_arg(y) for y in x) if any(y.__class__ in (UOp, tuple, list) for y in x) else x
  return x

def _out(r: Any) -> Any:
  """The Tensor method's result with each Tensor as its UOp."""
  if isinstance(r, Tensor): return r.uop
  if r.__class__ is tuple or r.__class__ is list: return r.__class__(_out(y) for y in r)
  return r

def _named(method: Callable[..., Any], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
  method.__name__, method.__qualname__ = name, f"UOp.{name}"
  method.__doc__ = f"Tensor.{name} on this UOp's graph, returning UOps (lent by attograd/tensor/uop_methods.py)." + \
    (f"\n\n{fn.__doc__}" if fn.__doc__ else "")
  return method

def _lend(name: str) -> Callable[..., Any]:
  fn = getattr(Tensor, name)
  # a kernel body's buffer views and values (deviceless: a Tensor can't hold them) have their own (uop/kernel.py)
  view_fn, value_fn = kernel.VIEW_METHODS.get(name), kernel.VALUE_METHODS.get(name)
  def method(self: UOp, *args: Any, **kw: Any) -> Any:
    if self.device is None:
      if view_fn is not None and kernel.is_kernel_view(self): return view_fn(self, *args, **kw)
      if value_fn is not None and kernel.is_kernel_value(self): return value_fn(self, *args, **kw)
    return _out(fn(Tensor(self), *[_arg(a) for a in args], **{k: _arg(v) for k, v in kw.items()}))
  return _named(method, name, fn)

def _lend_static(name: str) -> Any:
  fn = getattr(Tensor, name)
  def method(*args: Any, **kw: Any) -> Any:
    return _out(fn(*[_arg(a) for a in args], **{k: _arg(v) for k, v in kw.items()}))
  return staticmethod(_named(method, name, fn))

def _share(name: str) -> Callable[..., Any]:
  fn, own = getattr(Tensor, name), getattr(UOp, name)
  def method(self: UOp, *args: Any) -> Any:
    # the index math of every kernel comes through here: the deviceless case first, on devices cached on the nodes
    if self.device is None:
      for a in args:
        if a.__class__ is UOp and a.device is not None: break
      else: return own(self, *args)
    if any(isinstance(a, Tensor) for a in args): return NotImplemented  # uop op Tensor: the Tensor's reflected op
    return _out(fn(Tensor(self), *[_arg(a) for a in args]))
  _named(method, name, fn)
  method.__doc__ = f"On a device-bound UOp, Tensor.{name} (broadcasting, dtype promotion); on deviceless UOps (index " \
                   f"math, symbolic sizes) UOp's own {name} (lent by attograd/tensor/uop_methods.py)."
  return method

def _contiguous_view(self: UOp) -> UOp | None:
  """This node when its elements are the first ones of a buffer, in order (a kernel can be given the buffer itself),
  else None (tinygrad's name)."""
  return self if _prefix_view_of_buffer(self) else None

def lend() -> None:
  """Give UOp the methods above (once, when attograd.tensor loads). A lent name UOp has of its own is an error: a
  shared one must be listed in SHARED, where the device decides."""
  if "T" in UOp.__dict__: return  # lent already (a reload of this module)
  for name in LENT + LENT_STATIC:
    if name in UOp.__dict__: raise AssertionError(f"uop_methods: UOp.{name} is UOp's own; list it in SHARED or drop it")
  for name in LENT: setattr(UOp, name, _lend(name))
  for name in LENT_STATIC: setattr(UOp, name, _lend_static(name))
  for name in SHARED: setattr(UOp, name, _share(name))
  UOp.T = property(lambda self: self.transpose(), doc="Tensor.T: the last two dims swapped")  # type: ignore[attr-defined]
  UOp.new_buffer = staticmethod(new_buffer)  # type: ignore[attr-defined]  # (the engine's: the uop layer has no Buffers)
  UOp.contiguous_view = _contiguous_view  # type: ignore[attr-defined]
  UOp.__iter__ = None  # type: ignore[attr-defined]  # __getitem__ must not make a UOp iterable (a size isn't)

lend()
