"""In-place assign: the value may read the target, and kernels whose inputs fold away still run everywhere."""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
from attograd import GlobalCounters, Tensor, dtypes
from attograd.dtype import Invalid
from attograd.uop.ops import Ops, UOp

def test_assign_reading_shifted_target(device: str) -> None:
  t = Tensor([0.0, 1, 2, 3, 4, 5]).realize()
  t.assign(t.shrink(((0, 5),)).pad_(((1, 0),)))
  assert t.tolist() == [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]

def test_assign_reading_flipped_target(device: str) -> None:
  t = Tensor([0.0, 1, 2, 3, 4, 5]).realize()
  t.assign(t.flip(0))
  assert t.tolist() == [5.0, 4.0, 3.0, 2.0, 1.0, 0.0]

def test_assign_elementwise_is_one_kernel(device: str) -> None:
  t = Tensor([0.0, 1, 2, 3]).realize()
  GlobalCounters.reset()
  t.assign(t * 2 + 1)
  assert GlobalCounters.kernel_count == 0  # the write waits for a realize that needs it
  t.realize()
  assert GlobalCounters.kernel_count == 1
  assert t.tolist() == [1.0, 3.0, 5.0, 7.0]

def test_assign_keeps_other_views_consistent(device: str) -> None:
  t = Tensor([1.0, 2.0]).realize()
  before = t + 0
  t.assign(Tensor([5.0, 6.0]))
  assert (t + 1).tolist() == [6.0, 7.0]
  assert before.shape == (2,)

def test_kernel_with_folded_away_input(device: str) -> None:
  # where(True, a, b) never reads b: the program's buffers are renumbered
  a, b = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
  assert Tensor.full((2,), True).where(a, b).tolist() == [1.0, 2.0]
  assert Tensor.full((2,), False).where(a, b).tolist() == [3.0, 4.0]

def test_assign_into_a_region_at_a_symbolic_position(device: str) -> None:
  # a KV cache row written at a Variable position (the LLM's decode step): the kernel stores into that region only;
  # the store used to be contiguous from element 0 of the buffer, whatever the target's view
  from attograd import TinyJit, Variable
  from attograd.llm.model import assign_later
  import numpy as np
  cache = Tensor.zeros(2, 6, 3).contiguous().realize()
  want = np.zeros((2, 6, 3), np.float32)
  pos = Variable("pos", 0, 5)
  @TinyJit
  def write(v: Tensor, p: Any) -> Tensor:
    region = cache.shrink((None, (p, p + 1), None))
    assign_later(region, v * 2).realize()
    return cache.sum((0, 2))
  for i in (4, 0, 5, 2):  # run, capture, replay, replay: one program for every position
    sums = write(Tensor.full((2, 1, 3), float(i + 1)).contiguous().realize(), pos.bind(i))
    want[:, i] = 2 * (i + 1)
    assert np.array_equal(cache.numpy(), want), (i, cache.numpy()[..., 0])
    assert sums.tolist() == want.sum((0, 2)).tolist()
  # a region whose size is symbolic too (a prefill chunk of rows [p, p + 2)) and a fixed one
  assign_later(cache.shrink((None, (pos.bind(1), pos.bind(1) + 2), None)), Tensor.full((2, 2, 3), -1.0)).realize()
  assign_later(cache.shrink(((1, 2), (0, 6), (1, 2))), Tensor.full((1, 6, 1), 9.0)).realize()
  want[:, 1:3], want[1, :, 1] = -1, 9
  assert np.array_equal(cache.numpy(), want)

# ***** assign and setitem through views: the buffer under the view is written (tinygrad and PyTorch semantics) *****

def test_assign_to_slice_writes_the_buffer(device: str) -> None:
  x = Tensor([1, 2, 3, 4]).realize()
  xs = x[2:4]
  xs.assign(xs + 1)
  assert x.tolist() == [1, 2, 4, 5] and xs.tolist() == [4, 5]

def test_assign_to_slice_reading_other_slice(device: str) -> None:
  x = Tensor([1, 2, 3, 4]).realize()
  x[1:3].assign(x[2:4] + 1)  # reads positions it also writes: the value is computed first
  assert x.tolist() == [1, 4, 5, 4]

def test_assign_to_overlapping_shift(device: str) -> None:
  x = Tensor.arange(50).float().clone().realize()
  want = np.arange(50, dtype=np.float32)
  want[:45] = want[5:].copy()
  x[0:45].assign(x[5:50])
  np.testing.assert_equal(x.numpy(), want)

def test_assign_to_flip_reading_buffer(device: str) -> None:
  ref = np.arange(16, dtype=np.float32)
  x = Tensor(ref).contiguous().realize()
  GlobalCounters.reset()
  xs = x[::-1]
  xs.assign(xs + x)
  np.testing.assert_equal(x.numpy(), ref + ref[::-1])  # reading x runs the write into it
  assert GlobalCounters.kernel_count == 2  # the value into its own buffer, then the write

def test_assign_to_permuted_row(device: str) -> None:
  x = Tensor.zeros(3, 4).contiguous().realize()
  x.T[1].assign(Tensor([5.0, 6.0, 7.0]))
  assert x.tolist() == [[0.0, 5.0, 0.0, 0.0], [0.0, 6.0, 0.0, 0.0], [0.0, 7.0, 0.0, 0.0]]

def test_assign_to_bitcast_view(device: str) -> None:
  a = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  a[0:2].bitcast(dtypes.uint32).assign(Tensor([0x40800000, 0x40400000], dtype=dtypes.uint32))
  assert a.tolist() == [4.0, 3.0, 3.0, 4.0]

def test_assign_broadcasts_value(device: str) -> None:
  a = Tensor.zeros(3, 2).contiguous().realize()
  a.assign(Tensor([[1.0, 2.0]]))
  assert a.tolist() == [[1.0, 2.0]] * 3
  a[1:].assign(7.0)
  assert a.tolist() == [[1.0, 2.0], [7.0, 7.0], [7.0, 7.0]]
  with pytest.raises(ValueError, match=r"assign: shape mismatch, target \(3, 2\) but value \(3,\)"):
    a.assign(Tensor([1.0, 2, 3]))

def test_setitem_through_views(device: str) -> None:
  t = Tensor.zeros(2, 3).contiguous().realize()
  t.T[1, 0] = 5.0
  t[::-1][0, 2] = 6.0
  t.detach()[0, 0] = 7.0
  assert t.tolist() == [[7.0, 5.0, 0.0], [0.0, 0.0, 6.0]]

@pytest.mark.parametrize("view", ["[1:7:2]", "[::3, 1::2]", "[::-2].T", "[5:0:-2, 2]"])
def test_assign_through_a_strided_slice(device: str, view: str) -> None:
  # a strided slice is a pad that its next slice cuts away again: a write through it used to leave the tensor under
  # it as it was (the view alone took the value)
  a = np.arange(42, dtype=np.float32).reshape(7, 6)
  t = Tensor(a).realize()
  before = t + 0
  v = eval("t" + view)
  value = np.arange(np.prod(v.shape), dtype=np.float32).reshape(v.shape) + 100
  v.assign(Tensor(value))
  want = a.copy()
  eval("want" + view)[...] = value
  np.testing.assert_array_equal(t.numpy(), want)
  np.testing.assert_array_equal(v.numpy(), value)
  np.testing.assert_array_equal(before.numpy(), a)

def test_assign_to_expanded_view_rebinds(device: str) -> None:
  # an expand maps one element to many: not writable through, so the tensor just takes the value (as before)
  base = Tensor([1.0]).realize()
  e = base.expand(3)
  e.assign(Tensor([4.0, 5.0, 6.0]))
  assert e.tolist() == [4.0, 5.0, 6.0] and base.tolist() == [1.0]

def test_uop_realized_is_the_buffer_across_assigns(device: str) -> None:
  x = Tensor([0]).realize()
  buf = x.uop.base.realized
  assert buf is not None and x.uop.buf_uop is x.uop.base
  for _ in range(3): x.assign(x + 1)
  x[0] += 1  # setitem writes the buffer too
  assert x.item() == 4 and x.uop.base.realized is buf
  assert (x + 1).uop.realized is None
  assert x.uop.is_realized and not (x + 1).uop.is_realized and not Tensor.empty(3).realize().uop.is_realized

def test_inplace_operator_writes_realized_buffer(device: str) -> None:
  # x += y on a realized tensor writes its buffer, as in PyTorch and tinygrad: views see it, earlier results don't
  x = Tensor([1.0, 2.0, 3.0]).realize()
  buf, view, before = x.uop.base.realized, x[1:], x * 10
  x += 1
  x[1:] *= 2  # through a view
  assert x.tolist() == [2.0, 6.0, 8.0] and view.tolist() == [6.0, 8.0] and before.tolist() == [10.0, 20.0, 30.0]
  assert x.uop.base.realized is buf

def test_inplace_operator_keeps_gradient_path(device: str) -> None:
  w = Tensor([1.0, 2.0], requires_grad=True)
  y = (w * 3).realize()  # realized from a graph backward() goes through: rebound, not written
  y += 1
  y.sum().backward()
  assert w.grad is not None and w.grad.tolist() == [3.0, 3.0]

def test_invalids_is_a_writable_buffer(device: str) -> None:
  z = Tensor.invalids(10, dtype="int").realize()
  z[2:5] = 2
  z[6:7] = 3
  assert z.dtype == dtypes.int32 and z[2:5].tolist() == [2, 2, 2] and z[6:7].tolist() == [3]

# ***** as tinygrad's: a value of another dtype raises (no implicit cast, which can lose precision or values), and a
# value built from device-less UOps (a constant) is written on the target's device *****

def test_assign_dtype_mismatch_raises(device: str) -> None:
  a = Tensor.zeros(4, dtype=dtypes.float32, device=device).contiguous().realize()
  with pytest.raises(RuntimeError, match=r"assign dtype mismatch: target dtypes.float but value dtypes.int;"):
    a.assign(Tensor([1, 2, 3, 4], dtype=dtypes.int32, device=device))
  with pytest.raises(RuntimeError, match="assign dtype mismatch"):  # 2**24 + 1 isn't a float32
    a[:1].assign(Tensor([16777217], dtype=dtypes.int64, device=device))
  a.assign(Tensor([1, 2, 3, 4], dtype=dtypes.int32, device=device).cast(dtypes.float32))  # an explicit cast is fine
  a[2:].assign(7)  # a Python value takes the target's dtype
  np.testing.assert_equal(a.numpy(), [1, 2, 7, 7])

def test_assign_deviceless_const() -> None:
  s = Tensor.empty(4, device="CPU:1", dtype=dtypes.float32)
  s.assign(Tensor(UOp.const(dtypes.float32, 2.0)))
  assert s.device == "CPU:1"
  np.testing.assert_equal(s.numpy(), [2, 2, 2, 2])
  with pytest.raises(ValueError, match="device mismatch, target on CPU:1 but value on CPU"):
    s.assign(Tensor([1.0, 2.0, 3.0, 4.0], device="CPU"))

# ***** tinygrad's lazy-write UOp API: store() builds the write, after() the value once writes have run *****

def test_uop_store_after_whole_buffer(device: str) -> None:
  t = Tensor.zeros(6, device=device).contiguous().realize()
  t.uop = t.uop.after(t.uop.store((t * 2 + 1).uop))
  assert t.tolist() == [1.0] * 6

def test_uop_store_after_nested_region(device: str) -> None:
  # the inner after() waits for a write of the first half; the outer reads the whole buffer once that has run
  t = Tensor.zeros(6, device=device).contiguous().realize()
  head = t[:3]
  t.uop = t.uop.after(head.uop.after(head.uop.store(Tensor.full((3,), 4.0, device=device).uop)))
  assert t.tolist() == [4.0, 4.0, 4.0, 0.0, 0.0, 0.0]

def test_uop_after_runs_every_store_in_order(device: str) -> None:
  # two writes of the same buffer: the later one wins; a write of another buffer waited for runs too
  a = Tensor.zeros(3, device=device).contiguous().realize()
  b = Tensor.zeros(2, device=device).contiguous().realize()
  first = a.uop.store(Tensor([1.0, 1.0, 1.0], device=device).uop)
  second = a.uop.store(Tensor([2.0, 3.0, 4.0], device=device).uop)
  other = b.uop.store(Tensor([5.0, 6.0], device=device).uop)
  out = Tensor(a.uop.after(first, other, second))
  assert out.tolist() == [2.0, 3.0, 4.0] and b.tolist() == [5.0, 6.0]

def test_uop_store_keeps_earlier_readers(device: str) -> None:
  # as for assign: a lazy tensor computed from the buffer before the write keeps the value it had
  x = Tensor([1.0, 2.0, 3.0], device=device).realize()
  y = x * 2
  out = Tensor(x.uop.after(x.uop.store(Tensor([7.0, 8.0, 9.0], device=device).uop)))
  assert out.tolist() == [7.0, 8.0, 9.0] and y.tolist() == [2.0, 4.0, 6.0] and x.tolist() == [7.0, 8.0, 9.0]

def test_uop_store_number_and_invalid(device: str) -> None:
  # a number is written to every element of the view; a store of Invalid ("no value") writes nothing
  x = Tensor([1.0, 2.0, 3.0, 4.0], device=device).contiguous().realize()
  out = Tensor(x.uop.after(x.uop.shrink(((1, 3),)).store(7), x.uop.shrink(((0, 2),)).store(Invalid)))
  assert out.tolist() == [1.0, 7.0, 7.0, 4.0]
  assert x.uop.store(Invalid).op is Ops.NOOP

def test_uop_store_into_lazy_target_raises(device: str) -> None:
  lazy = Tensor([1.0, 2.0], device=device) * 3
  with pytest.raises(RuntimeError, match="realized buffer"):
    Tensor(lazy.uop.after(lazy.uop.store(Tensor([0.0, 0.0], device=device).uop))).realize()
