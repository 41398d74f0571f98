"""Formatting a tensor's values as text for repr/str, the way PyTorch and NumPy print arrays: one number format shared
by every element, rows wrapped at a line width, and long dims summarized with `...` around their edge items."""
from __future__ import annotations
import math
from typing import Any, Sequence

THRESHOLD = 1000   # more elements than this: summarize (PyTorch's and NumPy's default)
EDGEITEMS = 3      # items kept at each end of a summarized dim
LINEWIDTH = 80
PRECISION = 4

def edge_indices(n: int, summarize: bool) -> list[int] | None:
  """The indices of a dim of size n that a summary keeps, or None when the whole dim is kept."""
  if not summarize or n <= 2 * EDGEITEMS: return None
  return list(range(EDGEITEMS)) + list(range(n - EDGEITEMS, n))

def _float_formatter(vals: Sequence[float]) -> Any:
  """One format for all the values: integers print as `1.`, ordinary ranges with PRECISION decimals, and very large,
  very small or widely spread magnitudes in scientific notation."""
  finite = [abs(v) for v in vals if math.isfinite(v)]
  nonzero = [v for v in finite if v != 0]
  if finite and all(v == int(v) for v in finite) and max(finite) < 1e8:
    return lambda v: f"{v:.0f}." if math.isfinite(v) else _special(v)
  if nonzero and (max(nonzero) >= 1e8 or min(nonzero) < 1e-4 or max(nonzero) / min(nonzero) > 1e3):
    return lambda v: f"{v:.{PRECISION}e}" if math.isfinite(v) else _special(v)
  return lambda v: f"{v:.{PRECISION}f}" if math.isfinite(v) else _special(v)

def _special(v: float) -> str: return "nan" if v != v else ("inf" if v > 0 else "-inf")

def _flat(x: Any) -> list[Any]:
  if not isinstance(x, list): return [x]
  out: list[Any] = []
  for y in x: out.extend(_flat(y))
  return out

def format_values(nested: Any, shape: tuple[int, ...], kept: list[list[int] | None], is_float: bool,
                  is_bool: bool) -> str:
  """`nested`: the values (nested lists, or a scalar for a 0-d tensor) of the kept items of each dim; `kept[d]`: the
  original indices kept along dim d (None when the dim is whole), where a gap gets a `...`."""
  vals = _flat(nested)
  if is_bool: fmt: Any = lambda v: "True" if v else "False"  # noqa: E731
  elif is_float: fmt = _float_formatter([float(v) for v in vals])
  else: fmt = str
  width = max((len(fmt(v)) for v in vals), default=0)
  cell = lambda v: fmt(v).rjust(width)  # noqa: E731
  if not shape: return fmt(nested)
  return _block(nested, shape, kept, 0, cell, indent=len("Tensor("))

def _block(x: list[Any], shape: tuple[int, ...], kept: list[list[int] | None], d: int, cell: Any, indent: int) -> str:
  """One dim's bracketed block: the last dim as a wrapped row of cells, outer dims as blocks separated by newlines."""
  k = kept[d]
  idx = k if k is not None else list(range(shape[d]))
  gap = len(idx) and k is not None  # a summarized dim: `...` between its two halves
  if d == len(shape) - 1:
    items = [cell(v) for v in x]
    if gap: items.insert(EDGEITEMS, "...")
    if not items: return "[]"
    lines: list[str] = []
    cur: list[str] = []
    col = indent + 1
    for i, s in enumerate(items):
      piece = s + ("," if i < len(items) - 1 else "]")
      if cur and col + 1 + len(piece) > LINEWIDTH:  # wrap: continuation lines line up under the first cell
        lines.append(" ".join(cur))
        cur, col = [], indent + 1
      col += len(piece) + (1 if cur else 0)
      cur.append(piece)
    lines.append(" ".join(cur))
    return "[" + ("\n" + " " * (indent + 1)).join(lines)
  subs = [_block(y, shape, kept, d + 1, cell, indent + 1) for y in x]
  if gap: subs.insert(EDGEITEMS, "...")
  sep = ",\n" + "\n" * (len(shape) - d - 2) + " " * (indent + 1)
  return "[" + sep.join(subs) + "]"
