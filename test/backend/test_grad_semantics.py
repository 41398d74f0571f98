"""Gradient semantics shared with tinygrad and PyTorch: gradient() of unused and constant targets, the seed's shape,
.grad accumulation in place, setitem's dtype rule and Tensor(pathlib.Path) as a DISK tensor of the file's bytes."""
from __future__ import annotations
import io, pathlib, tarfile
import numpy as np
import pytest
from attograd import Tensor, dtypes

try:
  import torch
except ImportError:
  torch = None  # type: ignore[assignment]
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

# ***** gradient(): targets the output doesn't use *****

@needs_torch
def test_unused_target_gets_zeros(device: str) -> None:
  x, w = Tensor([1.0, 2.0, 3.0]), Tensor([4.0, 5.0, 6.0])
  gx, gw = (x * x).sum().gradient(x, w)
  tx, tw = torch.tensor([1.0, 2.0, 3.0], requires_grad=True), torch.tensor([4.0, 5.0, 6.0], requires_grad=True)
  rx, rw = torch.autograd.grad((tx * tx).sum(), (tx, tw), allow_unused=True, materialize_grads=True)
  np.testing.assert_allclose(gx.numpy(), rx.numpy())
  np.testing.assert_allclose(gw.numpy(), rw.numpy())
  assert gw.shape == (3,) and gw.dtype == dtypes.float32 and gw.device == w.device

@needs_torch
@pytest.mark.parametrize("view", ["strided", "whole"])
def test_reshaped_use_beside_a_detached_use(device: str, view: str) -> None:
  # Tensor.reshape composes into t's own view, so the graph reads t's source, not t; t itself appears only under
  # the DETACH. Its gradient was silently zero (found by the op table's logcumsumexp row on a strided input).
  b = np.arange(80, dtype=np.float32) / 10
  t = Tensor(b)[::2] if view == "strided" else Tensor(b[:40]).reshape(5, 8)
  g, = (t.reshape(5, 1, 8) * t.detach().reshape(5, 8, 1).exp()).sum().gradient(t)
  tt = torch.tensor(b)[::2] if view == "strided" else torch.tensor(b[:40]).reshape(5, 8)
  tt.requires_grad_(True)
  want, = torch.autograd.grad((tt.reshape(5, 1, 8) * tt.detach().reshape(5, 8, 1).exp()).sum(), tt)
  np.testing.assert_allclose(g.numpy(), want.numpy(), rtol=1e-6)

def test_detached_target_gets_zeros(device: str) -> None:
  x = Tensor([1.0, 2.0], requires_grad=True)
  g, = (x.detach() * 3).sum().gradient(x)
  assert g.tolist() == [0.0, 0.0]

def test_unused_target_can_still_raise(device: str) -> None:
  # materialize_grads=False is torch.autograd.grad without allow_unused: an unused input is an error
  x, w = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
  with pytest.raises(RuntimeError, match="not in the output's graph"): x.sum().gradient(w, materialize_grads=False)

def test_constant_target_raises(device: str) -> None:
  # Tensor(2.0) is the same hash-consed node as the literal 2.0: before, (t * 2.0).gradient(t) gave 4.0, not 2.0
  t = Tensor(2.0)
  with pytest.raises(RuntimeError, match="gradient: a target of shape \\(\\) is a constant"): (t * 2.0).gradient(t)
  with pytest.raises(RuntimeError, match="is a constant"): (Tensor.ones(3) * 2).sum().gradient(Tensor.ones(3))
  p = Tensor(2.0, requires_grad=True)  # its own storage: no longer shared with the literal
  assert (p * 2.0).gradient(p)[0].item() == 2.0

def test_integer_target_raises(device: str) -> None:
  x = Tensor([1, 2, 3])
  with pytest.raises(RuntimeError, match="only float tensors"): x.float().sum().gradient(x)

# ***** the seed gradient *****

def test_seed_with_size_one_dims(device: str) -> None:
  # tinygrad's gradient() takes a (1,) seed for a scalar output; it only differs by a size-1 dim
  x = Tensor([1.0, 2.0, 3.0])
  g, = (x * x).sum().gradient(x, gradient=Tensor([3.0]))
  assert g.tolist() == [6.0, 12.0, 18.0]
  g, = (x * x).reshape(1, 3).gradient(x, gradient=Tensor([1.0, 1.0, 1.0]))
  assert g.tolist() == [2.0, 4.0, 6.0]

def test_seed_of_other_shape_raises(device: str) -> None:
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  with pytest.raises(ValueError, match="`gradient` has shape \\(2,\\)"):
    (x * x).gradient(x, gradient=Tensor([1.0, 1.0]))
  # backward() keeps PyTorch's rule: the seed has the output's shape exactly
  with pytest.raises(ValueError, match="`gradient` has shape \\(1,\\)"): (x * x).sum().backward(Tensor([1.0]))

@needs_torch
def test_non_scalar_output_without_seed(device: str) -> None:
  x = Tensor([1.0, 2.0], requires_grad=True)
  # a RuntimeError as PyTorch raises, and an AssertionError as tinygrad raises
  for err in (RuntimeError, AssertionError):
    with pytest.raises(err, match="need a scalar or `gradient`"): (x * x).gradient(x)
    with pytest.raises(err, match="need a scalar or `gradient`"): (x * x).backward()
  with pytest.raises(RuntimeError): (torch.tensor([1.0, 2.0], requires_grad=True) * 2).backward()

# ***** .grad accumulates in place *****

@needs_torch
def test_grad_accumulates_into_the_same_object(device: str) -> None:
  x = Tensor([3.0], requires_grad=True)
  tx = torch.tensor([3.0], requires_grad=True)
  (x * 2)[0].backward()
  (tx * 2)[0].backward()
  old, told = x.grad, tx.grad
  for f in (lambda v: v * 3, lambda v: v * v):
    f(x)[0].backward()
    f(tx)[0].backward()
    assert x.grad is old and tx.grad is told
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
  np.testing.assert_allclose(old.numpy(), [2.0 + 3.0 + 6.0])

def test_requires_grad_gives_an_arange_a_buffer_of_its_own(device: str) -> None:
  # Tensor.arange(3).float() twice is one graph (the arange buffer of a size is shared), like equal constants: each
  # got the gradient of both uses (7 where 2 and 5 are right)
  a, b = Tensor.arange(3).float().requires_grad_(), Tensor.arange(3).float().requires_grad_()
  (a * 2 + b * 5).sum().backward()
  assert a.grad is not None and b.grad is not None and a.grad.tolist() == [2.0] * 3 and b.grad.tolist() == [5.0] * 3
  assert a.tolist() == [0.0, 1.0, 2.0]

def test_realized_grad_accumulates(device: str) -> None:
  w = Tensor([1.0, 2.0], requires_grad=True)
  (w * w).sum().backward()
  g = w.grad.realize()
  (w * 5).sum().backward()
  assert w.grad is g and g.tolist() == [7.0, 9.0]

# ***** setitem: the value's dtype *****

def test_setitem_value_dtype_mismatch_raises(device: str) -> None:
  t = Tensor.zeros(6, dtype=dtypes.float32).contiguous().realize()
  with pytest.raises(RuntimeError, match="the value's dtype dtypes.int differs from the tensor's dtypes.float"):
    t[2:4] = Tensor([1, 2], dtype=dtypes.int32)
  assert t.tolist() == [0.0] * 6  # nothing was written
  t[2:4] = Tensor([1, 2], dtype=dtypes.int32).cast(dtypes.float32)
  t[0] = 7  # a Python scalar is still cast
  assert t.tolist() == [7.0, 0.0, 1.0, 2.0, 0.0, 0.0]

@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.float32, dtypes.bool])
def test_setitem_same_dtype(device: str, dt: dtypes) -> None:
  t = Tensor.ones(3, 3, dtype=dt).contiguous()
  t[1] = Tensor.zeros(3, dtype=dt)
  assert t.dtype == dt
  np.testing.assert_equal(t.numpy(), np.array([[1, 1, 1], [0, 0, 0], [1, 1, 1]]).astype(t.numpy().dtype))

def test_setitem_lazy_dtype_mismatch_raises(device: str) -> None:
  t = Tensor.arange(4).float()  # lazy: setitem builds a new graph, the rule is the same
  with pytest.raises(RuntimeError, match="setitem"): t[0] = Tensor(1.0, dtype=dtypes.float16)

# ***** Tensor(pathlib.Path) *****

def test_tensor_from_path(tmp_path: pathlib.Path, device: str) -> None:
  p = tmp_path / "data.bin"
  p.write_bytes(bytes(range(10)))
  t = Tensor(p)
  assert t.device == f"DISK:{p}" and t.dtype == dtypes.uint8 and t.shape == (10,)  # one file, as in tinygrad
  assert t.to(device).tolist() == list(range(10))
  c = Tensor(p, device=device)  # an explicit device gets the bytes copied there
  assert c.device == device and c.tolist() == list(range(10))
  h = Tensor(p, dtype=dtypes.int16)  # the file's bytes seen as int16, little-endian
  assert h.shape == (5,) and h.to(device).tolist() == np.frombuffer(bytes(range(10)), np.int16).tolist()

def test_tensor_from_missing_path(tmp_path: pathlib.Path) -> None:
  with pytest.raises(FileNotFoundError): Tensor(tmp_path / "non_existent_file.tar")

def test_tensor_from_path_tar_extract(tmp_path: pathlib.Path) -> None:
  from attograd.nn.state import tar_extract
  p = tmp_path / "a.tar"
  with tarfile.open(p, "w") as tar:
    info = tarfile.TarInfo("x.bin")
    info.size = 4
    tar.addfile(info, io.BytesIO(b"\x01\x02\x03\x04"))
  files = tar_extract(Tensor(p))
  assert files["x.bin"].to("CPU").tolist() == [1, 2, 3, 4]

def test_tensor_from_empty_file(tmp_path: pathlib.Path) -> None:
  p = tmp_path / "empty"
  p.write_bytes(b"")
  t = Tensor(p)
  assert t.shape == (0,) and t.dtype == dtypes.uint8

# ***** a write into a buffer of a value made from a requires_grad tensor keeps the gradient path (as PyTorch's
# autograd records in-place ops): the target takes the new graph instead of being written in place when nothing
# else views the buffer and no TinyJit is capturing; otherwise it is written and remembers the graph *****

def test_setitem_value_from_requires_grad_tensor_gets_gradient(device: str) -> None:
  z = Tensor([1.0, 2.0, 3.0, 4.0], device=device).realize()
  x = Tensor([10.0, 20.0], device=device, requires_grad=True)
  z[1:3] = x * 3
  z.sum().backward()
  assert x.grad is not None and x.grad.tolist() == [3.0, 3.0]
  assert z.tolist() == [1.0, 30.0, 60.0, 4.0]

def test_inplace_mul_by_requires_grad_tensor_gets_gradient(device: str) -> None:
  z = Tensor([1.0, 2.0, 3.0], device=device).realize()
  x = Tensor([5.0, 6.0, 7.0], device=device, requires_grad=True)
  z *= x
  z.sum().backward()
  assert x.grad is not None and x.grad.tolist() == [1.0, 2.0, 3.0]  # the values z had before the write

def test_detached_or_gradient_values_still_write_in_place(device: str) -> None:
  # no gradient path to keep: the buffer is written, and a view of it taken before sees the write
  w = Tensor([1.0, 2.0], device=device, requires_grad=True)
  (w * w).sum().backward()
  acc = Tensor.zeros(2, device=device).contiguous().realize()
  view = acc[:]
  assert w.grad is not None
  acc += w.grad  # a gradient is a value here, not differentiated again
  acc[:] = acc + w.detach()
  assert view.tolist() == [3.0, 6.0] and acc.tolist() == [3.0, 6.0]

def test_write_with_views_of_the_buffer_stays_in_place(device: str) -> None:
  # a view of the buffer must see the write: it is written in place, and the gradient path is kept by the written
  # tensor's new node (as PyTorch keeps both)
  z = Tensor([1.0, 2.0, 3.0, 4.0], device=device).realize()
  head = z[:2]
  x = Tensor([10.0, 20.0], device=device, requires_grad=True)
  z[:2] = x * 3
  assert head.tolist() == [30.0, 60.0]
  z.sum().backward()  # and the written tensor remembers what was written, for backward()
  assert x.grad is not None and x.grad.tolist() == [3.0, 3.0]

# ***** z[idx] op= x: Python runs v = z[idx]; v op= x (a write through the view into z's buffer); z[idx] = v. The
# gradient reaches x through both writes, as in PyTorch, for tensors without requires_grad too (backward() fills
# every tensor of the graph, as tinygrad's) *****

_IOP_CASES = [((4,), (slice(0, 2),), "+"), ((4,), (slice(1, 4, 2),), "*"), ((3, 4), (1,), "-"),
              ((3, 4), (slice(None), slice(1, 3)), "*"), ((2, 3, 4), (slice(1, None), 0), "+"),
              ((2, 3, 4), (Ellipsis, slice(0, 1)), "/")]

@needs_torch
@pytest.mark.parametrize("shape,idx,op", _IOP_CASES)
@pytest.mark.parametrize("mark", [None, True])
def test_indexed_inplace_op_gradient_matches_torch(device: str, shape: tuple, idx: tuple, op: str,
                                                   mark: bool | None) -> None:
  rng = np.random.default_rng(0)
  zv = rng.uniform(1, 2, shape).astype(np.float32)
  xv = rng.uniform(1, 2, zv[idx].shape).astype(np.float32)
  wv = rng.uniform(-1, 1, shape).astype(np.float32)
  def run(T: type, z, x, w):  # noqa: ANN001
    v = z[idx]
    if op == "+": v += x
    elif op == "-": v -= x
    elif op == "*": v *= x
    else: v /= x
    z[idx] = v
    return (z * w).sum()
  tz, tx = torch.tensor(zv, requires_grad=True), torch.tensor(xv, requires_grad=True)
  tz1 = tz * 1  # (PyTorch refuses in-place ops on a leaf that requires grad)
  run(torch, tz1, tx, torch.tensor(wv)).backward()
  z, x = Tensor(zv, device=device).realize(), Tensor(xv, device=device, requires_grad=mark)
  loss = run(Tensor, z, x, Tensor(wv, device=device))
  np.testing.assert_allclose(z.numpy(), tz1.detach().numpy(), rtol=1e-6)
  loss.backward()
  assert x.grad is not None and z.grad is not None
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)
  np.testing.assert_allclose(z.grad.numpy(), wv, rtol=1e-6)  # z's own gradient: of its value after the writes

def test_inplace_op_through_a_view_keeps_gradient_and_aliasing(device: str) -> None:
  z = Tensor([1.0, 2.0, 3.0, 4.0], device=device).realize()
  x = Tensor([10.0, 20.0], device=device, requires_grad=True)
  v = z[1:3]
  v *= x  # the gradient reads v's values before the write: [2, 3]
  assert z.tolist() == [1.0, 20.0, 60.0, 4.0] and v.tolist() == [20.0, 60.0]
  v += 1  # v still views z's buffer
  assert z.tolist() == [1.0, 21.0, 61.0, 4.0]
  v.sum().backward()
  assert x.grad is not None and x.grad.tolist() == [2.0, 3.0]

def test_realized_value_under_a_lazy_tensor_gets_gradients(device: str) -> None:
  # y was realized (remembering its graph); z is built on it, lazily: both get their gradients
  w = Tensor([1.0, 2.0], device=device, requires_grad=True)
  y = (Tensor([3.0, 4.0], device=device) * w).realize()
  z = y * 2
  z.sum().backward()
  assert w.grad is not None and w.grad.tolist() == [6.0, 8.0]
  assert z.grad is not None and z.grad.tolist() == [1.0, 1.0] and y.grad is not None and y.grad.tolist() == [2.0, 2.0]

def test_write_inside_jit_capture_stays_in_place(device: str) -> None:
  # a TinyJit records the writes it replays: a write of a gradient-carrying value is still made in place there
  from attograd import TinyJit
  w = Tensor([2.0, 3.0], device=device, requires_grad=True)
  cache = Tensor.zeros(4, device=device).contiguous().realize()
  @TinyJit
  def step(v: Tensor) -> Tensor:
    cache[1:3] = v * w
    return (cache * 1).realize()
  for i in range(3):
    out = step(Tensor([float(i), 1.0], device=device).realize())
    assert out.tolist() == [0.0, 2.0 * i, 3.0, 0.0] and cache.tolist() == out.tolist()
