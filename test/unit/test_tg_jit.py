"""TinyJit's contract as tinygrad's: a captured jit called with Tensor inputs of other shapes, dtypes, views or names
raises JitError; Tensors in list, tuple and dict arguments are inputs; an output may be an input written in place, and
an output fed back as the next call's input is right; reading values, a scalar constant input and a jit inside a jit
raise JitError; Context(CAPTURING=0) keeps kernels out of the capture; a jitted method is a partial over its jit."""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
from attograd import Context, Tensor, TinyJit, dtypes
from attograd.engine.buffers import buffers
from attograd.engine.jit import JitError
from attograd.uop.ops import UOp

def rnd(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

# ***** the signature: fixed at the first capture *****

def test_shape_change_after_capture_raises(device: str) -> None:
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return (a + b).realize()
  for i in range(3):
    a, b = rnd(4, seed=i), rnd(4, seed=9 + i)
    np.testing.assert_allclose(f(Tensor(a, device=device), Tensor(b, device=device)).numpy(), a + b, rtol=1e-6)
  with pytest.raises(JitError, match=r"argument 0 is a Tensor of shape \(8,\)"):
    f(Tensor(rnd(8), device=device), Tensor(rnd(8), device=device))

def test_views_at_other_offsets_raise() -> None:
  @TinyJit
  def f(a: Tensor) -> Tensor: return (a + 1).realize()
  base = Tensor(rnd(5, 6)).realize()
  np.testing.assert_allclose(f(base[:, 1:3]).numpy(), rnd(5, 6)[:, 1:3] + 1, rtol=1e-6)  # runs
  np.testing.assert_allclose(f(base[:, 2:4]).numpy(), rnd(5, 6)[:, 2:4] + 1, rtol=1e-6)  # captured
  with pytest.raises(JitError, match=r"argument 0 is a view .* but the capture took a view"): f(base[:, 3:5])
  with pytest.raises(JitError, match="argument 0 is a contiguous buffer, but the capture took a view"):
    f(Tensor(rnd(5, 2)))
  np.testing.assert_allclose(f(base[:, 2:4]).numpy(), rnd(5, 6)[:, 2:4] + 1, rtol=1e-6)  # the same view replays

def test_positional_then_keyword_raises() -> None:
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return (a + b).realize()
  for _ in range(2): f(Tensor([1.0]), Tensor([2.0]))
  with pytest.raises(JitError, match=r"Tensor inputs are \(keyword argument 'a', keyword argument 'b'\), but the "
                                     r"capture took \(argument 0, argument 1\)"):
    f(a=Tensor([3.0]), b=Tensor([4.0]))

def test_plain_values_still_capture_anew() -> None:
  # kept from attograd (tinygrad replays the first branch taken: a wrong answer)
  @TinyJit
  def f(x: Tensor, square: bool) -> Tensor: return (x * x if square else x * 2).realize()
  f(Tensor([3.0]), True)
  f(Tensor([3.0]), False)
  for _ in range(2): assert f(Tensor([3.0]), True).item() == 9.0 and f(Tensor([3.0]), False).item() == 6.0

# ***** Tensors in containers *****

def test_tensors_in_list_tuple_and_dict_arguments(device: str) -> None:
  @TinyJit
  def f(a: Tensor, arr: list[Tensor], d: dict[str, Any], t: tuple[Tensor, ...]) -> Tensor:
    return (a + arr[0] * d["w"] - t[1]).realize()
  for i in range(4):
    a, b, w, c = (rnd(3, seed=10 * k + i) for k in range(4))
    out = f(Tensor(a, device=device), [Tensor(b, device=device)], {"w": Tensor(w, device=device), "n": 1},
            (0, Tensor(c, device=device)))
    np.testing.assert_allclose(out.numpy(), a + b * w - c, rtol=1e-5, atol=1e-6)

def test_strided_view_in_a_list() -> None:
  @TinyJit
  def f(arr: list[Tensor]) -> Tensor: return (arr[0] * 2).realize()
  for i in range(4):
    a = rnd(3, 4, seed=i)
    np.testing.assert_allclose(f([Tensor(a).permute(1, 0)]).numpy(), a.T * 2, rtol=1e-6)

def test_container_tensor_shape_change_raises() -> None:
  @TinyJit
  def f(arr: list[Tensor]) -> Tensor: return (arr[0] + 1).realize()
  for _ in range(2): f([Tensor(rnd(3))])
  with pytest.raises(JitError, match=r"argument 0\[0\] is a Tensor of shape \(4,\)"): f([Tensor(rnd(4))])

# ***** outputs that are inputs, and outputs fed back *****

def test_output_is_an_input_written_in_place(device: str) -> None:
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return b.assign(a + 1)
  for i in range(4):
    a = Tensor([float(i)], device=device)
    b = Tensor.empty_like(a)  # no memory yet: the replay allocates it before a kernel writes it
    c = f(a, b)
    assert c.item() == i + 1 and b.item() == i + 1

def test_input_mutated_in_place(device: str) -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor:
    x += 1
    return x.realize()
  a = Tensor([0.0], device=device).contiguous().realize()
  for _ in range(5): f(a)
  assert a.item() == 5.0

def test_replay_writing_an_input_makes_results_memoized_from_it_stale(device: str) -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor:
    x += 1
    return (x * 2).realize()
  a = Tensor([0.0], device=device).contiguous().realize()
  for _ in range(5): f(a)
  c = a * 3
  assert c.item() == 15.0
  f(a)
  assert (a * 3).item() == 18.0  # not c's result, memoized before the replay wrote a (this gave 15)

def test_output_fed_back_as_input(device: str) -> None:
  # the output buffer is written while the kernel reads the input: the fed-back input is copied first
  @TinyJit
  def f(buf: Tensor, frame: Tensor) -> tuple[Tensor, Tensor]:
    new = buf[1:].cat(frame, dim=0)
    return new.contiguous(), new[:1].contiguous()
  buf, ref = Tensor([[0.0], [1.0], [2.0]], device=device).contiguous().realize(), [0.0, 1.0, 2.0]
  for i in range(5):
    new, first = f(buf, Tensor([[10.0 + i]], device=device).contiguous().realize())
    ref = ref[1:] + [10.0 + i]
    assert first.item() == ref[0] and new.numpy().ravel().tolist() == ref
    buf = new

# ***** what can't be captured *****

def test_reading_values_while_capturing_raises() -> None:
  @TinyJit
  def f(x: Tensor, mask: Tensor) -> Tensor: return x.masked_select(mask)
  f(Tensor([1, 2, 3, 4]), Tensor([True, False, True, False]))
  with pytest.raises(JitError, match="reading a Tensor's values"):
    f(Tensor([1, 2, 3, 4]), Tensor([True, False, True, False]))
  @TinyJit
  def g(x: Tensor) -> Tensor: return Tensor.zeros(int(x.sum().item()))
  g(Tensor([1, 1]))
  with pytest.raises(JitError): g(Tensor([1, 1]))

def test_scalar_constant_input_raises() -> None:
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x + 1).realize()
  with pytest.raises(JitError, match="argument 0 is a scalar constant"): f(Tensor(2.0))
  with pytest.raises(JitError, match="argument 0 is a scalar constant"): f(Tensor(2.0).realize())
  with pytest.raises(JitError, match="device-less"):
    f(Tensor(UOp.const(dtypes.float32, 2.0) + UOp.const(dtypes.float32, 1.0)))
  for i in range(3): assert f(Tensor.full((2,), float(i))).tolist() == [i + 1.0] * 2  # bigger constants get a buffer

def test_nested_jit_message() -> None:
  @TinyJit
  def f(t: Tensor) -> Tensor: return t + 1
  @TinyJit
  def g(t: Tensor) -> Tensor: return f(t) * 3
  g(Tensor([1])).realize()
  with pytest.raises(RuntimeError, match="having TinyJit inside another TinyJit is not supported"): g(Tensor([1]))

def test_capturing_off_keeps_kernels_out() -> None:
  @TinyJit
  def f(a: Tensor) -> Tensor:
    with Context(CAPTURING=0): Tensor.zeros(4).contiguous().realize()  # one-time work the replays skip
    return (a + 1).realize()
  for i in range(4): assert f(Tensor([float(i)])).item() == i + 1
  assert f.captured is not None and len(f.captured.linear.src) == 1

def test_jitted_method_is_a_partial_over_its_jit() -> None:
  class Fun:
    def __init__(self) -> None: self.a = Tensor(rnd(3)).realize()
    @TinyJit
    def __call__(self, b: Tensor) -> Tensor: return (self.a + b).realize()
  fun = Fun()
  for i in range(4): np.testing.assert_allclose(fun(Tensor(rnd(3, seed=i))).numpy(), rnd(3) + rnd(3, seed=i), rtol=1e-6)
  jit = fun.__call__.func.__self__
  assert isinstance(jit, TinyJit) and jit.captured is fun.__call__.captured is not None
  assert buffers  # the jit keeps its buffers

# ***** tinygrad's names around the jit *****

def test_free_intermediates(device: str) -> None:
  from attograd.helpers import GlobalCounters
  ext = Tensor([1.0, 24.0, 23.0, 45.0, 1.0], device=device).realize()
  @TinyJit
  def f(x: Tensor) -> Tensor:
    t1 = (x * 2).contiguous().realize()
    t2 = (t1 + ext).contiguous().realize()
    return t2.sum().contiguous().realize()
  for i in range(4): assert f(Tensor([float(i), 1, 2, 3, 4], device=device)).item() == 114 + 2 * i
  assert f.captured is not None
  for _ in range(2):
    before = GlobalCounters.mem_used
    f.captured.free_intermediates()
    f.captured.free_intermediates()  # twice: nothing left to free
    assert before - GlobalCounters.mem_used >= 2 * 5 * 4 + 4  # t1, t2 and the output
    assert f(Tensor([11.0, 1, 2, 3, 4], device=device)).item() == 136  # allocated again

def test_free_intermediates_keeps_state_written_in_place(device: str) -> None:
  from attograd.helpers import GlobalCounters
  x = Tensor([1.0], device=device).contiguous().realize()
  @TinyJit
  def f(y: Tensor) -> Tensor:
    x.assign(x + y)
    return x.realize()
  for _ in range(5): f(Tensor([1.0], device=device))
  assert f.captured is not None and x.item() == 6.0
  before = GlobalCounters.mem_used
  f.captured.free_intermediates()
  assert before == GlobalCounters.mem_used
  f(Tensor([2.0], device=device))
  assert x.item() == 8.0

def test_devices_have_no_graph_runner() -> None:
  from attograd import Device
  from attograd.engine.jit import graph_class
  assert Device[Device.DEFAULT].graph is None and graph_class(Device[Device.DEFAULT]) is None
