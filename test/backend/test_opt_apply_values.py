"""Kernels built with the optimization actions a user asks for (Tensor.contiguous(arg=(Opt, ...)), tinygrad's form)
give NumPy's numbers on every device: upcasts and unrolls in every order, whole-axis splits (arg 0), padding of odd
axes, swapped loops, threads, and work-groups where the device has them; an action the device can't do is a clear
KernelOptError, not a silently different kernel."""
from __future__ import annotations
import dataclasses
import numpy as np
import pytest
from attograd import Device, Tensor
from attograd.codegen.opt import KernelOptError, Opt, OptOps
from attograd.engine.realize import run_linear
from attograd.uop.ops import Ops, UOp

U, R, P, S, T = OptOps.UPCAST, OptOps.UNROLL, OptOps.PADTO, OptOps.SWAP, OptOps.THREAD

def _ab(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(m * 1000 + k * 10 + n)
  return rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)

@pytest.mark.parametrize("opts", [
  (), (Opt(U, 0, 4), Opt(U, 1, 4)), (Opt(U, 0, 4), Opt(U, 1, 2), Opt(U, 0, 4)), (Opt(U, 0, 2), Opt(U, 1, 2)),
  (Opt(R, 0, 4),), (Opt(U, 1, 4), Opt(R, 0, 4)), (Opt(R, 0, 2), Opt(U, 1, 2)), (Opt(U, 0, 0), Opt(R, 0, 8)),
  (Opt(S, 0, 1), Opt(U, 0, 4)),
], ids=str)
def test_matmul_with_opts(device: str, opts: tuple):
  a, b = _ab(16, 32, 16)
  out = (Tensor(a) @ Tensor(b)).contiguous(arg=opts).numpy()
  np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)

def test_padto_odd_axes(device: str):
  a, b = _ab(7, 13, 6)
  out = (Tensor(a) @ Tensor(b)).contiguous(arg=(Opt(P, 0, 4), Opt(U, 0, 4), Opt(P, 3, 4), Opt(R, 0, 4))).numpy()
  np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)

def test_elementwise_and_reduce_opts(device: str):
  x = np.arange(48, dtype=np.float32).reshape(6, 8)
  np.testing.assert_equal((Tensor(x).T * 2 + 1).contiguous(arg=(Opt(U, 1, 0), Opt(U, 0, 2))).numpy(), x.T * 2 + 1)
  np.testing.assert_allclose(Tensor(x).max(1).contiguous(arg=(Opt(R, 0, 4), Opt(U, 0, 3))).numpy(), x.max(1))

def test_requested_opts_through_kernel_info(device: str):
  # a scheduled kernel's KernelInfo replaced, as tinygrad's tests do, then run
  a, b = _ab(16, 16, 16)
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  call = next(c for c in (ta @ tb).schedule_linear().src if c.src[0].op is Ops.SINK)
  sink = call.src[0]
  asked = sink.replace(arg=dataclasses.replace(sink.arg, opts_to_apply=(Opt(U, 1, 4), Opt(R, 0, 2))))
  run_linear(UOp(Ops.LINEAR, src=(call.replace(src=(asked, *call.src[1:])),)))
  out = call.src[1].buffer.numpy()  # the output Buffer's elements, as tinygrad's Buffer.numpy gives them
  assert out.shape == (256,) and out.dtype == np.float32
  np.testing.assert_allclose(out.reshape(16, 16), a @ b, rtol=1e-4, atol=1e-4)

def test_threads_where_the_device_has_them(device: str):
  a, b = _ab(64, 8, 64)
  t = (Tensor(a) @ Tensor(b)).contiguous(arg=(Opt(T, 0, 2),))
  if not Device[device].renderer.has_threads:
    with pytest.raises(KernelOptError, match="THREAD"): t.realize()
  else: np.testing.assert_allclose(t.numpy(), a @ b, rtol=1e-4, atol=1e-4)

def test_work_groups_where_the_device_has_them(device: str):
  a, b = _ab(4, 256, 8)
  opts = (Opt(OptOps.GROUPTOP, 0, 16), Opt(OptOps.LOCAL, 1, 4))
  t = (Tensor(a) @ Tensor(b)).contiguous(arg=opts)
  if not Device[device].renderer.has_local:
    with pytest.raises(KernelOptError, match="has no work-groups"): t.realize()
  else: np.testing.assert_allclose(t.numpy(), a @ b, rtol=1e-4, atol=1e-4)
