"""IEEE semantics on every device (docs/numerics.md): NaN propagates, inf and signed zero come out as in PyTorch, and
neither the C compiler's flags nor LLVM's fast-math flags nor the simplifier fold them away. Each case is compared
bit for bit (sign of zero included) on a short tensor and on a long one, whose kernel runs on vector lanes."""
from __future__ import annotations
from typing import Callable
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from attograd import Tensor

nan, inf = float("nan"), float("inf")
VALS = [nan, inf, -inf, 0.0, -0.0, 1.0, -1.0, 2.5, -3.0, 1e-30, -1e30, 0.5, -0.5, 100.0, -100.0, 7.0]

def same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
  """Element-wise: both NaN, or equal with the same sign (so 0.0 and -0.0 differ)."""
  g, w = got.astype(np.float64), want.astype(np.float64)
  return (np.isnan(g) & np.isnan(w)) | ((g == w) & (np.signbit(g) == np.signbit(w)))

def check_exact(att_fn: Callable, torch_fn: Callable, dtype: str, vals: list[float] = VALS) -> None:
  for n in (len(vals), 64):  # 64: the elementwise kernel gets vector lanes on CPU and LLVM
    x = np.resize(np.array(vals, dtype=dtype), n)
    got, want = att_fn(Tensor(x)).numpy(), torch_fn(torch.tensor(x)).numpy()
    ok = same_bits(got, want)
    assert ok.all(), f"n={n}: x={x[~ok][:4]} got {got[~ok][:4]} want {want[~ok][:4]}"

EXACT = {
  # the C flags let gcc fold these (-fno-signed-zeros: x*0 -> 0, x+0 -> x); LLVM had nsz
  "mul0": (lambda t: t * 0, lambda t: t * 0),
  "rmul0": (lambda t: 0 * t, lambda t: 0 * t),
  "add0": (lambda t: t + 0, lambda t: t + 0),
  "add_neg0": (lambda t: t + (-0.0), lambda t: t + (-0.0)),
  "sub_self": (lambda t: t - t, lambda t: t - t),
  "mul_neg1": (lambda t: t * -1, lambda t: t * -1),
  "mul1": (lambda t: t * 1, lambda t: t * 1),
  "neg": (lambda t: -t, lambda t: -t),
  "sqrt_mul0": (lambda t: t.sqrt() * 0, lambda t: t.sqrt() * 0),
  "recip": (lambda t: 1 / t, lambda t: 1 / t),
  "div_self": (lambda t: t / t, lambda t: t / t),
  # NaN, -0.0 and the kinks
  "relu": (lambda t: t.relu(), torch.relu),
  "abs": (lambda t: t.abs(), torch.abs),
  "clamp": (lambda t: t.clamp(-1, 1), lambda t: t.clamp(-1, 1)),
  "clamp_min0": (lambda t: t.clamp(0, None), lambda t: t.clamp(0, None)),
  "relu6": (lambda t: t.relu6(), F.relu6),
  "hardtanh": (lambda t: t.hardtanh(), F.hardtanh),
  "leaky_relu": (lambda t: t.leaky_relu(0.25), lambda t: F.leaky_relu(t, 0.25)),
  "where": (lambda t: (t > 0).where(t, -t), lambda t: torch.where(t > 0, t, -t)),
  "maximum_flip": (lambda t: t.maximum(t.flip(0)), lambda t: torch.maximum(t, t.flip(0))),
  "minimum_flip": (lambda t: t.minimum(t.flip(0)), lambda t: torch.minimum(t, t.flip(0))),
  "isnan": (lambda t: t.isnan(), torch.isnan),
  "trunc": (lambda t: t.trunc(), torch.trunc),
  "floor": (lambda t: t.floor(), torch.floor),
  "ceil": (lambda t: t.ceil(), torch.ceil),
  "round": (lambda t: t.round(), torch.round),
  "one_pow": (lambda t: 1.0 ** t, lambda t: 1.0 ** t),
  # tiny arguments and -0.0 through the accurate forms
  "expm1": (lambda t: t.expm1(), torch.expm1),
  "log1p": (lambda t: t.log1p(), torch.log1p),
  "tanh_tiny": (lambda t: (t * 2.0 ** -66).tanh(), lambda t: (t * 2.0 ** -66).tanh()),
  "elu": (lambda t: t.elu(), F.elu),
}

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(EXACT))
def test_exact(device: str, name: str, dtype: str) -> None:
  att_fn, torch_fn = EXACT[name]
  if name in ("expm1", "log1p"):  # exact only where the result is exact: 0, -0.0, tiny x, and the special values
    vals = [nan, inf, -inf, 0.0, -0.0, 1e-30, -1e-30, 1e-20, -1e-20, -1.0]
    check_exact(att_fn, torch_fn, dtype, vals if name == "log1p" else vals[:-1] + [-inf])
  else: check_exact(att_fn, torch_fn, dtype)

# special values where the result is not exact: NaN and inf where PyTorch has them (zeros and infinities with its
# signs), values within a few ulp; cos of |x| past 1e5 falls back to 1 - 2 sin^2(x/2)
CLOSE = {
  "exp": (lambda t: t.exp(), torch.exp), "log": (lambda t: t.log(), torch.log),
  "sigmoid": (lambda t: t.sigmoid(), torch.sigmoid), "tanh": (lambda t: t.tanh(), torch.tanh),
  "softplus": (lambda t: t.softplus(), F.softplus), "sin": (lambda t: t.sin(), torch.sin),
  "cos": (lambda t: t.cos(), torch.cos), "exp2": (lambda t: t.exp2(), torch.exp2),
  "pow3": (lambda t: t ** 3, lambda t: t ** 3),
  "pow2.5": (lambda t: t ** 2.5, lambda t: t ** 2.5),
  "pow_neg3": (lambda t: t ** -3, lambda t: t ** -3),
  "rpow": (lambda t: 0.0 ** t, lambda t: 0.0 ** t),
  "sign": (lambda t: t.sign(), np.sign),  # NumPy's: sign(nan) is nan (PyTorch says 0)
}

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(CLOSE))
def test_special_values_close(device: str, name: str, dtype: str) -> None:
  att_fn, ref_fn = CLOSE[name]
  x = np.array(VALS + [-1e-30, 88.0, -88.0, 1e5, -1e5], dtype=dtype)
  got = att_fn(Tensor(x)).numpy()
  want = ref_fn(x) if ref_fn is np.sign else ref_fn(torch.tensor(x)).numpy()
  if name == "sigmoid": want = 1 / (1 + np.exp(-x.astype(np.float64)))  # PyTorch's vector path flushes e^-100 to 0
  atol = 1e-43 if dtype == "float32" else 0  # a float32 denormal result: a few of its ulps
  np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12, atol=atol, equal_nan=True)
  assert (np.isnan(got) == np.isnan(want)).all() and (np.isinf(got) == np.isinf(want)).all()
  zero_or_inf = (got == 0) | np.isinf(got)
  signs_ok = (np.signbit(got) == np.signbit(want))[zero_or_inf].all()
  assert signs_ok, f"signs of 0/inf: {x[zero_or_inf]} -> {got[zero_or_inf]}"

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reductions_propagate_nan(device: str, dtype: str) -> None:
  rng = np.random.default_rng(0)
  x = rng.standard_normal((6, 40)).astype(dtype)
  x[1, 7], x[3, 39], x[4, :] = nan, nan, nan
  t, tt = Tensor(x), torch.tensor(x)
  for got, want in [(t.max(1), tt.amax(1)), (t.min(1), tt.amin(1)), (t.max(0), tt.amax(0)), (t.max(), tt.max()),
                    (t.argmax(1), tt.argmax(1)), (t.argmin(1), tt.argmin(1)), (t.argmax(), tt.argmax()),
                    (t.softmax(1), tt.softmax(1)), (t.logsumexp(1), tt.logsumexp(1)),
                    (t.reshape(1, 3, 8, 10).max_pool2d(2), F.max_pool2d(tt.reshape(1, 3, 8, 10), 2))]:
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)

def test_softmax_with_neg_inf(device: str) -> None:
  x = np.array([[0.0, -inf, 1.0, -inf], [-inf, -inf, -inf, 2.0], [-inf, -inf, -inf, -inf]], dtype=np.float32)
  t, tt = Tensor(x), torch.tensor(x)
  for got, want in [(t.softmax(1), tt.softmax(1)), (t.log_softmax(1), tt.log_softmax(1))]:
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7, equal_nan=True)

def test_signed_zero_constants_stay_apart(device: str) -> None:
  # Tensor's cache of broadcast constants keyed 0.0 and -0.0 alike: x + (-0.0) made a later abs(-0.0) give -0.0
  x = Tensor(np.array([-0.0, 0.0, 1.0], np.float32))
  assert np.signbit((x + (-0.0)).numpy()).tolist() == [True, False, False]
  assert np.signbit((x + 0.0).numpy()).tolist() == [False, False, False]
  assert np.signbit(x.abs().numpy()).tolist() == [False, False, False]

def test_no_unsafe_float_flags() -> None:
  """The CPU compiler and the LLVM renderer keep IEEE semantics: no flag that lets them fold NaN, inf or -0.0."""
  from attograd.renderer import llvmir
  assert llvmir.FMF.split() == [], llvmir.FMF  # not even contract: fused multiply-adds are the code generator's
  from attograd.runtime.ops_cpu import ClangCompiler, find_c_compiler
  flags = ClangCompiler(find_c_compiler()).flags
  assert "-ffp-contract=off" in flags and "-ffp-contract=fast" not in flags
  for bad in ("-ffast-math", "-fno-signed-zeros", "-fassociative-math", "-ffinite-math-only",
              "-funsafe-math-optimizations", "-freciprocal-math"):
    assert bad not in flags
  from attograd.runtime import ops_cl
  src = open(ops_cl.__file__).read()
  assert "fast-relaxed-math" not in src and "mad-enable" not in src and "finite-math" not in src
