"""How a dtype prints (tinygrad's short C-style names) and that the printed name reads back as the same dtype."""
from __future__ import annotations
import pickle
from attograd import dtypes
from attograd.dtype import DType

def test_dtypes_print_by_their_short_name() -> None:
  want = {dtypes.float32: "float", dtypes.float16: "half", dtypes.float64: "double", dtypes.bfloat16: "bfloat16",
          dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort",
          dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.bool: "bool",
          dtypes.fp8e4m3: "fp8e4m3", dtypes.fp8e5m2: "fp8e5m2", dtypes.fp8e4m3fnuz: "fp8e4m3fnuz",
          dtypes.fp8e5m2fnuz: "fp8e5m2fnuz", dtypes.weakint: "weakint", dtypes.weakfloat: "weakfloat"}
  assert set(dtypes.all) <= set(want)
  for d, name in want.items(): assert str(d) == repr(d) == f"dtypes.{name}", d.name
  # the names with a width are the same objects; .name keeps the width (NumPy's and PyTorch's names)
  assert dtypes.float is dtypes.float32 and dtypes.long is dtypes.int64 and dtypes.float32.name == "float32"
  assert str(dtypes.float32.vec(4)) == "dtypes.float.vec(4)" and str(dtypes.half.ptr(8)) == "dtypes.half.ptr(8)"

def test_a_printed_dtype_reads_back_as_itself() -> None:
  ds: list[DType] = [*dtypes.all, *dtypes.weaks, dtypes.void, dtypes.int64.vec(2), dtypes.uint8.ptr(16)]
  for d in ds:
    assert eval(repr(d), {"dtypes": dtypes}) is d
    assert pickle.loads(pickle.dumps(d)) is d
