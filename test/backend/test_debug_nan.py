"""DEBUG_NAN=1: the first kernel whose output holds a NaN or an infinity raises, naming the kernel, the Tensor op and
user line that made the value, and the value ranges of the kernel's inputs; with the flag off nothing is checked."""
from __future__ import annotations
import inspect
import pytest
from attograd import Context, Tensor, TinyJit
from attograd.engine.nan import NaNError
from attograd.tensor import core as tensor_mod

def _line() -> int: return inspect.currentframe().f_back.f_lineno  # type: ignore[union-attr]

def test_nan_names_op_line_and_input_ranges(device: str) -> None:
  with Context(DEBUG_NAN=1):
    x = Tensor([1.0, 4.0, -1.0, 9.0])
    y = (x * 2).sqrt(); line = _line()  # noqa: E702
    with pytest.raises(NaNError) as e: (y + 1).sum().item()
  msg = str(e.value)
  assert f"Tensor.sqrt at {__file__}:{line}" in msg
  assert "1 NaN" in msg and "range [-1, 9]" in msg and "kernel " in msg

def test_inf_is_caught_too(device: str) -> None:
  with Context(DEBUG_NAN=1):
    x = Tensor([0.0, 1.0, 2.0])
    y = x.log(); line = _line()  # noqa: E702
    with pytest.raises(NaNError, match="inf") as e: y.realize()
  assert f"Tensor.log at {__file__}:{line}" in str(e.value)

def test_first_op_blamed_not_later_ones(device: str) -> None:
  with Context(DEBUG_NAN=1):
    a = Tensor([-4.0, 4.0]).sqrt(); line = _line()  # noqa: E702
    b = (a * 3).exp() - 1
    with pytest.raises(NaNError) as e: b.numpy()
  assert f"Tensor.sqrt at {__file__}:{line}" in str(e.value)

def test_finite_values_pass_and_jit_runs_checked(device: str) -> None:
  with Context(DEBUG_NAN=1):
    assert (Tensor([1.0, 4.0]).sqrt() + 1).tolist() == [2.0, 3.0]
    @TinyJit
    def f(t: Tensor) -> Tensor: return t.log()
    for v in (1.0, 2.0, 3.0): f(Tensor([v])).realize()
    with pytest.raises(NaNError): f(Tensor([-1.0])).realize()  # a replay would have run unchecked

def test_off_records_and_checks_nothing(device: str) -> None:
  n = len(tensor_mod._op_sites)
  y = Tensor([-1.0]).sqrt()
  assert len(tensor_mod._op_sites) == n
  assert y.item() != y.item()  # NaN, no error
