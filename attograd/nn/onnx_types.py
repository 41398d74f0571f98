"""ONNX's errors and data types, shared by the model loader and runner (onnx.py) and the op table (onnx_ops.py)."""
from __future__ import annotations
from attograd.dtype import DType, dtypes

class OnnxError(ValueError):
  """A malformed, unsupported or inconsistent ONNX model, or inputs that don't match it."""

# TensorProto.DataType -> dtype; the numbers are ONNX's. STRING (8), complex, 4- and 8-bit floats aren't supported.
ONNX_DTYPES: dict[int, DType] = {1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16,
                                 6: dtypes.int32, 7: dtypes.int64, 9: dtypes.bool, 10: dtypes.float16,
                                 11: dtypes.float64, 12: dtypes.uint32, 13: dtypes.uint64, 16: dtypes.bfloat16}
ONNX_DTYPE_NAMES = {8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ",
                    19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1"}

def onnx_dtype(code: int, what: str = "tensor") -> DType:
  if code in ONNX_DTYPES: return ONNX_DTYPES[code]
  raise OnnxError(f"onnx: {what} has data type {ONNX_DTYPE_NAMES.get(code, code)}, which attograd doesn't support "
                  f"(supported: {', '.join(d.name for d in ONNX_DTYPES.values())})")
