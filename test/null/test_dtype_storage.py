"""dtype.py's storage-bit conversions under tinygrad's names: bfloat16 and fp8 values from and to their integer bits."""
import math
from attograd.dtype import dtypes, from_storage_scalar, to_storage_scalar

def test_bfloat16_bits():
  assert from_storage_scalar(0x3F80, dtypes.bfloat16) == 1.0 and from_storage_scalar(0xC040, dtypes.bfloat16) == -3.0
  assert to_storage_scalar(1.0, dtypes.bfloat16) == 0x3F80 and to_storage_scalar(1.00390625, dtypes.bfloat16) == 0x3F80
  for bits in (0x0080, 0x3F81, 0x7F7F, 0xFF7F):
    assert to_storage_scalar(from_storage_scalar(bits, dtypes.bfloat16), dtypes.bfloat16) == bits

def test_fp8_bits_roundtrip_every_number():
  for d in dtypes.fp8s:
    for bits in range(256):
      v = from_storage_scalar(bits, d)
      if math.isnan(v) or (v == 0 and bits != 0): continue  # NaN codes and -0 have no single bit pattern back
      assert to_storage_scalar(v, d) == bits, (d, bits, v)
  assert from_storage_scalar(0x38, dtypes.fp8e4m3) == 1.0 and math.isnan(from_storage_scalar(0x7F, dtypes.fp8e4m3))

def test_other_dtypes_pass_through():
  assert from_storage_scalar(7, dtypes.int32) == 7 == to_storage_scalar(7, dtypes.int8)
