"""The op table: one row per public Tensor op (or variant of one), stating its PyTorch reference, the dtypes it accepts,
the values it is tested on, its tolerances and whether it has a gradient. test_op_table.py runs every row on every
dtype and device; `python test/backend/optable.py` prints the table's size.

A row is `R(name, inputs, torch_fn, att_fn, dtypes, domain, tol, grad, op=)`:
  name     unique test id; `op` (default: name up to the first '.') is the Tensor method the row covers
  inputs   a key of INPUTS: how many inputs of what shape (edge values, all pairs, a conv's image and weight, ...)
  torch_fn the reference, on torch tensors; att_fn the same on attograd Tensors (SAME: the torch_fn works on both)
  dtypes   the dtypes the op accepts; any other dtype of DTYPES must raise a Python error
  domain   the values the inputs take (a key of DOMAINS, or one per input joined by ',')
  tol      a factor on the dtype's tolerance (TOL)
  grad     whether float dtypes are also checked backward (the gradient of sum(out * w) for a fixed random w)
"""
from __future__ import annotations
import math, sys
from typing import Any, Callable, NamedTuple
import numpy as np

try:
  import torch
  F = torch.nn.functional
except ImportError:  # the coverage test and the size report need no torch; the value tests skip without it
  torch, F = None, None  # type: ignore[assignment]

# ***** dtypes: the one list. fp8 goes here (and in TORCH_NAME, TOL, FLOATS) when attograd has it *****

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64"]
FLOATS = ("float16", "bfloat16", "float32", "float64")
SINTS = ("int8", "int16", "int32", "int64")
UINTS = ("uint8", "uint16", "uint32", "uint64")
INTS = SINTS + UINTS
# dtype groups for the `dtypes` column
A = tuple(DTYPES)                  # everything
N = INTS + FLOATS                  # numbers: no bool
IB = ("bool",) + INTS              # bitwise: no floats
I, Fl, B = INTS, FLOATS, ("bool",)
SF = SINTS + FLOATS                # signed numbers

def but(group: tuple[str, ...], drop: str) -> tuple[str, ...]:
  """`group` without the dtypes named in `drop` (space-separated): those land in the rejection test."""
  return tuple(d for d in group if d not in drop.split())

# the torch dtype each of ours is computed in. torch's uint16/32/64 are "shell" dtypes (most ops missing): where an op
# is missing the reference runs in int64, whose arithmetic wraps the same way modulo 2^bits, and the result is cast back
# (uint64 inputs stay < 2^63 so their order survives the trip)
TORCH_NAME = {d: d for d in DTYPES}

# (atol, rtol) per float dtype: about 8 ulp at 1.0 for float32/float64 results of a few rounded steps; half and bf16
# have 11 and 8 bits of mantissa. A row's `tol` multiplies both. Ints and bools are compared exactly.
TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (1e-6, 1e-5), "float64": (1e-9, 1e-8)}

# ***** values *****

def _float_edges(dt: str) -> list[float]:
  mant, emax = {"float16": (10, 15), "bfloat16": (7, 127), "float32": (23, 127), "float64": (52, 1023)}[dt]
  big = (2 - 2.0 ** -mant) * 2.0 ** emax
  tiny, sub = 2.0 ** (1 - emax), 2.0 ** (1 - emax - mant)
  return [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.0, 3.75, -7.25, 100.0, -100.0, tiny, sub, -sub, big, -big,
          math.inf, -math.inf, math.nan]

def _int_edges(dt: str) -> list[int]:
  bits = int(dt.lstrip("uint")) if dt != "bool" else 1
  if dt.startswith("u"):
    hi = 2 ** bits - 1 if dt != "uint64" else 2 ** 63 - 1
    return [0, 1, 2, 3, 7, 100, hi, hi - 1, hi // 2, hi // 2 + 1]
  lo, hi = -2 ** (bits - 1), 2 ** (bits - 1) - 1
  return [0, 1, -1, 2, -2, 3, 7, -8, 100, lo, lo + 1, hi, hi - 1]

# domain -> (keep this edge value?, random range for the rest). Ranges are clipped to what the dtype can hold.
DOMAINS: dict[str, tuple[Callable[[float], bool], tuple[float, float]]] = {
  "any": (lambda v: True, (-3, 3)),                                # every edge value: 0, -0, inf, nan, max, ...
  "fin": (lambda v: math.isfinite(v), (-3, 3)),                    # no inf or nan
  "mod": (lambda v: math.isfinite(v) and abs(v) <= 100, (-3, 3)),  # no extremes (transcendental range reduction)
  "small": (lambda v: math.isfinite(v) and abs(v) <= 8, (-3, 3)),  # exp and friends stay finite in half
  "pos": (lambda v: v > 0, (0.1, 4)),                              # logs and roots of positive values
  "prob": (lambda v: 0 < v < 1, (0.02, 0.98)),                     # probabilities
  # divisors: int division by zero is an error in torch, and INT_MIN // -1 traps (SIGFPE) in torch and in C: the
  # fix for that is issue 13's; until then -1 stays out of the divisors
  "nz": (lambda v: v != 0 and v != -1, (-3, 3)),
  "cls": (lambda v: 0 <= v < 4 and v == int(v), (0, 4)),           # class ids and small counts
  "shift": (lambda v: 0 <= v < 8 and v == int(v), (0, 8)),         # shift amounts below every int's width
  # backward inputs: finite and moderate (0 and -0 stay in: kinks are part of the contract)
  "grad": (lambda v: math.isfinite(v) and abs(v) <= 10 and (v == 0 or abs(v) >= 1e-3), (-3, 3)),
  "gradnz": (lambda v: math.isfinite(v) and 1e-3 <= abs(v) <= 10 and v != -1, (-3, 3)),
  "gradpos": (lambda v: math.isfinite(v) and 1e-3 <= v <= 10, (0.1, 4)),
  # every edge value forward; backward above -1 only: below it acosh is NaN, yet torch's gradient is its formula's
  "acosh": (lambda v: True, (-3, 3)),
  "gradacosh": (lambda v: math.isfinite(v) and -1 < v <= 10 and (v == 0 or abs(v) >= 1e-3), (-1, 4)),
}
# the domain a backward check draws from, for a forward domain with extremes
GRAD_DOMAIN = {"any": "grad", "fin": "grad", "mod": "grad", "nz": "gradnz", "pos": "gradpos", "acosh": "gradacosh"}

def dtype_range(dt: str) -> tuple[float, float]:
  if dt == "bool": return (0, 1)
  if dt in FLOATS: return (-math.inf, math.inf)
  e = _int_edges(dt)
  return (min(e), max(e))

def values(dt: str, domain: str, n: int, rng: np.random.Generator) -> np.ndarray:
  """n values of dtype `dt` (float32 holding bf16 values for bfloat16): the domain's edge values, then random ones."""
  keep, (lo, hi) = DOMAINS[domain]
  if dt == "bool":
    e = [v for v in (False, True) if keep(v)] or [False, True]
    return np.array(e + list(rng.random(max(n - len(e), 0)) < 0.5), dtype=bool)[:n]
  dlo, dhi = dtype_range(dt)
  edges = [v for v in (_float_edges(dt) if dt in FLOATS else _int_edges(dt)) if keep(v)]
  lo, hi = max(lo, dlo), min(hi, dhi)
  if dt in FLOATS: fill = list(rng.uniform(lo, hi, n))
  elif math.ceil(lo) <= math.floor(hi): fill = list(rng.integers(math.ceil(lo), math.floor(hi) + 1, n))
  else: fill = []
  # a domain a dtype can't meet (probabilities of an int, for the rejection test) still gives values
  fill = [v for v in fill if keep(v)] or edges or [1]
  vals = (edges + fill * (n // len(fill) + 1))[:n]
  return np.array(vals, dtype=np_dtype(dt)) if dt != "bfloat16" else round_bf16(np.array(vals, dtype=np.float32))

def np_dtype(dt: str) -> Any: return np.float32 if dt == "bfloat16" else np.dtype(dt)

def round_bf16(x: np.ndarray) -> np.ndarray:
  """Round float32 values to the nearest bfloat16 (ties to even), kept as float32."""
  u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
  r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32)
  r = np.where(np.isnan(x), np.uint32(0x7FC00000), r)
  return r.view(np.float32)

# ***** inputs: a kind is a function (dtype, domains, rng) -> list of Arg *****

class Arg(NamedTuple):
  value: np.ndarray
  role: str  # "data": the test dtype, gets a gradient; "const": the test dtype, no gradient; "aux": its own dtype

def _shuffled(x: np.ndarray, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
  # non-finite values away from row 0, so a reduce along the last axis has one clean row
  flat = x.reshape(-1)
  fin = np.isfinite(flat.astype(np.float64)) if flat.dtype != bool else np.ones(flat.shape, bool)
  out = np.concatenate([rng.permutation(flat[fin]), flat[~fin]])
  return out.reshape(shape)

def _dom(domains: tuple[str, ...], i: int) -> str: return domains[min(i, len(domains) - 1)]

def k_x(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """One (5, 8) input holding every edge value of the domain."""
  return [Arg(_shuffled(values(dt, d[0], 40, rng), (5, 8), rng), "data")]

def k_xy(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """Two (24, 24) inputs: every pair of 24 values (the edge values first)."""
  a, b = values(dt, _dom(d, 0), 24, rng), values(dt, _dom(d, 1), 24, rng)
  return [Arg(np.repeat(a[:, None], 24, 1), "data"), Arg(np.repeat(b[None, :], 24, 0), "data")]

def k_cxy(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """A bool condition and two (24, 24) inputs of every pair."""
  return [Arg(rng.random((24, 24)) < 0.5, "aux")] + k_xy(dt, d, rng)

def k_xyw(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """Every pair of values, and a third input of the same values shuffled (lerp's weight)."""
  x, y = k_xy(dt, d, rng)
  return [x, y, Arg(rng.permutation(y.value.reshape(-1)).reshape(24, 24), "data")]

def _rand(shape: tuple[int, ...], dt: str, domain: str, rng: np.random.Generator, role: str = "data") -> Arg:
  n = int(np.prod(shape))
  return Arg(rng.permutation(values(dt, domain, n, rng)).reshape(shape), role)

def k_mm(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  return [_rand((3, 5), dt, _dom(d, 0), rng), _rand((5, 4), dt, _dom(d, 1), rng)]

def k_bmm(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  return [_rand((2, 3, 5), dt, _dom(d, 0), rng), _rand((5, 4), dt, _dom(d, 1), rng)]

def k_vec(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  return [_rand((6,), dt, _dom(d, 0), rng), _rand((6,), dt, _dom(d, 1), rng)]

def k_conv(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """An image (2, 4, 6, 5), a weight (6, 2, 3, 3) for groups=2 and a bias (6,)."""
  return [_rand((2, 4, 6, 5), dt, d[0], rng), _rand((6, 2, 3, 3), dt, d[0], rng), _rand((6,), dt, d[0], rng)]

def k_convt(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """An image (2, 4, 4, 3) and a transposed conv's weight (4, 3, 3, 2) for groups=1."""
  return [_rand((2, 4, 4, 3), dt, d[0], rng), _rand((4, 3, 3, 2), dt, d[0], rng), _rand((3,), dt, d[0], rng)]

def k_img(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  return [_rand((2, 3, 7, 6), dt, d[0], rng)]

def k_seq(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  return [_rand((2, 3, 8), dt, d[0], rng)]

def k_gather(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  return [_rand((4, 5), dt, d[0], rng), Arg(rng.integers(0, 5, (4, 3)).astype(np.int64), "aux")]

def k_scatter(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  # distinct indices per column: with repeats the write order would decide the result
  idx = np.stack([rng.permutation(4)[:2] for _ in range(5)], 1).astype(np.int64)
  return [_rand((4, 5), dt, d[0], rng), Arg(idx, "aux"), _rand((2, 5), dt, d[0], rng)]

def k_scatter_red(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """x (4, 5), indices (3, 5) into 4 rows with repeats (a reduce combines them) and one row sent nothing, src (3, 5)."""
  idx = np.array([[0, 2, 2, 1, 0], [2, 2, 0, 1, 0], [0, 1, 2, 2, 2]], np.int64)
  return [_rand((4, 5), dt, d[0], rng), Arg(idx, "aux"), _rand((3, 5), dt, d[0], rng)]

def k_mat(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """A batch of two square (3, 3) matrices and one tall (4, 3) matrix of random values (factorizations), 7 added to
  the diagonal: a rank-deficient matrix's Q and singular vectors are not unique (roundoff picks them)."""
  lo, hi = (0, 2) if dt in UINTS or dt == "bool" else (-3, 3)
  def mat(shape: tuple[int, ...]) -> Arg:
    v = rng.uniform(lo, hi, shape) if dt in FLOATS else rng.integers(lo, hi + 1, shape)
    v = v + 7 * np.eye(shape[-2], shape[-1], dtype=v.dtype)
    a = np.array(v, dtype=np_dtype(dt)) if dt != "bfloat16" else round_bf16(np.array(v, dtype=np.float32))
    return Arg(a, "data")
  return [mat((2, 3, 3)), mat((4, 3))]

def k_mask(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  return [_rand((4, 5), dt, d[0], rng), Arg(rng.random((4, 5)) < 0.5, "aux")]

def k_logits(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """Logits (5, 4) and class ids (5,)."""
  return [_rand((5, 4), dt, d[0], rng), Arg(np.array([0, 3, 1, 1, 2], np.int64), "aux")]

def k_logits_w(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """Log-probabilities (5, 4), class ids (5,) and class weights (4,)."""
  return k_logits(dt, d, rng) + [_rand((4,), dt, "pos", rng, "const")]

def k_pair(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """A prediction and a target of the same shape (5, 4); the target gets no gradient (torch has none for some)."""
  return [_rand((5, 4), dt, _dom(d, 0), rng), _rand((5, 4), dt, _dom(d, 1), rng, "const")]

def k_attn(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  return [_rand((2, 3, 4), dt, d[0], rng), _rand((2, 5, 4), dt, d[0], rng), _rand((2, 5, 4), dt, d[0], rng)]

def k_bn(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """x (2, 3, 4), weight, bias, mean (3,) and a positive invstd (3,)."""
  return [_rand((2, 3, 4), dt, d[0], rng)] + [_rand((3,), dt, d[0], rng) for _ in range(3)] + [_rand((3,), dt, "pos",
    rng)]

def k_like(dt: str, d: tuple[str, ...], rng: np.random.Generator) -> list[Arg]:
  """A (2, 3) tensor whose dtype (and for *_like its shape) the creation op takes."""
  return [_rand((2, 3), dt, d[0], rng, "const")]

INPUTS: dict[str, Callable[[str, tuple[str, ...], np.random.Generator], list[Arg]]] = {
  "x": k_x, "xy": k_xy, "cxy": k_cxy, "xyw": k_xyw, "mm": k_mm, "bmm": k_bmm, "vec": k_vec, "conv": k_conv,
  "convt": k_convt, "img": k_img, "seq": k_seq, "gather": k_gather, "scatter": k_scatter, "scatter_red": k_scatter_red,
  "mat": k_mat, "mask": k_mask,
  "logits": k_logits, "logits_w": k_logits_w, "pair": k_pair, "attn": k_attn, "bn": k_bn, "like": k_like}

# ***** rows *****

SAME = None  # att_fn: the torch_fn's code works on attograd Tensors too

class Row(NamedTuple):
  name: str
  inputs: str
  torch_fn: Callable[..., Any]
  att_fn: Callable[..., Any] | None
  dtypes: tuple[str, ...]
  domain: str
  tol: float
  grad: bool
  op: str

  @property
  def domains(self) -> tuple[str, ...]: return tuple(self.domain.split(","))
  def att(self) -> Callable[..., Any]: return self.att_fn if self.att_fn is not None else self.torch_fn

def R(name: str, inputs: str, torch_fn: Callable[..., Any], att_fn: Callable[..., Any] | None, dtypes: tuple[str, ...],
      domain: str = "any", tol: float = 1.0, grad: bool = False, op: str | None = None) -> Row:
  return Row(name, inputs, torch_fn, att_fn, dtypes, domain, tol, grad, op or name.split(".")[0])

def _tsort(x: Any, dim: int = -1, descending: bool = False) -> Any:
  """torch.sort, stable (attograd's sort is stable, so equal values keep their order)."""
  return torch.sort(x, dim=dim, descending=descending, stable=True)

def _ttopk(x: Any, k: int, dim: int = -1, largest: bool = True) -> Any:
  v, i = _tsort(x, dim, largest)
  return v.narrow(dim, 0, k), i.narrow(dim, 0, k)

def _tpad(x: Any, pad: tuple[int, ...], mode: str = "constant", value: float = 0.0) -> Any:
  return F.pad(x, pad, mode=mode, value=value) if mode == "constant" else F.pad(x, pad, mode=mode)

def _tbitcast(x: Any) -> Any:
  """x's bytes read as the other dtype of its size (torch.view(dtype)); bool has no partner."""
  return x.view({1: torch.uint8 if x.dtype != torch.uint8 else torch.int8, 2: torch.int16 if x.dtype != torch.int16
                 else torch.float16, 4: torch.int32 if x.dtype != torch.int32 else torch.float32,
                 8: torch.int64 if x.dtype != torch.int64 else torch.float64}[x.element_size()])

def _abitcast(x: Any) -> Any:
  from attograd import dtypes
  d = {1: dtypes.uint8 if x.dtype != dtypes.uint8 else dtypes.int8, 2: dtypes.int16 if x.dtype != dtypes.int16
       else dtypes.float16, 4: dtypes.int32 if x.dtype != dtypes.int32 else dtypes.float32,
       8: dtypes.int64 if x.dtype != dtypes.int64 else dtypes.float64}[x.dtype.itemsize]
  return x.bitcast(d)

def _tdt(x: Any) -> Any: return x.dtype  # the dtype to create with: the input's (torch's or attograd's)
def _scatter_ref(x: Any, idx: Any, src: Any, reduce: str | None = None) -> Any:
  if reduce is None: return x.scatter(0, idx, src)
  return x.scatter_reduce(0, idx, src, {"add": "sum", "multiply": "prod"}[reduce])
def _tgetitem(x: Any) -> Any: return x[1:].flip(1)[:, ::3]  # torch has no negative steps
def _tgetitem_fancy(x: Any) -> Any: return x[torch.tensor([3, 0, 3]), 1:6:2]
def _agetitem_fancy(x: Any) -> Any:
  from attograd import Tensor
  return x[Tensor([3, 0, 3]), 1:6:2]

def _tmeshgrid(a: Any, b: Any) -> Any: return torch.meshgrid(a, b[:4], indexing="xy")
def _ameshgrid(a: Any, b: Any) -> Any: return a.meshgrid(b[:4], indexing="xy")
def _tunpool(x: Any) -> Any:
  if x.is_floating_point(): return F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2)
  # torch pools and unpools no ints: the indices of a float64 copy, the values read from x at them (exact)
  i = F.max_pool2d(x.double(), 2, return_indices=True)[1].flatten(-2)
  v = x.flatten(-2).gather(-1, i)
  return torch.zeros_like(x[..., :6, :]).flatten(-2).scatter(-1, i, v).reshape(x.shape[:-2] + (6, 6))
def _aunpool(x: Any) -> Any:
  v, i = x.max_pool2d(2, return_indices=True)
  return v.max_unpool2d(i, 2)
def _tscatter_red(reduce: str, include_self: bool = True) -> Callable[..., Any]:
  return lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self)
def _tallclose(a: Any, b: Any, equal_nan: bool) -> Any: return torch.tensor(torch.allclose(a, b, equal_nan=equal_nan))
def _svd_parts(U: Any, S: Any, Vh: Any) -> Any:
  """S and U S Vh (the input again): U's and Vh's columns are unique only up to sign, their product is not."""
  return S, (U[..., :, :S.shape[-1]] * S.unsqueeze(-2)) @ Vh
def _tsvd(a: Any, b: Any) -> Any:
  return _svd_parts(*torch.linalg.svd(b, full_matrices=False)) + (torch.linalg.svdvals(a),)
def _asvd(a: Any, b: Any) -> Any: return _svd_parts(*b.svd(full_matrices=False)) + (a.svd()[1],)
def _newton_schulz(x: Any) -> Any:
  """Three steps of the (2, -1.5, 0.5) Newton-Schulz iteration in plain tensor ops: works on torch and attograd."""
  x = x / (x.square().sum((-2, -1), keepdim=True).sqrt() + 1e-7)
  for _ in range(3):
    gram = x @ x.transpose(-2, -1)
    x = x * 2 + (gram @ x) * -1.5 + (gram @ (gram @ x)) * 0.5
  return x

ROWS: list[Row] = [
  # ----- elementwise unary -----
  R("neg", "x", lambda x: -x, SAME, but(A, "bool"), grad=True),
  R("abs", "x", lambda x: x.abs(), SAME, but(A, "bool"), grad=True),
  R("sign", "x", lambda x: x.sign(), SAME, A, grad=True),
  R("exp", "x", lambda x: x.exp(), SAME, A, grad=True),
  R("exp2", "x", lambda x: x.exp2(), SAME, A, grad=True),
  R("expm1", "x", lambda x: x.expm1(), SAME, A, grad=True),
  R("log", "x", lambda x: x.log(), SAME, A, grad=True),
  R("log2", "x", lambda x: x.log2(), SAME, A, grad=True),
  R("log10", "x", lambda x: x.log10(), SAME, A, grad=True),
  R("log1p", "x", lambda x: x.log1p(), SAME, A, grad=True),
  R("sqrt", "x", lambda x: x.sqrt(), SAME, A, grad=True),
  R("rsqrt", "x", lambda x: x.rsqrt(), SAME, A, grad=True),
  R("reciprocal", "x", lambda x: x.reciprocal(), SAME, A, grad=True),
  R("sin", "x", lambda x: x.sin(), SAME, A, "mod", grad=True),
  R("cos", "x", lambda x: x.cos(), SAME, A, "mod", grad=True),
  R("tan", "x", lambda x: x.tan(), SAME, A, "mod", 4, grad=True),
  R("tanh", "x", lambda x: x.tanh(), SAME, A, grad=True),
  R("sigmoid", "x", lambda x: x.sigmoid(), SAME, A, grad=True),
  R("relu", "x", lambda x: x.relu(), SAME, but(A, "bool"), grad=True),
  R("floor", "x", lambda x: x.floor(), SAME, but(A, "bool"), grad=True),
  R("ceil", "x", lambda x: x.ceil(), SAME, but(A, "bool"), grad=True),
  R("trunc", "x", lambda x: x.trunc(), SAME, but(A, "bool"), grad=True),
  R("round", "x", lambda x: x.round(), SAME, but(A, "bool"), grad=True),
  R("square", "x", lambda x: x.square(), SAME, but(A, "bool"), grad=True),
  R("isnan", "x", lambda x: x.isnan(), SAME, A),
  R("isinf", "x", lambda x: x.isinf(), SAME, A),
  R("isfinite", "x", lambda x: x.isfinite(), SAME, A),
  R("logical_not", "x", lambda x: x.logical_not(), SAME, A),
  R("bitwise_not", "x", lambda x: ~x, lambda x: x.bitwise_not(), IB),
  R("clip", "x", lambda x: x.clip(-1.5, 2), SAME, A, grad=True),
  R("clip.min_only", "x", lambda x: x.clip(0.5, None), SAME, A, grad=True),
  R("clamp", "x", lambda x: x.clamp(1, 5), SAME, A, grad=True),
  R("relu6", "x", F and F.relu6, lambda x: x.relu6(), A, grad=True),
  R("leaky_relu", "x", lambda x: F.leaky_relu(x, 0.1), lambda x: x.leaky_relu(0.1), A, grad=True),
  R("elu", "x", lambda x: F.elu(x, 0.7), lambda x: x.elu(0.7), A, grad=True),
  R("celu", "x", lambda x: F.celu(x, 1.3), lambda x: x.celu(1.3), A, grad=True),
  R("selu", "x", F and F.selu, lambda x: x.selu(), A, grad=True),
  R("gelu", "x", lambda x: F.gelu(x, approximate="tanh"), lambda x: x.gelu(), A, "fin", 2, grad=True),
  R("quick_gelu", "x", lambda x: x * torch.sigmoid(1.702 * x), lambda x: x.quick_gelu(), A, grad=True),
  R("silu", "x", F and F.silu, lambda x: x.silu(), A, grad=True),
  R("swish", "x", F and F.silu, lambda x: x.swish(), A, grad=True),
  R("softplus", "x", lambda x: F.softplus(x, 1.5), lambda x: x.softplus(1.5), A, grad=True),
  R("mish", "x", F and F.mish, lambda x: x.mish(), A, "fin", 2, grad=True),
  R("softsign", "x", F and F.softsign, lambda x: x.softsign(), but(A, "uint8 uint16 uint32 uint64"), grad=True),
  R("hardsigmoid", "x", F and F.hardsigmoid, lambda x: x.hardsigmoid(), A, grad=True),
  R("hardswish", "x", F and F.hardswish, lambda x: x.hardswish(), but(A,
    "int8 int16 int32 int64 uint8 uint16 uint32 uint64"), grad=True),
  R("hardtanh", "x", lambda x: F.hardtanh(x, -2.0, 1.5), lambda x: x.hardtanh(-2.0, 1.5), but(A,
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64"), grad=True),
  R("logsigmoid", "x", F and F.logsigmoid, lambda x: x.logsigmoid(), but(A,
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64"), grad=True),
  R("dropout", "x", lambda x: F.dropout(x, 0.5, training=False), lambda x: x.dropout(0.5), A, grad=True),
  # ----- casts and copies -----
  R("cast", "x", lambda x: x.to(torch.float16), lambda x: x.cast("float16"), A, "mod", grad=True),
  R("float", "x", lambda x: x.float(), SAME, A, grad=True),
  R("half", "x", lambda x: x.half(), SAME, A, "mod", grad=True),
  R("double", "x", lambda x: x.double(), SAME, A, grad=True),
  R("bfloat16", "x", lambda x: x.bfloat16(), SAME, A, "mod", grad=True),
  R("int", "x", lambda x: x.int(), SAME, A, "mod"),
  R("long", "x", lambda x: x.long(), SAME, A, "mod"),
  R("short", "x", lambda x: x.short(), SAME, A, "small"),
  R("char", "x", lambda x: x.char(), SAME, A, "small"),
  R("bool", "x", lambda x: x.bool(), SAME, A),
  R("bitcast", "x", _tbitcast, _abitcast, A, "fin"),
  R("contiguous", "x", lambda x: x.contiguous(), SAME, A, grad=True),
  R("contiguous_backward", "x", lambda x: x, lambda x: x.contiguous_backward(), A, grad=True),
  R("clone", "x", lambda x: x.clone(), SAME, A, grad=True),
  R("detach", "x", lambda x: x.detach(), SAME, A),
  # ----- elementwise binary -----
  R("add", "xy", lambda a, b: a + b, lambda a, b: a.add(b), A, grad=True),
  R("add.scalar", "x", lambda a: 2.5 + a, SAME, A, grad=True),
  R("sub", "xy", lambda a, b: a - b, lambda a, b: a.sub(b), N, grad=True),
  R("sub.rscalar", "x", lambda a: 3 - a, SAME, A, grad=True),
  R("mul", "xy", lambda a, b: a * b, lambda a, b: a.mul(b), A, grad=True),
  R("mul.scalar", "x", lambda a: a * 3, SAME, A, grad=True),
  R("div", "xy", lambda a, b: a / b, lambda a, b: a.div(b), A, "any,nz", grad=True),
  R("div.trunc", "xy", lambda a, b: torch.div(a, b, rounding_mode="trunc"), lambda a, b: a.div(b,
    rounding_mode="trunc"),
    A, "any,nz"),
  R("div.rscalar", "x", lambda a: 2 / a, SAME, A, "nz", grad=True),
  R("floordiv", "xy", lambda a, b: a // b, lambda a, b: a.floordiv(b), but(A, "bool"), "any,nz"),
  R("mod", "xy", lambda a, b: a % b, lambda a, b: a.mod(b), but(A, "bool"), "fin,nz"),
  R("fmod", "xy", lambda a, b: torch.fmod(a, b), lambda a, b: a.fmod(b), but(A, "bool"), "fin,nz"),
  R("pow", "xy", lambda a, b: a ** b, lambda a, b: a.pow(b), but(A, "int64 uint64"), "any", 2, grad=True),
  R("pow.int", "xy", lambda a, b: a ** b, SAME, A, "small,cls"),
  R("pow.scalar", "x", lambda a: a ** 3, SAME, A, "mod", grad=True),
  R("pow.rscalar", "x", lambda a: 2.0 ** a, SAME, A, "mod", 2, grad=True),
  R("maximum", "xy", lambda a, b: torch.maximum(a, b), lambda a, b: a.maximum(b), A, grad=True),
  R("minimum", "xy", lambda a, b: torch.minimum(a, b), lambda a, b: a.minimum(b), A, grad=True),
  R("eq", "xy", lambda a, b: a == b, lambda a, b: a.eq(b), A),
  R("ne", "xy", lambda a, b: a != b, lambda a, b: a.ne(b), A),
  R("lt", "xy", lambda a, b: a < b, lambda a, b: a.lt(b), A),
  R("le", "xy", lambda a, b: a <= b, lambda a, b: a.le(b), A),
  R("gt", "xy", lambda a, b: a > b, lambda a, b: a.gt(b), A),
  R("ge", "xy", lambda a, b: a >= b, lambda a, b: a.ge(b), A),
  R("bitwise_and", "xy", lambda a, b: a & b, lambda a, b: a.bitwise_and(b), IB),
  R("bitwise_or", "xy", lambda a, b: a | b, lambda a, b: a.bitwise_or(b), IB),
  R("bitwise_xor", "xy", lambda a, b: a ^ b, lambda a, b: a.bitwise_xor(b), IB),
  R("lshift", "xy", lambda a, b: a << b, lambda a, b: a.lshift(b), I, "any,shift"),
  R("rshift", "xy", lambda a, b: a >> b, lambda a, b: a.rshift(b), I, "any,shift"),
  R("logical_and", "xy", lambda a, b: torch.logical_and(a, b), lambda a, b: a.logical_and(b), A),
  R("logical_or", "xy", lambda a, b: torch.logical_or(a, b), lambda a, b: a.logical_or(b), A),
  R("logical_xor", "xy", lambda a, b: torch.logical_xor(a, b), lambda a, b: a.logical_xor(b), A),
  # ----- ternary -----
  R("where", "cxy", lambda c, a, b: torch.where(c, a, b), lambda c, a, b: c.where(a, b), A, grad=True),
  R("lerp", "xyw", lambda a, b, w: torch.lerp(a, b, w), lambda a, b, w: a.lerp(b, w), but(N,
    "int8 int16 int32 int64 uint8 uint16 uint32 uint64"), "mod", 4, grad=True),
  R("masked_fill", "mask", lambda x, m: x.masked_fill(m, 7), SAME, A, grad=True),
  # ----- reductions -----
  R("sum", "x", lambda x: x.sum(1), SAME, A, "any", 2, grad=True),
  R("sum.all", "x", lambda x: x.sum(), SAME, A, "mod", 4, grad=True),  # (max + -max + x: the order decides)
  R("sum.keepdim", "x", lambda x: x.sum((0, 1), keepdim=True), SAME, A, "mod", 4, grad=True),
  R("prod", "x", lambda x: x.prod(1), SAME, A, "small", 4, grad=True),
  R("max", "x", lambda x: x.amax(1), lambda x: x.max(1), A, grad=True),
  R("max.all", "x", lambda x: x.amax(), lambda x: x.max(), A, "fin", grad=True),
  R("min", "x", lambda x: x.amin(1), lambda x: x.min(1), A, grad=True),
  R("min.keepdim", "x", lambda x: x.amin(0, keepdim=True), lambda x: x.min(0, keepdim=True), A, "fin", grad=True),
  R("mean", "x", lambda x: x.mean(1), SAME, A, "mod", 2, grad=True),  # ints: a float sum of INT_MIN + INT_MAX isn't -1
  R("var", "x", lambda x: x.var(1), SAME, A, "mod", 4, grad=True),
  R("std", "x", lambda x: x.std(0, correction=0), SAME, A, "mod", 4, grad=True),
  R("any", "x", lambda x: x.any(1).bool(), lambda x: x.any(1), A),  # torch: uint8 in, uint8 out
  R("all", "x", lambda x: x.all(0).bool(), lambda x: x.all(0), A),
  R("logsumexp", "x", lambda x: x.logsumexp(1), SAME, A, "any", 4, grad=True),
  R("argmax", "x", lambda x: x.argmax(1), SAME, A),
  R("argmax.all", "x", lambda x: x.argmax(), SAME, A, "fin"),
  R("argmin", "x", lambda x: x.argmin(0), SAME, A),
  R("cumsum", "x", lambda x: x.cumsum(1), SAME, A, "mod", 4, grad=True),
  R("cumprod", "x", lambda x: x.cumprod(1), SAME, A, "small", 8, grad=True),
  R("cummax", "x", lambda x: torch.cummax(x, 1).values, lambda x: x.cummax(1)[0], A, grad=True),
  R("softmax", "x", lambda x: x.softmax(1), SAME, A, "any", 4, grad=True),
  R("log_softmax", "x", lambda x: x.log_softmax(1), SAME, but(A, "int32 uint64"), "any", 4, grad=True),
  R("sort", "x", lambda x: _tsort(x, 1), lambda x: x.sort(1), A, grad=True),
  R("sort.descending", "x", lambda x: _tsort(x, 0, True), lambda x: x.sort(0, descending=True), A, "fin", grad=True),
  R("argsort", "x", lambda x: _tsort(x, 1)[1], lambda x: x.argsort(1), A),
  R("topk", "x", lambda x: _ttopk(x, 3, 1), lambda x: x.topk(3, 1), A, grad=True),
  R("topk.smallest", "x", lambda x: _ttopk(x, 2, 0, False), lambda x: x.topk(2, 0, largest=False), A, "fin", grad=True),
  # ----- movement -----
  R("reshape", "x", lambda x: x.reshape(4, 10), SAME, A, grad=True),
  R("view", "x", lambda x: x.view(2, 20), SAME, A, grad=True),
  R("permute", "x", lambda x: x.reshape(5, 2, 4).permute(2, 0, 1), SAME, A, grad=True),
  R("transpose", "x", lambda x: x.transpose(1, 0), SAME, A, grad=True),
  R("T", "x", lambda x: x.T, SAME, A, grad=True),
  R("expand", "x", lambda x: x[:, None, :1].expand(5, 3, 4), SAME, A, grad=True),
  R("flatten", "x", lambda x: x.reshape(5, 2, 4).flatten(1), SAME, A, grad=True),
  R("unflatten", "x", lambda x: x.unflatten(1, (2, 4)), SAME, A, grad=True),
  R("squeeze", "x", lambda x: x[:, None, 2:3].squeeze(), SAME, A, grad=True),
  R("unsqueeze", "x", lambda x: x.unsqueeze(1), SAME, A, grad=True),
  R("squeeze_axes", "x", lambda x: x[:1, None].squeeze(0).squeeze(0), lambda x: x[:1, None].squeeze_axes((0, 1)), A,
    grad=True),
  R("pad", "x", lambda x: _tpad(x, (1, 2, 0, 1)), lambda x: x.pad((1, 2, 0, 1)), A, grad=True),
  # a float value pads an int or bool tensor as weakfloat, stored in float32 (tinygrad's rule; PyTorch truncates to -1)
  R("pad.value", "x", lambda x: _tpad(x if x.is_floating_point() else x.float(), (2, 0), value=-1.5),
    lambda x: x.pad((2, 0), value=-1.5), A, grad=True),
  R("pad.negative", "x", lambda x: _tpad(x, (-1, 2, 1, -2)), lambda x: x.pad((-1, 2, 1, -2)), A, grad=True),
  # (torch pads two dims in reflect/replicate mode only of a 3-d or 4-d input)
  R("pad.reflect", "x", lambda x: _tpad(x[None], (3, 1, 2, 2), "reflect")[0],
    lambda x: x.pad((3, 1, 2, 2), mode="reflect"), but(A, "bool"), grad=True),
  R("pad.replicate", "x", lambda x: _tpad(x[None], (1, 2, 2, 0), "replicate")[0],
    lambda x: x.pad((1, 2, 2, 0), mode="replicate"), but(A, "bool"), grad=True),
  R("pad.circular", "x", lambda x: _tpad(x[None], (2, 1), "circular")[0], lambda x: x.pad((2, 1), mode="circular"), A,
    grad=True),
  R("pad_", "x", lambda x: _tpad(x, (0, 1, 2, 0)), lambda x: x.pad_(((2, 0), (0, 1))), A, grad=True),
  R("shrink", "x", lambda x: x[1:4, 2:7], lambda x: x.shrink(((1, 4), (2, 7))), A, grad=True),
  R("flip", "x", lambda x: x.flip(0, 1), SAME, A, grad=True),
  R("cat", "xy", lambda a, b: torch.cat([a, b[:3]], 0), lambda a, b: a.cat(b[:3], dim=0), A, grad=True),
  R("stack", "xy", lambda a, b: torch.stack([a, b], 1), lambda a, b: a.stack(b, dim=1), A, grad=True),
  R("split", "x", lambda x: x.split([3, 0, 5], 1), lambda x: x.split([3, 0, 5], 1), A, grad=True),
  R("chunk", "x", lambda x: x.chunk(2, 0), SAME, A, grad=True),
  R("roll", "x", lambda x: x.roll((1, -3), (0, 1)), SAME, A, grad=True),
  R("repeat", "x", lambda x: x[:2].repeat(2, 1, 2), SAME, A, grad=True),
  R("repeat_interleave", "x", lambda x: x.repeat_interleave(2, 1), lambda x: x.repeat_interleave(2, dim=1), A,
    grad=True),
  R("tril", "x", lambda x: x.tril(1), SAME, A, grad=True),
  R("triu", "x", lambda x: x.triu(-1), SAME, A, grad=True),
  # ----- indexing -----
  R("getitem", "x", _tgetitem, lambda x: x[1:, ::-3], A, grad=True, op="__getitem__"),
  R("getitem.fancy", "x", _tgetitem_fancy, _agetitem_fancy, A, grad=True, op="__getitem__"),
  R("gather", "gather", lambda x, i: x.gather(1, i), SAME, A, grad=True),
  R("scatter", "scatter", _scatter_ref, SAME, A, grad=True),
  R("scatter.add", "scatter", lambda x, i, s: _scatter_ref(x, i, s, "add"),
    lambda x, i, s: x.scatter_reduce(0, i, s, "sum"), A, "mod", 2, grad=True),  # a Tensor src: scatter_reduce
  R("masked_select", "mask", lambda x, m: x.masked_select(m), SAME, A, grad=True),
  R("one_hot", "x", lambda x: F.one_hot(x.long(), 4), lambda x: x.one_hot(4), I, "cls"),
  # ----- matmul, conv, pooling -----
  R("matmul", "mm", lambda a, b: a @ b, lambda a, b: a.matmul(b), A, "small", 4, grad=True),
  R("matmul.batched", "bmm", lambda a, b: a @ b, SAME, A, "small", 4, grad=True, op="matmul"),
  R("dot", "vec", lambda a, b: a.dot(b), SAME, A, "small", 4, grad=True),
  R("linear", "bmm", lambda a, w: a @ w, lambda a, w: a.linear(w), A, "small", 4, grad=True),
  R("einsum", "bmm", lambda a, b: torch.einsum("bij,jk->bki", a, b),
    lambda a, b: type(a).einsum("bij,jk->bki", a, b), A, "small", 4, grad=True),
  R("conv2d", "conv", lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=2), lambda x, w, b: x.conv2d(w, b, 2,
    padding=1),
    A, "small", 8, grad=True),
  R("conv2d.strided", "conv", lambda x, w, b: F.conv2d(x, w, None, stride=2, dilation=(1, 2), groups=2),
    lambda x, w, b: x.conv2d(w, None, 2, stride=2, dilation=(1, 2)), A, "small", 8, grad=True, op="conv2d"),
  R("conv_transpose2d", "convt", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1),
    lambda x, w, b: x.conv_transpose2d(w, b, stride=2, padding=1), A, "small", 8, grad=True),
  R("max_pool2d", "img", lambda x: F.max_pool2d(x, 2), lambda x: x.max_pool2d(2), but(A, "bool"), "fin", grad=True),
  R("max_pool2d.overlap", "img", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
    lambda x: x.max_pool2d(3, 2, padding=1, ceil_mode=True), but(A, "bool"), "fin", grad=True, op="max_pool2d"),
  R("avg_pool2d", "img", lambda x: F.avg_pool2d(x, (2, 3)), lambda x: x.avg_pool2d((2, 3)), but(A,
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64"), "mod", 2, grad=True),
  R("avg_pool2d.pad", "img", lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    lambda x: x.avg_pool2d(3, 2, padding=1, count_include_pad=False), but(A,
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64"), "mod", 2, grad=True, op="avg_pool2d"),
  R("interpolate", "img", lambda x: F.interpolate(x, (4, 9), mode="bilinear"), lambda x: x.interpolate((4, 9)),
    but(A, "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64"),
    "mod", 4, grad=True),
  R("interpolate.nearest", "img", lambda x: F.interpolate(x, (9, 4), mode="nearest"),
    lambda x: x.interpolate((9, 4), mode="nearest"), but(A,
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64"), grad=True, op="interpolate"),
  # ----- normalization, attention -----
  R("layernorm", "seq", lambda x: F.layer_norm(x, (8,)), lambda x: x.layernorm(), A, "mod", 8, grad=True),
  R("batchnorm", "bn", lambda x, w, b, m, s: (x - m[:, None]) * w[:, None] * s[:, None] + b[:, None],
    lambda x, w, b, m, s: x.batchnorm(w, b, m, s), N, "mod", 4, grad=True),
  R("scaled_dot_product_attention", "attn", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True), A, "small", 8, grad=True),
  # ----- losses -----
  R("cross_entropy", "logits", lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1),
    lambda x, y: x.cross_entropy(y, label_smoothing=0.1), A, "mod", 4, grad=True),
  R("sparse_categorical_crossentropy", "logits", lambda x, y: F.cross_entropy(x, y, reduction="sum"),
    lambda x, y: x.sparse_categorical_crossentropy(y, reduction="sum"), A, "mod", 4, grad=True),
  R("nll_loss", "logits_w", lambda x, y, w: F.nll_loss(x, y, w), lambda x, y, w: x.nll_loss(y, w), but(A,
    "bool uint8 uint16 uint32 uint64"), "mod", 4,
    grad=True),
  R("binary_crossentropy", "pair", lambda x, y: F.binary_cross_entropy(x, y), lambda x, y: x.binary_crossentropy(y),
    A, "prob", 4, grad=True),
  R("binary_crossentropy_logits", "pair", lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="none"),
    lambda x, y: x.binary_crossentropy_logits(y, reduction="none"), but(A, "bool uint8 uint16 uint32 uint64"),
    "mod,prob", 4, grad=True),
  R("mse_loss", "pair", lambda x, y: F.mse_loss(x, y), lambda x, y: x.mse_loss(y), but(N,
    "int8 int16 uint8 uint16 uint32 uint64"), "mod", 4, grad=True),
  R("l1_loss", "pair", lambda x, y: F.l1_loss(x, y, reduction="sum"), lambda x, y: x.l1_loss(y, reduction="sum"),
    but(N, "uint8 uint16 uint32 uint64"),
    "mod", 4, grad=True),
  R("smooth_l1_loss", "pair", lambda x, y: F.smooth_l1_loss(x, y, beta=0.5), lambda x, y: x.smooth_l1_loss(y, 0.5),
    but(N, "uint8 uint16 uint32 uint64"),
    "mod", 4, grad=True),
  # ----- creation: the input only lends its dtype (and shape for *_like) -----
  R("zeros", "like", lambda x: torch.zeros(2, 3, dtype=_tdt(x)), lambda x: type(x).zeros(2, 3, dtype=x.dtype), A),
  R("ones", "like", lambda x: torch.ones(3, dtype=_tdt(x)), lambda x: type(x).ones(3, dtype=x.dtype), A),
  R("full", "like", lambda x: torch.full((2, 2), 3, dtype=_tdt(x)), lambda x: type(x).full((2, 2), 3, dtype=x.dtype),
    A),
  R("full_like", "like", lambda x: torch.full_like(x, 2), lambda x: x.full_like(2), A),
  R("zeros_like", "like", lambda x: torch.zeros_like(x), lambda x: x.zeros_like(), A),
  R("ones_like", "like", lambda x: torch.ones_like(x), lambda x: x.ones_like(), A),
  R("arange", "like", lambda x: torch.arange(1, 12, 3, dtype=_tdt(x)), lambda x: type(x).arange(1, 12, 3,
    dtype=x.dtype),
    but(A, "bool")),
  R("linspace", "like", lambda x: torch.linspace(-1, 2, 7, dtype=_tdt(x)),
    lambda x: type(x).linspace(-1, 2, 7, dtype=x.dtype), but(A, "bool uint8")),
  R("eye", "like", lambda x: torch.eye(3, 4, dtype=_tdt(x)), lambda x: type(x).eye(3, 4, dtype=x.dtype), A),
  # ----- composition -----
  R("sequential", "x", lambda x: (x * 2).relu(), lambda x: x.sequential([lambda t: t * 2, type(x).relu]), A, grad=True),
  # ***** rows added after the first cut: appended, so each earlier row keeps its seed and layout (both follow
  # the row's position) *****
  # ----- elementwise math -----
  R("erf", "x", lambda x: x.erf(), SAME, A, grad=True),
  R("asin", "x", lambda x: x.asin(), SAME, A, grad=True),
  R("acos", "x", lambda x: x.acos(), SAME, A, grad=True),
  R("atan", "x", lambda x: x.atan(), SAME, A, grad=True),
  R("sinh", "x", lambda x: x.sinh(), SAME, A, grad=True),
  R("cosh", "x", lambda x: x.cosh(), SAME, A, grad=True),
  R("asinh", "x", lambda x: x.asinh(), SAME, A, grad=True),
  R("acosh", "x", lambda x: x.acosh(), SAME, A, "acosh", grad=True),
  R("atanh", "x", lambda x: x.atanh(), SAME, A, grad=True),
  R("copysign", "xy", lambda a, b: a.copysign(b), SAME, A, grad=True),
  R("logaddexp", "xy", lambda a, b: a.logaddexp(b), SAME, A, grad=True),
  R("isclose", "xy", lambda a, b: a.isclose(b), SAME, A),
  R("isclose.equal_nan", "xy", lambda a, b: torch.isclose(a, b * 1.5, 0.1, 0.5, equal_nan=True),
    lambda a, b: a.isclose(b * 1.5, 0.1, 0.5, equal_nan=True), A, op="isclose"),
  R("allclose", "x", lambda x: _tallclose(x, x + 1e-9, False), lambda x: x.allclose(x + 1e-9), A),
  R("allclose.equal_nan", "x", lambda x: _tallclose(x, x, True), lambda x: x.allclose(x, equal_nan=True), A,
    op="allclose"),
  # ----- reductions and scans -----
  R("var_mean", "x", lambda x: torch.var_mean(x, 1), lambda x: x.var_mean(1), A, "mod", 4, grad=True),
  R("std_mean", "x", lambda x: torch.std_mean(x, 1, correction=0), lambda x: x.std_mean(1, correction=0), A, "mod", 4,
    grad=True),
  R("cummin", "x", lambda x: tuple(torch.cummin(x, 1)), lambda x: x.cummin(1), A, grad=True),
  R("logcumsumexp", "x", lambda x: x.logcumsumexp(1), SAME, A, "any", 4, grad=True),
  # ----- movement -----
  R("diag", "x", lambda x: x.diag(-1), SAME, A, grad=True),
  R("diag.vector", "x", lambda x: x[1].diag(2), SAME, A, grad=True, op="diag"),
  R("diagonal", "x", lambda x: x.reshape(5, 2, 4).diagonal(1, 2, 0), SAME, A, grad=True),
  R("unfold", "x", lambda x: x.unfold(1, 3, 2), SAME, A, grad=True),
  R("meshgrid", "vec", _tmeshgrid, _ameshgrid, A, grad=True),
  R("rearrange", "x", lambda x: x.reshape(5, 2, 4).permute(2, 0, 1), lambda x: x.rearrange("a (b c) -> c a b", b=2),
    A, grad=True),
  # ----- indexing -----
  R("scatter_reduce", "scatter_red", _tscatter_red("sum"), SAME, A, "mod", 2, grad=True),
  R("scatter_reduce.prod", "scatter_red", _tscatter_red("prod"), SAME, A, "small", 4, grad=True,
    op="scatter_reduce"),
  R("scatter_reduce.mean", "scatter_red", _tscatter_red("mean", False), SAME, but(A, "bool"), "mod", 2, grad=True,
    op="scatter_reduce"),
  R("scatter_reduce.amax", "scatter_red", _tscatter_red("amax"), SAME, A, grad=True, op="scatter_reduce"),
  R("scatter_reduce.amin", "scatter_red", _tscatter_red("amin", False), SAME, A, grad=True,
    op="scatter_reduce"),
  R("nonzero", "x", lambda x: x.nonzero(), SAME, A),
  # ----- pooling -----
  R("max_pool2d.indices", "img", lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
    lambda x: x.max_pool2d(3, 2, padding=1, return_indices=True), but(A, "bool"), "fin", grad=True, op="max_pool2d"),
  R("max_unpool2d", "img", _tunpool, _aunpool, but(A, "bool"), "fin", grad=True),
  # ----- factorizations -----
  R("qr", "mat", lambda a, b: torch.linalg.qr(a), lambda a, b: a.qr(), but(A, "bool"), "any", 16, grad=True),
  R("svd", "mat", _tsvd, _asvd, but(A, "bool"), "any", 16, grad=True),
  R("newton_schulz", "mat", lambda a, b: _newton_schulz(b), lambda a, b: b.newton_schulz(3, (2, -1.5, 0.5)), A,
    "any", 8, grad=True),
  # ----- bitcasts between item sizes: the last dim (8) scales by their ratio; bools have no bytes to regroup -----
  R("bitcast.int64", "x", lambda x: x.view(torch.int64), lambda x: x.bitcast("int64"), but(A, "bool"), "fin"),
  R("bitcast.uint8", "x", lambda x: x.view(torch.uint8), lambda x: x.bitcast("uint8"), A, "fin"),
  # ----- tinygrad's API additions -----
  R("softmin", "x", lambda x: F.softmin(x, 1), lambda x: x.softmin(1), A, "any", 4, grad=True),
  R("normalize", "x", lambda x: F.normalize(x, p=2.0, dim=1), lambda x: x.normalize(2.0, 1), A, "any", 4, grad=True),
  R("pad_to", "x", lambda x: _tpad(x, (0, 3, 0, 2)), lambda x: x.pad_to(7, 11), A, grad=True),
  R("shrink_to", "x", lambda x: x[:3, :6], lambda x: x.shrink_to(3, 6), A, grad=True),
  R("const_like", "like", lambda x: torch.full_like(x, 3), lambda x: x.const_like(3), A),
  # ----- tinygrad's image-buffer names for dot and conv2d (the same values here) -----
  R("image_dot", "mm", lambda a, b: a @ b, lambda a, b: a.image_dot(b), A, "small", 4, grad=True),
  R("image_conv2d", "conv", lambda x, w, b: F.conv2d(x, w, b, padding=1, groups=2),
    lambda x, w, b: x.image_conv2d(w, b, 2, padding=1), A, "small", 8, grad=True),
]

# ***** public Tensor attributes that are not ops: each says why it has no row *****

NON_OPS = {
  # metadata, not computation
  "shape": "property", "dtype": "property", "device": "property", "ndim": "property", "requires_grad": "autograd flag",
  "numel": "metadata", "size": "metadata", "element_size": "metadata", "nbytes": "metadata",
  "is_floating_point": "metadata", "max_shape": "metadata (a symbolic shape's largest)", "max_numel": "metadata",
  "grad": "autograd result", "const": "a constant of another tensor's dtype and device (test_tensor_api3.py)",
  "linear_with_vars": "schedules, runs nothing (test_linear.py)", "schedule_linear": "schedules (test_linear.py)",
  # running and reading: every row goes through them
  "realize": "runs the graph", "callify": "gives a buffer, written at a realize (test_pending_writes.py)",
  "numpy": "reads data", "tolist": "reads data", "item": "reads data",
  "data": "reads data",
  # autograd machinery: the backward half of every row with grad=True
  "backward": "autograd", "gradient": "autograd", "requires_grad_": "autograd flag", "train": "mode switch",
  # state and devices: tested in test/backend/test_assign.py, test_device.py
  "assign": "writes a buffer in place", "to": "device copy", "to_": "device copy",
  # several devices: test/backend/test_multi.py checks every op on sharded tensors against unsharded ones
  "shard": "multi-device", "shard_": "multi-device",
  # random: values differ from torch's by design; test/backend/test_random.py checks their distributions
  "manual_seed": "random", "rand": "random", "randn": "random", "randint": "random", "uniform": "random",
  "normal": "random", "randperm": "random",
  # uninitialized memory: no values to compare
  "empty": "uninitialized", "empty_like": "uninitialized", "invalids": "uninitialized (Tensor.empty)",
  "is_param": "autograd flag", "is_param_": "autograd flag",
  # random creation like the random rows above; from memory or a URL; rebinding: test/backend/test_tensor_api.py
  "rand_like": "random", "randn_like": "random", "scaled_uniform": "random", "glorot_uniform": "random",
  "kaiming_uniform": "random", "kaiming_normal": "random", "multinomial": "random", "from_blob": "reads memory",
  "from_url": "downloads", "replace": "rebinds the graph",
  # a body applied to its arguments: test/backend/test_tensor_call.py
  "call": "applies a body", "as_param": "placeholder for call",
  "custom_kernel": "runs a hand-written kernel body (test/backend/test_custom_kernel.py)",
  # tinygrad's low-level names: test/backend/test_tinygrad_surface.py (hashes against hashlib, the random words
  # against Random123's known answers and rand's stream, alu without promotion, shard_like on two devices)
  "keccak": "hash (hashlib)", "hash": "hash (hashlib)", "threefry": "random", "random_bits": "random",
  "alu": "the IR op, no promotion", "ufix": "a constant like this tensor", "usum": "a + b + ...",
  "uprod": "a * b * ...",
  "shard_like": "multi-device",
}

# ***** known failures: (row name, dtype or "*", device or "*", "fwd" | "bwd" | "rej" | "*") -> reason *****
# Every entry covers cases that still fail (pruned against a full run: entries whose every case passed are gone);
# the tests they break are xfail (not strict). Delete an entry once its fix has merged (XPASS in the run's summary).
NAN = "issue13 NaN/inf/signed-zero semantics"
KINK = "issue13 gradients at kinks (abs'(0), clip bounds, min/max ties, relu6'(0))"
ACC = "issue13 bf16/half/int accumulation"
POW_PREC = "new: pow in half/bf16 goes through exp2/log2 in the input dtype (x ** 3 of -7.25 gives -380, not -381)"
SOFTPLUS = "new: softplus(x, beta) overflows to inf where x * beta does (torch returns x past its threshold)"
F32_APPROX = ("new: erf (Abramowitz-Stegun 7.1.26, absolute error 1.5e-7) and asin/acos/atan (Cephes' float32 "
              "minimax, relative error 2e-8) are float32-grade approximations, also in float64 (documented)")
SVD_REPEATED = ("new: torch's svd gradient is NaN for repeated singular values (a rank-1 input here); attograd's is "
                "finite on CPU (NaN too on PYTHON)")
TIE_SPLIT = ("max_pool2d's gradient is split among tied maxima, also with return_indices (PyTorch: all to the first); "
             "chosen for speed, see docs/numerics.md")
NAN_SIGN = "new: copysign reads a NaN's sign as positive (by comparison); torch's bfloat16 NaN has its sign bit set"
INT_MATMUL = ("deliberate: int8/int16/uint8 conv2d and einsum return int32, accumulated exactly, as tinygrad's (torch "
              "returns the input dtype, wrapped; matmul returns it too, as torch)")
BOOL_MATMUL = ("deliberate: bool @ bool is NumPy's and tinygrad's OR of ANDs, a bool; torch has no bool matmul and its "
               "int64 carrier counts the pairs")
KNOWN: dict[tuple[str, str, str, str], str] = {
  # NaN, inf and -0 in and out
  **{(r, "*", "*", "fwd"): NAN for r in ("sign", "le", "ge", "floordiv", "mod", "fmod", "pow")},
  ("softplus", "*", "*", "fwd"): SOFTPLUS,
  ("pow.scalar", "float16", "*", "fwd"): POW_PREC, ("pow.scalar", "bfloat16", "*", "fwd"): POW_PREC,
  **{(r, d, "*", "fwd"): INT_MATMUL for r in ("einsum", "conv2d", "image_conv2d") for d in ("int8", "int16", "uint8")},
  **{(r, "bool", "*", "fwd"): BOOL_MATMUL for r in ("matmul", "matmul.batched", "dot", "image_dot", "linear")},
  ("cumprod", "float16", "*", "bwd"): ACC,
  # gradients at kinks and ties (inputs hold 0, -0 and the clip bounds on purpose)
  **{(r, "*", "*", "bwd"): KINK for r in (
    "max_pool2d", "max_pool2d.overlap", "std", "binary_crossentropy", "cumprod", "prod", "hardswish")},
  ("erf", "float64", "*", "*"): F32_APPROX,
  **{(r, "float64", "*", "bwd"): F32_APPROX for r in ("asin", "acos", "atan")},
  ("copysign", "bfloat16", "*", "fwd"): NAN_SIGN,
  ("svd", "float64", "*", "bwd"): SVD_REPEATED,
  ("max_pool2d.indices", "bfloat16", "*", "bwd"): TIE_SPLIT,
  # ties and signed zeros among the values scatter_reduce combines; the product's gradient at subnormals
  **{("scatter_reduce.prod", d, "*", "bwd"): KINK for d in ("float16", "float32", "float64")},
  ("scatter_reduce.amin", "bfloat16", "*", "bwd"): KINK,
}

# rows that accept a dtype outside their list, with a result unlike PyTorch's (or PyTorch has none): row name ->
# (those dtypes, what attograd does). The rejection test xfails on them; each wants a decision: raise, or define it.
UNREJECTED: dict[str, tuple[str, str]] = {
  **{r: ("bool", "applies to bool as to ints (neg is logical_not; abs/floor/ceil/round/trunc are identity; ...)")
     for r in ("abs", "arange", "ceil", "floor", "round", "trunc", "square", "relu", "neg", "floordiv", "fmod", "mod",
               "max_pool2d", "max_pool2d.overlap", "max_pool2d.indices", "max_unpool2d", "pad.reflect",
               "pad.replicate")},
  "linspace": ("bool uint8", "casts the float points, wrapping negatives"),
  **{r: ("bool int8 int16 int32 int64 uint8 uint16 uint32 uint64", "computes on ints in int arithmetic (no float cast)")
     for r in ("avg_pool2d", "avg_pool2d.pad", "hardswish", "hardtanh", "interpolate", "interpolate.nearest", "lerp",
               "logsigmoid")},
  **{r: ("bool uint8 uint16 uint32 uint64", "negates unsigned ints (wraps) before a float op")
     for r in ("binary_crossentropy_logits", "nll_loss", "l1_loss", "smooth_l1_loss", "softsign")},
  "mse_loss": ("int8 int16 uint8 uint16 uint32 uint64", "squares in the int dtype (wraps)"),
  "log_softmax": ("int32 uint64", "ints: the max is taken before the float cast (x - max wraps)"),
  "pow": ("int64 uint64", "the float row's int64 pow of huge values differs; ints are tested by pow.int"),
  "lshift": ("bool", "shifts bools"), "rshift": ("bool", "shifts bools"),
}

def known(name: str, dt: str, device: str, phase: str) -> str | None:
  for n in (name, "*"):
    for key in ((n, dt, device, phase), (n, dt, "*", phase), (n, "*", device, phase), (n, "*", "*", phase),
                (n, dt, device, "*"), (n, dt, "*", "*"), (n, "*", device, "*"), (n, "*", "*", "*")):
      if key in KNOWN: return KNOWN[key]
  return None

# ***** size *****

def size() -> dict[str, int]:
  """Rows, ops, and cases per device: forward (row x accepted dtype), backward (x float dtype), rejection."""
  fwd = sum(len(r.dtypes) for r in ROWS)
  bwd = sum(len([d for d in r.dtypes if d in FLOATS]) for r in ROWS if r.grad)
  rej = sum(len(DTYPES) - len(r.dtypes) for r in ROWS)
  return {"rows": len(ROWS), "ops": len({r.op for r in ROWS}), "dtypes": len(DTYPES), "forward": fwd, "backward": bwd,
          "reject": rej}

def size_line(devices: list[str]) -> str:
  s = size()
  nd = len(devices)
  return (f"op table: {s['rows']} rows over {s['ops']} ops x {s['dtypes']} dtypes x {nd} devices "
          f"({', '.join(devices)}): "
          f"{s['forward']} forward + {s['backward']} backward + {s['reject']} rejection cases per device, "
          f"{(s['forward'] + s['backward'] + s['reject']) * nd} in all")

def available_devices() -> list[str]:
  """The devices the table runs on here: TEST_DEVICES (a comma list), else every device that can start."""
  import os
  from attograd.device import Device
  names = os.getenv("TEST_DEVICES", "") or "CPU,PYTHON,LLVM,CL,CUDA,METAL"
  return [d.strip().upper() for d in names.split(",") if d.strip() and Device.available(d.strip().upper())[0]]

if __name__ == "__main__":
  sys.path.insert(0, __file__.rsplit("/", 3)[0])  # the repository root, for `import attograd`
  print(size_line(available_devices()))
