"""assign as tinygrad's: a value of another dtype raises (no implicit cast, which can lose precision or values), and a
value built from device-less UOps (a constant) is written on the target's device."""
from __future__ import annotations
import numpy as np
import pytest
from attograd import Tensor, dtypes
from attograd.uop.ops import UOp

def test_assign_dtype_mismatch_raises(device: str) -> None:
  a = Tensor.zeros(4, dtype=dtypes.float32, device=device).contiguous().realize()
  with pytest.raises(RuntimeError, match=r"assign dtype mismatch: target dtypes.float32 but value dtypes.int32"):
    a.assign(Tensor([1, 2, 3, 4], dtype=dtypes.int32, device=device))
  with pytest.raises(RuntimeError, match="assign dtype mismatch"):  # 2**24 + 1 isn't a float32
    a[:1].assign(Tensor([16777217], dtype=dtypes.int64, device=device))
  a.assign(Tensor([1, 2, 3, 4], dtype=dtypes.int32, device=device).cast(dtypes.float32))  # an explicit cast is fine
  a[2:].assign(7)  # a Python value takes the target's dtype
  np.testing.assert_equal(a.numpy(), [1, 2, 7, 7])

def test_assign_deviceless_const() -> None:
  s = Tensor.empty(4, device="CPU:1", dtype=dtypes.float32)
  s.assign(Tensor(UOp.const(dtypes.float32, 2.0)))
  assert s.device == "CPU:1"
  np.testing.assert_equal(s.numpy(), [2, 2, 2, 2])
  with pytest.raises(ValueError, match="device mismatch, target on CPU:1 but value on CPU"):
    s.assign(Tensor([1.0, 2.0, 3.0, 4.0], device="CPU"))
