"""Buffer views (tinygrad's sub-buffers) and the Buffer lifecycle: allocate, free, copy_from, use after free."""
from __future__ import annotations
import pytest
from attograd import Device, GlobalCounters, dtypes
from attograd.device import Buffer

def step(device: str) -> int:
  """The smallest offset a view may start at on `device` (OpenCL sub-buffers need the device's alignment)."""
  return getattr(Device[device], "base_align", 1)

def base(device: str, n: int) -> Buffer:
  return Buffer(device, n, dtypes.uint8, initial_value=bytes(i % 256 for i in range(n)))

def test_view_reads_and_writes_the_base_memory(device: str) -> None:
  a = step(device)
  b = base(device, 4 * a)
  v = b.view(3, dtypes.uint8, offset=a).ensure_allocated()
  assert v.base is b and v.offset == a and v._base is b and b._base is None
  assert v.as_memoryview().tolist() == [a % 256, (a + 1) % 256, (a + 2) % 256]
  v.copy_from(Buffer("PYTHON", 3, dtypes.uint8, initial_value=bytes([7, 8, 9])))
  assert b.as_memoryview().tolist()[a:a + 3] == [7, 8, 9]
  b.copyin(memoryview(bytearray(4 * a)))  # a write to the base shows in the view
  assert v.as_bytes() == bytes(3)

def test_view_of_a_view_is_a_view_of_the_base(device: str) -> None:
  a = step(device)
  b = base(device, 4 * a)
  v = b.view(2 * a, dtypes.uint8, offset=a)
  vv = v.view(2, dtypes.uint8, offset=a).ensure_allocated()
  assert vv.base is b and vv.offset == 2 * a
  assert vv.as_memoryview().tolist() == [(2 * a) % 256, (2 * a + 1) % 256]

def test_view_with_another_dtype(device: str) -> None:
  a = step(device)
  b = base(device, 2 * a + 4)
  v = b.view(2, dtypes.uint16, offset=a).ensure_allocated()
  lo = a % 256
  assert v.nbytes == 4 and v.as_memoryview().cast("H").tolist() == [lo | (lo + 1) << 8, (lo + 2) | (lo + 3) << 8]

def test_view_allocates_its_base_and_holds_no_memory_of_its_own(device: str) -> None:
  b = Buffer(device, 2 * step(device) + 4, dtypes.uint8)
  v = b.view(4, dtypes.uint8, offset=step(device))
  assert not b.is_allocated() and not v.is_allocated() and not v.is_initialized()
  before = GlobalCounters.mem_used
  v.allocate()
  assert b.is_allocated() and v.is_allocated() and v.is_initialized()
  assert GlobalCounters.mem_used - before == b.nbytes  # only the base counts
  v.deallocate()
  assert b.is_initialized() and v.is_allocated() and not v.is_initialized()
  assert GlobalCounters.mem_used - before == b.nbytes

def test_freeing_the_base_frees_its_views(device: str) -> None:
  a = step(device)
  b = base(device, 2 * a + 2)
  v = b.view(2, dtypes.uint8, offset=a).ensure_allocated()
  b.deallocate()
  assert not b.is_allocated() and not v.is_allocated() and not v.is_initialized()
  with pytest.raises(AssertionError, match="freed"): v.as_memoryview()  # a use after free, not stale bytes
  with pytest.raises(AssertionError, match="freed"): v.copyin(memoryview(bytearray(2)))
  v.deallocate()  # the view's own free is still allowed, once
  with pytest.raises(AssertionError): v.deallocate()
  with pytest.raises(AssertionError): b.deallocate()
  v.ensure_allocated()  # memory again, for both
  b.copyin(memoryview(bytearray(i % 256 for i in range(2 * a + 2))))
  assert v.as_memoryview().tolist() == [a % 256, (a + 1) % 256]

def test_a_freed_view_leaves_its_base(device: str) -> None:
  a = step(device)
  b = base(device, 2 * a + 2)
  v = b.view(2, dtypes.uint8, offset=a).ensure_allocated()
  v.deallocate()
  with pytest.raises(AssertionError, match="freed"): v.as_memoryview()
  assert b.as_memoryview().tolist() == [i % 256 for i in range(2 * a + 2)]

def test_view_outside_its_base_is_refused(device: str) -> None:
  b = Buffer(device, 8, dtypes.uint8)
  with pytest.raises(ValueError, match="outside"): b.view(3, dtypes.uint8, offset=6)
  with pytest.raises(ValueError, match="outside"): b.view(3, dtypes.uint32, offset=0)

def test_view_keeps_its_base_alive(device: str) -> None:
  a = step(device)
  v = base(device, 2 * a + 2).view(2, dtypes.uint8, offset=a).ensure_allocated()  # the base has no other reference
  assert v.as_memoryview().tolist() == [a % 256, (a + 1) % 256]

def test_copy_from_another_device_and_its_checks(device: str) -> None:
  dst = Buffer(device, 4, dtypes.float32).ensure_allocated()
  src = Buffer("PYTHON", 4, dtypes.float32, opaque=memoryview(bytearray(b"\x00\x00\x80\x3f" * 4)))
  assert src.is_initialized() and dst.copy_from(src) is dst
  assert dst.numpy().tolist() == [1.0] * 4
  with pytest.raises(AssertionError, match="bytes"): dst.copy_from(Buffer("PYTHON", 3, dtypes.float32).allocate())
  with pytest.raises(AssertionError, match="allocated"): dst.copy_from(Buffer("PYTHON", 4, dtypes.float32))

def test_double_free_raises(device: str) -> None:
  b = Buffer(device, 4, dtypes.int32).allocate()
  b.deallocate()
  with pytest.raises(AssertionError, match="no memory"): b.deallocate()
  assert b.allocate().is_allocated()  # and it can be allocated again
