"""Symbolic simplification of integer index math and boolean validity, as PatternMatcher rule tables.

Integer division and modulo here follow C (truncate toward zero); rules that move terms across `//` and `%`
only fire when the bounds prove every value involved is non-negative, so they are exact for all inputs.
Integer ADD/MUL wrap around the dtype: rules that are not ring identities (div, mod, `<`) also check that the
sums they reason about cannot wrap for any value within bounds.
"""
from __future__ import annotations
import math
from attograd.dtype import ConstType, DType, can_lossless_cast, dtypes, truncate_to
import attograd.uop.ops as ops
from attograd.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, exec_alu

ints = tuple(dtypes.ints)
int_or_bool = ints + (dtypes.bool,)

# UPat dtypes also match vectors of them; the index-math rules below reason about one scalar value (and an int
# vector's CONST arg is a tuple), so each of them starts by leaving vectors alone
def is_vec(x: UOp) -> bool: return x.dtype.count > 1

def fold_const(x: UOp) -> UOp | None:
  if all(s.op is Ops.CONST for s in x.src): return UOp.const(x.dtype, exec_alu(x.op, x.dtype, [s.arg for s in x.src]))
  return None

def fold_bounds(x: UOp) -> UOp | None:
  """An int/bool expression whose bounds meet is that constant."""
  if x.dtype in int_or_bool and x.op in GroupOp.ALU and not any(is_vec(s) for s in (x,) + x.src):
    lo, hi = x.vmin_vmax
    if lo == hi: return UOp.const(x.dtype, lo)
  return None

# ***** sums as (term, coefficient) lists *****

def split_terms(x: UOp) -> tuple[list[tuple[UOp, int]], int]:
  """x == sum(coef * term) + const, with terms that are neither ADD nor MUL-by-constant."""
  terms: dict[UOp, int] = {}
  const = 0
  stack: list[tuple[UOp, int]] = [(x, 1)]
  while stack:
    u, k = stack.pop()
    if u.op is Ops.ADD: stack.extend([(u.src[1], k), (u.src[0], k)])
    elif u.op is Ops.MUL and u.src[1].op is Ops.CONST: stack.append((u.src[0], k * u.src[1].arg))
    elif u.op is Ops.CONST: const += k * u.arg
    else: terms[u] = terms.get(u, 0) + k
  return [(t, k) for t, k in terms.items() if k != 0], const

def sum_bounds(terms: list[tuple[UOp, int]], const: int) -> tuple[int, int]:
  """Bounds of sum(coef * term) + const in exact arithmetic (no wrapping), from each term's bounds."""
  lo = hi = const
  for t, k in terms:
    lo, hi = lo + min(k * t.vmin, k * t.vmax), hi + max(k * t.vmin, k * t.vmax)  # type: ignore[assignment]  # index bounds are ints
  return lo, hi

def fits(lo: ConstType, hi: ConstType, dtype: DType) -> bool: return dtypes.min(dtype) <= lo and hi <= dtypes.max(dtype)

def nowrap_nonneg(terms: list[tuple[UOp, int]], const: int, dtype: DType) -> bool:
  """The sum never wraps and is never negative, so C division/modulo of it is the floor one on its exact value."""
  lo, hi = sum_bounds(terms, const)
  return lo >= 0 and fits(lo, hi, dtype)

def build_sum(terms: list[tuple[UOp, int]], const: int, dtype: DType) -> UOp:
  out: UOp | None = None
  for t, k in terms:
    tk = t if k == 1 else UOp(Ops.MUL, dtype, (t, UOp.const(dtype, k)))
    out = tk if out is None else UOp(Ops.ADD, dtype, (out, tk))
  if out is None: return UOp.const(dtype, const)
  return out if const == 0 else UOp(Ops.ADD, dtype, (out, UOp.const(dtype, const)))

def _merge_divmod(terms: list[tuple[UOp, int]]) -> list[tuple[UOp, int]]:
  """(x//c)*(c*k) + (x%c)*k -> x*k. C's x == (x/c)*c + x%c holds for every x, so this is exact even when wrapping."""
  idx = {t: i for i, (t, _) in enumerate(terms)}
  out = list(terms)
  changed = False
  for t, k in terms:
    if t.op is Ops.MOD and t.src[1].op is Ops.CONST and t in idx and idx[t] is not None:
      c = t.src[1].arg
      d = UOp(Ops.IDIV, t.dtype, t.src)
      if c > 0 and d in idx and idx[d] is not None and out[idx[d]][1] == k * c:
        out[idx[t]] = (t.src[0], k)
        out[idx[d]] = (d, 0)
        idx[d] = None  # type: ignore[assignment]
        changed = True
  if not changed: return terms
  # merged terms may now repeat: sum them
  acc: dict[UOp, int] = {}
  for t, k in out: acc[t] = acc.get(t, 0) + k
  return [(t, k) for t, k in acc.items() if k != 0]

def _var_key(u: UOp) -> tuple | None:
  """A sort key for a Variable (bound or not), else None: sums and products of Variables (symbolic sizes) get one
  canonical order, so i+j and j+i are the same node and shapes built in either order compare equal."""
  if u.op is Ops.DEFINE_VAR: return (u.arg, -1)
  if u.op is Ops.BIND and u.src[1].op is Ops.CONST: return (u.src[0].arg, u.src[1].arg)
  return None

def fold_sum(x: UOp) -> UOp | None:
  if is_vec(x): return None
  terms, const = split_terms(x)
  terms = _merge_divmod(terms)
  if len(terms) > 1 and all(_var_key(t) is not None for t, _ in terms):
    terms.sort(key=lambda tk: _var_key(tk[0]) or ())  # (every key is a tuple here: checked above)
  ret = build_sum(terms, const, x.dtype)
  return ret if ret is not x else None

def distribute_mul(x: UOp, c: UOp) -> UOp | None:
  """(a + b) * c -> a*c + b*c, so that sums stay flat for div/mod folding."""
  if x.op is not Ops.ADD or is_vec(x): return None
  return x.src[0] * c + x.src[1] * c

def fold_mul_mul(x: UOp, a: UOp, b: UOp) -> UOp | None: return None if is_vec(x) else x * (a.arg * b.arg)

# ***** division and modulo by a positive constant *****

def _gcd_all(terms: list[tuple[UOp, int]], const: int, c: int) -> int:
  g = c
  for _, k in terms: g = math.gcd(g, k)
  return math.gcd(g, const)

def fold_div(x: UOp, c: UOp) -> UOp | None:
  if is_vec(x) or c.arg <= 0 or x.vmin < 0: return None
  n = c.arg
  if x.vmax < n: return x.const_like(0)
  terms, const = split_terms(x)
  if not nowrap_nonneg(terms, const, x.dtype): return None
  if (g := _gcd_all(terms, const, n)) > 1:  # (g*y) // (g*m) -> y // m
    return build_sum([(t, k // g) for t, k in terms], const // g, x.dtype) // (n // g)
  whole = [(t, k // n) for t, k in terms if k % n == 0]
  rest_terms = [(t, k) for t, k in terms if k % n != 0]
  rest_const = const % n
  whole_const = const // n
  if not nowrap_nonneg(rest_terms, rest_const, x.dtype): return None
  rest = build_sum(rest_terms, rest_const, x.dtype)
  # x == n*whole + rest with 0 <= rest, so x // n == whole + rest // n
  if rest.vmin // n == rest.vmax // n: return build_sum(whole, whole_const + rest.vmin // n, x.dtype)
  if not whole and whole_const == 0: return None  # nothing moved out
  return build_sum(whole + [(rest // n, 1)], whole_const, x.dtype)

def fold_mod(x: UOp, c: UOp) -> UOp | None:
  if is_vec(x) or c.arg <= 0 or x.vmin < 0: return None
  n = c.arg
  if x.vmax < n: return x
  terms, const = split_terms(x)
  if not nowrap_nonneg(terms, const, x.dtype): return None
  if (g := _gcd_all(terms, const, n)) > 1:  # (g*y) % (g*m) -> (y % m) * g
    return (build_sum([(t, k // g) for t, k in terms], const // g, x.dtype) % (n // g)) * g
  rest_terms = [(t, k % n) for t, k in terms if k % n != 0]
  if len(rest_terms) == len(terms) and all(k % n == k for _, k in terms) and 0 <= const < n: return None
  if not nowrap_nonneg(rest_terms, const % n, x.dtype): return None
  rest = build_sum(rest_terms, const % n, x.dtype)
  return rest if rest.vmax < n else rest % n

def fold_div_div(x: UOp, a: UOp, b: UOp) -> UOp | None:
  if is_vec(x) or a.arg <= 0 or b.arg <= 0 or x.vmin < 0: return None
  # a*b past the dtype's max would wrap as a constant; every x is smaller than it anyway
  return x // (a.arg * b.arg) if a.arg * b.arg <= dtypes.max(x.dtype) else x.const_like(0)

def fold_mod_mod(x: UOp, a: UOp, b: UOp) -> UOp | None:
  if is_vec(x) or a.arg <= 0 or b.arg <= 0 or x.vmin < 0: return None
  return x % b.arg if a.arg % b.arg == 0 else None

def fold_mod_div(x: UOp, a: UOp, b: UOp) -> UOp | None:
  """(x % (a*b)) // a -> (x // a) % b, which nests with neighbouring reshapes."""
  if is_vec(x) or a.arg <= 0 or b.arg <= 0 or x.vmin < 0: return None
  return (x // a.arg) % (b.arg // a.arg) if b.arg % a.arg == 0 else None

# ***** comparisons *****

def fold_lt_sum(x: UOp, c: UOp) -> UOp | None:
  """(sum + k) < c -> sum < c - k; (y * m) < c -> y < ceil(c / m) for m > 0. Only where the left side can't wrap."""
  if is_vec(x): return None
  d = x.dtype
  if x.op is Ops.ADD and x.src[1].op is Ops.CONST:
    y, k = x.src[0], x.src[1].arg
    if fits(y.vmin + k, y.vmax + k, d) and fits(c.arg - k, c.arg - k, d): return y < (c.arg - k)
    return None
  if x.op is Ops.MUL and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
    y, m = x.src[0], x.src[1].arg
    return y < -(-c.arg // m) if fits(y.vmin * m, y.vmax * m, d) else None
  if x.op is Ops.ADD:  # divide out a common factor: (4a + 8b) < 9 -> (a + 2b) < 3
    terms, const = split_terms(x)
    if const == 0 and terms and fits(*sum_bounds(terms, const), d):
      g = 0
      for _, k in terms: g = math.gcd(g, k)
      if g > 1: return build_sum([(t, k // g) for t, k in terms], 0, x.dtype) < -(-c.arg // g)
  return None

def fold_lt_same_terms(x: UOp, y: UOp) -> UOp | None:
  """a + k1 < a + k2 -> k1 < k2: both sides the same sum of terms up to a constant (a symbolic mask or size such as
  i < i + 2, which bounds alone can't decide). Only where neither side can wrap."""
  if is_vec(x) or y.op is Ops.CONST: return None
  (tx, kx), (ty, ky) = split_terms(x), split_terms(y)
  if not tx or dict(tx) != dict(ty): return None
  if not (fits(*sum_bounds(tx, kx), x.dtype) and fits(*sum_bounds(ty, ky), y.dtype)): return None
  return UOp.const(dtypes.bool, kx < ky)

def canon_var_mul(a: UOp, b: UOp) -> UOp | None:
  """j*i -> i*j for two Variables (see _var_key)."""
  ka, kb = _var_key(a), _var_key(b)
  return b * a if ka is not None and kb is not None and kb < ka else None

def fold_max(a: UOp, b: UOp) -> UOp | None:
  """max(a, b) is a when a's bounds are all above b's."""
  if is_vec(a): return None
  if a.vmin >= b.vmax: return a
  return b if b.vmin >= a.vmax else None

# the dtypes a cast folding may introduce a constant or a cast of: every renderer writes these directly (a half or
# bfloat16 constant or cast is left to the code that chose it, which knows what the device has)
plain_dtypes = ints + (dtypes.bool, dtypes.float32, dtypes.float64)

def fold_cast_const(x: UOp, c: UOp) -> UOp | None:
  """A cast of a scalar constant is the constant in the new dtype (converted as a kernel would: floats truncate
  toward zero into an int, round onto a float's grid). Not a float's NaN or inf into an int, which C leaves
  undefined."""
  if is_vec(x) or is_vec(c) or c.arg.__class__ is tuple or x.dtype not in plain_dtypes: return None
  if dtypes.is_int(x.dtype) and isinstance(c.arg, float) and not math.isfinite(c.arg): return None
  # the constant's value is its own dtype's first: a float32 constant made from a Python float off float32's grid
  # (2147483000.0) holds the float32 value (2147483008), as the kernel's constant would, and is cast from there
  val = truncate_to(c.arg, c.dtype) if dtypes.is_float(c.dtype) and isinstance(c.arg, float) else c.arg
  return UOp.const(x.dtype, val)

def exact_cast(x: UOp, to: DType) -> bool:
  """Every value x takes is a value of `to`: by the dtypes, or (an int x) by x's bounds."""
  if can_lossless_cast(x.dtype, to): return True
  if not dtypes.is_int(x.dtype) or to is dtypes.bool: return False
  lo, hi = x.vmin_vmax
  if dtypes.is_int(to): return fits(lo, hi, to)
  return dtypes.is_float(to) and max(abs(lo), abs(hi)) <= 2 ** (dtypes.finfo(to)[1] + 1)  # type: ignore[arg-type]

def fold_cast_cast(x: UOp, mid: UOp, out: UOp) -> UOp | None:
  """cast(cast(x, mid), out) -> cast(x, out) when the cast to mid is exact for every value of x: the second cast
  then sees x's own value. Only where the new cast is x itself or between plain dtypes."""
  if is_vec(out) or not exact_cast(x, mid.dtype): return None
  if out.dtype is not x.dtype and not (x.dtype in plain_dtypes and out.dtype in plain_dtypes): return None
  return x.cast(out.dtype)

def canon_const_right(x: UOp) -> UOp | None:
  if x.op in GroupOp.Commutative and x.src[0].op is Ops.CONST and x.src[1].op is not Ops.CONST:
    return UOp(x.op, x.dtype, (x.src[1], x.src[0]), x.arg)
  return None

symbolic_simple = PatternMatcher([
  # constant folding and bounds
  (UPat(GroupOp.ALU, name="x"), fold_const),
  (UPat(GroupOp.ALU, dtype=int_or_bool, name="x"), fold_bounds),
  (UPat(GroupOp.Commutative, name="x"), canon_const_right),
  # identities that hold for every dtype
  (UPat.var("x") * 1, lambda x: x),
  (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("x"), UPat.var("x"))), lambda x: x),
  (UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("a"), UPat.var("b"))), lambda c, a, b: a if c.arg else b),
  (UPat(Ops.CAST, name="x", src=(UPat.var("y"),)), lambda x, y: y if x.dtype == y.dtype else None),
  (UPat(Ops.CAST, name="x", src=(UPat.cvar("c"),)), fold_cast_const),
  (UPat(Ops.CAST, name="out", src=(UPat(Ops.CAST, name="mid", src=(UPat.var("x"),)),)), fold_cast_cast),
  # integer identities
  (UPat.var("x", ints) + 0, lambda x: x),
  (UPat.var("x", ints) * 0, lambda x: x.const_like(0)),
  (UPat.var("x", ints) // 1, lambda x: x),
  (UPat.var("x", ints) % 1, lambda x: x.const_like(0)),
  (UPat(Ops.XOR, src=(UPat.var("x", ints), UPat.const(ints, 0))), lambda x: x),
  (UPat(Ops.OR, src=(UPat.var("x", ints), UPat.const(ints, 0))), lambda x: x),
  (UPat(Ops.SHL, src=(UPat.var("x", ints), UPat.const(ints, 0))), lambda x: x),
  (UPat(Ops.SHR, src=(UPat.var("x", ints), UPat.const(ints, 0))), lambda x: x),
  # a mask of low bits that x never exceeds keeps x (a byte's high nibble, x >> 4, masked with 15)
  (UPat(Ops.AND, src=(UPat.var("x", ints), UPat.cvar("c", ints))),
   lambda x, c: x if isinstance(c.arg, int) and c.arg >= 0 and c.arg & (c.arg + 1) == 0 and 0 <= x.vmin
   and x.vmax <= c.arg else None),
  # booleans
  (UPat.var("x", dtypes.bool) & UPat.const(dtypes.bool, True), lambda x: x),
  (UPat(Ops.AND, dtypes.bool, src=(UPat.var(), UPat.const(dtypes.bool, False)), name="x"),
   lambda x: x.const_like(False)),
  (UPat(Ops.OR, dtypes.bool, src=(UPat.var(), UPat.const(dtypes.bool, True)), name="x"), lambda x: x.const_like(True)),
  (UPat(Ops.OR, dtypes.bool, src=(UPat.var("x"), UPat.const(dtypes.bool, False))), lambda x: x),
  (UPat(Ops.AND, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
  (UPat(Ops.OR, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
  (UPat.var("x", dtypes.bool).ne(True).ne(True), lambda x: x),
])

symbolic = symbolic_simple + PatternMatcher([
  # flat, canonical sums
  (UPat(Ops.ADD, dtype=ints, name="x"), fold_sum),
  (UPat(Ops.MUL, dtype=ints, src=(UPat.var("x"), UPat.cvar("c"))), distribute_mul),
  (UPat(Ops.MUL, dtype=ints, src=(UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("a"))), UPat.cvar("b"))),
   fold_mul_mul),
  (UPat(Ops.MUL, dtype=ints, src=(UPat.var("a"), UPat.var("b"))), canon_var_mul),
  # division and modulo
  (UPat(Ops.IDIV, dtype=ints, src=(UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar("a"))), UPat.cvar("b"))), fold_div_div),
  (UPat(Ops.MOD, dtype=ints, src=(UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("a"))), UPat.cvar("b"))), fold_mod_mod),
  (UPat(Ops.IDIV, dtype=ints, src=(UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("b"))), UPat.cvar("a"))), fold_mod_div),
  (UPat(Ops.IDIV, dtype=ints, src=(UPat.var("x"), UPat.cvar("c"))), fold_div),
  (UPat(Ops.MOD, dtype=ints, src=(UPat.var("x"), UPat.cvar("c"))), fold_mod),
  # comparisons
  (UPat(Ops.CMPLT, src=(UPat.var("x", ints), UPat.cvar("c"))), fold_lt_sum),
  (UPat(Ops.CMPLT, src=(UPat.var("x", ints), UPat.var("y", ints))), fold_lt_same_terms),
  (UPat(Ops.MAX, dtype=ints, src=(UPat.var("a"), UPat.var("b"))), fold_max),
])

# tinygrad's name for its full simplifier (symbolic and validity rules): attograd's is the one table above
sym = symbolic

def simplify(x: UOp) -> UOp: return x.simplify()
ops.simplifier = symbolic  # UOp.simplify runs this table (ops.py cannot import it: this module imports ops)
