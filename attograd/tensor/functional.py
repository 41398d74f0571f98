"""Neural-network functions on Tensor (activations, convolution, pooling, losses, attention, sorting), built from
primitives: every op here is views plus elementwise math and reduces, so it stays lazy and fuses."""
from __future__ import annotations
import functools, math
from typing import TYPE_CHECKING, Callable, Sequence
from attograd.dtype import DType, dtypes, least_upper_dtype, least_upper_float, sum_acc_dtype, to_dtype
from attograd.helpers import ArgumentError, TRAINING, UnknownModeError, argfix, ceildiv, flatten, make_tuple, prod
from attograd.uop.ops import Ops, SymbolicSizeError, UOp, shape_str, ssimp
from attograd.uop.view import smax, surely

# windows of more elements than this are not stacks of shifted slices: a kernel unrolls a stack's window whole (up to 49
# steps) to make its masks vanish; past that each of the prod(k) masked slices is read at every window step (an
# 8x8x8 window: 512 loads per step, a 128 KB kernel, minutes of gcc for its gradient)
_STACK_MAX_WINDOW = 49

if TYPE_CHECKING:
  from attograd.tensor.core import Tensor

REDUCTIONS = ("none", "mean", "sum")
INTERPOLATE_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "trilinear")

class NNMixin:
  # ***** activations *****

  def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor:
    """x for x > 0, else neg_slope * x (the gradient at 0 is neg_slope, like PyTorch).

    >>> Tensor([-2.0, 3.0]).leaky_relu(0.5).tolist()
    [-1.0, 3.0]
    """
    return (self > 0).where(self, self * neg_slope)

  def relu6(self: Tensor) -> Tensor:
    """min(max(x, 0), 6), with gradient 0 at 0 and at 6 (hardtanh(0, 6), like PyTorch).

    >>> Tensor([-1.0, 3.0, 9.0]).relu6().tolist()
    [0.0, 3.0, 6.0]
    """
    return self.hardtanh(0, 6)

  def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, else alpha * (exp(x) - 1).

    >>> [round(v, 4) for v in Tensor([-1.0, 2.0]).elu().tolist()]
    [-0.6321, 2.0]
    """
    # expm1 only sees x <= 0, so large x can't overflow it (an inf there would turn gradients into nan); the gradient
    # at 0 is alpha, from the x <= 0 side, like PyTorch, and elu(-0.0) is -0.0
    return (self > 0).where(self, alpha * self._nonpos().expm1())

  def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
    """max(x, 0) + min(0, alpha * (exp(x / alpha) - 1)).

    >>> [round(v, 4) for v in Tensor([-1.0, 2.0]).celu(2.0).tolist()]
    [-0.7869, 2.0]
    """
    # elu's form (the same values): the gradient at 0 is 1, from the x <= 0 side, like PyTorch
    return (self > 0).where(self, alpha * (self._nonpos() / alpha).expm1())

  def selu(self: Tensor, alpha: float = 1.6732632423543772, gamma: float = 1.0507009873554805) -> Tensor:
    """gamma * elu(x, alpha), with the self-normalizing constants as defaults.

    >>> [round(v, 4) for v in Tensor([-1.0, 2.0]).selu().tolist()]
    [-1.1113, 2.1014]
    """
    return gamma * self.elu(alpha)

  def gelu(self: Tensor, approximate: str = "tanh") -> Tensor:
    """The GELU: tinygrad's default is the tanh approximation (PyTorch's `approximate="tanh"`); approximate="none"
    is the exact x * Phi(x) with erf.

    >>> [round(v, 4) for v in Tensor([-1.0, 1.0]).gelu().tolist()]
    [-0.1588, 0.8412]
    """
    if approximate == "none": return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
    if approximate != "tanh": raise ValueError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")
    return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())

  def quick_gelu(self: Tensor) -> Tensor:
    """x * sigmoid(1.702 x), a cheaper GELU.

    >>> round(Tensor([1.0]).quick_gelu().item(), 4)
    0.8458
    """
    return self * (self * 1.702).sigmoid()

  def silu(self: Tensor) -> Tensor:
    """x * sigmoid(x).

    >>> round(Tensor([1.0]).silu().item(), 4)
    0.7311
    """
    return self * self.sigmoid()

  def swish(self: Tensor) -> Tensor:
    """Another name for silu: x * sigmoid(x).

    >>> round(Tensor([1.0]).swish().item(), 4)
    0.7311
    """
    return self.silu()

  def softplus(self: Tensor, beta: float = 1.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, computed so large |x| neither overflows nor loses precision.

    >>> [round(v, 4) for v in Tensor([-1.0, 0.0, 100.0]).softplus().tolist()]
    [0.3133, 0.6931, 100.0]
    """
    # log(1 + e^z) = max(z, 0) + log1p(e^-|z|): the exp never overflows, and softplus(-100) is e^-100, not 0. At 0
    # relu's gradient is 0 and -|z| takes its z <= 0 side (gradient 1), which gives the true 1/2
    z = self._f() * beta
    return (z.relu() + (z > 0).where(-z, z).exp().log1p()) * (1 / beta)

  def mish(self: Tensor) -> Tensor:
    """x * tanh(softplus(x)).

    >>> round(Tensor([1.0]).mish().item(), 4)
    0.8651
    """
    return self * self.softplus().tanh()

  def softsign(self: Tensor) -> Tensor:
    """x / (1 + |x|).

    >>> Tensor([-3.0, 1.0]).softsign().tolist()
    [-0.75, 0.5]
    """
    return self / (1 + self.abs())

  def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
    """A piecewise-linear sigmoid: clip(alpha x + beta, 0, 1) (gradient 0 at the kinks, like PyTorch).

    >>> Tensor([-4.0, 0.0, 4.0]).hardsigmoid().tolist()
    [0.0, 0.5, 1.0]
    """
    # as relu6(x + 3) / 6 for the defaults: alpha * x + beta would miss 0 at x = -3 by the rounding of 1/6
    return (self + beta / alpha).hardtanh(0, 1 / alpha) * alpha

  def hardswish(self: Tensor) -> Tensor:
    """x * relu6(x + 3) / 6.

    >>> [round(v, 4) for v in Tensor([-1.0, 3.0]).hardswish().tolist()]
    [-0.3333, 3.0]
    """
    return self * (self + 3).relu6() * (1 / 6)

  def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor:
    """x clipped to [min_val, max_val]. Unlike clip, the gradient is 0 at the bounds themselves (PyTorch's hardtanh).

    >>> Tensor([-3.0, 0.5, 3.0]).hardtanh().tolist()
    [-1.0, 0.5, 1.0]
    """
    inside = (self > min_val) & (self < max_val)
    return inside.where(self, self.clip(min_val, max_val).detach())

  def _nonpos(self: Tensor) -> Tensor:
    """min(x, 0) with gradient 1 at 0 (MAX would split it at the tie): elu and celu take their x <= 0 side there."""
    return (self > 0).where(0.0, self)

  def logsigmoid(self: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), finite for very negative x.

    >>> [round(v, 4) for v in Tensor([-100.0, 0.0]).logsigmoid().tolist()]
    [-100.0, -0.6931]
    """
    return -(-self).softplus()

  # ***** dropout, one_hot, normalization, linear *****

  def dropout(self: Tensor, p: float = 0.5) -> Tensor:
    """In training (`Tensor.training` is True), zero each element with probability p and scale the rest by 1/(1-p);
    otherwise return the tensor unchanged.

    >>> Tensor([1.0, 2.0]).dropout(0.5).tolist()  # Tensor.training is False
    [1.0, 2.0]
    """
    if not 0 <= p <= 1: raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not TRAINING or p == 0: return self
    if p == 1: return self.zeros_like()
    keep = type(self).rand(self.shape, device=self.device, contiguous=False) >= p
    return keep.where(self, self._const_like(0)) * (1.0 / (1.0 - p))

  def one_hot(self: Tensor, num_classes: int) -> Tensor:
    """An int32 tensor with a new last dim of `num_classes`, 1 at each index and 0 elsewhere. num_classes is
    required and non-negative, as in tinygrad and jax (PyTorch's -1, "max + 1", would read the tensor back; use
    `t.one_hot(int(t.max().item()) + 1)` for that).

    >>> Tensor([0, 2]).one_hot(3).tolist()
    [[1, 0, 0], [0, 0, 1]]
    """
    if not dtypes.is_int(self.dtype): raise TypeError(f"one_hot: needs an integer tensor, got {self.dtype}")
    if not isinstance(num_classes, int) or num_classes < 0:
      raise ValueError(f"one_hot: num_classes must be an int >= 0, got {num_classes!r}")
    return _one_hot_along(self.unsqueeze(-1), num_classes, -1).where(1, 0).cast(dtypes.int32)  # (1, 0: weakint)

  def layernorm(self: Tensor, axis: int | tuple[int, ...] = -1, eps: float = 1e-5) -> Tensor:
    """Normalize to mean 0 and variance 1 over `axis` (no affine weights; see nn.LayerNorm for those).

    >>> [round(v, 3) for v in Tensor([1.0, 2.0, 3.0]).layernorm().tolist()]
    [-1.225, 0.0, 1.225]
    """
    y = self - self.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

  def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                axis: int | tuple[int, ...] = 1) -> Tensor:
    """(x - mean) * invstd * weight + bias, with the 1-D parameters laid along `axis` (the channel dim).

    >>> x = Tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> x.batchnorm(None, Tensor([1.0, 1.0]), Tensor([2.0, 3.0]), Tensor([1.0, 0.5])).tolist()
    [[0.0, 0.5], [2.0, 1.5]]
    """
    axes = tuple(self._resolve_axis(a, "batchnorm") for a in argfix(axis))
    shape = tuple(s if d in axes else 1 for d, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None: x = x * weight.reshape(shape)
    out = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
    return out + bias.reshape(shape) if bias is not None else out

  def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None, dtype: DType | str | None = None) -> Tensor:
    """x @ weight + bias with weight of shape (in, out), as in tinygrad (PyTorch's F.linear takes weight.T);
    a 1-D weight scales elementwise. `dtype`: compute (and return) in this dtype.

    >>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0], [1.0]]), Tensor([0.5])).tolist()
    [[3.5]]
    """
    if dtype is not None:
      dt = to_dtype(dtype)
      return self.cast(dt).linear(weight.cast(dt), bias.cast(dt) if bias is not None else None)
    x = self * weight if weight.ndim == 1 else self.dot(weight)
    return x + bias if bias is not None else x

  def sequential(self: Tensor, ll: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
    """Apply the callables in order: `x.sequential([f, g])` is g(f(x)).

    >>> Tensor([-1.0, 2.0]).sequential([Tensor.relu, lambda x: x * 2]).tolist()
    [0.0, 4.0]
    """
    return functools.reduce(lambda x, f: f(x), ll, self)

  # ***** sliding windows: pooling and convolution *****

  def _pool(self: Tensor, k_: tuple[int, ...], stride: int | tuple[int, ...] = 1,
            dilation: int | tuple[int, ...] = 1) -> Tensor:
    """Sliding windows over the last len(k_) dims as a view: (..., *i) -> (..., *o, *k) with
    o = ceil((i - d*(k-1)) / s) windows per dim."""
    nk = len(k_)
    s_, d_ = make_tuple(stride, nk), make_tuple(dilation, nk)
    if len(s_) != nk or len(d_) != nk:
      raise ValueError(f"pool: stride {s_} and dilation {d_} need one entry per kernel dim of {k_}")
    if self.ndim < nk: raise ValueError(f"pool: can't slide a {nk}-d kernel {k_} over shape {self.shape}")
    lead, i_ = self.shape[:-nk], self.shape[-nk:]
    for k, d, i in zip(k_, d_, i_):
      if i.__class__ is not int and not surely(d * (k - 1) + 1 <= i) and not surely(d * (k - 1) + 1 > i):
        raise SymbolicSizeError(f"pool: kernel {k_} with dilation {d_} is larger than the symbolic input size "
                                f"{i.render()} for some values of its Variables; narrow their range")  # type: ignore
      if d * (k - 1) + 1 > i: raise ArgumentError(f"pool: kernel {k_} with dilation {d_} is larger than the input {i_}")
    o_ = [ceildiv(i - d * (k - 1), s) for i, d, k, s in zip(i_, d_, k_, s_)]
    keep = [None] * len(lead)
    if all(k <= s for k, s in zip(k_, s_)) and all(d == 1 for d in d_):
      # windows don't overlap: cut each dim into o blocks of s and keep the first k of each block
      x = self.pad_(tuple([(0, 0)] * len(lead) + [(0, smax(ssimp(o * s - i), 0)) for i, o, s in zip(i_, o_, s_)]))
      x = x.shrink(tuple(keep + [(0, o * s) for o, s in zip(o_, s_)]))
      x = x.reshape(lead + tuple(flatten((o, s) for o, s in zip(o_, s_))))
      x = x.shrink(tuple(keep + flatten(((0, o), (0, k)) for o, k in zip(o_, k_))))
      return x.permute(*range(len(lead)), *[len(lead) + 2 * j for j in range(nk)],
                       *[len(lead) + 2 * j + 1 for j in range(nk)])
    if prod(k_) > _STACK_MAX_WINDOW:
      if any(i.__class__ is not int for i in i_):  # its repeat counts depend on the size
        raise SymbolicSizeError(f"pool: a window of {prod(k_)} elements (kernel {k_}) over the symbolic input size "
                                f"{shape_str(tuple(i_))} isn't supported; "
                                f"use a kernel of at most {_STACK_MAX_WINDOW} elements or a concrete size")
      return self._pool_repeat(k_, s_, d_, o_)
    # overlapping or dilated windows: per dim, a stack of the k shifted (and strided) slices. Every slice is one plain
    # view, so a kernel that unrolls the window axis reads each with simple index math and no bounds checks, and the
    # gradient is a sum of k padded slices (not a scatter).
    x, sp = self, len(lead)
    for j, (k, d, s, o) in enumerate(zip(k_, d_, s_, o_)):
      ax = sp + j
      def window(kk: int, x: Tensor = x, ax: int = ax, d: int = d, s: int = s, o: int = o) -> Tensor:
        arg: list[tuple[int, int] | None] = [None] * x.ndim
        arg[ax] = (kk * d, kk * d + (o - 1) * s + 1)
        w = x.shrink(tuple(arg))
        if s == 1: return w
        # every s-th element: pad to o*s, split into (o, s), keep column 0
        w = w.pad_(tuple((0, 0) if a != ax else (0, o * s - w.shape[ax]) for a in range(w.ndim)))
        w = w.reshape(*w.shape[:ax], o, s, *w.shape[ax + 1:])
        w = w.shrink(tuple((0, 1) if a == ax + 1 else None for a in range(w.ndim)))
        return w.reshape(*w.shape[:ax], o, *w.shape[ax + 2:])
      x = window(0).unsqueeze(-1) if k == 1 else type(self).stack(*[window(kk) for kk in range(k)], dim=-1)
    return x

  def _pool_repeat(self: Tensor, k_: tuple[int, ...], s_: tuple[int, ...], d_: tuple[int, ...],
                   o_: list[int]) -> Tensor:
    """Big overlapping windows as one view of the input repeated: per dim, the repeats are read as k rows of length
    L = f*i + d. Row kk starts at kk*L, which is kk*d modulo i, so its column c is x[kk*d + c], with no wrap-around
    for the columns a window reads ((o-1)*s + (k-1)*d < i); columns o*s split as (o, s) keep column 0 (the stride)."""
    nk, lead, i_ = len(k_), self.shape[:-len(k_)], self.shape[-len(k_):]
    keep: list = [None] * len(lead)
    L_ = [max(1, ceildiv(o * s - d, i)) * i + d for i, o, s, d in zip(i_, o_, s_, d_)]  # row length >= o*s
    x = self.repeat(*[1] * len(lead), *[ceildiv(k * L, i) for k, L, i in zip(k_, L_, i_)])
    x = x.shrink(tuple(keep + [(0, k * L) for k, L in zip(k_, L_)]))
    x = x.reshape(lead + tuple(flatten((k, L) for k, L in zip(k_, L_))))                   # (..., k, L) per dim
    x = x.shrink(tuple(keep + flatten(((0, k), (0, o * s)) for k, o, s in zip(k_, o_, s_))))
    x = x.reshape(lead + tuple(flatten((k, o, s) for k, o, s in zip(k_, o_, s_))))         # (..., k, o, s) per dim
    x = x.shrink(tuple(keep + flatten(((0, k), (0, o), (0, 1)) for k, o in zip(k_, o_))))
    x = x.reshape(lead + tuple(flatten((k, o) for k, o in zip(k_, o_))))                   # (..., k, o) per dim
    n = len(lead)
    return x.permute(*range(n), *[n + 2 * j + 1 for j in range(nk)], *[n + 2 * j for j in range(nk)])

  def _pool_pads(self: Tensor, padding: int | Sequence[int], dims: int, op: str) -> list[int]:
    """Padding as a flat PyTorch-order list (last dim first, (before, after) each) from an int, one int per dim
    (first dim first, like PyTorch's conv padding) or a flat list of 2*dims."""
    if isinstance(padding, int): return [padding] * (2 * dims)
    pads = [int(p) for p in padding]
    if len(pads) == 2 * dims: return pads
    if len(pads) == dims: return [p for p in reversed(pads) for _ in range(2)]
    raise ValueError(f"{op}: padding must be an int or a sequence of {dims} or {2 * dims} ints, got {padding!r}")

  def _ceil_pads(self: Tensor, pads: list[int], k_: tuple[int, ...], stride: int | tuple[int, ...],
                 dilation: int | tuple[int, ...]) -> list[int]:
    """Extra right padding so pooling counts a last, partial window (ceil_mode), as in PyTorch: a window may run off
    the end but must start inside the input or the left padding."""
    nk = len(k_)
    s_, d_, i_ = make_tuple(stride, nk), make_tuple(dilation, nk), self.shape[-nk:]
    out = list(pads)
    for j, (i, s, k, d) in enumerate(zip(i_, s_, k_, d_)):
      before, after = pads[2 * (nk - 1 - j)], pads[2 * (nk - 1 - j) + 1]
      span = d * (k - 1) + 1
      o = ceildiv(i + before + after - span, s) + 1
      if s * (o - 1) >= before + i: o -= 1  # the last window would start in the right padding
      out[2 * (nk - 1 - j) + 1] += max(0, s * (o - 1) + span - (i + before + after))
    return out

  def max_pool2d(self: Tensor, kernel_size: int | tuple[int, ...] = (2, 2), stride: int | tuple[int, ...] | None = None,
                 dilation: int | tuple[int, ...] = 1, padding: int | Sequence[int] = 0,
                 ceil_mode: bool = False, return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The maximum of each window over the last len(kernel_size) dims (an int kernel_size means 2 dims);
    stride defaults to the kernel size. Works for 1-d and 3-d kernels too. With return_indices, also where each
    maximum is: its int32 index into the flattened pooled dims of the input (the first one on ties), as PyTorch's,
    ready for max_unpool2d.

    >>> Tensor([[[[1, 2, 3, 4], [5, 6, 7, 8]]]]).max_pool2d((2, 2)).tolist()
    [[[[6, 8]]]]
    >>> Tensor([[[[1, 9, 3, 4], [5, 6, 7, 8]]]]).max_pool2d((2, 2), return_indices=True)[1].tolist()
    [[[[1, 7]]]]
    """
    k_ = make_tuple(kernel_size, 2)
    s_ = k_ if stride is None else stride
    pads = self._pool_pads(padding, len(k_), "max_pool2d")
    if ceil_mode: pads = self._ceil_pads(pads, k_, s_, dilation)
    x = self.pad(pads, value=dtypes.min(self.dtype)) if any(pads) else self
    nk = len(k_)
    if return_indices:
      if self.ndim < nk:
        raise ValueError(f"max_pool2d: a {nk}-d kernel {k_} needs at least {nk} dims, got shape {self.shape}")
      axes = tuple(range(-nk, 0))
      win = x._pool(k_, s_, dilation)                                     # (..., *o, *k)
      vals = win.max(axes)
      # each input position's flat index, counted down so that the max over a window's hits is the first hit;
      # padding gets 0, below every real position
      spatial = self.shape[-nk:]
      rev = (prod(spatial) - type(self).arange(prod(spatial), device=self.device, dtype=dtypes.int32)).reshape(spatial)
      rev = rev.pad(pads)._pool(k_, s_, dilation)                          # (*o, *k)
      is_max = win.eq(win.max(axes, keepdim=True).detach())
      if dtypes.is_float(self.dtype): is_max = is_max | win.isnan()     # NaN is the maximum, as in PyTorch
      idx = prod(spatial) - is_max.where(rev, 0).max(axes)
      return vals, idx
    if make_tuple(s_, nk) == k_ and make_tuple(dilation, nk) == (1,) * nk and x.ndim >= nk and \
       all(i % k == 0 for i, k in zip(x.shape[-nk:], k_)):
      # windows tile the input exactly: split each dim into (o, k) and reduce the k's in place. With no permute, the
      # gradient's intermediates keep the input's layout, so the kernels that read them index rows linearly
      lead = x.shape[:-nk]
      # a big input's gradient gets its own buffer: read through the split dims it would be a two-view index
      # (division and modulo per element) in every kernel after it, which then can't use vector lanes
      if prod(x.shape) >= 1 << 16: x = x.contiguous_backward()
      x = x.reshape(*lead, *flatten((i // k, k) for i, k in zip(x.shape[-nk:], k_)))
      return x.max(tuple(len(lead) + 2 * j + 1 for j in range(nk)))
    # the gradient of a window's max is split evenly among tied maxima (PyTorch gives it all to the first; a
    # first-max rule measured ~20% slower on the MNIST step, see docs/numerics.md)
    return x._pool(k_, s_, dilation).max(tuple(range(-len(k_), 0)))

  def max_unpool2d(self: Tensor, indices: Tensor, kernel_size: int | tuple[int, ...] = (2, 2),
                   stride: int | tuple[int, ...] | None = None, dilation: int | tuple[int, ...] = 1,
                   padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Tensor:
    """The partial inverse of max_pool2d: each value is put at its index (from max_pool2d(return_indices=True)) in
    the flattened pooled dims of a zero tensor of the input's size; the same pooling arguments say what that size
    was (or `output_size`, for the sizes that strides round away). On repeated indices the last value wins; an
    index past the output writes nothing (PyTorch raises, which would need the indices read back to the host).

    >>> v, i = Tensor([[[[1, 9, 3, 4], [5, 6, 7, 8]]]]).max_pool2d((2, 2), return_indices=True)
    >>> v.max_unpool2d(i, (2, 2)).tolist()
    [[[[0, 9, 0, 0], [0, 0, 0, 8]]]]
    """
    k_ = make_tuple(kernel_size, 2)
    nk = len(k_)
    if self.ndim < nk + 1 or indices.shape != self.shape:
      raise ValueError(f"max_unpool2d: input and indices need the same shape with at least {nk + 1} dims for a "
                       f"{nk}-d kernel, got {self.shape} and {indices.shape}")
    if not dtypes.is_int(indices.dtype): raise TypeError(f"max_unpool2d: indices must be integers, got {indices.dtype}")
    lead, i_ = self.shape[:-nk], self.shape[-nk:]
    if output_size is None:
      s_, d_ = make_tuple(k_ if stride is None else stride, nk), make_tuple(dilation, nk)
      pads = self._pool_pads(padding, nk, "max_unpool2d")
      # the input size a pooling with these arguments maps to i_ (the largest is ambiguous with strides > 1)
      before_after = [pads[2 * (nk - 1 - j)] + pads[2 * (nk - 1 - j) + 1] for j in range(nk)]
      out = tuple((i - 1) * s - p + d * (k - 1) + 1 for i, s, p, d, k in zip(i_, s_, before_after, d_, k_))
    else: out = tuple(int(o) for o in tuple(output_size)[-nk:])
    if len(out) != nk or any(o <= 0 for o in out):
      raise ValueError(f"max_unpool2d: output size {out} must be {nk} positive sizes (input {self.shape})")
    vals, idx = self.flatten(-nk), indices.flatten(-nk)
    flat = type(self).zeros(*lead, prod(out), dtype=self.dtype, device=self.device).scatter(-1, idx, vals.detach())
    # a custom backward (gradient.py): every value gets the gradient at its index, as in PyTorch, also where
    # overlapping windows repeat an index (the scatter's own gradient would give it to the last writer only)
    flat = flat._new(UOp(Ops.CUSTOM_GRAD, flat.dtype, (flat.uop, vals.uop, idx.uop), ("max_unpool2d",)))
    return flat.reshape(lead + out)

  def avg_pool2d(self: Tensor, kernel_size: int | tuple[int, ...] = (2, 2), stride: int | tuple[int, ...] | None = None,
                 dilation: int | tuple[int, ...] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Tensor:
    """The mean of each window over the last len(kernel_size) dims; stride defaults to the kernel size.
    count_include_pad=False divides by the number of input (not padding) elements in each window.

    >>> Tensor([[[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]]]).avg_pool2d((2, 2)).tolist()
    [[[[3.5, 5.5]]]]
    """
    k_ = make_tuple(kernel_size, 2)
    s_ = k_ if stride is None else stride
    axes = tuple(range(-len(k_), 0))
    def pool(x: Tensor, pads: Sequence[int]) -> Tensor: return x.pad(pads)._pool(k_, s_, dilation).sum(axes)
    reg = self._pool_pads(padding, len(k_), "avg_pool2d")
    pads = self._ceil_pads(reg, k_, s_, dilation) if ceil_mode else reg
    x = self._f()
    if not count_include_pad: return pool(x, pads) / pool(x.ones_like(), pads)
    if not ceil_mode: return pool(x, reg) / prod(k_)
    # ceil mode counts the padding but not the extra cells past it that only the last, partial window covers
    extra = [p - r for p, r in zip(pads, reg)]
    return pool(x, pads) / pool(x.pad(reg).ones_like(), extra)

  def image_conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                   stride: int | tuple[int, ...] = 1, dilation: int | tuple[int, ...] = 1,
                   padding: int | str | Sequence[int] = 0, dtype: DType | str | None = None) -> Tensor:
    """conv2d(), under tinygrad's name for its image-memory variant (IMAGE=1 on Qualcomm GPUs). attograd has no
    image buffers: the convolution is computed as conv2d() computes it, the same values.

    >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).image_conv2d(Tensor([[[[1.0]]]]) * 2).tolist()
    [[[[2.0, 4.0], [6.0, 8.0]]]]
    """
    return self.conv2d(weight, bias, groups, stride, dilation, padding, dtype)
  def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
             stride: int | tuple[int, ...] = 1, dilation: int | tuple[int, ...] = 1,
             padding: int | str | Sequence[int] = 0, dtype: DType | str | None = None) -> Tensor:
    """Convolution (PyTorch's cross-correlation) of (N, C_in, *spatial) with weight (C_out, C_in/groups, *kernel);
    any number of spatial dims. padding is an int, one int per spatial dim, a flat PyTorch-order list of 2 per dim
    (last dim first, may be asymmetric), 'valid' or 'same'. `dtype`: accumulate (and return) in this dtype.

    >>> x = Tensor([[[1.0, 2.0, 3.0, 4.0]]])
    >>> x.conv2d(Tensor([[[1.0, -1.0]]])).tolist()
    [[[-1.0, -1.0, -1.0]]]
    """
    if dtype is not None:
      dt = to_dtype(dtype)
      return self.cast(dt).conv2d(weight.cast(dt), bias.cast(dt) if bias is not None else None, groups, stride,
                                  dilation, padding)
    if self.ndim < 3 or weight.ndim != self.ndim:
      raise ValueError(f"conv2d: input (N, C, *spatial) and weight (C_out, C_in/groups, *kernel) need the same number "
                       f"of dims (at least 3), got {self.shape} and {weight.shape}")
    cin_, (cout, cin), k_ = self.shape[1], weight.shape[:2], tuple(weight.shape[2:])
    if groups < 1 or cin * groups != cin_ or cout % groups:
      raise ValueError(f"conv2d: input channels {cin_} must be groups * weight.shape[1] = {groups} * {cin} and output "
                       f"channels {cout} divisible by groups; input {self.shape}, weight {weight.shape}")
    pads = _conv_pads(self, padding, k_, stride, dilation)
    # (a big padded input gets its own buffer, which the scheduler decides: schedule/tuning.py)
    x = self.pad(pads) if any(pads) else self
    if _custom_conv_backward(self, k_, stride):
      # a custom backward (gradient.py): the input's gradient is a transposed convolution of the output's gradient, so
      # it runs on the forward's fast path instead of summing shifted slices of a (N, C_in, *k, *o) window gradient;
      # the weight's reads the padded input of the forward again
      out = x.detach()._conv_windows(weight.detach(), groups, stride, dilation)
      spec = ("conv2d", groups, make_tuple(stride, len(k_)), make_tuple(dilation, len(k_)), tuple(pads))
      out = type(self)(UOp(Ops.CUSTOM_GRAD, out.dtype, (out.uop, self.uop, weight.uop, x.uop), spec))
    else: out = x._conv_windows(weight, groups, stride, dilation)
    return out if bias is None else out + bias.reshape(1, -1, *[1] * len(k_))

  def _conv_windows(self: Tensor, weight: Tensor, groups: int, stride: int | tuple[int, ...],
                    dilation: int | tuple[int, ...]) -> Tensor:
    """conv2d of an input that is already padded: its windows times the weight, summed."""
    bs, (cout, cin), k_ = self.shape[0], weight.shape[:2], tuple(weight.shape[2:])
    x = self._pool(k_, stride, dilation)                                  # (N, groups*cin, *o, *k)
    o_ = x.shape[2:2 + len(k_)]
    rcout, nk = cout // groups, len(k_)
    # (N, groups, 1, cin, *k, *o) times weight (1, groups, rcout, cin, *k, 1..), summed over (cin, *k): the output
    # positions stay innermost, so the gradient of the windows is laid out with whole output rows contiguous
    x = x.reshape(bs, groups, cin, *o_, *k_).permute(0, 1, 2, *range(3 + nk, 3 + 2 * nk), *range(3, 3 + nk))
    x = x.reshape(bs, groups, 1, cin, *k_, *o_)
    # (output rows too short for vector lanes get a copy of the weight with the output channel innermost, which the
    # scheduler decides: schedule/tuning.py lane_copy_rule)
    w = weight.reshape(1, groups, rcout, cin, *k_, *[1] * nk)
    out = _acc_product_sum(x, w, tuple(range(3, 4 + nk)))                # (N, groups, rcout, *o)
    return out.reshape(bs, cout, *o_)

  def _conv_weight_grad(self: Tensor, grad: Tensor, weight_shape: tuple[int, ...], groups: int,
                        stride: tuple[int, ...], dilation: tuple[int, ...]) -> Tensor:
    """The gradient of conv2d's weight from the padded input: for each (C_out, C_in, *k), the output's gradient
    times the input windows, summed over the batch and the output positions."""
    (cout, cin), k_, nk = weight_shape[:2], tuple(weight_shape[2:]), len(weight_shape) - 2
    bs, rcout, o_ = grad.shape[0], cout // groups, grad.shape[2:]
    x = self._pool(k_, stride, dilation)                                  # (N, groups*cin, *o, *k)
    x = x.reshape(bs, groups, cin, *o_, *k_).permute(0, 1, 2, *range(3 + nk, 3 + 2 * nk), *range(3, 3 + nk))
    x = x.reshape(bs, groups, 1, cin, *k_, *o_)
    # (short output rows: the scheduler gives the gradient a copy with the output channel innermost, lane_copy_rule)
    g = grad.reshape(bs, groups, rcout, 1, *[1] * nk, *o_)
    dw = _acc_product_sum(x, g, (0, *range(4 + nk, 4 + 2 * nk)))         # (groups, rcout, cin, *k)
    return dw.reshape(weight_shape)

  def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                       stride: int | tuple[int, ...] = 1, dilation: int | tuple[int, ...] = 1,
                       padding: int | Sequence[int] = 0, output_padding: int | tuple[int, ...] = 0) -> Tensor:
    """Transposed convolution of (N, C_in, *spatial) with weight (C_in, C_out/groups, *kernel), any number of
    spatial dims: zeros are inserted between inputs (stride) and the result is convolved with the flipped kernel.

    >>> Tensor([[[1.0, 2.0]]]).conv_transpose2d(Tensor([[[1.0, 10.0]]]), stride=2).tolist()
    [[[1.0, 10.0, 2.0, 20.0]]]
    """
    if self.ndim < 3 or weight.ndim != self.ndim:
      raise ValueError(f"conv_transpose2d: input (N, C, *spatial) and weight (C_in, C_out/groups, *kernel) need the "
                       f"same number of dims (at least 3), got {self.shape} and {weight.shape}")
    k_, nk = tuple(weight.shape[2:]), weight.ndim - 2
    if weight.shape[0] != self.shape[1] or weight.shape[0] % groups:
      raise ValueError(f"conv_transpose2d: weight.shape[0] {weight.shape[0]} must equal the input channels "
                       f"{self.shape[1]} and be divisible by groups {groups}")
    s_, d_, op_ = make_tuple(stride, nk), make_tuple(dilation, nk), make_tuple(output_padding, nk)
    # (C_in, C_out/g, *k) -> (g, C_in/g, C_out/g, *k) -> (g, C_out/g, C_in/g, *k), flipped -> (C_out, C_in/g, *k)
    w = weight.unflatten(0, (groups, -1)).transpose(1, 2).flip(*range(3, 3 + nk)).flatten(0, 1)
    x = self
    if any(s > 1 for s in s_):
      # (.., n) -> (.., n, 1) -> pad (.., n, s) -> (.., n*s) -> cut the trailing s-1 zeros: s-1 zeros between inputs
      sp = x.shape[2:]
      x = x.reshape(*x.shape[:2], *flatten((n, 1) for n in sp))
      x = x.pad_(((0, 0), (0, 0)) + tuple(flatten(((0, 0), (0, s - 1)) for s in s_)))
      x = x.reshape(*x.shape[:2], *[n * s for n, s in zip(sp, s_)])
      x = x.shrink((None, None) + tuple((0, n * s - (s - 1)) for n, s in zip(sp, s_)))
    pads = self._pool_pads(padding, nk, "conv_transpose2d")  # flat, last dim first
    conv_pads: list[int] = []
    for j in range(nk):  # also last dim first
      k, d, o = k_[nk - 1 - j], d_[nk - 1 - j], op_[nk - 1 - j]
      conv_pads += [(k - 1) * d - pads[2 * j], (k - 1) * d - pads[2 * j + 1] + o]
    return x.conv2d(w, bias, groups=groups, dilation=d_, padding=conv_pads)

  # ***** resampling *****

  def interpolate(self: Tensor, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:
    """Resize the last len(size) dims to `size`. mode 'linear' interpolates along every resized dim ('bilinear' and
    'trilinear' are the same thing); 'nearest' and 'nearest-exact' pick one input per output, as in PyTorch. A uint8
    tensor (an image) interpolates linearly in PyTorch's fixed point, so it gets PyTorch's bytes.

    >>> Tensor([[[1.0, 3.0]]]).interpolate((4,), align_corners=True).tolist()
    [[[1.0, 1.6666667461395264, 2.3333334922790527, 3.0]]]
    """
    if mode not in INTERPOLATE_MODES:
      raise UnknownModeError(f"interpolate: mode must be one of {INTERPOLATE_MODES}, got {mode!r}")
    if align_corners and not mode.endswith("linear"):
      raise ValueError(f"interpolate: align_corners only applies to the linear modes, got mode={mode!r}")
    if not isinstance(size, (tuple, list)) or not 0 < len(size) <= self.ndim or \
       any(not isinstance(s, int) or s < 1 for s in size):
      raise ValueError(f"interpolate: size must be a tuple of 1 to {self.ndim} positive ints, got {size!r}")
    if mode.endswith("linear") and self.dtype is dtypes.uint8:  # images: PyTorch's bytes
      return _interpolate_linear_uint8(self, size, align_corners)
    x, shape = self._f(), list(self.shape)
    for d in range(self.ndim - len(size), self.ndim):
      n_in, n_out = self.shape[d], size[d - self.ndim + len(size)]
      shape[d] = n_out
      # source positions in float64 for float64 inputs (float32 positions gave float64 results only 7 digits right)
      ar = type(self).arange(n_out, device=self.device,
                             dtype=dtypes.float64 if x.dtype is dtypes.float64 else dtypes.float32)
      def along(t: Tensor) -> Tensor:
        return t.reshape(tuple(n_out if j == d else 1 for j in range(self.ndim))).expand(tuple(shape))
      if mode.endswith("linear"):
        if align_corners: src = ar * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
        else: src = ((ar + 0.5) * (n_in / n_out) - 0.5).maximum(0)
        src = src.minimum(n_in - 1)
        lo = src.floor()
        # interpolate between the two neighbours; where src is integral both are the same element
        below, above = x.gather(d, along(lo.cast(dtypes.int32))), x.gather(d, along(src.ceil().cast(dtypes.int32)))
        x = below.lerp(above, along(src - lo))
      else:
        src = ((ar + 0.5) if mode == "nearest-exact" else ar) * (n_in / n_out)
        x = x.gather(d, along(src.floor().minimum(n_in - 1).cast(dtypes.int32)))
    # integers round half up rather than truncate
    if mode.endswith("linear") and not dtypes.is_float(self.dtype): x = (x + 0.5).floor()
    return x.cast(self.dtype)

  # ***** attention *****

  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                   dropout_p: float = 0.0, is_causal: bool = False, enable_gqa: bool = False) -> Tensor:
    """softmax(q @ k^T / sqrt(d) + mask) @ v with this tensor as the query (..., L, d). A bool attn_mask keeps the
    positions where it is true; a float one is added to the scores. is_causal masks keys after each query.
    enable_gqa: key and value may have fewer heads (dim -3) than the query, each shared by a group of query heads.

    >>> q = Tensor([[1.0, 0.0]])
    >>> q.scaled_dot_product_attention(q, Tensor([[2.0, 3.0]])).tolist()
    [[2.0, 3.0]]
    """
    if enable_gqa and key.ndim >= 3 and key.shape[-3] != self.shape[-3]:
      hq, hkv = self.shape[-3], key.shape[-3]
      if hq % hkv or value.shape[-3] != hkv:
        raise ValueError(f"scaled_dot_product_attention: enable_gqa needs the query's heads ({hq}) to be a multiple of "
                         f"the key's and value's ({hkv}, {value.shape[-3]})")
      key, value = key.repeat_interleave(hq // hkv, -3), value.repeat_interleave(hq // hkv, -3)
    # int and bool scores are counted in the default float (a matmul of theirs keeps their dtype: it would wrap, or OR)
    sd = least_upper_dtype(self.dtype, key.dtype)
    qk = self.dot(key.transpose(-2, -1), dtype=None if dtypes.is_float(sd) else least_upper_float(sd))
    qk = qk * (1 / math.sqrt(self.shape[-1]))  # (..., L, S)
    if is_causal:
      if attn_mask is not None:
        raise ArgumentError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
      attn_mask = type(self).full(qk.shape[-2:], True, dtype=dtypes.bool, device=self.device).tril()
    if attn_mask is not None:
      # (in the scores' dtype: a default-float mask would promote half scores, and the result, to float32)
      if attn_mask.dtype is dtypes.bool: attn_mask = attn_mask.where(0.0, -math.inf).cast(qk.dtype)
      qk = qk + attn_mask
    return qk.softmax(-1).dropout(dropout_p).dot(value)

  # ***** losses *****

  def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Tensor:
    """Cross-entropy of logits (..., C) against class indices Y (...); entries equal to ignore_index add nothing
    and don't count in the mean.

    >>> round(Tensor([[0.0, 0.0]]).sparse_categorical_crossentropy(Tensor([1])).item(), 4)
    0.6931
    """
    _check_reduction(reduction, "sparse_categorical_crossentropy")
    if not 0.0 <= label_smoothing <= 1.0:
      raise ValueError(f"sparse_categorical_crossentropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    log_probs = self.log_softmax(-1)
    mask = Y.ne(ignore_index)
    hot = _one_hot_along(Y.unsqueeze(-1), self.shape[-1], -1) & mask.unsqueeze(-1)
    picked = hot.where(log_probs, 0.0).sum(-1)
    smooth = mask.where(log_probs.mean(-1), 0.0)
    loss = -((1 - label_smoothing) * picked + label_smoothing * smooth)
    if reduction == "none": return loss
    return loss.sum() / mask.sum() if reduction == "mean" else loss.sum()

  def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits (N, C, ...) (or (C,)) against class indices (N, ...) or class probabilities of the
    logits' shape, as PyTorch's F.cross_entropy.

    >>> round(Tensor([[0.0, 0.0]]).cross_entropy(Tensor([0])).item(), 4)
    0.6931
    """
    _check_reduction(reduction, "cross_entropy")
    if not 0.0 <= label_smoothing <= 1.0:
      raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    cdim = 0 if self.ndim == 1 else 1
    n = self.shape[cdim]
    if Y.shape != self.shape:
      if Y.shape != self.shape[:cdim] + self.shape[cdim + 1:]:
        want = self.shape[:cdim] + self.shape[cdim + 1:]
        raise ArgumentError(f"cross_entropy: targets must be class indices of shape {want} or probabilities of shape "
                         f"{self.shape}, got {Y.shape}")
      Y = _one_hot_along(Y.unsqueeze(cdim), n, cdim).cast(self._f().dtype)
    Y = (1 - label_smoothing) * Y + label_smoothing / n
    return _reduce(-(self.log_softmax(cdim) * Y).sum(cdim), reduction)

  def nll_loss(self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,
               reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of log-probabilities (N, C, ...) at class indices Y (N, ...), optionally weighted
    per class; the mean divides by the total weight of the counted targets, as in PyTorch.

    >>> Tensor([[-1.0, -2.0]]).nll_loss(Tensor([1])).item()
    2.0
    """
    _check_reduction(reduction, "nll_loss")
    cdim = 0 if self.ndim == 1 else 1
    hot = _one_hot_along(Y.unsqueeze(-1), self.shape[cdim], -1)  # (N, ..., C)
    w = hot.where(weight, 0.0).sum(-1) if weight is not None else Y.ones_like(dtype=self._f().dtype)
    if ignore_index is not None: w = Y.ne(ignore_index).where(w, 0.0)
    picked = self.gather(cdim, Y.unsqueeze(cdim)).squeeze(cdim)
    nll = -picked * w
    return nll.sum() / w.sum() if reduction == "mean" else _reduce(nll, reduction)

  def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
    """Binary cross-entropy of probabilities against targets in [0, 1]; logs are clamped at -100 like PyTorch.

    >>> round(Tensor([0.5]).binary_crossentropy(Tensor([1.0])).item(), 4)
    0.6931
    """
    _check_reduction(reduction, "binary_crossentropy")
    return _reduce(-(Y * self.log().maximum(-100) + (1 - Y) * (1 - self).log().maximum(-100)), reduction)

  def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: str = "mean",
                                 pos_weight: Tensor | None = None) -> Tensor:
    """Binary cross-entropy of logits (sigmoid applied inside, stably); pos_weight scales the positive term.

    >>> round(Tensor([0.0]).binary_crossentropy_logits(Tensor([1.0])).item(), 4)
    0.6931
    """
    _check_reduction(reduction, "binary_crossentropy_logits")
    pos = Y * self.logsigmoid()
    if pos_weight is not None: pos = pos * pos_weight
    return _reduce(-(pos + (1 - Y) * (-self).logsigmoid()), reduction)

  def mse_loss(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
    """Squared error (x - Y)^2, reduced.

    >>> Tensor([1.0, 3.0]).mse_loss(Tensor([0.0, 0.0])).item()
    5.0
    """
    _check_reduction(reduction, "mse_loss")
    return _reduce((self - Y).square(), reduction)

  def l1_loss(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
    """Absolute error |x - Y|, reduced.

    >>> Tensor([1.0, -3.0]).l1_loss(Tensor([0.0, 0.0])).item()
    2.0
    """
    _check_reduction(reduction, "l1_loss")
    return _reduce((self - Y).abs(), reduction)

  def smooth_l1_loss(self: Tensor, Y: Tensor, beta: float = 1.0, reduction: str = "mean") -> Tensor:
    """Huber-like error: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = x - Y), reduced.

    >>> Tensor([0.5, 3.0]).smooth_l1_loss(Tensor([0.0, 0.0]), reduction="none").tolist()
    [0.125, 2.5]
    """
    _check_reduction(reduction, "smooth_l1_loss")
    if beta < 0: raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    d = (self - Y).abs()
    if beta == 0: return _reduce(d, reduction)
    return _reduce((d < beta).where(0.5 * d * d / beta, d - 0.5 * beta), reduction)

  # ***** sorting *****

  def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along `dim`; ties keep their order (stable) and NaN sorts as the largest value.
    It compares every pair of elements, so it costs O(n^2) per row.

    >>> v, i = Tensor([3, 1, 2, 1]).sort()
    >>> v.tolist(), i.tolist()
    ([1, 1, 2, 3], [1, 3, 2, 0])
    """
    if self.ndim == 0: return self, self.zeros_like(dtype=dtypes.int32)
    d = self._resolve_axis(dim, "sort")
    x = self.transpose(d, -1)
    n = x.shape[-1]
    ar = type(self).arange(n, device=self.device, dtype=dtypes.int32)
    # rank of i = how many j sort before it: strictly smaller (larger) values, or equal ones earlier in the row
    a, b = x.unsqueeze(-1), x.unsqueeze(-2)                              # (..., n, 1) element i, (..., 1, n) element j
    first = (b > a) if descending else (b < a)
    same = a.eq(b)
    if dtypes.is_float(self.dtype):
      an, bn = a.isnan(), b.isnan()
      first = first | ((bn & an.logical_not()) if descending else (an & bn.logical_not()))
      same = same | (an & bn)
    earlier = ar.reshape(1, n) < ar.reshape(n, 1)                        # (n, n): j < i
    rank = (first | (same & earlier)).sum(-1, dtype=dtypes.int32)        # (..., n)
    # rank is a permutation: position r holds the i whose rank is r
    hot = rank.unsqueeze(-1).eq(ar)                                      # (..., i, r)
    idx = hot.where(ar.reshape(n, 1), 0).sum(-2, dtype=dtypes.int32)
    vals = hot.where(x.unsqueeze(-1), x._const_like(0)).sum(-2, dtype=x.dtype) if x.dtype is not dtypes.bool \
      else hot.where(x.unsqueeze(-1), False).any(-2)
    return vals.transpose(d, -1), idx.transpose(d, -1)

  def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """The indices that sort the tensor along `dim` (stable).

    >>> Tensor([3.0, 1.0, 2.0]).argsort().tolist()
    [1, 2, 0]
    """
    return self.sort(dim, descending)[1]

  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k largest (or smallest) elements along `dim`, in sorted order.

    >>> v, i = Tensor([1.0, 5.0, 3.0]).topk(2)
    >>> v.tolist(), i.tolist()
    ([5.0, 3.0], [1, 2])
    """
    d = self._resolve_axis(dim, "topk") if self.ndim else 0
    n = self.shape[d] if self.ndim else 1
    if not 0 <= k <= n: raise ValueError(f"topk: k must be in [0, {n}] for dim {d} of {self.shape}, got {k}")
    vals, idx = self.sort(d, descending=largest)
    if self.ndim == 0: return vals, idx
    keep = tuple((0, k) if j == d else None for j in range(self.ndim))
    return vals.shrink(keep), idx.shrink(keep)

# ***** helpers *****

def _linear_taps(n_in: int, n_out: int, align_corners: bool) -> tuple[list[int], list[int], list[float], list[float]]:
  """Each output's two neighbours along a dim and their weights (normalized to sum to 1; one neighbour at the
  edges, where the source position is clamped)."""
  los, his, wlo, whi = [], [], [], []
  for i in range(n_out):
    if align_corners: src = i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else 0.0
    else: src = max((i + 0.5) * (n_in / n_out) - 0.5, 0.0)
    src = min(src, float(n_in - 1))
    lo = math.floor(src)
    hi, f = min(lo + 1, n_in - 1), src - lo
    a, b = (1.0 - f, f) if hi != lo else (1.0, 0.0)
    los.append(lo)
    his.append(hi)
    wlo.append(a / (a + b))
    whi.append(b / (a + b))
  return los, his, wlo, whi

def _interpolate_linear_uint8(x: Tensor, size: Sequence[int], align_corners: bool) -> Tensor:
  """Linear interpolation of a uint8 tensor as PyTorch's uint8 kernel computes it, so images resize to the same
  bytes: one dim at a time from the last, each pass in fixed point with the weights rounded to `p` bits, p the most
  that keeps the largest weight of that dim below 2**15 (an int16), and the result rounded and clamped to uint8."""
  for d in reversed(range(x.ndim - len(size), x.ndim)):
    n_in, n_out = x.shape[d], size[d - x.ndim + len(size)]
    if n_in == n_out and not align_corners or n_in == n_out == 1: continue
    los, his, wlo, whi = _linear_taps(n_in, n_out, align_corners)
    wmax = max(wlo + whi)
    p = 0
    while p < 22 and int(0.5 + wmax * (1 << (p + 1))) < 1 << 15: p += 1
    shape = tuple(n_out if j == d else s for j, s in enumerate(x.shape))
    def along(v: list, dt: DType) -> Tensor:
      t = type(x)(v, dtype=dt, device=x.device)
      return t.reshape(tuple(n_out if j == d else 1 for j in range(x.ndim))).expand(shape)
    wa = along([int(w * (1 << p) + 0.5) for w in wlo], dtypes.int32)
    wb = along([int(w * (1 << p) + 0.5) for w in whi], dtypes.int32)
    acc = x.gather(d, along(los, dtypes.int32)).cast(dtypes.int32) * wa + \
      x.gather(d, along(his, dtypes.int32)).cast(dtypes.int32) * wb
    x = ((acc + (1 << (p - 1))) >> p).clip(0, 255).cast(dtypes.uint8)
  return x

def _one_hot_along(index: Tensor, n: int, dim: int) -> Tensor:
  """Bools: true where the coordinate along `dim` (a size-1 dim of `index`) equals the index."""
  d = index._resolve_axis(dim, "one_hot")
  ar = type(index).arange(n, device=index.device, dtype=dtypes.int32)
  return index.eq(ar.reshape(tuple(n if j == d else 1 for j in range(index.ndim))))

def _acc_product_sum(x: Tensor, w: Tensor, axes: tuple[int, ...]) -> Tensor:
  """(x * w).sum(axes) the way matmul does it: the operands cast to the accumulator first (ints don't wrap at their
  own width; half/bfloat16/fp8 products are exact in float32), floats rounded back to their dtype once at the end.
  For float32 every cast is a no-op, so its kernels are unchanged."""
  d = least_upper_dtype(x.dtype, w.dtype)
  acc = sum_acc_dtype(d)
  out = (x.cast(acc) * w.cast(acc)).sum(axes)
  return out.cast(d) if dtypes.is_float(d) else out

def _check_reduction(reduction: str, op: str) -> None:
  if reduction not in REDUCTIONS: raise ValueError(f"{op}: reduction must be one of {REDUCTIONS}, got {reduction!r}")

def _reduce(x: Tensor, reduction: str) -> Tensor:
  return x if reduction == "none" else x.mean() if reduction == "mean" else x.sum()

def _custom_conv_backward(x: Tensor, k_: tuple[int, ...], stride: int | tuple[int, ...]) -> bool:
  """Whether conv2d gets its custom backward (the input's gradient as a convolution): stride 1 (a strided one would
  convolve mostly inserted zeros) and a kernel bigger than 1 (a 1x1 window gradient is already a plain matmul)."""
  # (not over a symbolic size: the transposed convolution needs concrete ones; the windows' own gradient serves)
  return all(s == 1 for s in make_tuple(stride, len(k_))) and prod(k_) > 1 and x.requires_grad is not False \
    and all(d.__class__ is int for d in x.shape)

def _conv_pads(x: Tensor, padding: int | str | Sequence[int], k_: tuple[int, ...], stride: int | tuple[int, ...],
               dilation: int | tuple[int, ...]) -> list[int]:
  """conv2d's padding as a flat PyTorch-order list; 'same' puts the odd element of the padding after, as PyTorch."""
  nk = len(k_)
  if padding == "valid": return [0] * (2 * nk)
  if padding == "same":
    if any(s != 1 for s in make_tuple(stride, nk)):
      raise ValueError(f"conv2d: padding='same' needs stride 1, got stride={stride}")
    totals = [d * (k - 1) for d, k in zip(make_tuple(dilation, nk), k_)]
    return [p for t in reversed(totals) for p in (t // 2, t - t // 2)]
  if isinstance(padding, str): raise ValueError(f"conv2d: padding must be ints, 'same' or 'valid', got {padding!r}")
  return x._pool_pads(padding, nk, "conv2d")
