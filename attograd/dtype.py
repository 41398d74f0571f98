"""Data types: the DType record, the `dtypes` namespace, promotion rules and conversions to Python/struct formats."""
from __future__ import annotations
import builtins, functools, math, os, struct
from dataclasses import dataclass
from enum import IntEnum, auto
from typing import Any, Callable, Final, Literal

ConstType = float | int | bool

class InvalidType:
  """tinygrad's `Invalid`: the fill value that means "no value yet". `Tensor.full(shape, Invalid)` is
  `Tensor.invalids(shape)`, memory whose values are undefined until written; its dtype, left to `dtypes.from_py`, is
  bool. There is one instance: `InvalidType()` returns it, and pickling keeps it."""
  _instance: InvalidType | None = None
  def __new__(cls) -> InvalidType:
    if cls._instance is None: cls._instance = super().__new__(cls)
    return cls._instance
  def __repr__(self) -> str: return "Invalid"
  def __reduce__(self) -> tuple[type, tuple]: return (InvalidType, ())

Invalid = InvalidType()

class AddrSpace(IntEnum):
  """Where a kernel-level buffer lives (tinygrad's names): device memory, a work-group's shared memory, a thread's
  registers, or a scalar kernel argument."""
  GLOBAL = auto(); LOCAL = auto(); REG = auto(); ALU = auto()  # noqa: E702
  def __repr__(self) -> str: return f"AddrSpace.{self.name}"
  __str__ = __repr__

@dataclass(frozen=True, eq=False)
class DType:
  """A scalar (count=1) or short vector (count>1) element type. DTypes are interned: compare with `is` or `==`."""
  priority: int       # orders dtypes of one kind; larger is wider
  itemsize: int       # bytes of one scalar
  name: str
  fmt: str | None     # struct/array format char, None where Python has none (bfloat16)
  count: int = 1
  _scalar: DType | None = None

  @staticmethod
  def new(priority: int, itemsize: int, name: str, fmt: str | None) -> DType:
    return DType(priority, itemsize, name, fmt)
  def __repr__(self) -> str:
    """tinygrad's spelling, the dtype's short C-style alias: `dtypes.float` for float32, `dtypes.long` for int64,
    `dtypes.half`, `dtypes.uchar`, `dtypes.fp8e4m3` (the same object as `dtypes.float32`, ...); str() is the same."""
    s = self.scalar()
    name = SHORT_NAMES.get(s, s.name)
    return f"dtypes.{name}" if self.count == 1 else f"dtypes.{name}.vec({self.count})"
  def __lt__(self, o: DType) -> bool:
    return (self.priority, self.itemsize, self.name) < (o.priority, o.itemsize, o.name)
  def __reduce__(self) -> Any: return (_dtype_by_repr, (repr(self),))
  @property
  def base(self) -> DType: return self
  @property
  def size(self) -> int: return self.itemsize * self.count
  def scalar(self) -> DType: return self._scalar if self._scalar is not None else self
  def vec(self, sz: int) -> DType:
    assert self.count == 1, f"can't vectorize {self} again"
    if sz == 1: return self
    return _vec(self, sz)
  def ptr(self, size: int = -1) -> PtrDType: return _ptr(self, size)
  # tinygrad's spellings of the same facts: dt.min/dt.max are dtypes.min(dt)/dtypes.max(dt), dt.bitsize its bits
  @property
  def min(self) -> ConstType: return dtypes.min(self)
  @property
  def max(self) -> ConstType: return dtypes.max(self)
  @property
  def bitsize(self) -> int: return self.itemsize * 8
  def const(self, val: Any) -> Any:
    """`val` as the Python value this dtype holds (tinygrad's): a float rounded to the dtype's precision, an int
    wrapped to its width, a bool; Invalid stays Invalid."""
    return val if val is Invalid else truncate_to(val, self)

@dataclass(frozen=True, eq=False)
class PtrDType(DType):
  """A pointer to global memory holding `size` elements of `base_`."""
  base_: DType | None = None
  bufsize: int = -1
  @property
  def base(self) -> DType: return self.base_ if self.base_ is not None else self
  def __repr__(self) -> str: return f"{self.base!r}.ptr({self.bufsize})"

@functools.cache
def _vec(d: DType, sz: int) -> DType: return DType(d.priority, d.itemsize, f"{d.name}{sz}", None, sz, d)
@functools.cache
def _ptr(d: DType, size: int) -> PtrDType: return PtrDType(d.priority, d.itemsize, d.name, d.fmt, 1, None, d, size)

class dtypes:
  """The dtype namespace: `dtypes.float32`, `dtypes.is_float(d)`, `dtypes.default_float`, ..."""
  void: Final[DType] = DType.new(-1, 0, "void", None)
  bool: Final[DType] = DType.new(0, 1, "bool", "?")
  int8: Final[DType] = DType.new(1, 1, "int8", "b")
  uint8: Final[DType] = DType.new(2, 1, "uint8", "B")
  int16: Final[DType] = DType.new(3, 2, "int16", "h")
  uint16: Final[DType] = DType.new(4, 2, "uint16", "H")
  int32: Final[DType] = DType.new(5, 4, "int32", "i")
  uint32: Final[DType] = DType.new(6, 4, "uint32", "I")
  int64: Final[DType] = DType.new(7, 8, "int64", "q")
  uint64: Final[DType] = DType.new(8, 8, "uint64", "Q")
  # OCP 8-bit floats, stored as their bits (no struct format): e4m3fn has no inf and saturates at +-448, e5m2 is
  # IEEE-like
  fp8e4m3: Final[DType] = DType.new(9, 1, "float8_e4m3fn", None)
  fp8e5m2: Final[DType] = DType.new(9, 1, "float8_e5m2", None)
  # AMD's "fnuz" fp8s (finite, no negative zero): exponent bias one more than the OCP pair's, no inf, and one NaN,
  # 0x80 (the bits of -0). e4m3fnuz holds at most 240, e5m2fnuz 57344; past that (and from inf) a cast gives NaN, as
  # in PyTorch
  fp8e4m3fnuz: Final[DType] = DType.new(9, 1, "float8_e4m3fnuz", None)
  fp8e5m2fnuz: Final[DType] = DType.new(9, 1, "float8_e5m2fnuz", None)
  float16: Final[DType] = DType.new(10, 2, "float16", "e")
  bfloat16: Final[DType] = DType.new(11, 2, "bfloat16", None)
  float32: Final[DType] = DType.new(12, 4, "float32", "f")
  float64: Final[DType] = DType.new(13, 8, "float64", "d")
  # aliases
  half, float, double = float16, float32, float64
  uchar, char, short, ushort = uint8, int8, int16, uint16
  int, uint, long, ulong = int32, uint32, int64, uint64
  float8_e4m3fn, float8_e5m2 = fp8e4m3, fp8e5m2  # PyTorch's and ml_dtypes' names (and the names in reprs)
  float8_e4m3fnuz, float8_e5m2fnuz = fp8e4m3fnuz, fp8e5m2fnuz
  default_float: DType = float32
  default_int: DType = int32
  # tinygrad's weak dtypes: the kind (int or float) of a Python scalar, placed in the promotion lattice so that a scalar
  # defers to any tensor dtype of its kind (weakint joins the ints above bool, weakfloat the floats above every int).
  # A Tensor of Python scalars alone may show one (Tensor(2), Tensor(2) / 2; never int_tensor + 0.5, see
  # result_dtype), but its values are always computed and stored in the strong dtype the weak one stands for
  # (strong_dtype); the weak one only says how it promotes. Their
  # itemsizes only sort them: weakint after bool and before int8, weakfloat after uint64 and before the fp8s.
  weakint: Final[DType] = DType.new(0, 100, "weakint", None)
  weakfloat: Final[DType] = DType.new(9, 0, "weakfloat", None)

  @staticmethod
  def is_float(x: DType) -> builtins.bool: return (s := x.scalar()) in _FLOATS or s is dtypes.weakfloat
  @staticmethod
  def is_int(x: DType) -> builtins.bool: return (s := x.scalar()) in _INTS or s is dtypes.weakint
  @staticmethod
  def is_unsigned(x: DType) -> builtins.bool: return x.scalar() in _UINTS
  @staticmethod
  def is_bool(x: DType) -> builtins.bool: return x.scalar() is dtypes.bool
  @staticmethod
  def from_py(x: Any) -> DType:
    """The dtype a Python value becomes, as in tinygrad: a scalar is weak (int -> weakint, float -> weakfloat) and takes
    the dtype of what it meets; bool -> bool. A list gets the strong dtype of its widest element: the default int or
    float, or int64 when an int doesn't fit the default int (so [2**40] is not wrapped to 0, where tinygrad wraps)."""
    if x.__class__ is bool or x is Invalid: return dtypes.bool
    if x.__class__ is float: return dtypes.weakfloat
    if x.__class__ is int: return dtypes.weakint
    if isinstance(x, (list, tuple)): return max((dtypes.from_py_stored(y) for y in x), default=dtypes.default_float)
    raise DTypeInferenceError(f"dtypes.from_py: can't infer a dtype for {type(x).__name__} value {x!r:.40}; "
                              "state a dtype")
  @staticmethod
  def from_py_stored(x: Any) -> DType:
    """The concrete dtype a Python value is stored in: from_py's, made strong (the default int or float), and int64
    for an int the default int can't hold (so 2**40 is not wrapped to 0, where tinygrad wraps it)."""
    d = strong_dtype(dtypes.from_py(x))
    if d is dtypes.default_int and x.__class__ is int and not dtypes.min(d) <= x <= dtypes.max(d): return dtypes.int64
    return d
  @staticmethod
  def as_const(val: Any, dtype: DType) -> ConstType:
    """Convert a Python number to the value it has in `dtype` (wraps ints, truncates floats toward zero)."""
    if isinstance(val, tuple): return tuple(dtypes.as_const(v, dtype) for v in val)  # type: ignore
    d = dtype.scalar()
    if d is dtypes.bool: return bool(val)
    if dtypes.is_int(d):
      if isinstance(val, float):
        if math.isnan(val) or math.isinf(val): return 0
        val = int(val)
      return _wrap_int(int(val), d)
    # the value the dtype really holds, so every device (and the PYTHON interpreter) computes with the same constant
    return truncate_to(float(val), d) if d.itemsize < 4 else float(val)
  @staticmethod
  def min(dtype: DType) -> ConstType:
    """The smallest value of `dtype` (-inf for floats with an inf, the lowest finite value for the fp8s without); a
    weak dtype's is its strong dtype's, where its values are."""
    dtype = strong_dtype(dtype)
    if dtypes.is_int(dtype): return 0 if dtypes.is_unsigned(dtype) else -(2 ** (dtype.itemsize * 8 - 1))
    # fp8s without an inf: the lowest finite value is max's identity and max-pool's pad (-inf would cast to NaN)
    if (s := dtype.scalar()) in FP8_NO_INF: return -FP8_NO_INF[s]
    return False if dtype is dtypes.bool else -math.inf
  @staticmethod
  def max(dtype: DType) -> ConstType:
    dtype = strong_dtype(dtype)
    if dtypes.is_int(dtype): return 2 ** (dtype.itemsize * 8 - (0 if dtypes.is_unsigned(dtype) else 1)) - 1
    if (s := dtype.scalar()) in FP8_NO_INF: return FP8_NO_INF[s]
    return True if dtype is dtypes.bool else math.inf
  @staticmethod
  def finfo(dtype: DType) -> tuple[builtins.int, builtins.int]:
    """(exponent bits, mantissa bits) of a float dtype."""
    if not dtypes.is_float(dtype): raise ValueError(f"finfo: {dtype} is not a float dtype")
    dtype = strong_dtype(dtype)
    return {dtypes.fp8e4m3: (4, 3), dtypes.fp8e5m2: (5, 2), dtypes.fp8e4m3fnuz: (4, 3), dtypes.fp8e5m2fnuz: (5, 2),
            dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23),
            dtypes.float64: (11, 52)}[dtype.scalar()]
  @staticmethod
  def fields() -> dict[str, DType]: return DTYPES_DICT
  fp8_ocp: tuple[DType, ...] = ()
  fp8_fnuz: tuple[DType, ...] = ()
  fp8s: tuple[DType, ...] = ()
  floats: tuple[DType, ...] = ()
  uints: tuple[DType, ...] = ()
  sints: tuple[DType, ...] = ()
  int8s: tuple[DType, ...] = ()
  int16s: tuple[DType, ...] = ()
  int32s: tuple[DType, ...] = ()
  int64s: tuple[DType, ...] = ()
  ints: tuple[DType, ...] = ()
  all: tuple[DType, ...] = ()
  weaks: tuple[DType, ...] = ()

dtypes.fp8_ocp = (dtypes.fp8e4m3, dtypes.fp8e5m2)
dtypes.fp8_fnuz = (dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz)
dtypes.fp8s = dtypes.fp8_ocp + dtypes.fp8_fnuz
# the largest finite value of each fp8 that has no inf
FP8_NO_INF: dict[DType, float] = {dtypes.fp8e4m3: 448.0, dtypes.fp8e4m3fnuz: 240.0, dtypes.fp8e5m2fnuz: 57344.0}
dtypes.floats = dtypes.fp8s + (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
dtypes.uints = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
dtypes.sints = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
dtypes.ints = dtypes.uints + dtypes.sints
# each integer width's (unsigned, signed) pair, by tinygrad's names
dtypes.int8s, dtypes.int16s = (dtypes.uint8, dtypes.int8), (dtypes.uint16, dtypes.int16)
dtypes.int32s, dtypes.int64s = (dtypes.uint32, dtypes.int32), (dtypes.uint64, dtypes.int64)
dtypes.all = (dtypes.bool,) + dtypes.ints + dtypes.floats
dtypes.weaks = (dtypes.weakint, dtypes.weakfloat)
# the kinds as sets, for the membership tests on hot paths (is_float on every tensor op with a Python number): DType
# defines __lt__, so CPython compares two DTypes with == through a Python-level slot (~0.15 us), and `d in a_tuple`
# pays that for every element before d's (float32 is the floats' 7th); a set finds d by its identity hash
_FLOATS, _INTS, _UINTS = frozenset(dtypes.floats), frozenset(dtypes.ints), frozenset(dtypes.uints)

# the name each dtype prints as (tinygrad's: the C type's name where there is one); the others print their own name
SHORT_NAMES: dict[DType, str] = {
  dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort", dtypes.int32: "int",
  dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong", dtypes.float16: "half", dtypes.float32: "float",
  dtypes.float64: "double", dtypes.fp8e4m3: "fp8e4m3", dtypes.fp8e5m2: "fp8e5m2", dtypes.fp8e4m3fnuz: "fp8e4m3fnuz",
  dtypes.fp8e5m2fnuz: "fp8e5m2fnuz"}

def _wrap_int(v: int, d: DType) -> int:
  bits = d.itemsize * 8
  v &= (1 << bits) - 1
  if not dtypes.is_unsigned(d) and v >= 1 << (bits - 1): v -= 1 << bits
  return v

DTYPES_DICT: dict[str, DType] = {k: v for k, v in dtypes.__dict__.items()
                                 if isinstance(v, DType) and not k.startswith("default")
                                 and k not in ("void", "weakint", "weakfloat")}
def _dtype_by_repr(r: str) -> DType:
  """The DType a repr names ("dtypes.float", "dtypes.float32.vec(4)", "dtypes.half.ptr(-1)"): how a DType
  unpickles, parsed (never eval'd: a pickle's bytes are not trusted code)."""
  name, *calls = r.removeprefix("dtypes.").split(".")
  d = getattr(dtypes, name, None) if name.isidentifier() and not name.startswith("_") else None
  if not isinstance(d, DType): raise ValueError(f"not a dtype's repr: {r!r}")
  for c in calls:
    fn, _, arg = c.partition("(")
    if fn not in ("vec", "ptr") or not arg.endswith(")") or not arg[:-1].lstrip("-").isdigit():
      raise ValueError(f"not a dtype's repr: {r!r}")
    d = getattr(d, fn)(int(arg[:-1]))
  return d

class DTypeInferenceError(TypeError, RuntimeError):
  """A Python value with no dtype (None, a dict, a NumPy scalar in a list). A TypeError, and a RuntimeError as tinygrad
  raises there."""

class WeakDTypeError(TypeError, ValueError, RuntimeError):
  """A weak dtype where storage or a concrete dtype is needed (Tensor(list, dtype=dtypes.weakfloat), rand in one): it
  has no layout. A TypeError and a ValueError, and a RuntimeError as tinygrad raises for storage."""

class DTypeNameError(TypeError, AttributeError):
  """An unknown dtype name. A TypeError, and an AttributeError as well: tinygrad's to_dtype looks names up with getattr
  on `dtypes`, so tinygrad code catches that."""

def to_dtype(x: DType | str) -> DType:
  """Accept a DType or its name ('float32', 'half', ...); raise a clear error otherwise."""
  if isinstance(x, DType): return x
  if isinstance(x, str) and x in DTYPES_DICT: return DTYPES_DICT[x]
  np_name = getattr(x, "name", None) if not isinstance(x, str) else None  # numpy dtypes and torch-style names
  if isinstance(np_name, str) and np_name in DTYPES_DICT: return DTYPES_DICT[np_name]
  raise DTypeNameError(f"invalid dtype {x!r}; valid dtypes are {sorted(k for k in DTYPES_DICT)}")

# Promotion: an edge a -> b means b can hold every value of a (or is the agreed upgrade, as in PyTorch for int -> half).
# The fp8s sit between the ints and half/bfloat16 as in tinygrad: int op fp8 stays fp8 (like int op half in PyTorch),
# fp8e4m3 op fp8e5m2 is half (PyTorch refuses to promote fp8s at all).
# int64 and uint64 meet only at weakfloat (as in tinygrad and JAX): no int holds both, and any float is a choice, the
# default float (where a weakfloat tensor is stored) rather than the first fp8 above them, which kept 3 mantissa bits
# of a 64-bit int.
promo_lattice: dict[DType, list[DType]] = {
  dtypes.bool: [dtypes.weakint], dtypes.weakint: [dtypes.int8, dtypes.uint8],
  dtypes.int8: [dtypes.int16], dtypes.int16: [dtypes.int32], dtypes.int32: [dtypes.int64],
  dtypes.int64: [dtypes.weakfloat], dtypes.uint8: [dtypes.int16, dtypes.uint16],
  dtypes.uint16: [dtypes.int32, dtypes.uint32], dtypes.uint32: [dtypes.int64, dtypes.uint64],
  dtypes.uint64: [dtypes.weakfloat], dtypes.weakfloat: list(dtypes.fp8s),
  **{d: [dtypes.float16, dtypes.bfloat16] for d in dtypes.fp8s},
  dtypes.float16: [dtypes.float32], dtypes.bfloat16: [dtypes.float32], dtypes.float32: [dtypes.float64]}

@functools.cache
def _get_recursive_parents(d: DType) -> frozenset[DType]:
  if d is dtypes.float64: return frozenset([dtypes.float64])
  return frozenset([d]).union(*[_get_recursive_parents(p) for p in promo_lattice[d]])

def strong_dtype(d: DType) -> DType:
  """The dtype a weak dtype stands for in a tensor: weakint -> default_int, weakfloat -> default_float."""
  return dtypes.default_int if d is dtypes.weakint else dtypes.default_float if d is dtypes.weakfloat else d

def weak_dtype(d: DType) -> DType:
  """The weak dtype of d's kind (weakfloat for floats, weakint for ints); bool and others as they are."""
  return dtypes.weakfloat if dtypes.is_float(d) else dtypes.weakint if dtypes.is_int(d) else d

@functools.cache
def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype every one of `ds` promotes to in the lattice above, as in tinygrad: the dtype of an op on
  tensors of dtypes `ds`. It is weak where the lattice meets at a weak dtype, with a weak dtype among `ds` (int8 with
  weakfloat is weakfloat) or without one (int64 with uint64 meet only at weakfloat: no int holds both; PyTorch refuses
  the pair). A tensor of a weak dtype is stored in its strong dtype (strong_dtype), so it computes and reads back
  there; the weak dtype only says how it promotes next."""
  return min(frozenset.intersection(*[_get_recursive_parents(d.scalar()) for d in ds]))

def least_upper_float(d: DType) -> DType:
  if d is dtypes.weakint: return dtypes.weakfloat
  return d if dtypes.is_float(d) else least_upper_dtype(d, dtypes.default_float)
@functools.cache  # on the path of every sum and matmul
def sum_acc_dtype(d: DType) -> DType:
  """The dtype sums and matmuls accumulate in: bools and ints widen to (u)int32 (and return in it, like PyTorch's
  int64 rule), floats narrower than float32 (half, bfloat16, fp8) accumulate in float32 and round once at the end."""
  if dtypes.is_unsigned(d): return least_upper_dtype(d, dtypes.uint32)
  if dtypes.is_int(d) or d is dtypes.bool: return least_upper_dtype(d, dtypes.int32)
  return least_upper_dtype(d, dtypes.float32)

def _set_default_float() -> None:
  name = os.getenv("DEFAULT_FLOAT", "")  # (helpers.getenv reads a str the same way; dtype sits below helpers)
  if name:
    want = {"HALF": "half", "FLOAT": "float", "DOUBLE": "double", "BFLOAT16": "bfloat16", "FLOAT16": "float16",
            "FLOAT32": "float32", "FLOAT64": "float64"}.get(name.upper(), name.lower())
    if want not in DTYPES_DICT or not dtypes.is_float(DTYPES_DICT[want]):
      raise ValueError(f"DEFAULT_FLOAT={name} is not a float dtype; use HALF, BFLOAT16, FLOAT or DOUBLE")
    dtypes.default_float = DTYPES_DICT[want]
_set_default_float()

# ***** conversions between Python values and bytes *****

def float_to_bf16_bits(x: float) -> int:
  """Round-to-nearest-even float32 -> bfloat16, as integer bits."""
  u = struct.unpack("<I", struct.pack("<f", x))[0]
  if math.isnan(x): return 0x7FC0
  return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF

def bf16_bits_to_float(b: int) -> float: return struct.unpack("<f", struct.pack("<I", (b & 0xFFFF) << 16))[0]

def _to_f32(x: float) -> float:
  try: return struct.unpack("<f", struct.pack("<f", x))[0]
  except OverflowError: return math.copysign(math.inf, x)

def fp8_bias(d: DType) -> int:
  """The exponent bias of an fp8: 2**(e-1) - 1 for the OCP formats, one more for the fnuz ones."""
  return (1 << (dtypes.finfo(d)[0] - 1)) - (0 if d in dtypes.fp8_fnuz else 1)

def fp8_max_code(d: DType) -> int:
  """The bits of an fp8's largest finite value: e4m3fn's S.1111.111 is NaN and e5m2's top exponent is inf/NaN, while
  every code but 0x80 is a number in the fnuz formats."""
  return {dtypes.fp8e4m3: 0x7E, dtypes.fp8e5m2: 0x7B}.get(d, 0x7F)

def float_to_fp8_bits(x: float, d: DType) -> int:
  """float -> fp8 bits as PyTorch casts to float8_e4m3fn/e5m2/e4m3fnuz/e5m2fnuz: through float32 first, then round to
  nearest even. Past the largest finite value (inf too) fp8e4m3 saturates to +-448, fp8e5m2 becomes +-inf and the fnuz
  formats become their NaN, 0x80; NaN keeps its sign in the OCP formats, and fnuz has no -0 (tiny negatives give 0).
  (The kernels' versions are in renderer/cstyle.py and renderer/llvmir.py; this one is the reference.)"""
  f = _to_f32(float(x))
  fnuz = d in dtypes.fp8_fnuz
  sign = 0x80 if math.copysign(1.0, f) < 0 else 0
  if math.isnan(f): return 0x80 if fnuz else sign | 0x7F
  over = 0x80 if fnuz else sign | (0x7E if d is dtypes.fp8e4m3 else 0x7C)  # e4m3 saturates, e5m2 goes to inf
  if math.isinf(f): return over
  m_bits, bias = dtypes.finfo(d)[1], fp8_bias(d)
  a = abs(f)
  if a == 0: return 0 if fnuz else sign
  e = max(math.frexp(a)[1] - 1, 1 - bias)   # the binade's exponent; subnormals share the smallest normal one
  n = round(a * 2.0 ** (m_bits - e))        # exact scaling; Python's round() breaks ties to even
  if n >= 2 << m_bits: e, n = e + 1, n >> 1  # rounded up into the next binade (n was exactly 2**(m+1))
  # subnormal (or rounded up to the smallest normal: n == 2**m encodes it), else exponent and mantissa fields
  code = n if n < 1 << m_bits else ((e + bias) << m_bits) | (n - (1 << m_bits))
  if code > fp8_max_code(d): return over     # e5m2 rounds up to inf from 61440 on, e4m3fnuz to NaN from 248
  return 0 if fnuz and code == 0 else sign | code

def fp8_bits_to_float(b: int, d: DType) -> float:
  e_bits, m_bits = dtypes.finfo(d)
  bias = fp8_bias(d)
  sign = -1.0 if b & 0x80 else 1.0
  e, m = (b >> m_bits) & ((1 << e_bits) - 1), b & ((1 << m_bits) - 1)
  # e4m3fn: S.1111.111 is its only NaN and it has no inf; NaNs keep their sign, like the kernels' conversions
  if d is dtypes.fp8e4m3 and (b & 0x7F) == 0x7F: return math.copysign(math.nan, sign)
  if d is dtypes.fp8e5m2 and e == 0x1F: return math.copysign(math.inf if m == 0 else math.nan, sign)
  if d in dtypes.fp8_fnuz and b == 0x80: return math.nan  # the one NaN, where -0 would be
  if e == 0: return sign * m * 2.0 ** (1 - bias - m_bits)
  return sign * (1 + m / (1 << m_bits)) * 2.0 ** (e - bias)

def from_storage_scalar(x: Any, dtype: DType) -> Any:
  """tinygrad's: the value stored as the integer bits `x` for bfloat16 and the fp8s (as a Python float); any other
  dtype's value is `x` itself."""
  if dtype is dtypes.bfloat16: return bf16_bits_to_float(int(x))
  if dtype in dtypes.fp8s: return fp8_bits_to_float(int(x) & 0xFF, dtype)
  return x

def to_storage_scalar(x: Any, dtype: DType) -> Any:
  """tinygrad's: the inverse of from_storage_scalar, the integer bits that store `x` as bfloat16 or an fp8."""
  if dtype is dtypes.bfloat16: return float_to_bf16_bits(_to_f32(float(x)))
  if dtype in dtypes.fp8s: return float_to_fp8_bits(float(x), dtype)
  return x

def truncate_to(x: Any, dtype: DType) -> Any:
  """Round a Python value to what `dtype` can hold (used by the PYTHON device and constant folding)."""
  d = dtype.scalar()
  if d is dtypes.bool: return bool(x)
  if dtypes.is_int(d): return dtypes.as_const(x, d)
  try: x = float(x)  # an int past a float's range would make struct raise its own error, not OverflowError
  except OverflowError: return math.inf if x > 0 else -math.inf
  if d is dtypes.float64: return x
  try:
    if d is dtypes.float32: return struct.unpack("<f", struct.pack("<f", x))[0]
    if d is dtypes.float16: return struct.unpack("<e", struct.pack("<e", x))[0]
  except OverflowError: return math.copysign(math.inf, x)
  if d is dtypes.bfloat16:
    if math.isinf(x) or math.isnan(x): return x
    try: return bf16_bits_to_float(float_to_bf16_bits(struct.unpack("<f", struct.pack("<f", x))[0]))
    except OverflowError: return math.copysign(math.inf, x)
  if d in dtypes.fp8s: return fp8_bits_to_float(float_to_fp8_bits(x, d), d)
  return x

# ***** tinygrad's helper names: the same conversions, as tinygrad code imports them from tinygrad.dtype *****

def float_to_fp16(x: Any) -> float: return truncate_to(float(x), dtypes.float16)
def float_to_bf16(x: Any) -> float: return truncate_to(float(x), dtypes.bfloat16)
def float_to_fp8(x: Any, dtype: DType) -> int: return float_to_fp8_bits(float(x), _need_fp8(dtype, "float_to_fp8"))
def fp8_to_float(x: int, dtype: DType) -> float: return fp8_bits_to_float(int(x), _need_fp8(dtype, "fp8_to_float"))
def _need_fp8(d: DType, op: str) -> DType:
  if d not in dtypes.fp8s: raise TypeError(f"{op}: {d} is not an fp8 dtype; fp8 dtypes are {list(dtypes.fp8s)}")
  return d

# dtype -> the function that rounds (floats, saturating or overflowing as a cast does) or wraps (ints) a Python value to
# that dtype: truncate[dtypes.fp8e4m3](1000.0) == 448.0, truncate[dtypes.uint8](257) == 1
truncate: dict[DType, Callable[[Any], Any]] = {d: functools.partial(truncate_to, dtype=d) for d in dtypes.all}

def _float_range(d: DType) -> tuple[int, float, int, bool, bool]:
  """(mantissa bits, largest finite value, exponent of the smallest subnormal, has inf, has -0) of a float dtype."""
  e_bits, m_bits = dtypes.finfo(d)
  bias = fp8_bias(d) if d in dtypes.fp8s else (1 << (e_bits - 1)) - 1
  # IEEE-like formats: the top exponent is inf/NaN, so the largest value has the one below it
  top = FP8_NO_INF[d] if d in FP8_NO_INF else (2 - 0.5 ** m_bits) * 2.0 ** ((1 << e_bits) - 2 - bias)
  return m_bits, top, 1 - bias - m_bits, d not in FP8_NO_INF, d not in dtypes.fp8_fnuz

@functools.cache
def can_lossless_cast(dt0: DType, dt1: DType) -> bool:
  """Whether every value of dt0 is also a value of dt1 (so a cast there and back is exact). Decided from the formats
  (bits, ranges, subnormals, inf and -0), so it also says yes where it holds for bfloat16 (uint8 and the fp8s)."""
  if dt0 is dt1 or dt0 is dtypes.bool: return True
  if dt1 is dtypes.weakint: return dt0 in dtypes.ints
  if dt1 is dtypes.bool or dt0 in dtypes.weaks or dt1 in dtypes.weaks: return False
  if dtypes.is_int(dt0) and dtypes.is_int(dt1):
    return dtypes.min(dt1) <= dtypes.min(dt0) and dtypes.max(dt0) <= dtypes.max(dt1)
  if dtypes.is_int(dt0):  # a float holds every int whose magnitude bits fit in its significand (mantissa + 1)
    return dt0.itemsize * 8 - (0 if dtypes.is_unsigned(dt0) else 1) <= dtypes.finfo(dt1)[1] + 1
  if not dtypes.is_float(dt1): return False
  (m0, top0, sub0, inf0, nz0), (m1, top1, sub1, inf1, nz1) = _float_range(dt0), _float_range(dt1)
  return m0 <= m1 and top0 <= top1 and sub1 <= sub0 and inf1 >= inf0 and nz1 >= nz0

def _to_np_dtype(dtype: DType) -> Any:
  """The NumPy scalar type of `Tensor.numpy()` for `dtype`: float32 for bfloat16 and the fp8s, None where none."""
  import numpy as np
  if dtype is dtypes.bfloat16 or dtype in dtypes.fp8s: return np.float32
  return np.dtype(dtype.name).type if dtype.fmt is not None else None
def _from_np_dtype(npdtype: Any) -> DType: return from_np_dtype(npdtype)

def _to_torch_dtype(dtype: DType) -> Any:
  """The torch dtype that holds `dtype`'s values (weak dtypes as their strong ones); the fp8s as their bits, uint8,
  as tinygrad's tests read them (fp8_to_float turns those bits into values). Not cached: weakfloat follows
  Context(DEFAULT_FLOAT=...)."""
  import torch
  d = strong_dtype(dtype)
  if d in dtypes.fp8s: return torch.uint8
  return getattr(torch, d.name, None) if d in dtypes.all else None
@functools.cache
def _from_torch_dtype(torchdtype: Any) -> DType:
  """The dtype of a torch dtype (torch.float8_e4m3fn is fp8e4m3: our dtypes carry torch's names)."""
  import torch
  found = {t: d for d in DTYPES_DICT.values() if isinstance(t := getattr(torch, d.name, None), torch.dtype)}
  if torchdtype not in found: raise TypeError(f"_from_torch_dtype: torch dtype {torchdtype} has no attograd dtype")
  return found[torchdtype]

def to_np_dtype(d: DType) -> Any:
  import numpy as np
  if d.fmt is None: raise TypeError(f"numpy has no {d.name}: cast to float32 first (t.float().numpy())")
  return np.dtype(d.name)
def from_np_dtype(npd: Any) -> DType:
  import numpy as np
  name = np.dtype(npd).name
  if name not in DTYPES_DICT:
    ok = [d.name for d in dtypes.all if d.fmt is not None]
    raise TypeError(f"numpy dtype {name} is not supported; supported: {ok}")
  return DTYPES_DICT[name]

FmtStr = Literal["?", "b", "B", "h", "H", "i", "I", "q", "Q", "e", "f", "d"]
