"""Renderer.supported_dtypes() and device.is_dtype_supported: what each backend claims, and that every claimed dtype
really loads, computes and stores there. The weak dtypes (dtypes.weakint / weakfloat) in the promotion lattice."""
from __future__ import annotations
import itertools
import numpy as np
import pytest
from attograd import Context, Device, Tensor, dtypes
from attograd.device import is_dtype_supported
from attograd.dtype import DTYPES_DICT, least_upper_dtype, least_upper_float, strong_dtype, to_dtype, weak_dtype
from attograd.renderer.cstyle import MetalRenderer, OpenCLRenderer

def test_supported_dtypes_is_a_set_of_scalar_dtypes(device: str) -> None:
  got = Device[device].renderer.supported_dtypes()
  assert isinstance(got, set) and got <= set(dtypes.all)
  # the base types every backend has; a renderer must never drop these
  assert {dtypes.bool, dtypes.int32, dtypes.float32, dtypes.uint8} <= got
  assert Device[device].renderer.supported_dtypes() is not got  # a fresh set: callers may edit theirs

def test_every_supported_dtype_computes(device: str) -> None:
  # values whose doubles and triples are exact in every dtype (fp8e5m2 has 2 mantissa bits: 12 is, 9 and 15 aren't)
  vals = [0, 1, 2, 4, 2, 1]
  for d in sorted(Device[device].renderer.supported_dtypes()):
    x = Tensor(vals, device=device).cast(d)
    if d is dtypes.bool:
      assert (x | x.logical_not()).tolist() == [True] * len(vals), d
      continue
    got = (x + x * 2).cast(dtypes.float32).numpy()
    np.testing.assert_array_equal(got, np.array(vals, np.float32) * 3, err_msg=str(d))
    assert x.max().cast(dtypes.float32).item() == 4.0, d

def test_is_dtype_supported_follows_the_renderer(device: str) -> None:
  claimed = Device[device].renderer.supported_dtypes()
  for d in dtypes.all: assert is_dtype_supported(d, device) == (d in claimed)
  assert is_dtype_supported(dtypes.float32.vec(4), device)  # a vector of a supported scalar
  old = Device.DEFAULT
  try:
    Device.DEFAULT = device
    assert is_dtype_supported(dtypes.float32) and all(is_dtype_supported(d) == (d in claimed) for d in dtypes.all)
  finally: Device.DEFAULT = old

def test_double_needs_the_hardware_type() -> None:
  # device-free: the renderers are plain objects, so this runs without an OpenCL device or a Mac
  assert dtypes.float64 in OpenCLRenderer(fp64=True).supported_dtypes()
  no_fp64 = OpenCLRenderer(fp64=False).supported_dtypes()
  assert dtypes.float64 not in no_fp64 and no_fp64 == set(dtypes.all) - {dtypes.float64}
  metal = MetalRenderer().supported_dtypes()
  assert dtypes.float64 not in metal and {dtypes.float16, dtypes.bfloat16} <= metal

def test_is_dtype_supported_errors() -> None:
  with pytest.raises(TypeError, match="is_dtype_supported: dtype must be a DType like dtypes.float16, got 'float32'"):
    is_dtype_supported("float32", "CPU")  # type: ignore[arg-type]
  with pytest.raises(ValueError, match="unknown device 'NOPE'"): is_dtype_supported(dtypes.float32, "NOPE")

# ***** weak dtypes *****

def test_weak_dtypes_are_kinds_not_storage_types() -> None:
  wi, wf = dtypes.weakint, dtypes.weakfloat
  assert dtypes.weaks == (wi, wf)
  assert dtypes.is_int(wi) and not dtypes.is_float(wi) and dtypes.is_float(wf) and not dtypes.is_int(wf)
  assert wi not in dtypes.ints and wf not in dtypes.floats and not set(dtypes.weaks) & set(dtypes.all)
  assert "weakint" not in DTYPES_DICT and "weakfloat" not in DTYPES_DICT
  with pytest.raises(TypeError, match="invalid dtype 'weakfloat'"): to_dtype("weakfloat")
  # an unknown name is an AttributeError too, as in tinygrad (whose to_dtype is a getattr on dtypes)
  with pytest.raises(AttributeError, match="invalid dtype 'nonexistdtype'"): Tensor([1, 2], dtype="nonexistdtype")
  assert (strong_dtype(wi), strong_dtype(wf), strong_dtype(dtypes.int8)) == (dtypes.int32, dtypes.float32, dtypes.int8)
  assert [weak_dtype(d) for d in (dtypes.half, dtypes.uint16, dtypes.bool, wf)] == [wf, wi, dtypes.bool, wf]
  with Context(DEFAULT_FLOAT="half", DEFAULT_INT="int64"):
    assert (strong_dtype(wi), strong_dtype(wf)) == (dtypes.int64, dtypes.float16)

def test_weak_dtypes_defer_to_tensor_dtypes_of_their_kind() -> None:
  wi, wf = dtypes.weakint, dtypes.weakfloat
  assert least_upper_dtype(wi, wi) is wi and least_upper_dtype(dtypes.bool, wi) is wi
  for d in dtypes.ints + dtypes.floats: assert least_upper_dtype(wi, d) is d, d
  assert least_upper_dtype(wf, wf) is wf and least_upper_dtype(wi, wf) is wf
  for d in (dtypes.bool,) + dtypes.ints: assert least_upper_dtype(wf, d) is wf, d
  for d in dtypes.floats: assert least_upper_dtype(wf, d) is d, d
  assert least_upper_float(wi) is wf and least_upper_float(wf) is wf

def test_strong_dtypes_promote_to_strong_dtypes() -> None:
  # weakfloat is where int64 and uint64 meet: strong inputs get the default float, never a weak dtype
  for ds in itertools.chain(itertools.product(dtypes.all, repeat=2), itertools.product(dtypes.all, repeat=3)):
    assert least_upper_dtype(*ds) in dtypes.all, ds

def test_int64_with_uint64_is_the_default_float(device: str) -> None:
  # regression: they met at fp8e4m3, so 1000 + 7 came out as 448 (fp8e4m3's largest value)
  for s in dtypes.sints: assert least_upper_dtype(s, dtypes.uint64) is dtypes.float32
  t = Tensor([1000, -3], dtype=dtypes.int64, device=device) + Tensor([7, 2], dtype=dtypes.uint64, device=device)
  assert t.dtype is dtypes.float32 and t.tolist() == [1007.0, -1.0]
  with Context(DEFAULT_FLOAT="float64"):
    assert least_upper_dtype(dtypes.int64, dtypes.uint64) is dtypes.float64  # the cache knows the default changed
  assert least_upper_dtype(dtypes.int64, dtypes.uint64) is dtypes.float32
