"""Movement built from the primitive views: padding modes, cat/stack/split, roll, repeat, triangles.
Everything here is reshape/permute/expand/shrink/flip/pad_ plus a few elementwise ops, so it stays lazy and fuses."""
from __future__ import annotations
import functools, math
from typing import TYPE_CHECKING, Any, Sequence
from attograd.dtype import dtypes, least_upper_dtype
from attograd.helpers import ArgumentError, AxisError, UnknownModeError, argfix, prod
from attograd.uop.ops import SymbolicSizeError, UOp, ssimp, sym_val, sym_vals
from attograd.uop.view import surely
from attograd.engine.recorder import active as _active_recorder

if TYPE_CHECKING:
  from attograd.tensor.core import Tensor

PAD_MODES = ("constant", "reflect", "replicate", "circular")

class RearrangeError(ValueError, AssertionError, RuntimeError):
  """A bad rearrange formula or size. A ValueError like attograd's other argument errors; also an AssertionError and a
  RuntimeError because tinygrad raises those for the same mistakes (from asserts and reshapes), and code ported from
  it catches them."""

def _is_int(x: Any) -> bool:
  # NumPy ints count too (they have __index__ and ndim 0), and symbolic sizes (int UOps); Tensors and arrays don't
  if isinstance(x, UOp): return dtypes.is_int(x.dtype)
  return isinstance(x, int) or (hasattr(x, "__index__") and getattr(x, "ndim", 0) == 0)

def _int(x: Any) -> Any: return x if isinstance(x, UOp) else int(x)

def _ints(x: int | Sequence[int]) -> tuple[int, ...]:
  """One int or a sequence of them, as a tuple of Python ints."""
  return (int(x),) if _is_int(x) else tuple(int(v) for v in x)  # type: ignore[union-attr, arg-type]

def _at(ndim: int, d: int, arg: Any, rest: Any = None) -> tuple[Any, ...]:
  """A per-dim argument that is `arg` at dim d and `rest` elsewhere (for shrink, pad_ and expand)."""
  return tuple(arg if i == d else rest for i in range(ndim))

def _pad_pairs(padding: Sequence[Any], shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
  """One (before, after) pair per dim from torch-style flat padding or tinygrad-style pairs/None."""
  try: pads = tuple(padding)
  except TypeError:
    raise TypeError(f"pad: padding must be a sequence of ints or of (before, after) pairs, got {padding!r}") from None
  if all(_is_int(p) for p in pads):
    # flat, as in torch: (left, right, top, bottom, ...) names the LAST dim first
    if len(pads) % 2 or len(pads) // 2 > len(shape):
      raise ValueError(f"pad: flat padding {pads} needs an even length of at most {2 * len(shape)} for shape {shape}")
    pairs = tuple((_int(pads[i]), _int(pads[i + 1])) for i in range(0, len(pads), 2))[::-1]
    return ((0, 0),) * (len(shape) - len(pairs)) + pairs
  if len(pads) != len(shape):
    raise ValueError(f"pad: need one (before, after) pair or None per dim of shape {shape}, got {len(pads)}: {padding}")
  out = []
  for p in pads:
    if p is None: out.append((0, 0))
    elif isinstance(p, (tuple, list)) and len(p) == 2 and all(_is_int(v) for v in p):
      out.append((_int(p[0]), _int(p[1])))
    else: raise TypeError(f"pad: each entry of {padding} must be None or a (before, after) pair of ints, got {p!r}")
  return tuple(out)

def _symbolic_dim_error(op: str, x: Tensor, d: int) -> None:
  size = x.shape[d].render()  # type: ignore[attr-defined]  # a UOp: sizes (sint) are typed as int
  raise SymbolicSizeError(f"{op}: can't split dim {d} of shape {x._shape_repr()}: its size {size} is "
                          "symbolic, so the number of pieces isn't known; split a concrete dim or shrink to a "
                          "concrete size first")

# a padding amount: its positive part grows the dim, its negative part cuts it (PyTorch's negative padding). A
# symbolic amount whose sign the Variables' bounds don't decide is a growth, as in tinygrad (checked for the bound
# value)
def _grow(p: Any) -> Any: return max(p, 0) if p.__class__ is int else (0 if surely(p <= 0) else p)
def _cut(p: Any) -> Any: return max(-p, 0) if p.__class__ is int else (ssimp(-p) if surely(p < 0) else 0)

def _check_sym_pad(p: UOp) -> None:
  if surely(p >= 0) or surely(p <= 0): return
  if (v := sym_vals(p)) is not None and v[0] < 0:
    raise ValueError(f"pad: the symbolic padding {p.render()} is {v[0]} for the bound value; a padding whose sign "
                     "depends on a Variable must be non-negative (cut with shrink instead)")
  if (rec := _active_recorder()) is not None: rec.size_check(0, p, False, f"pad by {p.render()}")

class MovementMixin:
  # ***** pad *****
  def pad(self: Tensor, padding: Sequence[Any], mode: str = "constant", value: Any = 0.0) -> Tensor:
    """Pad with `value` (mode="constant") or with the tensor's own values ("reflect", "replicate", "circular").

    `padding` is either flat as in PyTorch, last dim first: (left, right, top, bottom, ...), or one (before, after)
    pair (or None) per dim as in tinygrad. Negative padding removes elements, as in PyTorch.

    >>> Tensor([1, 2, 3]).pad((1, 2)).tolist()
    [0, 1, 2, 3, 0, 0]
    >>> Tensor([[1, 2], [3, 4]]).pad(((1, 0), None), value=9).tolist()
    [[9, 9], [1, 2], [3, 4]]
    >>> Tensor([1, 2, 3]).pad((2, 1), mode="reflect").tolist()
    [3, 2, 1, 2, 3, 2]
    >>> Tensor([1, 2, 3]).pad((-1, 1), mode="circular").tolist()
    [2, 3, 2]
    """
    if mode not in PAD_MODES: raise UnknownModeError(f"pad: mode must be one of {', '.join(PAD_MODES)}; got {mode!r}")
    if value is None: value = 0.0  # PyTorch's default
    if mode != "constant" and value != 0: raise ValueError(f"pad: mode {mode!r} takes no value, got value={value!r}")
    pairs = _pad_pairs(padding, self.shape)
    for p in (p for pair in pairs for p in pair if isinstance(p, UOp)): _check_sym_pad(p)  # type: ignore[arg-type]
    for d, ((b, a), s) in enumerate(zip(pairs, self.shape)):
      if (v := sym_vals(ssimp(_cut(b) + _cut(a)), s)) is not None and v[0] > v[1]:
        raise ValueError(f"pad: padding {tuple(padding)} removes more than the {s} elements of dim {d} of {self.shape}")
    grow = tuple((_grow(b), _grow(a)) for b, a in pairs)
    if mode == "constant": return self._crop(pairs)._pad_constant(grow, value)
    # circular wraps the cropped tensor; reflect and replicate read the uncropped one (both as in PyTorch)
    if mode == "circular": return self._crop(pairs)._pad_circular(grow)
    x = self._pad_reflect(grow) if mode == "reflect" else self._pad_replicate(grow)
    return x._crop(pairs)

  def _crop(self: Tensor, pairs: tuple[tuple[int, int], ...]) -> Tensor:
    """Apply the negative parts of `pairs` (a shrink); the positive parts are ignored."""
    return self.shrink(tuple((_cut(b), ssimp(s - _cut(a))) for (b, a), s in zip(pairs, self.shape)))

  def _pad_constant(self: Tensor, grow: tuple[tuple[int, int], ...], value: Any) -> Tensor:
    if isinstance(value, (bool, int, float)) and value != 0:
      # the value meets the tensor's dtype as a Python scalar in `t + value` does (tinygrad's rule): an int tensor
      # padded with 2.5 (or inf) is weakfloat, a bool tensor padded with 2 weakint, stored in the default float or
      # int; a value of a kind the dtype holds takes the dtype, and so does zero (the default 0.0 pads an int as 0)
      self = self.cast(least_upper_dtype(self.dtype, dtypes.from_py(value)))
    x = self.pad_(grow)
    # pad_ fills with +0 of any dtype; any other value (-0.0 too) is chosen with a padded mask
    if x is self or (value == 0 and not (isinstance(value, float) and math.copysign(1.0, value) < 0)): return x
    inside = type(self).full(self.shape, True, dtype=dtypes.bool, device=self.device).pad_(grow)
    return inside.where(x, x.full_like(value))

  def _pad_reflect(self: Tensor, grow: tuple[tuple[int, int], ...]) -> Tensor:
    x = self
    for d, (b, a) in enumerate(grow):
      if not (b or a): continue
      s = x.shape[d]
      if b >= s or a >= s:
        raise ValueError(f"pad: reflect padding ({b}, {a}) of dim {d} must be less than its size {s} in {self.shape}")
      # the mirror image excludes the edge element itself: [1 2 3] -> 3 2 [1 2 3] 2 1
      before = x.shrink(_at(x.ndim, d, (1, b + 1))).flip(d)
      after = x.shrink(_at(x.ndim, d, (s - 1 - a, s - 1))).flip(d)
      x = before.cat(x, after, dim=d)
    return x

  def _pad_replicate(self: Tensor, grow: tuple[tuple[int, int], ...]) -> Tensor:
    x = self
    for d, (b, a) in enumerate(grow):
      if not (b or a): continue
      s = x.shape[d]
      if s == 0: raise ValueError(f"pad: replicate padding ({b}, {a}) needs a non-empty dim {d}, got {self.shape}")
      before = x.shrink(_at(x.ndim, d, (0, 1))).expand(_at(x.ndim, d, b, -1))
      after = x.shrink(_at(x.ndim, d, (s - 1, s))).expand(_at(x.ndim, d, a, -1))
      x = before.cat(x, after, dim=d)
    return x

  def _pad_circular(self: Tensor, grow: tuple[tuple[int, int], ...]) -> Tensor:
    x = self
    for d, (b, a) in enumerate(grow):
      if not (b or a): continue
      s = x.shape[d]
      if b > s or a > s:
        raise ValueError(f"pad: circular padding ({b}, {a}) of dim {d} wraps around more than once; its size is {s} "
                         f"(shape {self.shape})")
      # a view of three copies side by side: indexes become (i - b) mod s, one load per element
      x = x.repeat(_at(x.ndim, d, 3, 1)).shrink(_at(x.ndim, d, (s - b, 2 * s + a)))
    return x

  def _to_sizes(self: Tensor, op: str, shape: Any, *args: Any) -> tuple[Any, ...]:
    sizes = argfix(shape, *args)
    if len(sizes) != self.ndim: raise ValueError(f"{op}: need one size (or None) per dim of {self.shape}, got {sizes}")
    return tuple(s if n is None else n for n, s in zip(sizes, self.shape))

  def shrink_to(self: Tensor, shape: Any, *args: Any) -> Tensor:
    """Keep the first `shape[d]` elements of each dim (None keeps a dim whole), as tinygrad's shrink_to.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).shrink_to(None, 2).tolist()
    [[1, 2], [4, 5]]
    """
    return self.shrink(tuple((0, n) for n in self._to_sizes("shrink_to", shape, *args)))

  def pad_to(self: Tensor, shape: Any, *args: Any, value: Any = 0) -> Tensor:
    """Pad each dim at its end with `value` up to `shape[d]` (None keeps a dim), as tinygrad's pad_to.

    >>> Tensor([[1, 2]]).pad_to(2, 3, value=-1).tolist()
    [[1, 2, -1], [-1, -1, -1]]
    """
    sizes = self._to_sizes("pad_to", shape, *args)
    for n, s in zip(sizes, self.shape):
      if sym_val(n) < sym_val(s): raise ValueError(f"pad_to: size {sizes} is smaller than the shape {self.shape}")
    return self._pad_constant(tuple((0, ssimp(n - s)) for n, s in zip(sizes, self.shape)), value)

  # ***** cat, stack, split, chunk *****
  def cat(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:
    """Join tensors along an existing dim; `Tensor.cat(a, b, dim=1)` and `a.cat(b, dim=1)` are the same.

    Dtypes promote as in binary ops. Each piece is zero-padded to the full size and the pieces are added, which
    fuses into one kernel.

    >>> Tensor([[1, 2]]).cat(Tensor([[3, 4], [5, 6]]), dim=0).tolist()
    [[1, 2], [3, 4], [5, 6]]
    >>> Tensor.cat(Tensor([1]), Tensor([2.5])).tolist()
    [1.0, 2.5]
    """
    ts = (self,) + args
    for t in args:
      if not isinstance(t, MovementMixin): raise TypeError(f"cat: expected Tensors, got {type(t).__name__}")
    if self.ndim == 0: raise AxisError("cat: 0-d tensors can't be concatenated (they have no dim 0); use stack")
    d = self._resolve_axis(dim, "cat")
    def others(shape: tuple[int, ...]) -> tuple[int, ...]: return shape[:d] + shape[d + 1:]
    if any(t.ndim != self.ndim or others(t.shape) != others(self.shape) for t in args):
      raise ValueError(f"cat: shapes must match except in dim {d}, got {', '.join(str(t.shape) for t in ts)}")
    dtype = least_upper_dtype(*(t.dtype for t in ts))
    total = sum(t.shape[d] for t in ts)
    pieces, offset = [], 0
    for t in ts:
      n = t.shape[d]
      if n: pieces.append(t.cast(dtype).pad_(_at(self.ndim, d, (offset, total - offset - n), (0, 0))))
      offset += n
    if not pieces: return self.cast(dtype)
    # padded regions are zero (False for bool, where + is or), so the sum is each piece in its own place
    return functools.reduce(lambda x, y: x + y, pieces)

  def stack(self: Tensor, *args: Tensor, dim: int = 0) -> Tensor:
    """Join equal-shaped tensors along a new dim.

    >>> Tensor.stack(Tensor([1, 2]), Tensor([3, 4]), dim=1).tolist()
    [[1, 3], [2, 4]]
    >>> Tensor.stack([Tensor([1, 2]), Tensor([3, 4])]).tolist()
    [[1, 2], [3, 4]]
    """
    if isinstance(self, (tuple, list)):  # Tensor.stack([a, b]), as torch.stack takes them
      if args: raise ValueError(f"stack: give the tensors as one sequence or as arguments, not both; got {len(args)}")
      if not self: raise ValueError("stack: needs at least one tensor")
      return self[0].stack(*self[1:], dim=dim)
    ts = (self,) + args
    for t in args:
      if not isinstance(t, MovementMixin): raise TypeError(f"stack: expected Tensors, got {type(t).__name__}")
      if t.shape != self.shape:
        raise ValueError(f"stack: shapes must be equal, got {', '.join(str(t.shape) for t in ts)}")
    d = self._resolve_axis(dim, "stack", self.ndim + 1)
    return self.unsqueeze(d).cat(*(t.unsqueeze(d) for t in args), dim=d)

  def split(self: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Views of consecutive pieces along `dim`: an int is the piece size (the last may be smaller), a list gives each.

    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).split(2)]
    [[1, 2], [3, 4], [5]]
    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).split([1, 4])]
    [[1], [2, 3, 4, 5]]
    """
    if self.ndim == 0: raise ValueError("split: a 0-d tensor has no dim to split")
    d = self._resolve_axis(dim, "split")
    n = self.shape[d]
    if isinstance(n, UOp): _symbolic_dim_error("split", self, d)
    if _is_int(sizes):
      size = int(sizes)  # type: ignore[arg-type]
      if size < 0 or (size == 0 and n):
        raise ValueError(f"split: piece size must be positive, got {size} for dim {d} of {self.shape}")
      lens = [min(size, n - i) for i in range(0, n, size)] if n else [0]
    else:
      lens = [int(s) for s in sizes]  # type: ignore[union-attr]
      if any(s < 0 for s in lens) or sum(lens) != n:
        raise ValueError(f"split: sizes {lens} must be non-negative and sum to {n}, dim {d} of {self.shape}")
    out, start = [], 0
    for ln in lens:
      out.append(self.shrink(_at(self.ndim, d, (start, start + ln))))
      start += ln
    return tuple(out)

  def chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into `chunks` pieces of ceil(n / chunks) elements (fewer pieces when they run out), as in PyTorch.

    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).chunk(2)]
    [[1, 2, 3], [4, 5]]
    """
    if not _is_int(chunks) or chunks <= 0: raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
    if self.ndim == 0: raise ValueError("chunk: a 0-d tensor has no dim to split")
    d = self._resolve_axis(dim, "chunk")
    n = self.shape[d]
    if isinstance(n, UOp): _symbolic_dim_error("chunk", self, d)
    if n == 0: return tuple(self for _ in range(chunks))  # PyTorch gives `chunks` empty pieces
    return self.split(-(-n // chunks), d)

  # ***** roll, repeat *****
  def roll(self: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Shift elements along `dims`, wrapping around; with dims=None the tensor is rolled as if flat.

    >>> Tensor([1, 2, 3, 4]).roll(1).tolist()
    [4, 1, 2, 3]
    >>> Tensor([[1, 2], [3, 4]]).roll((1, -1), (0, 1)).tolist()
    [[4, 3], [2, 1]]
    """
    sh = _ints(shifts)
    if dims is None:
      if len(sh) != 1: raise ArgumentError(f"roll: with dims=None give one shift, got {sh}")
      return self.flatten().roll(sh[0], 0).reshape(self.shape)
    dm = _ints(dims)
    if len(sh) != len(dm): raise ArgumentError(f"roll: need one shift per dim, got shifts {sh} and dims {dm}")
    x = self
    for s, dim in zip(sh, dm):
      d = self._resolve_axis(dim, "roll")
      n = x.shape[d]
      if n == 0 or s % n == 0: continue
      k = s % n  # the last k elements move to the front
      # a view of two copies side by side, read from n - k on: indexes become (i - k) mod n, one load per element
      x = x.repeat(_at(x.ndim, d, 2, 1)).shrink(_at(x.ndim, d, (n - k, 2 * n - k)))
    return x

  def repeat(self: Tensor, repeats: Any, *args: int) -> Tensor:
    """Tile the tensor `repeats[i]` times along dim i (PyTorch's repeat, NumPy's tile); extra repeats add dims in front.

    >>> Tensor([1, 2]).repeat(2, 2).tolist()
    [[1, 2, 1, 2], [1, 2, 1, 2]]
    """
    reps = argfix(repeats, *args)
    if any(not _is_int(r) or r < 0 for r in reps):
      raise ValueError(f"repeat: repeats must be non-negative ints, got {reps}")
    if len(reps) < self.ndim: raise ValueError(f"repeat: need at least one repeat per dim of {self.shape}, got {reps}")
    shape = (1,) * (len(reps) - self.ndim) + self.shape
    # (s0, s1) -> (1, s0, 1, s1) -> (r0, s0, r1, s1) -> (r0*s0, r1*s1): the new outer dims pick the copy
    x = self.reshape(tuple(v for s in shape for v in (1, s)))
    x = x.expand(tuple(v for r, s in zip(reps, shape) for v in (int(r), s)))
    return x.reshape(tuple(int(r) * s for r, s in zip(reps, shape)))

  def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along `dim` (the flattened tensor when dim is None).

    >>> Tensor([[1, 2], [3, 4]]).repeat_interleave(2).tolist()
    [1, 1, 2, 2, 3, 3, 4, 4]
    >>> Tensor([[1, 2], [3, 4]]).repeat_interleave(2, dim=1).tolist()
    [[1, 1, 2, 2], [3, 3, 4, 4]]
    """
    if not _is_int(repeats) or repeats < 0:
      raise ValueError(f"repeat_interleave: repeats must be a non-negative int, got {repeats!r}")
    x = self.flatten() if dim is None else self
    d = 0 if dim is None else x._resolve_axis(dim, "repeat_interleave")
    if x.ndim == 0: x = x.reshape(1)
    shp = x.shape
    # (.., n, ..) -> (.., n, 1, ..) -> (.., n, r, ..) -> (.., n*r, ..): the copies of an element sit side by side
    x = x.reshape(shp[:d + 1] + (1,) + shp[d + 1:]).expand(shp[:d + 1] + (int(repeats),) + shp[d + 1:])
    return x.reshape(shp[:d] + (shp[d] * int(repeats),) + shp[d + 1:])

  # ***** triangles *****
  def _triangle(self: Tensor, diagonal: int, upper: bool, op: str) -> Tensor:
    if self.ndim < 2: raise ValueError(f"{op}: needs at least 2 dims, got shape {self.shape}")
    r, c = self.shape[-2], self.shape[-1]
    rows = type(self).arange(r, device=self.device).reshape(r, 1)
    cols = type(self).arange(c, device=self.device).reshape(1, c)
    offset = cols - rows  # (r, c): how far right of the main diagonal each element is
    keep = offset >= diagonal if upper else offset <= diagonal
    return keep.where(self, self.zeros_like())

  def tril(self: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims (elements on or below `diagonal`); the rest is zero.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).tril().tolist()
    [[1, 0, 0], [4, 5, 0]]
    """
    return self._triangle(diagonal, False, "tril")

  def triu(self: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims (elements on or above `diagonal`); the rest is zero.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).triu(1).tolist()
    [[0, 2, 3], [0, 0, 6]]
    """
    return self._triangle(diagonal, True, "triu")

  # ***** diagonals *****
  def diag(self: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D tensor becomes a square matrix with it on the `diagonal`-th diagonal (0 main, > 0 above, < 0 below);
    a 2-D tensor gives that diagonal back, as torch.diag.

    >>> Tensor([1, 2]).diag().tolist()
    [[1, 0], [0, 2]]
    >>> Tensor([1, 2]).diag(1).tolist()
    [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    """
    if self.ndim == 2: return self.diagonal(diagonal)
    if self.ndim != 1: raise ValueError(f"diag: needs a 1-D or 2-D tensor, got shape {self.shape}")
    n, k = self.shape[0], int(diagonal)
    # (n, 1) padded to (n, n+1) and flattened puts element i at i*(n+1), the (i, i) entry of an (n, n) matrix
    x = self.reshape(n, 1).pad_(((0, 0), (0, n))).reshape(n * (n + 1)).shrink(((0, n * n),)).reshape(n, n)
    if k == 0: return x
    return x.pad_(((0, k), (k, 0)) if k > 0 else ((-k, 0), (0, -k)))

  def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """A view of the diagonal of the (dim1, dim2) planes, as a new last dim (torch.diagonal); `offset` > 0 is above
    the main diagonal, < 0 below.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).diagonal().tolist()
    [1, 5]
    >>> Tensor([[1, 2, 3], [4, 5, 6]]).diagonal(1).tolist()
    [2, 6]
    """
    if self.ndim < 2: raise ValueError(f"diagonal: needs at least 2 dims, got shape {self.shape}")
    a, b = self._resolve_axis(dim1, "diagonal"), self._resolve_axis(dim2, "diagonal")
    if a == b: raise RuntimeError(f"diagonal: dim1 and dim2 must differ, got {dim1} and {dim2} for shape {self.shape}")
    x = self.permute([i for i in range(self.ndim) if i not in (a, b)] + [a, b])
    lead, (r, c), k = x.shape[:-2], x.shape[-2:], int(offset)
    keep: list[Any] = [None] * len(lead)
    # the diagonal with offset k starts at (0, k) or (-k, 0): cut the rows or columns before it
    x = x.shrink(tuple(keep + ([None, (min(k, c), c)] if k >= 0 else [(min(-k, r), r), None])))
    d = min(x.shape[-2], x.shape[-1])
    x = x.shrink(tuple(keep + [(0, d), (0, d)])).reshape(lead + (d * d,))
    # the flat (d*d) axis read as rows of d+1: column 0 of row i is element i*(d+1), the (i, i) entry
    x = x.pad_(tuple([(0, 0)] * len(lead) + [(0, d)])).reshape(lead + (d, d + 1))
    return x.shrink(tuple(keep + [None, (0, 1)])).reshape(lead + (d,))

  # ***** windows, grids, einops *****
  def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:
    """Windows of `size` elements every `step` along `dim` (PyTorch's Tensor.unfold): dim becomes the window count
    (n - size) // step + 1 and a new last dim of `size` holds each window. A view; no copy.

    >>> Tensor([1, 2, 3, 4, 5]).unfold(0, 2, 2).tolist()
    [[1, 2], [3, 4]]
    """
    d = self._resolve_axis(dim, "unfold", max(self.ndim, 1))
    x = self.reshape(1) if self.ndim == 0 else self
    n = x.shape[d]
    if not _is_int(size) or not 0 <= size <= n:
      raise RuntimeError(f"unfold: size must be an int in [0, {n}] (dim {d} of shape {self.shape}), got {size!r}")
    if not _is_int(step) or step <= 0: raise RuntimeError(f"unfold: step must be a positive int, got {step!r}")
    count = (n - size) // step + 1
    if self.ndim == 0: return x.shrink(((0, size),))  # PyTorch: a 0-d tensor is one window of size 0 or 1
    if size == 0: return x.shrink(_at(x.ndim, d, (0, 0))).reshape(x.shape[:d] + (count,) + x.shape[d + 1:] + (0,))
    order = [i for i in range(x.ndim) if i != d] + [d]
    w = x.permute(order)._pool((size,), step)                             # (..., count, size)
    back = [order.index(i) for i in range(x.ndim)]
    return w.permute(back + [x.ndim])

  def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D (or 0-d) tensors: the i-th output repeats the i-th input along dim i ("ij", matrix
    indexing) or with the first two dims swapped ("xy", Cartesian), as torch.meshgrid. Views; no copies.

    >>> x, y = Tensor.meshgrid(Tensor([1, 2]), Tensor([3, 4, 5]))
    >>> x.tolist(), y.tolist()
    ([[1, 1, 1], [2, 2, 2]], [[3, 4, 5], [3, 4, 5]])
    """
    if indexing not in ("ij", "xy"): raise RuntimeError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = (self,) + args
    for t in ts:
      if not isinstance(t, MovementMixin): raise TypeError(f"meshgrid: expected Tensors, got {type(t).__name__}")
      if t.ndim > 1: raise ValueError(f"meshgrid: inputs must be 0-d or 1-D, got shapes {[t.shape for t in ts]}")
    flat = [t.reshape(-1) for t in ts]
    sizes = [t.shape[0] for t in flat]
    axes = list(range(len(ts)))
    if indexing == "xy" and len(ts) >= 2: axes[0], axes[1] = 1, 0
    shape = [0] * len(ts)
    for ax, s in zip(axes, sizes): shape[ax] = s
    return tuple(t.reshape(_at(len(ts), ax, s, 1)).expand(tuple(shape)) for t, ax, s in zip(flat, axes, sizes))

  def rearrange(self: Tensor, formula: str, **sizes: int) -> Tensor:
    """einops-style rearrange: "b c (h w) -> b h w c" names the dims on the left and says how to lay them out on the
    right. Parentheses split (left) or merge (right) dims, "..." stands for the dims not named, "1" or "()" is a
    size-1 dim; sizes of split dims are given as keywords (one per group may be left out and is inferred).

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).rearrange("a b -> b a").tolist()
    [[1, 4], [2, 5], [3, 6]]
    >>> Tensor([1, 2, 3, 4]).rearrange("(a b) -> b a", a=2).tolist()
    [[1, 3], [2, 4]]
    """
    if formula.count("->") != 1: raise RearrangeError(f"rearrange: formula needs exactly one '->', got {formula!r}")
    lhs_s, rhs_s = formula.split("->")
    lhs, rhs = _einops_side(lhs_s, formula), _einops_side(rhs_s, formula)
    lnames = [n for g in lhs for n in g if n not in _ELLIPSES]
    rnames = [n for g in rhs for n in g if n not in _ELLIPSES]
    if sorted(lnames) != sorted(rnames) or len(set(lnames)) != len(lnames):
      raise RearrangeError(f"rearrange: each name must appear once on each side, got {formula!r}")
    def n_ellipses(side: list[list[str]]) -> int: return sum(n in _ELLIPSES for g in side for n in g)
    if n_ellipses(lhs) != n_ellipses(rhs):
      raise RearrangeError(f"rearrange: '...' must appear on both sides or on neither, got {formula!r}")
    if any("(...)" in g for g in lhs):
      raise RearrangeError(f"rearrange: '...' can't be inside parentheses on the left, got {formula!r}")
    for k in sizes:
      if k not in lnames: raise RearrangeError(f"rearrange: size given for {k!r}, which {formula!r} doesn't name")
    # spell '...' out as one name per dim it covers
    if n_ellipses(lhs) > 1: raise RearrangeError(f"rearrange: more than one '...' in {formula!r}")
    n_ell = self.ndim - (len(lhs) - 1) if ["..."] in lhs else 0
    if n_ell < 0 or (["..."] not in lhs and len(lhs) != self.ndim):
      raise RearrangeError(f"rearrange: {lhs_s.strip()!r} names {len(lhs)} dims, but the tensor has shape "
                           f"{self.shape}")
    ell = [f"...{i}" for i in range(n_ell)]
    def spell(side: list[list[str]]) -> list[list[str]]:
      out: list[list[str]] = []
      for g in side:
        if g == ["..."]: out.extend([[e] for e in ell])
        else: out.append([e for n in g for e in (ell if n == "(...)" else [n])])
      return out
    lhs, rhs = spell(lhs), spell(rhs)
    # the size of every name: given, read from the shape, or inferred (at most one unknown per group)
    known: dict[str, int] = {k: int(v) for k, v in sizes.items()}
    for g, s in zip(lhs, self.shape):
      unknown = [n for n in g if n not in known]
      given = prod(known[n] for n in g if n in known)
      if len(unknown) > 1:
        raise RearrangeError(f"rearrange: can't infer the sizes of {unknown} in {formula!r}; give them as keywords")
      if unknown:
        if given == 0 or s % given:
          raise RearrangeError(f"rearrange: a dim of size {s} can't split into {g} with sizes {sizes} in {formula!r}")
        known[unknown[0]] = s // given
      elif given != s:
        raise RearrangeError(f"rearrange: group {g} has size {given}, but its dim has size {s} (shape {self.shape})")
    flat = [n for g in lhs for n in g]
    x = self.reshape(tuple(known[n] for n in flat))
    x = x.permute([flat.index(n) for g in rhs for n in g])
    return x.reshape(tuple(prod(known[n] for n in g) for g in rhs))

_ELLIPSES = ("...", "(...)")

def _einops_side(side: str, formula: str) -> list[list[str]]:
  """One side of a rearrange formula as groups of names: 'a (b c) 1' -> [['a'], ['b', 'c'], []]; a bare '...' is the
  group ['...'] (one dim per dim it covers), '(...)' is a name in a group (its dims merged)."""
  toks = side.replace("…", "...").replace("(", " ( ").replace(")", " ) ").split()
  groups: list[list[str]] = []
  cur: list[str] | None = None
  for t in toks:
    if t == "(":
      if cur is not None: raise RearrangeError(f"rearrange: nested parentheses in {formula!r}")
      cur = []
    elif t == ")":
      if cur is None: raise RearrangeError(f"rearrange: unbalanced ')' in {formula!r}")
      groups.append(cur)
      cur = None
    elif t == "1":
      if cur is None: groups.append([])
    elif t == "..." or (t.isidentifier() and not t.startswith("_") and not t.endswith("_")):
      if cur is None: groups.append([t])
      else: cur.append("(...)" if t == "..." else t)  # '...' inside parentheses: its dims merged into one
    else:
      raise RearrangeError(f"rearrange: {t!r} is not an axis name (an identifier not starting or ending with '_'), "
                           f"'...', '1' or a parenthesis in {formula!r}")
  if cur is not None: raise RearrangeError(f"rearrange: unbalanced '(' in {formula!r}")
  return groups
