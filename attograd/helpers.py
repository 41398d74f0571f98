"""Small shared utilities: environment flags, Context, counters, caching paths and tiny functional helpers."""
from __future__ import annotations
import collections, contextlib, dataclasses, functools, gc, hashlib, itertools, math, os, pathlib, pickle, shutil
import struct, sys, tempfile, time
from typing import Any, Callable, Generic, Iterable, Iterator, Sequence, TypeVar
from attograd.dtype import DTYPES_DICT, DType, dtypes

T = TypeVar("T")

def prod(xs: Iterable[Any], start: Any = 1) -> Any:
  ret = functools.reduce(lambda a, b: a * b, xs, start)
  return _simplified(ret) if ret.__class__ is not int else ret
def _simplified(x: Any) -> Any:
  """A symbolic size (a UOp; this module sits below them) in its simplest form, so (a*3)*4 is a*12; else x."""
  return x.ssimplify() if hasattr(x, "ssimplify") else x
def all_same(xs: Sequence[Any]) -> bool: return all(x == xs[0] for x in xs)
def all_int(xs: Iterable[Any]) -> bool: return all(isinstance(x, int) for x in xs)
def dedup(xs: Iterable[T]) -> list[T]: return list(dict.fromkeys(xs))
def flatten(xss: Iterable[Iterable[T]]) -> list[T]: return [x for xs in xss for x in xs]
def ceildiv(a: int, b: int) -> int:
  # a symbolic size divides as C does (toward zero), so -(-a // b) would round the wrong way; (a + b - 1) // b is
  # the ceiling for the non-negative sizes it is used with
  return -(-a // b) if a.__class__ is int and b.__class__ is int else _simplified((a + (b - 1)) // b)
def round_up(a: int, b: int) -> int: return ceildiv(a, b) * b
def argsort(xs: Sequence[Any]) -> list[int]: return sorted(range(len(xs)), key=xs.__getitem__)

class ArgumentError(ValueError, RuntimeError):
  """A Tensor op given shapes, axes or options that don't fit together (matmul's inner dims, a permutation that
  isn't one, an unknown mode, a negative std). A ValueError like attograd's other argument errors, and a RuntimeError
  because PyTorch and tinygrad raise that for the same mistakes, so code ported from either that catches it works."""

class AxisError(ArgumentError, IndexError):
  """A dim the tensor doesn't have (cat of 0-d tensors): an ArgumentError (PyTorch raises RuntimeError for that cat),
  and an IndexError as tinygrad and Python raise for a missing dim."""

class AssertedArgumentError(ArgumentError, AssertionError):
  """An ArgumentError for a check tinygrad makes with `assert` (multinomial's weights and sample count): also an
  AssertionError, so code ported from tinygrad that catches that keeps working."""

class UnknownModeError(ValueError, NotImplementedError):
  """A `mode=` an op doesn't have (pad's "typo"): a ValueError like attograd's other argument errors, and a
  NotImplementedError because PyTorch and tinygrad raise that for it."""

class DTypeOpError(TypeError, RuntimeError):
  """A Tensor op that doesn't accept an input's dtype (a shift of a float tensor, an int raised to a negative int).
  A TypeError, and a RuntimeError as PyTorch raises for these."""

def mv_address(mv: memoryview) -> int:
  """The address of a writable memoryview's first byte, for Tensor.from_blob (which reads the memory in place)."""
  import ctypes
  if mv.readonly: raise TypeError("mv_address: the memoryview is read-only; from_blob needs writable memory")
  return ctypes.addressof(ctypes.c_char.from_buffer(mv))

def argfix(*x: Any) -> tuple[Any, ...]:
  """Accept f(1, 2), f((1, 2)) and f([1, 2]) alike."""
  if x and x[0].__class__ in (tuple, list):
    if len(x) != 1: raise ValueError(f"bad arg {x}: pass either one sequence or several values")
    return tuple(x[0])
  return x

def make_tuple(x: int | Sequence[int], cnt: int) -> tuple[int, ...]:
  return (x,) * cnt if isinstance(x, int) else tuple(x)

def _nested(x: Any) -> bool:
  # a sequence to flatten: not a string, and not a 0-d array (numpy's has __len__ but no length)
  return hasattr(x, "__len__") and hasattr(x, "__getitem__") and not isinstance(x, (str, bytes)) \
    and getattr(x, "shape", None) != ()
def fully_flatten(x: Any) -> list[Any]:
  """The leaves of nested sequences (lists, tuples, arrays) in order; a 0-d array is one leaf (its value)."""
  if not _nested(x): return [x[()] if getattr(x, "shape", None) == () and hasattr(x, "__getitem__") else x]
  out: list[Any] = []
  stack: list[Iterator[Any]] = [iter(x)]
  while stack:
    for y in stack[-1]:
      if _nested(y):
        stack.append(iter(y))
        break
      out.append(y[()] if getattr(y, "shape", None) == () and hasattr(y, "__getitem__") else y)
    else: stack.pop()
  return out

# ***** tinygrad's small public helpers (tinygrad code imports them from tinygrad.helpers) *****

def merge_dicts(ds: Iterable[dict[Any, Any]]) -> dict[Any, Any]:
  """One dict holding every key of `ds`; a key given two different values raises RuntimeError."""
  out: dict[Any, Any] = {}
  for d in ds:
    for k, v in d.items():
      if k in out and out[k] != v: raise RuntimeError(f"merge_dicts: key {k!r} has two values, {out[k]!r} and {v!r}")
      out[k] = v
  return out

def strip_parens(s: str) -> str:
  """`s` without one pair of parentheses around all of it: "(a+(b))" -> "a+(b)"; "(a)+(b)" and "(int)(x)" stay."""
  if not (s.startswith("(") and s.endswith(")")): return s
  depth = 0
  for i, c in enumerate(s):
    depth += (c == "(") - (c == ")")
    if depth == 0 and i != len(s) - 1: return s  # the first "(" closes before the end: it doesn't wrap everything
  return s[1:-1] if depth == 0 else s

class count:
  """itertools.count(start, step) that pickles (itertools' own stopped pickling in Python 3.14)."""
  def __init__(self, start: int = 0, step: int = 1): self.n, self.step = start, step
  def __iter__(self) -> count: return self
  def __next__(self) -> int:
    self.n += self.step
    return self.n - self.step

def time_to_str(t: float, w: int = 8) -> str:
  """A duration in seconds as fixed-width text in s, ms or us: the unit where the number stays under 10000."""
  return next((f"{t * m:{w}.2f}{u}" for m, u in ((1, "s "), (1e3, "ms"), (1e6, "us")) if t * m > 10 or u == "us"))

def cdiv(a: int, b: int) -> int:
  """Integer division rounding toward zero, as C does (Python's // rounds down)."""
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q
def cmod(a: int, b: int) -> int:
  """C's remainder: the sign of `a` (Python's % takes the sign of b); a == cdiv(a, b) * b + cmod(a, b)."""
  return a - cdiv(a, b) * b

def getbits(value: int, start: int, end: int) -> int:
  """Bits start..end (inclusive, 0 the lowest) of `value`, shifted down."""
  return (value >> start) & ((1 << (end - start + 1)) - 1)

def ansistrip(s: str) -> str:
  """`s` without its ANSI color codes (what colored() adds)."""
  import re
  return re.sub(r"\x1b\[[0-9;]*m", "", s)

def word_wrap(s: str, wrap: int = 80) -> str:
  """Each line of `s` cut into lines of at most `wrap` visible characters; color codes count for nothing and are never
  split."""
  import re
  out = []
  for line in s.split("\n"):
    cur, n = "", 0
    for tok in re.findall(r"\x1b\[[0-9;]*m|.", line):
      if not tok.startswith("\x1b"):
        if n == wrap:
          out.append(cur)
          cur, n = "", 0
        n += 1
      cur += tok
    out.append(cur)
  return "\n".join(out)

def get_shape(x: Any) -> tuple[int, ...]:
  """The shape of nested lists or tuples (() for a scalar); ValueError if they are ragged."""
  if not isinstance(x, (list, tuple)): return ()
  shapes = [get_shape(y) for y in x]
  if not all_same(shapes): raise ValueError(f"get_shape: inhomogeneous shape, the items have shapes {dedup(shapes)}")
  return (len(x),) + (shapes[0] if shapes else ())

def polyN(x: T, coeffs: Sequence[float]) -> T:
  """The polynomial with `coeffs` (highest power first) at x, by Horner's rule: for numbers, Tensors or UOps."""
  out: Any = 0.0
  for c in coeffs: out = out * x + c
  return out

def is_numpy_ndarray(x: Any) -> bool:
  """Whether x is a numpy array, without importing numpy (tinygrad.tensor's name; a Tensor or a list is not)."""
  return type(x).__module__ == "numpy" and type(x).__name__ == "ndarray"

def from_mv(mv: memoryview, to_type: Any = None) -> Any:
  """A ctypes array over a memoryview's bytes (sharing them, no copy)."""
  import ctypes
  return (to_type if to_type is not None else ctypes.c_char * mv.nbytes).from_buffer(mv)
def to_mv(ptr: int, sz: int) -> memoryview:
  """A byte memoryview of `sz` bytes at address `ptr` (no copy): the caller keeps the memory alive."""
  import ctypes
  return memoryview((ctypes.c_uint8 * sz).from_address(ptr)).cast("B")

CHUNK_SIZE = 2 ** 20  # tinyfs (nn/tinyfs.py): the bytes of a stored chunk, and of a node of a blob's hash tree

@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
  """Read an environment variable, converted to the type of `default`."""
  val = os.getenv(key, "")
  if val == "": return default  # set but empty means unset
  try: return type(default)(val)
  except ValueError:
    raise ValueError(f"environment variable {key}={val!r} should be a {type(default).__name__}") from None

class ContextVar:
  """A named setting read from the environment once, changeable in code with `Context(NAME=value)`.

  `on_set`, if given, is called with each value `Context` sets (and restores): it validates the value and applies it
  where a plain read of `.value` isn't enough (DEFAULT_FLOAT updates `dtypes.default_float`)."""
  _cache: dict[str, ContextVar] = {}
  def __init__(self, key: str, default: Any, on_set: Callable[[Any], Any] | None = None):
    if key in ContextVar._cache: raise RuntimeError(f"ContextVar {key} is defined twice")
    self.key, self.value, self.on_set = key, getenv(key, default), on_set
    ContextVar._cache[key] = self
  def set(self, value: Any) -> None:
    self.value = value if self.on_set is None else self.on_set(value)
  def __bool__(self) -> bool: return bool(self.value)
  def __ge__(self, x: int) -> bool: return self.value >= x
  def __gt__(self, x: int) -> bool: return self.value > x
  def __lt__(self, x: int) -> bool: return self.value < x
  def __le__(self, x: int) -> bool: return self.value <= x
  def __eq__(self, x: object) -> bool: return self.value == x
  def __hash__(self) -> int: return hash(self.key)
  def __repr__(self) -> str: return f"{self.key}={self.value}"

# tinygrad flags that tinygrad code sets but that steer machinery attograd doesn't have: Context accepts them (so that
# code runs unchanged) and they change nothing here. Each says why; they are made on first use, so that a module that
# later gives one a real meaning can define it without a clash.
TINYGRAD_ONLY_FLAGS: dict[str, str] = {
  "SPEC": "tinygrad's UOp spec verification level; attograd checks shapes and dtypes when each op is built",
  "EMULATED_DTYPES": "tinygrad's software emulation of dtypes a backend lacks",
  "WINO": "tinygrad's Winograd convolution rewrite; attograd has none",
  "TRANSCENDENTAL": "tinygrad's choice of polynomial sin/exp/log; attograd picks per backend",
  "SCACHE": "tinygrad's schedule cache switch; attograd's schedule cache is always on",
  "SPLIT_REDUCEOP": "tinygrad's splitting of big reductions; attograd's heuristic decides",
  "ALLOW_TF32": "TF32 tensor cores on NVIDIA",
  "IMAGE": "tinygrad's image (texture) dtypes for Qualcomm GPUs",
  "RING": "tinygrad's ring all-reduce choice", "ALL2ALL": "tinygrad's all-to-all all-reduce choice",
  "ALLREDUCE_CAST": "tinygrad's all-reduce cast", "PCONTIG": "tinygrad's partial-contiguous rangeify pass",
  "NO_COLOR": "tinygrad's colored debug output", "DISABLE_FAST_IDIV": "tinygrad's fast integer division rewrite",
  "USE_ATOMICS": "tinygrad's atomic scatter kernels", "TRACEMETA": "tinygrad's UOp creation-site metadata",
  "OPENPILOT_HACKS": "tinygrad's openpilot-specific rewrites",
  "PARALLEL": "tinygrad's parallel compile workers", "MAX_KERNEL_BUFFERS": "tinygrad's per-kernel buffer limit",
  "FLOAT16": "tinygrad's half-precision image hack", "VIZ": "tinygrad's graph viewer",
  "VALIDATE_WITH_CPU": "tinygrad's re-running of kernels on CPU to compare",
  "TUPLE_ORDER": "tinygrad's tuple ordering in its scheduler", "TC": "tinygrad's tensor-core switch",
  "TC_SELECT": "tinygrad's tensor-core choice", "TC_OPT": "tinygrad's tensor-core options",
  "MAX_BUFFER_SIZE": "tinygrad's buffer size limit",
  "LRU": "tinygrad's LRU allocator switch", "JIT_BATCH_SIZE": "tinygrad's batching of jitted kernels into graphs",
  "FUSE_OPTIM": "tinygrad's concatenation of all optimizer parameters",
  "CAPTURE_PROCESS_REPLAY": "tinygrad's process-replay recorder", "NOLOCALS": "tinygrad's local-memory switch",
  "CHECK_OOB": "tinygrad's static out-of-bounds proof of each load; attograd checks a view's bounds when it is built "
               "(a symbolic shrink past the buffer reads zeros)",
  "QUANTIZE": "tinygrad's ONNX quantization switch", "VARIABLE": "a test-local tinygrad flag",
}

def _context_var(key: str) -> ContextVar:
  if (cv := ContextVar._cache.get(key)) is not None: return cv
  if key in TINYGRAD_ONLY_FLAGS: return ContextVar(key, 0)
  known = sorted(set(ContextVar._cache) | set(TINYGRAD_ONLY_FLAGS))
  raise KeyError(f"Context: unknown flag {key!r}; known flags are {known}")

class Context(contextlib.ContextDecorator):
  """Set flags for a block: `with Context(DEBUG=2): ...` or `@Context(TRAINING=1)` on a function."""
  def __init__(self, **kwargs: Any): self.kwargs = kwargs
  def __enter__(self) -> None:
    # a stack: one Context object may be entered again (a decorated function calling itself) before it exits
    self.__dict__.setdefault("olds", []).append(olds := {})
    try:
      for k, v in self.kwargs.items():
        cv = _context_var(k)
        olds[k] = cv.value
        cv.set(v)
    except BaseException:
      self.__exit__()
      raise
  def __exit__(self, *args: Any) -> None:
    for k, v in reversed(self.__dict__["olds"].pop().items()): ContextVar._cache[k].set(v)

DEBUG, NOOPT, BEAM = ContextVar("DEBUG", 0), ContextVar("NOOPT", 0), ContextVar("BEAM", 0)
JIT, CACHELEVEL = ContextVar("JIT", 1), ContextVar("CACHELEVEL", 2)
# JITBEAM=n: BEAM=n for the kernels a TinyJit captures (built once, replayed many times), the others as BEAM says
JITBEAM = ContextVar("JITBEAM", 0)
# CAPTURING=0: kernels run inside a TinyJit's capture are not recorded (one-time setup work the replays skip)
CAPTURING = ContextVar("CAPTURING", 1)
THREADS = ContextVar("THREADS", os.cpu_count() or 1)
# TRAINING: dropout drops, BatchNorm uses batch statistics and updates its running ones, and optimizers may step.
# Tensor.training and Tensor.train() read and set this same flag.
TRAINING = ContextVar("TRAINING", 0)
def _default_dtype(kind: str) -> Callable[[Any], Any]:
  """on_set for DEFAULT_FLOAT / DEFAULT_INT: a DType or its name ('half', 'FLOAT16', ...), checked to be of its kind
  and written to dtypes.default_float / default_int (read when a Python number or list becomes a Tensor)."""
  def apply(value: Any) -> Any:
    name = value if isinstance(value, str) else getattr(value, "name", None)
    d = value if isinstance(value, DType) else DTYPES_DICT.get(name.lower()) if isinstance(name, str) else None
    ok = d is not None and (dtypes.is_float(d) if kind == "float" else dtypes.is_int(d))
    if not ok:
      raise ValueError(f"DEFAULT_{kind.upper()}: {value!r} is not a{'n integer' if kind == 'int' else ' float'} dtype")
    setattr(dtypes, f"default_{kind}", d)
    return d
  return apply
DEFAULT_FLOAT = ContextVar("DEFAULT_FLOAT", "float32", on_set=_default_dtype("float"))
DEFAULT_INT = ContextVar("DEFAULT_INT", "int32", on_set=_default_dtype("int"))
@dataclasses.dataclass(frozen=True)
class Target:
  """One target of a DEV string, in tinygrad's form `[interface[:indices]+]device[:renderer[:arch]]` ("USB+AMD",
  "CPU:LLVM", "AMD:LLVM:gfx1100"); device and renderer are upper-cased. attograd reads only `device` (Device.DEFAULT);
  the other fields are kept for code that reads them."""
  device: str = ""
  renderer: str = ""
  arch: str = ""
  interface: str = ""
  indices: str = ""
  @staticmethod
  def parse(s: str) -> Target:
    head, plus, rest = s.partition("+")
    if plus and "+" in rest: raise RuntimeError(f"too many '+' in target string: {s!r}")
    iface, _, idx = head.rpartition(":") if plus and ":" in head else (head if plus else "", "", "")
    parts = (rest if plus else s).split(":")
    if len(parts) > 3: raise RuntimeError(f"too many ':' in target string: {s!r}")
    dev, ren, arch = (*(p.upper() for p in parts[:2]), *parts[2:], "", "")[:3]
    return Target(dev, ren, arch, iface, idx)
  def __repr__(self) -> str:
    where = ":".join([self.interface, self.indices]).rstrip(":")
    what = ":".join([self.device, self.renderer, self.arch]).rstrip(":")
    return f"{where}+{what}" if where else what

class _DevVar(ContextVar):
  """DEV: the default device, read from the environment and set for a block with `Context(DEV="NULL")`. Its value
  is a list of Targets (';' separates them), as in tinygrad; `string` is the text it was set from. The first
  target's device is the default device (Device.DEFAULT); for attograd a renderer part that is a number is a device
  number ("CL:1")."""
  _targets: list[Target] = [Target()]
  string = ""
  @property  # type: ignore[override]
  def value(self) -> list[Target]: return self._targets
  @value.setter
  def value(self, v: str | Target | list[Target]) -> None:
    self._targets = list(v) if isinstance(v, list) else [v] if isinstance(v, Target) else \
      [Target.parse(t) for t in str(v).split(";")]
    self.string = v if isinstance(v, str) else ";".join(repr(t) for t in self._targets)
  def __getattr__(self, k: str) -> Any:
    if k.startswith("_"): raise AttributeError(k)
    return getattr(self._targets[0], k)
  def __str__(self) -> str: return ";".join(repr(t) for t in self._targets)
  def __bool__(self) -> bool: return bool(self.string)
  def __repr__(self) -> str: return str(self)
  def target(self, dev: str, **kwargs: str) -> Target:
    """The target for device `dev`: the first that names it or names no device, its unset fields filled from
    kwargs; Target(dev) when none matches."""
    t = next((t for t in self._targets if t.device in ("", dev)), Target(dev))
    return dataclasses.replace(t, device=dev, **{k: v for k, v in kwargs.items() if not getattr(t, k)})
DEV = _DevVar("DEV", "")
CCACHE = ContextVar("CCACHE", 1)  # 0: compilers don't cache their binaries on disk (tinygrad's switch)
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", 0)  # BEAM searches again instead of reading its disk cache
# 0 inside a @function body: realizing there would run kernels while the function's graph is being traced
ALLOW_DEVICE_USAGE = ContextVar("ALLOW_DEVICE_USAGE", 1)
# 1: reading a NULL device buffer gives zeros instead of raising (runtime/ops_null.py)
NULL_ALLOW_COPYOUT = ContextVar("NULL_ALLOW_COPYOUT", 0)

class _GlobalCounters:
  """Counts of kernels run, operations and memory traffic since the last reset."""
  def __init__(self) -> None:
    self.global_ops, self.global_mem, self.time_sum_s, self.kernel_count = 0, 0, 0.0, 0
    self.mem_used = 0  # bytes of device memory held by Buffers now (not reset)
    self.mem_used_per_device: collections.defaultdict[str, int] = collections.defaultdict(int)  # the same, per device
  def reset(self) -> None:
    self.global_ops, self.global_mem, self.time_sum_s, self.kernel_count = 0, 0, 0.0, 0

# The one set of counters, used as tinygrad's class is (GlobalCounters.kernel_count, GlobalCounters.reset()). An
# instance, not a class with class attributes: the counters are written on every kernel run and every buffer
# allocated and freed, and writing a class attribute costs ~7x an instance's (it invalidates the type's caches)
GlobalCounters = _GlobalCounters()

def cache_dir() -> str:
  """Where compiled kernels live: $ATTOGRAD_CACHE_DIR, else $XDG_CACHE_HOME/attograd, else ~/.cache/attograd."""
  if (d := os.getenv("ATTOGRAD_CACHE_DIR")): return d
  base = os.getenv("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "attograd")

# ***** on-disk cache: one file per entry, checksummed, written atomically *****

# An entry is MAGIC, then the SHA-256 of everything after it, then the entry's own key (4-byte little-endian length,
# then "table/key"), then the payload. The key is stored and checked, not only implied by the file's name: a file
# moved or copied to another entry's name (or a stale one from another layout) must never hand back another kernel's
# program. MAGIC names the layout: bump it when the layout changes, and older entries are rebuilt.
_MAGIC = b"ATTOC002"
_HEAD = len(_MAGIC) + 32 + 4

def _cache_path(table: str, key: str) -> str: return os.path.join(cache_dir(), table, key[:2], key)

def _entry_key(table: str, key: str) -> bytes: return f"{table}/{key}".encode()

def _cache_entry(table: str, key: str, payload: bytes) -> bytes:
  """The bytes of an entry file."""
  body = struct.pack("<I", len(ek := _entry_key(table, key))) + ek + payload
  return _MAGIC + hashlib.sha256(body).digest() + body

def _cache_payload(table: str, key: str, data: bytes) -> bytes | None:
  """The payload of an entry file when it is whole, of this layout, and written for this key; else None."""
  if len(data) < _HEAD or data[:len(_MAGIC)] != _MAGIC: return None
  body = data[len(_MAGIC) + 32:]
  if hashlib.sha256(body).digest() != data[len(_MAGIC):len(_MAGIC) + 32]: return None  # truncated or damaged
  ek = _entry_key(table, key)
  n = struct.unpack_from("<I", body)[0]
  if n != len(ek) or body[4:4 + n] != ek: return None  # a whole entry, but of another key
  return body[4 + n:]

def disk_cache_get(table: str, key: str) -> bytes | None:
  """The cached bytes, or None when missing, corrupt, of another layout, or written for another key (such an entry
  is deleted, so it gets rebuilt)."""
  path = _cache_path(table, key)
  try:
    with open(path, "rb") as f: data = f.read()
  except OSError: return None
  if (payload := _cache_payload(table, key, data)) is not None: return payload
  if DEBUG >= 1: print(f"attograd: cache entry {path} is corrupt, of another version or of another key: rebuilt")
  try: os.unlink(path)
  except OSError: pass
  return None

def disk_cache_put(table: str, key: str, payload: bytes) -> None:
  path = _cache_path(table, key)
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # write a private temp file, then rename: concurrent writers never expose a half-written entry
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "wb") as f: f.write(_cache_entry(table, key, payload))
    os.replace(tmp, path)
  except OSError as e:
    if DEBUG >= 1: print(f"attograd: could not write cache entry {path}: {e}")

def _table_dir(table: str) -> str:
  # a tinygrad table name may hold any character ("test_gfx1010:xnack-"): a directory name of letters, digits and hex
  return "tg-" + "".join(c if c.isalnum() or c in "_-" else f"{ord(c):02X}" for c in table)

def _key_digest(key: dict | str | int) -> str:
  # tinygrad's keys: a string or an int (4 and "4" are one key) or a dict of column values
  items = sorted({"key": key}.items() if isinstance(key, (str, int)) else key.items())
  return hashlib.sha256(repr([(k, v if isinstance(v, bytes) else str(v)) for k, v in items]).encode()).hexdigest()

def diskcache_get(table: str, key: dict | str | int) -> Any:
  """tinygrad's: the value diskcache_put stored under (table, key), or None (missing, or CACHELEVEL=0)."""
  if CACHELEVEL < 1: return None
  data = disk_cache_get(_table_dir(table), _key_digest(key))
  return None if data is None else pickle.loads(data)

def diskcache_put(table: str, key: dict | str | int, val: Any, prepickled: bool = False) -> Any:
  """tinygrad's: store a picklable value (or, with prepickled, its pickle bytes) under (table, key) in the on-disk cache
  that every process shares; returns val."""
  if CACHELEVEL < 1: return val
  disk_cache_put(_table_dir(table), _key_digest(key), val if prepickled else pickle.dumps(val))
  return val

def diskcache(func: Callable[..., T]) -> Callable[..., T]:
  """tinygrad's: a function's results cached on disk by its pickled arguments (a None result is recomputed)."""
  @functools.wraps(func)
  def wrapper(*args: Any, **kwargs: Any) -> T:
    table, key = f"cache_{func.__name__}", hashlib.sha256(pickle.dumps((args, kwargs))).hexdigest()
    if (ret := diskcache_get(table, key)) is not None: return ret
    return diskcache_put(table, key, func(*args, **kwargs))
  return wrapper


class Timing(contextlib.ContextDecorator):
  def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
    self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
  def __enter__(self) -> None: self.st = time.perf_counter_ns()
  def __exit__(self, *exc: Any) -> None:
    self.et = time.perf_counter_ns() - self.st
    if self.enabled: print(f"{self.prefix}{self.et*1e-6:6.2f} ms" + (self.on_exit(self.et) if self.on_exit else ""))

def colored(s: str, color: str | None) -> str:
  codes = {"red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}
  return s if color is None or not sys.stdout.isatty() else f"\x1b[{codes[color]}m{s}\x1b[0m"

def to_function_name(s: str) -> str: return "".join(c if c.isalnum() or c == "_" else f"{ord(c):02X}" for c in s)

def unwrap(x: T | None) -> T:
  assert x is not None
  return x

def partition(xs: Iterable[T], fn: Callable[[T], bool]) -> tuple[list[T], list[T]]:
  a: list[T] = []
  b: list[T] = []
  for x in xs: (a if fn(x) else b).append(x)
  return a, b

def pairwise(xs: Iterable[T]) -> Iterator[tuple[T, T]]: return itertools.pairwise(xs)
def is_pow2(x: int) -> bool: return x > 0 and (x & (x - 1)) == 0
def log2i(x: int) -> int: return int(math.log2(x))

# ***** progress bars *****

def _si(x: float) -> str:
  """x with an SI prefix in about 4 characters: 950 -> '950', 12345 -> '12.3k', 3.2e9 -> '3.20G'."""
  for p in ("", "k", "M", "G", "T", "P"):
    if abs(x) < 999.5 or p == "P": return f"{x:.3g}{p}" if x >= 100 or x == int(x) else f"{x:.2f}{p}"
    x /= 1000
  return f"{x:.3g}P"

def _hms(secs: float) -> str:
  m, s = divmod(int(secs), 60)
  h, m = divmod(m, 60)
  return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"

class tqdm(Generic[T]):
  """A small progress bar on stderr (tinygrad's own, a subset of the tqdm package): iterate it, or call update(n).

  >>> for i in tqdm(range(3), disable=True): pass
  """
  def __init__(self, iterable: Iterable[T] | None = None, desc: str = "", disable: bool | None = False,
               unit: str = "it", unit_scale: bool = False, total: int | None = None, rate: int = 100):
    self.disable = not sys.stderr.isatty() if disable is None else disable
    self.iterable, self.unit, self.unit_scale, self.rate = iterable, unit, unit_scale, rate
    self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else 0)  # type: ignore[arg-type]
    self.n, self.st, self.last = 0, time.perf_counter(), 0.0
    self.set_description(desc)
    self.update(0)
  def __iter__(self) -> Iterator[T]:
    if self.iterable is None: raise TypeError("tqdm: iterating needs an iterable (use update(n) without one)")
    for x in self.iterable:
      yield x
      self.update(1)
    self.update(close=True)
  def __enter__(self) -> tqdm[T]: return self
  def __exit__(self, *exc: Any) -> None: self.update(close=True)
  def set_description(self, desc: str) -> None: self.desc = f"{desc}: " if desc else ""
  def update(self, n: int = 0, close: bool = False) -> None:
    self.n += n
    now = time.perf_counter()
    # redraw at most `rate` times a second: a bar in a hot loop must not cost more than the loop
    if self.disable or (not close and n and now - self.last < 1 / self.rate): return
    self.last, elapsed = now, now - self.st
    fmt = _si if self.unit_scale else str
    count = f"{fmt(self.n)}/{fmt(self.total)}" if self.total else f"{fmt(self.n)}{self.unit}"
    speed = f"{_si(self.n / elapsed) if self.unit_scale else f'{self.n / elapsed:5.2f}'}" if self.n and elapsed else "?"
    eta = "" if not self.total else f"<{_hms(elapsed / self.n * (self.total - self.n))}" if self.n else "<?"
    suffix = f"{count} [{_hms(elapsed)}{eta}, {speed}{self.unit}/s]"
    bar = ""
    if self.total:
      frac = min(self.n / self.total, 1.0)
      width = max(shutil.get_terminal_size().columns - len(self.desc) - len(suffix) - 8, 1)
      bar = f"{100 * frac:3.0f}%|{('#' * int(width * frac)).ljust(width)}| "
    print("\r" + self.desc + bar + suffix, end="\n" if close else "", flush=True, file=sys.stderr)
  @classmethod
  def write(cls, s: str) -> None: print(f"\r\033[K{s}", flush=True, file=sys.stderr)

def trange(n: int, **kwargs: Any) -> tqdm[int]:
  """tqdm(range(n)): `for i in (t := trange(steps)): ...; t.set_description(f"loss {loss:.2f}")`."""
  return tqdm(range(n), total=n, **kwargs)

class disable_gc:
  """`with disable_gc():` or `@disable_gc()` (tinygrad's name): Python's cyclic garbage collector is off inside, then
  as it was before. A collection pause in a hot loop can cost more than the garbage it finds. Each entry remembers
  its own state, so nested and recursive uses restore the right one."""
  def __init__(self) -> None: self._was: list[bool] = []
  def __enter__(self) -> None:
    self._was.append(gc.isenabled())
    gc.disable()
  def __exit__(self, *exc: Any) -> None:
    if self._was.pop(): gc.enable()
  def __call__(self, fn: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
      with self: return fn(*args, **kwargs)
    return wrapper

# ***** downloads *****

def fetch(url: str, name: str | pathlib.Path | None = None, subdir: str | None = None, gunzip: bool = False,
          allow_caching: bool = not getenv("DISABLE_HTTP_CACHE"), headers: dict[str, str] | None = None,
          sha256: str | None = None, extract: bool = False) -> pathlib.Path:
  """Download `url` once into <cache_dir>/downloads (or to `name` if it is a path) and return the file's path.

  A cached copy is used unless allow_caching=False or it doesn't match `sha256`; a download that doesn't match
  `sha256` raises and leaves nothing behind. gunzip=True stores the decompressed bytes; extract=True unpacks a tar
  archive next to the file and returns that folder. A local path ('/...' or './...') is returned as it is.

  >>> fetch("./README.md")
  PosixPath('README.md')
  """
  import gzip, hashlib, tarfile, tempfile, urllib.error, urllib.request
  if url.startswith(("/", ".")): return pathlib.Path(url)
  headers = headers or {}
  if isinstance(name, pathlib.Path) or (name is not None and "/" in name): fp = pathlib.Path(name)
  else:
    # different request headers can give different content: they are part of the cached file's name
    hh = "_" + hashlib.md5("\n".join(f"{k}:{v}" for k, v in sorted(headers.items())).encode()).hexdigest() \
      if headers else ""
    base = name or hashlib.md5(url.encode()).hexdigest()
    fp = pathlib.Path(cache_dir()) / "downloads" / (subdir or "") / (base + hh + (".gunzip" if gunzip else ""))
  extract_dir = fp.parent / f"{fp.name}.extract"
  def _sha(p: pathlib.Path) -> str: return hashlib.sha256(p.read_bytes()).hexdigest()
  if not fp.is_file() or not allow_caching or (sha256 is not None and _sha(fp) != sha256):
    shutil.rmtree(extract_dir, ignore_errors=True)
    fp.parent.mkdir(parents=True, exist_ok=True)
    req = urllib.request.Request(url, headers={"User-Agent": "attograd", **headers})
    try: r = urllib.request.urlopen(req, timeout=30)
    except (urllib.error.URLError, OSError) as e:
      raise ConnectionError(f"fetch: can't download {url} ({e}); check the network, or put the file at {fp}") from e
    with r:
      length = int(r.headers.get("Content-Length") or 0)
      src: Any = gzip.GzipFile(fileobj=r) if gunzip else r
      h = hashlib.sha256()
      fd, tmp = tempfile.mkstemp(dir=fp.parent, prefix=".fetch-")
      try:
        with os.fdopen(fd, "wb") as f, tqdm[bytes](total=None if gunzip else length, unit="B", unit_scale=True,
                                                   desc=url, disable=None) as bar:
          got = 0
          while (chunk := src.read(1 << 16)):
            h.update(chunk)
            got += f.write(chunk)
            bar.update(len(chunk))
        if not gunzip and length and got < length:
          raise ConnectionError(f"fetch: {url} ended after {got} of {length} bytes")
        if sha256 is not None and (actual := h.hexdigest()) != sha256:
          raise ValueError(f"fetch: {url} has sha256 {actual}, expected {sha256}")
        os.replace(tmp, fp)  # atomic: a reader never sees a half-written file
      finally:
        if os.path.exists(tmp): os.unlink(tmp)
  if not extract: return fp
  if not extract_dir.is_dir():
    tmpdir = tempfile.mkdtemp(dir=fp.parent)
    try:
      with tarfile.open(fp) as t: t.extractall(tmpdir, filter="data")  # 'data': no absolute paths, links out, devices
      try: os.rename(tmpdir, extract_dir)
      except OSError:
        if not extract_dir.is_dir(): raise
    finally: shutil.rmtree(tmpdir, ignore_errors=True)
  return extract_dir

# ***** pickling code objects (tinygrad registers the same): a function's code can be sent to another process *****

def _code_of(*fields: Any) -> Any:
  import types
  return types.CodeType(*fields)

def _reduce_code(code: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
  # CodeType's constructor parameters, in order, read from the co_ attributes they come from (its two odd names)
  import inspect, types
  names = {"codestring": "code", "constants": "consts"}
  return _code_of, tuple(getattr(code, "co_" + names.get(p, p)) for p in inspect.signature(types.CodeType).parameters)

def _register_code_pickling() -> None:
  import copyreg, types
  copyreg.pickle(types.CodeType, _reduce_code)
_register_code_pickling()
