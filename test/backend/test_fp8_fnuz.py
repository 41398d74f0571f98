"""The fnuz fp8s (float8_e4m3fnuz, float8_e5m2fnuz) against PyTorch, and tinygrad's dtype helpers (truncate,
float_to_fp8, can_lossless_cast, ...). The per-device sweeps of all four fp8s are in test_dtype.py's fp8 section."""
from __future__ import annotations
import math
from typing import Any
import numpy as np
import pytest
from attograd import Context, Tensor, dtypes
from attograd.dtype import (_from_torch_dtype, _to_np_dtype, _to_torch_dtype, can_lossless_cast, float_to_bf16,
                            float_to_fp8, float_to_fp16, fp8_to_float, least_upper_dtype, truncate)

torch = pytest.importorskip("torch")
d = dtypes
FNUZ = [pytest.param(d.fp8e4m3fnuz, id="e4m3fnuz"), pytest.param(d.fp8e5m2fnuz, id="e5m2fnuz")]
TORCH = {d.fp8e4m3: torch.float8_e4m3fn, d.fp8e5m2: torch.float8_e5m2, d.fp8e4m3fnuz: torch.float8_e4m3fnuz,
         d.fp8e5m2fnuz: torch.float8_e5m2fnuz}

def _codes(x: Any, dt: Any) -> np.ndarray:
  """PyTorch's fp8 bits for float32 values."""
  return torch.from_numpy(np.asarray(x, np.float32)).to(TORCH[dt]).view(torch.uint8).numpy()

def _rounded(x: Any, dt: Any) -> np.ndarray:
  """float32 values rounded by PyTorch's cast to the fp8 `dt`, as float32 again."""
  return torch.from_numpy(np.asarray(x, np.float32)).to(TORCH[dt]).float().numpy()

# ***** the Python reference conversions (dtype.py), which constant folding and the PYTHON device use *****

@pytest.mark.parametrize("dt", list(TORCH), ids=str)
def test_reference_conversions_match_torch(dt: Any) -> None:
  want = torch.arange(256, dtype=torch.uint8).view(TORCH[dt]).float().numpy()
  np.testing.assert_array_equal([fp8_to_float(b, dt) for b in range(256)], want)  # every code, NaNs too
  fin = np.unique(np.abs(want[np.isfinite(want)]))
  ties = ((fin[1:].astype(np.float64) + fin[:-1]) / 2).astype(np.float32)  # round-to-even cases
  rng = np.random.default_rng(0)
  rand = (rng.standard_normal(4000) * 2.0 ** rng.integers(-24, 20, 4000)).astype(np.float32)
  x = np.concatenate([fin, ties, np.nextafter(ties, np.float32(0)), np.nextafter(ties, np.float32(np.inf)), rand,
                      np.array([np.inf, np.nan, 0.0, 1e-45, 3e38], np.float32)])
  x = np.concatenate([x, -x])
  got = np.array([float_to_fp8(v, dt) for v in x.tolist()])
  bad = np.nonzero(got != _codes(x, dt))[0]
  assert len(bad) == 0, [(float(x[i]), int(got[i]), int(_codes(x, dt)[i])) for i in bad[:5]]

def test_fnuz_special_values() -> None:
  # no inf and no -0: overflow (from the tie above the largest value), inf and NaN all give 0x80, the one NaN
  for dt, top, tie in [(d.fp8e4m3fnuz, 240.0, 248.0), (d.fp8e5m2fnuz, 57344.0, 61440.0)]:
    assert float_to_fp8(top, dt) == 0x7F and float_to_fp8(-top, dt) == 0xFF and fp8_to_float(0x7F, dt) == top
    assert float_to_fp8(np.nextafter(np.float32(tie), np.float32(0)), dt) == 0x7F
    assert [float_to_fp8(v, dt) for v in (tie, -tie, math.inf, -math.inf, math.nan, -math.nan)] == [0x80] * 6
    assert float_to_fp8(-0.0, dt) == 0 and float_to_fp8(-1e-30, dt) == 0 and math.isnan(fp8_to_float(0x80, dt))
    assert dtypes.max(dt) == dt.max == top and dtypes.min(dt) == dt.min == -top
  assert fp8_to_float(1, d.fp8e4m3fnuz) == 2.0 ** -10 and fp8_to_float(1, d.fp8e5m2fnuz) == 2.0 ** -17  # subnormals
  assert dtypes.finfo(d.fp8e4m3fnuz) == (4, 3) and dtypes.finfo(d.fp8e5m2fnuz) == (5, 2)

# ***** on every device: creation, readback, casts and arithmetic through float32 *****

@pytest.mark.parametrize("dt", FNUZ)
def test_fnuz_tensors(device: str, dt: Any) -> None:
  vals = [1.0, -2.5, 0.3, 300.0, -1e-9, 1e5, -0.0]  # 300 and 1e5: NaN in e4m3fnuz, 1e5 in e5m2fnuz too
  want = _rounded(vals, dt)
  t = Tensor(vals, dtype=dt)
  assert t.dtype is dt and t.element_size() == 1 and t.numpy().dtype == np.float32
  np.testing.assert_array_equal(t.numpy(), want)
  np.testing.assert_array_equal(t.tolist(), want.tolist())
  assert not np.signbit(t.numpy()[[4, 6]]).any()  # -1e-9 and -0.0 are +0: there is no -0
  assert bytes(t.data()) == _codes(vals, dt).tobytes()
  np.testing.assert_array_equal(Tensor(np.array(vals, np.float32)).cast(dt).bitcast(d.uint8).numpy(), _codes(vals, dt))
  assert Tensor(2.3, dtype=dt).item() == _rounded([2.3], dt)[0] and Tensor.full((2,), 7, dtype=dt).tolist() == [7, 7]
  assert Tensor([1, 2], dtype=dt).cast(d.int32).tolist() == [1, 2] and Tensor([3], dtype=d.int8).cast(dt).item() == 3
  assert t.cast(d.float16).dtype is d.float16 and eval(repr(dt), {"dtypes": dtypes}) is dt

@pytest.mark.parametrize("dt", FNUZ)
def test_fnuz_arithmetic_rounds_once_from_float32(device: str, dt: Any) -> None:
  rng = np.random.default_rng(1)
  a, b = _rounded(rng.uniform(-12, 12, (4, 6)), dt), _rounded(rng.uniform(-12, 12, (4, 6)), dt)
  ta, tb = Tensor(a, dtype=dt), Tensor(b, dtype=dt)
  for name, got, ref in [("add", ta + tb, a + b), ("mul", ta * tb, a * b), ("sub", ta - 1.5, a - 1.5),
                         ("relu", ta.relu(), np.maximum(a, 0)), ("max", ta.max(1), a.max(1))]:
    assert got.dtype is dt, name
    np.testing.assert_array_equal(got.numpy(), _rounded(ref, dt), err_msg=name)
  # sums and matmuls accumulate in float32 and round once (as for the OCP fp8s)
  np.testing.assert_array_equal(ta.sum(1).numpy(), _rounded(a.sum(1, dtype=np.float32), dt))
  np.testing.assert_allclose((ta @ tb.T).numpy(), _rounded(a @ b.T, dt), rtol=0, atol=0)
  np.testing.assert_array_equal(ta.exp().numpy(), _rounded(np.exp(a.astype(np.float32)), dt))
  # the max-pool pad and max identity is the lowest finite value (-inf would be NaN here)
  assert Tensor([dt.min, dt.min], dtype=dt).max().item() == dt.min
  assert Tensor([[-7.0, -3.0]], dtype=dt).reshape(1, 1, 2).max_pool2d((1, 2), padding=(0, 1)).tolist() == [[[-7, -3]]]

FNUZ_PROMOTE = [pytest.param(d.fp8e4m3fnuz, d.int64, d.fp8e4m3fnuz, id="i64"),
                pytest.param(d.fp8e5m2fnuz, d.bool, d.fp8e5m2fnuz, id="bool"),
                pytest.param(d.fp8e4m3fnuz, d.fp8e4m3, d.float16, id="e4m3"),
                pytest.param(d.fp8e4m3fnuz, d.fp8e5m2fnuz, d.float16, id="e5m2fnuz"),
                pytest.param(d.fp8e5m2fnuz, d.bfloat16, d.bfloat16, id="bf16"),
                pytest.param(d.fp8e4m3fnuz, d.float32, d.float32, id="f32")]
@pytest.mark.parametrize("a,b,want", FNUZ_PROMOTE)
def test_fnuz_promotion(a: Any, b: Any, want: Any) -> None:
  assert least_upper_dtype(a, b) is want and least_upper_dtype(b, a) is want
  assert (Tensor([1], dtype=a) + Tensor([1], dtype=b)).dtype is want and (Tensor([1], dtype=a) * 2.5).dtype is a

# ***** tinygrad's helper names in attograd.dtype *****

def test_truncate_rounds_and_wraps() -> None:
  assert set(truncate) == set(dtypes.all)
  assert truncate[d.uint8](257) == 1 and truncate[d.int8](200) == -56 and truncate[d.int32](2 ** 31) == -2 ** 31
  assert truncate[d.bool](3) is True and truncate[d.float64](0.1) == 0.1
  assert truncate[d.float32](0.1) == float(np.float32(0.1)) and truncate[d.float32](1e39) == math.inf
  assert truncate[d.float16](65519.9) == 65504 and truncate[d.float16](65520) == math.inf  # an int: struct raised
  assert truncate[d.float32](-10 ** 400) == -math.inf and truncate[d.float64](2 ** 60) == 2.0 ** 60
  assert truncate[d.bfloat16](1.00390625) == 1.0 and truncate[d.bfloat16](1.01171875) == 1.015625  # ties to even
  for dt in TORCH:  # the fp8s round as PyTorch's casts (e4m3 saturates, e5m2 overflows to inf, fnuz to NaN)
    x = [0.1, -3.3, 500.0, 70000.0, math.inf]
    np.testing.assert_array_equal([truncate[dt](v) for v in x], _rounded(x, dt), err_msg=str(dt))

def test_float_to_fp16_and_bf16() -> None:
  assert float_to_fp16(1) == 1 and float_to_fp16(65519.999) == 65504 and float_to_fp16(-65520) == -math.inf
  assert float_to_fp16(1e-8) == 0 and math.isnan(float_to_fp16(math.nan))
  x = np.random.default_rng(2).standard_normal(200).astype(np.float32) * 1e3
  np.testing.assert_array_equal([float_to_bf16(v) for v in x.tolist()], torch.from_numpy(x).bfloat16().float().numpy())
  assert float_to_bf16(math.inf) == math.inf and math.isnan(float_to_bf16(math.nan))
  assert float_to_bf16(3.4e38) == math.inf  # rounds up past bfloat16's largest value, as torch does
  with pytest.raises(TypeError, match="float_to_fp8: dtypes.half is not an fp8"): float_to_fp8(1.0, d.float16)

def test_can_lossless_cast() -> None:
  yes = [(d.uint8, d.int16), (d.uint32, d.int64), (d.int8, d.float16), (d.uint16, d.float32), (d.int32, d.float64),
         (d.bool, d.fp8e4m3), (d.float16, d.float32), (d.bfloat16, d.float32), (d.int16, d.weakint),
         (d.int8, d.bfloat16), (d.uint8, d.bfloat16)]  # bfloat16's 8 significant bits hold every int8 and uint8
  yes += [(f8, wide) for f8 in dtypes.fp8s for wide in (d.float16, d.bfloat16, d.float32, d.float64)]
  no = [(d.int8, d.uint64), (d.int32, d.uint32), (d.int32, d.float32), (d.int64, d.float64), (d.uint16, d.float16),
        (d.int16, d.bfloat16), (d.float16, d.bfloat16), (d.bfloat16, d.float16), (d.float32, d.int64),
        (d.int8, d.fp8e4m3), (d.float16, d.fp8e5m2), (d.int8, d.bool),
        (d.fp8e4m3, d.fp8e4m3fnuz),    # 448 and -0 don't exist there
        (d.fp8e4m3fnuz, d.fp8e4m3),    # 2**-10 doesn't exist there
        (d.fp8e5m2, d.fp8e5m2fnuz)]    # inf
  assert [p for p in yes if not can_lossless_cast(*p)] == [] and [p for p in no if can_lossless_cast(*p)] == []
  assert all(can_lossless_cast(x, x) for x in dtypes.all)
  # checked by brute force for the 8-bit types: every value of one survives the round trip through the other
  small = [d.int8, d.uint8, d.bool] + list(dtypes.fp8s)
  for a in small:
    vals = Tensor(np.arange(256, dtype=np.uint8)).bitcast(a if a is not d.bool else d.uint8).numpy().astype(np.float64)
    vals = vals[~np.isnan(vals)] if a is not d.bool else np.array([0.0, 1.0])
    for b in [*small, d.float16, d.bfloat16]:
      if b is d.bool: continue
      back = np.array([truncate[b](v) for v in vals.tolist()], np.float64)
      same = np.array_equal(back, vals) and np.array_equal(np.signbit(back), np.signbit(vals))
      assert can_lossless_cast(a, b) == same, (a, b)

def test_numpy_and_torch_dtypes() -> None:
  assert _to_np_dtype(d.float32) is np.float32 and _to_np_dtype(d.int8) is np.int8 and _to_np_dtype(d.bool) is np.bool_
  assert all(_to_np_dtype(x) is np.float32 for x in (d.bfloat16, *dtypes.fp8s))  # what .numpy() gives for them
  assert all(Tensor([1], dtype=x).numpy().dtype.type is _to_np_dtype(x) for x in dtypes.all)
  assert _to_torch_dtype(d.uint64) is torch.uint64 and _to_torch_dtype(d.bfloat16) is torch.bfloat16
  assert _to_torch_dtype(d.weakfloat) is torch.float32 and _to_torch_dtype(d.weakint) is torch.int32
  with Context(DEFAULT_FLOAT="HALF"): assert _to_torch_dtype(d.weakfloat) is torch.float16
  assert all(_to_torch_dtype(x) is torch.uint8 for x in dtypes.fp8s)  # their bits, as tinygrad's tests read them
  assert all(_from_torch_dtype(getattr(torch, x.name)) is x for x in dtypes.all)
  assert _from_torch_dtype(torch.float8_e5m2fnuz) is d.fp8e5m2fnuz and _from_torch_dtype(torch.int) is d.int32
  with pytest.raises(TypeError, match="complex64"): _from_torch_dtype(torch.complex64)
  assert d.uint16.max == 65535 and d.int8.min == -128 and d.bool.max is True and d.float16.min == -math.inf
  assert d.float32.bitsize == 32 and d.fp8e5m2fnuz.bitsize == 8
