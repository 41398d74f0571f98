"""The Tensor's graph-building methods on UOp (tensor/uop_methods.py): a UOp method builds the very node the Tensor
method builds (hash-consing makes them one object), UOp's own names keep their meaning on deviceless UOps (index math,
symbolic sizes), and what realizes, moves data or draws random numbers is not lent. Graphs only: nothing here runs
(the values are checked per device in test/backend/test_uop_tensor_method_values.py)."""
from __future__ import annotations
from typing import Any, Callable
import pytest
from attograd import Tensor, dtypes
from attograd.tensor import uop_methods
from attograd.uop.ops import Ops, UOp

def _t(*shape: int) -> Tensor:
  n = 1
  for s in shape: n *= s
  return Tensor.arange(n, device="NULL").reshape(*shape)

def _idx(data: list) -> Tensor: return Tensor(data, dtype=dtypes.int32, device="NULL")

def _uops(x: Any) -> Any:
  """The same arguments with each Tensor as its UOp."""
  if isinstance(x, Tensor): return x.uop
  if isinstance(x, (tuple, list)): return type(x)(_uops(y) for y in x)
  return x

def _same(got_t: Any, got_u: Any) -> None:
  if isinstance(got_t, (tuple, list)):
    assert type(got_u) is type(got_t) and len(got_u) == len(got_t)
    for a, b in zip(got_t, got_u): _same(a, b)
  else: assert got_t.uop is got_u, f"{got_t.uop}\nis not\n{got_u}"

W = _t(2, 2, 2, 2).float()
I2, I3 = _idx([2, 0, 1]), _idx([[1], [2], [0]])
CASES: dict[str, tuple[Tensor, Callable[..., Any], tuple]] = {
  # (input, the method, its arguments: Tensors in them are given to the UOp method as UOps)
  "sum_axis": (_t(3, 4), lambda x: x.sum(1), ()),
  "mean_keepdim": (_t(3, 4).float(), lambda x: x.mean(0, keepdim=True), ()),
  "argmax": (_t(3, 4), lambda x: x.argmax(), ()),
  "softmax": (_t(2, 3).float(), lambda x: x.log_softmax(0), ()),
  "true_div_int": (_t(4), lambda x: x / 3, ()),
  "floordiv_int": (_t(4) - 2, lambda x: x // 3, ()),
  "rfloordiv": (_t(4) + 1, lambda x: 7 // x, ()),
  "mod_float": (_t(4).float() - 1.5, lambda x: x % 2.0, ()),
  "div_trunc": (_t(4) - 2, lambda x: x.div(3, rounding_mode="trunc"), ()),
  "float_scalar_on_int": (_t(3), lambda x: x + 1.5, ()),
  "eq_scalar": (_t(3), lambda x: x.eq(1), ()),
  "where": (_t(4), lambda x: (x < 2).where(x, -x), ()),
  "maximum_broadcast": (_t(2, 3), lambda x, y: x.maximum(y), (_t(3).float(),)),
  "isclose": (_t(4).float(), lambda x: x.isclose(x + 1e-9), ()),
  "slices_none_ellipsis": (_t(2, 3, 4), lambda x: x[1:, None, ..., ::-2], ()),
  "int_index": (_t(4, 5), lambda x: x[-1, 2:4], ()),
  "tensor_index": (_t(3, 4), lambda x, i: x[i, 1:], (I2,)),
  "tensor_indices_broadcast": (_t(3, 4), lambda x, i, j: x[i, j], (I2, I3)),
  "pad_reflect": (_t(4, 5), lambda x: x.pad(((1, 2), (0, 3)), mode="reflect"), ()),
  "cat_stack": (_t(2, 3), lambda x: x.cat(x, dim=1).stack(x.cat(x, dim=1)), ()),
  "cumsum": (_t(3, 4), lambda x: x.cumsum(1), ()),
  "cummax": (_t(5), lambda x: x.cummax(0), ()),
  "sort": (_t(2, 4).float(), lambda x: x.sort(descending=True), ()),
  "topk": (_t(2, 4).float(), lambda x: x.topk(2), ()),
  "one_hot": (_t(4), lambda x: x.one_hot(5), ()),
  "gather": (_t(3, 4), lambda x, i: x.gather(0, i), (_idx([[0, 1, 2, 0]]),)),
  "scatter_scalar": (_t(3, 4).float(), lambda x, i: x.scatter(1, i, 2.5, reduce="add"), (_idx([[0, 1]]),)),
  "conv2d": (_t(1, 2, 5, 5).float(), lambda x, w: x.conv2d(w, stride=2, padding=1), (W,)),
  "max_pool_indices": (_t(1, 1, 4, 4).float(), lambda x: x.max_pool2d(return_indices=True), ()),
  "nll_loss": (_t(2, 3).float().log_softmax(), lambda x, y: x.nll_loss(y), (_idx([1, 2]),)),
  "matmul": (_t(2, 3).float(), lambda x, y: x @ y, (_t(3, 2).float(),)),
  "bitcast_narrow": (_t(4).cast(dtypes.uint16), lambda x: x.bitcast(dtypes.uint8), ()),
  "cast_by_name": (_t(4), lambda x: x.cast("float16"), ()),
  "sequential": (_t(4), lambda x: x.sequential([lambda y: y * 2, lambda y: y.relu()]), ()),
}

@pytest.mark.parametrize("name", list(CASES))
def test_uop_method_builds_the_tensor_methods_node(name: str) -> None:
  t, fn, args = CASES[name]
  _same(fn(t, *args), fn(t.uop, *_uops(args)))

def test_mixed_dtypes_promote_as_the_tensor_does() -> None:
  x = _t(3).float()
  got = x.uop * UOp.arange(3, device="NULL")
  assert got is (x * Tensor.arange(3, device="NULL")).uop
  assert got.dtype is dtypes.float32 and got.src[1].op is Ops.CAST  # the int operand cast up, not an ALU of two dtypes

def test_gradient_of_a_uop() -> None:
  x = _t(3, 3).float()
  z = (x * x).sum()
  (tg,) = z.gradient(x)
  assert z.uop.gradient(x.uop) == [tg.uop]

def test_creation_functions() -> None:
  assert UOp.arange(2, 9, 3) is Tensor.arange(2, 9, 3).uop
  assert UOp.eye(2, 3) is Tensor.eye(2, 3).uop
  assert UOp.full((2, 3), 7, dtype=dtypes.int8) is Tensor.full((2, 3), 7, dtype=dtypes.int8).uop
  assert UOp.linspace(0, 1, 5) is Tensor.linspace(0, 1, 5).uop
  a = _t(2, 3)
  assert UOp.einsum("ij->ji", a.uop) is Tensor.einsum("ij->ji", a).uop
  assert UOp.zeros(2, 2).shape == (2, 2) and UOp.empty(3, dtype="int16").dtype is dtypes.int16

def test_random_words_of_a_key() -> None:
  # the pure random functions (an explicit key and counter) are lent; rand, which reads the device's counter, isn't
  key, counter = UOp.empty((2,), dtype=dtypes.uint32), UOp.zeros(2, dtype=dtypes.uint32)
  assert UOp.random_bits(key, counter, 5) is Tensor.random_bits(Tensor(key), Tensor(counter), 5).uop
  got = UOp._rand(key, counter, (2, 3), dtypes.float16)
  assert got is Tensor._rand(Tensor(key), Tensor(counter), (2, 3), dtypes.float16).uop
  assert got.shape == (2, 3) and got.dtype is dtypes.float16

def test_deviceless_uops_keep_uop_arithmetic() -> None:
  # the index math of kernels and symbolic sizes: UOp's own nodes, no Tensor constants, no promotion
  v = UOp.variable("i", 0, 10)
  assert (v + 1) is UOp(Ops.ADD, dtypes.int32, (v, UOp.const(dtypes.int32, 1)))
  assert (v * 4 // 2).op is Ops.IDIV and (v % 3).src[1] is UOp.const(dtypes.int32, 3)
  assert (v < 5).dtype is dtypes.bool and (v < 5).device is None
  assert v.where(1, 2) is UOp(Ops.WHERE, dtypes.int32, (v, UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2)))
  assert UOp.const(dtypes.int32, 7).maximum(v).op is Ops.MAX

def test_symbolic_sizes_stay_sizes() -> None:
  # a bound Variable given to a lent method is a size, as the Tensor's methods take it, not a tensor
  n = UOp.variable("n", 1, 8).bind(3)
  x = Tensor.empty(8, device="NULL")
  assert x.uop.shrink(((0, n),)) is x.shrink(((0, n),)).uop
  assert x.uop.shrink(((0, n),)).shape == (n,)

def test_uop_names_keep_their_meaning() -> None:
  u = _t(2, 3).uop
  assert u.size == 6 and u.shape == (2, 3) and u.ndim == 2  # properties, not Tensor.size(dim)
  assert UOp.const(dtypes.float32, 2.0).op is Ops.CONST and UOp.const(dtypes.float32, 2.0).device is None
  assert u.const_like(3) is UOp.const(u.dtype, 3)
  assert (u == u) is True and (u == u + 1) is False  # identity: UOps are dictionary keys
  assert u.replace(arg=(3, 2)).arg == (3, 2)
  assert u.cast(dtypes.int32) is u and u.cast("float32").dtype is dtypes.float32

def test_not_lent() -> None:
  for name in ("numpy", "item", "tolist", "data", "realize", "backward", "to", "shard", "assign", "rand", "randn",
               "dropout", "multinomial", "manual_seed", "keccak", "__setitem__", "__len__"):
    assert name not in UOp.__dict__, name
  with pytest.raises(TypeError): iter(UOp.variable("i", 0, 3))  # __getitem__ doesn't make a UOp iterable

def test_every_lent_name_is_the_tensors() -> None:
  for name in uop_methods.LENT + uop_methods.LENT_STATIC + uop_methods.SHARED:
    assert hasattr(Tensor, name) and name in UOp.__dict__, name
  assert not set(uop_methods.LENT) & set(uop_methods.SHARED)

def test_deep_deviceless_graph_device_without_recursion() -> None:
  # each shared operator asks its operands' device: a 20000-node chain built without it must not recurse that deep
  x = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 10),), 0)
  for i in range(20000): x = UOp(Ops.ADD, dtypes.int32, (x, UOp.const(dtypes.int32, i % 7)))
  assert (x + 1).device is None and (x + 1).op is Ops.ADD

def test_tensor_index_is_the_same_graph_each_time() -> None:
  x, i = _t(3, 4), _idx([2, 0, 1])
  assert x[i].uop is x[i].uop  # the flat index's materialization is shared, not numbered per call
