"""conv2d's custom backward (the input's gradient as a transposed convolution, the weight's from the padded input
with a channel-last copy of the output's gradient) and max_pool2d's reshape path for tiling windows, against PyTorch:
forward, both gradients and a second derivative, with strides, padding, dilation, groups and odd sizes."""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
from helpers import compare, cpu_only
from attograd import GlobalCounters, Tensor

torch = pytest.importorskip("torch")
F = torch.nn.functional

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)
def rand(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)
def tt(x: np.ndarray, grad: bool = False) -> Any: return torch.from_numpy(np.ascontiguousarray(x)).requires_grad_(grad)

def _conv_grads(xs: tuple, ws: tuple, kw: dict, bias: bool) -> None:
  x, w, b, up = rand(*xs), rand(*ws, seed=1), rand(ws[0], seed=2), None
  tfn = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(xs)]
  tx, tw, tb = tt(x, True), tt(w, True), tt(b, True)
  if isinstance(pads := kw.get("padding"), tuple) and len(pads) == 2 * (len(xs) - 2):  # flat, asymmetric
    tout = tfn(F.pad(tx, pads), tw, tb if bias else None, **{k: v for k, v in kw.items() if k != "padding"})
  else: tout = tfn(tx, tw, tb if bias else None, **kw)
  up = rand(*tout.shape, seed=3)  # a non-uniform output gradient, so a transposed or shifted gradient shows
  (tout * tt(up)).sum().backward()
  ax, aw, ab = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True), Tensor(b, requires_grad=True)
  out = ax.conv2d(aw, ab if bias else None, **kw)
  (out * Tensor(up)).sum().backward()
  compare(out, tout.detach().numpy(), atol=1e-4, rtol=1e-4, name="out")
  compare(ax.grad, tx.grad.numpy(), atol=1e-3, rtol=1e-4, name="dx")
  compare(aw.grad, tw.grad.numpy(), atol=1e-3, rtol=1e-4, name="dw")
  if bias: compare(ab.grad, tb.grad.numpy(), atol=1e-3, rtol=1e-4, name="db")

# small enough for the PYTHON device
SMALL = [
  P("2d", (2, 3, 6, 5), (4, 3, 3, 3), {}),
  P("2d_pad", (2, 2, 5, 6), (3, 2, 3, 2), dict(padding=1)),
  P("2d_asym_pad", (1, 2, 5, 4), (3, 2, 3, 3), dict(padding=(1, 0, 2, 1))),
  P("2d_big_pad", (1, 2, 4, 4), (2, 2, 3, 3), dict(padding=3)),
  P("2d_dilation", (1, 2, 7, 6), (2, 2, 3, 2), dict(dilation=(2, 1), padding=1)),
  P("2d_groups", (2, 4, 5, 5), (6, 2, 3, 3), dict(groups=2, padding=(1, 0))),
  P("2d_depthwise", (1, 3, 5, 4), (3, 1, 3, 3), dict(groups=3, padding="same")),
  P("2d_stride", (1, 2, 7, 6), (2, 2, 3, 3), dict(stride=2, padding=1)),  # the plain autodiff path
  P("2d_1x1", (2, 3, 3, 4), (2, 3, 1, 1), {}),
  P("1d", (2, 2, 9), (3, 2, 4), dict(padding=2)),
  P("3d", (1, 2, 4, 3, 4), (2, 2, 2, 2, 3), dict(padding=1)),
]

@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("xs,ws,kw", SMALL)
def test_conv_grads(device: str, xs: tuple, ws: tuple, kw: dict, bias: bool) -> None:
  _conv_grads(xs, ws, kw, bias)

# big enough for the padded input's own buffer, the channel-last gradient copy and the short-row weight copy
BIG = [
  P("5x5_valid", (4, 8, 13, 14), (32, 8, 5, 5), {}),
  P("3x3_pad_odd", (3, 16, 17, 15), (32, 16, 3, 3), dict(padding=1)),
  P("groups_dilation", (2, 32, 19, 18), (32, 8, 3, 3), dict(groups=4, dilation=2, padding=(2, 1))),
  P("short_rows", (8, 16, 10, 10), (64, 16, 3, 3), {}),
  P("stride2", (2, 16, 21, 20), (32, 16, 3, 3), dict(stride=2, padding=1)),
]

@pytest.mark.parametrize("xs,ws,kw", BIG)
def test_conv_grads_big(device: str, xs: tuple, ws: tuple, kw: dict) -> None:
  cpu_only(device)
  _conv_grads(xs, ws, kw, True)

def test_conv_second_derivative(device: str) -> None:
  # the custom backward is made of ordinary ops: the gradient of the input's gradient reaches the weight and the input
  x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3, seed=1)
  tx, tw = tt(x, True), tt(w, True)
  gx, = torch.autograd.grad(F.conv2d(tx, tw, padding=1).square().sum(), tx, create_graph=True)
  gx.square().sum().backward()
  ax, aw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  agx, = ax.conv2d(aw, padding=1).square().sum().gradient(ax)
  agx.square().sum().backward()
  compare(agx, gx.detach().numpy(), atol=1e-3, rtol=1e-4, name="dx")
  compare(aw.grad, tw.grad.numpy(), atol=1e-2, rtol=1e-4, name="d(dx^2)/dw")
  compare(ax.grad, tx.grad.numpy(), atol=1e-2, rtol=1e-4, name="d(dx^2)/dx")

def test_conv_no_input_grad(device: str) -> None:
  # an input that needs no gradient: only the weight's is computed, and it matches
  x, w = rand(2, 1, 6, 6), rand(4, 1, 3, 3, seed=1)
  tw = tt(w, True)
  F.conv2d(tt(x), tw).relu().sum().backward()
  aw = Tensor(w, requires_grad=True)
  Tensor(x).conv2d(aw).relu().sum().backward()
  compare(aw.grad, tw.grad.numpy(), atol=1e-4, rtol=1e-4)

def test_conv_backward_kernel_count(device: str) -> None:
  # forward plus both gradients of a padded 3x3 conv: no (N, C_in, *k, *o) window gradient, a handful of kernels
  cpu_only(device)
  x, w = Tensor(rand(4, 16, 12, 12), requires_grad=True), Tensor(rand(32, 16, 3, 3, seed=1), requires_grad=True)
  Tensor.realize(x, w)
  k0 = GlobalCounters.kernel_count
  x.conv2d(w, padding=1).sum().backward()
  Tensor.realize(x.grad, w.grad)  # type: ignore[arg-type]
  assert GlobalCounters.kernel_count - k0 <= 8

POOLS = [
  P("2x2", (2, 3, 6, 8), dict(kernel_size=2)),
  P("3x2_stride", (1, 2, 9, 4), dict(kernel_size=(3, 2), stride=(3, 2))),
  P("1d", (2, 3, 8), dict(kernel_size=(2,))),
  P("not_tiling", (1, 2, 7, 6), dict(kernel_size=2)),  # 7 rows: the last one is dropped, the window path
  P("padded", (1, 2, 6, 6), dict(kernel_size=2, padding=1)),
]

@pytest.mark.parametrize("xs,kw", POOLS)
def test_max_pool_grads(device: str, xs: tuple, kw: dict) -> None:
  # integer-valued inputs make ties: the gradient is split evenly between equal maxima (not PyTorch's pick of one),
  # so the reference is computed here from the definition
  x = np.round(rand(*xs) * 1.5)
  tfn = {3: F.max_pool1d, 4: F.max_pool2d}[len(xs)]
  want = tfn(tt(x), **kw).numpy()
  ax = Tensor(x, requires_grad=True)
  out = ax.max_pool2d(**kw)
  up = rand(*want.shape, seed=4)
  (out * Tensor(up)).sum().backward()
  compare(out, want, name="out")
  # reference gradient: each window's gradient shared by its maxima (padding never wins)
  k = kw["kernel_size"]
  ks = k if isinstance(k, tuple) else (k,) * (len(xs) - 2)
  ss = kw.get("stride", ks)
  ss = ss if isinstance(ss, tuple) else (ss,) * len(ks)
  pad = kw.get("padding", 0)
  xp = np.pad(x, [(0, 0), (0, 0)] + [(pad, pad)] * len(ks), constant_values=-np.inf)
  gp = np.zeros_like(xp)
  for idx in np.ndindex(*want.shape):
    lo = [o * s for o, s in zip(idx[2:], ss)]
    sl = (idx[0], idx[1], *[slice(a, a + kk) for a, kk in zip(lo, ks)])
    win = xp[sl]
    m = win == win.max()
    gp[sl] += m * up[idx] / m.sum()
  ref = gp[(slice(None), slice(None), *[slice(pad, pad + n) for n in xs[2:]])]
  compare(ax.grad, ref, atol=1e-5, rtol=1e-5)
