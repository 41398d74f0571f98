"""Index math past 2**31: kernels whose views or loop space can pass int32 index in int64 (and say so at DEBUG=3),
the rest stay int32; sums of huge expands are exact; Python ints past int32 become int64 tensors."""
from __future__ import annotations
import gc
import numpy as np
import pytest
from attograd import Tensor, dtypes
from attograd.codegen import get_program
from attograd.device import Device
from attograd.schedule import create_schedule
from attograd.uop.view import ShapeTracker

BIG = 2**31 + 5  # one past what int32 index math can count to

def _src(t: Tensor) -> str:
  items, _ = create_schedule([t.uop])
  return get_program(items[0].ast, Device["CPU"].renderer).src

# ***** choosing the width *****

def test_views_bound_their_index_math() -> None:
  assert ShapeTracker.from_shape((4, 6)).index_dtype() is dtypes.int32
  assert ShapeTracker.from_shape((2**31 - 1,)).index_dtype() is dtypes.int32
  assert ShapeTracker.from_shape((2**31 + 1,)).index_dtype() is dtypes.int64
  # a small view far into a big buffer: its offset alone needs 64 bits
  far = ShapeTracker.from_shape((2**33,)).shrink(((2**32, 2**32 + 4),))
  assert far.shape == (4,) and far.index_dtype() is dtypes.int64
  assert ShapeTracker.from_shape((1,)).expand((BIG,)).index_bound() == BIG  # the loop itself counts past int32

def test_kernels_render_the_width_they_need() -> None:
  small = _src(Tensor.ones(64, 64).contiguous().sum(1))
  assert "long long ridx" not in small and "int ridx" in small
  big = _src(Tensor([1.0, 2.0]).reshape(2, 1).expand(2, BIG).sum(1))
  assert "long long ridx" in big

def test_debug_3_says_the_width(capsys) -> None:
  from attograd.helpers import Context
  with Context(DEBUG=3): Tensor([3.0]).reshape(1, 1).expand(2, BIG).sum(1).realize()
  assert "index math: int64" in capsys.readouterr().out

# ***** huge expands: no memory, small kernels, every device *****

def test_sum_of_huge_expands(device: str) -> None:
  assert Tensor.ones(2**40).sum().item() == 2.0**40
  # PyTorch gives 4294967296.0 (2**32+5 rounded to float32); the two-stage split here rounds each of its 141 partial
  # sums (a float32 ulp is 256..512 there), so it lands within a few ulps, by device: not stuck at 2**24 per lane
  np.testing.assert_allclose(Tensor.ones(2**32 + 5).sum().item(), 4294967296.0, rtol=2e-6)
  assert Tensor.ones(2**32 + 5, dtype=dtypes.int64).sum().item() == 2**32 + 5
  assert Tensor.full((3,), 7, dtype=dtypes.int64).reshape(3, 1).expand(3, 2**33).max(1).tolist() == [7, 7, 7]

def test_reduce_over_a_huge_axis_with_int64_loops(device: str) -> None:
  x = Tensor([1, 2], dtype=dtypes.int64).reshape(2, 1).expand(2, BIG)
  assert x.sum(1).tolist() == [BIG, 2 * BIG]
  assert (x * 3).sum(1).tolist() == [3 * BIG, 6 * BIG]
  y = Tensor([1.0, 2.0]).reshape(2, 1).expand(2, BIG).sum(1).numpy()
  np.testing.assert_allclose(y, np.array([BIG, 2 * BIG], np.float32), rtol=1e-6)

# ***** Python ints past int32 *****

def test_big_python_ints_are_int64(device: str) -> None:
  assert Tensor(2**40).dtype is dtypes.int64 and Tensor(2**40).item() == 2**40
  assert Tensor([1, -2**40]).tolist() == [1, -2**40]
  # ints the default int holds stay a weakint stored in int32 (a Python scalar, as tinygrad shows it)
  for v in (2**31 - 1, -2**31):
    assert Tensor(v).dtype is dtypes.weakint and Tensor(v).numpy().dtype == np.int32 and Tensor(v).item() == v
  assert Tensor([2**31 - 1]).dtype is dtypes.int32 and Tensor([2**31]).dtype is dtypes.int64

def test_arange_past_int32(device: str) -> None:
  t = Tensor.arange(2**40, 2**40 + 5)
  assert t.dtype is dtypes.int64 and t.tolist() == list(range(2**40, 2**40 + 5))
  assert Tensor.arange(0, 2**41, 2**39).tolist() == [0, 2**39, 2**40, 3 * 2**39]
  assert Tensor.arange(2**40, 2**40 + 4).cumsum().tolist() == np.cumsum(np.arange(2**40, 2**40 + 4)).tolist()

# ***** a real buffer of more than 2**31 elements (CPU: 2 GiB, the other devices would take minutes) *****

@pytest.mark.slow
def test_real_buffer_past_int32() -> None:
  x = Tensor.ones(2**31 + 13, dtype=dtypes.uint8, device="CPU").cat(Tensor([3, 7], dtype=dtypes.uint8, device="CPU"))
  x = x.realize()
  try:
    n = x.shape[0]
    assert x[n - 1].item() == 7 and x[2**31 + 13].item() == 3 and x[2**31 + 12].item() == 1
    assert x[-4:].tolist() == [1, 1, 3, 7]
    assert x.sum().item() == 2**31 + 13 + 10  # uint8 sums in uint32, exactly
    assert x.max().item() == 7 and x.flip(0)[0].item() == 7
  finally:
    del x
    gc.collect()
