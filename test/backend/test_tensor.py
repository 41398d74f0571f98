"""Tensor creation, data access and bookkeeping: constructors, numpy/tolist/item/data, realize, to, assign, repr."""
from __future__ import annotations
import struct
from typing import Any, Callable
import numpy as np
import pytest
from helpers import compare, cpu_only
from attograd import Tensor, dtypes
from attograd.device import Device

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)

# ***** creation from data *****

# (name, data, expected numpy value, expected attograd dtype)
FROM_DATA = [
  P("float", 3.0, np.array(3.0, np.float32), dtypes.weakfloat),  # a Python scalar is weak; its values are float32
  P("int", 3, np.array(3, np.int32), dtypes.weakint),
  P("bool", True, np.array(True), dtypes.bool),
  P("neg_float", -2.5, np.array(-2.5, np.float32), dtypes.weakfloat),
  P("int_list", [1, 2, 3], np.array([1, 2, 3], np.int32), dtypes.int32),
  P("float_list", [1.0, 2.5], np.array([1.0, 2.5], np.float32), dtypes.float32),
  P("mixed_list", [1, 2.5], np.array([1.0, 2.5], np.float32), dtypes.float32),
  P("bool_list", [True, False], np.array([True, False]), dtypes.bool),
  P("nested", [[1, 2], [3, 4], [5, 6]], np.array([[1, 2], [3, 4], [5, 6]], np.int32), dtypes.int32),
  P("nested_tuple", ((1.0, 2.0), (3.0, 4.0)), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), dtypes.float32),
  P("list_of_tuples", [(1, 2), (3, 4)], np.array([[1, 2], [3, 4]], np.int32), dtypes.int32),
  P("deep", [[[1.0]], [[2.0]]], np.array([[[1.0]], [[2.0]]], np.float32), dtypes.float32),
  P("empty_list", [], np.zeros((0,), np.float32), dtypes.float32),
  P("nested_empty", [[], []], np.zeros((2, 0), np.float32), dtypes.float32),
  P("bytes", b"\x01\x02\xff", np.array([1, 2, 255], np.uint8), dtypes.uint8),
  P("empty_bytes", b"", np.zeros((0,), np.uint8), dtypes.uint8),
  P("np_float32", np.array([[1.5, -2.0]], np.float32), np.array([[1.5, -2.0]], np.float32), dtypes.float32),
  P("np_float64", np.array([1 / 3]), np.array([1 / 3]), dtypes.float64),
  P("np_float16", np.array([0.1, 2], np.float16), np.array([0.1, 2], np.float16), dtypes.float16),
  P("np_int64", np.array([2**40, -1], np.int64), np.array([2**40, -1], np.int64), dtypes.int64),
  P("np_int8", np.array([-128, 127], np.int8), np.array([-128, 127], np.int8), dtypes.int8),
  P("np_uint8", np.array([0, 255], np.uint8), np.array([0, 255], np.uint8), dtypes.uint8),
  P("np_uint32", np.array([2**32 - 1], np.uint32), np.array([2**32 - 1], np.uint32), dtypes.uint32),
  P("np_bool", np.array([[True], [False]]), np.array([[True], [False]]), dtypes.bool),
  P("np_scalar_0d", np.array(7.0, np.float32), np.array(7.0, np.float32), dtypes.float32),
  P("np_empty", np.zeros((2, 0, 3), np.float32), np.zeros((2, 0, 3), np.float32), dtypes.float32),
  P("np_noncontiguous", np.arange(12, dtype=np.int32).reshape(3, 4).T, np.arange(12, dtype=np.int32).reshape(3, 4).T,
    dtypes.int32),
  P("np_negative_strides", np.arange(6, dtype=np.float32)[::-2], np.array([5.0, 3.0, 1.0], np.float32),
    dtypes.float32),
]
@pytest.mark.parametrize("data,want,dtype", FROM_DATA)
def test_from_data(device: str, data: Any, want: np.ndarray, dtype: Any) -> None:
  t = Tensor(data)
  assert t.dtype == (dtypes.default_float if dtype is dtypes.float32 and not isinstance(data, np.ndarray) else dtype)
  assert t.device == device
  compare(t, want, exact_dtype=dtypes.default_float == dtypes.float32 or dtype is not dtypes.float32)

def test_from_numpy_is_a_copy(device: str) -> None:
  a = np.array([1.0, 2.0, 3.0], np.float32)
  t = Tensor(a)
  a[0] = 100.0
  assert t.tolist() == [1.0, 2.0, 3.0]

@pytest.mark.parametrize("data,dtype,want", [
  P("int_to_float", [1, 2], dtypes.float32, np.array([1.0, 2.0], np.float32)),
  P("float_to_int_truncates", [1.7, -1.7, 2.0], dtypes.int32, np.array([1, -1, 2], np.int32)),
  P("to_half", [0.1, 1.0], dtypes.float16, np.array([0.1, 1.0], np.float16)),
  P("to_bool", [0, 2, -1], dtypes.bool, np.array([False, True, True])),
  P("to_int8_string", [1, -2], "int8", np.array([1, -2], np.int8)),
  P("to_float64", 0.1, dtypes.float64, np.array(0.1, np.float64)),
  P("np_cast", np.array([1.5, 2.5], np.float64), dtypes.float32, np.array([1.5, 2.5], np.float32)),
  P("np_int_to_uint8", np.array([3, 255], np.int64), dtypes.uint8, np.array([3, 255], np.uint8)),
  P("bytes_to_uint8", b"\x00\x10", dtypes.uint8, np.array([0, 16], np.uint8)),
])
def test_from_data_with_dtype(device: str, data: Any, dtype: Any, want: np.ndarray) -> None:
  t = Tensor(data, dtype=dtype)
  compare(t, want, exact_dtype=True)

def test_shape_sizes_must_be_ints(device: str) -> None:
  # a float size is refused, not truncated (2.0 too, as in tinygrad); numpy's ints are ints
  for make in (lambda: Tensor.ones(2.0), lambda: Tensor.zeros(3, 2.5), lambda: Tensor.rand(1.0),
               lambda: Tensor.full((2.0,), 1)):
    with pytest.raises(RuntimeError, match="shape must be int"): make()
  assert Tensor.zeros(np.int64(3), device=device).shape == (3,)
  assert type(Tensor.empty(np.int32(2), 3, device=device).shape[0]) is int

def test_device_kwarg(device: str) -> None:
  t = Tensor([1, 2], device=device)
  assert t.device == device
  assert Tensor.zeros(2, device=device).device == device

def test_default_device_follows_Device_DEFAULT(device: str) -> None:
  assert Device.DEFAULT == device
  assert Tensor([1.0]).device == device

# ***** constructors *****

CONSTRUCTORS = [
  P("zeros", lambda: Tensor.zeros(2, 3), np.zeros((2, 3), np.float32)),
  P("zeros_tuple", lambda: Tensor.zeros((2, 3)), np.zeros((2, 3), np.float32)),
  P("zeros_scalar", lambda: Tensor.zeros(()), np.zeros((), np.float32)),
  P("zeros_empty", lambda: Tensor.zeros(0, 3), np.zeros((0, 3), np.float32)),
  P("zeros_int", lambda: Tensor.zeros(4, dtype=dtypes.int32), np.zeros(4, np.int32)),
  P("ones", lambda: Tensor.ones(3, 1), np.ones((3, 1), np.float32)),
  P("ones_bool", lambda: Tensor.ones(2, dtype=dtypes.bool), np.ones(2, np.bool_)),
  P("ones_half", lambda: Tensor.ones(2, 2, dtype=dtypes.float16), np.ones((2, 2), np.float16)),
  P("full_int", lambda: Tensor.full((2, 3), 7), np.full((2, 3), 7, np.int32)),
  P("full_float", lambda: Tensor.full((2,), 1.5), np.full((2,), 1.5, np.float32)),
  P("full_bool", lambda: Tensor.full((2, 2), True), np.full((2, 2), True)),
  P("full_dtype", lambda: Tensor.full((3,), 2, dtype=dtypes.float16), np.full((3,), 2, np.float16)),
  P("full_neg_inf", lambda: Tensor.full((2,), -float("inf")), np.full((2,), -np.inf, np.float32)),
  P("full_scalar", lambda: Tensor.full((), 4.0), np.full((), 4.0, np.float32)),
  P("arange", lambda: Tensor.arange(5), np.arange(5, dtype=np.int32)),
  P("arange_start_stop", lambda: Tensor.arange(2, 7), np.arange(2, 7, dtype=np.int32)),
  P("arange_step", lambda: Tensor.arange(2, 10, 3), np.arange(2, 10, 3, dtype=np.int32)),
  P("arange_neg_step", lambda: Tensor.arange(5, 0, -1), np.arange(5, 0, -1, dtype=np.int32)),
  P("arange_neg_step_uneven", lambda: Tensor.arange(10, -3, -4), np.arange(10, -3, -4, dtype=np.int32)),
  P("arange_float", lambda: Tensor.arange(0.0, 1.0, 0.25), np.arange(0.0, 1.0, 0.25, dtype=np.float32)),
  P("arange_float_step", lambda: Tensor.arange(0, 2, 0.5), np.arange(0, 2, 0.5, dtype=np.float32)),
  P("arange_empty", lambda: Tensor.arange(0), np.arange(0, dtype=np.int32)),
  P("arange_backwards_empty", lambda: Tensor.arange(10, 2), np.arange(10, 2, dtype=np.int32)),
  P("arange_dtype", lambda: Tensor.arange(4, dtype=dtypes.float32), np.arange(4, dtype=np.float32)),
  P("linspace", lambda: Tensor.linspace(0, 1, 5), np.linspace(0, 1, 5, dtype=np.float32)),
  P("linspace_neg", lambda: Tensor.linspace(-2, 3, 7), np.linspace(-2, 3, 7, dtype=np.float32)),
  P("linspace_backwards", lambda: Tensor.linspace(5, -5, 11), np.linspace(5, -5, 11, dtype=np.float32)),
  P("linspace_one", lambda: Tensor.linspace(3, 9, 1), np.linspace(3, 9, 1, dtype=np.float32)),
  P("eye", lambda: Tensor.eye(3), np.eye(3, dtype=np.float32)),
  P("eye_rect", lambda: Tensor.eye(2, 4), np.eye(2, 4, dtype=np.float32)),
  P("eye_tall", lambda: Tensor.eye(4, 2), np.eye(4, 2, dtype=np.float32)),
  P("eye_one", lambda: Tensor.eye(1), np.eye(1, dtype=np.float32)),
  P("eye_int", lambda: Tensor.eye(3, dtype=dtypes.int32), np.eye(3, dtype=np.int32)),
]
@pytest.mark.parametrize("make,want", CONSTRUCTORS)
def test_constructor(device: str, make: Callable[[], Tensor], want: np.ndarray) -> None:
  t = make()
  assert t.device == device
  float_default = want.dtype == np.float32 and dtypes.default_float is not dtypes.float32
  compare(t, want, exact_dtype=not float_default, atol=1e-6)

def test_empty(device: str) -> None:
  t = Tensor.empty(2, 3)
  assert t.shape == (2, 3) and t.dtype == dtypes.default_float and t.device == device
  assert t.numpy().shape == (2, 3)
  assert Tensor.empty(4, dtype=dtypes.int8).dtype == dtypes.int8
  assert Tensor.empty(0).numpy().shape == (0,)

LIKE = [
  P("zeros_like", lambda t: t.zeros_like(), np.zeros_like),
  P("ones_like", lambda t: t.ones_like(), np.ones_like),
  P("full_like", lambda t: t.full_like(3), lambda x: np.full_like(x, 3)),
  P("const_like", lambda t: t.const_like(2), lambda x: np.full_like(x, 2)),
  P("static_zeros_like", lambda t: Tensor.zeros_like(t), np.zeros_like),
  P("static_full_like", lambda t: Tensor.full_like(t, 2), lambda x: np.full_like(x, 2)),
]
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16, np.bool_], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 2)], ids=str)
@pytest.mark.parametrize("att_fn,np_fn", LIKE)
def test_like(device: str, att_fn: Callable, np_fn: Callable, shape: tuple, dtype: Any) -> None:
  x = np.ones(shape, dtype)
  compare(att_fn(Tensor(x)), np_fn(x), exact_dtype=True)

def test_like_dtype_override(device: str) -> None:
  t = Tensor([1, 2, 3])
  compare(t.zeros_like(dtype=dtypes.float16), np.zeros(3, np.float16), exact_dtype=True)
  compare(t.ones_like(dtype=dtypes.bool), np.ones(3, np.bool_), exact_dtype=True)
  compare(t.full_like(1.5, dtype=dtypes.float32), np.full(3, 1.5, np.float32), exact_dtype=True)
  compare(t.const_like(2.5, dtypes.float16), np.full(3, 2.5, np.float16), exact_dtype=True)  # dtype positional

def test_like_on_view(device: str) -> None:
  t = Tensor.ones(2, 3).permute(1, 0)
  compare(t.zeros_like(), np.zeros((3, 2), np.float32))

def test_arange_big_cpu(device: str) -> None:
  cpu_only(device)
  compare(Tensor.arange(100000), np.arange(100000, dtype=np.int32), exact_dtype=True)
  compare(Tensor.linspace(0, 1, 1001), np.linspace(0, 1, 1001, dtype=np.float32), atol=1e-6)

# ***** data access *****

def test_numpy(device: str) -> None:
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  out = Tensor(a).numpy()
  assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (3, 4)
  np.testing.assert_array_equal(out, a)
  assert Tensor(3.5).numpy().shape == ()
  assert Tensor([[1], [2]], dtype=dtypes.int8).numpy().dtype == np.int8

def test_numpy_of_view_and_lazy(device: str) -> None:
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_array_equal(Tensor(a).permute(1, 0).numpy(), a.T)
  np.testing.assert_array_equal((Tensor(a) * 2).flip(0).numpy(), (a * 2)[::-1])

@pytest.mark.parametrize("data", [P("scalar_float", 2.5), P("scalar_int", 7), P("scalar_bool", False),
                                  P("vec", [1.5, -2.0]), P("mat", [[1, 2], [3, 4]]), P("empty", []),
                                  P("3d", [[[True, False]], [[False, True]]]), P("empty_inner", [[], []])])
def test_tolist(device: str, data: Any) -> None:
  out = Tensor(data).tolist()
  assert out == data
  assert type(out) is type(data)

def test_tolist_types(device: str) -> None:
  assert all(type(x) is float for x in Tensor([1.0, 2.0]).tolist())
  assert all(type(x) is int for x in Tensor([1, 2]).tolist())
  assert all(type(x) is bool for x in Tensor([True, False]).tolist())
  assert all(type(x) is int for x in Tensor([1, 2], dtype=dtypes.uint8).tolist())
  assert Tensor([0.1], dtype=dtypes.float16).tolist() == [float(np.float16(0.1))]

@pytest.mark.parametrize("data,want,typ", [P("float", 2.5, 2.5, float), P("int", -3, -3, int),
                                           P("bool", True, True, bool), P("one_elem", [4.0], 4.0, float),
                                           P("nested_one", [[[9]]], 9, int)])
def test_item(device: str, data: Any, want: Any, typ: type) -> None:
  out = Tensor(data).item()
  assert out == want and type(out) is typ

def test_item_of_computation(device: str) -> None:
  assert Tensor([1.0, 2.0, 3.0]).sum().item() == 6.0
  assert Tensor([[1, 2], [3, 4]])[1, 0].item() == 3
  assert (Tensor(2.0) * 3).item() == 6.0

def test_data_memoryview(device: str) -> None:
  t = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
  mv = t.data()
  assert isinstance(mv, memoryview)
  assert mv.format == "f" and mv.shape == (2, 3) and mv.nbytes == 24
  assert mv.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
  assert Tensor([1, 2], dtype=dtypes.int64).data().tolist() == [1, 2]
  assert Tensor([1, 2], dtype=dtypes.uint8).data().format == "B"
  half = Tensor([0.5, 1.0], dtype=dtypes.float16).data()  # Python's memoryview can't hold 'e' before 3.12: bytes ok
  assert isinstance(half, memoryview) and half.nbytes == 4
  assert np.frombuffer(half.tobytes(), np.float16).tolist() == [0.5, 1.0]

def test_data_of_empty_and_scalar(device: str) -> None:
  e = Tensor([], dtype=dtypes.int32).reshape(0, 2).data()
  assert e.format == "i" and e.itemsize == 4 and e.shape == (0,) and list(e) == []
  s = Tensor(3, dtype=dtypes.int32).data()  # a 0-d tensor gives a 0-d view, as in tinygrad
  assert s.format == "i" and s.shape == () and s.tolist() == 3

def test_tensor_from_bytes_reinterprets(device: str) -> None:
  t = Tensor(struct.pack("<ff", 0.25, -2.0), dtype=dtypes.float32)  # like torch.frombuffer: 8 bytes, 2 floats
  assert t.shape == (2,) and t.tolist() == [0.25, -2.0]
  assert Tensor(b"\x01\x02").tolist() == [1, 2]
  with pytest.raises(ValueError, match="3 bytes aren't a whole number of dtypes.short"):
    Tensor(b"abc", dtype=dtypes.int16)

def test_tensor_from_bytearray_and_memoryview_copies_them(device: str) -> None:
  # read in place (no copy to bytes first), yet copied: writing the source afterwards changes nothing
  src = bytearray(struct.pack("<3f", 1.0, 2.0, 3.0))
  a, b = Tensor(src, dtype=dtypes.float32, device=device), Tensor(memoryview(src).cast("f"), dtype=dtypes.float32)
  strided = Tensor(memoryview(src)[3::4], device=device)  # not contiguous: the top byte of each float
  src[:] = bytes(12)
  assert a.tolist() == b.tolist() == [1.0, 2.0, 3.0] and strided.tolist() == [0x3F, 0x40, 0x40]

def test_uop_buffer_is_the_tensors_memory(device: str) -> None:
  # UOp.buffer (tinygrad's name): the Buffer behind a tensor's BUFFER node, allocated or not; what the LLM app feeds
  # its jitted step's inputs through
  e = Tensor.empty(4, dtype=dtypes.int32, device=device)
  assert e.uop.buffer.size == 4 and e.uop.realized is None  # Tensor.empty has no memory yet
  t = Tensor([1, 2, 3], dtype=dtypes.int32, device=device).reshape(3, 1)
  assert t.uop.buffer is t.uop.base.realized and t.uop.buffer.as_bytes() == struct.pack("<3i", 1, 2, 3)
  # as in tinygrad: a node that holds no buffer yet is an AssertionError, a view that reorders one a RuntimeError
  with pytest.raises(AssertionError, match="realize"): _ = (t + 1).uop.buffer
  with pytest.raises(RuntimeError, match="view"): _ = t.T.uop.buffer

def test_data_of_lazy_view(device: str) -> None:
  t = Tensor([[1, 2, 3], [4, 5, 6]]).permute(1, 0) + 1
  assert t.data().tolist() == [[2, 5], [3, 6], [4, 7]]

def test_realize_returns_self(device: str) -> None:
  t = Tensor([1.0, 2.0]) + 1
  assert t.realize() is t
  assert t.realize() is t  # realizing twice is fine
  assert t.tolist() == [2.0, 3.0]

def test_realize_many(device: str) -> None:
  x = Tensor([1.0, 2.0, 3.0])
  a, b, c = x + 1, x * 2, (x - 1).sum()
  out = Tensor.realize(a, b, c)
  assert out is a
  assert a.tolist() == [2.0, 3.0, 4.0] and b.tolist() == [2.0, 4.0, 6.0] and c.item() == 3.0

def test_realize_const_and_empty(device: str) -> None:
  assert Tensor.ones(2, 2).realize().tolist() == [[1.0, 1.0], [1.0, 1.0]]
  assert Tensor.zeros(0, 4).realize().numpy().shape == (0, 4)
  assert Tensor(5).realize().item() == 5

def test_lazy_until_realize(device: str) -> None:
  # building a graph never fails on values: 1/0 is inf, not an exception
  t = Tensor([1.0, 0.0]) / Tensor([0.0, 0.0])
  out = t.numpy()
  assert np.isinf(out[0]) and np.isnan(out[1])

def _other_device(device: str) -> str:
  other = "PYTHON" if device != "PYTHON" else "CPU"
  ok, why = Device.available(other)
  if not ok: pytest.skip(f"{other} unavailable: {why}")
  return other

def test_to_device(device: str) -> None:
  other = _other_device(device)
  t = Tensor([[1.0, 2.0], [3.0, 4.0]])
  u = t.to(other)
  assert u.device == other and t.device == device
  assert u.tolist() == [[1.0, 2.0], [3.0, 4.0]]
  assert (u * 2).device == other
  assert (u.to(device) + t).tolist() == [[2.0, 4.0], [6.0, 8.0]]

def test_to_device_lazy_and_views(device: str) -> None:
  other = _other_device(device)
  t = (Tensor([[1, 2, 3], [4, 5, 6]]) * 10).permute(1, 0)
  u = t.to(other)
  assert u.dtype == dtypes.int32
  assert u.tolist() == [[10, 40], [20, 50], [30, 60]]

def test_to_same_device(device: str) -> None:
  t = Tensor([1, 2])
  assert t.to(device).device == device and t.to(device).tolist() == [1, 2]
  assert t.to(None).device == device

def test_assign(device: str) -> None:
  a = Tensor([0.0, 0.0, 0.0]).realize()
  b = a
  ret = a.assign(Tensor([1.0, 2.0, 3.0]))
  assert ret is a
  assert a.tolist() == [1.0, 2.0, 3.0] and b.tolist() == [1.0, 2.0, 3.0]

def test_assign_from_itself(device: str) -> None:
  a = Tensor([1.0, 2.0, 3.0]).realize()
  for _ in range(3): a.assign(a * 2 + 1)
  assert a.tolist() == [15.0, 23.0, 31.0]

def test_assign_lazy_and_readers(device: str) -> None:
  a = Tensor([1, 2, 3]).realize()
  before = a + 0  # reads a before the assign
  a.assign(a + 10)
  assert a.tolist() == [11, 12, 13]
  assert before.tolist() in ([1, 2, 3], [11, 12, 13])  # must not crash; tinygrad reads the new value lazily

def test_assign_python_list_and_const(device: str) -> None:
  a = Tensor.zeros(3).contiguous().realize()
  a.assign([4.0, 5.0, 6.0])
  assert a.tolist() == [4.0, 5.0, 6.0]
  a.assign(Tensor.full((3,), 2.0))
  assert a.tolist() == [2.0, 2.0, 2.0]

def test_contiguous(device: str) -> None:
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  t = Tensor(a).permute(1, 0).contiguous()
  compare(t, a.T, exact_dtype=True)
  compare(t.reshape(6), a.T.reshape(6))
  assert Tensor(a).contiguous().shape == (2, 3)

def test_clone(device: str) -> None:
  a = Tensor([1.0, 2.0]).realize()
  c = a.clone()
  assert c is not a and c.tolist() == [1.0, 2.0] and c.dtype == a.dtype and c.device == a.device
  a.assign(Tensor([5.0, 6.0]))
  assert a.tolist() == [5.0, 6.0]
  assert c.realize().tolist() in ([1.0, 2.0], [5.0, 6.0])

def test_clone_realized_is_independent(device: str) -> None:
  a = Tensor([1.0, 2.0]).realize()
  c = a.clone().realize()
  a.assign(Tensor([5.0, 6.0])).realize()
  assert c.tolist() == [1.0, 2.0]

def test_detach(device: str) -> None:
  a = Tensor([1.0, 2.0], requires_grad=True)
  d = a.detach()
  assert d.tolist() == [1.0, 2.0] and d.shape == a.shape and d.dtype == a.dtype
  assert not d.requires_grad

# ***** metadata *****

@pytest.mark.parametrize("shape,dtype", [P("2d_f32", (2, 3), dtypes.float32), P("scalar_i32", (), dtypes.int32),
                                         P("empty_f16", (0, 5), dtypes.float16), P("3d_i64", (2, 1, 4), dtypes.int64),
                                         P("bool", (7,), dtypes.bool), P("u8", (3, 3), dtypes.uint8)])
def test_metadata(device: str, shape: tuple, dtype: Any) -> None:
  t = Tensor.zeros(*shape, dtype=dtype) if shape else Tensor.zeros((), dtype=dtype)
  n = int(np.prod(shape))
  assert t.shape == shape and isinstance(t.shape, tuple)
  assert t.dtype == dtype
  assert t.device == device
  assert t.ndim == len(shape)
  assert t.numel() == n
  assert t.nbytes() == n * dtype.itemsize
  assert t.element_size() == dtype.itemsize

def test_shape_is_plain_ints(device: str) -> None:
  t = Tensor.ones(2, 3).reshape(3, 2).permute(1, 0).expand(4, 2, 3)
  assert t.shape == (4, 2, 3) and all(type(s) is int for s in t.shape)

def test_len(device: str) -> None:
  assert len(Tensor.ones(4, 2)) == 4
  assert len(Tensor.ones(0, 2)) == 0
  with pytest.raises(TypeError): len(Tensor(1.0))

def test_repr_shows_values(device: str) -> None:
  assert repr(Tensor([1.5, 2.25])) == f"Tensor([1.5000, 2.2500], dtype=dtypes.float, device='{device}')"
  assert repr(Tensor([[1, 2], [3, 4]], dtype=dtypes.int8)) == \
    f"Tensor([[1, 2],\n        [3, 4]], dtype=dtypes.char, device='{device}')"
  assert repr(Tensor([True, False])).startswith("Tensor([ True, False], dtype=dtypes.bool")
  assert repr(Tensor([1.0, 2.0], requires_grad=True)).endswith("requires_grad=True)")
  assert "size=(0, 3)" in repr(Tensor.ones(0, 3))
  assert str(Tensor([3, 4])) == repr(Tensor([3, 4]))

def test_repr_number_formats(device: str) -> None:
  assert "[1., 2., 3.]" in repr(Tensor([1.0, 2.0, 3.0]))  # whole numbers print as PyTorch prints them
  assert "[1.0000e-05, 1.0000e+00,        nan,       -inf]" in repr(Tensor([1e-5, 1.0, float("nan"), -float("inf")]))
  assert "Tensor(3.5000," in repr(Tensor(3.5))
  assert "[0.1000, 0.1000]" in repr(Tensor([0.1, 0.1], dtype=dtypes.half))
  assert "[1., 2.]" in repr(Tensor([1.0, 2.0]).cast(dtypes.bfloat16))

def test_repr_realizes_lazy_tensors(device: str) -> None:
  t = Tensor([1.0, 2.0]) + 1
  r = repr(t)
  assert "[2., 3.]" in r and r.endswith("# lazy: realized to print")
  assert not repr(t).endswith("print")  # now realized: nothing more to say

def test_repr_summarizes_large_tensors(device: str) -> None:
  if device == "PYTHON": pytest.skip("1000x100 elements are slow to interpret; the formatting is device-independent")
  t = Tensor.arange(100_000).reshape(1000, 100)
  r = repr(t)
  assert len(r) < 2000 and "..." in r
  assert "[    0,     1,     2, ...,    97,    98,    99]" in r and "99997, 99998, 99999]]" in r
  assert r.endswith("# lazy: edges computed to print")

def test_repr_of_huge_expand_computes_only_the_edges(device: str) -> None:
  r = repr(Tensor.ones(2**40).reshape(2**20, 2**20))  # realizing it whole would need 4 TiB
  assert r.count("1.") == 36 and "..." in r

def test_repr_symbolic_shape(device: str) -> None:
  from attograd import Variable
  v = Variable("n", 1, 8).bind(3)
  t = Tensor([1.0, 2.0, 3.0, 4.0]).reshape(4, 1).shrink(((0, v), (0, 1)))
  assert "[[1.],\n" in repr(t)

def test_format_spec(device: str) -> None:
  assert f"{Tensor(3.14159):.2f}" == "3.14" and f"{Tensor([7]):>3d}" == "  7"
  assert f"{Tensor([1, 2])}" == str(Tensor([1, 2]))
  with pytest.raises(TypeError, match="one-element"): f"{Tensor([1.0, 2.0]):.2f}"

def test_requires_grad_flag(device: str) -> None:
  assert Tensor([1.0]).requires_grad in (None, False)
  assert Tensor([1.0], requires_grad=True).requires_grad is True

def test_many_small_tensors(device: str) -> None:
  ts = [Tensor([float(i)]) * 2 for i in range(20)]
  Tensor.realize(*ts)
  assert [t.item() for t in ts] == [2.0 * i for i in range(20)]

def test_big_roundtrip_cpu(device: str) -> None:
  cpu_only(device)
  a = np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)
  compare(Tensor(a), a, exact_dtype=True)
  compare(Tensor(a).T.contiguous(), a.T)

def test_negative_zero_constant_is_not_the_cached_zero(device: str) -> None:
  # the cache of broadcast constants keyed 0.0 and -0.0 alike: once x * 0.0 had run, x * -0.0 used +0.0
  x = np.array([1.0, 2.0], dtype=np.float32)
  for c in (0.0, -0.0, 0.0):
    compare(1 / (Tensor(x) * c), np.float32(1) / (x * np.float32(c)))
    compare(Tensor(x) / c, x / np.float32(c))
    assert np.signbit(Tensor.full((2,), c).numpy()).tolist() == [np.signbit(c)] * 2

def test_list_holding_tensors() -> None:
  # one-element Tensors in a list are their values, as in PyTorch; bigger ones are an error that names Tensor.stack
  # (they were read as empty data: "0 bytes don't fill shape (2,)")
  assert Tensor([Tensor(1.0), Tensor(2.5)]).tolist() == [1.0, 2.5]
  assert Tensor([[Tensor(1), 2], [3, Tensor([4])]]).tolist() == [[1, 2], [3, 4]]
  with pytest.raises(TypeError, match=r"shape \(2,\) is not data: join Tensors with Tensor.stack"):
    Tensor([Tensor([0, 0]), Tensor([0, 1])])
