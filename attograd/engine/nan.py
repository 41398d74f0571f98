"""NaN hunting (DEBUG_NAN=1): each kernel's float outputs are checked after it runs, and the first one holding a NaN or
an infinity stops the program with the kernel, its inputs' value ranges and (found by the Tensor layer) the user's
line that created the op. Tensor ops remember where they were called only while the flag is on."""
from __future__ import annotations
import math, os, struct, sys
from typing import Any
from attograd.device import Buffer
from attograd.dtype import DType, dtypes, bf16_bits_to_float
from attograd.helpers import ContextVar

DEBUG_NAN = ContextVar("DEBUG_NAN", 0)

class NaNError(FloatingPointError):
  """A kernel produced a NaN or an infinity while DEBUG_NAN=1 was set."""
  def __init__(self, kernel: str, output: str, inputs: list[str]):
    self.kernel, self.output, self.inputs, self.culprit = kernel, output, inputs, ""
    super().__init__(self._message())
  def blame(self, culprit: str) -> None:
    """Name the Tensor op (and the user's line) that first made a non-finite value."""
    self.culprit = culprit
    self.args = (self._message(),)
  def _message(self) -> str:
    lines = [f"DEBUG_NAN: kernel {self.kernel} produced {self.output}"]
    if self.culprit: lines.append(f"  first made by {self.culprit}")
    lines += [f"  input {s}" for s in self.inputs] or ["  (the kernel reads no buffers)"]
    return "\n".join(lines)

def _values(buf: Buffer) -> list[float]:
  raw = buf.as_bytes()
  if buf.dtype is dtypes.bfloat16: return [bf16_bits_to_float(b) for b in struct.unpack(f"<{buf.size}H", raw)]
  assert buf.dtype.fmt is not None
  return list(struct.unpack(f"<{buf.size}{buf.dtype.fmt}", raw))

def value_summary(buf: Buffer) -> tuple[int, int, str]:
  """(NaN count, infinity count, a one-line description of the values' range)."""
  vals = _values(buf)
  finite = [v for v in vals if math.isfinite(v)]
  nans = sum(v != v for v in vals)
  infs = len(vals) - len(finite) - nans
  rng = f"range [{min(finite):.6g}, {max(finite):.6g}]" if finite else "no finite values"
  bad = "".join([f", {nans} NaN" if nans else "", f", {infs} inf" if infs else ""])
  return nans, infs, f"{buf.size} x {buf.dtype.name}: {rng}{bad}"

def _checked(d: DType) -> bool: return dtypes.is_float(d) and (d is dtypes.bfloat16 or d.fmt is not None)

def check_kernel(name: str, bufs: tuple[Buffer, ...], outs: tuple[int, ...]) -> None:
  """Raise NaNError if any float output of the kernel that just ran holds a NaN or an infinity."""
  for o in outs:
    if not _checked(bufs[o].dtype): continue
    nans, infs, desc = value_summary(bufs[o])
    if nans or infs:
      ins = [f"{i}: {value_summary(b)[2]}" if _checked(b.dtype) else f"{i}: {b.size} x {b.dtype.name}"
             for i, b in enumerate(bufs) if i not in outs]
      raise NaNError(name, desc, ins)

# ***** where Tensor ops were called from (only recorded while DEBUG_NAN is on) *****

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def call_site() -> str:
  """'Tensor.log at train.py:12': the outermost attograd function called from user code, and that user line."""
  f: Any = sys._getframe(1)
  api = "?"
  while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_PKG):
    if f.f_code.co_name != "wrapper": api = f.f_code.co_name  # a decorator's wrapper keeps the method's own name
    f = f.f_back
  if f is None: return f"Tensor.{api}"
  return f"Tensor.{api} at {f.f_code.co_filename}:{f.f_lineno}"
