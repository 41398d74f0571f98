"""What a kernel costs (renderer.Estimates: ops, lds, mem) as engine.realize.estimate_uop reads it from a LINEAR's
calls, tinygrad's way: mem counts each buffer once per direction, lds every load and store each time it runs, and a
copy its bytes. Built for the NULL device (its C source is made, nothing compiles or runs)."""
from attograd import Tensor, dtypes
from attograd.engine.realize import compile_linear, estimate_uop
from attograd.renderer import Estimates
from attograd.uop.ops import Ops

def _last(t: Tensor) -> Estimates: return estimate_uop(compile_linear(t.schedule_linear()).src[-1])

def test_elementwise_moves_each_buffer_once():
  a, b = (Tensor.empty(256, 256, dtype=dtypes.uint8, device="NULL") for _ in range(2))
  assert _last(a + b).mem == 3 * 256 * 256 and _last(a + 3).mem == 2 * 256 * 256
  # an expanded input is read whole once: its own bytes
  assert _last(Tensor.empty(256, 1, dtype=dtypes.uint8, device="NULL").expand(256, 256) + b).mem == 2 * 256 * 256 + 256

def test_a_buffer_read_and_written_counts_twice():
  a = Tensor.empty(256, 256, device="NULL").realize()
  assert _last(a.assign(a + a)).mem == 2 * 256 * 256 * 4

def test_matmul_ops_and_mem():
  est = _last(Tensor.empty(64, 32, device="NULL") @ Tensor.empty(32, 16, device="NULL"))
  assert est.ops == 2 * 64 * 32 * 16 and est.mem == (64 * 32 + 32 * 16 + 64 * 16) * 4 and est.lds > 0

def test_a_copy_moves_its_bytes():
  linear = compile_linear(Tensor.empty(10, device="CPU").to("NULL").schedule_linear())
  copy = next(c for c in linear.src if c.src[0].op is Ops.COPY)
  assert estimate_uop(copy) == Estimates(0, 40, 40)

def test_estimates_add():
  assert Estimates(1, 2, 3) + Estimates(10, 20, 30) == Estimates(11, 22, 33)

def test_an_op_after_a_reduce_counts_once_per_output():
  # relu(a @ b): the multiply-adds run m*n*k times, the relu m*n (not once per summand)
  est = _last((Tensor.empty(64, 32, device="NULL") @ Tensor.empty(32, 16, device="NULL")).relu())
  assert est.ops == 2 * 64 * 32 * 16 + 64 * 16
  # a mean over rows: 256 adds per row (in vector lanes, then the lanes' sum), then one divide per row
  assert 8 * 256 + 8 <= _last(Tensor.empty(8, 256, device="NULL").mean(1)).ops <= 8 * 256 * 1.1
