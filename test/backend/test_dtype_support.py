"""Renderer.supported_dtypes() and device.is_dtype_supported: what each backend claims, and that every claimed dtype
really loads, computes and stores there. The weak dtypes (dtypes.weakint / weakfloat) in the promotion lattice."""
from __future__ import annotations
import itertools
import numpy as np
import pytest
from attograd import Context, Device, Tensor, dtypes
from attograd.device import is_dtype_supported
from attograd.dtype import (DTYPES_DICT, least_upper_dtype, least_upper_float, strong_dtype, to_dtype,
                            weak_dtype)
from attograd.renderer.cstyle import MetalRenderer, OpenCLRenderer

def test_supported_dtypes_is_a_set_of_scalar_dtypes(device: str) -> None:
  got = Device[device].renderer.supported_dtypes()
  assert isinstance(got, set) and got <= set(dtypes.all)
  # the base types every backend has; a renderer must never drop these
  assert {dtypes.bool, dtypes.int32, dtypes.float32, dtypes.uint8} <= got
  assert Device[device].renderer.supported_dtypes() is not got  # a fresh set: callers may edit theirs

def test_every_supported_dtype_computes(device: str) -> None:
  # values whose doubles and triples are exact in every dtype (fp8e5m2 has 2 mantissa bits: 12 is, 9 and 15 aren't)
  vals = [0, 1, 2, 4, 2, 1]
  for d in sorted(Device[device].renderer.supported_dtypes()):
    x = Tensor(vals, device=device).cast(d)
    if d is dtypes.bool:
      assert (x | x.logical_not()).tolist() == [True] * len(vals), d
      continue
    got = (x + x * 2).cast(dtypes.float32).numpy()
    np.testing.assert_array_equal(got, np.array(vals, np.float32) * 3, err_msg=str(d))
    assert x.max().cast(dtypes.float32).item() == 4.0, d

def test_is_dtype_supported_follows_the_renderer(device: str) -> None:
  claimed = Device[device].renderer.supported_dtypes()
  for d in dtypes.all: assert is_dtype_supported(d, device) == (d in claimed)
  assert is_dtype_supported(dtypes.float32.vec(4), device)  # a vector of a supported scalar
  old = Device.DEFAULT
  try:
    Device.DEFAULT = device
    assert is_dtype_supported(dtypes.float32) and all(is_dtype_supported(d) == (d in claimed) for d in dtypes.all)
  finally: Device.DEFAULT = old

def test_double_needs_the_hardware_type() -> None:
  # device-free: the renderers are plain objects, so this runs without an OpenCL device or a Mac
  assert dtypes.float64 in OpenCLRenderer(fp64=True).supported_dtypes()
  no_fp64 = OpenCLRenderer(fp64=False).supported_dtypes()
  assert dtypes.float64 not in no_fp64 and no_fp64 == set(dtypes.all) - {dtypes.float64}
  metal = MetalRenderer().supported_dtypes()
  assert dtypes.float64 not in metal and {dtypes.float16, dtypes.bfloat16} <= metal

def test_is_dtype_supported_errors() -> None:
  with pytest.raises(TypeError, match="is_dtype_supported: dtype must be a DType like dtypes.float16, got 'float32'"):
    is_dtype_supported("float32", "CPU")  # type: ignore[arg-type]
  with pytest.raises(ValueError, match="unknown device 'NOPE'"): is_dtype_supported(dtypes.float32, "NOPE")

# ***** weak dtypes *****

def test_weak_dtypes_are_kinds_not_storage_types() -> None:
  wi, wf = dtypes.weakint, dtypes.weakfloat
  assert dtypes.weaks == (wi, wf)
  assert dtypes.is_int(wi) and not dtypes.is_float(wi) and dtypes.is_float(wf) and not dtypes.is_int(wf)
  assert wi not in dtypes.ints and wf not in dtypes.floats and not set(dtypes.weaks) & set(dtypes.all)
  assert "weakint" not in DTYPES_DICT and "weakfloat" not in DTYPES_DICT
  with pytest.raises(TypeError, match="invalid dtype 'weakfloat'"): to_dtype("weakfloat")
  # an unknown name is an AttributeError too, as in tinygrad (whose to_dtype is a getattr on dtypes)
  with pytest.raises(AttributeError, match="invalid dtype 'nonexistdtype'"): Tensor([1, 2], dtype="nonexistdtype")
  assert (strong_dtype(wi), strong_dtype(wf), strong_dtype(dtypes.int8)) == (dtypes.int32, dtypes.float32, dtypes.int8)
  assert [weak_dtype(d) for d in (dtypes.half, dtypes.uint16, dtypes.bool, wf)] == [wf, wi, dtypes.bool, wf]
  with Context(DEFAULT_FLOAT="half", DEFAULT_INT="int64"):
    assert (strong_dtype(wi), strong_dtype(wf)) == (dtypes.int64, dtypes.float16)

def test_weak_dtypes_defer_to_tensor_dtypes_of_their_kind() -> None:
  wi, wf = dtypes.weakint, dtypes.weakfloat
  assert least_upper_dtype(wi, wi) is wi and least_upper_dtype(dtypes.bool, wi) is wi
  for d in dtypes.ints + dtypes.floats: assert least_upper_dtype(wi, d) is d, d
  assert least_upper_dtype(wf, wf) is wf and least_upper_dtype(wi, wf) is wf
  for d in (dtypes.bool,) + dtypes.ints: assert least_upper_dtype(wf, d) is wf, d
  for d in dtypes.floats: assert least_upper_dtype(wf, d) is d, d
  assert least_upper_float(wi) is wf and least_upper_float(wf) is wf

def test_strong_dtypes_promote_to_strong_dtypes_but_int64_with_uint64() -> None:
  # weakfloat is where uint64 and a signed int meet (no int holds both): the one weak meet of strong dtypes
  for ds in itertools.chain(itertools.product(dtypes.all, repeat=2), itertools.product(dtypes.all, repeat=3)):
    both = dtypes.uint64 in ds and any(d in dtypes.sints for d in ds) and not any(d in dtypes.floats for d in ds)
    assert least_upper_dtype(*ds) is dtypes.weakfloat if both else least_upper_dtype(*ds) in dtypes.all, ds

def test_int64_with_uint64_is_weakfloat_in_the_default_float(device: str) -> None:
  # regression: they met at fp8e4m3, so 1000 + 7 came out as 448 (fp8e4m3's largest value)
  for s in dtypes.sints: assert least_upper_dtype(s, dtypes.uint64) is dtypes.weakfloat
  t = Tensor([1000, -3], dtype=dtypes.int64, device=device) + Tensor([7, 2], dtype=dtypes.uint64, device=device)
  assert t.dtype is dtypes.weakfloat and t.tolist() == [1007.0, -1.0] and t.numpy().dtype == np.float32
  assert t.maximum(Tensor([0, 0], dtype=dtypes.uint64, device=device)).tolist() == [1007.0, 0.0]
  assert (t + Tensor([0.5], dtype=dtypes.float16, device=device)).dtype is dtypes.float16  # it defers to a float
  with Context(DEFAULT_FLOAT="float64"):  # stored in the default float when made: no 2**40 rounded away
    t64 = Tensor([2**40 + 1], dtype=dtypes.int64, device=device) + Tensor([1], dtype=dtypes.uint64, device=device)
    assert t64.dtype is dtypes.weakfloat and t64.item() == 2**40 + 2 and t64.numpy().dtype == np.float64

def test_least_upper_dtype_keeps_weak_operands_weak() -> None:
  wi, wf = dtypes.weakint, dtypes.weakfloat
  assert (least_upper_dtype(wi, wi), least_upper_dtype(wi, wf), least_upper_dtype(wf, wf)) == (wi, wf, wf)
  assert (least_upper_dtype(wi, dtypes.int8), least_upper_dtype(wf, dtypes.int8), least_upper_dtype(wi, dtypes.bool)) \
    == (dtypes.int8, wf, wi)
  assert least_upper_dtype(dtypes.int64, dtypes.uint64, wf) is least_upper_dtype(dtypes.int8, wf) is wf
  assert least_upper_dtype(wf, dtypes.bfloat16) is dtypes.bfloat16

# ***** weak tensors: Python scalars show a weak dtype, stored in the strong one *****

def test_python_scalars_make_weak_tensors(device: str) -> None:
  assert (Tensor(2, device=device).dtype, Tensor(2.5, device=device).dtype) == (dtypes.weakint, dtypes.weakfloat)
  assert Tensor(True, device=device).dtype is dtypes.bool and Tensor(None, device=device).dtype is dtypes.weakfloat
  assert Tensor(2, dtype=dtypes.int8, device=device).dtype is dtypes.int8
  assert Tensor.const(2.5).dtype is dtypes.weakfloat and Tensor.const(2, dtypes.int8).dtype is dtypes.int8
  big = Tensor(2**40, device=device)  # an int the default int can't hold is concretely int64 (tinygrad: weakint)
  assert big.dtype is dtypes.int64 and big.item() == 2**40
  assert Tensor(2.5, requires_grad=True, device=device).dtype is dtypes.float32  # a leaf with a gradient has storage
  i8 = Tensor([1, 2], dtype=dtypes.int8, device=device)
  assert (Tensor(3, device=device) + i8).dtype is dtypes.int8  # defers to the concrete side, no widening
  assert (i8 - Tensor(3, device=device)).tolist() == [-2, -1]
  assert (Tensor(0.5, device=device) + Tensor([1.0], dtype=dtypes.float16, device=device)).dtype is dtypes.float16
  # a weak float meeting an int tensor stays weakfloat (tinygrad's rule), computed in the default float
  assert (Tensor(0.5, device=device) + i8).dtype is dtypes.weakfloat and (Tensor(0.5, device=device) + i8).tolist() == \
         [1.5, 2.5]
  assert (Tensor(3, device=device) + Tensor([True], device=device)).dtype is dtypes.weakint

def test_weak_tensors_combine_into_weak_tensors(device: str) -> None:
  a, b = Tensor(3, device=device), Tensor(4, device=device)
  assert (a + b).dtype is dtypes.weakint and (a + b).item() == 7 and (a * 2).dtype is dtypes.weakint
  assert (a + 0.5).dtype is dtypes.weakfloat and (a + 0.5).item() == 3.5
  assert (a / b).dtype is (a / 2).dtype is dtypes.float32 and (a / b).item() == 0.75  # ints divide in the default float
  assert (a < b).dtype is dtypes.bool and (-a).item() == -3
  x = Tensor(2.5, device=device)
  assert x.sqrt().dtype is dtypes.weakfloat and x.reshape(1).expand(3).dtype is dtypes.weakfloat
  assert x.numpy().dtype == np.float32 and a.numpy().dtype == np.int32 and a.element_size() == 4

def test_a_scalar_a_tensor_cant_hold_makes_it_weak(device: str) -> None:
  # tinygrad's rule: int_tensor + 0.5 (and / 2.0, .maximum(0.5), .clip(0.5), .pad(value=2.5), where(c, t, 0.5)) is
  # weakfloat, bool_tensor + 2 weakint; a scalar of a kind the dtype holds keeps it. Each value is computed and read
  # back in the default float (int): PyTorch's numbers
  torch = pytest.importorskip("torch")
  for d in (dtypes.bool, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.float16, dtypes.float32):
    vals = [1, 0, 3] if d is not dtypes.bool else [1, 0, 1]
    t, p = Tensor(vals, dtype=d, device=device), torch.tensor(vals, dtype=getattr(torch, d.name))
    c, pc = t > 0, p > 0
    wf = d if dtypes.is_float(d) else dtypes.weakfloat
    cases = [(t + 0.5, p + 0.5, wf), (0.5 * t, 0.5 * p, wf), (t / 2.0, p / 2.0, wf), (t.maximum(0.5), p.clamp(0.5), wf),
             (t.clip(0.5), p.clamp(0.5), wf), (c.where(t, 0.5), torch.where(pc, p, 0.5), wf),
             (t.pad((1, 1), value=2.5), torch.cat([torch.tensor([2.5]), p.float(), torch.tensor([2.5])]), wf),
             (t + 2, p + 2, dtypes.weakint if d is dtypes.bool else d), (t / 2, p / 2, dtypes.default_float if
              not dtypes.is_float(d) else d), (t.cat(Tensor(2, device=device).reshape(1)), torch.tensor(vals + [2]),
              d if d is not dtypes.bool else dtypes.weakint)]
    for i, (o, want, dt) in enumerate(cases):
      assert o.dtype is dt, (d, i, o.dtype)
      assert o.numpy().dtype == np.dtype(strong_dtype(dt).name), (d, i)
      np.testing.assert_allclose(o.numpy().astype(np.float64), want.double().numpy(), rtol=1e-3, err_msg=str((d, i)))

def test_a_weak_tensor_realizes_and_jits(device: str) -> None:
  # where tinygrad refuses ("cannot realize a weak dtype"): stored in its strong dtype, it realizes, jits and reads back
  from attograd import TinyJit
  t = Tensor([1, 2, 3], device=device)
  w = (t + 0.5).realize()
  assert w.dtype is dtypes.weakfloat and w.tolist() == [1.5, 2.5, 3.5] and w.numpy().dtype == np.float32
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x / 2.0).realize()
  for k in range(3):  # (the third call replays the capture)
    out = f(Tensor([2, 4, 6 + k], device=device))
    assert out.dtype is dtypes.weakfloat and out.tolist() == [1.0, 2.0, (6 + k) / 2]
  @TinyJit
  def g(x: Tensor) -> tuple[Tensor, Tensor]: return (x + 0.5).realize(), (x * 2).realize()
  for k in range(3): assert [o.dtype for o in g(Tensor([k], device=device))] == [dtypes.weakfloat, dtypes.int32]
  assert (w + Tensor([1], dtype=dtypes.int8, device=device)).dtype is dtypes.weakfloat  # still weak: meets int8 so
  assert (w * Tensor([2.0], dtype=dtypes.float16, device=device)).tolist() == [3.0, 5.0, 7.0]  # and defers to half

def test_weak_tensor_values_are_the_default_dtypes(device: str) -> None:
  x = Tensor(1, device=device) / 2.0
  assert x.dtype is dtypes.weakfloat and x.numpy().dtype == np.float32 and x.tolist() == 0.5
  assert x.element_size() == 4 and x.nbytes() == 4
  assert x.clone().dtype is dtypes.float32 and x.contiguous().dtype is dtypes.weakfloat
  assert x.cast(dtypes.float32).dtype is dtypes.float32 and x.cast(dtypes.float16).tolist() == 0.5
  h = x + Tensor([0.0, 0.0], dtype=dtypes.float16, device=device)
  assert h.dtype is dtypes.float16 and h.tolist() == [0.5, 0.5]
  with pytest.raises(RuntimeError, match="weakfloat"): Tensor([1.0, 2.0], dtype=dtypes.weakfloat, device=device)
  with pytest.raises(ValueError, match="rand"): Tensor.rand(2, dtype=dtypes.weakfloat, device=device)

def test_weak_kind_casts_convert(device: str) -> None:
  x = Tensor([2.5, -3.7], device=device)
  y = x.cast(dtypes.weakint).cast(dtypes.weakfloat)  # weakint truncates (a real int32 cast), weakfloat lifts back
  assert y.dtype is dtypes.weakfloat and y.tolist() == [2.0, -3.0]

def test_reductions_scans_and_float_ops_of_weak_tensors(device: str) -> None:
  t = Tensor(1.0, device=device).expand(3)
  for out in (t.sum(), t.max(), t.prod(), t.cumsum(0), t.cummax(0)[0]): assert out.dtype is dtypes.float32
  assert Tensor(2, device=device).expand(3).sum().dtype is dtypes.int32
  m = Tensor(3, device=device).expand(4)
  assert (m.mean().dtype, m.mean().item(), m.var().dtype, m.std().item()) == (dtypes.float32, 3.0, dtypes.float32, 0.0)
  assert Tensor(1.0, device=device).bitcast(dtypes.int32).item() == 0x3F800000  # the bytes of its float32
  with pytest.raises(TypeError, match="weakint"): Tensor([1], device=device).bitcast(dtypes.weakint)
  e = Tensor(2, device=device).exp()  # an int's float op is weakfloat, computed in the default float
  assert e.dtype is dtypes.weakfloat and abs(e.item() - 7.389056) < 1e-5
  assert (e + Tensor([1.0], dtype=dtypes.float16, device=device)).dtype is dtypes.float16

def test_weak_values_written_into_tensors(device: str) -> None:
  dst = Tensor.zeros(2, device=device).contiguous().realize()
  dst[0:1] = Tensor(0.5, device=device).reshape(1)  # a weakfloat defers to float32
  assert dst.tolist() == [0.5, 0.0]
  idst = Tensor.zeros(2, dtype=dtypes.int8, device=device).contiguous().realize()
  with pytest.raises(RuntimeError, match="dtype"): idst.assign(Tensor(0.5, device=device).expand(2))  # not an int
  idst.assign(Tensor(3, device=device).expand(2))  # a weakint defers to int8
  assert idst.tolist() == [3, 3] and idst.dtype is dtypes.int8
  w = Tensor(0.5, device=device)
  w.assign(Tensor(1.0, dtype=dtypes.float32, device=device))  # written to, a weak tensor commits
  assert (w.dtype, w.item()) == (dtypes.float32, 1.0)

def test_where_with_two_scalars_is_weak(device: str) -> None:
  cond = Tensor([True, False], device=device)
  assert cond.where(3.1, 3).dtype is dtypes.weakfloat and cond.where(3, True).dtype is dtypes.weakint
  assert cond.where(3.1, 3).tolist() == pytest.approx([3.1, 3.0]) and cond.where(3.1, 3).numpy().dtype == np.float32
  assert cond.where(True, False).dtype is dtypes.bool
  assert cond.where(2**40, 0).dtype is dtypes.int64 and cond.where(2**40, 0).tolist() == [2**40, 0]
  # one tensor operand: the scalar meets its dtype as in `t + 3.5`
  assert cond.where(Tensor([1, 2], dtype=dtypes.int8, device=device), 3.5).dtype is dtypes.weakfloat
  assert cond.where(Tensor([1, 2], dtype=dtypes.int8, device=device), 3.5).tolist() == [1.0, 3.5]
  assert cond.where(Tensor([1, 2], dtype=dtypes.int8, device=device), 3).dtype is dtypes.int8
  # a weakint operand defers in a matmul too; ints return their accumulator (int32 here)
  assert Tensor(2, device=device).expand(2).dot(Tensor([1, 1], dtype=dtypes.int8, device=device)).item() == 4
