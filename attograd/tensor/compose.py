"""Composite ops built from primitives: scans (cumsum...), einsum, gather/scatter, masks, softmax, item assignment."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any
from attograd.dtype import ConstType, DType, dtypes, least_upper_dtype, sum_acc_dtype, to_dtype
from attograd.helpers import DTypeOpError, ArgumentError, prod
from attograd.uop.ops import Ops, UOp, broadcast_shape
from attograd.schedule.realized import lookup_realized
import attograd.tensor.disk as tensor_disk
from attograd.tensor.autograd import old_values_for_grad, write_carries_grad, write_keeps_grad_path
from attograd.tensor.buffer_views import _contiguous_view_of_buffer, _writable_view, view_root
from attograd.tensor.indexing import _basic_indices, _expand_bool_indices, _normalize
from attograd.tensor.live import live_tensors
if TYPE_CHECKING: from attograd.tensor.core import Tensor

# a scan over n elements reduces an (n, n) window: O(n^2). Past 2 blocks, scan blocks of this size and then the
# block totals, so the work is ~O(n * _SCAN_BLOCK)
_SCAN_BLOCK = 256

class ComposeMixin:
  # ***** scans *****

  def cumsum(self: Tensor, axis: int = 0) -> Tensor:
    """Running sum along `axis`; bools and small ints accumulate in a wider int, like `sum`.

    >>> Tensor([1, 2, 3, 4]).cumsum().tolist()
    [1, 3, 6, 10]
    """
    return self._scan(axis, Ops.ADD, "cumsum")
  def cumprod(self: Tensor, axis: int) -> Tensor:
    """Running product along `axis`.

    >>> Tensor([1, 2, 3, 4]).cumprod(0).tolist()
    [1, 2, 6, 24]
    """
    return self._scan(axis, Ops.MUL, "cumprod")
  def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """Running maximum along `axis` and where it was taken, as (values, int32 indices) like PyTorch: on ties the
    index is the latest position holding the maximum; a NaN is the maximum from where it appears on.

    >>> v, i = Tensor([1, 3, 2, 3, 4]).cummax(0)
    >>> v.tolist(), i.tolist()
    ([1, 3, 3, 3, 4], [0, 1, 1, 3, 4])
    """
    return self._cum_extreme(axis, "cummax")
  def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """Running minimum along `axis` and where it was taken, as (values, int32 indices) like PyTorch.

    >>> v, i = Tensor([3, 1, 2, 1, 0]).cummin(0)
    >>> v.tolist(), i.tolist()
    ([3, 1, 1, 1, 0], [0, 1, 1, 3, 4])
    """
    # an order-reversing map turns minima into maxima; it keeps equality, so the indices carry over as they are
    v, i = _reverse_order(self)._cum_extreme(axis, "cummin")
    return _reverse_order(v), i
  def _cum_extreme(self: Tensor, axis: int, name: str) -> tuple[Tensor, Tensor]:
    ax = self._resolve_axis(axis, name)
    if self.ndim == 0: return self, self._const_like(0, dtypes.int32)
    x = self.cast(dtypes.uint8) if self.dtype is dtypes.bool else self
    n = x.shape[ax]
    if n == 0: return self, self._const_like(0, dtypes.int32)._broadcast_to(self.shape)
    vals = x.detach()._scan(ax, Ops.MAX, name).transpose(ax, -1)         # (..., n)
    xt = x.detach().transpose(ax, -1)
    # hit[..., i, j]: x[j] (j <= i) holds the running max at i; NaNs match NaNs
    hit = xt.unsqueeze(-2).eq(vals.unsqueeze(-1))
    if dtypes.is_float(x.dtype): hit = hit | (xt.isnan().unsqueeze(-2) & vals.isnan().unsqueeze(-1))
    ar = _arange(n, x)
    hit = hit & (ar.reshape(n, 1) >= ar.reshape(1, n))
    idx = hit.where(ar.reshape(1, n), -1).max(-1).transpose(ax, -1)      # the latest matching j
    # the values are read at the indices, so the gradient goes to that one element (as PyTorch's) and not
    # split among equal values as a max reduce's would be
    return self.gather(ax, idx), idx
  def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:
    """log(cumsum(exp(x))) along `axis`, computed against the running maximum so large inputs don't overflow.

    >>> [round(v, 4) for v in Tensor([0.0, 0.0, 1000.0]).logcumsumexp(0).tolist()]
    [0.0, 0.6931, 1000.0]
    """
    ax = self._resolve_axis(axis, "logcumsumexp")
    x = self._f()
    out_dtype = x.dtype
    x = x.cast(sum_acc_dtype(x.dtype))  # half and bfloat16: computed in float32, rounded once
    if x.ndim == 0 or 0 in x.shape: return x.cast(out_dtype)
    n = x.shape[ax]
    xt = x.transpose(ax, -1)
    m = xt.detach()._scan(xt.ndim - 1, Ops.MAX, "logcumsumexp")
    m = m.isinf().where(0.0, m)  # all -inf so far (or +inf): shift by 0 instead of making inf - inf
    ar = _arange(n, x)
    lower = ar.reshape(n, 1) >= ar.reshape(1, n)                         # (n, n): j <= i
    # masked before exp, not after: exp of a masked-out x_j - m_i can be inf, and its gradient (0 * inf) NaN
    e = lower.where(xt.unsqueeze(-2) - m.unsqueeze(-1), -math.inf).exp()  # (..., n, n)
    return (e.sum(-1).log() + m).transpose(ax, -1).cast(out_dtype)

  def _scan(self: Tensor, axis: int, op: Ops, name: str) -> Tensor:
    ax = self._resolve_axis(axis, name)
    self = self._strong()  # a scan's result is concrete, as a reduce's (tinygrad)
    x = self if op is Ops.MAX else self.cast(sum_acc_dtype(self.dtype))
    # half/bfloat16/fp8 run in float32 and round once; ints stay in their (wider) accumulator, like sum
    out_dtype = self.dtype if dtypes.is_float(self.dtype) else x.dtype
    if self.ndim == 0 or 0 in self.shape or self.shape[ax] == 1: return x.cast(out_dtype)
    # scan the last axis: move `axis` there and back (a swap is its own inverse)
    return _scan_last(x.transpose(ax, -1), op).transpose(ax, -1).cast(out_dtype)

  # ***** einsum *****

  @staticmethod
  def einsum(formula: str, *operands: Any, dtype: DType | str | None = None) -> Tensor:
    """Einstein summation: letters name axes, letters missing from the output are summed over.

    Supports an explicit (`->`) or implicit output, repeated letters in one operand (diagonals, traces), and `...`
    for broadcast batch dims. Operands may also be given as one list. `dtype`: compute (and return) in this dtype.

    >>> a, b = Tensor([[1, 2], [3, 4]]), Tensor([[5, 6], [7, 8]])
    >>> Tensor.einsum("ij,jk->ik", a, b).tolist()
    [[19, 22], [43, 50]]
    >>> Tensor.einsum("ii->", a).item()
    5
    """
    ts = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    if dtype is not None: ts = [t.cast(to_dtype(dtype)) for t in ts]
    ins, out = _parse_einsum(formula, ts)
    # letter -> size; size-1 dims broadcast against the others, like '...' dims in NumPy
    sizes: dict[str, int] = {}
    for t, letters in zip(ts, ins):
      for c, s in zip(letters, t.shape):
        if sizes.get(c, 1) != 1 and s != 1 and sizes[c] != s:
          raise ArgumentError(f"einsum: index {c!r} has size {sizes[c]} and {s} in {formula!r}")
        if s != 1 or c not in sizes: sizes[c] = s
    # per operand: take diagonals of repeated letters, then sum letters used nowhere else right away
    terms = [_einsum_unique(t, letters) for t, letters in zip(ts, ins)]
    for k, (t, letters) in enumerate(terms):
      elsewhere = set(out).union(*(set(ls) for j, (_, ls) in enumerate(terms) if j != k))
      terms[k] = _einsum_sum(t, letters, [c for c in letters if c not in elsewhere])
    # contract left to right, summing each letter once no later operand and not the output needs it
    cur, cur_letters = terms[0]
    for k in range(1, len(terms)):
      t, letters = terms[k]
      union = cur_letters + [c for c in letters if c not in cur_letters]
      a = cur.reshape(cur.shape + (1,) * (len(union) - len(cur_letters)))
      b = _einsum_align(t, letters, union)
      later = set(out).union(*(set(ls) for _, ls in terms[k + 1:]))
      cur, cur_letters = _einsum_sum(a * b, union, [c for c in union if c not in later])
    cur = cur._broadcast_to(tuple(sizes[c] for c in cur_letters))
    return cur.permute([cur_letters.index(c) for c in out])

  # ***** gather and scatter *****

  def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
    """Pick values along `dim` by `index`, like torch.gather: for dim=0, `out[i][j] = self[index[i][j]][j]`.

    `index` has the same number of dims as this tensor and may be smaller in the dims other than `dim`.

    >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 0], [1, 0]])).tolist()
    [[1, 1], [4, 3]]
    """
    d = self._resolve_axis(dim, "gather")
    _check_index(self, d, index, "gather")
    if self.ndim == 0: return self.reshape(1).gather(0, index.reshape(1)).reshape(())
    n = self.shape[d]
    # x[..., 1, ..., k] = self[..., k, ...]: the gathered axis moves to a new last axis, matched against index
    x = self.shrink(tuple(None if i == d else (0, s) for i, s in enumerate(index.shape)))
    x = x.unsqueeze(-1).transpose(-1, d)
    hot = _one_hot(index, n)
    picked = hot.where(x, x._const_like(0))
    return picked.any(-1) if self.dtype is dtypes.bool else picked.sum(-1, dtype=self.dtype)

  def scatter(self: Tensor, dim: int, index: Tensor, src: Tensor | ConstType, reduce: str | None = None) -> Tensor:
    """A copy of this tensor with values from `src` written at `index` along `dim`, like torch.scatter:
    for dim=0, `out[index[i][j]][j] = src[i][j]`; the last write wins for repeated indices. `src` is a Tensor (at
    least index's shape) or a scalar. With a scalar `src`, `reduce` 'add' or 'multiply' combines instead of
    overwriting; a Tensor `src` with `reduce` is a TypeError, as in tinygrad (PyTorch deprecates it): use
    scatter_reduce(reduce="sum" or "prod").

    >>> Tensor.zeros(2, 3).scatter(1, Tensor([[2], [0]]), 5.0).tolist()
    [[0.0, 0.0, 5.0], [5.0, 0.0, 0.0]]
    >>> Tensor.ones(3).scatter(0, Tensor([0, 0, 2]), 2.0, reduce="multiply").tolist()
    [4.0, 1.0, 2.0]
    """
    if reduce not in (None, "add", "multiply"):
      raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
    if reduce is not None and isinstance(src, self.__class__):
      raise TypeError(f"scatter: reduce={reduce!r} takes a scalar src; for a Tensor src use scatter_reduce(reduce="
                      f"{'sum' if reduce == 'add' else 'prod'!r})")
    d = self._resolve_axis(dim, "scatter")
    _check_index(self, d, index, "scatter")
    if self.ndim == 0:
      src1 = src.reshape(1) if isinstance(src, self.__class__) else src
      return self.reshape(1).scatter(0, index.reshape(1), src1, reduce).reshape(())
    fill = None if isinstance(src, self.__class__) else src
    if isinstance(src, self.__class__):
      if src.ndim != index.ndim or any(s < i for s, i in zip(src.shape, index.shape)):
        raise ArgumentError(f"scatter: src shape {src.shape} must cover index shape {index.shape}")
      # as PyTorch: a silent cast would truncate a float src written into an int tensor
      if src.dtype != self.dtype:
        raise DTypeOpError(f"scatter: src dtype {src.dtype} differs from the tensor's {self.dtype}")
      src = src.shrink(tuple((0, i) for i in index.shape))
    else: src = self._const_like(src)._broadcast_to(index.shape)  # type: ignore[arg-type]
    if 0 in index.shape: return self
    n = self.shape[d]
    # (..., t, ..., k): index position k along dim writes to position t along dim; k is reduced over
    hot = _one_hot(index, n).transpose(-1, d)
    vals = src.unsqueeze(-1).transpose(-1, d)
    acc = self.dtype if self.dtype is not dtypes.bool else dtypes.int32
    if reduce is None and fill is not None: new = self._const_like(fill, acc)  # type: ignore[arg-type]  # one value
    elif reduce is None:
      # keep only the last k that hits each t
      k = _arange(index.shape[d], self).reshape((1,) * index.ndim + (index.shape[d],)) + 1
      last = hot.where(k, k._const_like(0)).max(-1, keepdim=True)
      new = (hot & k.eq(last)).where(vals.cast(acc), vals._const_like(0, acc)).sum(-1, dtype=acc)
    elif reduce == "add":
      new = hot.where(vals.cast(acc), vals._const_like(0, acc)).sum(-1, dtype=acc)
    else:
      new = hot.where(vals.cast(acc), vals._const_like(1, acc)).prod(-1, dtype=acc)
    hit = hot.any(-1)
    # the region scattered into has index's shape with dim `d` widened to n; pad it out to this tensor's shape
    pad = tuple((0, s - (n if i == d else index.shape[i])) for i, s in enumerate(self.shape))
    hit, new = hit.pad_(pad), new._broadcast_to(hit.shape).pad_(pad)
    if reduce == "add": new = self.cast(acc) + new
    if reduce == "multiply": new = self.cast(acc) * new
    return hit.where(new.cast(self.dtype), self)

  def scatter_reduce(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str,
                     include_self: bool = True) -> Tensor:
    """Combine the values of `src` sent to each position along `dim` by `index` (like torch.scatter_reduce):
    reduce is 'sum', 'prod', 'mean', 'amax' or 'amin'. With include_self the tensor's own value takes part;
    without it, positions that receive values forget theirs. Positions nothing is sent to keep their value.
    An integer 'mean' rounds down, as in PyTorch.

    >>> Tensor([1.0, 1.0, 1.0]).scatter_reduce(0, Tensor([0, 0, 2]), Tensor([2.0, 3.0, 4.0]), "sum").tolist()
    [6.0, 1.0, 5.0]
    >>> Tensor([5, 5]).scatter_reduce(0, Tensor([1, 1]), Tensor([1, 9]), "amax", include_self=False).tolist()
    [5, 9]
    """
    # RuntimeError for a bad reduce and mismatched dtypes, as PyTorch (and tinygrad) raise
    if reduce not in _SCATTER_REDUCE:
      raise RuntimeError(f"scatter_reduce: reduce must be one of {', '.join(_SCATTER_REDUCE)}, got {reduce!r}")
    if not isinstance(src, self.__class__): raise TypeError(f"scatter_reduce: src must be a Tensor, got {type(src)}")
    if src.dtype != self.dtype:
      raise RuntimeError(f"scatter_reduce: src's dtype {src.dtype} must be the tensor's {self.dtype} (cast it first)")
    if self.dtype is dtypes.bool:
      if reduce == "mean": raise TypeError("scatter_reduce: reduce 'mean' of bool tensors has no bool result")
      # as PyTorch: sum and amax are a logical or, prod and amin a logical and, so 0/1 ints reduce to the same bools
      return self.cast(dtypes.uint8).scatter_reduce(dim, index, src.cast(dtypes.uint8), reduce, include_self) \
        .cast(dtypes.bool)
    d = self._resolve_axis(dim, "scatter_reduce")
    _check_index(self, d, index, "scatter_reduce")
    if src.ndim != index.ndim or any(s < i for s, i in zip(src.shape, index.shape)):
      raise ArgumentError(f"scatter_reduce: src shape {src.shape} must cover index shape {index.shape}")
    if self.ndim == 0:
      return self.reshape(1).scatter_reduce(0, index.reshape(1), src.reshape(1), reduce, include_self).reshape(())
    if 0 in index.shape: return self
    n = self.shape[d]
    src = src.shrink(tuple((0, i) for i in index.shape))
    # (..., t, ..., k): index position k along dim sends its value to position t along dim; k is reduced over
    hot = _one_hot(index, n).transpose(-1, d)
    vals = src.unsqueeze(-1).transpose(-1, d)
    hit = hot.any(-1)
    if reduce in ("sum", "mean"): got = hot.where(vals, 0).sum(-1, dtype=self.dtype)
    elif reduce == "prod": got = hot.where(vals, 1).prod(-1, dtype=self.dtype)
    elif reduce == "amax": got = hot.where(vals, dtypes.min(self.dtype)).max(-1)
    else: got = hot.where(vals, dtypes.max(self.dtype)).min(-1)
    # the region written has index's shape with dim `d` widened to n; pad it out to this tensor's shape
    pad = tuple((0, s - (n if i == d else index.shape[i])) for i, s in enumerate(self.shape))
    hit, got = hit.pad_(pad), got.pad_(pad)
    if include_self:
      if reduce in ("sum", "mean"): got = got + self
      elif reduce == "prod": got = got * self
      elif reduce == "amax": got = got.maximum(self)
      else: got = got.minimum(self)
    if reduce == "mean":
      # counted in int32 for ints (an int8 count would wrap past 127 values), in the dtype itself for floats
      count = hot.sum(-1, dtype=dtypes.int32 if dtypes.is_int(self.dtype) else self.dtype).pad_(pad)
      count = (count + (1 if include_self else 0)).maximum(1)  # positions nothing is sent to keep self's value
      got = (got.div(count, rounding_mode="floor") if dtypes.is_int(self.dtype) else got / count).cast(self.dtype)
    return hit.where(got, self)

  # ***** masks *****

  def masked_fill(self: Tensor, mask: Tensor, value: Tensor | ConstType) -> Tensor:
    """`value` where `mask` is true, else this tensor's values; the result keeps this tensor's dtype.

    >>> Tensor([1.0, 2.0, 3.0]).masked_fill(Tensor([True, False, True]), 0.0).tolist()
    [0.0, 2.0, 0.0]
    """
    v = value.cast(self.dtype) if isinstance(value, self.__class__) else self._const_like(value)  # type: ignore[arg-type]
    return mask.cast(dtypes.bool).where(v, self)

  def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: ConstType = 0) -> Tensor:
    """The values where `mask` (broadcast with this tensor) is true, as a 1-D tensor.

    The result's size depends on the data, so the mask is read back to the host; with `size` it is not (jittable):
    the first `size` selected values, then fill_value.

    >>> Tensor([[1, 2], [3, 4]]).masked_select(Tensor([True, False])).tolist()
    [1, 3]
    """
    x, m = self._broadcasted(mask.cast(dtypes.bool), match_dtype=False)
    x, m = x.flatten(), m.flatten()
    if size is not None: return _first_selected(x, m, size, fill_value)
    pos = [i for i, v in enumerate(m.tolist()) if v] if x.numel() else []
    if not pos: return x.shrink(((0, 0),))
    if len(pos) == x.numel(): return x
    return x[self.__class__(pos, device=self.device, dtype=dtypes.int32)]

  def nonzero(self: Tensor, size: int | None = None, fill_value: ConstType = 0) -> Tensor:
    """The indices (n, ndim) of the nonzero elements in row-major order. n is data-dependent (read back to the host)
    unless `size` is given: then the first `size` indices, rows past the count filled with fill_value.

    >>> Tensor([[0, 3], [5, 0]]).nonzero().tolist()
    [[0, 1], [1, 0]]
    """
    m = (self != 0).flatten()
    n = size if size is not None else int(m.sum().item()) if self.numel() else 0
    flat = _first_selected(_arange(self.numel(), self), m, n, -1)  # (n,), -1 past the count
    coords, stride = [], 1
    for s in reversed(self.shape):
      coords.append((flat // stride) % s if s else flat)
      stride *= s
    if not coords: return self.__class__.zeros(n, 0, dtype=dtypes.int32, device=self.device)  # a 0-d tensor: no dims
    out = self.__class__.stack(*reversed(coords), dim=1)
    return (flat.reshape(n, 1) < 0).where(fill_value, out).cast(dtypes.int32)

  # ***** softmax *****

  def softmax(self: Tensor, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`, computed as exp(x - max) so large inputs don't overflow.

    >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).softmax().tolist()]
    [0.09, 0.2447, 0.6652]
    """
    m, e, s = self._softmax(axis, dtype, "softmax")
    return (e / s).cast(self._softmax_dtype(dtype))

  def log_softmax(self: Tensor, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
    """log(softmax(x)) along `axis`, as (x - max) - log(sum(exp(x - max))): finite even where softmax is 0.

    >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).log_softmax().tolist()]
    [-2.4076, -1.4076, -0.4076]
    """
    m, e, s = self._softmax(axis, dtype, "log_softmax")
    return (m - s.log()).cast(self._softmax_dtype(dtype))

  def softmin(self: Tensor, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
    """softmax(-x) along `axis`: most weight on the smallest values, as torch.nn.functional.softmin.

    >>> [round(v, 4) for v in Tensor([1.0, 2.0, 3.0]).softmin().tolist()]
    [0.6652, 0.2447, 0.09]
    """
    return (-self._f()).softmax(axis, dtype)

  def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along `dim`, as torch.nn.functional.normalize: p=0 counts the non-zeros, p=+-inf takes
    the largest or smallest magnitude, any other p is (sum |x|^p)^(1/p).

    >>> [round(v, 4) for v in Tensor([[3.0, 4.0]]).normalize()[0].tolist()]
    [0.6, 0.8]
    """
    x = self._f()
    # the norm of half or bfloat16 values is computed in float32 (their squares overflow: 65504 alone gave 0), then
    # rounded to x's dtype, as PyTorch's norm
    d, a = self._resolve_axis(dim, "normalize"), x.abs().cast(sum_acc_dtype(x.dtype))
    if p == 0: n = x.ne(0).sum(d, keepdim=True).cast(x.dtype)  # a count: no gradient flows through it
    elif p == math.inf: n = a.max(d, keepdim=True)
    elif p == -math.inf: n = a.min(d, keepdim=True)
    else:
      # the norm is 0 for an all-zero slice (p > 0) or one holding a zero (p < 0): there the powers' infinite
      # gradients are masked, so 0 flows back through the norm, as in PyTorch
      if p > 0:
        s = a.pow(p).sum(d, keepdim=True)
        ok = s.ne(0)  # (a NaN's sum is NaN, which must reach the result: `s > 0` took it for zero and divided by eps)
      else:
        ok = a.ne(0).all(d, keepdim=True)
        s = ok.where(a, 1.0).pow(p).sum(d, keepdim=True)
      n = ok.where(ok.where(s, 1.0).pow(1.0 / p), 0.0)
    return x / n.cast(x.dtype).maximum(eps)

  def _softmax_dtype(self: Tensor, dtype: DType | str | None) -> DType:
    return to_dtype(dtype) if dtype is not None else self._f().dtype
  def _softmax(self: Tensor, axis: int, dtype: DType | str | None, name: str) -> tuple[Tensor, Tensor, Tensor]:
    ax = self._resolve_axis(axis, name)
    # half, bfloat16 and fp8: computed in float32, the callers round the result once (as PyTorch does)
    x = self.cast(sum_acc_dtype(self._softmax_dtype(dtype)))
    m = x - x.max(ax, keepdim=True).detach()
    e = m.exp()
    return m, e, e.sum(ax, keepdim=True)

  # ***** item assignment *****

  def __delitem__(self, indices: Any) -> None:
    # without it Python raises a bare AttributeError('__delitem__'); PyTorch and NumPy raise this TypeError
    raise TypeError(f"del x[{indices!r}]: a Tensor has a fixed shape, its items can't be deleted; index the rest")

  def __setitem__(self: Tensor, indices: Any, value: Tensor | ConstType) -> None:
    """`x[indices] = value`: ints, slices (any step), None, `...`, and integer or bool tensors, like NumPy.

    `value` is a scalar (cast to x's dtype) or a tensor of x's dtype that broadcasts to `x[indices].shape`; a tensor
    of another dtype raises, as in tinygrad (PyTorch casts it: write `value.cast(x.dtype)` for that). A realized
    tensor is written in place (other references to it see the change), as lazily as `assign`: the write runs at the
    next realize that needs the buffer, and ints and slices write only their region. A lazy tensor gets the new graph.

    >>> x = Tensor.zeros(2, 3).contiguous()
    >>> x[0, 1:] = 5.0
    >>> x.tolist()
    [[0.0, 5.0, 5.0], [0.0, 0.0, 0.0]]
    """
    cls = type(self)  # the Tensor class (this module is below tensor/core.py)
    if tensor_disk.on_disk(self.device): return tensor_disk.setitem(self, indices, value)  # bytes into the file
    if isinstance(value, cls) and value._weak is not None and least_upper_dtype(self.dtype, value.dtype) is self.dtype:
      value = value.cast(self.dtype)  # a weak value defers to the tensor's dtype where it can (tinygrad)
    if isinstance(value, cls) and value.dtype != self.dtype:
      # a silent cast would truncate floats written into an int tensor; tinygrad refuses every mismatch, and so do we
      raise RuntimeError(f"setitem: the value's dtype {value.dtype} differs from the tensor's {self.dtype}; "
                         f"cast it first: value.cast({self.dtype})")
    # a realized buffer, or a one-to-one view of one (a slice, a permute, a flip): written in place, through the view
    # (not a value that leads to a tensor with requires_grad, when nothing else views the buffer: the new graph keeps
    # that gradient path, as for x += v)
    in_place = (_contiguous_view_of_buffer(self.uop) or _writable_view(self.uop) is not None) and \
      not (isinstance(value, cls) and write_keeps_grad_path(self, value.uop))
    if not in_place: _refuse_aliased_lazy_write(self, value)
    # ints and slices of a buffer: only the region is written, through its view (tinygrad's one kernel over the
    # region's elements, not a select over the whole buffer); like assign, the write runs when a realize needs it
    # (a value carrying a gradient goes the whole way below, where the written tensor remembers it for backward())
    elif _plain_indices(indices) and not (isinstance(value, cls) and write_carries_grad(value.uop, self.uop)) and \
         _writable_view((region := self[indices]).uop) is not None:
      region._assign(value, value_private=False, lazy=True)
      return
    if (placed := _setitem(self, indices, value)) is None: return
    v, hit = placed
    new = v if hit is None else hit.where(v, self)
    if in_place:
      # assign writes this buffer while the kernel reads it: if the value or the index tensors read it at other
      # positions (x[1:] = x[:-1]), compute the result into its own buffer first
      base = self.uop.base
      if base in v.uop.toposort() or (hit is not None and base in hit.uop.toposort()): new = new.contiguous()
      # a value that carries a gradient: the written tensor's new node remembers the graph (Tensor._remember_write)
      before = self.uop
      graph = old_values_for_grad(self, new.uop) if isinstance(value, cls) and write_carries_grad(new.uop, before) \
        else None
      self._assign(new, value_private=new is not value, lazy=graph is None)  # (_remember_write needs it done)
      if graph is not None: self._remember_write(graph, before)
    else: self.uop = new.uop

# ***** helpers *****

def _plain_int(i: Any) -> bool: return isinstance(i, int) and not isinstance(i, bool)

def _plain_index(i: Any) -> bool:
  if isinstance(i, slice): return all(b is None or _plain_int(b) for b in (i.start, i.stop, i.step))
  return i is None or i is Ellipsis or _plain_int(i)

def _plain_indices(indices: Any) -> bool:
  """Indices that only select a region (ints, slices of int bounds, None, ...): no tensors, lists or bools."""
  return all(map(_plain_index, indices if isinstance(indices, tuple) else (indices,)))

def _refuse_aliased_lazy_write(x: Tensor, value: Any) -> None:
  """A setitem on a lazy x (no buffer yet) gives x a new graph; other tensors keep the graph they hold. For a tensor
  computed from x that is PyTorch's answer, but a view of x (x[:1], x.reshape(...), x.detach()) should see the write,
  and equal graphs are one node: a view of x can't be told from a view of an equal, independent computation, which
  must not change. Either answer would be wrong for one of them, so the write is refused while such a view lives."""
  root = view_root(x.uop)
  if root.op in (Ops.BUFFER, Ops.CONST) or lookup_realized(root) is not None: return  # storage or a literal
  n = sum(1 for t in live_tensors() if t is not x and t is not value and view_root(t.uop) is root)
  if n: raise RuntimeError(
    f"setitem: this tensor (shape {x.shape}) is lazy, and {n} other live tensor(s) view the same lazy value (a slice, "
    "reshape or detach of it, or an equal computation: equal graphs are one node). A view should see the write and an "
    "independent tensor must not, and attograd can't tell them apart, so the write is refused. Take the views after "
    "the write, or give the tensor storage first and view that: x = x.contiguous().realize()")

_SCATTER_REDUCE = ("sum", "prod", "mean", "amax", "amin")

def _reverse_order(x: Tensor) -> Tensor:
  """A map that reverses the order of x's values and is its own inverse (for min from max): -x for floats, ~x for
  signed ints (-x would overflow at INT_MIN), MAX - x for unsigned ints, not for bools."""
  if x.dtype is dtypes.bool: return x.logical_not()
  if dtypes.is_unsigned(x.dtype): return dtypes.max(x.dtype) - x
  return ~x if dtypes.is_int(x.dtype) else -x

def _arange(n: int, like: Tensor) -> Tensor:
  """0..n-1 as int32 on `like`'s device."""
  return type(like).arange(n, device=like.device, dtype=dtypes.int32)

def _first_selected(x: Tensor, m: Tensor, size: int, fill_value: ConstType) -> Tensor:
  """The first `size` values of 1-D x where the 1-D bool m is true, then fill_value: output slot j takes the element
  whose running count of trues is j + 1 (a one-hot reduction, so the size is fixed)."""
  n, dt = x.shape[0], x.dtype
  if dt is dtypes.bool: x = x.cast(dtypes.uint8)
  rank = m.cast(dtypes.int32).cumsum(0)                                     # (n,)
  slots = _arange(size, x).reshape(size, 1) + 1                     # (size, 1)
  sel = m.reshape(1, n) & (rank.reshape(1, n) == slots)                    # (size, n)
  picked = sel.where(x.reshape(1, n), x.zeros_like().reshape(1, n)).sum(1, dtype=x.dtype) if n else \
    x.zeros_like().reshape(1, 0).expand(size, 0).sum(1)
  return sel.any(1).where(picked, fill_value).cast(dt)

def _scan_ident(op: Ops, dtype: DType) -> ConstType:
  return 0 if op is Ops.ADD else 1 if op is Ops.MUL else dtypes.min(dtype)

def _pad_last_left(x: Tensor, n: int, value: ConstType) -> Tensor:
  """Pad the last axis on the left with n copies of `value`."""
  arg = ((0, 0),) * (x.ndim - 1) + ((n, 0),)
  if value == 0: return x.pad_(arg)
  valid = type(x).full(x.shape, True, dtype=dtypes.bool, device=x.device).pad_(arg)
  return valid.where(x.pad_(arg), x._const_like(value))

def _combine(op: Ops, a: Tensor, b: Tensor) -> Tensor:
  return a + b if op is Ops.ADD else a * b if op is Ops.MUL else a.maximum(b)

def _reduce_last(op: Ops, x: Tensor) -> Tensor:
  return x.sum(-1) if op is Ops.ADD else x.prod(-1) if op is Ops.MUL else x.max(-1)

def _scan_last(x: Tensor, op: Ops) -> Tensor:
  """Inclusive scan along the last axis (length n >= 1): out[..., i] reduces w[..., i, j] = x[..., j] if j <= i."""
  n = x.shape[-1]
  if n == 1: return x
  if n > 2 * _SCAN_BLOCK: return _scan_last_blocked(x, op)
  # a triangular mask over the expanded row; unlike a sliding-window view of the padded row (tinygrad's _pool),
  # its indexing has no div/mod, which made it 4-8x faster on CPU
  ar = _arange(n, x)
  lower = ar.reshape(n, 1) >= ar.reshape(1, n)
  w = lower.where(x.unsqueeze(-2), x._const_like(_scan_ident(op, x.dtype)))  # (..., n, n)
  return _reduce_last(op, w)

def _scan_last_blocked(x: Tensor, op: Ops) -> Tensor:
  """Scan blocks of _SCAN_BLOCK, then the block totals, and combine each block with the total of those before it."""
  n, lead, bs = x.shape[-1], x.shape[:-1], _SCAN_BLOCK
  nb = -(-n // bs)
  ident = _scan_ident(op, x.dtype)
  inner = _scan_last(_pad_last_left(x, nb * bs - n, ident).reshape(lead + (nb, bs)), op)  # (..., nb, bs)
  totals = inner.shrink(tuple(None for _ in lead) + (None, (bs - 1, bs))).reshape(lead + (nb,))
  # exclusive scan of the totals: everything in the blocks before this one
  before = _pad_last_left(_scan_last(totals, op), 1, ident).shrink(tuple(None for _ in lead) + ((0, nb),))
  out = _combine(op, inner, before.reshape(lead + (nb, 1))).reshape(lead + (nb * bs,))
  return out.shrink(tuple(None for _ in lead) + ((nb * bs - n, nb * bs),))

def _check_index(x: Tensor, d: int, index: Tensor, op: str) -> None:
  if not dtypes.is_int(index.dtype): raise DTypeOpError(f"{op}: index must be an integer tensor, got {index.dtype}")
  if index.ndim != x.ndim:
    raise ArgumentError(f"{op}: index shape {index.shape} needs as many dims as the tensor's {x.shape}")
  if any(i > s for k, (i, s) in enumerate(zip(index.shape, x.shape)) if k != d):
    raise ArgumentError(f"{op}: index shape {index.shape} is larger than the tensor's {x.shape} outside dim {d}")

def _one_hot(index: Tensor, n: int) -> Tensor:
  """(*index.shape, n) bools: true where the last coordinate equals the index."""
  return index.unsqueeze(-1).eq(_arange(n, index).reshape((1,) * index.ndim + (n,)))

# ***** einsum helpers *****

def _parse_einsum(formula: str, ts: list[Tensor]) -> tuple[list[list[str]], list[str]]:
  """Per-operand letter lists and the output letters, with '...' spelled out as fresh letters."""
  f = formula.replace(" ", "")
  lhs, arrow, rhs = f.partition("->")
  parts = lhs.split(",")
  if len(parts) != len(ts): raise ValueError(f"einsum: {formula!r} names {len(parts)} operands, got {len(ts)}")
  for p in parts + [rhs]:
    if not all(c.isalpha() for c in p.replace("...", "")):
      raise ValueError(f"einsum: subscripts must be letters or '...', got {p!r} in {formula!r}")
    if p.count("...") > 1: raise ArgumentError(f"einsum: {p!r} has more than one '...' in {formula!r}")
  # '...' dims get letters outside the ASCII range, right-aligned as in broadcasting
  n_ell = max([t.ndim - len(p.replace("...", "")) for p, t in zip(parts, ts) if "..." in p], default=0)
  ell = [chr(0x100 + i) for i in range(n_ell)]
  ins: list[list[str]] = []
  for p, t in zip(parts, ts):
    if "..." in p:
      k = t.ndim - len(p.replace("...", ""))
      if k < 0: raise ValueError(f"einsum: operand {p!r} has more letters than the dims of shape {t.shape}")
      pre, post = p.split("...")
      letters = list(pre) + ell[n_ell - k:] + list(post)
    else: letters = list(p)
    if len(letters) != t.ndim:
      raise ValueError(f"einsum: operand {p!r} names {len(letters)} dims, but its shape is {t.shape}")
    ins.append(letters)
  if arrow:
    if rhs.count("...") > 0: out = list(rhs.split("...")[0]) + ell + list(rhs.split("...")[1])
    else: out = list(rhs)
    if len(set(out)) != len(out): raise ValueError(f"einsum: output {rhs!r} repeats an index")
    missing = [c for c in out if not any(c in ls for ls in ins)]
    if missing: raise ValueError(f"einsum: output index {missing[0]!r} appears in no operand of {formula!r}")
  else:
    # implicit output: '...' dims first, then the letters used exactly once, in alphabetical order
    counts: dict[str, int] = {}
    for ls in ins:
      for c in ls: counts[c] = counts.get(c, 0) + 1
    out = ell + sorted(c for c, k in counts.items() if k == 1 and c not in ell)
  return ins, out

def _einsum_unique(t: Tensor, letters: list[str]) -> tuple[Tensor, list[str]]:
  """Take the diagonal over each repeated letter, so every letter names one dim."""
  while len(set(letters)) != len(letters):
    c = next(c for c in letters if letters.count(c) > 1)
    a, b = [i for i, x in enumerate(letters) if x == c][:2]
    if t.shape[a] != t.shape[b]:
      raise ValueError(f"einsum: repeated index {c!r} has sizes {t.shape[a]} and {t.shape[b]}")
    n = t.shape[a]
    rest = [i for i in range(t.ndim) if i not in (a, b)]
    t = t.permute(rest + [a, b]).reshape(tuple(t.shape[i] for i in rest) + (n * n,))
    # the flat (n*n) axis read as rows of n+1: column 0 of row k is element k*(n+1), the (k, k) entry
    t = t.pad_(((0, 0),) * len(rest) + ((0, n),)).reshape(tuple(t.shape[:-1]) + (n, n + 1))
    t = t.shrink(tuple(None for _ in rest) + (None, (0, 1))).reshape(t.shape[:-1])
    letters = [letters[i] for i in rest] + [c]
  return t, letters

def _einsum_sum(t: Tensor, letters: list[str], drop: list[str]) -> tuple[Tensor, list[str]]:
  if not drop: return t, letters
  axes = tuple(letters.index(c) for c in drop)
  return t.sum(axes), [c for c in letters if c not in drop]

def _einsum_align(t: Tensor, letters: list[str], union: list[str]) -> Tensor:
  """`t` permuted to `union`'s order, with size-1 dims for the letters it lacks."""
  order = sorted(range(len(letters)), key=lambda i: union.index(letters[i]))
  t = t.permute(order)
  return t.reshape(tuple(t.shape[[letters[i] for i in order].index(c)] if c in letters else 1 for c in union))

# ***** __setitem__ helpers *****

def _setitem(x: Tensor, indices: Any, value: Any) -> tuple[Tensor, Tensor | None] | None:
  """For `x[indices] = value`: the value placed at its positions in x's shape, and where it was placed (None when
  that is everywhere); None when the indexed region is empty."""
  cls = type(x)  # the Tensor class (this module is below tensor/core.py)
  idx = _expand_bool_indices(x, _normalize(x, indices))
  basic = _basic_indices(x, idx)
  # 1. basic indices: the region's shape B (tensor-indexed dims kept whole) and how to place it back in x
  region: list[int] = []
  tensor_dims: list[tuple[int, Tensor]] = []
  for k, (kind, dim, *a) in enumerate(basic):
    if kind == "new": region.append(1)
    elif kind == "tensor":
      tensor_dims.append((len(region), a[0]))
      region.append(x.shape[dim])
    elif kind == "range" or isinstance(a[0], UOp) or x.shape[dim].__class__ is not int:
      # the region is placed back with pads of concrete sizes
      raise IndexError(f"setitem: index {idx[k]!r} of dim {dim} is symbolic or reads a symbolic size; "
                       "x[...] = value needs int indices and slices over concrete sizes")
    elif kind == "slice": region.append(a[2])
  v = value.cast(x.dtype) if isinstance(value, cls) else cls(value, device=x.device, dtype=x.dtype)
  if 0 in region: return None
  # 2. tensor indices: scatter the value from x[indices]'s shape into B with a one-hot over the index positions
  if tensor_dims:
    bshape: tuple[int, ...] = ()
    for _, it in tensor_dims: bshape = broadcast_shape(bshape, it.shape)
    dims = [d for d, _ in tensor_dims]
    rest = [s for d, s in enumerate(region) if d not in dims]
    front = 0 if dims != list(range(dims[0], dims[0] + len(dims))) else dims[0]  # where getitem puts bshape
    got_shape = tuple(rest[:front]) + bshape + tuple(rest[front:])
    v = v._broadcast_to(got_shape)
    if 0 in bshape: return None
    if not bshape:  # 0-d index tensors: give them one dim so there is an axis to reduce over
      bshape = (1,)
      v = v.reshape(tuple(rest[:front]) + (1,) + tuple(rest[front:]))
    nb = len(bshape)
    v = v.permute(list(range(front, front + nb)) + list(range(front)) + list(range(front + nb, v.ndim)))
    # (*bshape, *B): values at size-1 indexed dims, matches at size-1 rest dims
    v = v.reshape(bshape + tuple(1 if d in dims else s for d, s in enumerate(region)))
    match: Tensor | None = None
    for d, it in tensor_dims:
      n = region[d]
      it = it.cast(dtypes.int32)
      it = (it < 0).where(it + n, it)._broadcast_to(bshape).reshape(bshape + (1,) * len(region))
      ar = _arange(n, x).reshape((1,) * nb + tuple(n if k == d else 1 for k in range(len(region))))
      match = it.eq(ar) if match is None else match & it.eq(ar)
    assert match is not None
    # repeated index positions: the last one wins, like NumPy
    q = _arange(prod(bshape), x).reshape(bshape + (1,) * len(region)) + 1
    last = match.where(q, q._const_like(0)).max(tuple(range(nb)), keepdim=True)
    pick = match & q.eq(last)
    picked = pick.where(v, v._const_like(0))
    axes = tuple(range(nb))
    v = picked.any(axes) if v.dtype is dtypes.bool else picked.sum(axes, dtype=v.dtype)
    hit = (last > 0).reshape(last.shape[nb:])._broadcast_to(tuple(region))
  else:
    v = v._broadcast_to(tuple(region))
    hit = cls.full(tuple(region), True, dtype=dtypes.bool, device=x.device)
  # 3. undo the basic indices: pad the region back into x's shape; the padding is where nothing is written
  p = 0  # the dim of v the index places (None's dims go as they are met)
  for kind, dim, *a in basic:
    if kind == "new":
      v, hit = v.reshape(v.shape[:p] + v.shape[p + 1:]), hit.reshape(hit.shape[:p] + hit.shape[p + 1:])
      continue
    size = x.shape[dim]
    if kind == "int":
      v, hit = v.unsqueeze(p), hit.unsqueeze(p)
      v, hit = _place(v, p, a[0], 1, size), _place(hit, p, a[0], 1, size)
    elif kind == "slice":
      start, step, n = a
      if step < 0: v, hit, start, step = v.flip(p), hit.flip(p), start + (n - 1) * step, -step
      v, hit = _place(v, p, start, step, size), _place(hit, p, start, step, size)
    p += 1
  # every element written: the result doesn't read x (which also keeps the kernel from loading it for nothing)
  return v, None if not tensor_dims and prod(region) == x.numel() else hit

def _place(t: Tensor, p: int, start: int, step: int, size: int) -> Tensor:
  """Spread dim p (n elements) to positions start, start+step, ... of a dim of `size`, zeros elsewhere."""
  n = t.shape[p]
  zeros = [(0, 0)] * t.ndim
  if step > 1:
    # (n, 1) padded to (n, step) and flattened puts element k at k*step; cut the tail after the last one
    t = t.reshape(t.shape[:p] + (n, 1) + t.shape[p + 1:])
    t = t.pad_(tuple(zeros[:p + 1] + [(0, step - 1)] + zeros[p + 1:]))
    t = t.reshape(t.shape[:p] + (n * step,) + t.shape[p + 2:])
    t = t.shrink(tuple((0, (n - 1) * step + 1) if k == p else None for k in range(t.ndim)))
  end = start + t.shape[p]
  return t.pad_(tuple(zeros[:p] + [(start, size - end)] + zeros[p + 1:]))
