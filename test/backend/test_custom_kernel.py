"""Tensor.custom_kernel on every device: a hand-written kernel body (tinygrad's kernel-building API) runs once, as one
kernel, over the tensors' buffers; it reads lazy and non-contiguous inputs after they are computed into buffers,
writes in place, gives several outputs, accumulates in registers or in memory, reads through padded views, takes its
gradient from grad_fxn, and is deferred (not run) by linear_with_vars."""
from __future__ import annotations
import numpy as np
import pytest
from attograd import Device, GlobalCounters, Tensor, TinyJit, Variable
from attograd.dtype import AddrSpace, dtypes
from attograd.engine.realize import run_linear
from attograd.uop.ops import AxisType, KernelInfo, Ops, ProgramInfo, UOp, buffers

def scale_shift(out: UOp, x: UOp) -> UOp:
  """out = 3*x - 1, over a flat loop."""
  o, v = out.flatten(), x.flatten()
  i = UOp.range(v.numel(), 0)
  return o[i].store(v[i] * 3.0 - 1.0).end(i).sink(arg=KernelInfo(name="scale_shift"))

def matmul_in_memory(c: UOp, a: UOp, b: UOp) -> UOp:
  """c = a @ b, accumulating in c's own memory (zeroed, then read back and written in the reduce loop)."""
  i, j = UOp.range(c.shape[0], 0), UOp.range(c.shape[1], 1)
  k = UOp.range(a.shape[1], 2, AxisType.REDUCE)
  c = c[i, j].set(0.0)
  c = c[i, j].set(c.after(k)[i, j] + a[i, k] * b[k, j], end=k)
  return c.end(i, j).sink(arg=KernelInfo(name="mm"))

def row_max(out: UOp, x: UOp) -> UOp:
  """out[r] = max over the row, the running max in a register."""
  r, c = UOp.range(x.shape[0], 0), UOp.range(x.shape[1], 1, AxisType.REDUCE)
  m = UOp.placeholder((1,), x.dtype, 0, addrspace=AddrSpace.REG)
  m = m.after(r)[0].set(x[r, 0])
  m = m[0].set(m.after(c)[0].maximum(x[r, c]), end=c)
  return out[r].set(m[0], end=r).sink(arg=KernelInfo(name="row_max"))

def sum_and_diff(s: UOp, d: UOp, a: UOp, b: UOp) -> UOp:
  i = UOp.range(a.shape[0], 0)
  return UOp.group(s[i].store(a[i] + b[i]), d[i].store(a[i] - b[i])).end(i).sink(arg=KernelInfo(name="sum_diff"))

def test_lazy_and_strided_inputs(device: str) -> None:
  x = np.arange(12, dtype=np.float32).reshape(3, 4)
  t = Tensor(x)
  out = Tensor.empty(4, 3).custom_kernel((t * 2).T, fxn=scale_shift)[0]  # a lazy value, seen transposed
  np.testing.assert_allclose(out.numpy(), (x * 2).T * 3 - 1)

def test_matmul_accumulating_in_memory(device: str) -> None:
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
  c = Tensor.custom_kernel(Tensor.empty(5, 3), Tensor(a), Tensor(b), fxn=matmul_in_memory)[0]
  np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5, atol=1e-5)

def test_register_accumulator(device: str) -> None:
  x = np.array([[3, -1, 7], [-5, -2, -9]], dtype=np.int32)
  out = Tensor.custom_kernel(Tensor.empty(2, dtype=dtypes.int32), Tensor(x), fxn=row_max)[0]
  assert out.tolist() == [7, -2]

def test_reduce_values(device: str) -> None:
  # log-sum-exp per row from two reduces (the max, then the sum of exps less it); the max also stored, reused
  def lse(out: UOp, mx: UOp, x: UOp) -> UOp:
    r = UOp.range(x.shape[0], 0)
    c1, c2 = UOp.range(x.shape[1], 1, AxisType.REDUCE), UOp.range(x.shape[1], 2, AxisType.REDUCE)
    m = x[r, c1].reduce(c1, arg=Ops.MAX)
    total = (x[r, c2] - m).exp().reduce(c2, arg=Ops.ADD)
    return UOp.group(out[r].store(total.log() + m), mx[r].store(m)).end(r).sink(arg=KernelInfo(name="lse"))
  x = np.array([[1.0, 2.0, 3.0], [-1.0, 50.0, 0.5]], dtype=np.float32)
  out, mx, _ = Tensor.custom_kernel(Tensor.empty(2), Tensor.empty(2), Tensor(x), fxn=lse)
  np.testing.assert_allclose(out.numpy(), np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1), rtol=1e-5)
  assert mx.tolist() == [3.0, 50.0]

def test_loop_over_a_bound_variable(device: str) -> None:
  # a loop's size from a bound Variable is a kernel argument: one program, each value passed when it runs
  def first_n(out: UOp, x: UOp, n: UOp) -> UOp:
    i = UOp.range(n, 0)
    return out[i].store(x[i] * 10.0).end(i).sink(arg=KernelInfo(name="first_n"))
  for v, want in ((2, [10.0, 20.0, 0.0, 0.0]), (3, [10.0, 20.0, 30.0, 0.0])):
    n = Variable("n", 1, 4).bind(v)
    o = Tensor.zeros(4).contiguous().realize()
    assert Tensor.custom_kernel(o, Tensor([1.0, 2.0, 3.0, 4.0]), fxn=lambda a, b: first_n(a, b, n))[0].tolist() == want

def test_two_outputs_one_kernel(device: str) -> None:
  a, b = Tensor([5.0, 1.0, 2.0]), Tensor([1.0, 1.0, 4.0])
  Tensor.realize(a, b)
  s, d, _, _ = Tensor.custom_kernel(Tensor.empty(3), Tensor.empty(3), a, b, fxn=sum_and_diff)
  GlobalCounters.reset()
  assert s.tolist() == [6.0, 2.0, 6.0]
  assert d.tolist() == [4.0, 0.0, -2.0]
  assert GlobalCounters.kernel_count == 1  # realizing the second output didn't run the kernel again

def test_constant_input_is_folded(device: str) -> None:
  # a constant the kernel only reads needs no buffer: one kernel, the constant in its code
  out = Tensor.custom_kernel(Tensor.empty(2, 3), Tensor.full((2, 3), 2.5).realize(), fxn=scale_shift)[0]
  GlobalCounters.reset()
  assert out.tolist() == [[6.5] * 3] * 2 and GlobalCounters.kernel_count == 1
  # written, it gets a buffer of its own
  c = Tensor.ones(3)
  assert Tensor.custom_kernel(c, c, fxn=scale_shift)[0].tolist() == [2.0] * 3

def test_chained_kernels_need_no_copy(device: str) -> None:
  # one kernel's output, reshaped, is the next one's input as it is: two kernels, no copy between
  a = Tensor.arange(6).float().contiguous().realize()
  b = Tensor.custom_kernel(Tensor.empty(6), a, fxn=scale_shift)[0]
  c = Tensor.custom_kernel(Tensor.empty(2, 3), b.reshape(2, 3), fxn=scale_shift)[0]
  GlobalCounters.reset()
  assert c.flatten().tolist() == [float(3 * (3 * x - 1) - 1) for x in range(6)] and GlobalCounters.kernel_count == 2

def test_over_several_devices(device: str) -> None:
  # every tensor on the same devices: the body runs on each device's part (a split along axis 0, or a whole copy)
  if device not in ("CPU", "CL"): pytest.skip("two devices of one kind: CPU and CL here")
  devs = (f"{device}:0", f"{device}:1")
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
  c = Tensor(Tensor.empty(3, 5, device=devs).uop.unshard(0), device=devs)
  out = Tensor.custom_kernel(c, Tensor(a).shard(devs, axis=0), Tensor(b).to(devs), fxn=matmul_in_memory)[0]
  assert out.shape == (6, 5)
  out.realize()
  assert out.uop.axis == 0 and out.device == Device.canonicalize(devs)  # split as c is
  np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="different devices"):
    Tensor.custom_kernel(Tensor.empty(6, 5), Tensor(a).shard(devs, axis=0), Tensor(b), fxn=matmul_in_memory)

def test_in_place_through_the_same_tensor(device: str) -> None:
  x = Tensor([1.0, 2.0, 3.0]).contiguous().realize()
  y = Tensor.custom_kernel(x, x, fxn=scale_shift)[0]
  assert y.tolist() == [2.0, 5.0, 8.0]
  assert x.tolist() == [2.0, 5.0, 8.0]  # the kernel wrote x's buffer

def test_read_through_pad(device: str) -> None:
  def shifted(out: UOp, x: UOp) -> UOp:
    i = UOp.range(out.shape[0], 0)
    return out[i].store(x.pad(((2, 0),))[i]).end(i).sink(arg=KernelInfo(name="shifted"))
  out = Tensor.custom_kernel(Tensor.empty(5), Tensor([1.0, 2.0, 3.0]), fxn=shifted)[0]
  assert out.tolist() == [0.0, 0.0, 1.0, 2.0, 3.0]

def test_grad_fxn(device: str) -> None:
  x = Tensor([1.0, -2.0, 4.0], requires_grad=True)
  def grad(g: UOp, call: UOp) -> tuple[UOp | None, ...]:
    assert call.src[2] is x.uop  # call.src[1:] are the tensors, as passed
    return (None, (Tensor(g) * 3).uop)
  out = Tensor.custom_kernel(Tensor.empty(3), x, fxn=scale_shift, grad_fxn=grad)[0]
  (out * Tensor([1.0, 2.0, 3.0])).sum().backward()
  assert out.tolist() == [2.0, -7.0, 11.0]
  assert x.grad is not None and x.grad.tolist() == [3.0, 6.0, 9.0]

def test_backward_without_grad_fxn_says_so(device: str) -> None:
  x = Tensor([1.0, 2.0], requires_grad=True)
  out = Tensor.custom_kernel(Tensor.empty(2), x, fxn=scale_shift)[0]
  with pytest.raises(RuntimeError, match="grad_fxn"): out.sum().backward()
  assert out.tolist() == [2.0, 5.0]  # the values don't need it

def test_under_tinyjit(device: str) -> None:
  # a TinyJit captures the custom kernel like any other and replays it on the new input's buffer
  @TinyJit
  def f(x: Tensor) -> Tensor: return (Tensor.custom_kernel(Tensor.empty(3), x, fxn=scale_shift)[0] + 1).realize()
  for k in range(4):
    assert f(Tensor([1.0, 2.0, 3.0]).add(k).realize()).tolist() == [3.0 * (v + k) for v in (1.0, 2.0, 3.0)]

def test_linear_with_vars_defers(device: str) -> None:
  x = Tensor([1.0, 2.0]).contiguous().realize()
  out = Tensor.custom_kernel(Tensor.empty(2), x, fxn=scale_shift)[0]
  GlobalCounters.reset()
  linear, _ = out.linear_with_vars()
  assert GlobalCounters.kernel_count == 0 and len(linear.src) == 1
  run_linear(linear)
  assert out.tolist() == [2.0, 5.0]

def test_run_linear_of_a_hand_built_call(device: str) -> None:
  # tinygrad's kernel tests: a body over params, CALLed over BUFFER nodes that have Buffers, run as a LINEAR
  out, x = UOp.param(0, dtypes.int32, (3,)), UOp.param(1, dtypes.int32, (3,))
  i = UOp.range(3, 0)
  body = out.index(i).store(x.index(i) * x.index(i)).end(i).sink(arg=KernelInfo(name="square"))
  bo, bx = UOp.new_buffer(device, 3, dtypes.int32), UOp.new_buffer(device, 3, dtypes.int32)
  buffers[bx].allocate().copyin(memoryview(np.array([2, -3, 4], dtype=np.int32).tobytes()))
  run_linear(UOp(Ops.LINEAR, dtypes.void, (body.call(bo, bx),)))
  assert np.frombuffer(buffers[bo].as_memoryview(), dtype=np.int32).tolist() == [4, 9, 16]

_DOUBLE_SRC = {  # out = 2 * x over 4 floats, in the device's own language
  "CPU": "void dbl(float* restrict out, float* restrict x) { for (int i = 0; i < 4; i++) out[i] = 2.0f * x[i]; }",
  "CL": "__kernel void dbl(__global float* out, __global float* x) { for (int i = 0; i < 4; i++) "
        "out[i] = 2.0f * x[i]; }"}

def test_kernel_from_source(device: str) -> None:
  if device not in _DOUBLE_SRC: pytest.skip(f"no source text written for {device} here")
  def prg(out: UOp, x: UOp) -> UOp:
    sink = UOp.sink(out, x, arg=KernelInfo(name="dbl"))
    src = UOp(Ops.SOURCE, arg=_DOUBLE_SRC[device])
    info = ProgramInfo(name="dbl", global_size=(1, 1, 1), local_size=(1, 1, 1))
    return UOp(Ops.PROGRAM, dtypes.void, (sink, UOp(Ops.LINEAR, dtypes.void, sink.src), src), info)
  out = Tensor.custom_kernel(Tensor.empty(4), Tensor([1.0, 2.0, 3.0, 4.0]) + 1, fxn=prg)[0]
  assert out.tolist() == [4.0, 6.0, 8.0, 10.0]

def test_bad_fxn(device: str) -> None:
  with pytest.raises(TypeError, match="SINK"): Tensor.empty(2).custom_kernel(fxn=lambda o: o[0].store(1.0))
