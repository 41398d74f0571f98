"""Renderer.supported_dtypes() and device.is_dtype_supported: what each backend claims, and that every claimed dtype
really loads, computes and stores there."""
from __future__ import annotations
import numpy as np
import pytest
from attograd import Device, Tensor, dtypes
from attograd.device import is_dtype_supported
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
