"""User errors fail at the call that caused them, with a message naming the shapes, axes or dtypes involved."""
from __future__ import annotations
import re
from typing import Any, Callable
import pytest
from attograd import Tensor, dtypes

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)

# assert only guards invariants in attograd, but the suite accepts any of these as long as the message is useful
ERRORS = (ValueError, RuntimeError, TypeError, IndexError, AssertionError)

class Re(str):
  """A message part given as a regex rather than literal text."""

def num(n: int) -> Re:
  """The number n on its own: 2 matches "axis 2" but not "-2" or "12"."""
  return Re(rf"(?<![-\d]){n}(?!\d)" if n >= 0 else rf"{n}(?!\d)")

def esc(*parts: str) -> str:
  """A regex that finds every part (in any order) in the message; plain strings are literal ("(2, 3)")."""
  return "".join(f"(?=[\\s\\S]*{p if isinstance(p, Re) else re.escape(p)})" for p in parts)

# (name, the failing call, strings its message must contain); nothing here realizes: the error comes at the call
SHAPE_ERRORS = [
  P("reshape", lambda: Tensor.ones(2, 3).reshape(4, 2), ["(2, 3)", "(4, 2)"]),
  P("reshape_neg1", lambda: Tensor.ones(2, 3).reshape(-1, 4), ["(2, 3)", "4"]),
  P("reshape_two_neg1", lambda: Tensor.ones(2, 3).reshape(-1, -1), ["-1"]),
  P("reshape_negative", lambda: Tensor.ones(2, 3).reshape(-2, -3), ["(2, 3)"]),
  P("view", lambda: Tensor.ones(2, 3).view(5), ["(2, 3)", "5"]),
  P("broadcast_add", lambda: Tensor.ones(2, 3) + Tensor.ones(4), ["(2, 3)", "(4,)"]),
  P("broadcast_mul", lambda: Tensor.ones(3, 1, 2) * Tensor.ones(4, 3), ["(3, 1, 2)", "(4, 3)"]),
  P("broadcast_where", lambda: Tensor.ones(2, 3).bool().where(Tensor.ones(3, 2), 0.0), ["(2, 3)", "(3, 2)"]),
  P("broadcast_cmp", lambda: Tensor.ones(5) < Tensor.ones(4), ["(5,)", "(4,)"]),
  P("broadcast_maximum", lambda: Tensor.ones(2, 2).maximum(Tensor.ones(3)), ["(2, 2)", "(3,)"]),
  P("matmul", lambda: Tensor.ones(2, 3) @ Tensor.ones(4, 5), ["(2, 3)", "(4, 5)"]),
  P("matmul_vec", lambda: Tensor.ones(3) @ Tensor.ones(4), ["(3,)", "(4,)"]),
  P("matmul_batch", lambda: Tensor.ones(2, 3, 4) @ Tensor.ones(3, 4, 5), ["(2, 3, 4)", "(3, 4, 5)"]),
  P("matmul_scalar", lambda: Tensor(2.0) @ Tensor.ones(3), ["()"]),
  P("dot", lambda: Tensor.ones(2, 3).dot(Tensor.ones(2, 3)), ["(2, 3)"]),
  P("expand", lambda: Tensor.ones(3).expand(2, 4), ["(3,)", "(2, 4)"]),
  P("expand_fewer_dims", lambda: Tensor.ones(2, 3).expand(3), ["(2, 3)"]),
  P("cat", lambda: Tensor.ones(2, 3).cat(Tensor.ones(2, 4), dim=0), ["(2, 3)", "(2, 4)"]),
  P("cat_ndim", lambda: Tensor.ones(2, 3).cat(Tensor.ones(3), dim=0), ["(2, 3)", "(3,)"]),
  P("stack", lambda: Tensor.stack(Tensor.ones(2), Tensor.ones(3)), ["(2,)", "(3,)"]),
  P("assign", lambda: Tensor.ones(3).realize().assign(Tensor.ones(4)), ["(3,)", "(4,)"]),
  P("pad_too_many", lambda: Tensor.ones(2, 3).pad(((1, 1), (1, 1), (1, 1))), ["(2, 3)"]),
  P("pad_odd_flat", lambda: Tensor.ones(2, 3).pad((1, 1, 1)), ["(1, 1, 1)"]),
  P("shrink_oob", lambda: Tensor.ones(2, 3).shrink(((0, 5), None)), ["(2, 3)", "5"]),
  P("shrink_reversed", lambda: Tensor.ones(2, 3).shrink(((2, 1), None)), ["(2, 3)"]),
  P("permute_len", lambda: Tensor.ones(2, 3, 4).permute(1, 0), ["(2, 3, 4)", "(1, 0)"]),
  P("permute_dup", lambda: Tensor.ones(2, 3).permute(0, 0), ["(0, 0)"]),
  P("item_many", lambda: Tensor.ones(2, 3).item(), ["(2, 3)"]),
  P("split_sizes", lambda: Tensor.ones(5, 2).split([2, 2], dim=0), [num(5)]),
  P("gather_ndim", lambda: Tensor.ones(3, 4).gather(0, Tensor([1, 2])), ["(3, 4)", "(2,)"]),
  P("ragged", lambda: Tensor([[1, 2], [3]]), [Re("ragged|inhomogeneous|length|shape")]),
]
@pytest.mark.parametrize("fn,must", SHAPE_ERRORS)
def test_shape_error(device: str, fn: Callable, must: list) -> None:
  with pytest.raises(ERRORS, match=esc(*must)): fn()

# axis/dim out of range: the message names the bad axis and the shape (5, 6)
AXIS_ERRORS = [
  P("sum", lambda t: t.sum(axis=2), 2), P("sum_neg", lambda t: t.sum(axis=-3), -3),
  P("sum_tuple", lambda t: t.sum(axis=(0, 7)), 7), P("max", lambda t: t.max(axis=2), 2),
  P("mean", lambda t: t.mean(3), 3), P("argmax", lambda t: t.argmax(2), 2), P("std", lambda t: t.std(2), 2),
  P("cumsum", lambda t: t.cumsum(2), 2), P("permute", lambda t: t.permute(0, 2), 2),
  P("transpose", lambda t: t.transpose(0, 2), 2), P("flip", lambda t: t.flip(2), 2),
  P("squeeze", lambda t: t.squeeze(2), 2), P("unsqueeze", lambda t: t.unsqueeze(4), 4),
  P("flatten", lambda t: t.flatten(3), 3), P("cat", lambda t: t.cat(t, dim=2), 2),
  P("softmax", lambda t: t.softmax(2), 2), P("gather", lambda t: t.gather(2, Tensor([[0]])), 2),
  P("roll", lambda t: t.roll(1, 2), 2), P("split", lambda t: t.split(1, dim=2), 2),
]
@pytest.mark.parametrize("fn,axis", AXIS_ERRORS)
def test_axis_error(device: str, fn: Callable, axis: int) -> None:
  with pytest.raises(ERRORS, match=esc(num(axis), "(5, 6)")): fn(Tensor.ones(5, 6))

INDEX_ERRORS = [
  P("int_oob", lambda t: t[5], [num(5), num(4)]), P("neg_oob", lambda t: t[-5], [num(-5), num(4)]),
  P("second_dim", lambda t: t[0, 3], [num(3)]), P("too_many", lambda t: t[0, 0, 0], ["(4, 3)"]),
  P("two_ellipsis", lambda t: t[..., ...], [Re(r"\.\.\.|[Ee]llipsis")]), P("float_index", lambda t: t[1.5], ["1.5"]),
  P("zero_step", lambda t: t[::0], ["step"]),
  P("float_tensor_index", lambda t: t[Tensor([0.0, 1.0])], ["dtypes.float"]),
]
@pytest.mark.parametrize("fn,must", INDEX_ERRORS)
def test_index_error(device: str, fn: Callable, must: list) -> None:
  with pytest.raises(ERRORS, match=esc(*must)): fn(Tensor.ones(4, 3))

def test_int_index_out_of_range_is_index_error(device: str) -> None:
  with pytest.raises(IndexError): Tensor.ones(4)[4]

DTYPE_ERRORS = [
  P("cast_typo", lambda: Tensor([1]).cast("flot32"), ["flot32"]),
  P("ctor_typo", lambda: Tensor([1], dtype="flot32"), ["flot32"]),
  P("zeros_typo", lambda: Tensor.zeros(2, dtype="int33"), ["int33"]),
  P("bitwise_float", lambda: Tensor([1.0]) & Tensor([1.0]), ["dtypes.float"]),
  P("xor_float", lambda: Tensor([1.0]) ^ 1, ["dtypes.float"]),
  P("invert_float", lambda: ~Tensor([1.5]), ["dtypes.float"]),
  P("shift_float", lambda: Tensor([1.0]) << 1, ["dtypes.float"]),
  P("bitcast_size", lambda: Tensor.ones(3, dtype=dtypes.float32).bitcast(dtypes.int64), ["dtypes.long"]),
  P("scatter_reduce_name", lambda: Tensor.ones(2).scatter(0, Tensor([0]), 1.0, reduce="mean"), ["mean"]),
  P("pad_mode", lambda: Tensor.ones(2).pad((1, 1), mode="wrap"), ["wrap"]),
  P("float_index_tensor_gather", lambda: Tensor.ones(2, 2).gather(0, Tensor([[0.0, 1.0]])), ["dtypes.float"]),
]
@pytest.mark.parametrize("fn,must", DTYPE_ERRORS)
def test_dtype_error(device: str, fn: Callable, must: list) -> None:
  with pytest.raises(ERRORS, match=esc(*must)): fn()

def test_unknown_device() -> None:
  with pytest.raises(ERRORS, match="FOO"): Tensor([1.0], device="FOO")

def test_error_is_raised_at_the_call_not_at_realize(device: str) -> None:
  # the bad line raises by itself; nothing has been realized yet and the message names the shapes
  a = Tensor.ones(2, 3) * 2  # lazy
  with pytest.raises(ERRORS, match=esc("(2, 3)", "(4, 2)")): a.reshape(4, 2)
  assert a.tolist() == [[2.0] * 3] * 2  # the failed call left `a` usable

def test_len_of_scalar(device: str) -> None:
  with pytest.raises(TypeError): len(Tensor(1.0))

def test_bool_of_multi_element(device: str) -> None:
  with pytest.raises(ERRORS):
    if Tensor([1.0, 2.0]): pass

# (name, attograd call, the same mistake in PyTorch, the class attograd raised before): PyTorch raises RuntimeError for
# these and so does tinygrad, so attograd's error is a RuntimeError too (and still the ValueError/TypeError it was)
def _t() -> Any:
  import torch
  return torch

TORCH_RUNTIME_ERRORS = [
  P("matmul_inner", lambda: Tensor.ones(2, 4) @ Tensor.ones(1, 3), lambda: _t().ones(2, 4) @ _t().ones(1, 3),
    ValueError),
  P("matmul_0d", lambda: Tensor(3.0) @ Tensor.ones(3, 3), lambda: _t().tensor(3.0) @ _t().ones(3, 3), ValueError),
  P("permute", lambda: Tensor.ones(3, 4).permute(0, 0), lambda: _t().ones(3, 4).permute(0, 0), ValueError),
  P("flip_repeated", lambda: Tensor.ones(3, 4).flip((1, -1)), lambda: _t().ones(3, 4).flip((1, -1)), ValueError),
  P("reshape_two_neg1", lambda: Tensor.ones(3, 4).reshape(-1, -1, 2), lambda: _t().ones(3, 4).reshape(-1, -1, 2),
    ValueError),
  P("clip_none", lambda: Tensor.ones(3).clip(None, None), lambda: _t().ones(3).clip(None, None), ValueError),
  P("div_mode", lambda: Tensor.ones(3).div(2, rounding_mode="typo"), lambda: _t().ones(3).div(2, rounding_mode="typo"),
    ValueError),
  P("roll_shifts", lambda: Tensor.ones(2, 4).roll((1, 2)), lambda: _t().ones(2, 4).roll((1, 2)), ValueError),
  P("roll_dims", lambda: Tensor.ones(3, 3).roll(1, (0, 1)), lambda: _t().ones(3, 3).roll(1, (0, 1)), ValueError),
  P("einsum_sizes", lambda: Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3), Tensor.ones(4, 2)),
    lambda: _t().einsum("ij,jk->ik", _t().ones(2, 3), _t().ones(4, 2)), ValueError),
  P("gather_ndim", lambda: Tensor.ones(4, 5).gather(0, Tensor([1])),
    lambda: _t().ones(4, 5).gather(0, _t().tensor([1])), ValueError),
  P("scatter_src_small", lambda: Tensor.ones(2, 3).scatter(1, Tensor([[0, 1, 2]]), Tensor.ones(1, 2)),
    lambda: _t().ones(2, 3).scatter(1, _t().tensor([[0, 1, 2]]), _t().ones(1, 2)), ValueError),
  P("scatter_src_dtype", lambda: Tensor.ones(2, 3).half().scatter(1, Tensor([[0]]), Tensor.ones(1, 1)),
    lambda: _t().ones(2, 3).half().scatter(1, _t().tensor([[0]]), _t().ones(1, 1)), None),
  P("shift_float", lambda: Tensor([1.0]) << 2, lambda: _t().tensor([1.0]) << 2, TypeError),
  P("gather_float_index", lambda: Tensor.ones(2, 3).gather(0, Tensor([[0.0]])),
    lambda: _t().ones(2, 3).gather(0, _t().tensor([[0.0]])), TypeError),
  P("gather_bool_index", lambda: Tensor.ones(2, 3).gather(0, Tensor([[True]])),
    lambda: _t().ones(2, 3).gather(0, _t().tensor([[True]])), TypeError),
  P("normal_std", lambda: Tensor.normal(3, std=-1.0), lambda: _t().normal(0.0, -1.0, (3,)), ValueError),
  P("uniform_range", lambda: Tensor.uniform(3, low=5.0, high=3.0), lambda: _t().empty(3).uniform_(5.0, 3.0),
    ValueError),
  P("randint_range", lambda: Tensor.randint(3, low=10, high=5), lambda: _t().randint(10, 5, (3,)), ValueError),
  P("pool_too_small", lambda: Tensor.ones(1, 1, 6, 7).conv2d(Tensor.ones(1, 1, 3, 3), dilation=3),
    lambda: _t().nn.functional.conv2d(_t().ones(1, 1, 6, 7), _t().ones(1, 1, 3, 3), dilation=3), ValueError),
  P("sdpa_mask_and_causal", lambda: Tensor.ones(1, 2, 2).scaled_dot_product_attention(Tensor.ones(1, 2, 2),
    Tensor.ones(1, 2, 2), attn_mask=Tensor.ones(2, 2, dtype=dtypes.bool), is_causal=True),
    lambda: _t().nn.functional.scaled_dot_product_attention(_t().ones(1, 2, 2), _t().ones(1, 2, 2), _t().ones(1, 2, 2),
    attn_mask=_t().ones(2, 2, dtype=_t().bool), is_causal=True), ValueError),
  P("cross_entropy_target", lambda: Tensor.ones(4, 10).cross_entropy(Tensor.ones(4, 1, dtype=dtypes.int32)),
    lambda: _t().nn.functional.cross_entropy(_t().ones(4, 10), _t().ones(4, 1, dtype=_t().long)), ValueError),
]
@pytest.mark.parametrize("fn,torch_fn,old", TORCH_RUNTIME_ERRORS)
def test_runtime_error_as_torch(device: str, fn: Callable, torch_fn: Callable, old: type | None) -> None:
  with pytest.raises(RuntimeError): torch_fn()
  with pytest.raises(RuntimeError) as e: fn()
  if old is not None: assert isinstance(e.value, old), f"{type(e.value)} stopped being a {old.__name__}"
  assert str(e.value)  # a message naming the op, not a bare exception

# (name, attograd call, the classes its error must be): tinygrad's tests catch IndexError for a 0-d cat and
# NotImplementedError (PyTorch's class) for an unknown mode; the ValueError attograd raised before stays
EXPECTED_CLASSES = [
  P("cat_0d", lambda: Tensor(3.0).cat(Tensor(3.0)), (IndexError, ValueError, RuntimeError)),
  P("pad_mode", lambda: Tensor.ones(3, 3).pad((3, 0), mode="typo"), (NotImplementedError, ValueError)),
  P("multinomial_0d", lambda: Tensor(2.0).multinomial(1), (AssertionError, ValueError, RuntimeError)),
  P("multinomial_no_samples", lambda: Tensor([1.0, 9.0]).multinomial(0), (AssertionError, ValueError, RuntimeError)),
  P("interpolate_mode", lambda: Tensor.ones(1, 1, 3).interpolate((4,), mode="cubic-ish"),
    (NotImplementedError, ValueError)),
]
@pytest.mark.parametrize("fn,classes", EXPECTED_CLASSES)
def test_error_classes(device: str, fn: Callable, classes: tuple[type, ...]) -> None:
  with pytest.raises(classes[0]) as e: fn()
  assert all(isinstance(e.value, c) for c in classes), f"{type(e.value).__mro__} is missing one of {classes}"
  assert str(e.value)
