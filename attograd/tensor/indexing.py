"""Tensor indexing: ints, slices with any step, None, Ellipsis, and integer tensors (fancy indexing), as views
and one-hot reductions."""
from __future__ import annotations
from typing import TYPE_CHECKING, Any
from attograd.dtype import dtypes
from attograd.helpers import prod
from attograd.uop.ops import UOp, broadcast_shape, sint, ssimp, sym_max
if TYPE_CHECKING: from attograd.tensor.core import Tensor

def _normalize(t: Tensor, indices: Any) -> list[Any]:
  cls = type(t)  # the Tensor class (this module is below tensor/core.py)
  # a list of ints is one index array; any other list is a tuple of indices (x[[slice(None), [1, 3]]] is x[:, [1, 3]],
  # x[[[0, 2], [1]]] is x[[0, 2], [1]]), as tinygrad and PyTorch 2.x read it. NumPy reads a list of sequences as one
  # index array (and PyTorch's deprecation warning says it will): pass a Tensor or an array for that
  if isinstance(indices, list) and not all(isinstance(i, int) for i in indices): indices = tuple(indices)
  if not isinstance(indices, tuple): indices = (indices,)
  idx = []
  for i in indices:
    # a list or tuple inside the index is a sequence of indices (NumPy and PyTorch), not more dims
    if isinstance(i, (list, tuple)): i = cls(i, device=t.device)
    if type(i).__module__ == "numpy" and hasattr(i, "shape"): i = cls(i, device=t.device) if i.shape else i.item()
    idx.append(i)
  n_real = sum(1 for i in idx
               if i is not None and i is not Ellipsis and not (isinstance(i, cls) and i.dtype is dtypes.bool))
  n_real += sum(i.ndim for i in idx if isinstance(i, cls) and i.dtype is dtypes.bool)
  if sum(1 for i in idx if i is Ellipsis) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
  if n_real > t.ndim: raise IndexError(f"too many indices for a tensor of shape {t.shape}: {len(indices)} given")
  if Ellipsis in [i for i in idx if not isinstance(i, cls)]:
    pos = next(k for k, i in enumerate(idx) if i is Ellipsis)
    idx = idx[:pos] + [slice(None)] * (t.ndim - n_real) + idx[pos + 1:]
  else: idx = idx + [slice(None)] * (t.ndim - n_real)
  return idx

def _expand_bool_indices(x: Tensor, idx: list[Any]) -> list[Any]:
  """Bool tensor indices as integer tensors of the true positions (read on the host, like NumPy's nonzero)."""
  cls = type(x)  # the Tensor class (this module is below tensor/core.py)
  out: list[Any] = []
  dim = 0  # the dim of x that index i starts at (None adds a dim and reads none)
  for i in idx:
    if not (isinstance(i, cls) and i.dtype is dtypes.bool):
      out.append(i)
      dim += i is not None
      continue
    # a mask of another size would pick wrong positions silently: PyTorch and NumPy refuse it too
    if i.shape != x.shape[dim:dim + i.ndim]:
      raise IndexError(f"getitem: a boolean index of shape {i.shape} doesn't match dims {dim}.. of shape {x.shape}")
    dim += i.ndim
    flat = [k for k, b in enumerate(i.flatten().tolist()) if b]
    for d in range(i.ndim):
      stride = prod(i.shape[d + 1:])
      out.append(cls([(k // stride) % i.shape[d] for k in flat], device=x.device, dtype=dtypes.int32))
  return out

def _symbolic_slice(i: slice, size: sint, dim: int) -> tuple[sint, sint] | None:
  """The (start, stop) of a slice that involves a symbolic size, or None for a plain int slice. Negative int bounds
  count from the (maybe symbolic) end, as slice.indices does; int bounds over a symbolic size clamp to its largest
  value (so `x[:, :vi][:, :3]` has the concrete size 3)."""
  if isinstance(i.start, UOp) or isinstance(i.stop, UOp) or isinstance(i.step, UOp):
    if any(not (b is None or isinstance(b, int) or (isinstance(b, UOp) and dtypes.is_int(b.dtype))) for b in
           (i.start, i.stop, i.step)):
      raise IndexError(f"invalid slice {i!r}: bounds must be ints or int expressions of Variables")
  elif size.__class__ is int: return None
  if i.step is not None and i.step != 1:
    if isinstance(i.step, UOp) or isinstance(i.start, UOp) or isinstance(i.stop, UOp):
      step = i.step.render() if isinstance(i.step, UOp) else i.step
      raise IndexError(f"slice {i!r} of dim {dim}: a symbolic slice needs step 1, got step {step}")
    if not all(isinstance(b, int) and b >= 0 for b in (i.start, i.stop)):  # the bounds would depend on the size
      shown = size.render()  # type: ignore[attr-defined]
      raise IndexError(f"slice {i!r} of dim {dim}: a step other than 1 over the symbolic size {shown} "
                       "needs explicit non-negative int start and stop")
    return None  # int bounds with a step over a symbolic size: the int path, clamped to the largest size
  start: sint = 0 if i.start is None else i.start
  stop: sint = size if i.stop is None else i.stop
  if start.__class__ is int and start < 0: start = ssimp(start + size)
  if stop.__class__ is int and stop < 0: stop = ssimp(stop + size)
  if start.__class__ is int and stop.__class__ is int:  # both bounds concrete: clamp against the largest size
    start, stop = min(start, sym_max(size)), min(stop, sym_max(size))
    return start, max(start, stop)
  return ssimp(start), ssimp(stop)

def _basic_indices(x: Tensor, idx: list[Any]) -> list[tuple[Any, ...]]:
  """The one reading of basic indices, for getitem and setitem: each index of a normalized list (after _normalize and
  _expand_bool_indices) checked against the size of the dim of x it reads, as
    ("new", None)                    None: a new dim of size 1
    ("tensor", dim, t)               an integer tensor: the dim is kept whole, and indexed by t afterwards
    ("int", dim, i)                  an int, or a symbolic one: the dim goes; i is non-negative
    ("slice", dim, start, step, n)   a slice over a concrete size: n elements from start, step apart (step may be < 0)
    ("range", dim, start, stop)      a slice with a symbolic bound, or over a symbolic size (step 1)"""
  cls = type(x)  # the Tensor class (this module is below tensor/core.py)
  out: list[tuple[Any, ...]] = []
  dim = 0
  for i in idx:
    if i is None:
      out.append(("new", None))
      continue
    size = x.shape[dim]
    if isinstance(i, cls):
      if not dtypes.is_int(i.dtype): raise IndexError(f"tensor indices must be integers or bools, got {i.dtype}")
      out.append(("tensor", dim, i))
    elif isinstance(i, slice):
      if (sym := _symbolic_slice(i, size, dim)) is not None: out.append(("range", dim, *sym))
      else:
        start, stop, step = i.indices(size if size.__class__ is int else sym_max(size))
        out.append(("slice", dim, start, step, len(range(start, stop, step))))
    elif (isinstance(i, int) and not isinstance(i, bool)) or (isinstance(i, UOp) and dtypes.is_int(i.dtype)
                                                              and not i.shape):  # a symbolic int (a bound Variable)
      if isinstance(i, int) and size.__class__ is int and not -size <= i < size:
        raise IndexError(f"index {i} is out of bounds for dim {dim} with size {size}")
      out.append(("int", dim, ssimp(i + size) if isinstance(i, int) and i < 0 else i))
    else: raise IndexError(f"invalid index {i!r}: use ints, slices, None, ..., or integer/bool tensors")
    dim += 1
  return out

def _getitem(t: Tensor, indices: Any) -> Tensor:
  cls = type(t)  # the Tensor class (this module is below tensor/core.py)
  idx = _normalize(t, indices)
  idx = _expand_bool_indices(t, idx)  # boolean masks select where true: integer indices, read on the host
  # 1. basic indexing as views: shrink, flip, stride by reshape
  x = t
  dim = 0  # the dim of x (which loses the int-indexed dims as it goes) the index reads
  tensor_dims: list[tuple[int, Tensor]] = []
  new_shape: list[int] = []
  for kind, _, *a in _basic_indices(t, idx):
    if kind == "new":
      new_shape.append(1)
      continue
    if kind == "tensor":
      tensor_dims.append((len(new_shape), a[0]))
      new_shape.append(x.shape[dim])
      dim += 1
      continue
    if kind == "int":
      i = a[0]
      x = x.shrink(tuple((i, ssimp(i + 1)) if d == dim else None for d in range(x.ndim)))
      x = x.reshape(x.shape[:dim] + x.shape[dim + 1:])
      continue
    if kind == "range":
      x = x.shrink(tuple((a[0], a[1]) if d == dim else None for d in range(x.ndim)))
      new_shape.append(x.shape[dim])
      dim += 1
      continue
    start, step, n = a
    if n == 0:
      x = x.shrink(tuple((0, 0) if d == dim else None for d in range(x.ndim)))
    elif step > 0:
      x = x.shrink(tuple((start, start + (n - 1) * step + 1) if d == dim else None for d in range(x.ndim)))
    else:
      lo = start + (n - 1) * step
      x = x.shrink(tuple((lo, start + 1) if d == dim else None for d in range(x.ndim))).flip(dim)
    if abs(step) > 1 and n > 0:
      s = abs(step)
      # pad to n*s, view as (n, s), keep column 0
      cur = x.shape[dim]
      x = x.pad_(tuple((0, n * s - cur) if d == dim else (0, 0) for d in range(x.ndim)))
      x = x.reshape(x.shape[:dim] + (n, s) + x.shape[dim + 1:])
      x = x.shrink(tuple((0, 1) if d == dim + 1 else None for d in range(x.ndim)))
      x = x.reshape(x.shape[:dim + 1] + x.shape[dim + 2:])
    new_shape.append(x.shape[dim])
    dim += 1
  x = x.reshape(tuple(new_shape))
  if not tensor_dims: return x
  # 2. fancy indexing: broadcast the index tensors, gather with a one-hot reduction per indexed dim
  bshape: tuple[int, ...] = ()
  for _, it in tensor_dims: bshape = broadcast_shape(bshape, it.shape)
  dims = [d for d, _ in tensor_dims]
  consecutive = dims == list(range(dims[0], dims[0] + len(dims)))
  # move indexed dims to the front
  rest = [d for d in range(x.ndim) if d not in dims]
  x = x.permute(dims + rest)
  rest_shape = tuple(x.shape[len(dims):])
  # flatten the indexed dims into one and build one flat index
  sizes = [x.shape[k] for k in range(len(dims))]
  flat = None
  for k, (_, it) in enumerate(tensor_dims):
    it = it.cast(dtypes.int32)
    it = (it < 0).where(it + sizes[k], it)
    term = it * prod(sizes[k + 1:])
    flat = term if flat is None else flat + term
  assert flat is not None
  flat = flat._broadcast_to(bshape) if flat.shape != bshape else flat
  # the flat index is computed inside the gather's kernel (it has one value per output, along the one-hot's reduce,
  # so the scheduler fuses it: schedule/kernels.py), and codegen's pm_gather_fold turns the reduce over `total` into
  # one load per output element
  total = prod(sizes)
  xf = x.reshape((total,) + rest_shape)
  ar = cls.arange(total, device=t.device).reshape((1,) * len(bshape) + (total,))
  onehot = flat.reshape(bshape + (1,)).eq(ar)  # (*bshape, total)
  oh = onehot.reshape(bshape + (total,) + (1,) * len(rest_shape))
  vals = xf.reshape((1,) * len(bshape) + (total,) + rest_shape)
  picked = oh.where(vals, cls(0, dtype=vals.dtype, device=t.device)) if vals.dtype is not dtypes.bool else oh & vals
  out = picked.sum(len(bshape), dtype=picked.dtype) if picked.dtype is not dtypes.bool else picked.any(len(bshape))
  if consecutive and dims[0] != 0:
    # NumPy keeps the broadcast index dims where the indexed dims were
    nb = len(bshape)
    order = list(range(nb, nb + dims[0])) + list(range(nb)) + list(range(nb + dims[0], out.ndim))
    out = out.permute(order)
  return out
