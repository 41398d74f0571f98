"""Tensor ops' forward pass against NumPy on every backend: edge shapes, broadcasting, views, exact rounding and
sign cases. Every op x every dtype (with edge values) is the op table's job: test/backend/test_op_table.py."""
from __future__ import annotations
import itertools, math
from typing import Any, Callable
import numpy as np
import pytest
from helpers import compare, cpu_only, helper_test_op, make_inputs
from attograd import Tensor, dtypes
from attograd.dtype import DType

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)
def dt_id(d: Any) -> str: return np.dtype(d).name

# ***** unary elementwise *****

# (name, numpy fn, attograd fn, helper kwargs)
UNARY = [
  P("neg", lambda x: -x, lambda x: -x, {}),
  P("neg_method", np.negative, lambda x: x.neg(), {}),
  P("abs", np.abs, lambda x: x.abs(), {}),
  P("sign", np.sign, lambda x: x.sign(), {}),
  P("exp", np.exp, lambda x: x.exp(), dict(low=-3, high=3, atol=1e-5)),
  P("exp2", np.exp2, lambda x: x.exp2(), dict(low=-3, high=3, atol=1e-5)),
  P("log", np.log, lambda x: x.log(), dict(low=0.05, high=5, atol=1e-5)),
  P("log2", np.log2, lambda x: x.log2(), dict(low=0.05, high=5, atol=1e-5)),
  P("sqrt", np.sqrt, lambda x: x.sqrt(), dict(low=0, high=5)),
  P("rsqrt", lambda x: 1 / np.sqrt(x), lambda x: x.rsqrt(), dict(low=0.1, high=5, atol=1e-5)),
  P("sin", np.sin, lambda x: x.sin(), dict(low=-4, high=4, atol=1e-5)),
  P("cos", np.cos, lambda x: x.cos(), dict(low=-4, high=4, atol=1e-5)),
  P("tan", np.tan, lambda x: x.tan(), dict(low=-1.2, high=1.2, atol=1e-5, rtol=1e-4)),
  P("tanh", np.tanh, lambda x: x.tanh(), dict(low=-4, high=4, atol=1e-5)),
  P("sigmoid", lambda x: 1 / (1 + np.exp(-x)), lambda x: x.sigmoid(), dict(low=-6, high=6, atol=1e-6)),
  P("relu", lambda x: np.maximum(x, 0), lambda x: x.relu(), {}),
  P("floor", np.floor, lambda x: x.floor(), dict(low=-5, high=5)),
  P("ceil", np.ceil, lambda x: x.ceil(), dict(low=-5, high=5)),
  P("trunc", np.trunc, lambda x: x.trunc(), dict(low=-5, high=5)),
  P("round", np.round, lambda x: x.round(), dict(low=-5, high=5)),
  P("clip", lambda x: np.clip(x, -0.5, 0.5), lambda x: x.clip(-0.5, 0.5), {}),
  P("clip_min_only", lambda x: np.maximum(x, 0.25), lambda x: x.clip(0.25, None), {}),
  P("clip_max_only", lambda x: np.minimum(x, 0.25), lambda x: x.clip(None, 0.25), {}),
  P("clamp", lambda x: np.clip(x, -1, 1), lambda x: x.clamp(-1, 1), {}),
  P("isnan", np.isnan, lambda x: x.isnan(), {}),
  P("isinf", np.isinf, lambda x: x.isinf(), {}),
  P("isfinite", np.isfinite, lambda x: x.isfinite(), {}),
  P("logical_not", np.logical_not, lambda x: x.logical_not(), dict(dtype=np.bool_)),
]
SHAPES_1 = [(), (0,), (1,), (7,), (3, 4), (2, 0, 3), (2, 3, 4)]

@pytest.mark.parametrize("shape", SHAPES_1, ids=str)
@pytest.mark.parametrize("np_fn,att_fn,kw", UNARY)
def test_unary(device: str, np_fn: Callable, att_fn: Callable, kw: dict, shape: tuple) -> None:
  helper_test_op([shape], np_fn, att_fn, **kw)

ROUND_VALS = [-3.7, -2.5, -1.5, -0.5, -0.4, 0.0, 0.4, 0.5, 1.2, 1.5, 2.5, 3.5, 4.5, 0.49999997, 1e7 + 0.5]
@pytest.mark.parametrize("np_fn,att_fn", [P("round_half_even", np.round, lambda x: x.round()),
                                          P("floor", np.floor, lambda x: x.floor()),
                                          P("ceil", np.ceil, lambda x: x.ceil()),
                                          P("trunc", np.trunc, lambda x: x.trunc())])
def test_rounding_values(device: str, np_fn: Callable, att_fn: Callable) -> None:
  helper_test_op([ROUND_VALS], np_fn, att_fn)

SPECIAL = [0.0, -0.0, 1.0, -1.0, 100.0, -100.0, np.inf, -np.inf, np.nan]
SPECIAL_NO_NAN = SPECIAL[:-1]
@pytest.mark.parametrize("vals,np_fn,att_fn", [
  P("isnan", SPECIAL, np.isnan, lambda x: x.isnan()),
  P("isinf", SPECIAL, np.isinf, lambda x: x.isinf()),
  P("isinf_pos_only", SPECIAL, np.isposinf, lambda x: x.isinf(detect_negative=False)),
  P("isinf_neg_only", SPECIAL, np.isneginf, lambda x: x.isinf(detect_positive=False)),
  P("isfinite", SPECIAL, np.isfinite, lambda x: x.isfinite()),
  P("exp", SPECIAL, np.exp, lambda x: x.exp()),
  P("log", SPECIAL, np.log, lambda x: x.log()),
  P("sqrt", SPECIAL, np.sqrt, lambda x: x.sqrt()),
  P("abs", SPECIAL, np.abs, lambda x: x.abs()),
  P("neg", SPECIAL, np.negative, lambda x: -x),
  P("tanh", SPECIAL, np.tanh, lambda x: x.tanh()),
  P("sigmoid", SPECIAL, lambda x: 1 / (1 + np.exp(-x)), lambda x: x.sigmoid()),
  P("floor", SPECIAL, np.floor, lambda x: x.floor()),
  P("ceil", SPECIAL, np.ceil, lambda x: x.ceil()),
  P("relu", SPECIAL_NO_NAN, lambda x: np.maximum(x, 0), lambda x: x.relu()),
  P("sign", SPECIAL_NO_NAN, np.sign, lambda x: x.sign()),
  P("logical_not", SPECIAL, np.logical_not, lambda x: x.logical_not()),
  P("lt_nan", SPECIAL, lambda x: x < 1.0, lambda x: x < 1.0),
  P("eq_self", SPECIAL, lambda x: x == x, lambda x: x == x),
  P("ne_self", SPECIAL, lambda x: x != x, lambda x: x != x),
])
def test_special_values(device: str, vals: list, np_fn: Callable, att_fn: Callable) -> None:
  helper_test_op([vals], np_fn, att_fn, atol=1e-6)

# ***** binary elementwise *****

F, I, H, D, U8, I64, B = np.float32, np.int32, np.float16, np.float64, np.uint8, np.int64, np.bool_
# (name, numpy fn, attograd fn, dtypes it runs on, helper kwargs)
BINARY = [
  P("add", lambda a, b: a + b, lambda a, b: a + b, [F, I, H, D, U8, I64], {}),
  P("add_method", np.add, lambda a, b: a.add(b), [F, I], {}),
  P("sub", lambda a, b: a - b, lambda a, b: a - b, [F, I, H, D, U8, I64], {}),
  P("sub_method", np.subtract, lambda a, b: a.sub(b), [F, I], {}),
  P("mul", lambda a, b: a * b, lambda a, b: a * b, [F, I, H, D, U8, I64], {}),
  P("mul_method", np.multiply, lambda a, b: a.mul(b), [F, I], {}),
  P("div", lambda a, b: a / b, lambda a, b: a / b, [F, I, H, D], dict(nonzero=True, atol=1e-5)),
  P("div_method", np.divide, lambda a, b: a.div(b), [F, I], dict(nonzero=True, atol=1e-5)),
  P("floordiv", lambda a, b: a // b, lambda a, b: a // b, [F, I, I64, U8], dict(nonzero=True)),
  P("mod", lambda a, b: a % b, lambda a, b: a % b, [F, I, I64, U8], dict(nonzero=True, atol=1e-5)),
  P("maximum", np.maximum, lambda a, b: a.maximum(b), [F, I, H, D, U8, I64], {}),
  P("minimum", np.minimum, lambda a, b: a.minimum(b), [F, I, H, D, U8, I64], {}),
  P("lt", lambda a, b: a < b, lambda a, b: a < b, [F, I, H, U8, B], {}),
  P("le", lambda a, b: a <= b, lambda a, b: a <= b, [F, I, H, U8], {}),
  P("gt", lambda a, b: a > b, lambda a, b: a > b, [F, I, H, U8], {}),
  P("ge", lambda a, b: a >= b, lambda a, b: a >= b, [F, I, H, U8], {}),
  P("eq", lambda a, b: a == b, lambda a, b: a == b, [F, I, H, U8, B], dict(low=-3, high=3)),
  P("ne", lambda a, b: a != b, lambda a, b: a != b, [F, I, H, U8, B], dict(low=-3, high=3)),
]
BIN_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((), (3,)), ((2, 3), ()), ((), ()),
              ((2, 0, 3), (1, 3)), ((0,), (0,)), ((1,), (5, 1)), ((2, 1, 4), (3, 1))]

@pytest.mark.parametrize("shapes", BIN_SHAPES, ids=str)
@pytest.mark.parametrize("np_fn,att_fn,dts,kw", BINARY)
def test_binary(device: str, np_fn: Callable, att_fn: Callable, dts: list, kw: dict, shapes: tuple) -> None:
  helper_test_op(list(shapes), np_fn, att_fn, **kw)

def test_binary_int_values_exact(device: str) -> None:
  # one case per sign combination, so floor semantics of // and % are pinned down without relying on random data
  a = [7, -7, 7, -7, 0, 1, -1, 6, -6]
  b = [2, 2, -2, -2, 3, -3, 3, 3, -3]
  helper_test_op([a, b], lambda x, y: x // y, dtype=np.int32)
  helper_test_op([a, b], lambda x, y: x % y, dtype=np.int32)
  helper_test_op([a, b], lambda x, y: x // y, dtype=np.float32)
  helper_test_op([a, b], lambda x, y: x % y, dtype=np.float32)
  helper_test_op([[7.5, -7.5, 7.5, -7.5], [2.0, 2.0, -2.0, -2.0]], lambda x, y: x // y)
  helper_test_op([[7.5, -7.5, 7.5, -7.5], [2.0, 2.0, -2.0, -2.0]], lambda x, y: x % y)

def _wrap(v: int, dtype: Any) -> int:
  """A Python int wrapped to the range of an integer dtype."""
  info = np.iinfo(dtype)
  return (v - int(info.min)) % (int(info.max) - int(info.min) + 1) + int(info.min)

@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64], ids=dt_id)
def test_int_division_edges(device: str, dtype: Any) -> None:
  # INT_MIN // -1 and INT_MIN % -1 trapped (SIGFPE) in C; NumPy wraps to INT_MIN and gives 0. x // 0 and x % 0 give
  # NumPy's 0 too (PyTorch raises for ints; NumPy's values were chosen and are documented in docs/numerics.md)
  lo = int(np.iinfo(dtype).min)
  a, b = [lo, lo, lo, lo, 7, -7, 0, lo + 1, -1], [-1, 1, 2, -2, 0, 0, 0, -1, -1]
  helper_test_op([a, b], lambda x, y: x // y, dtype=dtype)
  helper_test_op([a, b], lambda x, y: x % y, dtype=dtype)
  helper_test_op([a], lambda x: x // -1, dtype=dtype)
  helper_test_op([a], lambda x: x % -1, dtype=dtype)
  helper_test_op([a], lambda x: np.zeros_like(x) if isinstance(x, np.ndarray) else x // 0, dtype=dtype)
  trunc = [0 if d == 0 else abs(n) // abs(d) * (1 if (n < 0) == (d < 0) else -1) for n, d in zip(a, b)]
  got = Tensor(np.array(a, dtype)).div(Tensor(np.array(b, dtype)), rounding_mode="trunc")
  assert got.tolist() == [_wrap(v, dtype) for v in trunc]  # INT_MIN / -1 wraps to INT_MIN
  with np.errstate(all="ignore"): want_fmod = np.fmod(np.array(a, dtype), np.array(b, dtype))
  assert Tensor(np.array(a, dtype)).fmod(Tensor(np.array(b, dtype))).tolist() == want_fmod.tolist()

@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32], ids=dt_id)
def test_raw_int_division_is_total(device: str, dtype: Any) -> None:
  # the IR's own IDIV/MOD (no zero-divisor guard from the Tensor layer): C truncation, x/0 == 0, MIN/-1 wraps
  from attograd.uop.ops import Ops
  lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
  a, b = [7, lo, lo, hi, 5, lo, 0], [-2, -1, 1, -1, 0, 0, 3]
  if lo == 0: a, b = [7, hi, 5, 0, hi], [2, 1, 0, 3, hi]
  x, y = Tensor(np.array(a, dtype)), Tensor(np.array(b, dtype))
  q = [0 if d == 0 else abs(n) // abs(d) * (1 if (n < 0) == (d < 0) else -1) for n, d in zip(a, b)]
  assert x._alu(Ops.IDIV, y).tolist() == [_wrap(v, dtype) for v in q]
  assert x._alu(Ops.MOD, y).tolist() == [0 if d == 0 else _wrap(n - v * d, dtype) for n, d, v in zip(a, b, q)]

@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64], ids=dt_id)
def test_shifts_by_the_width_or_more(device: str, dtype: Any) -> None:
  # C leaves these undefined (x86 uses the count mod the width); NumPy shifts every bit out: 0, or -1 for x < 0 >> n
  bits, signed = np.dtype(dtype).itemsize * 8, np.dtype(dtype).kind == "i"
  a = [1, 5, -5, -1, 100, 3, 3, 3] if signed else [1, 5, 200, 255, 100, 3, 3, 3]
  b = [bits, bits + 8, 40, -1 if signed else 200, 2, bits - 1, 0, -40 if signed else bits * 2]
  helper_test_op([a, b], np.left_shift, lambda x, y: x << y, dtype=dtype)
  helper_test_op([a, b], np.right_shift, lambda x, y: x >> y, dtype=dtype)
  for n in (bits, bits + 3, 70):
    helper_test_op([a], lambda x: np.left_shift(x, dtype(n % 256 if bits == 8 else n)) if isinstance(x, np.ndarray)
                   else x << (n % 256 if bits == 8 else n), dtype=dtype)
    helper_test_op([a], lambda x: np.right_shift(x, dtype(n % 256 if bits == 8 else n)) if isinstance(x, np.ndarray)
                   else x >> (n % 256 if bits == 8 else n), dtype=dtype)

POW = [
  P("float_float", [(3, 4), (3, 4)], lambda a, b: a ** b, dict(low=[0.1, -2], high=[2, 2], atol=1e-5)),
  P("float_broadcast", [(3, 4), (4,)], lambda a, b: a ** b, dict(low=[0.1, -2], high=[2, 2], atol=1e-5)),
  P("pow_method", [(3, 4), (3, 4)], lambda a, b: np.power(a, b) if isinstance(a, np.ndarray) else a.pow(b),
    dict(low=[0.1, -2], high=[2, 2], atol=1e-5)),
  P("float_scalar_2", [(3, 4)], lambda a: a ** 2, {}),
  P("float_scalar_3_negbase", [(3, 4)], lambda a: a ** 3, dict(atol=1e-5)),
  P("float_scalar_half", [(3, 4)], lambda a: a ** 0.5, dict(low=0, high=4)),
  P("float_scalar_neg", [(3, 4)], lambda a: a ** -1.5, dict(low=0.2, high=4, atol=1e-5)),
  P("float_scalar_0", [(3, 4)], lambda a: a ** 0, {}),
  P("rpow_float", [(3, 4)], lambda a: 2.0 ** a, dict(atol=1e-5)),
  P("rpow_int_base", [(3, 4)], lambda a: 3 ** a, dict(atol=1e-5)),
  P("int_int", [(3, 4), (3, 4)], lambda a, b: a ** b, dict(dtype=np.int32, low=[-4, 0], high=[5, 4])),
  P("int_scalar", [(3, 4)], lambda a: a ** 3, dict(dtype=np.int32, low=-5, high=5)),
  P("int_rpow", [(3, 4)], lambda a: 2 ** a, dict(dtype=np.int32, low=0, high=10)),
]
@pytest.mark.parametrize("shapes,fn,kw", POW)
def test_pow(device: str, shapes: list, fn: Callable, kw: dict) -> None: helper_test_op(shapes, fn, **kw)

# python scalars on either side: fn works on ndarray and Tensor alike
SCALAR = [
  P("f_add", lambda a: a + 2, F, {}), P("f_radd", lambda a: 2 + a, F, {}),
  P("f_sub", lambda a: a - 1.5, F, {}), P("f_rsub", lambda a: 1.5 - a, F, {}),
  P("f_mul", lambda a: a * 3, F, {}), P("f_rmul", lambda a: 2.5 * a, F, {}),
  P("f_div", lambda a: a / 4, F, {}), P("f_rdiv", lambda a: 4 / a, F, dict(low=0.5, high=3)),
  P("f_floordiv", lambda a: a // 0.7, F, {}), P("f_rfloordiv", lambda a: 7 // a, F, dict(low=0.5, high=3)),
  P("f_mod", lambda a: a % 0.7, F, dict(atol=1e-5)), P("f_rmod", lambda a: 3 % a, F, dict(low=0.5, high=3, atol=1e-5)),
  P("f_lt", lambda a: a < 0.5, F, {}), P("f_rlt", lambda a: 0.5 < a, F, {}),
  P("f_ge", lambda a: a >= 0, F, {}), P("f_eq", lambda a: a == 1.0, F, dict(low=0, high=3)),
  P("f_ne", lambda a: a != 0, F, {}), P("f_neg_mul", lambda a: -a * 2, F, {}),
  P("f_maximum", lambda a: np.maximum(a, 0.5) if isinstance(a, np.ndarray) else a.maximum(0.5), F, {}),
  P("f_minimum", lambda a: np.minimum(a, 0.5) if isinstance(a, np.ndarray) else a.minimum(0.5), F, {}),
  P("i_add", lambda a: a + 2, I, {}), P("i_radd", lambda a: 2 + a, I, {}),
  P("i_sub", lambda a: a - 3, I, {}), P("i_rsub", lambda a: 3 - a, I, {}),
  P("i_mul", lambda a: a * 4, I, {}), P("i_rmul", lambda a: 4 * a, I, {}),
  P("i_floordiv", lambda a: a // 3, I, {}), P("i_floordiv_neg", lambda a: a // -3, I, {}),
  P("i_rfloordiv", lambda a: 7 // a, I, dict(low=1, high=9)),
  P("i_rfloordiv_neg", lambda a: -7 // a, I, dict(low=1, high=9)),
  P("i_mod", lambda a: a % 3, I, {}), P("i_mod_neg", lambda a: a % -3, I, {}),
  P("i_rmod", lambda a: 7 % a, I, dict(low=1, high=9)),
  P("i_lt", lambda a: a < 3, I, {}), P("i_eq", lambda a: a == 2, I, dict(low=0, high=4)),
  P("i_div", lambda a: a / 2, I, {}), P("i_rdiv", lambda a: 10 / a, I, dict(low=1, high=9, atol=1e-5)),
  P("i_add_float", lambda a: a + 1.5, I, {}), P("i_mul_float", lambda a: a * 2.5, I, {}),
  P("h_mul", lambda a: a * 2.5, H, {}), P("h_add", lambda a: a + 1, H, {}),
  P("u8_add", lambda a: a + 3, U8, {}), P("u8_mul", lambda a: a * 2, U8, {}),
  P("b_and_scalar", lambda a: a & True, B, {}), P("b_or_scalar", lambda a: a | False, B, {}),
]
@pytest.mark.parametrize("fn,dtype,kw", SCALAR)
@pytest.mark.parametrize("shape", [(), (3, 4), (0,)], ids=str)
def test_scalar_operand(device: str, fn: Callable, dtype: Any, kw: dict, shape: tuple) -> None:
  helper_test_op([shape], fn, dtype=dtype, **kw)

# ***** where, lerp, bitwise, shifts, logical *****

WHERE = [
  P("same_shape", [(3, 4), (3, 4), (3, 4)], lambda c, x, y: np.where(c, x, y), lambda c, x, y: c.where(x, y)),
  P("broadcast", [(3, 1), (4,), ()], lambda c, x, y: np.where(c, x, y), lambda c, x, y: c.where(x, y)),
  P("static_call", [(2, 3), (2, 3), (1, 3)], lambda c, x, y: np.where(c, x, y), lambda c, x, y: Tensor.where(c, x, y)),
  P("scalar_y", [(3, 4), (3, 4)], lambda c, x: np.where(c, x, 0.0), lambda c, x: c.where(x, 0.0)),
  P("scalar_x", [(3, 4), (3, 4)], lambda c, y: np.where(c, -1.5, y), lambda c, y: c.where(-1.5, y)),
  P("both_scalar", [(3, 4)], lambda c: np.where(c, 2, 3), lambda c: c.where(2, 3)),
  P("scalar_cond", [(), (3,), (3,)], lambda c, x, y: np.where(c, x, y), lambda c, x, y: c.where(x, y)),
  P("empty", [(0, 3), (0, 3), (3,)], lambda c, x, y: np.where(c, x, y), lambda c, x, y: c.where(x, y)),
]
@pytest.mark.parametrize("shapes,np_fn,att_fn", WHERE)
def test_where(device: str, shapes: list, np_fn: Callable, att_fn: Callable) -> None:
  helper_test_op(shapes, np_fn, att_fn, dtype=[np.bool_] + [np.float32] * (len(shapes) - 1))

@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.uint8, np.bool_], ids=dt_id)
def test_where_dtypes(device: str, dtype: Any) -> None:
  helper_test_op([(3, 4), (3, 4), (3, 4)], lambda c, x, y: np.where(c, x, y), lambda c, x, y: c.where(x, y),
                 dtype=[np.bool_, dtype, dtype])

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.uint8], ids=str)
def test_where_non_bool_cond_raises(device: str, dtype: DType) -> None:
  # as tinygrad and PyTorch: the condition must be bool; "nonzero" is spelled out, and the error says how
  c = Tensor([0, 1, 2, 0], dtype=dtype, device=device)
  with pytest.raises(RuntimeError, match=f"where: the condition must be a bool tensor, got {dtype}"): c.where(1, 0)
  with pytest.raises(TypeError, match="condition must be a bool"): c.where(Tensor([1.0] * 4, device=device), 0.0)
  assert (c != 0).where(1, 0).tolist() == [0, 1, 1, 0]

LERP = [
  P("scalar_weight", [(3, 4), (3, 4)], lambda a, b: a + (b - a) * 0.3, lambda a, b: a.lerp(b, 0.3)),
  P("tensor_weight", [(3, 4), (3, 4), (3, 4)], lambda a, b, w: a + (b - a) * w, lambda a, b, w: a.lerp(b, w)),
  P("broadcast", [(3, 4), (4,), (3, 1)], lambda a, b, w: a + (b - a) * w, lambda a, b, w: a.lerp(b, w)),
  P("scalar", [(), ()], lambda a, b: a + (b - a) * 0.5, lambda a, b: a.lerp(b, 0.5)),
]
@pytest.mark.parametrize("shapes,np_fn,att_fn", LERP)
def test_lerp(device: str, shapes: list, np_fn: Callable, att_fn: Callable) -> None:
  helper_test_op(shapes, np_fn, att_fn, atol=1e-5)

BITWISE = [
  P("and", lambda a, b: a & b, lambda a, b: a & b), P("or", lambda a, b: a | b, lambda a, b: a | b),
  P("xor", lambda a, b: a ^ b, lambda a, b: a ^ b),
  P("and_method", np.bitwise_and, lambda a, b: a.bitwise_and(b)),
  P("or_method", np.bitwise_or, lambda a, b: a.bitwise_or(b)),
  P("xor_method", np.bitwise_xor, lambda a, b: a.bitwise_xor(b)),
]
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.int64], ids=dt_id)
@pytest.mark.parametrize("shapes", [[(3, 4), (3, 4)], [(3, 1), (4,)], [(), (5,)]], ids=str)
@pytest.mark.parametrize("np_fn,att_fn", BITWISE)
def test_bitwise(device: str, np_fn: Callable, att_fn: Callable, shapes: list, dtype: Any) -> None:
  helper_test_op(shapes, np_fn, att_fn, dtype=dtype)

@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.int64], ids=dt_id)
@pytest.mark.parametrize("np_fn,att_fn", [P("invert", lambda a: ~a, lambda a: ~a),
                                          P("bitwise_not", np.invert, lambda a: a.bitwise_not()),
                                          P("and_scalar", lambda a: a & 3, lambda a: a & 3),
                                          P("or_scalar", lambda a: a | 8, lambda a: a | 8),
                                          P("rxor_scalar", lambda a: 5 ^ a, lambda a: 5 ^ a)])
def test_bitwise_unary_and_scalar(device: str, np_fn: Callable, att_fn: Callable, dtype: Any) -> None:
  helper_test_op([(3, 4)], np_fn, att_fn, dtype=dtype)

SHIFTS = [
  P("lshift", lambda a: a << 2), P("rshift", lambda a: a >> 1), P("lshift_0", lambda a: a << 0),
  P("rshift_big", lambda a: a >> 3),
  P("lshift_method", lambda a: np.left_shift(a, 3) if isinstance(a, np.ndarray) else a.lshift(3)),
  P("rshift_method", lambda a: np.right_shift(a, 2) if isinstance(a, np.ndarray) else a.rshift(2)),
]
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.uint32, np.int64], ids=dt_id)
@pytest.mark.parametrize("fn", SHIFTS)
def test_shifts(device: str, fn: Callable, dtype: Any) -> None:
  helper_test_op([(3, 5)], fn, dtype=dtype, low=0, high=30)

@pytest.mark.parametrize("vals,dtype", [P("bool", [True, False, True], np.bool_),
                                        P("float", [0.0, 1.5, -2.0, 0.0], np.float32),
                                        P("int", [0, 3, -1, 0], np.int32)])
def test_logical_not(device: str, vals: list, dtype: Any) -> None:
  helper_test_op([vals], np.logical_not, lambda x: x.logical_not(), dtype=dtype)

# ***** in-place operators *****

def _inplace_float(x: Any, y: Any) -> Any:
  x += y
  x -= 0.5
  x *= y
  x /= 2.0
  return x

def _inplace_int(x: Any, y: Any) -> Any:
  x += y
  x -= 3
  x *= 2
  x //= 3
  x %= 5
  x &= 6
  x |= 1
  x ^= 2
  return x

@pytest.mark.parametrize("fn,dtype", [P("float", _inplace_float, np.float32), P("int", _inplace_int, np.int32)])
@pytest.mark.parametrize("shapes", [[(3, 4), (3, 4)], [(3, 4), (4,)], [(), ()]], ids=str)
def test_inplace(device: str, fn: Callable, dtype: Any, shapes: list) -> None:
  helper_test_op(shapes, fn, dtype=dtype, nonzero=True, atol=1e-5)

def test_inplace_keeps_working_in_a_loop(device: str) -> None:
  x, a = Tensor([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0], dtype=np.float32)
  for i in range(5):
    x += i
    x *= 0.5
    a += i
    a *= 0.5
  compare(x, a)

# ***** reductions *****

# (name, op, numpy fn(x, axis, keepdim), attograd fn(t, axis, keepdim), helper kwargs)
REDUCE = [
  P("sum", "sum", lambda x, ax, kd: np.sum(x, axis=ax, keepdims=kd), lambda t, ax, kd: t.sum(ax, keepdim=kd),
    dict(atol=1e-5)),
  P("mean", "mean", lambda x, ax, kd: np.mean(x, axis=ax, keepdims=kd), lambda t, ax, kd: t.mean(ax, keepdim=kd),
    dict(atol=1e-5)),
  P("max", "max", lambda x, ax, kd: np.max(x, axis=ax, keepdims=kd), lambda t, ax, kd: t.max(ax, keepdim=kd), {}),
  P("min", "min", lambda x, ax, kd: np.min(x, axis=ax, keepdims=kd), lambda t, ax, kd: t.min(ax, keepdim=kd), {}),
  P("prod", "prod", lambda x, ax, kd: np.prod(x, axis=ax, keepdims=kd), lambda t, ax, kd: t.prod(ax, keepdim=kd),
    dict(low=0.5, high=1.5, atol=1e-5)),
  P("std", "std", lambda x, ax, kd: np.std(x, axis=ax, keepdims=kd, ddof=1), lambda t, ax, kd: t.std(ax, keepdim=kd),
    dict(atol=1e-5)),
  P("var", "var", lambda x, ax, kd: np.var(x, axis=ax, keepdims=kd, ddof=1), lambda t, ax, kd: t.var(ax, keepdim=kd),
    dict(atol=1e-5)),
  P("logsumexp", "logsumexp", lambda x, ax, kd: np.log(np.sum(np.exp(x), axis=ax, keepdims=kd)),
    lambda t, ax, kd: t.logsumexp(ax, keepdim=kd), dict(atol=1e-5)),
  P("any", "any", lambda x, ax, kd: np.any(x, axis=ax, keepdims=kd), lambda t, ax, kd: t.any(ax, keepdim=kd),
    dict(dtype=np.bool_)),
  P("all", "all", lambda x, ax, kd: np.all(x, axis=ax, keepdims=kd), lambda t, ax, kd: t.all(ax, keepdim=kd),
    dict(dtype=np.bool_)),
]
NO_IDENTITY = {"max", "min", "logsumexp"}  # NumPy refuses to reduce an empty axis without an identity
REDUCE_AXES = [None, 0, 1, -1, (0, 2), (-1, -2), (0, 1, 2)]

def _reduce_cases() -> list:
  cases = [P(f"{ax}-{kd}", (2, 3, 4), ax, kd) for ax, kd in itertools.product(REDUCE_AXES, [False, True])]
  cases += [P("scalar-None", (), None, False), P("scalar-None-keep", (), None, True), P("len1", (1,), 0, False),
            P("vec", (7,), 0, True), P("mid1", (4, 1, 3), 1, False), P("empty-None", (0,), None, False),
            P("empty-ax0", (2, 0, 3), 0, False), P("empty-ax1", (2, 0, 3), 1, True),
            P("empty-all", (2, 0, 3), None, False)]
  return cases

@pytest.mark.parametrize("shape,axis,keepdim", _reduce_cases())
@pytest.mark.parametrize("op,np_fn,att_fn,kw", REDUCE)
def test_reduce(device: str, op: str, np_fn: Callable, att_fn: Callable, kw: dict, shape: tuple, axis: Any,
                keepdim: bool) -> None:
  n_out = np.empty(shape).sum(axis=axis).size
  per_out = int(np.prod(shape)) // n_out if n_out else 0
  if n_out and not per_out and op in NO_IDENTITY | {"std", "var", "mean"}: pytest.skip("NumPy: empty reduction")
  if n_out and per_out < 2 and op in ("std", "var"): pytest.skip("needs >= 2 elements per output")
  helper_test_op([shape], lambda x: np_fn(x, axis, keepdim), lambda t: att_fn(t, axis, keepdim), **kw)

def test_mean_of_empty_is_nan(device: str) -> None:
  assert np.isnan(Tensor.zeros(0).mean().item())
  assert Tensor.zeros(2, 0).mean(1).shape == (2,)

def test_reduce_empty_axis_sum_default(device: str) -> None:
  # sum/prod over an empty axis give the identity; any/all give False/True
  helper_test_op([(2, 0, 3)], lambda x: x.sum(axis=1), lambda t: t.sum(1))
  helper_test_op([(2, 0, 3)], lambda x: x.prod(axis=1), lambda t: t.prod(1))
  helper_test_op([(2, 0)], lambda x: x.any(axis=1), lambda t: t.any(1), dtype=np.bool_)
  helper_test_op([(2, 0)], lambda x: x.all(axis=1), lambda t: t.all(1), dtype=np.bool_)

def test_reduce_empty_axis_max_min_identity(device: str) -> None:
  # tinygrad's rule (NumPy and PyTorch raise): max and min of an empty dim give their identity
  assert Tensor([]).max().item() == -math.inf and Tensor([]).min().item() == math.inf
  assert Tensor.zeros(2, 0).max(1).tolist() == [-math.inf, -math.inf]
  assert Tensor.zeros(0, 2, dtype=dtypes.int8).max(0).tolist() == [-128, -128]
  assert Tensor.zeros(0, 2, dtype=dtypes.uint8).min(0).tolist() == [255, 255]

def test_sum_noop_axis(device: str) -> None:
  helper_test_op([(2, 3)], lambda x: np.sum(x, axis=()), lambda t: t.sum(axis=()))

@pytest.mark.parametrize("correction", [0, 1, 2], ids=str)
@pytest.mark.parametrize("op", ["std", "var"])
def test_std_var_correction(device: str, op: str, correction: int) -> None:
  np_fn = np.std if op == "std" else np.var
  helper_test_op([(3, 5)], lambda x: np_fn(x, axis=1, ddof=correction),
                 lambda t: getattr(t, op)(1, correction=correction), atol=1e-5)
  helper_test_op([(3, 5)], lambda x: np_fn(x, ddof=correction), lambda t: getattr(t, op)(correction=correction),
                 atol=1e-5)

def test_std_var_default_is_unbiased(device: str) -> None:
  t = Tensor([1.0, 2.0, 3.0, 4.0])
  np.testing.assert_allclose(t.var().item(), 5 / 3, rtol=1e-6)
  np.testing.assert_allclose(t.std().item(), np.sqrt(5 / 3), rtol=1e-6)

def test_logsumexp_large_values_stable(device: str) -> None:
  helper_test_op([[[1000.0, 1000.0, 990.0], [-1000.0, -1000.0, -1010.0]]],
                 lambda x: np.max(x, 1) + np.log(np.sum(np.exp(x - np.max(x, 1, keepdims=True)), 1)),
                 lambda t: t.logsumexp(1), atol=1e-4)

# attograd's result dtypes (tinygrad's): sum widens small ints, mean of ints is float, argmax is int32
@pytest.mark.parametrize("dtype,op,want", [
  P("sum_int8", np.int8, "sum", dtypes.int32), P("sum_int16", np.int16, "sum", dtypes.int32),
  P("sum_uint8", np.uint8, "sum", dtypes.uint32), P("sum_bool", np.bool_, "sum", dtypes.int32),
  P("sum_int32", np.int32, "sum", dtypes.int32), P("sum_int64", np.int64, "sum", dtypes.int64),
  P("sum_half", np.float16, "sum", dtypes.float16), P("sum_float", np.float32, "sum", dtypes.float32),
  P("max_int8", np.int8, "max", dtypes.int8), P("max_half", np.float16, "max", dtypes.float16),
  P("max_bool", np.bool_, "max", dtypes.bool),
  P("mean_int32", np.int32, "mean", dtypes.float32), P("mean_half", np.float16, "mean", dtypes.float16),
  P("argmax_float", np.float32, "argmax", dtypes.int32), P("argmin_int64", np.int64, "argmin", dtypes.int32),
  P("any_float", np.float32, "any", dtypes.bool), P("all_int", np.int32, "all", dtypes.bool),
])
def test_reduce_result_dtype(device: str, dtype: Any, op: str, want: Any) -> None:
  t = Tensor(make_inputs([(3, 4)], dtype=dtype)[0])
  want = dtypes.default_float if want is dtypes.float32 and op == "mean" else want
  assert getattr(t, op)().dtype == want
  assert getattr(t, op)(axis=1).dtype == want

ARG = [P("argmax", lambda x, ax, kd: np.argmax(x, axis=ax, keepdims=kd), lambda t, ax, kd: t.argmax(ax, keepdim=kd)),
       P("argmin", lambda x, ax, kd: np.argmin(x, axis=ax, keepdims=kd), lambda t, ax, kd: t.argmin(ax, keepdim=kd))]
@pytest.mark.parametrize("shape,axis,keepdim", [P("all", (2, 3, 4), None, False), P("ax0", (2, 3, 4), 0, False),
                                                P("ax1k", (2, 3, 4), 1, True), P("neg", (2, 3, 4), -1, False),
                                                P("vec", (7,), 0, False), P("len1", (1,), None, False),
                                                P("scalar", (), None, False), P("mid1", (3, 1, 2), 1, False)])
@pytest.mark.parametrize("np_fn,att_fn", ARG)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16], ids=dt_id)
def test_argmax_argmin(device: str, np_fn: Callable, att_fn: Callable, shape: tuple, axis: Any, keepdim: bool,
                       dtype: Any) -> None:
  helper_test_op([shape], lambda x: np_fn(x, axis, keepdim), lambda t: att_fn(t, axis, keepdim), dtype=dtype,
                 exact_dtype=False)

def test_argmax_ties_first_index(device: str) -> None:
  helper_test_op([[1, 3, 3, 2, 3]], np.argmax, lambda t: t.argmax(), dtype=np.int32, exact_dtype=False)
  helper_test_op([[2, 1, 5, 1, 1]], np.argmin, lambda t: t.argmin(), dtype=np.int32, exact_dtype=False)
  helper_test_op([[[1, 3, 3], [4, 4, 0]]], lambda x: np.argmax(x, 1), lambda t: t.argmax(1), exact_dtype=False)
  helper_test_op([[-np.inf, 0.0, np.inf, np.inf]], np.argmax, lambda t: t.argmax(), exact_dtype=False)

@pytest.mark.parametrize("shape,axis", [P("ax0", (3, 4), 0), P("ax1", (3, 4), 1), P("neg", (3, 4), -1),
                                        P("vec", (6,), 0), P("3d", (2, 3, 4), 1), P("len1", (1, 5), 0),
                                        P("empty", (2, 0), 0)])
@pytest.mark.parametrize("np_fn,att_fn,kw", [
  P("cumsum", lambda x, ax: np.cumsum(x, axis=ax), lambda t, ax: t.cumsum(ax), dict(atol=1e-5)),
  P("cumprod", lambda x, ax: np.cumprod(x, axis=ax), lambda t, ax: t.cumprod(ax), dict(low=0.5, high=1.5, atol=1e-5)),
  P("cummax", lambda x, ax: np.maximum.accumulate(x, axis=ax), lambda t, ax: _values(t.cummax(ax)), {}),
])
def test_cumulative(device: str, np_fn: Callable, att_fn: Callable, kw: dict, shape: tuple, axis: int) -> None:
  helper_test_op([shape], lambda x: np_fn(x, axis), lambda t: att_fn(t, axis), **kw)

def _values(r: Any) -> Any: return r[0] if isinstance(r, tuple) else r  # cummax may return (values, indices)

@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.uint8], ids=dt_id)
def test_cumulative_dtypes(device: str, dtype: Any) -> None:
  helper_test_op([(3, 4)], lambda x: np.cumsum(x, axis=1), lambda t: t.cumsum(1), dtype=dtype, exact_dtype=False)
  helper_test_op([(3, 4)], lambda x: np.maximum.accumulate(x, axis=0), lambda t: _values(t.cummax(0)), dtype=dtype)

def test_cumsum_default_axis(device: str) -> None:
  helper_test_op([(3, 4)], lambda x: np.cumsum(x, axis=0), lambda t: t.cumsum(), atol=1e-5)

def test_cumsum_large_cpu(device: str) -> None:
  cpu_only(device)
  helper_test_op([(3, 1000)], lambda x: np.cumsum(x, axis=1), lambda t: t.cumsum(1), atol=1e-3, rtol=1e-4)

@pytest.mark.parametrize("shape", [(1000,), (64, 65), (3, 257, 5)], ids=str)
def test_reduce_large_cpu(device: str, shape: tuple) -> None:
  cpu_only(device)
  helper_test_op([shape], lambda x: x.sum(axis=-1), lambda t: t.sum(-1), atol=1e-3, rtol=1e-4)
  helper_test_op([shape], lambda x: x.max(), lambda t: t.max())
  helper_test_op([shape], lambda x: x.sum(), lambda t: t.sum(), atol=1e-2, rtol=1e-4)

# ***** movement *****

# (name, input shape, numpy fn, attograd fn)
MOVEMENT = [
  P("reshape", (3, 4), lambda x: x.reshape(2, 6), lambda t: t.reshape(2, 6)),
  P("reshape_tuple", (3, 4), lambda x: x.reshape(4, 3), lambda t: t.reshape((4, 3))),
  P("reshape_neg1", (3, 4), lambda x: x.reshape(-1), lambda t: t.reshape(-1)),
  P("reshape_neg1_mid", (2, 3, 4), lambda x: x.reshape(2, -1, 2), lambda t: t.reshape(2, -1, 2)),
  P("reshape_scalar_up", (), lambda x: x.reshape(1, 1), lambda t: t.reshape(1, 1)),
  P("reshape_to_scalar", (1,), lambda x: x.reshape(()), lambda t: t.reshape(())),
  P("reshape_empty", (0, 3), lambda x: x.reshape(3, 0), lambda t: t.reshape(3, 0)),
  P("view", (3, 4), lambda x: x.reshape(4, 3), lambda t: t.view(4, 3)),
  P("view_neg1", (3, 4), lambda x: x.reshape(-1, 2), lambda t: t.view(-1, 2)),
  P("flatten", (2, 3, 4), lambda x: x.reshape(-1), lambda t: t.flatten()),
  P("flatten_start", (2, 3, 4), lambda x: x.reshape(2, -1), lambda t: t.flatten(1)),
  P("flatten_range", (2, 3, 4), lambda x: x.reshape(6, 4), lambda t: t.flatten(0, 1)),
  P("flatten_scalar", (), lambda x: x.reshape(1), lambda t: t.flatten()),
  P("unflatten", (3, 4), lambda x: x.reshape(3, 2, 2), lambda t: t.unflatten(1, (2, 2))),
  P("unflatten_neg1", (6, 2), lambda x: x.reshape(2, 3, 2), lambda t: t.unflatten(0, (2, -1))),
  P("unflatten_negdim", (3, 4), lambda x: x.reshape(3, 4, 1), lambda t: t.unflatten(-1, (4, 1))),
  P("squeeze_all", (1, 3, 1, 4), lambda x: np.squeeze(x), lambda t: t.squeeze()),
  P("squeeze_dim", (1, 3, 1, 4), lambda x: np.squeeze(x, 2), lambda t: t.squeeze(2)),
  P("squeeze_neg", (3, 1), lambda x: np.squeeze(x, -1), lambda t: t.squeeze(-1)),
  P("squeeze_noop", (3, 4), lambda x: x, lambda t: t.squeeze(0)),
  P("squeeze_scalar", (), lambda x: x, lambda t: t.squeeze()),
  P("unsqueeze_0", (3, 4), lambda x: x[None], lambda t: t.unsqueeze(0)),
  P("unsqueeze_mid", (3, 4), lambda x: x[:, None], lambda t: t.unsqueeze(1)),
  P("unsqueeze_neg", (3, 4), lambda x: x[..., None], lambda t: t.unsqueeze(-1)),
  P("unsqueeze_scalar", (), lambda x: x[None], lambda t: t.unsqueeze(0)),
  P("permute", (2, 3, 4), lambda x: x.transpose(2, 0, 1), lambda t: t.permute(2, 0, 1)),
  P("permute_tuple", (2, 3, 4), lambda x: x.transpose(1, 2, 0), lambda t: t.permute((1, 2, 0))),
  P("permute_neg", (2, 3, 4), lambda x: x.transpose(0, 2, 1), lambda t: t.permute(0, -1, -2)),
  P("permute_identity", (2, 3), lambda x: x, lambda t: t.permute(0, 1)),
  P("permute_empty", (2, 0, 3), lambda x: x.transpose(2, 1, 0), lambda t: t.permute(2, 1, 0)),
  P("transpose_default", (3, 4), lambda x: x.T, lambda t: t.transpose()),
  P("transpose_dims", (2, 3, 4), lambda x: np.swapaxes(x, 0, 2), lambda t: t.transpose(0, 2)),
  P("transpose_neg", (2, 3, 4), lambda x: np.swapaxes(x, -1, -2), lambda t: t.transpose(-1, -2)),
  P("T", (3, 4), lambda x: x.T, lambda t: t.T),
  P("expand", (3, 1), lambda x: np.broadcast_to(x, (3, 4)), lambda t: t.expand(3, 4)),
  P("expand_tuple", (3, 1), lambda x: np.broadcast_to(x, (3, 4)), lambda t: t.expand((3, 4))),
  P("expand_neg1", (3, 1), lambda x: np.broadcast_to(x, (3, 4)), lambda t: t.expand(-1, 4)),
  P("expand_new_dims", (3,), lambda x: np.broadcast_to(x, (2, 3)), lambda t: t.expand(2, 3)),
  P("expand_scalar", (), lambda x: np.broadcast_to(x, (2, 3)), lambda t: t.expand(2, 3)),
  P("expand_inner", (2, 1, 1), lambda x: np.broadcast_to(x, (2, 3, 4)), lambda t: t.expand(2, 3, 4)),
  P("expand_noop", (3, 4), lambda x: x, lambda t: t.expand(3, 4)),
  P("expand_to_zero", (3, 1), lambda x: np.broadcast_to(x, (3, 0)), lambda t: t.expand(3, 0)),
  P("repeat", (2, 3), lambda x: np.tile(x, (2, 3)), lambda t: t.repeat(2, 3)),
  P("repeat_tuple", (2, 3), lambda x: np.tile(x, (1, 2)), lambda t: t.repeat((1, 2))),
  P("repeat_more_dims", (3,), lambda x: np.tile(x, (2, 2)), lambda t: t.repeat(2, 2)),
  P("repeat_ones", (2, 3), lambda x: x, lambda t: t.repeat(1, 1)),
  P("repeat_scalar", (), lambda x: np.tile(x, (3,)), lambda t: t.repeat(3)),
  P("repeat_interleave", (2, 3), lambda x: np.repeat(x, 2), lambda t: t.repeat_interleave(2)),
  P("repeat_interleave_dim", (2, 3), lambda x: np.repeat(x, 3, axis=1), lambda t: t.repeat_interleave(3, dim=1)),
  P("repeat_interleave_dim0", (2, 3), lambda x: np.repeat(x, 2, axis=0), lambda t: t.repeat_interleave(2, 0)),
  P("pad_last", (3, 4), lambda x: np.pad(x, ((0, 0), (1, 2))), lambda t: t.pad((1, 2))),
  P("pad_flat_two", (3, 4), lambda x: np.pad(x, ((0, 1), (1, 2))), lambda t: t.pad((1, 2, 0, 1))),
  P("pad_pairs", (3, 4), lambda x: np.pad(x, ((2, 0), (0, 1))), lambda t: t.pad(((2, 0), (0, 1)))),
  P("pad_pairs_none", (3, 4), lambda x: np.pad(x, ((0, 0), (1, 1))), lambda t: t.pad((None, (1, 1)))),
  P("pad_value", (3, 4), lambda x: np.pad(x, 1, constant_values=-3.0), lambda t: t.pad((1, 1, 1, 1), value=-3.0)),
  P("pad_negative", (3, 4), lambda x: np.pad(x[:, 1:], ((0, 0), (0, 1))), lambda t: t.pad((-1, 1))),
  P("pad_zero", (3, 4), lambda x: x, lambda t: t.pad((0, 0, 0, 0))),
  P("pad_1d", (5,), lambda x: np.pad(x, (2, 3)), lambda t: t.pad((2, 3))),
  P("pad_empty", (0, 3), lambda x: np.pad(x, ((1, 1), (0, 0))), lambda t: t.pad((0, 0, 1, 1))),
  P("pad_reflect", (3, 4), lambda x: np.pad(x, ((1, 2), (2, 3)), mode="reflect"),
    lambda t: t.pad((2, 3, 1, 2), mode="reflect")),
  P("pad_replicate", (3, 4), lambda x: np.pad(x, ((1, 2), (2, 3)), mode="edge"),
    lambda t: t.pad((2, 3, 1, 2), mode="replicate")),
  P("pad_circular", (3, 4), lambda x: np.pad(x, ((1, 2), (2, 3)), mode="wrap"),
    lambda t: t.pad((2, 3, 1, 2), mode="circular")),
  P("pad_reflect_last", (2, 5), lambda x: np.pad(x, ((0, 0), (3, 1)), mode="reflect"),
    lambda t: t.pad((3, 1), mode="reflect")),
  P("pad_replicate_pairs", (2, 3), lambda x: np.pad(x, ((1, 0), (0, 2)), mode="edge"),
    lambda t: t.pad(((1, 0), (0, 2)), mode="replicate")),
  P("shrink", (3, 4), lambda x: x[1:3, 0:2], lambda t: t.shrink(((1, 3), (0, 2)))),
  P("shrink_none", (3, 4), lambda x: x[:, 1:3], lambda t: t.shrink((None, (1, 3)))),
  P("shrink_to_empty", (3, 4), lambda x: x[1:1], lambda t: t.shrink(((1, 1), None))),
  P("shrink_full", (3, 4), lambda x: x, lambda t: t.shrink(((0, 3), (0, 4)))),
  P("flip_0", (3, 4), lambda x: x[::-1], lambda t: t.flip(0)),
  P("flip_neg", (3, 4), lambda x: x[:, ::-1], lambda t: t.flip(-1)),
  P("flip_both", (2, 3, 4), lambda x: x[::-1, :, ::-1], lambda t: t.flip((0, 2))),
  P("flip_args", (2, 3, 4), lambda x: x[::-1, ::-1], lambda t: t.flip(0, 1)),
  P("flip_1d", (5,), lambda x: x[::-1], lambda t: t.flip(0)),
  P("flip_empty", (0, 3), lambda x: x[::-1], lambda t: t.flip(0)),
  P("roll", (3, 4), lambda x: np.roll(x, 1, 0), lambda t: t.roll(1, 0)),
  P("roll_neg", (3, 4), lambda x: np.roll(x, -2, 1), lambda t: t.roll(-2, 1)),
  P("roll_multi", (3, 4), lambda x: np.roll(x, (1, 2), (0, 1)), lambda t: t.roll((1, 2), (0, 1))),
  P("roll_big", (3, 4), lambda x: np.roll(x, 5, 1), lambda t: t.roll(5, 1)),
  P("roll_flat", (3, 4), lambda x: np.roll(x, 3), lambda t: t.roll(3)),
  P("roll_zero", (3, 4), lambda x: x, lambda t: t.roll(0, 0)),
  P("tril", (4, 5), np.tril, lambda t: t.tril()),
  P("tril_k", (4, 5), lambda x: np.tril(x, 1), lambda t: t.tril(1)),
  P("tril_neg_k", (4, 5), lambda x: np.tril(x, -1), lambda t: t.tril(-1)),
  P("tril_kw", (4, 5), lambda x: np.tril(x, 2), lambda t: t.tril(diagonal=2)),
  P("triu", (4, 5), np.triu, lambda t: t.triu()),
  P("triu_k", (4, 5), lambda x: np.triu(x, 2), lambda t: t.triu(2)),
  P("triu_tall", (5, 3), lambda x: np.triu(x, -1), lambda t: t.triu(-1)),
  P("tril_batched", (2, 3, 3), np.tril, lambda t: t.tril()),
  P("triu_batched", (2, 3, 4), lambda x: np.triu(x, 1), lambda t: t.triu(1)),
]
@pytest.mark.parametrize("shape,np_fn,att_fn", MOVEMENT)
def test_movement(device: str, shape: tuple, np_fn: Callable, att_fn: Callable) -> None:
  helper_test_op([shape], np_fn, att_fn)

def test_movement_is_a_view_of_the_input(device: str) -> None:
  # chained movement ops, then compute: exercises view merging
  helper_test_op([(2, 3, 4)], lambda x: (x.transpose(2, 0, 1).reshape(4, 6)[::-1, 1:5] * 2).reshape(-1),
                 lambda t: (t.permute(2, 0, 1).reshape(4, 6).flip(0).shrink((None, (1, 5))) * 2).reshape(-1))
  helper_test_op([(3, 4)], lambda x: np.pad(np.broadcast_to(x[:, :1], (3, 4)), 1).T.reshape(2, -1),
                 lambda t: t.shrink((None, (0, 1))).expand(3, 4).pad((1, 1, 1, 1)).T.reshape(2, -1))
  helper_test_op([(4, 6)], lambda x: x.reshape(2, 2, 6).transpose(1, 0, 2).reshape(4, 6)[:, ::-1],
                 lambda t: t.reshape(2, 2, 6).permute(1, 0, 2).reshape(4, 6).flip(1))

# cat / stack / split / chunk
CAT = [
  P("dim0", [(2, 3), (4, 3)], 0), P("dim1", [(2, 3), (2, 1), (2, 2)], 1), P("neg", [(2, 3), (2, 2)], -1),
  P("with_empty", [(2, 3), (2, 0), (2, 1)], 1), P("1d", [(3,), (2,)], 0), P("one", [(2, 3)], 0),
  P("3d_mid", [(2, 1, 3), (2, 2, 3)], 1), P("many", [(1,)] * 5, 0),
]
@pytest.mark.parametrize("shapes,dim", CAT)
def test_cat(device: str, shapes: list, dim: int) -> None:
  helper_test_op(shapes, lambda *xs: np.concatenate(xs, axis=dim), lambda *ts: ts[0].cat(*ts[1:], dim=dim))
  helper_test_op(shapes, lambda *xs: np.concatenate(xs, axis=dim), lambda *ts: Tensor.cat(*ts, dim=dim))

@pytest.mark.parametrize("dtype", [np.int32, np.bool_, np.float16], ids=dt_id)
def test_cat_dtypes_and_views(device: str, dtype: Any) -> None:
  helper_test_op([(3, 2), (2, 3)], lambda a, b: np.concatenate([a.T, b], 0), lambda a, b: a.T.cat(b, dim=0),
                 dtype=dtype)
  helper_test_op([(3, 2), (3, 2)], lambda a, b: np.concatenate([a[::-1], b], 1), lambda a, b: a.flip(0).cat(b, dim=1),
                 dtype=dtype)

STACK = [P("dim0", [(3,), (3,)], 0), P("dim1", [(3,), (3,)], 1), P("neg", [(2, 3)] * 3, -1), P("mid", [(2, 3)] * 3, 1),
         P("scalars", [(), ()], 0), P("one", [(2, 2)], 0), P("empty", [(0, 2), (0, 2)], 1)]
@pytest.mark.parametrize("shapes,dim", STACK)
def test_stack(device: str, shapes: list, dim: int) -> None:
  helper_test_op(shapes, lambda *xs: np.stack(xs, axis=dim), lambda *ts: Tensor.stack(*ts, dim=dim))
  helper_test_op(shapes, lambda *xs: np.stack(xs, axis=dim), lambda *ts: ts[0].stack(*ts[1:], dim=dim))

def _np_split(x: np.ndarray, sizes: int | list[int], dim: int) -> list[np.ndarray]:
  n = x.shape[dim]
  if isinstance(sizes, int): sizes = [min(sizes, n - i) for i in range(0, n, sizes)]
  starts = np.cumsum([0] + list(sizes))
  return [np.take(x, np.arange(s, s + sz), axis=dim) for s, sz in zip(starts, sizes)]

@pytest.mark.parametrize("shape,sizes,dim", [P("int", (5, 4), 2, 0), P("list", (5, 4), [1, 4], 0),
                                             P("dim1", (5, 4), 3, 1), P("zero_piece", (5, 4), [2, 0, 2], 1),
                                             P("whole", (5, 4), 5, 0), P("neg_dim", (2, 6), [1, 2, 3], -1),
                                             P("1d", (7,), 3, 0)])
def test_split(device: str, shape: tuple, sizes: Any, dim: int) -> None:
  helper_test_op([shape], lambda x: _np_split(x, sizes, dim), lambda t: list(t.split(sizes, dim)))

def _np_chunk(x: np.ndarray, chunks: int, dim: int) -> list[np.ndarray]:
  return _np_split(x, -(-x.shape[dim] // chunks), dim)  # torch/tinygrad: pieces of ceil(n/chunks)

@pytest.mark.parametrize("shape,chunks,dim", [P("even", (6, 2), 3, 0), P("uneven", (5, 4), 2, 0),
                                              P("fewer", (5, 4), 3, 1), P("ones", (5,), 5, 0),
                                              P("one", (3, 4), 1, 1), P("neg_dim", (2, 7), 3, -1)])
def test_chunk(device: str, shape: tuple, chunks: int, dim: int) -> None:
  helper_test_op([shape], lambda x: _np_chunk(x, chunks, dim), lambda t: list(t.chunk(chunks, dim)))

# ***** matmul, dot, einsum *****

MATMUL_SHAPES = [
  P("2d", (3, 4), (4, 5)), P("vec_mat", (4,), (4, 5)), P("mat_vec", (3, 4), (4,)), P("vec_vec", (4,), (4,)),
  P("batched", (2, 3, 4), (2, 4, 5)), P("batch_mat", (2, 3, 4), (4, 5)), P("mat_batch", (3, 4), (2, 4, 5)),
  P("broadcast_batch", (2, 1, 3, 4), (3, 4, 2)), P("broadcast_batch1", (1, 3, 4), (2, 4, 5)),
  P("vec_batch", (4,), (2, 4, 3)), P("batch_vec", (2, 3, 4), (4,)), P("k1", (3, 1), (1, 4)),
  P("k0", (3, 0), (0, 4)), P("m0", (0, 4), (4, 2)), P("n0", (3, 4), (4, 0)), P("odd", (5, 7), (7, 3)),
]
@pytest.mark.parametrize("a,b", MATMUL_SHAPES)
@pytest.mark.parametrize("att_fn", [P("at", lambda x, y: x @ y), P("matmul", lambda x, y: x.matmul(y)),
                                    P("dot", lambda x, y: x.dot(y))])
def test_matmul(device: str, a: tuple, b: tuple, att_fn: Callable) -> None:
  helper_test_op([a, b], np.matmul, att_fn, atol=1e-5)

@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.float64], ids=dt_id)
def test_matmul_dtypes(device: str, dtype: Any) -> None:
  helper_test_op([(3, 4), (4, 5)], np.matmul, lambda x, y: x @ y, dtype=dtype, atol=1e-5, low=-3, high=3)

def test_matmul_views(device: str) -> None:
  helper_test_op([(4, 3), (5, 4)], lambda a, b: a.T @ b.T, lambda a, b: a.T @ b.T, atol=1e-5)
  helper_test_op([(3, 4), (4, 5)], lambda a, b: a[::-1] @ b[:, ::-1], lambda a, b: a.flip(0) @ b.flip(1), atol=1e-5)
  helper_test_op([(1, 4), (4, 1)], lambda a, b: np.broadcast_to(a, (3, 4)) @ np.broadcast_to(b, (4, 5)),
                 lambda a, b: a.expand(3, 4) @ b.expand(4, 5), atol=1e-5)
  helper_test_op([(3, 4), (4,)], lambda a, b: np.pad(a, ((0, 0), (1, 0))) @ np.pad(b, (0, 1)),
                 lambda a, b: a.pad((1, 0)) @ b.pad((0, 1)), atol=1e-5)

def test_rmatmul_and_chain(device: str) -> None:
  helper_test_op([(2, 3), (3, 4), (4, 2)], lambda a, b, c: (a @ b) @ c, lambda a, b, c: a @ b @ c, atol=1e-5)

def test_matmul_large_cpu(device: str) -> None:
  cpu_only(device)
  helper_test_op([(64, 128), (128, 96)], np.matmul, lambda a, b: a @ b, atol=1e-4, rtol=1e-4)
  helper_test_op([(4, 33, 65), (4, 65, 17)], np.matmul, lambda a, b: a @ b, atol=1e-4, rtol=1e-4)

EINSUM = [
  P("matmul", "ij,jk->ik", [(3, 4), (4, 5)]), P("batched", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
  P("transpose", "ij->ji", [(3, 4)]), P("sum_all", "ij->", [(3, 4)]), P("sum_axis", "ij->j", [(3, 4)]),
  P("dot", "i,i->", [(5,), (5,)]), P("outer", "i,j->ij", [(3,), (4,)]), P("matvec", "ij,j->i", [(3, 4), (4,)]),
  P("bmm_t", "bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]), P("implicit_out", "ij,jk", [(3, 4), (4, 2)]),
  P("three", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), P("hadamard", "ij,ij->ij", [(3, 4), (3, 4)]),
  P("permute3", "abc->cab", [(2, 3, 4)]), P("spaces", "i j , j k -> i k", [(2, 3), (3, 2)]),
]
@pytest.mark.parametrize("formula,shapes", EINSUM)
def test_einsum(device: str, formula: str, shapes: list) -> None:
  np_formula = formula.replace(" ", "")
  helper_test_op(shapes, lambda *xs: np.einsum(np_formula, *xs), lambda *ts: Tensor.einsum(formula, *ts), atol=1e-5)

def test_einsum_list_operands(device: str) -> None:
  helper_test_op([(3, 4), (4, 5)], lambda a, b: np.einsum("ij,jk->ik", a, b),
                 lambda a, b: Tensor.einsum("ij,jk->ik", [a, b]), atol=1e-5)

# ***** ops on non-contiguous inputs *****

# (name, numpy view, attograd view) of a (4, 6) input; each gives a non-contiguous tensor
VIEWS = [
  P("permute", lambda x: x.T, lambda t: t.permute(1, 0)),
  P("flip", lambda x: x[::-1, ::-1], lambda t: t.flip((0, 1))),
  P("shrink", lambda x: x[1:3, 2:5], lambda t: t.shrink(((1, 3), (2, 5)))),
  P("stride", lambda x: x[::2, ::-3], lambda t: t[::2, ::-3]),
  P("expand", lambda x: np.broadcast_to(x[:, :1], (4, 6)), lambda t: t.shrink((None, (0, 1))).expand(4, 6)),
  P("pad", lambda x: np.pad(x, ((1, 0), (0, 2))), lambda t: t.pad(((1, 0), (0, 2)))),
  P("permute_reshape", lambda x: x.T.reshape(4, 6), lambda t: t.permute(1, 0).reshape(4, 6)),
  P("unsqueeze_expand", lambda x: np.broadcast_to(x[None], (2, 4, 6)), lambda t: t.unsqueeze(0).expand(2, 4, 6)),
]
VIEW_OPS = [
  P("exp", lambda v, w: np.exp(v), lambda v, w: v.exp()),
  P("neg", lambda v, w: -v, lambda v, w: -v),
  P("relu", lambda v, w: np.maximum(v, 0), lambda v, w: v.relu()),
  P("add", lambda v, w: v + w, lambda v, w: v + w),
  P("mul_scalar", lambda v, w: v * 3 - w, lambda v, w: v * 3 - w),
  P("maximum", np.maximum, lambda v, w: v.maximum(w)),
  P("where", lambda v, w: np.where(v > 0, v, w), lambda v, w: (v > 0).where(v, w)),
  P("sum_0", lambda v, w: v.sum(0), lambda v, w: v.sum(0)),
  P("max_last", lambda v, w: v.max(-1), lambda v, w: v.max(-1)),
  P("sum_all", lambda v, w: v.sum(), lambda v, w: v.sum()),
  P("cumsum", lambda v, w: np.cumsum(v, 0), lambda v, w: v.cumsum(0)),
  P("matmul", lambda v, w: v @ np.swapaxes(w, -1, -2), lambda v, w: v @ w.transpose(-1, -2)),
  P("contiguous", lambda v, w: v, lambda v, w: v.contiguous()),
  P("reshape_flat", lambda v, w: v.reshape(-1), lambda v, w: v.reshape(-1)),
  P("argmax", lambda v, w: np.argmax(v, axis=-1), lambda v, w: v.argmax(-1)),
]
@pytest.mark.parametrize("np_op,att_op", VIEW_OPS)
@pytest.mark.parametrize("np_view,att_view", VIEWS)
def test_op_on_view(device: str, np_view: Callable, att_view: Callable, np_op: Callable, att_op: Callable) -> None:
  helper_test_op([(4, 6), (4, 6)], lambda a, b: np_op(np_view(a), np_view(b)),
                 lambda a, b: att_op(att_view(a), att_view(b)), atol=1e-5, exact_dtype=False)

# ***** composite ops built from the primitives *****

def _np_softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x - x.max(1, keepdims=True))
  return e / e.sum(1, keepdims=True)

def _np_normalize(x: np.ndarray) -> np.ndarray:
  return (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)

COMPOSITE = [
  P("softmax", [(3, 5)], _np_softmax, lambda t: t.softmax(1)),
  P("log_softmax", [(3, 5)], lambda x: np.log(_np_softmax(x)), lambda t: t.log_softmax(1)),
  P("square_sum", [(3, 4)], lambda x: (x * x).sum(1), lambda t: (t * t).sum(1)),
  P("normalize", [(3, 4)], _np_normalize,
    lambda t: (t - t.mean(1, keepdim=True)) / (t.var(1, keepdim=True, correction=0) + 1e-5).sqrt()),
]
@pytest.mark.parametrize("shapes,np_fn,att_fn", COMPOSITE)
def test_composite(device: str, shapes: list, np_fn: Callable, att_fn: Callable) -> None:
  helper_test_op(shapes, np_fn, att_fn, atol=1e-5)
