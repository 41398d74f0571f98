"""Tensor dtypes: promotion (PyTorch/tinygrad rules), Python scalars, casts, bitcasts and DEFAULT_FLOAT."""
from __future__ import annotations
import os, subprocess, sys
from typing import Any, Callable
import numpy as np
import pytest
from helpers import compare, cpu_only
from attograd import Tensor, dtypes
from attograd.dtype import strong_dtype, to_np_dtype

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _t(vals: list, dtype: Any) -> Tensor: return Tensor(np.array(vals, dtype=to_np_dtype(dtype)))

# ***** tensor-tensor promotion *****

d = dtypes
PROMOTE = [
  P("i32_f16", d.int32, d.float16, d.float16), P("i8_i16", d.int8, d.int16, d.int16),
  P("u8_i8", d.uint8, d.int8, d.int16), P("bool_i32", d.bool, d.int32, d.int32),
  P("f16_f32", d.float16, d.float32, d.float32), P("bool_bool", d.bool, d.bool, d.bool),
  P("u8_u16", d.uint8, d.uint16, d.uint16), P("i64_f16", d.int64, d.float16, d.float16),
  P("u32_i32", d.uint32, d.int32, d.int64), P("f32_f64", d.float32, d.float64, d.float64),
  P("bool_f16", d.bool, d.float16, d.float16), P("i32_i64", d.int32, d.int64, d.int64),
  P("u8_bool", d.uint8, d.bool, d.uint8), P("i32_f32", d.int32, d.float32, d.float32),
  P("u8_f32", d.uint8, d.float32, d.float32), P("i16_u16", d.int16, d.uint16, d.int32),
  P("same_i8", d.int8, d.int8, d.int8), P("same_f16", d.float16, d.float16, d.float16),
]
PROMOTE_OPS = [P("add", lambda x, y: x + y, np.add), P("mul", lambda x, y: x * y, np.multiply),
               P("maximum", lambda x, y: x.maximum(y), np.maximum),
               P("where", lambda x, y: (x != 0).where(x, y), lambda x, y: np.where(x != 0, x, y))]
@pytest.mark.parametrize("a,b,want", PROMOTE)
@pytest.mark.parametrize("op,np_op", PROMOTE_OPS)
def test_promotion(device: str, a: Any, b: Any, want: Any, op: Callable, np_op: Callable) -> None:
  x, y = _t([1, 0, 1, 0], a), _t([0, 1, 1, 0], b)
  assert op(x, y).dtype == want, f"{a} op {b}"
  assert op(y, x).dtype == want, f"{b} op {a}"
  expect = np_op(x.numpy().astype(np.float64), y.numpy().astype(np.float64))
  np.testing.assert_allclose(op(x, y).numpy().astype(np.float64), expect != 0 if want is d.bool else expect)

def test_maximum_numpy_free_values(device: str) -> None:
  assert Tensor([1, 5], dtype=d.int8).maximum(Tensor([3.5, 2.0], dtype=d.float16)).tolist() == [3.5, 5.0]

# ***** Python scalars don't upcast a tensor (they are "weak"); one of a kind the dtype can't hold makes it weak *****

SCALAR = [
  P("f16_mul_float", d.float16, lambda x: x * 2.5, d.float16),
  P("f16_rmul_float", d.float16, lambda x: 2.5 * x, d.float16),
  P("f16_add_int", d.float16, lambda x: x + 1, d.float16),
  P("i8_add_int", d.int8, lambda x: x + 1, d.int8),
  P("i8_radd_int", d.int8, lambda x: 1 + x, d.int8),
  P("u8_add_int", d.uint8, lambda x: x + 3, d.uint8),
  P("i16_mul_int", d.int16, lambda x: x * 3, d.int16),
  P("i64_add_int", d.int64, lambda x: x + 1, d.int64),
  P("f64_add_float", d.float64, lambda x: x + 0.1, d.float64),
  P("i32_add_float", d.int32, lambda x: x + 1.5, d.weakfloat),
  P("i8_mul_float", d.int8, lambda x: x * 0.5, d.weakfloat),
  P("u8_rsub_float", d.uint8, lambda x: 1.5 - x, d.weakfloat),
  P("bool_add_int", d.bool, lambda x: x + 1, d.weakint),
  P("bool_mul_float", d.bool, lambda x: x * 2.5, d.weakfloat),
  P("bool_and_bool", d.bool, lambda x: x & True, d.bool),
  P("i32_div_int", d.int32, lambda x: x / 2, "default_float"),
  P("i32_div_float", d.int32, lambda x: x / 2.0, d.weakfloat),
  P("i8_maximum_float", d.int8, lambda x: x.maximum(0.5), d.weakfloat),
  P("i8_where_float", d.int8, lambda x: (x > 0).where(x, 0.5), d.weakfloat),
  P("i64_pad_float", d.int64, lambda x: x.pad((1, 1), value=2.5), d.weakfloat),
  P("i8_truediv_tensor", d.int8, lambda x: x / x, "default_float"),
  P("i32_cmp_float", d.int32, lambda x: x > 1.5, d.bool),
  P("f16_cmp_int", d.float16, lambda x: x == 1, d.bool),
  P("i32_floordiv", d.int32, lambda x: x // 2, d.int32),
  P("i8_mod", d.int8, lambda x: x % 3, d.int8),
  P("f16_pow", d.float16, lambda x: x ** 2, d.float16),
  P("i32_pow_int", d.int32, lambda x: x ** 2, d.int32),
  P("f16_where_scalars", d.float16, lambda x: (x > 0).where(x, 0.0), d.float16),
  P("i8_where_scalars", d.int8, lambda x: (x > 0).where(x, 0), d.int8),
  P("i8_maximum", d.int8, lambda x: x.maximum(0), d.int8),
  P("f16_clip", d.float16, lambda x: x.clip(0, 1), d.float16),
]
@pytest.mark.parametrize("src,fn,want", SCALAR)
def test_python_scalar_is_weak(device: str, src: Any, fn: Callable, want: Any) -> None:
  want = dtypes.default_float if want == "default_float" else want
  x = _t([1, 2, 0], src)
  assert fn(x).dtype == want
  # a weak result is computed and stored in the default dtype of its kind, so it reads back as one
  assert fn(x).numpy().dtype == np.dtype(strong_dtype(want).name)
  try:
    with np.errstate(all="ignore"): expect = fn(x.numpy())
  except AttributeError: return  # a Tensor-only method: the dtype is what this test is about
  compare(fn(x), expect, atol=1e-3, check_dtype=False)

def test_int_tensor_plus_float_is_weakfloat_in_the_default_float(device: str) -> None:
  assert (Tensor([1, 2]) + 1.5).dtype == dtypes.weakfloat
  assert (Tensor([1, 2]) + 1.5).tolist() == [2.5, 3.5] and (Tensor([1, 2]) + 1.5).numpy().dtype == np.float32
  assert Tensor([1.5]).dtype == dtypes.default_float
  assert Tensor.arange(0.0, 2.0).dtype == dtypes.default_float

def test_float_reductions_and_mean_of_ints(device: str) -> None:
  assert Tensor([1, 2]).mean().dtype == dtypes.default_float
  assert Tensor([1, 2]).mean().item() == 1.5

# ***** bool arithmetic *****

@pytest.mark.parametrize("fn,want", [P("add_is_or", lambda a, b: a + b, [True, True, True, False]),
                                     P("mul_is_and", lambda a, b: a * b, [True, False, False, False]),
                                     P("or", lambda a, b: a | b, [True, True, True, False]),
                                     P("and", lambda a, b: a & b, [True, False, False, False]),
                                     P("xor", lambda a, b: a ^ b, [False, True, True, False]),
                                     P("ne", lambda a, b: a != b, [False, True, True, False]),
                                     P("eq", lambda a, b: a == b, [True, False, False, True]),
                                     P("maximum", lambda a, b: a.maximum(b), [True, True, True, False]),
                                     P("invert", lambda a, b: ~a, [False, False, True, True])])
def test_bool_arithmetic(device: str, fn: Callable, want: list) -> None:
  a, b = Tensor([True, True, False, False]), Tensor([True, False, True, False])
  out = fn(a, b)
  assert out.dtype == dtypes.bool
  assert out.tolist() == want

def test_bool_sum_counts(device: str) -> None:
  t = Tensor([True, False, True, True])
  assert t.sum().item() == 3 and dtypes.is_int(t.sum().dtype)
  assert (t + t).dtype == dtypes.bool
  assert (t.int() + t.int()).tolist() == [2, 0, 2, 2]

# ***** casts *****

# (name, values, from, to): the expected result is numpy's astype (in-range values only: C leaves the rest undefined)
CASTS = [
  P("f32_i32_trunc", [-2.7, -0.5, 0.5, 2.7, 100.9, -100.9, 0.0], d.float32, d.int32),
  P("f32_i8", [-100.9, 100.9, 1.5], d.float32, d.int8),
  P("f32_u8", [0.5, 200.7, 255.0], d.float32, d.uint8),
  P("f32_i64", [-3e9, 3e9, 1.9], d.float32, d.int64),
  P("f32_bool", [0.0, -0.0, 1.5, -2.0, np.nan, np.inf], d.float32, d.bool),
  P("f32_f16", [1 / 3, 65504.0, 1e-8, -2.5, 1e5, -1e5, np.inf, np.nan], d.float32, d.float16),
  P("f16_f32", [1 / 3, 65504.0, 6e-8, -2.5], d.float16, d.float32),
  P("f32_f64", [1 / 3, 1e30, -0.0], d.float32, d.float64),
  P("f64_f32", [1 / 3, 1e-30, 1e39], d.float64, d.float32),
  P("i32_f32", [1, -5, 16777217, 2**31 - 1], d.int32, d.float32),
  P("i32_f16", [1, -5, 2049, 65504], d.int32, d.float16),
  P("i32_i8_wrap", [127, 128, -129, 300, -1], d.int32, d.int8),
  P("i32_u8_wrap", [300, -1, 255, 256], d.int32, d.uint8),
  P("i32_bool", [0, 1, -3], d.int32, d.bool),
  P("i64_i32_wrap", [2**33 + 5, -(2**33) - 5, 7], d.int64, d.int32),
  P("i32_i64", [-1, 2**31 - 1], d.int32, d.int64),
  P("u8_i32", [255, 0, 128], d.uint8, d.int32),
  P("u8_i8", [255, 128, 127], d.uint8, d.int8),
  P("u32_f32", [2**32 - 1, 0, 12345], d.uint32, d.float32),
  P("u32_i64", [2**32 - 1, 0], d.uint32, d.int64),
  P("i8_u32", [-1, 5], d.int8, d.uint32),
  P("bool_i32", [True, False], d.bool, d.int32),
  P("bool_f32", [True, False], d.bool, d.float32),
  P("bool_f16", [True, False], d.bool, d.float16),
  P("f16_i32", [-3.75, 1000.5, 0.25], d.float16, d.int32),
  P("f64_i64", [2.0**52 + 1, -7.9], d.float64, d.int64),
  P("same", [1.5, 2.5], d.float32, d.float32),
]
@pytest.mark.parametrize("vals,src,dst", CASTS)
def test_cast(device: str, vals: list, src: Any, dst: Any) -> None:
  with np.errstate(all="ignore"): x = np.array(vals, dtype=np.float64 if dtypes.is_float(src) else None)
  with np.errstate(all="ignore"): x = x.astype(to_np_dtype(src))
  with np.errstate(all="ignore"): want = x.astype(to_np_dtype(dst))
  t = Tensor(x).cast(dst)
  assert t.dtype == dst
  compare(t, want, atol=0, rtol=0, exact_dtype=True)

def test_cast_by_name_and_noop(device: str) -> None:
  t = Tensor([1.5, -2.5])
  assert t.cast("float16").dtype == dtypes.float16
  assert t.cast("int32").tolist() == [1, -2]
  assert t.cast(dtypes.float32).tolist() == [1.5, -2.5]

def test_cast_of_view_and_lazy(device: str) -> None:
  a = np.array([[1.7, -2.2], [3.9, -4.1]], np.float32)
  compare(Tensor(a).T.cast(dtypes.int32), a.T.astype(np.int32), exact_dtype=True)
  compare((Tensor(a) * 2).cast(dtypes.int8), (a * 2).astype(np.int8), exact_dtype=True)

SHORTHAND = [P("float", lambda t: t.float(), d.float32), P("half", lambda t: t.half(), d.float16),
             P("int", lambda t: t.int(), d.int32), P("bool", lambda t: t.bool(), d.bool),
             P("long", lambda t: t.long(), d.int64), P("double", lambda t: t.double(), d.float64)]
@pytest.mark.parametrize("fn,want", SHORTHAND)
@pytest.mark.parametrize("src", [d.float32, d.int32, d.bool, d.float16], ids=str)
def test_cast_shorthand(device: str, fn: Callable, want: Any, src: Any) -> None:
  x = np.array([0, 1, -2, 3.75] if dtypes.is_float(src) else [0, 1, -2, 3], dtype=to_np_dtype(src))
  t = fn(Tensor(x))
  assert t.dtype == want
  compare(t, x.astype(to_np_dtype(want)), exact_dtype=True)

# ***** bitcast: reinterpret bits, like numpy's .view *****

BITCASTS = [
  P("f32_i32", [1.0, -2.5, 0.0, -0.0, np.inf, np.nan], d.float32, d.int32),
  P("f32_u32", [1.0, -2.5, 3.4e38], d.float32, d.uint32),
  P("i32_f32", [1065353216, -1, 0, 2139095040], d.int32, d.float32),
  P("u32_f32", [1065353216, 4294967295, 1], d.uint32, d.float32),
  P("f16_i16", [1.0, -2.5, 65504.0], d.float16, d.int16),
  P("f16_u16", [1.0, -0.0], d.float16, d.uint16),
  P("i16_f16", [15360, -1024], d.int16, d.float16),
  P("i8_u8", [-1, 127, -128], d.int8, d.uint8),
  P("u8_i8", [255, 128, 3], d.uint8, d.int8),
  P("f64_i64", [1.0, -0.5], d.float64, d.int64),
  P("i64_f64", [4607182418800017408, 0], d.int64, d.float64),
  P("i32_u32", [-1, 5], d.int32, d.uint32),
  # a bool is one byte (LLVM emitted an IR bitcast from i1, CL and Metal an as_bool, none of which compile)
  P("bool_u8", [True, False], d.bool, d.uint8), P("u8_bool", [0, 1, 7], d.uint8, d.bool),
  P("i8_bool", [1, 0, -1], d.int8, d.bool),
]
@pytest.mark.parametrize("vals,src,dst", BITCASTS)
def test_bitcast(device: str, vals: list, src: Any, dst: Any) -> None:
  x = np.array(vals).astype(to_np_dtype(src))
  want = x.view(to_np_dtype(dst))
  t = Tensor(x).bitcast(dst)
  assert t.dtype == dst
  compare(t, want, atol=0, rtol=0, exact_dtype=True)  # floats: NaN where numpy has NaN (payloads may differ)

def test_bitcast_roundtrip_and_lazy(device: str) -> None:
  a = np.array([[0.1, -7.25], [1e-30, 3.0]], np.float32)
  t = (Tensor(a) * 2).bitcast(dtypes.int32)
  np.testing.assert_array_equal(t.numpy(), (a * 2).view(np.int32))
  np.testing.assert_array_equal(t.bitcast(dtypes.float32).numpy(), a * 2)
  np.testing.assert_array_equal(Tensor(a).T.bitcast(dtypes.uint32).numpy(), a.T.copy().view(np.uint32))

def test_bitcast_by_name(device: str) -> None:
  assert Tensor([1.0]).bitcast("int32").tolist() == [1065353216]

# between item sizes: the last dim scales by the ratio, as torch's view(dtype) (which raised "needs equal item sizes")
SIZE_CHANGE = [d.int8, d.uint16, d.float16, d.bfloat16, d.int32, d.float32, d.uint64, d.float64, d.fp8e5m2fnuz]
@pytest.mark.parametrize("src", SIZE_CHANGE, ids=str)
def test_bitcast_changes_item_size(device: str, src: Any) -> None:
  torch = pytest.importorskip("torch")
  raw = np.random.default_rng(3).integers(0, 256, (2, 3, 16), dtype=np.uint8)
  raw[..., 1::2] &= 0x3F  # no float NaNs (the PYTHON device's Python floats keep no NaN payload)
  torch_of = {d.uint16: torch.uint16, d.uint64: torch.uint64, d.fp8e5m2fnuz: torch.float8_e5m2fnuz}
  t, ref = Tensor(raw).bitcast(src), torch.from_numpy(raw)
  for dst in SIZE_CHANGE:
    want = ref.view(torch_of.get(dst) or getattr(torch, dst.name))
    want = want.float() if dst.itemsize < 4 and dtypes.is_float(dst) and dst is not d.float16 else want
    got = t.bitcast(dst)
    assert got.dtype is dst and got.shape == (2, 3, 16 // dst.itemsize), (src, dst, got.shape)
    # NaN equals NaN here (fp8e5m2fnuz's 0x80)
    np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"{src} -> {dst}")
  # and the bytes come back exactly where no float NaN is in the way
  np.testing.assert_array_equal(t.bitcast(d.uint64).bitcast(d.uint8).numpy(), raw)

def test_bitcast_item_size_errors(device: str) -> None:
  assert Tensor([72, -90, 27, 40], dtype=d.int8).bitcast(d.int16).tolist() == [-22968, 10267]  # little-endian
  assert (Tensor([1.0, 2.0]) + 1).bitcast(d.uint16).tolist() == [0, 16384, 0, 16448]  # a lazy source
  with pytest.raises(RuntimeError, match=r"dtypes.char \(1 bytes\) to dtypes.half .*shape \(3,\)"):
    Tensor.empty(3, dtype=d.int8).bitcast(d.float16)
  with pytest.raises(RuntimeError, match="bitcast"): Tensor(1.0).bitcast(d.uint8)  # no last dim to scale
  with pytest.raises(RuntimeError, match="bools"): Tensor([True, False]).bitcast(d.int16)

# ***** overflow and precision *****

def test_uint8_wraps(device: str) -> None:
  a = Tensor(np.array([250, 5], np.uint8))
  assert (a + 10).tolist() == [4, 15]
  assert (a - 10).tolist() == [240, 251]
  assert (a * 2).tolist() == [244, 10]

def test_float64_keeps_precision(device: str) -> None:
  x = np.array([1 / 3, 1e-300, 2.0**60 + 1], np.float64)
  t = Tensor(x)
  np.testing.assert_array_equal(t.numpy(), x)
  np.testing.assert_array_equal((t * 3).numpy(), x * 3)
  assert (Tensor([0.1], dtype=dtypes.float64) + 0.2).item() == 0.1 + 0.2

def test_int64_keeps_range(device: str) -> None:
  x = np.array([2**40, -(2**50), 2**62], np.int64)
  np.testing.assert_array_equal(Tensor(x).numpy(), x)
  np.testing.assert_array_equal((Tensor(x) + 1).numpy(), x + 1)
  np.testing.assert_array_equal((Tensor(x) // 3).numpy(), x // 3)

def test_half_precision_ops(device: str) -> None:
  x = np.array([0.1, 1000.0, 2049.0, 65000.0], np.float16)
  compare(Tensor(x) + Tensor(x), x + x, exact_dtype=True)
  compare(Tensor(x) * Tensor(x), x * x, exact_dtype=True)  # 65000**2 overflows to inf in half

# ***** DEFAULT_FLOAT *****

@pytest.mark.parametrize("env,want", [P("half", "HALF", "dtypes.half"), P("double", "DOUBLE", "dtypes.double"),
                                      P("float", "FLOAT", "dtypes.float")])
def test_default_float_env(env: str, want: str) -> None:
  code = ("from attograd import Tensor, dtypes\n"
          "print(Tensor([1.5]).dtype, (Tensor([1, 2]) / 2).dtype, Tensor.rand(2).dtype, dtypes.default_float)")
  envs = {**os.environ, "DEFAULT_FLOAT": env, "PYTHONPATH": _ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
  r = subprocess.run([sys.executable, "-c", code], env=envs, cwd=_ROOT, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  words = r.stdout.split()
  assert words == [want] * 4, r.stdout

def test_default_float_env_bad_value() -> None:
  envs = {**os.environ, "DEFAULT_FLOAT": "INT32", "PYTHONPATH": _ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
  r = subprocess.run([sys.executable, "-c", "import attograd"], env=envs, cwd=_ROOT, capture_output=True, text=True,
                     timeout=300)
  assert r.returncode != 0 and "DEFAULT_FLOAT" in r.stderr

def test_default_float_is_settable(device: str) -> None:
  old = dtypes.default_float
  try:
    dtypes.default_float = dtypes.float16
    assert Tensor([1.5]).dtype == dtypes.float16
    assert (Tensor([1, 2]) + 0.5).dtype == dtypes.weakfloat and (Tensor([1, 2]) + 0.5).numpy().dtype == np.float16
    assert (Tensor([1, 2]) / 2).dtype == dtypes.float16
  finally: dtypes.default_float = old
  assert Tensor([1.5]).dtype == old

# ***** accumulation: sums and matmuls of low-precision floats in float32, of ints in their result's width *****

LOW = [P("half", d.float16), P("bf16", d.bfloat16), P("fp8e4m3", d.fp8e4m3), P("fp8e5m2", d.fp8e5m2)]

def _torch_dtype(dt: Any) -> Any:
  torch = pytest.importorskip("torch")
  return {d.float16: torch.float16, d.bfloat16: torch.bfloat16, d.fp8e4m3: torch.float8_e4m3fn,
          d.fp8e5m2: torch.float8_e5m2, d.fp8e4m3fnuz: torch.float8_e4m3fnuz, d.fp8e5m2fnuz: torch.float8_e5m2fnuz,
          d.float32: torch.float32}[dt]

def _rounded(x: np.ndarray, dt: Any) -> np.ndarray:
  """float32 values rounded to `dt` by PyTorch's cast, as float32 again: the reference for results in `dt`."""
  torch = pytest.importorskip("torch")
  return torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(_torch_dtype(dt)).float().numpy()

@pytest.mark.parametrize("dt", LOW)
def test_low_precision_sum_accumulates_in_float32(device: str, dt: Any) -> None:
  # bf16 on CPU added the raw bit patterns (4096 ones summed to 0), on PYTHON stopped at 256, didn't render on LLVM;
  # half stopped at 2048. Now: float32 accumulation, one rounding to the input's dtype at the end
  ones = Tensor.ones(4096).cast(dt)
  # (fp8e4m3 holds at most 448: the float32 total saturates there; its own accumulator would stop at 16)
  assert ones.sum().dtype == dt and ones.sum().item() == _rounded(np.array([4096.0]), dt)[0]
  assert Tensor.ones(3, 4).cast(dt).sum().item() == 12.0
  assert Tensor.ones(3, 4).cast(dt).sum(1).tolist() == [4.0, 4.0, 4.0]
  x = np.random.default_rng(0).uniform(-2, 2, (8, 300)).astype(np.float32)
  xr = _rounded(x, dt)  # the input as `dt` holds it
  got = Tensor(x).cast(dt).sum(1)
  assert got.dtype == dt
  np.testing.assert_array_equal(got.numpy(), _rounded(xr.astype(np.float64).sum(1), dt))

@pytest.mark.parametrize("dt", LOW)
def test_low_precision_mean_var_round_once(device: str, dt: Any) -> None:
  x = Tensor.full((4096,), 0.1).cast(dt)  # half: the mean was 0.0625 (a half sum of 2048 steps, then / 4096)
  want = _rounded(np.array([_rounded(np.array([0.1]), dt)[0]]), dt)[0]
  assert x.mean().dtype == dt and x.mean().item() == want
  a = np.random.default_rng(1).uniform(-3, 3, (6, 50)).astype(np.float32)
  ar = _rounded(a, dt).astype(np.float64)
  np.testing.assert_array_equal(Tensor(a).cast(dt).mean(1).numpy(), _rounded(ar.mean(1), dt))
  np.testing.assert_array_equal(Tensor(a).cast(dt).var(1).numpy(), _rounded(ar.var(1, ddof=1), dt))

def test_explicit_low_precision_accumulator(device: str) -> None:
  # a reduce in bfloat16 itself (sum(dtype=...), max) never does arithmetic on the bits: the C and LLVM renderers hold
  # bfloat16 and fp8 as integers, and the max of negative bfloat16 values compared their bit patterns as unsigned
  assert Tensor.ones(300).cast(d.bfloat16).sum(dtype=d.bfloat16).item() == 300.0
  for dt in (d.bfloat16, d.fp8e4m3, d.fp8e5m2, d.float16):
    x = Tensor([-3.0, -1.5, -7.0, -0.25]).cast(dt)
    assert x.max().item() == -0.25 and x.min().item() == -7.0 and x.max().dtype == dt

@pytest.mark.parametrize("dt", LOW)
@pytest.mark.parametrize("n", [8, 64])
def test_low_precision_matmul_accumulates_in_float32(device: str, dt: Any, n: int) -> None:
  if n == 64 and device == "PYTHON": pytest.skip("PYTHON: 64x64x64 interpreted is slow; 8x8 runs there")
  rng = np.random.default_rng(n)
  a, b = (rng.uniform(-2, 2, (n, n)).astype(np.float32) for _ in range(2))
  out = Tensor(a).cast(dt) @ Tensor(b).cast(dt)
  assert out.dtype == dt
  want = _rounded(_rounded(a, dt).astype(np.float64) @ _rounded(b, dt).astype(np.float64), dt)
  got = out.numpy()
  # float32 accumulation in another order than float64's can land on the other side of a rounding boundary: at
  # most one step of `dt` apart, and almost everywhere equal
  step = np.abs(want) * 2.0 ** -dtypes.finfo(dt)[1]
  assert np.all(np.abs(got - want) <= step + 1e-6) and np.mean(got == want) > 0.97
  big = Tensor.ones(n, 4096).cast(dt) @ Tensor.ones(4096, 3).cast(dt)  # past half's 2048 and bf16's 256
  assert big.numpy().tolist() == [[_rounded(np.array([4096.0]), dt)[0]] * 3] * n

def test_low_precision_conv_and_softmax_match_torch(device: str) -> None:
  torch = pytest.importorskip("torch")
  rng = np.random.default_rng(3)
  x, w = rng.standard_normal((2, 3, 8, 8)).astype(np.float16), rng.standard_normal((4, 3, 3, 3)).astype(np.float16)
  got = Tensor(x).conv2d(Tensor(w))
  want = torch.nn.functional.conv2d(torch.from_numpy(x).float(), torch.from_numpy(w).float()).half().numpy()
  assert got.dtype == d.float16
  np.testing.assert_allclose(got.numpy().astype(np.float32), want, rtol=2 ** -10, atol=1e-3)
  # softmax in float32, rounded once: within a step of half of the exact result (PyTorch's own half log_softmax is
  # 3 steps off on one of these)
  for fn in ("softmax", "log_softmax"):
    exact = getattr(torch.from_numpy(x).double(), fn)(-1).half().numpy().astype(np.float32)
    np.testing.assert_allclose(getattr(Tensor(x), fn)(-1).numpy().astype(np.float32), exact, rtol=2 ** -10, err_msg=fn)
  assert Tensor(x).cumsum(-1).dtype == d.float16 and Tensor(x).softmax(dtype=d.float16).dtype == d.float16

INTS = [P(dt.name, dt) for dt in dtypes.ints]
@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize("n", [4, 16, 64, 256])
def test_int_matmul_returns_the_operands_dtype_exact_modulo_its_width(device: str, dt: Any, n: int) -> None:
  # the result has the operands' dtype (NumPy's, PyTorch's and tinygrad's), and its values are the exact products'
  # sums wrapped to that width: the products are summed in (u)int32, not wrapped at 8 (16) bits along the way
  if n == 256: cpu_only(device)
  if n == 64 and device == "PYTHON": pytest.skip("PYTHON: 64x64x64 interpreted is slow")
  info = np.iinfo(to_np_dtype(dt))
  rng = np.random.default_rng(n)
  lo, hi = max(info.min, -200), min(info.max, 200)
  a, b = (rng.integers(lo, hi, (n, n), endpoint=True).astype(to_np_dtype(dt)) for _ in range(2))
  out = Tensor(a) @ Tensor(b)
  assert out.dtype == dt
  want = (a.astype(np.int64) @ b.astype(np.int64)).astype(to_np_dtype(dt))
  np.testing.assert_array_equal(out.numpy(), want)
  # the wide result is one dtype= away: 16 products of 2 * 16 sum to 512, past uint8 (which wraps it to 0)
  x, y = Tensor.full((16, 16), 2, dtype=d.uint8), Tensor.full((16, 16), 16, dtype=d.uint8)
  assert (x @ y).numpy().tolist() == [[0] * 16] * 16
  wide = x.matmul(y, dtype=d.int32)
  assert wide.dtype == d.int32 and wide.numpy().tolist() == [[512] * 16] * 16

def test_bool_matmul_is_the_or_of_ands(device: str) -> None:
  # NumPy's (and tinygrad's) bool @ bool: a bool, true where some pair of the row and column is true
  a = np.array([[True, False, True], [False, False, False], [False, True, False]])
  b = np.array([[False, True], [False, True], [True, False]])
  out = Tensor(a) @ Tensor(b)
  assert out.dtype == d.bool
  np.testing.assert_array_equal(out.numpy(), a @ b)
  assert Tensor(a).matmul(Tensor(b), dtype=d.int32).numpy().tolist() == (a.astype(np.int32) @ b).tolist()

def test_int_sum_and_conv_accumulate_wide(device: str) -> None:
  x = np.full((4, 300), 200, np.uint8)
  assert Tensor(x).sum().item() == 240000 and Tensor(x).sum(1).tolist() == [60000] * 4
  xi = np.full((1, 2, 5, 5), 100, np.int8)
  wi = np.full((3, 2, 3, 3), 100, np.int8)
  out = Tensor(xi).conv2d(Tensor(wi))
  assert out.dtype == d.int32 and out.numpy().flatten().tolist() == [100 * 100 * 18] * 27

# ***** fp8: OCP float8_e4m3fn (no inf, saturates at +-448) and float8_e5m2 (IEEE-like), as PyTorch casts them *****

FP8 = [P("e4m3", d.fp8e4m3), P("e5m2", d.fp8e5m2), P("e4m3fnuz", d.fp8e4m3fnuz), P("e5m2fnuz", d.fp8e5m2fnuz)]

def _fp8_sweep() -> np.ndarray:
  """float32 inputs for the fp8 casts: every fp8 value, the midpoints between neighbours (ties) and the floats just
  either side of them, subnormals, overflow (448..480, 57344..65536), inf, NaN, zeros, and random values of every
  magnitude; both signs."""
  torch = pytest.importorskip("torch")
  bits = torch.arange(256, dtype=torch.uint8)
  fp8s = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
  vals = [bits.view(t).float().numpy() for t in fp8s]
  fin = np.unique(np.abs(np.concatenate(vals)))
  fin = fin[np.isfinite(fin)]
  mids = ((fin[1:].astype(np.float64) + fin[:-1]) / 2).astype(np.float32)
  rng = np.random.default_rng(0)
  rand = (rng.standard_normal(1500) * 10.0 ** rng.integers(-9, 6, 1500)).astype(np.float32)
  edges = np.array([0.0, 1e-45, 1e-40, 2.0 ** -10, 2.0 ** -17, 240, 247.9, 248, 256, 448, 449, 464, 465, 479.9, 480,
                    500, 1e6, 57344, 61439,
                    61440, 65536, 3.4e38, np.inf, np.nan], np.float32)
  near = [np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))]
  x = np.concatenate([fin, mids, *near, rand, edges])
  return np.concatenate([x, -x]).astype(np.float32)

@pytest.mark.parametrize("dt", FP8)
def test_fp8_decode_all_256_bit_patterns(device: str, dt: Any) -> None:
  torch = pytest.importorskip("torch")
  bits = np.arange(256, dtype=np.uint8)
  want = torch.from_numpy(bits).view(_torch_dtype(dt)).float().numpy()
  t = Tensor(bits).bitcast(dt)
  np.testing.assert_array_equal(t.cast(d.float32).numpy(), want)
  np.testing.assert_array_equal(t.numpy(), want)  # .numpy() gives float32 (numpy has no fp8)
  np.testing.assert_array_equal(t.cast(d.float16).numpy(), want.astype(np.float16))
  np.testing.assert_array_equal(t.cast(d.bfloat16).numpy(), _rounded(want, d.bfloat16))
  np.testing.assert_array_equal(np.array(t.tolist(), np.float32), want)
  assert np.array_equal(np.signbit(t.numpy()), np.signbit(want))  # -0.0 and the NaNs keep their sign

@pytest.mark.parametrize("dt", FP8)
def test_fp8_encode_matches_torch(device: str, dt: Any) -> None:
  torch = pytest.importorskip("torch")
  x = _fp8_sweep()
  want = torch.from_numpy(x).to(_torch_dtype(dt)).view(torch.uint8).numpy()
  got = Tensor(x).cast(dt).bitcast(d.uint8).numpy()
  bad = np.nonzero(got != want)[0]
  assert len(bad) == 0, f"{len(bad)} mismatches, e.g. {[(float(x[i]), int(got[i]), int(want[i])) for i in bad[:5]]}"
  # from float64 and half: through float32 first, as PyTorch does (double rounding included)
  x64 = np.array([1.0625 + 2.0 ** -40, 0.3, -1e-3, 300.0, 1e300, -1e-300])
  want64 = torch.from_numpy(x64).to(_torch_dtype(dt)).view(torch.uint8).numpy()
  np.testing.assert_array_equal(Tensor(x64).cast(dt).bitcast(d.uint8).numpy(), want64)
  h = x[np.abs(x) < 60000].astype(np.float16)
  np.testing.assert_array_equal(Tensor(h).cast(dt).bitcast(d.uint8).numpy(),
                                torch.from_numpy(h).to(_torch_dtype(dt)).view(torch.uint8).numpy())
  # and to ints, through float32 like PyTorch
  xi = np.array([3.0, -7.5, 100.0, 240.0, -0.4], np.float32)  # (no NaN: NaN -> int is a separate question)
  np.testing.assert_array_equal(Tensor(xi).cast(dt).cast(d.int32).numpy(),
                                torch.from_numpy(xi).to(_torch_dtype(dt)).to(torch.int32).numpy())

@pytest.mark.parametrize("dt", FP8)
def test_fp8_tensor_creation_and_access(device: str, dt: Any) -> None:
  vals = [1.0, -2.5, 0.3, 1000.0, 1e-3]
  want = _rounded(np.array(vals), dt)
  t = Tensor(vals, dtype=dt)
  assert t.dtype == dt and t.shape == (5,) and t.element_size() == 1
  np.testing.assert_array_equal(t.numpy(), want)
  assert t.numpy().dtype == np.float32
  np.testing.assert_array_equal(t.tolist(), want.tolist())  # 1000 is NaN in e4m3fnuz
  assert Tensor(2.3, dtype=dt).item() == _rounded(np.array([2.3]), dt)[0]
  assert Tensor([[0.5, 1.5]], dtype=dt).tolist() == [[0.5, 1.5]]
  np.testing.assert_array_equal(Tensor(np.array(vals, np.float32), dtype=dt).numpy(), want)
  assert bytes(t.data()) == _t_bytes(vals, dt) and Tensor.full((2,), 7.0, dtype=dt).tolist() == [7.0, 7.0]
  assert t.cast("float8_e4m3fn").dtype is d.fp8e4m3 and t.cast("fp8e5m2").dtype is d.fp8e5m2
  # printed by tinygrad's short name (dtypes.fp8e4m3), which names the same object
  assert repr(dt) in [f"dtypes.{n}" for n in ("fp8e4m3", "fp8e5m2", "fp8e4m3fnuz", "fp8e5m2fnuz")]
  assert eval(repr(dt), {"dtypes": dtypes}) is dt

def _t_bytes(vals: list, dt: Any) -> bytes:
  torch = pytest.importorskip("torch")
  return torch.tensor(vals).to(_torch_dtype(dt)).view(torch.uint8).numpy().tobytes()

def test_fp8_dtype_facts() -> None:
  assert dtypes.fp8s == (d.fp8e4m3, d.fp8e5m2, d.fp8e4m3fnuz, d.fp8e5m2fnuz) == dtypes.fp8_ocp + dtypes.fp8_fnuz
  assert all(dtypes.is_float(x) and x in dtypes.floats and x.itemsize == 1 for x in dtypes.fp8s)
  assert not dtypes.is_int(d.fp8e4m3) and dtypes.finfo(d.fp8e4m3) == (4, 3) and dtypes.finfo(d.fp8e5m2) == (5, 2)
  assert dtypes.max(d.fp8e4m3) == 448.0 and dtypes.min(d.fp8e4m3) == -448.0 and dtypes.max(d.fp8e5m2) == np.inf
  assert d.fp8e4m3.itemsize == 1 and d.fp8e4m3 in dtypes.all
  with pytest.raises(TypeError, match="numpy has no float8_e4m3fn"): to_np_dtype(d.fp8e4m3)

# tinygrad's lattice: fp8s sit between the ints and half/bfloat16 (PyTorch refuses to promote fp8 at all)
FP8_PROMOTE = [P("e4m3_e4m3", d.fp8e4m3, d.fp8e4m3, d.fp8e4m3), P("e4m3_e5m2", d.fp8e4m3, d.fp8e5m2, d.float16),
               P("i32_e4m3", d.int32, d.fp8e4m3, d.fp8e4m3), P("u64_e5m2", d.uint64, d.fp8e5m2, d.fp8e5m2),
               P("bool_e5m2", d.bool, d.fp8e5m2, d.fp8e5m2), P("e4m3_f16", d.fp8e4m3, d.float16, d.float16),
               P("e5m2_bf16", d.fp8e5m2, d.bfloat16, d.bfloat16), P("e4m3_f32", d.fp8e4m3, d.float32, d.float32),
               P("e5m2_f64", d.fp8e5m2, d.float64, d.float64), P("i8_e4m3", d.int8, d.fp8e4m3, d.fp8e4m3)]
@pytest.mark.parametrize("a,b,want", FP8_PROMOTE)
def test_fp8_promotion(a: Any, b: Any, want: Any) -> None:
  from attograd.dtype import least_upper_dtype
  assert least_upper_dtype(a, b) is want and least_upper_dtype(b, a) is want
  assert (Tensor([1], dtype=a) + Tensor([2], dtype=b)).dtype is want
  assert least_upper_dtype(d.int64, d.float16) is d.float16 and least_upper_dtype(d.uint8, d.bfloat16) is d.bfloat16

FP8_OPS = [P("add", lambda x, y: x + y), P("mul", lambda x, y: x * y), P("sub", lambda x, y: x - y),
           P("div", lambda x, y: x / y), P("max", lambda x, y: x.maximum(y)), P("neg", lambda x, y: -x),
           P("exp", lambda x, y: (x * 0.25).exp()), P("sqrt", lambda x, y: x.abs().sqrt()),
           P("where", lambda x, y: (x < y).where(x, y * 3)), P("scalar", lambda x, y: x * 0.3 + 1)]
@pytest.mark.parametrize("dt", FP8)
@pytest.mark.parametrize("fn", FP8_OPS)
def test_fp8_elementwise_in_float32_rounded(device: str, dt: Any, fn: Callable) -> None:
  torch = pytest.importorskip("torch")
  rng = np.random.default_rng(5)
  a, b = (_rounded(rng.uniform(-20, 20, 64).astype(np.float32), dt) for _ in range(2))
  b = np.where(b == 0, 1.0, b).astype(np.float32)
  # PyTorch has no fp8 arithmetic: the reference computes each op in float32 from fp8 values and casts its result to
  # fp8 (Python scalars are fp8 constants), as the kernels do
  td = _torch_dtype(dt)
  class _T:  # a float32 torch tensor holding fp8 values, with attograd's method names
    def __init__(self, t: Any, rnd: bool = True): self.t = t.to(td).float() if rnd else t
    def _c(self, v: Any) -> Any: return v.t if isinstance(v, _T) else float(_rounded(np.array([v]), dt)[0])
    def __add__(self, v: Any) -> _T: return _T(self.t + self._c(v))
    def __sub__(self, v: Any) -> _T: return _T(self.t - self._c(v))
    def __mul__(self, v: Any) -> _T: return _T(self.t * self._c(v))
    def __truediv__(self, v: Any) -> _T: return _T(self.t / self._c(v))
    def __lt__(self, v: Any) -> _T: return _T(self.t < self._c(v), rnd=False)
    def __neg__(self) -> _T: return _T(-self.t)
    def maximum(self, v: Any) -> _T: return _T(torch.maximum(self.t, self._c(v)))
    def exp(self) -> _T: return _T(self.t.exp())
    def abs(self) -> _T: return _T(self.t.abs())
    def sqrt(self) -> _T: return _T(self.t.sqrt())
    def where(self, x: Any, y: Any) -> _T: return _T(torch.where(self.t, self._c(x), self._c(y)))
  got = fn(Tensor(a).cast(dt), Tensor(b).cast(dt))
  assert got.dtype == dt
  want = fn(_T(torch.from_numpy(a)), _T(torch.from_numpy(b))).t.numpy()
  # exp and sqrt may differ from PyTorch's in float32's last bit, which can flip an fp8 rounding: one fp8 step
  tol = 2.0 ** -dtypes.finfo(dt)[1] if fn in (FP8_OPS[6].values[0], FP8_OPS[7].values[0]) else 0
  np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=0)

@pytest.mark.parametrize("dt", FP8)
def test_fp8_reduce_matmul_and_backward(device: str, dt: Any) -> None:
  vals = [1.0, -2.0, 3.5, 0.3125]
  x = Tensor(vals, dtype=dt, requires_grad=True)
  y = (x * 2).sum()
  y.backward()
  assert y.dtype == dt and y.item() == _rounded(np.array([5.625]), dt)[0] and x.grad is not None and x.grad.dtype == dt
  assert x.grad.tolist() == [2.0] * 4
  assert (x @ x).item() == _rounded(np.array([1 + 4 + 12.25 + 0.09765625]), dt)[0]  # products exact in float32
  assert x.max().item() == 3.5 and x.min().item() == -2.0 and x.detach().cumsum(0).dtype == dt
  m = Tensor([[1.0, 2.0], [3.0, 4.0]], dtype=dt, requires_grad=True)
  (m @ m).sum().backward()
  assert m.grad is not None and m.grad.dtype == dt  # ones @ m.T + m.T @ ones, each term exact, the sum rounded
  assert m.grad.tolist() == _rounded(np.array([[7.0, 11.0], [9.0, 13.0]]), dt).tolist()

def test_dtypes_unpickle_by_name_without_eval() -> None:
  # a DType pickles as its repr; unpickling parses that name (a pickle's bytes are not trusted code: it was eval'd)
  import pickle
  from attograd.dtype import _dtype_by_repr
  for d in (dtypes.float32, dtypes.bool, dtypes.fp8e5m2, dtypes.float32.vec(4), dtypes.float32.ptr(16),
            dtypes.half.vec(2).ptr(8)):
    back = pickle.loads(pickle.dumps(d))
    assert back == d and repr(back) == repr(d)
  for bad in ("dtypes.__class__", "__import__('os').getcwd()", "dtypes.float32.vec(x)", "dtypes.float32.__init__(1)",
              "dtypes.float32.ptr(1) or print(1)"):
    with pytest.raises(ValueError, match="not a dtype's repr"): _dtype_by_repr(bad)

def test_invalid_is_one_value_and_fills_nothing(device: str) -> None:
  # tinygrad's Invalid: a singleton (also through pickle) whose dtype is bool, and a fill value meaning "no value yet"
  import pickle
  from attograd.dtype import Invalid, InvalidType
  assert InvalidType() is Invalid and pickle.loads(pickle.dumps(Invalid)) is Invalid and repr(Invalid) == "Invalid"
  assert dtypes.from_py(Invalid) is dtypes.bool
  t = Tensor.full((2, 3), Invalid, dtype=dtypes.int32, device=device)
  assert t.shape == (2, 3) and t.dtype is dtypes.int32 and Tensor.full((4,), Invalid).dtype is dtypes.bool
  t[0] = 7  # an uninitialized buffer: written before it is read
  assert t[0].tolist() == [7, 7, 7]

@pytest.mark.parametrize("dt", [">i4", ">f4", ">f8", ">u2", ">i8"])
def test_big_endian_arrays_keep_their_values(device: str, dt: str) -> None:
  # a NumPy array in the other byte order (as some files store numbers) was read as this machine's: 1 became 16777216
  a = np.array([[1, 2], [300, 4]], dtype=dt)
  np.testing.assert_array_equal(Tensor(a, device=device).numpy(), a.astype(a.dtype.newbyteorder("=")))
  np.testing.assert_array_equal(Tensor(a[:, ::-1], device=device).numpy(), a[:, ::-1])

@pytest.mark.parametrize("val, to", [(2147483000.0, "int32"), (16777217.0, "int64"), (0.1, "float64")])
def test_a_constant_cast_is_the_cast_of_its_own_dtypes_value(device: str, val: float, to: str) -> None:
  # a float32 constant made from a Python float off float32's grid: folding its cast used the Python float
  # (2147483000), where the same value in a buffer casts from its float32 value (2147483008), as NumPy does
  want = np.array([val], np.float32).astype(to)[0]
  assert Tensor(val, dtype=dtypes.float32, device=device).cast(getattr(dtypes, to)).item() == want
  assert Tensor([val], dtype=dtypes.float32, device=device).cast(getattr(dtypes, to)).item() == want
