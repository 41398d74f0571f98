"""Tensor dtypes: promotion (PyTorch/tinygrad rules), Python scalars, casts, bitcasts and DEFAULT_FLOAT."""
from __future__ import annotations
import os, subprocess, sys
from typing import Any, Callable
import numpy as np
import pytest
from helpers import compare
from attograd import Tensor, dtypes
from attograd.dtype import to_np_dtype

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

# ***** Python scalars don't upcast a tensor (they are "weak") *****

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
  P("i32_add_float", d.int32, lambda x: x + 1.5, "default_float"),
  P("i8_mul_float", d.int8, lambda x: x * 0.5, "default_float"),
  P("u8_rsub_float", d.uint8, lambda x: 1.5 - x, "default_float"),
  P("bool_add_int", d.bool, lambda x: x + 1, d.int32),
  P("bool_mul_float", d.bool, lambda x: x * 2.5, "default_float"),
  P("bool_and_bool", d.bool, lambda x: x & True, d.bool),
  P("i32_div_int", d.int32, lambda x: x / 2, "default_float"),
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
  try:
    with np.errstate(all="ignore"): expect = fn(x.numpy())
  except AttributeError: return  # a Tensor-only method: the dtype is what this test is about
  compare(fn(x), expect, atol=1e-3, check_dtype=False)

def test_int_tensor_plus_float_is_default_float(device: str) -> None:
  assert (Tensor([1, 2]) + 1.5).dtype == dtypes.default_float
  assert (Tensor([1, 2]) + 1.5).tolist() == [2.5, 3.5]
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

@pytest.mark.parametrize("env,want", [P("half", "HALF", "float16"), P("double", "DOUBLE", "float64"),
                                      P("float", "FLOAT", "float32")])
def test_default_float_env(env: str, want: str) -> None:
  code = ("from attograd import Tensor, dtypes\n"
          "print(Tensor([1.5]).dtype, (Tensor([1, 2]) / 2).dtype, Tensor.rand(2).dtype, dtypes.default_float)")
  envs = {**os.environ, "DEFAULT_FLOAT": env, "PYTHONPATH": _ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
  r = subprocess.run([sys.executable, "-c", code], env=envs, cwd=_ROOT, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  words = r.stdout.split()
  assert len(words) == 4 and all(want in w for w in words), r.stdout

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
    assert (Tensor([1, 2]) + 0.5).dtype == dtypes.float16
  finally: dtypes.default_float = old
  assert Tensor([1.5]).dtype == old
