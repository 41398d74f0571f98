"""Kernel optimizations: register tiles, vector lanes and their fallbacks give the same numbers as NumPy."""
from __future__ import annotations
import numpy as np
import pytest
from attograd import Device, Tensor
from attograd.codegen import get_program
from attograd.engine.schedule import create_schedule
from attograd.helpers import Context

def _src(t: Tensor) -> str:
  items, _ = create_schedule([t.uop])
  return get_program(items[-1].ast, Device["CPU"].renderer).src

@pytest.mark.parametrize("m,k,n", [(32, 48, 64), (64, 17, 32), (48, 64, 16), (4, 8, 32), (33, 16, 48)])
def test_matmul_tiles_match_numpy(m: int, k: int, n: int) -> None:
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)

def test_matmul_uses_vector_lanes() -> None:
  a, b = Tensor.rand(64, 64).realize(), Tensor.rand(64, 64).realize()
  src = _src(a @ b)
  assert "__attribute__((vector_size(64)))" in src and "float16 acc0" in src

def test_noopt_gives_plain_loops() -> None:
  a, b = Tensor.rand(64, 64).realize(), Tensor.rand(64, 64).realize()
  with Context(NOOPT=1): src = _src(a @ b)
  assert "vector_size" not in src

@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
def test_tiled_matmul_dtypes(dtype: str) -> None:
  rng = np.random.default_rng(1)
  a, b = rng.integers(-3, 4, (32, 32)).astype(dtype), rng.integers(-3, 4, (32, 48)).astype(dtype)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy().astype(np.float64), a.astype(np.float64) @ b, rtol=1e-3)

def test_lane_fallback_for_non_contiguous_output() -> None:
  # the transposed store is not contiguous along the lane: the lanes are unrolled as scalars instead
  rng = np.random.default_rng(2)
  a, b = rng.standard_normal((32, 16), dtype=np.float32), rng.standard_normal((16, 32), dtype=np.float32)
  out = (Tensor(a) @ Tensor(b)).T.contiguous()
  np.testing.assert_allclose(out.numpy(), (a @ b).T, rtol=1e-4, atol=1e-4)

def test_broadcast_reduce_with_padding_and_max() -> None:
  # a padded input and a max reduce over a broadcast: lanes with gates or max fall back to scalars
  rng = np.random.default_rng(3)
  x, w = rng.standard_normal((16, 1, 30), dtype=np.float32), rng.standard_normal((1, 32, 32), dtype=np.float32)
  tx = Tensor(x).pad(((0, 0), (0, 0), (1, 1)))
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1)))
  np.testing.assert_allclose((tx * Tensor(w)).sum(-1).numpy(), (xp * w).sum(-1), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((tx * Tensor(w)).max(-1).numpy(), (xp * w).max(-1), rtol=1e-5)

def test_large_matmul_cpu() -> None:
  rng = np.random.default_rng(4)
  a, b = rng.standard_normal((256, 128), dtype=np.float32), rng.standard_normal((128, 192), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-3)
