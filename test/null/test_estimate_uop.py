"""engine.realize.estimate_uop: the operations and bytes of one CALL of a LINEAR, on the NULL device (nothing runs)."""
from __future__ import annotations
import pytest
from attograd import Tensor, dtypes
from attograd.engine.realize import compile_linear, estimate_uop
from attograd.renderer import Estimates

def stats(t: Tensor) -> Estimates: return estimate_uop(compile_linear(t.schedule_linear()).src[-1])

def test_elementwise_bytes_count_each_buffer_once() -> None:
  a, b = (Tensor.empty(64, 64, dtype=dtypes.uint8, device="NULL") for _ in range(2))
  assert stats(a + b).mem == 3 * 64 * 64           # two reads, one write
  assert stats(a + a).mem == 2 * 64 * 64           # the same buffer read twice is read once
  assert stats(a + a.T).mem == 2 * 64 * 64
  small = Tensor.empty(64, 1, dtype=dtypes.uint8, device="NULL").expand(64, 64)
  assert stats(small + b).mem == 2 * 64 * 64 + 64  # an expanded input is its own size

def test_in_place_write_counts_read_and_write() -> None:
  a = Tensor.empty(32, 32, device="NULL").realize()
  assert stats(a.assign(a + a)).mem == 2 * 32 * 32 * 4

def test_float_ops_and_matmul() -> None:
  a, b = Tensor.empty(16, 16, device="NULL"), Tensor.empty(16, 16, device="NULL")
  est = stats((a + b) * (a + b))
  assert 2 * 256 <= est.ops <= 4 * 256 and est.mem == 3 * 256 * 4
  assert stats(a @ b).ops == 2 * 16 ** 3

def test_copy_counts_its_bytes_and_rejects_other_nodes() -> None:
  src = Tensor.empty(8, dtype=dtypes.int32, device="NULL").realize()
  call = compile_linear(src.to("NULL:1").schedule_linear()).src[-1]
  assert estimate_uop(call) == Estimates(lds=32, mem=32)
  with pytest.raises(TypeError, match="CALL"): estimate_uop(call.src[0])
