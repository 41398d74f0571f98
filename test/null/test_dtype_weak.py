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

def test_int64_meets_uint64_at_weakfloat() -> None:
  # no int holds both: the lattice meets at weakfloat, as in tinygrad (a tensor of it is stored in the default float)
  for s in dtypes.sints: assert least_upper_dtype(s, dtypes.uint64) is dtypes.weakfloat
  assert least_upper_dtype(dtypes.int64, dtypes.uint64, dtypes.weakfloat) is dtypes.weakfloat
  assert least_upper_dtype(dtypes.int64, dtypes.uint64, dtypes.float16) is dtypes.float16

def test_strong_dtypes_meet_at_a_weak_dtype_only_for_uint64_with_a_signed_int() -> None:
  strong = (dtypes.bool,) + dtypes.ints + dtypes.floats
  for a in strong:
    for b in strong:
      weak = {a, b} & {dtypes.uint64} and {a, b} & set(dtypes.sints)
      assert (least_upper_dtype(a, b) is dtypes.weakfloat) == bool(weak), (a, b)

def test_a_scalar_of_a_kind_the_dtype_cant_hold_meets_it_at_its_weak_kind() -> None:
  # what `tensor + scalar` types as: a float scalar with an int or bool dtype, an int one with bool
  for d in dtypes.ints + (dtypes.bool,): assert least_upper_dtype(d, dtypes.weakfloat) is dtypes.weakfloat
  assert least_upper_dtype(dtypes.bool, dtypes.weakint) is dtypes.weakint
  for d in dtypes.ints + dtypes.floats: assert least_upper_dtype(d, dtypes.weakint) is d
  for d in dtypes.floats: assert least_upper_dtype(d, dtypes.weakfloat) is d

def test_weak_dtypes_range_and_finfo_are_their_strong_dtypes() -> None:
  # a weak tensor's values are in its strong dtype: max-pool pads and reduce identities read these
  wi, i32 = dtypes.weakint, dtypes.int32
  assert (dtypes.min(wi), dtypes.max(wi)) == (dtypes.min(i32), dtypes.max(i32))
  assert dtypes.finfo(dtypes.weakfloat) == dtypes.finfo(dtypes.default_float)
