"""Elementwise math built from the primitives: erf, inverse and hyperbolic trig, copysign, logaddexp, isclose."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any
from attograd.dtype import dtypes
if TYPE_CHECKING: from attograd.tensor.core import Tensor

def _log1p(x: Tensor) -> Tensor:
  """log(1 + x) without losing small x: 2 atanh(y) with y = x / (2 + x), by its series while |x| < 0.5 (|y| <= 1/3,
  9 terms reach 1e-10). (The rewriter would fold the classic log(u) * x / (u - 1) trick's u - 1 back to x.)"""
  small = x.abs() < 0.5
  xs = small.where(x, 0.0)  # the series branch sees only small x: at x = -2 its y's gradient is inf - inf (NaN)
  y = xs / (xs + 2)
  return small.where(2 * _series(y, [1 / (2 * k + 1) for k in range(9)]), (x + 1).log())

def _series(x: Tensor, coeffs: list[float]) -> Tensor:
  """x * (c0 + c1 x^2 + c2 x^4 + ...), Horner's rule in x^2."""
  z, acc = x * x, x._const_like(coeffs[-1])
  for c in reversed(coeffs[:-1]): acc = acc * z + c
  return x * acc

# asin on |x| <= 0.5: x + x^3 P(x^2), Cephes' float32 minimax coefficients (relative error ~2e-8)
_ASIN_P = [1.6666752422e-1, 7.4953002686e-2, 4.5470025998e-2, 2.4181311049e-2, 4.2163199048e-2]
# erf on |x| < 0.5 by its Taylor series 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)) (A&S's absolute error is a large
# relative one near 0): up to x^17
_ERF = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(9)]
# sinh on |x| < 0.5 by its Taylor series (the exp form loses digits to cancellation there): up to x^13
_SINH = [1.0] + [1.0 / math.factorial(k) for k in range(3, 14, 2)]

class MathMixin:
  def erf(self: Tensor) -> Tensor:
    """The error function, by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7).

    >>> round(Tensor([0.5]).erf().item(), 4)
    0.5205
    """
    def pos(a: Tensor) -> Tensor:
      t = 1 / (1 + 0.3275911 * a)
      poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
      small = a < 0.5
      # the series sees only small values: a large one overflows x^17 in half, and where()'s zero gradient for the
      # unpicked branch times that inf is NaN
      return small.where(_series(small.where(a, 0.0), _ERF), 1 - poly * (-a * a).exp())
    return _odd(self._f(), pos)
  def asin(self: Tensor) -> Tensor:
    """Inverse sine (NaN outside [-1, 1]).

    >>> round(Tensor([0.5]).asin().item(), 6)
    0.523599
    """
    def pos(a: Tensor) -> Tensor:
      small = a <= 0.5
      zb = (1 - a) * 0.5  # |x| > 0.5: asin(a) = pi/2 - 2 asin(sqrt((1 - a) / 2)), whose argument is <= 0.5
      s = zb.sqrt()
      return small.where(a + _asin_poly(a, a * a), math.pi / 2 - 2 * (s + _asin_poly(s, zb)))
    return _odd(self._f(), pos)
  def acos(self: Tensor) -> Tensor:
    """Inverse cosine (NaN outside [-1, 1])."""
    return math.pi / 2 - self.asin()
  def atan(self: Tensor) -> Tensor:
    """Inverse tangent, via asin on [-1, 1] (|x| > 1 folds to pi/2 - atan(1/x))."""
    x = self._f()
    big = x.abs() > 1
    t = big.where(1 / big.where(x, 1.0), x)
    r = (t / (t * t + 1).sqrt()).asin()
    return big.where(x.sign() * (math.pi / 2) - r, r)
  def sinh(self: Tensor) -> Tensor:
    """Hyperbolic sine."""
    x = self._f()
    small = x.abs() < 0.5
    # exp(-x), not 1 / exp(x): the gradient of 1 / e is -1 / e^2, whose e^2 underflows in half (inf at x = -7.25)
    return small.where(_series(small.where(x, 0.0), _SINH), (x.exp() - (-x).exp()) * 0.5)
  def cosh(self: Tensor) -> Tensor:
    """Hyperbolic cosine."""
    # 1 + 2 sinh(x/2)^2: its gradient, sinh, then comes from sinh's accurate small-x form, not a difference of exps
    return 1 + 2 * (self._f() * 0.5).sinh().square()
  def asinh(self: Tensor) -> Tensor:
    """Inverse hyperbolic sine: log1p(a + a^2 / (1 + sqrt(1 + a^2))) for a = |x|, odd; log(2a) for large a."""
    def pos(a: Tensor) -> Tensor:
      big = a > _big(a)
      s = big.where(1.0, a)  # a^2 overflows for large a (NaN from inf / inf): those take log(2a)
      return big.where(big.where(a, 1.0).log() + math.log(2), _log1p(s + s * s / (1 + (s * s + 1).sqrt())))
    return _odd(self._f(), pos)
  def acosh(self: Tensor) -> Tensor:
    """Inverse hyperbolic cosine: log(x + sqrt(x^2 - 1)), log(2x) for large x, NaN below 1."""
    x = self._f()
    big = x > _big(x)
    # x^2 overflows for large x: those take log(2x). sqrt(x - 1) sqrt(x + 1) is exact near 1 and its gradient at 1 is
    # inf (as PyTorch's); sqrt((x - 1)(x + 1))'s is 0 * inf there
    s = big.where(1.0, x)
    # log1p of (x - 1) + ..., x - 1 being exact: log(x + ...) lost digits near 1, where the result is small
    y = big.where(big.where(x, 1.0).log() + math.log(2), _log1p((s - 1) + (s - 1).sqrt() * (s + 1).sqrt()))
    # below -1 the square root exists and x + sqrt(x^2 - 1) cancels toward 0 (-inf, not NaN): NaN by hand
    return x._custom_grad("acosh", (x < 1).where(math.nan, y))
  def atanh(self: Tensor) -> Tensor:
    """Inverse hyperbolic tangent (+-inf at +-1, NaN outside): (log1p(x) - log1p(-x)) / 2, whose gradient is
    1 / (1 - x^2) everywhere, as PyTorch's (inf at +-1; a log1p(2x / (1 - x)) form gave NaN there)."""
    x = self._f()
    return 0.5 * (_log1p(x) - _log1p(-x))
  def copysign(self: Tensor, other: Any) -> Tensor:
    """|self| with the sign of `other` (a negative zero counts as negative, as in PyTorch).

    >>> Tensor([1.0, -2.0]).copysign(Tensor([-0.0, 3.0])).tolist()
    [-1.0, 2.0]
    """
    x = self._f()
    o = other if isinstance(other, type(self)) else x._const_like(float(other))
    neg = (o < 0) | ((o == 0) & (1 / o._f() < 0)) if dtypes.is_float(o.dtype) else o < 0
    return neg.where(-x.abs(), x.abs())
  def logaddexp(self: Tensor, other: Any) -> Tensor:
    """log(exp(self) + exp(other)) without overflow.

    >>> round(Tensor([1000.0]).logaddexp(1000.0).item(), 3)
    1000.693
    """
    x = self._f()
    o = other if isinstance(other, type(self)) else x._const_like(float(other))
    m = x.maximum(o)
    m = m.isinf().where(0.0, m).detach()  # both -inf (or an inf): shifting by it would give inf - inf
    return ((x - m).exp() + (o - m).exp()).log() + m
  def isclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|self - other| <= atol + rtol * |other|, elementwise; equal values (infs too) are close, NaNs only with
    equal_nan.

    >>> Tensor([1.0, 1.1, float("inf")]).isclose(Tensor([1.0 + 1e-9, 1.0, float("inf")])).tolist()
    [True, False, True]
    """
    x = self
    o = other if isinstance(other, type(self)) else self._const_like(other, dtypes.from_py(other))
    # ints and bools are compared in the default float, as PyTorch does for bools: |x - o| in an int dtype wraps
    # (int8 0 - -128 is -128, "close" to everything)
    if not dtypes.is_float(x.dtype) or not dtypes.is_float(o.dtype): x, o = x._f(), o._f()
    close = (x == o) | (x.isfinite() & o.isfinite() & ((x - o).abs() <= atol + rtol * o.abs()))
    return close | (x.isnan() & o.isnan()) if equal_nan else close
  def allclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """Whether every element isclose (a one-element bool Tensor, as in tinygrad)."""
    return self.isclose(other, rtol, atol, equal_nan).all()

def _odd(x: Tensor, pos: Any) -> Tensor:
  """An odd function from its values on x >= 0. By where(), not sign() and abs(): their gradients vanish at 0, where
  an odd function's slope usually doesn't."""
  neg = x < 0
  y = pos(neg.where(-x, x))
  return neg.where(-y, y)

def _big(x: Tensor) -> float:
  """Past this, asinh(x) and acosh(x) are log(2x) to the dtype's precision (the error is about 1 / (4x^2)), while x^2
  still fits: 2^(mantissa bits / 2 + 1)."""
  return 2.0 ** (dtypes.finfo(x.dtype)[1] // 2 + 1)

def _asin_poly(s: Tensor, z: Tensor) -> Tensor:
  acc = s._const_like(_ASIN_P[-1])
  for c in reversed(_ASIN_P[:-1]): acc = acc * z + c
  return s * z * acc
