"""Layers (tinygrad's names, PyTorch's initialisation): plain classes holding Tensors, called on a Tensor.

Each layer's math is a Tensor method (linear, conv2d, layernorm, batchnorm...); the layer owns the weights. The
attribute names match PyTorch's, so a torch state dict loads by name. `nn.optim`, `nn.state` and `nn.datasets`
are the submodules.
"""
from __future__ import annotations
import importlib, math
from typing import Any
from attograd.dtype import DType, dtypes
from attograd.helpers import make_tuple, prod
from attograd.tensor import Tensor
from attograd.tensor.writes import assign_together
from attograd.nn import optim  # noqa: F401

def __getattr__(name: str) -> Any:
  # state, datasets and data are imported on first use: they aren't needed to build or train a model
  if name in ("state", "datasets", "data", "onnx"): return importlib.import_module(f"attograd.nn.{name}")
  raise AttributeError(f"module 'attograd.nn' has no attribute {name!r}")

# A layer's parameters are made with requires_grad=True, as PyTorch's modules are: `loss.backward()` fills their .grad
# with or without an optimizer (tinygrad fills .grad of every float tensor in the graph; attograd of the tensors that
# ask for it, see docs/tinygrad-compat.md). Buffers that aren't parameters (running statistics) say False.
def _uniform(*shape: int, bound: float) -> Tensor:
  return Tensor.uniform(*shape, low=-bound, high=bound, requires_grad=True)

def _filled(shape: int | tuple[int, ...], value: float, dtype: DType | None = None,
            requires_grad: bool | None = True) -> Tensor:
  """A tensor of `value` in a buffer of its own, made from host data (no kernel). Tensor.ones(n) would be a
  constant, and equal constants are one node: two layers' weights would be one tensor to autograd."""
  shp = make_tuple(shape, 1)
  t = Tensor([value] * prod(shp), dtype=dtype or dtypes.default_float).reshape(shp)
  t.requires_grad = requires_grad
  return t

def _affine(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
  """x * weight + bias per channel (dim 1), or x unchanged without them."""
  if weight is None or bias is None: return x
  return x * weight.reshape(_channel_shape(x)) + bias.reshape(_channel_shape(x))

def _channel_shape(x: Tensor) -> tuple[int, ...]:
  """The shape that lays a per-channel (dim 1) vector along x's channels: (1, C, 1, ...)."""
  return (1, -1) + (1,) * (x.ndim - 2)

# ***** dense and convolution layers *****

class Linear:
  """y = x @ weight.T + bias, with weight of shape (out_features, in_features) as in PyTorch.
  weight and bias start uniform in +-1/sqrt(in_features) (PyTorch's default).

  >>> from attograd import Tensor
  >>> Linear(3, 2)(Tensor.ones(4, 3)).shape
  (4, 2)
  """
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features) if in_features else 0.0
    self.weight = _uniform(out_features, in_features, bound=bound)
    self.bias: Tensor | None = _uniform(out_features, bound=bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.T, self.bias)

class Conv2d:
  """2-D convolution over (N, C_in, H, W) with weight (C_out, C_in/groups, kH, kW). padding is an int, one int per
  spatial dim, or 'same' / 'valid'. weight and bias start uniform in +-1/sqrt(C_in/groups * kH * kW) (PyTorch's
  default).

  >>> from attograd import Tensor
  >>> Conv2d(3, 8, 3, padding=1)(Tensor.ones(1, 3, 5, 5)).shape
  (1, 8, 5, 5)
  """
  dims = 2  # spatial dims: Conv1d sets 1
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...],
               stride: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] | str = 0,
               dilation: int | tuple[int, ...] = 1, groups: int = 1, bias: bool = True):
    name = type(self).__name__
    if groups < 1 or in_channels % groups or out_channels % groups:
      raise ValueError(f"{name}: in_channels {in_channels} and out_channels {out_channels} must be divisible by "
                       f"groups {groups}")
    self.kernel_size = make_tuple(kernel_size, self.dims)
    if len(self.kernel_size) != self.dims:
      raise ValueError(f"{name}: kernel_size must be an int or {self.dims} ints, got {kernel_size!r}")
    if isinstance(padding, str):
      if padding not in ("same", "valid"):
        raise ValueError(f"{name}: padding must be 'same', 'valid' or ints, got {padding!r}")
      if padding == "same" and any(s != 1 for s in make_tuple(stride, self.dims)):
        raise ValueError(f"{name}: padding='same' is not supported for strided convolutions (stride={stride})")
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    bound = 1 / math.sqrt(in_channels // groups * prod(self.kernel_size))
    self.weight = _uniform(out_channels, in_channels // groups, *self.kernel_size, bound=bound)
    self.bias: Tensor | None = _uniform(out_channels, bound=bound) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)

class Conv1d(Conv2d):
  """1-D convolution over (N, C_in, L) with weight (C_out, C_in/groups, k); arguments as Conv2d.

  >>> from attograd import Tensor
  >>> Conv1d(2, 4, 3)(Tensor.ones(1, 2, 10)).shape
  (1, 4, 8)
  """
  dims = 1

class ConvTranspose2d(Conv2d):
  """Transposed 2-D convolution over (N, C_in, H, W) with weight (C_in, C_out/groups, kH, kW), as in PyTorch.
  weight and bias start uniform in +-1/sqrt(C_out/groups * kH * kW) (PyTorch's default).

  >>> from attograd import Tensor
  >>> ConvTranspose2d(4, 2, 2, stride=2)(Tensor.ones(1, 4, 3, 3)).shape
  (1, 2, 6, 6)
  """
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...],
               stride: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] = 0,
               output_padding: int | tuple[int, ...] = 0, dilation: int | tuple[int, ...] = 1, groups: int = 1,
               bias: bool = True):
    if isinstance(padding, str): raise ValueError(f"{type(self).__name__}: padding must be ints, got {padding!r}")
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    bound = 1 / math.sqrt(out_channels // groups * prod(self.kernel_size))
    self.weight = _uniform(in_channels, out_channels // groups, *self.kernel_size, bound=bound)
    self.bias = _uniform(out_channels, bound=bound) if bias else None
    self.output_padding = output_padding
  def __call__(self, x: Tensor) -> Tensor:
    padding: Any = self.padding  # always ints here (strings are refused above)
    return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, padding,
                              self.output_padding)

class ConvTranspose1d(ConvTranspose2d):
  """Transposed 1-D convolution over (N, C_in, L) with weight (C_in, C_out/groups, k); arguments as ConvTranspose2d.

  >>> from attograd import Tensor
  >>> ConvTranspose1d(2, 3, 4, stride=2)(Tensor.ones(1, 2, 5)).shape
  (1, 3, 12)
  """
  dims = 1

# ***** normalization *****

class BatchNorm:
  """Batch normalization over the channel dim (dim 1) of (N, C, ...): BatchNorm1d/2d/3d in one.

  In training (the TRAINING flag: `Context(TRAINING=1)`, `Tensor.train()`) it normalizes with the batch's statistics
  and updates running_mean and running_var (running_var with the unbiased batch variance, as PyTorch); otherwise it
  uses the running statistics.
  track_running_stats=False always uses the batch's statistics.

  >>> from attograd import Tensor
  >>> bn = BatchNorm(3)
  >>> bn(Tensor.ones(2, 3, 4, 4)).shape
  (2, 3, 4, 4)
  """
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
               momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = _filled(sz, 1.0) if affine else None
    self.bias: Tensor | None = _filled(sz, 0.0) if affine else None
    # updated by the layer itself, never trained
    self.num_batches_tracked = _filled((), 0, dtypes.int64, requires_grad=False)
    if track_running_stats:
      self.running_mean, self.running_var = _filled(sz, 0.0, requires_grad=False), _filled(sz, 1.0, requires_grad=False)
  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """The (mean, biased variance) per channel to normalize `x` with."""
    if self.track_running_stats and not Tensor.training: return self.running_mean, self.running_var
    axes = tuple(d for d in range(x.ndim) if d != 1)
    mean = x.mean(axes)
    y = x - mean.detach().reshape(_channel_shape(x))  # detached: d(var)/d(mean) is zero anyway, this saves work
    return mean, (y * y).mean(axes)
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2: raise ValueError(f"BatchNorm: input must be (N, C, ...), got shape {x.shape}")
    mean, var = self.calc_stats(x)
    if self.track_running_stats and Tensor.training:
      n = x.numel() // x.shape[1]  # values per channel
      unbiased = var.detach() * (n / max(n - 1, 1))
      # one realize for the three writes, not a schedule each: MNIST's two layers made 6 schedules whose few small
      # kernels each waited for a compiler run of their own on a first run
      assign_together([(self.running_mean, (1 - self.momentum) * self.running_mean + self.momentum * mean.detach()),
                       (self.running_var, (1 - self.momentum) * self.running_var + self.momentum * unbiased),
                       (self.num_batches_tracked, self.num_batches_tracked + 1)])
    return x.batchnorm(self.weight, self.bias, mean, var.add(self.eps).rsqrt())
BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm

class LayerNorm:
  """Normalize over the last len(normalized_shape) dims, then scale by weight and shift by bias (ones and zeros).

  >>> from attograd import Tensor
  >>> [round(v, 3) for v in LayerNorm(3)(Tensor([[1.0, 2.0, 3.0]])).tolist()[0]]
  [-1.225, 0.0, 1.225]
  """
  def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape: tuple[int, ...] = make_tuple(normalized_shape, 1)
    self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
    self.eps, self.elementwise_affine = eps, elementwise_affine
    self.weight: Tensor | None = _filled(self.normalized_shape, 1.0) if elementwise_affine else None
    self.bias: Tensor | None = _filled(self.normalized_shape, 0.0) if elementwise_affine else None
  def __call__(self, x: Tensor) -> Tensor:
    n = len(self.normalized_shape)
    if tuple(x.shape[-n:]) != self.normalized_shape:
      raise ValueError(f"LayerNorm: the last dims of the input {x.shape} must be normalized_shape "
                       f"{self.normalized_shape}")
    x = x.layernorm(self.axis, self.eps)
    if self.weight is None or self.bias is None: return x
    return x * self.weight + self.bias

class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels of (N, C, H, W) at each position (as in ConvNeXt).

  >>> from attograd import Tensor
  >>> LayerNorm2d(3)(Tensor.ones(1, 3, 2, 2)).shape
  (1, 3, 2, 2)
  """
  def __call__(self, x: Tensor) -> Tensor: return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

class RMSNorm:
  """x / sqrt(mean(x^2 over the last dim) + eps) * weight, computed in float32 at least.

  >>> from attograd import Tensor
  >>> [round(v, 3) for v in RMSNorm(2)(Tensor([[3.0, 4.0]])).tolist()[0]]
  [0.849, 1.131]
  """
  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight: Tensor | None = _filled(dim, 1.0) if elementwise_affine else None
  def _norm(self, x: Tensor) -> Tensor: return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()
  def __call__(self, x: Tensor) -> Tensor:
    wide = x if x.dtype in (dtypes.float32, dtypes.float64) else x.float()
    y = self._norm(wide).cast(x.dtype)
    return y if self.weight is None else y * self.weight

class GroupNorm:
  """Normalize each of num_groups groups of channels of (N, C, ...) per sample, then scale and shift per channel.

  >>> from attograd import Tensor
  >>> GroupNorm(2, 4)(Tensor.ones(1, 4, 3)).shape
  (1, 4, 3)
  """
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_groups < 1 or num_channels % num_groups:
      raise ValueError(f"GroupNorm: num_channels {num_channels} must be divisible by num_groups {num_groups}")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight: Tensor | None = _filled(num_channels, 1.0) if affine else None
    self.bias: Tensor | None = _filled(num_channels, 0.0) if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_channels:
      raise ValueError(f"GroupNorm: input must be (N, {self.num_channels}, ...), got shape {x.shape}")
    x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
    return _affine(x, self.weight, self.bias)

class InstanceNorm:
  """Normalize each channel of each sample of (N, C, ...) over its spatial dims, then scale and shift per channel.
  (affine defaults to True, as in tinygrad; PyTorch's InstanceNorm2d defaults to False.)

  >>> from attograd import Tensor
  >>> InstanceNorm(3)(Tensor.ones(2, 3, 4, 4)).shape
  (2, 3, 4, 4)
  """
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    self.num_features, self.eps = num_features, eps
    self.weight: Tensor | None = _filled(num_features, 1.0) if affine else None
    self.bias: Tensor | None = _filled(num_features, 0.0) if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 3 or x.shape[1] != self.num_features:
      raise ValueError(f"InstanceNorm: input must be (N, {self.num_features}, *spatial), got shape {x.shape}")
    x = x.reshape(x.shape[0], self.num_features, -1).layernorm(eps=self.eps).reshape(x.shape)
    return _affine(x, self.weight, self.bias)

# ***** embedding and recurrent *****

class Embedding:
  """A lookup table: row idx of weight (vocab_size, embed_size) for each integer in idx.
  weight starts N(0, 1) (PyTorch's default).

  >>> from attograd import Tensor
  >>> Embedding(10, 4)(Tensor([[1, 2, 3]])).shape
  (1, 3, 4)
  """
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = Tensor.normal(vocab_size, embed_size, requires_grad=True)
  def __call__(self, idx: Tensor) -> Tensor:
    if not dtypes.is_int(idx.dtype): raise TypeError(f"Embedding: indices must be an integer tensor, got {idx.dtype}")
    # a one-hot (..., vocab) times the table: a reduce that fuses into one kernel, and whose gradient is plain math
    # (an index outside [0, vocab_size) gives a row of zeros)
    arange = Tensor.arange(self.vocab_sz, device=self.weight.device)
    one_hot = idx.reshape(*idx.shape, 1) == arange
    return one_hot.cast(self.weight.dtype) @ self.weight

class LSTMCell:
  """One LSTM step: (x, (h, c)) -> (h', c'), with PyTorch's gate order (input, forget, cell, output) and weight names.
  Weights and biases start uniform in +-1/sqrt(hidden_size); hc=None starts from zeros.

  >>> from attograd import Tensor
  >>> h, c = LSTMCell(3, 5)(Tensor.ones(2, 3))
  >>> h.shape, c.shape
  ((2, 5), (2, 5))
  """
  def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
    bound = 1.0 / math.sqrt(hidden_size)
    self.weight_ih = _uniform(hidden_size * 4, input_size, bound=bound)
    self.weight_hh = _uniform(hidden_size * 4, hidden_size, bound=bound)
    self.bias_ih: Tensor | None = _uniform(hidden_size * 4, bound=bound) if bias else None
    self.bias_hh: Tensor | None = _uniform(hidden_size * 4, bound=bound) if bias else None
  def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    if hc is None:
      zeros = Tensor.zeros(*x.shape[:-1], self.weight_hh.shape[1], dtype=x.dtype, device=x.device)
      hc = (zeros, zeros)
    gates = x.linear(self.weight_ih.T, self.bias_ih) + hc[0].linear(self.weight_hh.T, self.bias_hh)
    i, f, g, o = gates.chunk(4, dim=-1)
    c = f.sigmoid() * hc[1] + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    return h.contiguous(), c.contiguous()
