"""Small shared utilities: environment flags, Context, counters, caching paths and tiny functional helpers."""
from __future__ import annotations
import contextlib, functools, itertools, math, os, sys, time
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")

def prod(xs: Iterable[Any], start: Any = 1) -> Any: return functools.reduce(lambda a, b: a * b, xs, start)
def all_same(xs: Sequence[Any]) -> bool: return all(x == xs[0] for x in xs)
def all_int(xs: Iterable[Any]) -> bool: return all(isinstance(x, int) for x in xs)
def dedup(xs: Iterable[T]) -> list[T]: return list(dict.fromkeys(xs))
def flatten(xss: Iterable[Iterable[T]]) -> list[T]: return [x for xs in xss for x in xs]
def ceildiv(a: int, b: int) -> int: return -(-a // b)
def round_up(a: int, b: int) -> int: return ceildiv(a, b) * b
def argsort(xs: Sequence[Any]) -> list[int]: return sorted(range(len(xs)), key=xs.__getitem__)

def argfix(*x: Any) -> tuple[Any, ...]:
  """Accept f(1, 2), f((1, 2)) and f([1, 2]) alike."""
  if x and x[0].__class__ in (tuple, list):
    if len(x) != 1: raise ValueError(f"bad arg {x}: pass either one sequence or several values")
    return tuple(x[0])
  return x

def make_tuple(x: int | Sequence[int], cnt: int) -> tuple[int, ...]:
  return (x,) * cnt if isinstance(x, int) else tuple(x)

def fully_flatten(x: Any) -> list[Any]:
  if hasattr(x, "__len__") and hasattr(x, "__getitem__") and not isinstance(x, (str, bytes)):
    out: list[Any] = []
    stack: list[Iterator[Any]] = [iter(x)]
    while stack:
      for y in stack[-1]:
        if hasattr(y, "__len__") and hasattr(y, "__getitem__") and not isinstance(y, (str, bytes)):
          stack.append(iter(y))
          break
        out.append(y)
      else: stack.pop()
    return out
  return [x]

@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
  """Read an environment variable, converted to the type of `default`."""
  val = os.getenv(key, "")
  if val == "": return default  # set but empty means unset
  try: return type(default)(val)
  except ValueError: raise ValueError(f"environment variable {key}={val!r} should be a {type(default).__name__}") from None

class ContextVar:
  """A named setting read from the environment once, changeable in code with `Context(NAME=value)`."""
  _cache: dict[str, ContextVar] = {}
  def __init__(self, key: str, default: int):
    if key in ContextVar._cache: raise RuntimeError(f"ContextVar {key} is defined twice")
    self.key, self.value = key, getenv(key, default)
    ContextVar._cache[key] = self
  def __bool__(self) -> bool: return bool(self.value)
  def __ge__(self, x: int) -> bool: return self.value >= x
  def __gt__(self, x: int) -> bool: return self.value > x
  def __lt__(self, x: int) -> bool: return self.value < x
  def __le__(self, x: int) -> bool: return self.value <= x
  def __eq__(self, x: object) -> bool: return self.value == x
  def __hash__(self) -> int: return hash(self.key)
  def __repr__(self) -> str: return f"{self.key}={self.value}"

class Context(contextlib.ContextDecorator):
  """Set flags for a block: `with Context(DEBUG=2): ...`."""
  def __init__(self, **kwargs: int): self.kwargs = kwargs
  def __enter__(self) -> None:
    self.old = {}
    for k, v in self.kwargs.items():
      if k not in ContextVar._cache: raise KeyError(f"Context: unknown flag {k!r}; known flags are {sorted(ContextVar._cache)}")
      self.old[k] = ContextVar._cache[k].value
      ContextVar._cache[k].value = v
  def __exit__(self, *args: Any) -> None:
    for k, v in self.old.items(): ContextVar._cache[k].value = v

DEBUG, NOOPT, BEAM = ContextVar("DEBUG", 0), ContextVar("NOOPT", 0), ContextVar("BEAM", 0)
JIT, CACHELEVEL = ContextVar("JIT", 1), ContextVar("CACHELEVEL", 2)
THREADS = ContextVar("THREADS", os.cpu_count() or 1)

class GlobalCounters:
  """Counts of kernels run, operations and memory traffic since the last reset."""
  global_ops: int = 0
  global_mem: int = 0
  time_sum_s: float = 0.0
  kernel_count: int = 0
  mem_used: int = 0
  @staticmethod
  def reset() -> None:
    GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s, GlobalCounters.kernel_count = 0, 0, 0.0, 0

def cache_dir() -> str:
  """Where compiled kernels live: $ATTOGRAD_CACHE_DIR, else $XDG_CACHE_HOME/attograd, else ~/.cache/attograd."""
  if (d := os.getenv("ATTOGRAD_CACHE_DIR")): return d
  base = os.getenv("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "attograd")

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
