"""Zero-copy views: a View maps indices of a shape onto a flat buffer (strides, offset, validity mask);
a ShapeTracker is a stack of Views for the movement chains that do not merge into one."""
from __future__ import annotations
import functools
from dataclasses import dataclass
from typing import Any
from attograd.dtype import DType, dtypes
from attograd.helpers import prod
from attograd.uop.ops import Ops, UOp, graph_rewrite, sint, ssimp, sym_eq, sym_max, unbind_sint
from attograd.uop.symbolic import split_terms, symbolic

# sizes, strides, offsets and mask bounds are ints, or (symbolic shapes) index expressions over Variables; the
# helpers below keep the int path as it was and simplify symbolic results so equal sizes are the same node
def smul(a: sint, b: sint) -> sint:
  if a.__class__ is int and b.__class__ is int: return a * b
  return b if a == 1 else a if b == 1 else ssimp(a * b)  # type: ignore[operator]
def smax(a: sint, b: sint) -> sint:
  if a.__class__ is int and b.__class__ is int: return max(a, b)
  return _pick(a, b, a >= b, b >= a)  # type: ignore[operator,arg-type]
def smin(a: sint, b: sint) -> sint:
  if a.__class__ is int and b.__class__ is int: return min(a, b)
  return _pick(a, b, a <= b, b <= a)  # type: ignore[operator,arg-type]
def _pick(a: sint, b: sint, a_wins: UOp, b_wins: UOp) -> sint:
  """a or b, decided from the Variables' bounds where they can, else left to the kernel as a WHERE."""
  if surely(a_wins): return a
  if surely(b_wins): return b
  return ssimp(a_wins.simplify().where(a, b))  # type: ignore[arg-type]  # sint is typed as int
def surely(cond: Any) -> bool:
  """True only when the condition holds for every value of its Variables."""
  if not isinstance(cond, UOp): return bool(cond)
  lo, hi = cond.simplify().vmin_vmax
  return bool(lo) and bool(hi)
def is_symbolic(shape: tuple[sint, ...]) -> bool: return any(s.__class__ is not int for s in shape)

@functools.cache
def strides_for_shape(shape: tuple[sint, ...]) -> tuple[sint, ...]:
  out: list[sint] = []
  acc: sint = 1
  for s in reversed(shape):
    out.append(acc if s != 1 else 0)
    acc = smul(acc, s)
  return tuple(reversed(out))

@dataclass(frozen=True)
class View:
  shape: tuple[int, ...]
  strides: tuple[int, ...]
  offset: int
  mask: tuple[tuple[int, int], ...] | None
  contiguous: bool

  @staticmethod
  @functools.cache
  def create(shape: tuple[int, ...], strides: tuple[int, ...] | None = None, offset: int = 0,
             mask: tuple[tuple[int, int], ...] | None = None) -> View:
    if strides is None: strides = strides_for_shape(shape)
    strides = tuple(0 if s == 1 else st for s, st in zip(shape, strides))
    if mask is not None:
      if any(surely(lo >= hi) for lo, hi in mask):  # nothing is valid
        return View(shape, (0,) * len(shape), 0, ((0, 0),) * len(shape), False)
      if all(sym_eq(lo, 0) and sym_eq(hi, s) for (lo, hi), s in zip(mask, shape)): mask = None
      else:  # a dim whose mask keeps one element never moves: fold its start into the offset
        new_strides = list(strides)
        for i, ((lo, hi), s) in enumerate(zip(mask, shape)):
          if hi - lo == 1 and strides[i] != 0:
            offset = ssimp(offset + lo * strides[i])
            new_strides[i] = 0
        strides = tuple(new_strides)
    contiguous = offset == 0 and mask is None and strides == strides_for_shape(shape)
    return View(shape, strides, offset, mask, contiguous)

  @staticmethod
  def empty(shape: tuple[int, ...]) -> View:
    """A view none of whose elements is valid (all padding)."""
    return View.create(shape, (0,) * len(shape), 0, ((0, 0),) * len(shape))

  @property
  def size(self) -> int: return prod(self.shape)
  def is_empty_mask(self) -> bool: return self.mask is not None and any(surely(lo >= hi) for lo, hi in self.mask)

  # ***** movement *****
  def permute(self, axes: tuple[int, ...]) -> View:
    return View.create(tuple(self.shape[a] for a in axes), tuple(self.strides[a] for a in axes), self.offset,
                       tuple(self.mask[a] for a in axes) if self.mask is not None else None)
  def expand(self, new_shape: tuple[int, ...]) -> View:
    if self.is_empty_mask() or 0 in new_shape: return View.empty(new_shape)
    mask = None
    if self.mask is not None:  # an expanded dim was size 1, so its mask was (0, 1) or empty (handled above)
      mask = tuple(m if s == ns else (0, ns) for m, s, ns in zip(self.mask, self.shape, new_shape))
    return View.create(new_shape, tuple(st if s == ns else 0 for st, s, ns in zip(self.strides, self.shape, new_shape)),
                       self.offset, mask)
  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> View:
    offset = ssimp(self.offset + sum(b * st for (b, _), st in zip(arg, self.strides)))
    mask = None
    if self.mask is not None:
      mask = tuple((ssimp(smax(lo, b) - b), ssimp(smax(smin(hi, e), smax(lo, b)) - b))
                   for (lo, hi), (b, e) in zip(self.mask, arg))
    return View.create(tuple(ssimp(e - b) for b, e in arg), self.strides, offset, mask)
  def pad(self, arg: tuple[tuple[sint, sint], ...]) -> View:
    if all(b.__class__ is int and a.__class__ is int and b == 0 and a == 0 for b, a in arg): return self
    new_shape = tuple(ssimp(s + b + a) for s, (b, a) in zip(self.shape, arg))
    old_mask = self.mask if self.mask is not None else tuple((0, s) for s in self.shape)
    mask = tuple((ssimp(lo + b), ssimp(hi + b)) for (lo, hi), (b, _) in zip(old_mask, arg))
    offset = ssimp(self.offset - sum(b * st for (b, _), st in zip(arg, self.strides)))
    return View.create(new_shape, self.strides, offset, mask)
  def flip(self, arg: tuple[bool, ...]) -> View:
    offset = ssimp(self.offset + sum((s - 1) * st for s, st, f in zip(self.shape, self.strides, arg) if f))
    mask = None
    if self.mask is not None:
      mask = tuple((ssimp(s - hi), ssimp(s - lo)) if f else (lo, hi)
                   for (lo, hi), s, f in zip(self.mask, self.shape, arg))
    return View.create(self.shape, tuple(-st if f else st for st, f in zip(self.strides, arg)), offset, mask)

  def reshape(self, new_shape: tuple[sint, ...]) -> View | None:
    """The same elements seen with `new_shape`, or None when no single view can say it."""
    if self.shape == new_shape: return self
    if not sym_eq(prod(new_shape), self.size):
      # a concrete shape seen as a symbolic one (or back): the tensor checked the sizes agree for the bound values
      if is_symbolic(new_shape) or is_symbolic(self.shape): return View.create(new_shape) if self.contiguous else None
      raise ValueError(f"reshape: can't reshape {self.shape} ({self.size} elements) to {new_shape} ({prod(new_shape)})")
    if 0 in self.shape or 0 in new_shape: return View.create(new_shape)
    if self.contiguous: return View.create(new_shape)
    # all padding: a view of rank 0 has no dim to carry the empty mask (its mask would read as "no mask", every
    # element valid), so that one takes a second view over this one
    if self.is_empty_mask(): return View.empty(new_shape) if len(new_shape) else None
    if is_symbolic(self.shape) or is_symbolic(new_shape) or is_symbolic(self.strides) or \
       self.offset.__class__ is not int:
      try: return self._reshape(new_shape)
      except TypeError: return None  # a comparison the Variables' bounds can't decide: stack a view instead
    return self._reshape(new_shape)

  def _reshape(self, new_shape: tuple[sint, ...]) -> View | None:
    mask = self.mask if self.mask is not None else tuple((0, s) for s in self.shape)
    old = [(s, st, m) for s, st, m in zip(self.shape, self.strides, mask) if s != 1]
    # create() pins a dim whose mask keeps one element to stride 0; any stride works for it (the offset pays for it),
    # so give it the one that continues the run inside it and it can merge, e.g. (1,4) padded to (3,4) then flattened
    offset = self.offset
    for j in reversed(range(len(old) - 1)):
      s, st, (lo, hi) = old[j]
      if hi - lo == 1 and st == 0:
        st = old[j + 1][1] * old[j + 1][0]
        offset -= lo * st
        old[j] = (s, st, (lo, hi))
    new_strides, new_mask = [0] * len(new_shape), [(0, s) for s in new_shape]
    oi = ni = 0
    while ni < len(new_shape):
      if new_shape[ni] == 1:
        ni += 1
        continue
      if oi >= len(old): return None
      o0, n0 = oi, ni
      op, np_ = old[oi][0], new_shape[ni]
      while op != np_ if op.__class__ is int and np_.__class__ is int else not sym_eq(op, np_):
        if op < np_:
          oi += 1
          if oi >= len(old): return None  # (symbolic sizes: products the bounds ordered one way, the values another)
          op *= old[oi][0]
        else:
          ni += 1
          if ni >= len(new_shape): return None
          np_ *= new_shape[ni]
      group = old[o0:oi + 1]
      # the old dims of a group must be laid out as one strided run
      if any(a[1] != b[1] * b[0] for a, b in zip(group, group[1:])): return None
      partial = [j for j, (s, _, m) in enumerate(group) if m != (0, s)]
      ndims = [k for k in range(n0, ni + 1) if new_shape[k] != 1]
      if partial:
        if len(ndims) == 1 and partial == [0]:  # merge: only the outermost old dim is masked
          inner = prod(s for s, _, _ in group[1:])
          new_mask[ndims[0]] = (group[0][2][0] * inner, group[0][2][1] * inner)
        elif len(group) == 1 and len(ndims) > 1:  # split: the mask must cover whole rows of the inner dims
          inner = prod(new_shape[k] for k in ndims[1:])
          lo, hi = group[0][2]
          if lo % inner or hi % inner: return None
          new_mask[ndims[0]] = (lo // inner, hi // inner)
        elif len(group) == 1 and len(ndims) == 1: new_mask[ndims[0]] = group[0][2]
        else: return None
      stride = group[-1][1]
      for k in range(ni, n0 - 1, -1):
        new_strides[k] = stride
        stride *= new_shape[k]
      oi += 1
      ni += 1
    if oi != len(old): return None
    return View.create(new_shape, tuple(new_strides), offset, tuple(new_mask) if self.mask is not None else None)

  # ***** indexing *****
  def to_indexed(self, idxs: list[UOp], dtype: DType = dtypes.int32) -> tuple[UOp, UOp]:
    """(flat index, validity) of the element at `idxs` as UOps, the index math in `dtype` (int32, or int64 where
    index_bound() says int32 could overflow)."""
    idx = as_index(self.offset, dtype)
    for i, s, st in zip(idxs, self.shape, self.strides):
      if s != 1 and st != 0: idx = idx + i * as_index(st, dtype)
    valid = UOp.const(dtypes.bool, True)
    if self.mask is not None:
      for i, (lo, hi), s in zip(idxs, self.mask, self.shape):
        if lo != 0: valid = and_valid(valid, i >= as_index(lo, dtype))
        if hi != s: valid = and_valid(valid, i < as_index(hi, dtype))
    return idx, valid

  def index_bound(self) -> int:
    """The largest magnitude any partial sum of this view's index math (or any mask bound) can reach: the offset
    plus every stride times its largest index, from the Variables' largest values where sizes are symbolic."""
    bound = _abs_max(self.offset)
    for s, st in zip(self.shape, self.strides): bound += _abs_max(st) * max(sym_max(s) - 1, 0)
    return max(bound, sym_max(prod(self.shape)) if self.shape else 1)

def _abs_max(x: sint) -> int:
  if not isinstance(x, UOp): return abs(x)
  lo, hi = unbind_sint(x).simplify().vmin_vmax
  return max(abs(int(lo)), abs(int(hi)))

def as_index(x: sint, dtype: DType) -> UOp:
  """A size, stride or offset as an index UOp of `dtype` (a symbolic one is an int32 expression over Variables)."""
  if not isinstance(x, UOp): return UOp.const(dtype, x)
  return x if x.dtype == dtype else x.cast(dtype)

def and_valid(a: UOp, b: UOp) -> UOp:
  """a & b, leaving out a constant True so an unmasked index has no validity math at all."""
  if a.op is Ops.CONST and a.arg is True: return b
  return a if b.op is Ops.CONST and b.arg is True else a & b

@dataclass(frozen=True)
class ShapeTracker:
  """A stack of views: views[-1] is what the user sees, views[0] addresses the buffer."""
  views: tuple[View, ...]

  @staticmethod
  def from_shape(shape: tuple[int, ...]) -> ShapeTracker: return ShapeTracker((View.create(shape),))
  @property
  def shape(self) -> tuple[int, ...]: return self.views[-1].shape
  @property
  def size(self) -> int: return prod(self.shape)
  @property
  def contiguous(self) -> bool: return len(self.views) == 1 and self.views[0].contiguous
  def _top(self, v: View) -> ShapeTracker: return ShapeTracker(self.views[:-1] + (v,))
  def permute(self, axes: tuple[int, ...]) -> ShapeTracker: return self._top(self.views[-1].permute(axes))
  def expand(self, shape: tuple[int, ...]) -> ShapeTracker: return self._top(self.views[-1].expand(shape))
  def shrink(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker: return self._top(self.views[-1].shrink(arg))
  def pad(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker: return self._top(self.views[-1].pad(arg))
  def flip(self, arg: tuple[bool, ...]) -> ShapeTracker: return self._top(self.views[-1].flip(arg))
  def reshape(self, shape: tuple[int, ...]) -> ShapeTracker:
    if (v := self.views[-1].reshape(shape)) is not None: return self._top(v)
    return ShapeTracker(self.views + (View.create(shape),))
  def apply(self, op: Ops, arg: object) -> ShapeTracker: return getattr(self, _movement_names[op])(arg)
  def simplify(self) -> ShapeTracker:
    """Merge the top view into the one below when it only reshapes it."""
    if len(self.views) >= 2 and (top := self.views[-1]).contiguous and sym_eq(top.size, (below := self.views[-2]).size):
      # a contiguous top view of fewer elements is a prefix of the one below, not a reshape of it
      if (merged := below.reshape(top.shape)) is not None:
        return ShapeTracker(self.views[:-2] + (merged,)).simplify()
    return self

  def to_indexed(self, idxs: list[UOp], dtype: DType = dtypes.int32) -> tuple[UOp, UOp]:
    idx, valid = self.views[-1].to_indexed(idxs, dtype)
    for v in reversed(self.views[:-1]):
      # unravel the flat index of the view above into this view's coordinates
      coords, acc = [], 1
      for s in reversed(v.shape):
        coords.append((idx // as_index(acc, dtype)) % as_index(s, dtype) if s != 1 else UOp.const(dtype, 0))
        acc *= s
      idx, v_valid = v.to_indexed(list(reversed(coords)), dtype)
      valid = and_valid(valid, v_valid)
    return idx, valid

  def index_bound(self) -> int:
    """The largest magnitude the index math of any view here can reach (see View.index_bound)."""
    return max(v.index_bound() for v in self.views)
  def index_dtype(self) -> DType:
    """int32 where index_bound() proves it can't overflow, else int64."""
    return dtypes.int32 if self.index_bound() <= dtypes.max(dtypes.int32) else dtypes.int64

  def variables(self) -> set[UOp]:
    """The Variables in this tracker's sizes, strides, offsets and masks."""
    return _st_variables(self)

  def real_strides(self) -> tuple[int | None, ...]:
    """Strides of the top view when it maps straight to the buffer; None for dims that do not."""
    if len(self.views) != 1: return (None,) * len(self.shape)
    v = self.views[0]
    if v.mask is None: return v.strides
    return tuple(None if m != (0, s) else st for st, m, s in zip(v.strides, v.mask, v.shape))

  def index_strides(self) -> tuple[int | None, ...]:
    """The stride of each dim as seen in the simplified index math, even through stacked views (a window view is
    often two views whose composition is still linear); None for a dim that indexes non-linearly or that the
    validity mask depends on. Cached: kernels ask for it once per axis choice."""
    return _index_strides(self)

@functools.lru_cache(maxsize=4096)
def _st_variables(st: ShapeTracker) -> set[UOp]:
  out: set[UOp] = set()
  for v in st.views:
    for x in (*v.shape, *v.strides, v.offset, *(b for m in (v.mask or ()) for b in m)):
      if isinstance(x, UOp): out.update(u for u in x.toposort() if u.op is Ops.DEFINE_VAR)
  return out

@functools.lru_cache(maxsize=4096)
def _index_strides(st: ShapeTracker) -> tuple[int | None, ...]:
    if len(st.views) == 1: return st.real_strides()
    if is_symbolic(st.shape): return (None,) * len(st.shape)
    d = st.index_dtype()
    axv = [UOp(Ops.DEFINE_VAR, d, (), (f"_ax{i}", 0, s - 1)) if s > 1 else UOp.const(d, 0)
           for i, s in enumerate(st.shape)]
    idx, valid = st.to_indexed(axv, d)
    idx, valid = graph_rewrite(idx, symbolic), graph_rewrite(valid, symbolic)
    in_valid = set(valid.toposort())
    terms, _ = split_terms(idx)
    coef = {t: c for t, c in terms}
    bad = {u for t in coef if t.op is not Ops.DEFINE_VAR for u in t.toposort()}
    return tuple(0 if s == 1 else None if (v in in_valid or v in bad) else coef.get(v, 0)
                 for v, s in zip(axv, st.shape))

_movement_names = {Ops.RESHAPE: "reshape", Ops.PERMUTE: "permute", Ops.EXPAND: "expand", Ops.PAD: "pad",
                   Ops.SHRINK: "shrink", Ops.FLIP: "flip"}
