"""Views through padding in real kernels: an all-padding view, of any shape and after any movement op or reduce,
reads 0 on every device (the kernel drops its size-1 axes, which must not drop the view's mask)."""
from __future__ import annotations
import os
from typing import Any
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from attograd import Tensor
from attograd.helpers import prod

FUZZ = int(os.getenv("FUZZ", "1"))  # FUZZ=20 for a long bug hunt

# ***** regressions *****

def test_one_element_view_inside_padding(device: str) -> None:
  assert Tensor([5.0, 6.0]).pad(((1, 0),))[0:1].tolist() == [0.0]
  assert Tensor([5.0, 6.0]).pad(((1, 0),))[0].item() == 0.0
  assert Tensor([5.0, 6.0]).pad(((0, 2),))[3:].tolist() == [0.0]

def test_sum_of_the_padded_part_of_a_cat(device: str) -> None:
  assert Tensor([1.0, 2.0]).cat(Tensor([3.0]))[2:].sum().item() == 3.0
  assert Tensor([1, 2]).cat(Tensor([3]))[2:].sum().item() == 3

def test_all_padding_scalar_then_expand_and_reduce(device: str) -> None:
  pad = Tensor([5.0, 6.0]).pad(((1, 0),))[0:1]
  assert pad.reshape(()).expand(3).tolist() == [0.0, 0.0, 0.0]
  assert pad.reshape(1, 1).expand(2, 3).sum(1).tolist() == [0.0, 0.0]
  assert pad.reshape(()).expand(4).max().item() == 0.0

# ***** random movement chains against NumPy *****

def _apply(x: Any, kind: str, arg: tuple) -> Any:
  """One movement op on a NumPy array (padding with 0) or a Tensor."""
  if isinstance(x, np.ndarray):
    if kind == "reshape": return x.reshape(arg)
    if kind == "permute": return x.transpose(arg)
    if kind == "expand": return np.broadcast_to(x, arg)
    if kind == "pad": return np.pad(x, arg)
    if kind == "shrink": return x[tuple(slice(b, e) for b, e in arg)]
    return x[tuple(slice(None, None, -1) if f else slice(None) for f in arg)]
  if kind == "flip": return x.flip(tuple(i for i, f in enumerate(arg) if f)) if any(arg) else x
  return getattr(x, kind)(arg)

def _shape_of_size(draw: st.DrawFn, size: int) -> tuple[int, ...]:
  if size == 1 and draw(st.booleans()): return ()
  primes, n, p = [], size, 2
  while n > 1:
    while n % p == 0: primes, n = primes + [p], n // p
    p += 1
  dims = [1] * draw(st.integers(1, 4))
  for q in primes: dims[draw(st.integers(0, len(dims) - 1))] *= q
  return tuple(dims)

@st.composite
def padded_chain(draw: st.DrawFn) -> tuple[tuple[int, ...], list[tuple[str, tuple]], Any, str]:
  """Small shapes with size-1 dims, one-element shrinks (often landing in padding), and reshapes to ()."""
  shape = tuple(draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=1, max_size=3)))
  start, ops, x = shape, [], np.zeros(shape)
  for _ in range(draw(st.integers(1, 6))):
    kinds = ["reshape", "permute", "shrink", "flip", "pick"] + (["pad", "expand"] if x.size <= 48 else [])
    kind = draw(st.sampled_from(kinds)) if x.ndim else "reshape"  # a 0-d tensor only reshapes
    if 0 in x.shape and kind in ("reshape", "pick"): continue
    if kind == "reshape": arg: tuple = _shape_of_size(draw, x.size)
    elif kind == "permute": arg = tuple(draw(st.permutations(range(x.ndim))))
    elif kind == "flip": arg = tuple(draw(st.booleans()) for _ in x.shape)
    elif kind == "pad": arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in x.shape)
    elif kind == "expand": arg = tuple(draw(st.integers(1, 3)) if s == 1 else s for s in x.shape)
    elif kind == "pick": arg = tuple((b, b + 1) for s in x.shape for b in [draw(st.integers(0, s - 1))])
    else: arg = tuple((b, draw(st.integers(b, s))) for s in x.shape for b in [draw(st.integers(0, s))])
    kind = "shrink" if kind == "pick" else kind
    ops.append((kind, arg))
    x = _apply(x, kind, arg)
  if x.ndim and 0 not in x.shape and draw(st.booleans()):  # end on one element: often all padding
    ops.append(("shrink", tuple((b, b + 1) for s in x.shape for b in [draw(st.integers(0, s - 1))])))
    x = _apply(x, *ops[-1])
  axis = draw(st.sampled_from([None, "all"] + list(range(x.ndim))))
  return start, ops, axis, draw(st.sampled_from(["sum", "max"]))

@settings(max_examples=40 * FUZZ, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(padded_chain(), st.sampled_from([1, -1]))
def test_padded_chains_match_numpy(device: str, chain: tuple, sign: int) -> None:
  start, ops, axis, op = chain
  want = sign * np.arange(1, prod(start) + 1, dtype=np.float32).reshape(start)  # never 0: padding shows
  got = Tensor(want)
  for kind, arg in ops: want, got = _apply(want, kind, arg), _apply(got, kind, arg)
  if op == "max" and want.size == 0: return
  if axis == "all": want, got = getattr(want, op)(), getattr(got, op)()
  elif axis is not None: want, got = getattr(want, op)(axis), getattr(got, op)(axis)
  np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{start} {ops} {op}({axis})")

@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_padding_reads_zero_in_int_dtypes(device: str, dtype: str) -> None:
  x = Tensor([3, 4], dtype=dtype).pad(((2, 0),))
  assert x[1:2].tolist() == [0 if dtype != "bool" else False]
  assert x[0].item() == (0 if dtype != "bool" else False)
