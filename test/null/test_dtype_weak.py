"""Weak dtypes, device-free: what a Python value's dtype is (dtypes.from_py) and where weak dtypes meet others."""
from __future__ import annotations
import pytest
from attograd import dtypes
from attograd.dtype import least_upper_dtype

def test_from_py_scalars_are_weak_lists_strong() -> None:
  assert (dtypes.from_py(2), dtypes.from_py(2.5)) == (dtypes.weakint, dtypes.weakfloat)
  assert dtypes.from_py(True) is dtypes.bool
  assert dtypes.from_py([True, 2]) is dtypes.default_int and dtypes.from_py([2, 3.0]) is dtypes.default_float
  assert dtypes.from_py([]) is dtypes.default_float and dtypes.from_py([[True], [False]]) is dtypes.bool
  # an int the default int can't hold widens a list to int64 (tinygrad wraps it)
  assert dtypes.from_py([1, 2**40]) is dtypes.int64 and dtypes.from_py([[1], [2**40]]) is dtypes.int64

@pytest.mark.parametrize("x", [None, {}, set(), [None], object()])
def test_from_py_refuses_values_without_a_dtype(x: object) -> None:
  with pytest.raises(RuntimeError, match="can't infer"): dtypes.from_py(x)
  with pytest.raises(TypeError): dtypes.from_py(x)  # (also a TypeError, attograd's class for it before)

def test_int64_meets_uint64_at_the_default_float() -> None:
  # their lattice meet is weakfloat (tinygrad's answer); strong dtypes alone give a strong one, the default float
  for s in dtypes.sints: assert least_upper_dtype(s, dtypes.uint64) is dtypes.default_float
  assert least_upper_dtype(dtypes.int64, dtypes.uint64, dtypes.weakfloat) is dtypes.weakfloat
  assert least_upper_dtype(dtypes.int64, dtypes.uint64, dtypes.float16) is dtypes.float16

def test_weak_dtypes_range_and_finfo_are_their_strong_dtypes() -> None:
  # a weak tensor's values are in its strong dtype: max-pool pads and reduce identities read these
  wi, i32 = dtypes.weakint, dtypes.int32
  assert (dtypes.min(wi), dtypes.max(wi)) == (dtypes.min(i32), dtypes.max(i32))
  assert dtypes.finfo(dtypes.weakfloat) == dtypes.finfo(dtypes.default_float)
