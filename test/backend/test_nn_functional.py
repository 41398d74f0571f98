"""The functional NN ops on Tensor (activations, conv, pooling, interpolate, attention, losses, sort) against PyTorch,
on every backend; the PYTHON backend gets the small cases only."""
from __future__ import annotations
from typing import Any, Callable
import numpy as np
import pytest
from helpers import compare, cpu_only
from attograd import Tensor, dtypes

torch = pytest.importorskip("torch")
F = torch.nn.functional

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)

# the scheduler pushes a PAD through elementwise ops to the loads, which is wrong for ops that don't map 0 to 0
# (exp, 1/x, x/y, log, ==): `Tensor([1.0, 2.0]).exp().pad((1, 1)).sum()` counts exp(0) = 1 in the padding
PAD_BUG = "core: PAD pushed through exp/div/recip/log/== in a fused kernel reads f(0) in the padding"

def rand(*shape: int, seed: int = 0, low: float = -2.0, high: float = 2.0) -> np.ndarray:
  return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)

def tt(x: np.ndarray) -> Any: return torch.from_numpy(np.ascontiguousarray(x))

def check(got: Tensor, want: Any, atol: float = 1e-5, rtol: float = 1e-4) -> None:
  compare(got, want.detach().numpy() if isinstance(want, torch.Tensor) else want, atol=atol, rtol=rtol)

# ***** activations *****

# each activation's values and gradient on every dtype and device: test/backend/optable.py

def test_activation_2d_and_int(device: str) -> None:
  x = rand(3, 4)
  check(Tensor(x).gelu(), F.gelu(tt(x), approximate="tanh"))
  # ints go through the float path like sigmoid does
  check(Tensor([-2, 0, 3]).softplus(), F.softplus(torch.tensor([-2.0, 0.0, 3.0])))

# ***** dropout *****

def test_dropout_eval_is_identity(device: str) -> None:
  x = Tensor(rand(4, 5))
  assert x.dropout(0.5) is x

def test_dropout_training(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(Tensor, "training", True)
  Tensor.manual_seed(3)
  n = 4000 if device == "CPU" else 400
  out = Tensor.ones(n).dropout(0.25).numpy()
  # survivors are scaled by 1/(1-p); the kept fraction is near 1-p
  assert set(np.unique(out).tolist()) <= {0.0, np.float32(1 / 0.75)}
  assert abs((out != 0).mean() - 0.75) < (0.03 if n == 4000 else 0.1)
  np.testing.assert_array_equal(Tensor.ones(3).dropout(1.0).numpy(), np.zeros(3, np.float32))
  np.testing.assert_array_equal(Tensor.ones(3).dropout(0.0).numpy(), np.ones(3, np.float32))

def test_dropout_bad_p(device: str) -> None:
  with pytest.raises(ValueError, match="dropout"): Tensor.ones(3).dropout(1.5)

# ***** one_hot, layernorm, batchnorm, linear, sequential *****

def test_one_hot(device: str) -> None:
  y = np.array([[0, 3], [2, 1]], np.int32)
  out = Tensor(y).one_hot(5)
  assert out.dtype == dtypes.int32
  check(out, F.one_hot(torch.from_numpy(y).long(), 5))
  with pytest.raises(TypeError, match="one_hot"): Tensor([1.0]).one_hot(2)
  # num_classes is required and non-negative (tinygrad's rule: PyTorch's -1 would read the tensor back)
  with pytest.raises(ValueError, match="num_classes"): Tensor(y).one_hot(-1)
  with pytest.raises(TypeError): Tensor(y).one_hot()  # type: ignore[call-arg]

@pytest.mark.parametrize("axis", [-1, (1, 2)], ids=str)
def test_layernorm(device: str, axis: Any) -> None:
  x = rand(2, 3, 4)
  shape = (4,) if axis == -1 else (3, 4)
  check(Tensor(x).layernorm(axis), F.layer_norm(tt(x), shape), atol=1e-5)
  check(Tensor(x).layernorm(axis, eps=0.5), F.layer_norm(tt(x), shape, eps=0.5), atol=1e-5)

def test_batchnorm(device: str) -> None:
  x, w, b, m = rand(2, 3, 4, seed=1), rand(3, seed=2), rand(3, seed=3), rand(3, seed=4)
  var = rand(3, seed=5, low=0.5, high=2.0)
  want = F.batch_norm(tt(x), tt(m), tt(var), tt(w), tt(b), training=False, eps=1e-5)
  invstd = Tensor(var).add(1e-5).rsqrt()
  check(Tensor(x).batchnorm(Tensor(w), Tensor(b), Tensor(m), invstd), want)
  want = F.batch_norm(tt(x), tt(m), tt(var), None, None, training=False, eps=1e-5)
  check(Tensor(x).batchnorm(None, None, Tensor(m), invstd), want)

def test_linear(device: str) -> None:
  x, w, b = rand(2, 3, 4), rand(5, 4, seed=1), rand(5, seed=2)
  # tinygrad's weight is (in, out): PyTorch's transposed
  check(Tensor(x).linear(Tensor(w.T.copy()), Tensor(b)), F.linear(tt(x), tt(w), tt(b)))
  check(Tensor(x).linear(Tensor(w.T.copy())), F.linear(tt(x), tt(w)))
  check(Tensor(x).linear(Tensor(b[:4])), tt(x) * tt(b[:4]))

def test_sequential(device: str) -> None:
  x = rand(3)
  check(Tensor(x).sequential([Tensor.relu, lambda t: t * 3, Tensor.exp]), (torch.relu(tt(x)) * 3).exp())

# ***** conv2d *****

# (name, input shape, weight shape, kwargs); the first ones are small enough for the PYTHON device
CONVS = [
  P("1d", (1, 2, 7), (3, 2, 3), {}),
  P("1d_stride_pad", (2, 2, 9), (4, 2, 3), dict(stride=2, padding=1)),
  P("1d_dilation", (1, 1, 9), (2, 1, 3), dict(dilation=2)),
  P("2d", (1, 1, 5, 5), (1, 1, 3, 3), {}),
  P("2d_batch_pad", (2, 2, 4, 5), (3, 2, 3, 3), dict(padding=1)),
  P("2d_stride", (1, 2, 6, 5), (2, 2, 2, 3), dict(stride=2)),
  P("2d_groups", (1, 4, 5, 5), (4, 2, 3, 3), dict(groups=2)),
  P("2d_depthwise", (2, 3, 5, 4), (6, 1, 3, 3), dict(groups=3, padding=1)),
  P("2d_1x1", (2, 3, 4, 4), (5, 3, 1, 1), {}),
  P("2d_kernel_eq_input", (1, 2, 3, 3), (2, 2, 3, 3), {}),
  P("2d_all", (2, 4, 7, 6), (6, 2, 3, 2), dict(stride=(2, 3), dilation=(2, 1), padding=(2, 1), groups=2)),
  P("2d_pad_tuple", (1, 2, 5, 6), (2, 2, 3, 3), dict(padding=(0, 2))),
  P("2d_same", (1, 2, 5, 6), (3, 2, 3, 4), dict(padding="same")),
  P("2d_same_dilation", (1, 2, 7, 6), (2, 2, 2, 3), dict(padding="same", dilation=(2, 2))),
  P("2d_valid", (1, 2, 5, 6), (3, 2, 3, 3), dict(padding="valid")),
  P("2d_stride_gt_kernel", (1, 1, 8, 7), (2, 1, 2, 2), dict(stride=3)),
  P("2d_stride_dilation", (1, 2, 9, 9), (2, 2, 3, 3), dict(stride=2, dilation=2, padding=1)),
  P("3d", (1, 2, 4, 3, 4), (2, 2, 2, 2, 2), {}),
  P("3d_stride_pad", (1, 1, 5, 4, 4), (2, 1, 3, 2, 3), dict(stride=(2, 1, 2), padding=1)),
  P("2d_big", (4, 8, 16, 13), (16, 8, 3, 3), dict(padding=1)),
  P("2d_big_groups_stride", (3, 8, 17, 15), (12, 2, 5, 3), dict(groups=4, stride=2, padding=(2, 1), dilation=(1, 2))),
  P("3d_big", (2, 4, 8, 7, 6), (6, 4, 3, 3, 3), dict(stride=2, padding=1)),
]
BIG = ("big",)

@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("xs,ws,kw", CONVS)
def test_conv(device: str, request: pytest.FixtureRequest, xs: tuple, ws: tuple, kw: dict, bias: bool) -> None:
  if "big" in request.node.callspec.id: cpu_only(device)
  x, w, b = rand(*xs), rand(*ws, seed=1), rand(ws[0], seed=2)
  tfn = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(xs)]
  want = tfn(tt(x), tt(w), tt(b) if bias else None, **kw)
  check(Tensor(x).conv2d(Tensor(w), Tensor(b) if bias else None, **kw), want, atol=1e-4)

def test_conv_asymmetric_padding(device: str) -> None:
  x, w = rand(1, 2, 5, 4), rand(3, 2, 3, 3, seed=1)
  # flat PyTorch order: (left, right, top, bottom), i.e. F.pad then a valid conv
  pads = (1, 0, 2, 1)
  check(Tensor(x).conv2d(Tensor(w), padding=pads), F.conv2d(F.pad(tt(x), pads), tt(w)), atol=1e-4)

def test_conv_padding_of_an_expression(device: str) -> None:
  # the padding must be zeros, not exp(0) = 1: the pad may not be pushed through exp to the loads
  x, w = rand(1, 1, 4, 4), rand(1, 1, 3, 3, seed=1)
  check(Tensor(x).exp().conv2d(Tensor(w), padding=1), F.conv2d(tt(x).exp(), tt(w), padding=1), atol=1e-4)
  check(Tensor(x).exp().avg_pool2d(3, stride=1, padding=1), F.avg_pool2d(tt(x).exp(), 3, stride=1, padding=1))

def test_conv_is_one_kernel(device: str) -> None:
  from attograd import GlobalCounters
  x, w = Tensor(rand(1, 2, 6, 6)).realize(), Tensor(rand(2, 2, 3, 3)).realize()
  k0 = GlobalCounters.kernel_count
  x.conv2d(w, stride=2, padding=1, dilation=2).realize()
  assert GlobalCounters.kernel_count - k0 == 1

def test_conv_errors(device: str) -> None:
  x = Tensor(rand(1, 4, 5, 5))
  with pytest.raises(ValueError, match="conv2d: input channels"): x.conv2d(Tensor(rand(2, 3, 3, 3)))
  with pytest.raises(ValueError, match="conv2d: input channels"): x.conv2d(Tensor(rand(3, 2, 3, 3)), groups=2)
  with pytest.raises(ValueError, match="same"): x.conv2d(Tensor(rand(2, 4, 3, 3)), padding="same", stride=2)
  with pytest.raises(ValueError, match="conv2d"): x.conv2d(Tensor(rand(2, 4, 3)))
  with pytest.raises(ValueError, match="larger than the input"): x.conv2d(Tensor(rand(2, 4, 6, 3)))
  with pytest.raises(ValueError, match="padding"): x.conv2d(Tensor(rand(2, 4, 3, 3)), padding=(1, 2, 3))

# ***** conv_transpose2d *****

CONV_TRANSPOSES = [
  P("1d", (1, 2, 4), (2, 3, 3), {}),
  P("1d_stride", (2, 2, 4), (2, 1, 3), dict(stride=2)),
  P("2d", (1, 2, 3, 3), (2, 2, 2, 2), {}),
  P("2d_stride_pad", (2, 2, 3, 4), (2, 3, 3, 3), dict(stride=2, padding=1)),
  P("2d_output_padding", (1, 2, 3, 3), (2, 2, 3, 3), dict(stride=2, padding=1, output_padding=1)),
  P("2d_groups", (1, 4, 3, 3), (4, 1, 2, 3), dict(groups=2, stride=(1, 2))),
  P("2d_dilation", (1, 2, 3, 4), (2, 2, 2, 2), dict(dilation=2, stride=3, padding=(1, 0))),
  P("2d_pad_gt_kernel", (1, 1, 5, 5), (1, 1, 2, 2), dict(padding=2)),
  P("3d", (1, 2, 2, 3, 2), (2, 2, 2, 2, 2), dict(stride=2)),
  P("2d_big", (2, 8, 7, 6), (8, 6, 4, 3), dict(stride=(2, 3), padding=(1, 1), output_padding=(1, 2), groups=2)),
]

@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("xs,ws,kw", CONV_TRANSPOSES)
def test_conv_transpose(device: str, request: pytest.FixtureRequest, xs: tuple, ws: tuple, kw: dict,
                        bias: bool) -> None:
  if "big" in request.node.callspec.id: cpu_only(device)
  x, w = rand(*xs), rand(*ws, seed=1)
  cout = ws[1] * kw.get("groups", 1)
  b = rand(cout, seed=2)
  tfn = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}[len(xs)]
  want = tfn(tt(x), tt(w), tt(b) if bias else None, **kw)
  check(Tensor(x).conv_transpose2d(Tensor(w), Tensor(b) if bias else None, **kw), want, atol=1e-4)

# ***** pooling *****

# (name, input shape, kwargs); max_pool2d and avg_pool2d both run each (dilation only for max)
POOLS = [
  P("1d", (1, 2, 7), dict(kernel_size=(2,))),
  P("1d_stride1", (2, 1, 6), dict(kernel_size=(3,), stride=1)),
  P("2d_default", (1, 2, 4, 6), {}),
  P("2d_int_kernel", (2, 1, 5, 5), dict(kernel_size=3)),
  P("2d_stride", (1, 2, 7, 6), dict(kernel_size=(3, 2), stride=(2, 1))),
  P("2d_pad", (1, 1, 5, 6), dict(kernel_size=3, stride=2, padding=1)),
  P("2d_pad_tuple", (1, 1, 6, 5), dict(kernel_size=(3, 2), padding=(1, 0))),
  P("2d_ceil", (1, 1, 7, 6), dict(kernel_size=2, stride=2, ceil_mode=True)),
  P("2d_ceil_pad", (1, 2, 7, 8), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
  P("2d_ceil_stride3", (1, 1, 8, 5), dict(kernel_size=2, stride=3, ceil_mode=True)),
  P("3d", (1, 1, 4, 5, 4), dict(kernel_size=(2, 2, 2))),
  P("3d_stride_pad", (1, 2, 5, 4, 6), dict(kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=1)),
  P("2d_big", (4, 8, 32, 31), dict(kernel_size=3, stride=2, padding=1)),
  # windows over 49 elements: a view of the repeated input instead of a stack of shifted slices
  P("2d_big_window", (1, 2, 12, 11), dict(kernel_size=(8, 7), stride=1)),
  P("2d_big_window_stride", (2, 1, 17, 20), dict(kernel_size=(8, 9), stride=(3, 5), padding=(2, 4))),
  P("1d_big_window", (1, 2, 70), dict(kernel_size=(60,), stride=(5,))),
]
MAX_ONLY = [
  P("2d_dilation", (1, 1, 7, 7), dict(kernel_size=2, stride=1, dilation=2)),
  P("2d_big_window_dilation", (1, 1, 30, 29), dict(kernel_size=(8, 8), stride=(2, 3), dilation=(2, 1))),
  P("2d_dilation_ceil", (1, 2, 9, 8), dict(kernel_size=3, stride=2, dilation=(2, 1), padding=1, ceil_mode=True)),
]
AVG_ONLY = [
  P("2d_exclude_pad", (1, 1, 5, 6), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
  P("2d_exclude_pad_ceil", (1, 2, 7, 8), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                               count_include_pad=False)),
  P("1d_exclude_pad", (1, 1, 6), dict(kernel_size=(4,), stride=3, padding=2, count_include_pad=False)),
]

def _torch_pool(kind: str, x: Any, kw: dict) -> Any:
  kw = dict(kw)
  nd = x.ndim - 2
  kw.setdefault("kernel_size", 2 if nd == 2 else (2,) * nd)
  return getattr(F, f"{kind}_pool{nd}d")(x, **kw)

@pytest.mark.parametrize("xs,kw", POOLS + MAX_ONLY)
def test_max_pool(device: str, request: pytest.FixtureRequest, xs: tuple, kw: dict) -> None:
  if "big" in request.node.callspec.id: cpu_only(device)
  x = rand(*xs)
  check(Tensor(x).max_pool2d(**kw), _torch_pool("max", tt(x), kw))

@pytest.mark.parametrize("xs,kw", POOLS + AVG_ONLY)
def test_avg_pool(device: str, request: pytest.FixtureRequest, xs: tuple, kw: dict) -> None:
  if "big" in request.node.callspec.id: cpu_only(device)
  x = rand(*xs)
  check(Tensor(x).avg_pool2d(**kw), _torch_pool("avg", tt(x), kw))

def test_big_window_pool_is_a_small_kernel(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
  # an 8x8x8 window used to be a stack of 512 masked slices, each read at every window step: a 128 KB kernel forward
  # and a gradient kernel that took gcc minutes. As a view of the repeated input both are short loops.
  cpu_only(device, "kernel source sizes")
  from attograd.engine import realize
  monkeypatch.setattr(realize, "_runners", realize._RunnerCache())  # only this test's kernels
  x = rand(1, 2, 12, 12, 12)
  t = Tensor(x, requires_grad=True)
  out = t.avg_pool2d(kernel_size=(8, 8, 8), stride=1)
  out.square().sum().backward()
  assert t.grad is not None
  tx = tt(x).requires_grad_()
  want = F.avg_pool3d(tx, (8, 8, 8), stride=1)
  want.square().sum().backward()
  check(out, want)
  check(t.grad, tx.grad)
  biggest = max(len(r.spec.src) for r in realize._runners.values() if r.spec.device == device)
  assert biggest < 24_000, f"a pooling kernel is {biggest} bytes of source"

def test_max_pool_int(device: str) -> None:
  x = np.arange(-12, 12, dtype=np.int32).reshape(1, 1, 4, 6)
  out = Tensor(x).max_pool2d(2, padding=1)
  assert out.dtype == dtypes.int32
  check(out, F.max_pool2d(torch.from_numpy(x).float(), 2, padding=1).int())

# ***** interpolate *****

# (name, input shape, size, torch mode, kwargs for both)
INTERPOLATES = [
  P("nearest_up_1d", (1, 2, 5), (8,), "nearest", {}),
  P("nearest_down_2d", (1, 1, 7, 6), (3, 4), "nearest", {}),
  P("nearest_mixed_3d", (1, 1, 3, 4, 5), (5, 2, 7), "nearest", {}),
  P("nearest_exact_2d", (2, 1, 5, 6), (7, 4), "nearest-exact", {}),
  P("linear_1d", (1, 2, 5), (9,), "linear", {}),
  P("linear_down_1d", (1, 1, 9), (4,), "linear", {}),
  P("linear_align_1d", (1, 1, 4), (7,), "linear", dict(align_corners=True)),
  P("bilinear", (2, 2, 4, 5), (7, 3), "bilinear", {}),
  P("bilinear_align", (1, 1, 4, 3), (6, 5), "bilinear", dict(align_corners=True)),
  P("bilinear_align_to_one", (1, 1, 4, 3), (1, 5), "bilinear", dict(align_corners=True)),
  P("trilinear", (1, 1, 3, 4, 2), (5, 2, 4), "trilinear", {}),
  P("trilinear_align", (1, 1, 3, 2, 4), (4, 5, 3), "trilinear", dict(align_corners=True)),
]

@pytest.mark.parametrize("xs,size,mode,kw", INTERPOLATES)
def test_interpolate(device: str, xs: tuple, size: tuple, mode: str, kw: dict) -> None:
  x = rand(*xs)
  want = F.interpolate(tt(x), size=size, mode=mode, **kw)
  check(Tensor(x).interpolate(size, mode=mode, **kw), want, atol=1e-5)
  if mode.endswith("linear"): check(Tensor(x).interpolate(size, mode="linear", **kw), want, atol=1e-5)

def test_interpolate_errors(device: str) -> None:
  x = Tensor(rand(1, 1, 4))
  with pytest.raises(ValueError, match="mode"): x.interpolate((3,), mode="bicubic")
  with pytest.raises(ValueError, match="align_corners"): x.interpolate((3,), mode="nearest", align_corners=True)
  with pytest.raises(ValueError, match="size"): x.interpolate((0,))

# ***** attention *****

@pytest.mark.parametrize("mask", ["none", "bool", "float", "causal"])
def test_scaled_dot_product_attention(device: str, mask: str) -> None:
  q, k, v = rand(2, 3, 4, 8), rand(2, 3, 5, 8, seed=1), rand(2, 3, 5, 6, seed=2)
  if mask == "causal": k, v = k[:, :, :4], v[:, :, :4]
  m: Any = None
  if mask == "bool": m = np.random.default_rng(3).random((4, 5)) < 0.7
  if mask == "bool": m[:, 0] = True  # every query attends somewhere
  if mask == "float": m = rand(2, 1, 4, 5, seed=4)
  want = F.scaled_dot_product_attention(tt(q), tt(k), tt(v), attn_mask=None if m is None else tt(m),
                                        is_causal=mask == "causal")
  got = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), attn_mask=None if m is None else Tensor(m),
                                               is_causal=mask == "causal")
  check(got, want, atol=1e-5)

def test_sdpa_causal_with_mask_raises(device: str) -> None:
  q = Tensor(rand(2, 4))
  with pytest.raises(ValueError, match="attn_mask or is_causal"):
    q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(2, 2), is_causal=True)

# ***** losses *****

REDUCTION_IDS = ["mean", "sum", "none"]

@pytest.mark.parametrize("reduction", REDUCTION_IDS)
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_sparse_categorical_crossentropy(device: str, reduction: str, smoothing: float) -> None:
  x = rand(6, 5)
  y = np.array([0, 4, -1, 2, 2, -1], np.int32)
  want = F.cross_entropy(tt(x), torch.from_numpy(y).long(), ignore_index=-1, label_smoothing=smoothing,
                         reduction=reduction)
  check(Tensor(x).sparse_categorical_crossentropy(Tensor(y), label_smoothing=smoothing, reduction=reduction), want)
  y2 = np.array([0, 4, 3, 2, 2, 3], np.int32)
  want = F.cross_entropy(tt(x), torch.from_numpy(y2).long(), ignore_index=3, reduction=reduction)
  check(Tensor(x).sparse_categorical_crossentropy(Tensor(y2), ignore_index=3, reduction=reduction), want)

@pytest.mark.parametrize("reduction", REDUCTION_IDS)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy(device: str, reduction: str, smoothing: float) -> None:
  kw = dict(reduction=reduction, label_smoothing=smoothing)
  x, y = rand(4, 3), np.array([2, 0, 1, 1], np.int32)
  check(Tensor(x).cross_entropy(Tensor(y), **kw), F.cross_entropy(tt(x), torch.from_numpy(y).long(), **kw))
  probs = rand(4, 3, seed=1, low=0, high=1)
  probs /= probs.sum(1, keepdims=True)
  check(Tensor(x).cross_entropy(Tensor(probs), **kw), F.cross_entropy(tt(x), tt(probs), **kw))
  # (N, C, d) logits with (N, d) targets, and an unbatched (C,) input
  x3, y3 = rand(2, 3, 4, seed=2), np.array([[0, 1, 2, 1], [2, 2, 0, 0]], np.int32)
  check(Tensor(x3).cross_entropy(Tensor(y3), **kw), F.cross_entropy(tt(x3), torch.from_numpy(y3).long(), **kw))
  check(Tensor(x[0]).cross_entropy(Tensor(y[0]), **kw), F.cross_entropy(tt(x[0]), torch.tensor(int(y[0])), **kw))

def test_cross_entropy_shape_error(device: str) -> None:
  with pytest.raises(ValueError, match="cross_entropy"): Tensor(rand(4, 3)).cross_entropy(Tensor([0, 1]))

@pytest.mark.parametrize("reduction", REDUCTION_IDS)
def test_nll_loss(device: str, reduction: str) -> None:
  x = np.log(np.random.default_rng(0).dirichlet(np.ones(4), 5)).astype(np.float32)
  y, w = np.array([0, 3, 1, 1, 2], np.int32), rand(4, seed=1, low=0.5, high=2)
  ty = torch.from_numpy(y).long()
  check(Tensor(x).nll_loss(Tensor(y), reduction=reduction), F.nll_loss(tt(x), ty, reduction=reduction))
  check(Tensor(x).nll_loss(Tensor(y), Tensor(w), reduction=reduction),
        F.nll_loss(tt(x), ty, tt(w), reduction=reduction))
  check(Tensor(x).nll_loss(Tensor(y), Tensor(w), ignore_index=1, reduction=reduction),
        F.nll_loss(tt(x), ty, tt(w), ignore_index=1, reduction=reduction))
  x3, y3 = rand(2, 4, 3, seed=2), np.array([[0, 3, 2], [1, 1, 0]], np.int32)
  check(Tensor(x3).nll_loss(Tensor(y3), reduction=reduction),
        F.nll_loss(tt(x3), torch.from_numpy(y3).long(), reduction=reduction))

@pytest.mark.parametrize("reduction", REDUCTION_IDS)
def test_binary_crossentropy(device: str, reduction: str) -> None:
  p, y = rand(3, 4, low=0.01, high=0.99), rand(3, 4, seed=1, low=0, high=1)
  check(Tensor(p).binary_crossentropy(Tensor(y), reduction), F.binary_cross_entropy(tt(p), tt(y), reduction=reduction))
  # probabilities of exactly 0 and 1: PyTorch clamps the logs at -100
  p01, y01 = np.array([0.0, 1.0, 0.0, 1.0], np.float32), np.array([0.0, 1.0, 1.0, 0.0], np.float32)
  check(Tensor(p01).binary_crossentropy(Tensor(y01), reduction),
        F.binary_cross_entropy(tt(p01), tt(y01), reduction=reduction))

@pytest.mark.parametrize("reduction", REDUCTION_IDS)
def test_binary_crossentropy_logits(device: str, reduction: str) -> None:
  x, y, pw = rand(3, 4, low=-30, high=30), rand(3, 4, seed=1, low=0, high=1), rand(4, seed=2, low=0.5, high=3)
  check(Tensor(x).binary_crossentropy_logits(Tensor(y), reduction),
        F.binary_cross_entropy_with_logits(tt(x), tt(y), reduction=reduction), atol=1e-4)
  check(Tensor(x).binary_crossentropy_logits(Tensor(y), reduction, pos_weight=Tensor(pw)),
        F.binary_cross_entropy_with_logits(tt(x), tt(y), reduction=reduction, pos_weight=tt(pw)), atol=1e-4)

@pytest.mark.parametrize("reduction", REDUCTION_IDS)
def test_regression_losses(device: str, reduction: str) -> None:
  x, y = rand(3, 5), rand(3, 5, seed=1)
  check(Tensor(x).mse_loss(Tensor(y), reduction), F.mse_loss(tt(x), tt(y), reduction=reduction))
  check(Tensor(x).l1_loss(Tensor(y), reduction), F.l1_loss(tt(x), tt(y), reduction=reduction))
  for beta in (1.0, 0.5, 0.0):
    check(Tensor(x).smooth_l1_loss(Tensor(y), beta, reduction),
          F.smooth_l1_loss(tt(x), tt(y), reduction=reduction, beta=beta))

def test_bad_reduction(device: str) -> None:
  with pytest.raises(ValueError, match="reduction"): Tensor([1.0]).mse_loss(Tensor([2.0]), "avg")

# ***** sort, argsort, topk *****

SORT_INPUTS = [
  P("1d", rand(7)),
  P("2d_ties", np.array([[3, 1, 2, 1, 3], [0, 0, 0, 0, 0], [5, 4, 4, 1, 5]], np.float32)),
  P("3d", rand(2, 3, 4)),
  P("int", np.array([[5, -2, 7, -2, 0, 7]], np.int32)),
  P("special", np.array([np.nan, 1.0, -np.inf, np.inf, np.nan, -1.0, 1.0], np.float32)),
]

@pytest.mark.parametrize("descending", [False, True], ids=["asc", "desc"])
@pytest.mark.parametrize("x", SORT_INPUTS)
def test_sort(device: str, x: np.ndarray, descending: bool) -> None:
  for dim in range(-1, -x.ndim - 1, -1):
    want_v, want_i = torch.sort(tt(x), dim=dim, descending=descending, stable=True)
    v, i = Tensor(x).sort(dim, descending)
    check(v, want_v)
    check(i, want_i)
    check(Tensor(x).argsort(dim, descending), want_i)

def test_sort_bool_and_0d(device: str) -> None:
  v, i = Tensor([True, False, True]).sort()
  assert v.tolist() == [False, True, True] and i.tolist() == [1, 0, 2]
  v, i = Tensor(2.5).sort()
  assert v.item() == 2.5 and i.item() == 0

@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
def test_topk(device: str, largest: bool) -> None:
  x = rand(3, 6)
  for k, dim in [(1, -1), (3, -1), (6, 1), (2, 0)]:
    want_v, want_i = torch.topk(tt(x), k, dim=dim, largest=largest)
    v, i = Tensor(x).topk(k, dim, largest)
    check(v, want_v)
    check(i, want_i)
  with pytest.raises(ValueError, match="topk"): Tensor(x).topk(7)

# ***** gradients (once autograd is in) *****

needs_grad = pytest.mark.skipif(not hasattr(Tensor, "backward"), reason="autograd not available")

def _grads(fn: Callable, tfn: Callable, arrays: list[np.ndarray]) -> tuple[list[Tensor], list[Any]]:
  """Gradients of sum(f(...) * r) for a fixed random r, so every output element gets a different upstream grad."""
  ts = [Tensor(a, requires_grad=True) for a in arrays]
  out = fn(*ts)
  r = rand(*out.shape, seed=9)
  (out * Tensor(r)).sum().backward()
  tts = [tt(a).requires_grad_(True) for a in arrays]
  (tfn(*tts) * tt(r)).sum().backward()
  return [t.grad for t in ts], [t.grad for t in tts]

# (name, attograd fn, torch fn, input shapes)
GRADS = [
  P("conv2d", lambda x, w, b: x.conv2d(w, b, stride=(2, 1), dilation=(1, 2), padding=1, groups=2),
    lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), dilation=(1, 2), padding=1, groups=2),
    [(1, 4, 4, 5), (4, 2, 3, 2), (4,)]),
  P("conv1d_same", lambda x, w: x.conv2d(w, padding="same"), lambda x, w: F.conv1d(x, w, padding="same"),
    [(1, 2, 6), (3, 2, 4)]),
  P("conv_transpose2d", lambda x, w: x.conv_transpose2d(w, stride=2, padding=1, output_padding=1),
    lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1), [(1, 2, 3, 3), (2, 3, 3, 3)]),
  pytest.param(lambda x: x.max_pool2d(3, stride=2, padding=1), lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
               [(1, 2, 5, 6)], id="max_pool2d"),
  P("avg_pool2d_ceil", lambda x: x.avg_pool2d(2, ceil_mode=True), lambda x: F.avg_pool2d(x, 2, ceil_mode=True),
    [(1, 1, 5, 5)]),
  P("interpolate_bilinear", lambda x: x.interpolate((5, 3)), lambda x: F.interpolate(x, (5, 3), mode="bilinear"),
    [(1, 1, 3, 4)]),
  P("sdpa_causal", lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
    lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [(2, 3, 4), (2, 3, 4), (2, 3, 5)]),
  P("layernorm", lambda x: x.layernorm(), lambda x: F.layer_norm(x, (5,)), [(3, 5)]),
  P("activations", lambda x: x.gelu() + x.elu() + x.selu() + x.mish() + x.softplus() + x.logsigmoid(),
    lambda x: F.gelu(x, approximate="tanh") + F.elu(x) + F.selu(x) + F.mish(x) + F.softplus(x) + F.logsigmoid(x),
    [(4, 6)]),
  P("sort", lambda x: x.sort(-1)[0], lambda x: torch.sort(x, -1)[0], [(3, 5)]),
]

@needs_grad
@pytest.mark.parametrize("fn,tfn,shapes", GRADS)
def test_grad(device: str, fn: Callable, tfn: Callable, shapes: list[tuple]) -> None:
  got, want = _grads(fn, tfn, [rand(*s, seed=i) for i, s in enumerate(shapes)])
  for g, w in zip(got, want): check(g, w, atol=1e-4)

@needs_grad
def test_grad_losses(device: str) -> None:
  x, y = rand(4, 3), np.array([2, 0, 1, 1], np.int32)
  got, want = _grads(lambda a: a.cross_entropy(Tensor(y), label_smoothing=0.1),
                     lambda a: F.cross_entropy(a, torch.from_numpy(y).long(), label_smoothing=0.1), [x])
  check(got[0], want[0])
  got, want = _grads(lambda a: a.binary_crossentropy_logits(Tensor(x > 0).float()),
                     lambda a: F.binary_cross_entropy_with_logits(a, tt(x > 0).float()), [x * 20])
  check(got[0], want[0])

@needs_grad
def test_grad_activations_finite_at_extremes(device: str) -> None:
  # the exp in elu/selu/celu only sees x <= 0, so huge inputs give finite gradients, not inf * 0 = nan
  x = np.array([-100.0, -1.0, 0.5, 100.0], np.float32)
  fn = lambda t: t.elu() + t.selu() + t.celu() + t.softplus() + t.logsigmoid() + t.mish()  # noqa: E731
  tfn = lambda t: F.elu(t) + F.selu(t) + F.celu(t) + F.softplus(t) + F.logsigmoid(t) + F.mish(t)  # noqa: E731
  got, want = _grads(fn, tfn, [x])
  check(got[0], want[0])

@needs_grad
def test_grad_silu_finite_at_extremes(device: str) -> None:
  got, want = _grads(lambda t: t.silu(), F.silu, [np.array([-100.0, -1.0, 0.5, 100.0], np.float32)])
  check(got[0], want[0])
