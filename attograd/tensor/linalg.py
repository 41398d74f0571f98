"""Matrix factorizations written in Tensor ops: QR by Householder reflections, SVD by one-sided Jacobi rotations, and
the Newton-Schulz orthogonalization. They loop in Python a fixed number of times (no values are read back to decide
when to stop); QR and SVD are meant for small matrices."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING
from attograd.dtype import DType, dtypes, sum_acc_dtype

if TYPE_CHECKING: from attograd.tensor.core import Tensor

def _jacobi_sweeps(n: int) -> int:
  """Sweeps over all column pairs: one-sided Jacobi converges quadratically once the columns are nearly orthogonal,
  after about log2(n) sweeps (measured in float64 on random matrices: 5 sweeps reach 1e-15 for 8x8, 8 reach 3e-14
  for 24x24, where 5 leave 3e-6)."""
  return max(6, math.ceil(math.log2(n)) + 3)

class LinalgMixin:
  def qr(self: Tensor) -> tuple[Tensor, Tensor]:
    """Q (..., m, m) orthogonal and R (..., m, n) upper triangular with Q @ R = A for the last two dims, as
    numpy.linalg.qr(mode="complete"), with LAPACK's signs (R's diagonal is negative where the column had values
    below the diagonal and a non-negative diagonal element). Ints are computed in the default float.

    >>> Q, R = Tensor([[3.0, 1.0], [4.0, 2.0]]).qr()
    >>> [[round(v, 4) for v in row] for row in R.tolist()]
    [[-5.0, -2.2], [0.0, 0.4]]
    """
    a, out_dtype = _matrix_input(self, "qr")
    lead, (m, n) = a.shape[:-2], a.shape[-2:]
    R = a
    Q = type(self).eye(m, dtype=a.dtype, device=a.device).expand(lead + (m, m))
    rows = type(self).arange(m, device=a.device, dtype=dtypes.int32)
    keep = [None] * len(lead)
    # LAPACK reflects min(m - 1, n) columns: the last row of a square matrix needs none
    for i in range(min(m - 1, n)):
      col = R.shrink(tuple(keep + [None, (i, i + 1)])).reshape(lead + (m,))   # (..., m)
      x0 = col.shrink(tuple(keep + [(i, i + 1)]))                              # (..., 1)
      below = (rows > i).where(col, 0.0)
      below_sq = below.square().sum(-1, keepdim=True)
      norm = (below_sq + x0.square()).sqrt()
      # v = x + sign(x0) |x| e_i reflects x onto -sign(x0) |x| e_i; the reflection is I - 2 v v^T / (v^T v)
      v = below + (rows == i).where(x0 + (x0 < 0).where(-norm, norm), 0.0)
      vv = v.square().sum(-1, keepdim=True)
      # nothing below the diagonal: no reflection (LAPACK's tau = 0), so the diagonal keeps its sign
      scale = (below_sq > 0).where(2.0 / (vv > 0).where(vv, 1.0), 0.0)
      w = v.unsqueeze(-1)                                                       # (..., m, 1)
      # each step in a buffer of its own, shared by equal graphs (UOp.qr builds Tensor.qr's node for node)
      R = (R - (w * scale.unsqueeze(-1)) @ (w.transpose(-2, -1) @ R))._in_buffer()
      Q = (Q - (Q @ w) @ (w * scale.unsqueeze(-1)).transpose(-2, -1))._in_buffer()
    return Q.cast(out_dtype), R.triu().cast(out_dtype)

  def svd(self: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """(U, S, Vh) with A = U @ diag(S) @ Vh for the last two dims and S descending, as numpy.linalg.svd; singular
    vectors are unique only up to sign. U is (..., m, m) or, without full_matrices, (..., m, k) with k = min(m, n);
    its columns are orthonormal also where singular values are zero.

    >>> U, S, Vh = Tensor([[3.0, 0.0], [0.0, -4.0]]).svd()
    >>> [round(v, 4) for v in S.tolist()]
    [4.0, 3.0]
    """
    a, out_dtype = _matrix_input(self, "svd")
    lead, (m, n) = a.shape[:-2], a.shape[-2:]
    if m < n:
      # A^T = V S U^T
      V, S, Uh = a.transpose(-2, -1).svd(full_matrices)
      return Uh.transpose(-2, -1).cast(out_dtype), S.cast(out_dtype), V.transpose(-2, -1).cast(out_dtype)
    keep = [None] * len(lead)
    # A = Q R; the SVD of R's top n x n block R_n = W V^T (W's columns orthogonal) gives A = (Q_n W/S) S V^T
    Q, R = a.qr()
    Rn = R.shrink(tuple(keep + [(0, n), None]))
    X = Rn.cat(type(self).eye(n, dtype=a.dtype, device=a.device).expand(lead + (n, n)), dim=-2)  # (..., 2n, n)
    for _ in range(_jacobi_sweeps(n) if n > 1 else 0):
      for pairs in _round_robin(n): X = _jacobi_round(X, pairs, n)
    W, V = X.shrink(tuple(keep + [(0, n), None])), X.shrink(tuple(keep + [(n, 2 * n), None]))
    S, order = W.square().sum(-2).sqrt().sort(-1, descending=True)
    order = order.unsqueeze(-2).expand(lead + (n, n))
    W, V = W.gather(-1, order), V.gather(-1, order)
    # W's columns over S are orthonormal, except for zero singular values, where they are zero. A QR of them (whose Q
    # is orthogonal whatever the rank) keeps the others up to sign (R's diagonal) and fills those in orthonormally
    Qw, Rw = (W / (S > 0).where(S, 1.0).unsqueeze(-2)).qr()
    Un = Qw * (Rw.diagonal(0, -2, -1) < 0).where(-1.0, 1.0).unsqueeze(-2)
    Un = Q.shrink(tuple(keep + [None, (0, n)])) @ Un
    U = Un.cat(Q.shrink(tuple(keep + [None, (n, m)])), dim=-1) if full_matrices and m > n else Un
    return U.cast(out_dtype), S.cast(out_dtype), V.transpose(-2, -1).cast(out_dtype)

  def newton_schulz(self: Tensor, steps: int, params: tuple[float, ...], eps: float = 1.0e-7) -> Tensor:
    """An odd-polynomial Newton-Schulz iteration toward the orthogonal polar factor U @ Vh of the last two dims (the
    Muon optimizer's orthogonalization): X is divided by its Frobenius norm (+ eps), then each step maps X to
    params[0] X + params[1] (X X^T) X + params[2] (X X^T)^2 X + ... Coefficients that map singular values in (0, 1]
    toward 1, such as (2, -1.5, 0.5), converge to U @ Vh.

    >>> x = Tensor([[2.0, 0.0], [0.0, 0.5]]).newton_schulz(steps=20, params=(2, -1.5, 0.5))
    >>> [[round(v, 3) for v in row] for row in x.tolist()]
    [[1.0, 0.0], [0.0, 1.0]]
    """
    if self.ndim < 2: raise ValueError(f"newton_schulz: needs a matrix (at least 2 dims), got shape {self.shape}")
    if not params: raise ValueError("newton_schulz: needs at least one polynomial coefficient in params")
    # a wide matrix keeps the Gram matrix X X^T small; a tall one is done as its transpose
    if self.shape[-2] > self.shape[-1]:
      return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
    x = self / (self.square().sum((-2, -1), keepdim=True).sqrt() + eps)
    for _ in range(steps):
      gram = x @ x.transpose(-2, -1)
      term, out = x, x * params[0]
      for p in params[1:]:
        term = gram @ term
        out = out + term * p
      x = out
    return x

def _matrix_input(x: Tensor, op: str) -> tuple[Tensor, DType]:
  """The tensor in the dtype to compute in (float32 for half and bfloat16, the default float for ints) and the dtype
  to return."""
  if x.ndim < 2: raise ValueError(f"{op}: needs a matrix (at least 2 dims), got shape {x.shape}")
  if x.dtype is dtypes.bool: raise TypeError(f"{op}: needs a numeric tensor, got {x.dtype}")
  f = x._f()
  return f.cast(sum_acc_dtype(f.dtype)), f.dtype

def _round_robin(n: int) -> list[list[tuple[int, int]]]:
  """Rounds of disjoint column pairs that together pair every two columns once (the circle method)."""
  players = list(range(n + n % 2))  # an odd n gets a dummy player n: its partner sits the round out
  rounds = []
  for _ in range(len(players) - 1):
    half = len(players) // 2
    pairs = [(min(a, b), max(a, b)) for a, b in zip(players[:half], reversed(players[half:]))]
    rounds.append([p for p in pairs if p[1] < n])
    players = [players[0], players[-1]] + players[1:-1]
  return rounds

def _jacobi_round(X: Tensor, pairs: list[tuple[int, int]], n: int) -> Tensor:
  """Rotate each pair (p, q) of X's columns so that columns p and q of its top half (W) become orthogonal; the
  bottom half (V) turns along. The pairs are disjoint, so all rotations are one step: X @ (I + D)."""
  # the columns of the identity that pick each pair's p and q: constants, not buffers made per round, so equal inputs
  # build one graph (UOp.svd is Tensor.svd node for node) and no round uploads anything
  eye = type(X).eye(n, dtype=X.dtype, device=X.device)
  sel_p, sel_q = (eye.shrink((None, (ps[0], ps[0] + 1))).cat(*(eye.shrink((None, (p, p + 1))) for p in ps[1:]), dim=1)
                  for ps in ([p for p, _ in pairs], [q for _, q in pairs]))
  W = X.shrink(tuple([None] * (X.ndim - 2) + [(0, n), None]))
  Wp, Wq = W @ sel_p, W @ sel_q                                           # (..., n, h)
  alpha, beta, gamma = Wp.square().sum(-2), Wq.square().sum(-2), (Wp * Wq).sum(-2)
  # t = tan(theta) is the smaller root of t^2 + 2 zeta t - 1 = 0, which zeroes the pair's inner product
  rot = gamma != 0
  zeta = (beta - alpha) / (2 * rot.where(gamma, 1.0))
  t = (zeta < 0).where(-1.0, 1.0) / (zeta.abs() + (1 + zeta.square()).sqrt())
  t = rot.where(t, 0.0)
  c = 1 / (1 + t.square()).sqrt()
  s = c * t
  # D = (c - 1)(e_p e_p^T + e_q e_q^T) + s (e_p e_q^T - e_q e_p^T): with I + D, column p -> c p - s q, q -> s p + c q
  cm, ss = (c - 1).unsqueeze(-2), s.unsqueeze(-2)                         # (..., 1, h)
  sp_t, sq_t = sel_p.transpose(0, 1), sel_q.transpose(0, 1)
  D = (sel_p * cm) @ sp_t + (sel_q * cm) @ sq_t + (sel_p * ss) @ sq_t - (sel_q * ss) @ sp_t
  return (X + X @ D)._in_buffer()
