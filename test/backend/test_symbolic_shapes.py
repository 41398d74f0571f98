"""Symbolic shapes: a dim that is a bound Variable. Kernels over it compile once and run for every value; the
schedule is reused across values; TinyJit replays one capture for many sizes; clear errors where a size must
be known."""
from __future__ import annotations
import numpy as np
import pytest
from attograd import Tensor, TinyJit, UOp, Variable
from attograd.engine import realize
from attograd.schedule.create import _schedule_cache
from attograd.engine.jit import JitError

def _sym(arr: np.ndarray, v, device: str, axis: int = 0) -> Tensor:
  """`arr` as a Tensor whose dim `axis` is the bound Variable v."""
  shape = list(arr.shape)
  shape[axis] = v.bind(arr.shape[axis])
  return Tensor(arr, device=device).reshape(tuple(shape))

def _programs(device: str) -> set:
  """The programs loaded for this device that take Variables (the concrete reference runs build others). A set of
  keys, not a count: the runner cache is bounded, so earlier tests' programs may be evicted while a test runs."""
  return {k for k, r in realize._runners.items() if k[0] == device and r.spec.vars}

@pytest.mark.parametrize("fn", [lambda x: x * 2 + 1, lambda x: (x - x.max(1, keepdim=True)).exp(), lambda x: x.sum(0),
                                lambda x: x.sum(1), lambda x: x.sum(), lambda x: x.max(0), lambda x: x.mean(0),
                                lambda x: x.softmax(1), lambda x: (x * x).mean(), lambda x: x.T.sum(0)])
def test_ops_over_a_symbolic_batch_compile_once(device: str, fn) -> None:
  v = Variable("bs", 1, 40)
  rng = np.random.default_rng(0)
  before = None
  for n in (7, 1, 40, 13):
    a = rng.standard_normal((n, 5)).astype(np.float32)
    out = fn(_sym(a, v, device))
    np.testing.assert_allclose(out.numpy(), np.asarray(fn(Tensor(a, device=device)).numpy()), rtol=1e-5, atol=1e-5)
    if before is None: before = _programs(device)
  assert _programs(device) <= before, "a new value of the Variable compiled a new program"

def test_symbolic_inner_dim(device: str) -> None:
  # the Variable on the reduced (innermost) axis: a row sum and a matmul over a symbolic K
  v = Variable("k", 1, 32)
  rng = np.random.default_rng(1)
  for n in (3, 32, 1):
    a, b = rng.standard_normal((4, n)).astype(np.float32), rng.standard_normal((n, 3)).astype(np.float32)
    x, y = _sym(a, v, device, axis=1), _sym(b, v, device, axis=0)
    np.testing.assert_allclose(x.sum(1).numpy(), a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((x @ y).numpy(), a @ b, rtol=1e-4, atol=1e-5)
    assert (x @ y).shape == (4, 3)

def test_shrink_to_a_symbolic_size(device: str) -> None:
  # a fixed buffer (a KV cache, say) read up to a symbolic length
  cache = np.arange(64 * 3, dtype=np.float32).reshape(64, 3)
  c = Tensor(cache, device=device)
  v = Variable("len", 1, 64)
  for n in (5, 64, 1):
    part = c.shrink(((0, v.bind(n)), None))
    assert part.shape[0].val == n
    np.testing.assert_allclose(part.sum(0).numpy(), cache[:n].sum(0))
    np.testing.assert_allclose((part * 2).numpy(), cache[:n] * 2)
    # a window starting at a symbolic offset
    w = c.shrink(((v.bind(n) - 1, v.bind(n)), None))
    np.testing.assert_allclose(w.numpy(), cache[n - 1:n])

def test_shrink_past_the_dim_reads_zeros(device: str) -> None:
  # a symbolic end may pass the dim (tinygrad builds it too): the positions past the buffer read zeros, in the forward
  # and through a gradient, and a jit captured past the end replays for ends inside it
  x = Tensor([1.0, 2.0, 3.0], device=device, requires_grad=True)
  v = Variable("a", 1, 10)
  part = x[:v.bind(5)]
  assert part.shape[0].val == 5
  assert part.numpy().tolist() == [1.0, 2.0, 3.0, 0.0, 0.0]
  (part * Tensor.arange(10, device=device)[:v.bind(5)]).sum().backward()
  assert x.grad is not None and x.grad.numpy().tolist() == [0.0, 1.0, 2.0]
  assert x[v.bind(2):v.bind(2) + 3].numpy().tolist() == [3.0, 0.0, 0.0]  # a window that starts inside and ends past
  @TinyJit
  def f(t: Tensor, n) -> Tensor: return t[:n].sum().realize()
  y = Tensor([1.0, 2.0, 3.0], device=device).realize()
  assert [f(y, v.bind(n)).item() for n in (6, 7, 2, 10)] == [6.0, 6.0, 3.0, 6.0]
  with pytest.raises(ValueError, match="out of bounds"):  # a concrete end past the dim is a mistake
    y.shrink(((0, 5),))

def test_pad_to_a_symbolic_size(device: str) -> None:
  v = Variable("n", 1, 16)
  for n in (3, 16):
    a = np.arange(n * 2, dtype=np.float32).reshape(n, 2) + 1
    x = _sym(a, v, device)
    # pad a symbolic dim back up to a fixed one, and a fixed one by a symbolic amount
    full = x.pad(((0, 16 - v.bind(n)), None))
    assert full.shape == (16, 2)
    np.testing.assert_allclose(full.numpy(), np.pad(a, ((0, 16 - n), (0, 0))))
    t = Tensor(np.ones((2, 3), np.float32), device=device).pad((None, (v.bind(n), 0)))
    assert t.shape[1].val == n + 3
    np.testing.assert_allclose(t.numpy(), np.pad(np.ones((2, 3), np.float32), ((0, 0), (n, 0))))

def test_reshape_and_expand_symbolic(device: str) -> None:
  v = Variable("bs", 1, 8)
  for n in (2, 8):
    a = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
    x = _sym(a, v, device)
    y = x.reshape(v.bind(n), 2, 3)
    np.testing.assert_allclose(y.sum(2).numpy(), a.reshape(n, 2, 3).sum(2))
    flat = x.reshape(-1)
    assert flat.shape[0].render() in ("(bs*6)", "(6*bs)")
    np.testing.assert_allclose(flat.numpy(), a.reshape(-1))
    row = Tensor(np.arange(6, dtype=np.float32), device=device).reshape(1, 6).expand(v.bind(n), 6)
    np.testing.assert_allclose((row + x).numpy(), a + np.arange(6))

def test_schedule_reused_across_values() -> None:
  v = Variable("bs", 1, 100)
  def step(n: int) -> Tensor:
    return (_sym(np.ones((n, 4), np.float32), v, "CPU") * 3).sum(1).realize()
  step(5)
  size = len(_schedule_cache)
  for n in (6, 7, 99): assert step(n).numpy().tolist() == [12.0] * n
  assert len(_schedule_cache) == size

def test_jit_one_capture_for_many_sizes(device: str) -> None:
  v = Variable("bs", 1, 64)
  w = Tensor(np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32), device=device).realize()
  @TinyJit
  def f(x: Tensor) -> Tensor: return ((x @ w).relu() * 2).sum(1)
  for n in (10, 3, 17, 64, 1, 33):
    a = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
    out = f(_sym(a, v, device))
    assert out.shape[0].val == n
    np.testing.assert_allclose(out.numpy(), (np.maximum(a @ w.numpy(), 0) * 2).sum(1), rtol=1e-5, atol=1e-5)
  assert f.cnt == 6 and f.captured is not None

def test_jit_raises_for_a_different_variable() -> None:
  # tinygrad's contract (this captured anew before): the capture's shapes, Variables included, are fixed
  @TinyJit
  def f(x: Tensor) -> Tensor: return x * 2
  for n in (3, 4, 5, 2):
    out = f(Tensor.arange(2 * n).float().reshape(Variable("a", 1, 9).bind(n), 2))
    assert out.numpy().tolist() == (np.arange(2 * n).reshape(n, 2) * 2).tolist()
  with pytest.raises(JitError, match=r"argument 0 is a Tensor of shape \(b, 2\).*but the capture took a Tensor of "
                                     r"shape \(a, 2\)"):
    f(Tensor.arange(10).float().reshape(Variable("b", 1, 9).bind(5), 2))
  assert f.captured is not None and set(f.captured.var_names) == {"a"}

def test_errors() -> None:
  v = Variable("bs", 1, 8)
  x = Tensor.ones(4, 3)
  with pytest.raises(ValueError, match="bind"):
    x.reshape(v, 3)  # an unbound Variable has no value to check the size with
  with pytest.raises(ValueError, match="can't reshape"):
    x.reshape(v.bind(5), 3)  # 15 elements are not 12
  with pytest.raises(ValueError, match="out of bounds"):
    x.shrink(((0, 5), None))  # a symbolic end past the dim reads zeros (test_shrink_past_the_dim_reads_zeros)
  with pytest.raises(ValueError, match="out of bounds"):
    x.shrink(((v.bind(3), v.bind(2)), None))  # a start after its end
  with pytest.raises(ValueError, match="outside"):
    v.bind(9)
  s = x.reshape(v.bind(4), 3)
  for name, fn in [("rand", lambda: Tensor.rand(s.shape[0], 2)),
                   ("argmax", lambda: s.argmax(0)), ("cumsum", lambda: s.cumsum(0))]:
    with pytest.raises((TypeError, ValueError), match=rf"{name}.*bs|bs.*{name}"):
      fn().realize()

def test_bound_values_in_one_graph_must_agree() -> None:
  v = Variable("bs", 1, 8)
  a, b = Tensor.ones(2, 3).reshape(v.bind(2), 3), Tensor.ones(3, 3).reshape(v.bind(3), 3)
  with pytest.raises(ValueError):
    (a.sum() + b.sum()).realize()

# ***** tinygrad's symbolic surface: slicing, arange, full/empty, cat, var, triangles, unbound Variables *****

def test_slicing_with_variables(device: str) -> None:
  a = np.random.default_rng(2).standard_normal((3, 10, 4)).astype(np.float32)
  t = Tensor(a, device=device)
  for i in (3, 7, 10):
    vi = Variable("i", 1, 10).bind(i)
    assert t[:, :vi].shape[1] is vi
    # negative int bounds count from the symbolic end; an int index too
    np.testing.assert_allclose(t[:, :vi][:, -3:-1].numpy(), a[:, :i][:, -3:-1])
    np.testing.assert_allclose(t[:, :vi][:, -1].numpy(), a[:, :i][:, -1])
    # int bounds over a symbolic dim clamp to its largest size: a concrete shape again
    assert t[:, :vi][:2, :3].shape == (2, 3, 4)
    np.testing.assert_allclose(t[:, :vi][:2, :3].numpy(), a[:2, :3])
    np.testing.assert_allclose(t[1:3, vi - 3:vi].numpy(), a[1:3, i - 3:i])
  with pytest.raises(IndexError, match="step 1"): t[:, :Variable("i", 1, 10).bind(4):2]
  # a step over a symbolic size needs explicit int bounds (None or a negative bound would mean the largest size)
  ts = t[:, :Variable("i", 1, 10).bind(6)]
  np.testing.assert_allclose(ts[:, 1:5:2].numpy(), a[:, 1:5:2])
  for bad in (slice(None, None, -1), slice(None, 4, 2), slice(-4, 5, 2)):
    with pytest.raises(IndexError, match="explicit non-negative int start and stop"): ts[:, bad]

def test_symbolic_arange(device: str) -> None:
  b, e, s = Variable("b", 0, 5), Variable("e", 6, 20), Variable("s", 1, 3)
  assert Tensor.arange(e.bind(9)).tolist() == list(range(9))
  assert Tensor.arange(b.bind(4), 7).tolist() == [4, 5, 6]
  assert Tensor.arange(0, 10, s.bind(3)).tolist() == [0, 3, 6, 9]
  assert Tensor.arange(b.bind(2), e.bind(14), s.bind(3)).tolist() == [2, 5, 8, 11]
  assert Tensor.arange(e.bind(8), 3, -2).tolist() == [8, 6, 4]
  assert Tensor.arange(b.bind(5), 3).tolist() == []  # an empty range: a length of 0, not negative
  with pytest.raises(ValueError, match="positive"): Tensor.arange(0, 10, Variable("n", -2, 2).bind(1))

def test_symbolic_full_empty_and_fill(device: str) -> None:
  v = Variable("x", 1, 10).bind(5)
  assert Tensor.full((3,), v).tolist() == [5, 5, 5]
  assert Tensor.full((2,), v, dtype="float32").tolist() == [5.0, 5.0]
  assert Tensor.ones(v).sum().item() == 5.0
  t = Tensor.empty(3, v)
  assert t.shape == (3, v) and t.uop.base.arg[1] == 30  # a buffer for the largest value
  t8 = Tensor.ones(3, dtype="int8")
  assert (t8 * v).dtype == t8.dtype and (t8 * v).tolist() == [5, 5, 5]  # a Variable adopts the tensor's dtype
  assert (v * t8).tolist() == [5, 5, 5]  # Variable * Tensor is the Tensor's op

def test_cat_sums_of_variables_broadcast(device: str) -> None:
  a, b = np.arange(30, dtype=np.float32).reshape(10, 3), -np.arange(30, dtype=np.float32).reshape(10, 3)
  ta, tb = Tensor(a, device=device), Tensor(b, device=device)
  for i, j in ((2, 3), (4, 1)):
    vi, vj = Variable("i", 1, 10).bind(i), Variable("j", 1, 10).bind(j)
    out = ta[:vi].cat(tb[:vj], dim=0)  # the pieces' pads give i+j and j+i: the same size
    np.testing.assert_allclose(out[:i + j].numpy(), np.concatenate([a[:i], b[:j]]))
    np.testing.assert_allclose(ta[:vi].cat(tb[:2]).numpy(), np.concatenate([a[:i], b[:2]]))

def test_cat_size_is_the_sum_as_written(device: str) -> None:
  # the size of a cat of Variable-sized pieces is the very node the user's expression builds (sizes compare by
  # identity): i+j+k in order, and 2*i + 3 for i + i + 3 (a number on the left of * is put on the right, as the
  # simplifier puts it)
  i, j, k = (Variable(n, 1, 5).bind(3) for n in "ijk")
  t = Tensor.empty(5, 4, device=device)
  assert t[:i].cat(t[:j], dim=0).cat(t[:k], dim=0).shape == (i + j + k, 4)
  u = Tensor.arange(15, device=device).reshape(5, 3)
  out = u[:i].cat(u[:i], dim=0).cat(Tensor.ones(3, 3, dtype=u.dtype, device=device), dim=0)
  assert out.shape == (2 * i + 3, 3) and out.shape[0] is 3 + i * 2
  assert out.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]] * 2 + [[1, 1, 1]] * 3

def test_var_and_mean_over_symbolic_counts(device: str) -> None:
  a = np.random.default_rng(3).random((10, 10)).astype(np.float32)
  t = Tensor(a, device=device)
  for i, j in ((2, 3), (1, 4), (5, 5)):
    vi, vj = Variable("i", 1, 10).bind(i), Variable("j", 1, 10).bind(j)
    for axis in (None, 0, 1):
      np.testing.assert_allclose(t[:vi, :vj].mean(axis).numpy(), a[:i, :j].mean(axis), rtol=1e-5, atol=1e-6)
      with np.errstate(divide="ignore", invalid="ignore"):
        want = a[:i, :j].var(axis, ddof=1)
      np.testing.assert_allclose(t[:vi, :vj].var(axis).numpy(), want, rtol=1e-4, atol=1e-6)

def test_triangles_with_symbolic_sizes(device: str) -> None:
  t = Variable("t", 1, 10).bind(4)
  for sp in (0, 1, 3):
    vsp = Variable("start_pos", 0, 5).bind(sp)
    for fn, ref in (("triu", np.triu), ("tril", np.tril)):
      mask = getattr(Tensor.full((1, 1, t, vsp + t), float("-inf")), fn)(vsp + 1)
      np.testing.assert_equal(mask.numpy(), ref(np.full((1, 1, 4, sp + 4), float("-inf")), k=sp + 1))

def test_unbound_variables() -> None:
  v = Variable("i", 1, 5)
  assert Tensor.rand(5, 5).shrink(((0, 5), (0, v))).shape == (5, v)
  assert Tensor.rand(3, 5).shrink(((0, 2), (v, v + 1))).shape == (2, 1)
  with pytest.raises(RuntimeError, match="'u' is unbound"): Tensor(Variable("u", 1, 10)).item()
  with pytest.raises(RuntimeError, match="unbound"): (Tensor(Variable("u", 1, 10)) + 1).item()
  assert Tensor(Variable("u", 1, 10).bind(2) + 1).item() == 3
  assert Tensor(Variable("u", 1, 10).bind(2), dtype="float32").item() == 2.0

def test_unbind_all_and_view_offset() -> None:
  v, bv = Variable("v", 1, 100), Variable("v", 1, 100).bind(2)
  u, vals = Tensor.rand(3, 4).shrink(((bv, bv + 1), (0, 4))).uop.unbind_all()
  assert vals == {v: 2} and not any(x.op.name == "BIND" for x in u.toposort())
  w = Variable("w", 1, 7).bind(4)
  assert Tensor.rand(10).realize().shrink(((3, 3 + w),)).uop.contiguous_view_offset() == 3
  assert Tensor.rand(10).realize().shrink(((0, w),)).uop.contiguous_view_offset() == 0
  assert Tensor.rand(10).realize().reshape(2, 5).shrink(((0, 1), (1, 3))).uop.contiguous_view_offset() is None

def test_symbolic_size_errors() -> None:
  from attograd.uop.ops import broadcast_shape
  v = Variable("v", 0, 10)
  assert broadcast_shape((v,), (1,)) == (v,) and broadcast_shape((3, v), (3, 1)) == (3, v)
  with pytest.raises(IndexError, match=r"\(v,\) and \(5,\)"): broadcast_shape((v,), (5,))
  with pytest.raises(ValueError): broadcast_shape((2, 3), (4, 3))
  t = Tensor.ones(10, 8)[:Variable("a", 1, 10).bind(4)]
  assert [c.shape[1] for c in t.chunk(2, dim=1)] == [4, 4]
  with pytest.raises(AssertionError, match="chunk: .*symbolic"): t.chunk(2, dim=0)
  with pytest.raises(ValueError, match="split: .*symbolic"): t.split(2, dim=0)
  assert t.reshape(None, 2, 4).shape == (t.shape[0], 2, 4)

def test_symbolic_ordering_is_canonical() -> None:
  from attograd.uop.ops import ssimp, sym_eq
  i, j = Variable("i", 1, 10).bind(2), Variable("j", 1, 10).bind(3)
  assert ssimp(i + j) is ssimp(j + i) and ssimp(i * j) is ssimp(j * i) and sym_eq(i * j + 1, 1 + j * i)
  assert (i < i + 2).simplify().arg is True and (i * 3 + 1 < i * 3).simplify().arg is False

def test_variable_tensor_realizes_on_its_own_device() -> None:
  # regression: Tensor(v) was a device-less graph, so realizing it for a second device reused the first one's schedule
  v = Variable("x", 1, 10).bind(5)
  for dev in ("CPU", "PYTHON", "CPU"):
    t = Tensor.full((3,), v, device=dev).contiguous().realize()
    assert t.device == dev and t.uop.base.device == dev and t.tolist() == [5, 5, 5]

@pytest.mark.parametrize("k,stride,dilation,padding", [(3, 1, 1, 1), (2, 2, 1, 0), (3, 2, 2, 1), (4, 1, 1, "same")])
def test_conv2d_over_a_symbolic_size(device: str, k: int, stride: int, dilation: int, padding) -> None:
  # the output size is a ceiling division of the symbolic size (C's division rounds toward zero: -(-a // b) was wrong)
  rng = np.random.default_rng(4)
  xa, wa = rng.standard_normal((1, 2, 10, 4)).astype(np.float32), rng.standard_normal((2, 2, k, k)).astype(np.float32)
  v = Variable("h", 5, 10)
  for n in (10, 5):
    x, w = Tensor(xa[:, :, :n], device=device), Tensor(wa, device=device)
    xs = Tensor(xa, device=device, requires_grad=True)
    out = xs[:, :, :v.bind(n)].conv2d(Tensor(wa, device=device), stride=stride, dilation=dilation, padding=padding)
    want = x.conv2d(w, stride=stride, dilation=dilation, padding=padding)
    assert out.shape[2].val == want.shape[2]
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    out.sum().backward()
    x.requires_grad = True
    x.conv2d(w, stride=stride, dilation=dilation, padding=padding).sum().backward()
    np.testing.assert_allclose(xs.grad.numpy()[:, :, :n], x.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert not xs.grad.numpy()[:, :, n:].any()

def test_conv2d_symbolic_limits() -> None:
  from attograd.uop.ops import SymbolicSizeError, sym_infer
  v = Variable("v", 11, 100)
  out = Tensor.ones(1, 8, 100)[:, :, :v.bind(79)].conv2d(Tensor.ones(16, 8, 12), stride=6, padding=(3, 3))
  assert sym_infer(out.shape[2], {"v": 79}) == 13 and sym_infer(out.shape[2], {"v": 11}) == 1
  x = Tensor.ones(1, 1, 20, 9)[:, :, :Variable("h", 3, 20).bind(9)]
  with pytest.raises(SymbolicSizeError, match="larger than the symbolic input size h"):
    x.conv2d(Tensor.ones(1, 1, 8, 1))
  x = Tensor.ones(1, 1, 20, 9)[:, :, :Variable("h", 8, 20).bind(9)]
  with pytest.raises(SymbolicSizeError, match="56 elements"): x.conv2d(Tensor.ones(1, 1, 8, 7))

def test_symbolic_size_helpers() -> None:
  from attograd.helpers import ceildiv, prod
  from attograd.uop.ops import UOp
  a, v = Variable("a", 1, 5), Variable("v", 11, 100)
  assert prod((a, 3, 4)).render() == "(a*12)" and prod((3, 4, a)) is prod((a, 12))  # simplified: one node
  assert ceildiv(v - 5, 6).render() == "(v//6)" and ceildiv(v, 6).render() == "((v+5)//6)"
  for n in range(11, 101):  # the ceiling for every value (C division truncates: -(-a // b) gave the floor)
    assert ceildiv(v - 5, 6).substitute({v: UOp.const(v.dtype, n)}).ssimplify() == -(-(n - 5) // 6)
  assert UOp.const(8) is UOp.const(v.dtype, 8)  # tinygrad's newer spelling: the value alone

def test_index_by_a_variable_and_bind_mismatch(device: str) -> None:
  a = Tensor(np.arange(1000, dtype=np.int32).reshape(100, 10), device=device)
  vi = Variable("i", 0, 99)
  assert a[vi.bind(12)].tolist() == list(range(120, 130))
  assert a[vi.bind(12)].cat(a[Variable("j", 0, 99).bind(76)]).tolist() == list(range(120, 130)) + list(range(760, 770))
  for err in (RuntimeError, ValueError):  # tinygrad's RuntimeError, and attograd's argument error
    with pytest.raises(err, match="bind mismatch on Variable 'i': bound to both 12 and 76"):
      a[vi.bind(12)].cat(a[vi.bind(76)]).tolist()
  with pytest.raises(RuntimeError, match="bind mismatch"):
    (Tensor.ones(3)[:vi.bind(1)].sum() + vi.bind(2)).uop.unbind_all()

def test_symbolic_padding(device: str) -> None:
  a = np.arange(16, dtype=np.float32).reshape(2, 8)
  t = Tensor(a, device=device)
  for n in (1, 5, 8):
    sp = Variable("sp", 1, 8).bind(n)
    # 8 - sp may be 0..7: taken as a growth, so the padded size is 8 again (a concrete shape, not a max expression)
    out = t[:, :sp].pad((None, (0, 8 - sp)))
    assert out.shape == (2, 8)
    np.testing.assert_allclose(out.numpy(), np.pad(a[:, :n], ((0, 0), (0, 8 - n))))
  sp = Variable("sp", 1, 8).bind(8)
  with pytest.raises(ValueError, match=r"symbolic padding \(\(sp\*-1\)\+7\) is -1"): t[:, :sp].pad((None, (0, 7 - sp)))

def test_jit_kv_cache_with_a_symbolic_start(device: str) -> None:
  # LLaMA's cache update: the cache so far, the new keys after it, padded back to the cache's size, written in place
  bsz, ctx = 2, 8
  class Attn:
    @TinyJit
    def __call__(self, xk: Tensor, start_pos) -> None:
      seqlen = xk.shape[1]
      if not hasattr(self, "cache"): self.cache = Tensor.zeros(bsz, ctx, 1, 1, device=device).contiguous().realize()
      keys = self.cache.shrink((None, (0, start_pos), None, None)).cat(xk, dim=1) if start_pos > 0 else xk
      self.cache.assign(keys.pad((None, (0, ctx - start_pos - seqlen), None, None)).contiguous()).realize()
  attn = Attn()
  attn(Tensor.ones(bsz, 3, 1, 1, device=device).contiguous(), 0)
  for i in range(3, 6):
    attn(Tensor.full((bsz, 1, 1, 1), float(i), device=device).contiguous(), Variable("start_pos", 1, ctx).bind(i))
  np.testing.assert_allclose(attn.cache.numpy().reshape(bsz, ctx), [[1, 1, 1, 3, 4, 5, 0, 0]] * bsz)

def test_jit_replay_checks_the_captured_sizes(device: str) -> None:
  # regression: a replay with a value the function's shrink would refuse read past the buffer (garbage, or a crash)
  x = Tensor([1.0, 2.0, 3.0], device=device).realize()
  @TinyJit
  def f(x: Tensor, v) -> Tensor: return x[:v].sum().realize()
  assert [f(x, Variable("a", 1, 10**6).bind(n)).item() for n in (1, 2, 3, 2)] == [1.0, 3.0, 6.0, 3.0]
  with pytest.raises(ValueError, match=r"a=999999 the captured shrink \(\(0, a\),\) of \(3,\) is out of bounds"):
    f(x, Variable("a", 1, 10**6).bind(999999))
  assert f(x, Variable("a", 1, 10**6).bind(3)).item() == 6.0 and f.captured is not None

def test_int64_variables_reach_kernels_whole(device: str) -> None:
  # regression: Variable("b", 0, 2**40, dtype=int64).bind(2**35) reached kernels as a wrapped 32-bit int (0); a
  # Variable with bounds past int32's is typed int64 and passed as 64 bits on every device
  from attograd import dtypes
  big = Variable("b", 0, 2**40)
  assert big.dtype is dtypes.int64 and Variable("c", 0, 2**31 - 1).dtype is dtypes.int32
  assert Tensor(big.bind(2**35), device=device).clone().item() == 2**35
  assert Tensor(big.bind(2**40), device=device).item() == 2**40
  x = Tensor([1, -2], dtype=dtypes.int64, device=device)
  assert (x + big.bind(2**33 + 7)).tolist() == [2**33 + 8, 2**33 + 5]
  neg = Variable("m", -2**40, 0)  # below int32 too
  assert neg.dtype is dtypes.int64 and Tensor(neg.bind(-2**35 - 3), device=device).item() == -2**35 - 3
  # an int32 Variable and an int64 one in one kernel: each argument at its own width, in the kernel's order
  k = Variable("a", 0, 1000)
  assert Tensor(k.bind(7) + big.bind(2**36), device=device).item() == 2**36 + 7
  assert Tensor(big.bind(2**36) * 2 - k.bind(1), device=device).item() == 2**37 - 1

def test_int64_variables_in_a_jit(device: str) -> None:
  # the replay passes each call's values at their widths (the captured program's argument types are fixed)
  from attograd import dtypes
  @TinyJit
  def f(a, b) -> Tensor: return (Tensor(a + b, device=device).clone() * 2).realize()
  for i in range(4):
    a, b = Variable("a", 0, 2**10).bind(i), Variable("b", 0, 2**40, dtype=dtypes.int64).bind(2**35 + 3 * i)
    assert f(a, b).item() == (2**35 + 4 * i) * 2
  assert f.captured is not None

def test_empty_with_an_unbound_variable_has_a_max_shape(device: str) -> None:
  # the buffer is sized for the Variable's largest value, so no value is needed to build it (only to compute with it)
  n = UOp.variable("n", 1, 32)
  t = Tensor.empty(2, n, 4, device=device)
  assert t.max_shape == (2, 32, 4) and t.max_numel() == 256 and Tensor.empty(2, 3).max_shape == (2, 3)
  with pytest.raises(RuntimeError, match="unbound"): (t + 1).realize()
  with pytest.raises(ValueError, match="bind it first"): Tensor.full((2, n), 1.0)
