"""TinyJit: the first call of a function of Tensors runs it normally, the second records the kernels it runs, and
later calls replay those kernels with the new input buffers and variable values: no graph building, scheduling or
compiling. This half takes and returns Tensors (the call's key, its inputs, its outputs); engine/jit.py replays."""
from __future__ import annotations
import contextlib, functools, struct, warnings, weakref
from collections import Counter
from typing import Any, Callable, Generic, TypeVar
from attograd.device import Buffer, Device
from attograd.dtype import dtypes
from attograd.engine import recorder
from attograd.engine.buffers import buffers
from attograd.engine.jit import CapturedJit, Recording, capture_beam, live_buffers, prune_recording
from attograd.engine.memory import plan_jit
from attograd.engine.nan import DEBUG_NAN
from attograd.helpers import DEBUG, JIT, Context
from attograd.engine.recorder import JitError, JitRuntimeError, JitTypeError, JitValueError  # noqa: F401
from attograd.tensor.buffer_views import _contiguous_view_of_buffer, _prefix_of_buffer
from attograd.tensor.core import Tensor
import attograd.tensor.pending as pending
import attograd.tensor.rng as rng
from attograd.uop.ops import GroupOp, Ops, UOp, unbind_sint
from attograd.uop.variables import SIZED, map_arg, sym_arg, unbind_size

ReturnType = TypeVar("ReturnType")
Prepared = tuple[tuple[Any, ...], dict[str, Any], tuple[Any, ...], list[str], list[Tensor], dict[str, UOp],
                 tuple[Any, ...]]

def _is_whole_buffer(u: UOp) -> bool:
  """A buffer seen through reshapes, or through the prefix of it that holds the values (a symbolic shape's)."""
  if u.op is Ops.MULTI: return all(_is_whole_buffer(s) for s in u.src)  # over several devices: every shard
  return _contiguous_view_of_buffer(u) or _prefix_of_buffer(u)

def _shards(names: list[str], tensors: list[Tensor]) -> tuple[list[str], list[Tensor]]:
  """A Tensor over several devices is one input per shard (its buffers are what the kernels read)."""
  if all(t.uop.op is not Ops.MULTI for t in tensors): return names, tensors
  pairs = [(f"{n} (shard {i} on {s.device})", Tensor(s)) if t.uop.op is Ops.MULTI else (n, t)
           for n, t in zip(names, tensors) for i, s in enumerate(t.uop.src if t.uop.op is Ops.MULTI else (t.uop,))]
  return [n for n, _ in pairs], [t for _, t in pairs]

def _shape_vars(shape: tuple[Any, ...]) -> list[UOp]:
  """The bound Variables in a symbolic shape."""
  return [b for s in shape if isinstance(s, UOp) for b in s.toposort() if b.op is Ops.BIND]

def _view_vars(u: UOp) -> list[UOp]:
  """The bound Variables in the args of a view's movement ops (a shrink from a Variable on)."""
  out: list[UOp] = []
  while u.op in GroupOp.Movement:
    if u.op in SIZED and sym_arg(u.arg):  # (a flat arg, or (start, end) pairs: a pad, a shrink)
      out += _shape_vars(tuple(x for a in u.arg for x in (a if isinstance(a, tuple) else (a,))))
    u = u.src[0]
  return out

def _unbound_shape(shape: tuple[Any, ...]) -> tuple[Any, ...]:
  for s in shape:  # a plain loop: this runs for every Tensor argument of every replay
    if s.__class__ is not int: return tuple(unbind_sint(s) for s in shape)
  return shape

_ARG_NAMES = [f"argument {i}" for i in range(32)]  # every replay names its Tensor inputs: the usual names made once
def _name(pos: int | str) -> str:
  """An argument's name in messages: its position, or its keyword."""
  if pos.__class__ is int and 0 <= pos < 32: return _ARG_NAMES[pos]  # type: ignore[index]
  return f"argument {pos}" if isinstance(pos, int) else f"keyword argument {pos!r}"

# ***** the key of a call: what a capture depends on besides its input buffers and Variable values *****

class _HoldsTensor(Exception): pass  # a Tensor inside a container argument: its buffer would be baked in
class _Unhashable(Exception): pass  # nothing to compare a later call's value with

_f64 = struct.Struct("<d").pack
_PLAIN = {int, bool, str, bytes, type(None)}  # compared by value, with the class: 1, 1.0 and True are different keys

def _value_key(v: Any) -> Any:
  """A hashable stand-in for a non-Tensor argument, equal for two values exactly when a capture made with one is
  right for the other: floats by their bits (0.0 and -0.0 differ, as do NaN payloads), containers element by element
  with their class, a bound Variable nested in a container by its value (only top-level ones are replay inputs)."""
  c = v.__class__
  if c in _PLAIN: return (c, v)
  if isinstance(v, float): return (c, _f64(v))
  if isinstance(v, (tuple, list)): return (c, tuple(_value_key(x) for x in v))
  if isinstance(v, dict): return (c, tuple((_value_key(k), _value_key(x)) for k, x in v.items()))  # order matters
  if isinstance(v, (set, frozenset)): return (c, frozenset(_value_key(x) for x in v))
  if isinstance(v, complex): return (c, _f64(v.real), _f64(v.imag))
  if isinstance(v, Tensor): raise _HoldsTensor
  if isinstance(v, UOp): return (c, v)  # hash-consed: a bound Variable nested in a container is keyed by its value
  if c.__module__ == "numpy" and hasattr(v, "tobytes"): return (c, v.dtype.str, v.shape, v.tobytes())  # -0.0, NaNs
  try: hash(v)
  except TypeError: raise _Unhashable from None
  return (c, v)  # anything else by its own equality: instances of plain classes by identity

def _tensor_key(t: Tensor) -> tuple[Any, ...]:
  """A Tensor argument in the call's key: where it is, and whether it asks for gradients (the shapes, dtypes, devices
  and views of all Tensor inputs are the capture's signature, which a later call must match)."""
  return (Tensor, t.requires_grad)

def _shallow_key(v: Any) -> Any:
  """A list, tuple or dict argument holding Tensors: its Tensors are inputs too (one level deep, as tinygrad takes
  them); deeper ones raise _HoldsTensor."""
  def one(x: Any) -> Any: return _tensor_key(x) if isinstance(x, Tensor) else _value_key(x)
  if isinstance(v, dict): return (v.__class__, tuple((_value_key(k), one(x)) for k, x in v.items()))
  return (v.__class__, tuple(one(x) for x in v))

def _view_key(u: UOp) -> tuple[Any, ...]:
  """A non-contiguous Tensor input's view of its buffer (symbolic sizes unbound), and the buffer's shape: the part of
  the signature that says which elements the captured kernels read. Over several devices: each shard's."""
  if u.op is Ops.MULTI: return (Ops.MULTI, u.arg, tuple(_view_key(s) for s in u.src))
  chain: list[Any] = []
  while u.op in GroupOp.Movement:
    chain.append((u.op, map_arg(u.arg, lambda x: unbind_size(x, {})) if u.op in SIZED and sym_arg(u.arg) else u.arg))
    u = u.src[0]
  return (_unbound_shape(u.shape), tuple(chain))

def _show(v: Any) -> str:
  """A value in messages; floats that print alike show their bits."""
  if isinstance(v, Tensor): return f"a Tensor of shape {_unbound_shape(v.shape)} ({v.dtype}, {v.device})"
  if isinstance(v, UOp) and v.op is Ops.BIND: return f"Variable {v.src[0].arg[0]!r} bound to {v.src[1].arg}"
  if isinstance(v, float) and (v != v or v == 0): return f"{v!r} (bits {_f64(v)[::-1].hex()})"
  return f"{v!r:.60}"

def _call_key(vals: list[Any], pos: list[int | str], skip: int) -> tuple[Any, ...]:
  """The key of one call's arguments (the first `skip` left out: a jitted method's own instance)."""
  key: list[Any] = []
  for p, v in zip(pos[skip:], vals[skip:]):
    if isinstance(v, Tensor): key.append(_tensor_key(v))
    elif v.__class__ is UOp and v.op is Ops.BIND: key.append((UOp, v.src[0]))  # its value is a replay input
    else:
      try: key.append(_shallow_key(v) if isinstance(v, (tuple, list, dict)) else _value_key(v))
      except _HoldsTensor:
        raise JitTypeError(f"TinyJit: {_name(p)} is a {type(v).__name__} holding Tensors more than one level deep; a "
                           "replay would keep reading the Tensors of the captured call. Pass the input Tensors as "
                           "arguments, or in a flat list, tuple or dict") from None
      except _Unhashable:
        raise JitTypeError(f"TinyJit: {_name(p)} is a {type(v).__name__}, which is not hashable, so a later call can't "
                           "be checked against the capture; pass a hashable value (a tuple, a frozen dataclass) or a "
                           "Tensor, or bind it into the function (functools.partial)") from None
  return tuple(key)

def _modes() -> dict[str, Any]:
  """The global settings a traced function reads without taking them as arguments: part of every call's key too."""
  return {"Tensor.training": Tensor.training, "dtypes.default_float": dtypes.default_float,
          "dtypes.default_int": dtypes.default_int, "Device.DEFAULT": Device.DEFAULT}

def _input_tensors(pos: list[int | str], vals: list[Any], skip: int) -> tuple[list[str], list[Tensor]]:
  """A call's Tensor inputs and their names: its Tensor arguments, then the Tensors in its list, tuple and dict
  arguments (one level deep, as tinygrad takes them; a Tensor already taken is taken once)."""
  names, tensors, held = [], [], []
  for i, (p, v) in enumerate(zip(pos, vals)):  # a plain loop: this runs on every replay
    if isinstance(v, Tensor):
      names.append(_name(p))
      tensors.append(v)
    elif i >= skip and isinstance(v, (tuple, list, dict)): held.append((p, v))
  for p, v in held:
    for k, x in (v.items() if isinstance(v, dict) else enumerate(v)):
      if isinstance(x, Tensor) and not any(x is t for t in tensors):
        names.append(f"{_name(p)}[{k!r}]")
        tensors.append(x)
  return names, tensors

def _check_real(name: str, t: Tensor) -> None:
  """A scalar constant (Tensor(2.0)) or a Tensor built from device-less UOps has no buffer a replay could swap for the
  next call's, so it can't be a jit input (tinygrad refuses them too; bigger constants get a buffer of their own)."""
  u = t.uop
  if u.op is Ops.CONST or not any(x.op is Ops.DEVICE for x in u.toposort()):
    what = "a scalar constant" if u.op is Ops.CONST else "built from device-less UOps"
    raise JitValueError(f"TinyJit: {name} is {what} ({u.dtype}), with no buffer to replace on later calls; jit inputs "
                        "must be real buffers: pass Tensor([value]), or a Tensor on a device")

def _swap_in(v: Any, fixed: dict[int, Tensor]) -> Any:
  """An argument with its Tensors (one level deep in a container) replaced by their contiguous copies in `fixed`."""
  def one(x: Any) -> Any: return fixed.get(id(x), x) if isinstance(x, Tensor) else x
  if isinstance(v, Tensor): return one(v)
  if isinstance(v, list): return [one(x) for x in v]
  if isinstance(v, tuple): return v.__class__(*map(one, v)) if hasattr(v, "_fields") else tuple(map(one, v))
  if isinstance(v, dict): return {k: one(x) for k, x in v.items()}
  return v

def _plain_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Prepared | None:
  """_prepare_inputs of the common call, in one pass: positional arguments only, each a Tensor that is a whole buffer
  (through reshapes) on one device, with a concrete shape; what the general path returns for it. None otherwise."""
  if len(args) > len(_ARG_NAMES): return None
  shapes = []
  grads = []
  for t in args:
    if t.__class__ is not Tensor: return None
    u = tu = t.uop
    while u.op is Ops.RESHAPE: u = u.src[0]
    if u.op is not Ops.BUFFER: return None
    shape = tu.shape
    for s in shape:
      if s.__class__ is not int: return None
    # the node's fields rather than the Tensor's properties (t.dtype, t.device, t.requires_grad): this runs per replay
    shapes.append((shape, tu.dtype, tu.device or t._device))
    grads.append((Tensor, t.__dict__.get("_requires_grad")))
  names = _ARG_NAMES[:len(args)]
  key = (tuple(grads), (), Tensor.training, dtypes.default_float, dtypes.default_int, Device.DEFAULT)
  return args, kwargs, key, names, list(args), {}, (tuple(names), tuple(shapes), ())

def _prepare_inputs(args: tuple[Any, ...], kwargs: dict[str, Any], skip: int) -> Prepared:
  """The call's key and signature, and every Tensor input realized: a buffer, or a view of one (which the kernels
  read and write through; a broadcast constant gets a buffer of its own). Returns the arguments to call with, the
  key, the Tensor inputs' names and Tensors (one per shard), the bound Variables by name, and the signature: the
  Tensor inputs' names, shapes, dtypes, devices and views, which every call after the first capture must match."""
  if not kwargs and not skip and (plain := _plain_inputs(args, kwargs)) is not None: return plain
  kws = sorted(kwargs) if kwargs else []  # keywords sorted, so their order in the call doesn't matter
  pos: list[int | str] = [*range(len(args)), *kws]
  vals = [*args, *(kwargs[k] for k in kws)]
  key = (_call_key(vals, pos, skip), tuple(kws), Tensor.training, dtypes.default_float, dtypes.default_int,
         Device.DEFAULT)  # the values of _modes(), read directly: this runs on every replay
  tnames, tensors = _input_tensors(pos, vals, skip)
  todo = [t for t in tensors if t.uop.base.op is not Ops.BUFFER]
  if todo:
    for n, t in zip(tnames, tensors):
      if t.uop.base.op is not Ops.BUFFER: _check_real(n, t)
    todo[0].realize(*todo[1:])
  # a view (a slice, a permute, a shard that is a slice of a buffer) stays a view: the captured kernels read and write
  # its buffer through it, and each replay swaps in the next call's buffer, which must be seen through the same view.
  # What has no buffer under it (a broadcast constant) gets one of its own, and so does a view of a buffer another
  # input also reads (x[:4] and x[4:]): a replay swaps each input's buffer alone. The function must not write such
  # a copy (_check_copies raises: the write would be lost).
  fixed: dict[int, Tensor] = {}
  views: list[tuple[int, Any]] = []
  if (not_whole := [i for i, t in enumerate(tensors) if not _is_whole_buffer(t.uop)]):
    parts = [t.uop.src if t.uop.op is Ops.MULTI else (t.uop,) for t in tensors]
    shared = Counter(s.base for ps in parts for s in ps)
  for i in not_whole:
    t = tensors[i]
    if all(s.base.op is Ops.BUFFER and shared[s.base] == 1 for s in parts[i]): views.append((i, _view_key(t.uop)))
    else:
      fixed[id(t)] = c = t.contiguous().realize()
      if any(s.base.op is Ops.BUFFER for s in parts[i]): c.__dict__["_jit_copy"] = True
  if fixed:
    args = tuple(_swap_in(v, fixed) for v in args)
    kwargs = {k: _swap_in(v, fixed) for k, v in kwargs.items()}
    tensors = [fixed.get(id(t), t) for t in tensors]
  sig = (tuple(tnames), tuple([(_unbound_shape(t.shape), t.dtype, t.device) for t in tensors]), tuple(views))
  names, tensors = _shards(tnames, tensors)
  variables: dict[str, UOp] = {}
  # bound Variables come as arguments, or inside the symbolic shapes of Tensor arguments
  binds = [b for t in tensors if _unbound_shape(sh := t.shape) is not sh for b in _shape_vars(sh)]
  if views: binds += [b for t in tensors for b in _view_vars(t.uop)]  # a view's offsets (a[:, i:i+2]) too
  for v in vals[skip:] + binds:
    if v.__class__ is UOp and v.op is Ops.BIND:
      vname = v.src[0].arg[0]
      if vname in variables and variables[vname] is not v:
        raise JitValueError(f"TinyJit: Variable {vname!r} is bound twice in one call, to {variables[vname].val} and "
                         f"{v.val}")
      variables[vname] = v
  return args, kwargs, key, names, tensors, variables, sig

def _check_copies(names: list[str], tensors: list[Tensor], bufs: list[Any], versions: list[int]) -> None:
  """An input passed as a copy (a view of a buffer another input also views) must not be written by the function."""
  for n, t, b, v in zip(names, tensors, bufs, versions):
    if b.version != v and t.__dict__.get("_jit_copy"):
      raise JitValueError(f"TinyJit: {n} is a view of a buffer that another argument also views, so the jit passes it "
                          "as a copy, and the function writes it: the write would not reach the buffer. Pass the whole "
                          "buffer and slice it inside the function, or views of distinct buffers")

def _mismatch(want: tuple[Any, ...], got: tuple[Any, ...]) -> str:
  """How a call's signature differs from the capture's, in words."""
  if want[0] != got[0]:
    return f"its Tensor inputs are ({', '.join(got[0])}), but the capture took ({', '.join(want[0])})"
  for n, w, g in zip(want[0], want[1], got[1]):
    if w != g: return f"{n} is {_show_spec(g)}, but the capture took {_show_spec(w)}"
  wv, gv = dict(want[2]), dict(got[2])
  n = next(want[0][i] for i in sorted(set(wv) | set(gv)) if wv.get(i) != gv.get(i))
  def view(v: Any) -> str: return "a contiguous buffer" if v is None else f"a view {v[1]} of a buffer of shape {v[0]}"
  i = want[0].index(n)
  return f"{n} is {view(gv.get(i))}, but the capture took {view(wv.get(i))}"

def _show_spec(spec: tuple[Any, ...]) -> str:
  shape, dtype, device = spec
  dims = [d.render() if isinstance(d, UOp) else str(d) for d in shape]  # a Variable by its name
  return f"a Tensor of shape ({', '.join(dims)}{',' if len(dims) == 1 else ''}) ({dtype}, {device})"

def _output_tensors(ret: Any, where: str = "the return value") -> list[Tensor]:
  """The Tensors in a return value (a Tensor, None, or tuples, lists and dicts of them), in order."""
  if isinstance(ret, Tensor): return [ret]
  if ret is None: return []
  if isinstance(ret, (tuple, list)): return [t for i, x in enumerate(ret) for t in _output_tensors(x, f"{where}[{i}]")]
  if isinstance(ret, dict): return [t for k, x in ret.items() for t in _output_tensors(x, f"{where}[{k!r}]")]
  raise JitTypeError(f"TinyJit: {where} is a {type(ret).__name__} ({ret!r:.40}), not a Tensor; on replay it would keep "
                  "its value from the captured call. Return Tensors (or None), and read values with .item() outside")

def _like(t: Tensor, captured: Tensor) -> Tensor:
  """A replay's output `t` showing the weak dtype its captured counterpart showed (int_tensor + 0.5 is weakfloat on
  every call; the buffer holds its strong dtype)."""
  if (w := captured._weak) is not None: t._weak = w
  return t

def _rebuild(ret: Any, outs: list[Tensor]) -> Any:
  """`ret` with its Tensors replaced, in order, by `outs`."""
  it = iter(outs)
  def go(x: Any) -> Any:
    if isinstance(x, Tensor): return _like(next(it), x)
    if isinstance(x, tuple): return tuple(go(y) for y in x)
    if isinstance(x, list): return [go(y) for y in x]
    if isinstance(x, dict): return {k: go(y) for k, y in x.items()}
    return x
  return go(ret)

def _reads_any(sizes: tuple[Any, ...], variables: dict[str, UOp]) -> bool:
  """Whether any of the sizes is bound through one of the call's Variables."""
  return any(isinstance(x, UOp) and any(u.op is Ops.BIND and u.src[0].arg[0] in variables for u in x.toposort())
             for x in sizes)

def _key_buffers(key: Tensor) -> tuple[Buffer, ...]:
  """The buffers a draw's key lives in: its own, and for a draw on several devices the shards' (the copies to them,
  recorded with the capture's kernels, copy it anew on each replay, from a buffer written here too)."""
  return tuple(buffers[u] for u in key.uop.toposort() if u.op is Ops.BUFFER)

def _note_draws(cj: CapturedJit, draws: list[tuple[Tensor, Any, int]]) -> None:
  """Keep what a replay needs to draw new random numbers: each draw's key buffer and its place in its device's stream,
  counted from the capture's first draw on that device, and the words a call draws per device."""
  first: dict[Any, int] = {}
  for key, device, start in draws: first.setdefault(device, start)
  cj.rng_bufs = [_key_buffers(key) for key, _, _ in draws]
  cj.rng_draws = [(device, (start - first[device]) & rng.MASK64) for _, device, start in draws]
  cj.rng_used = {device: (Tensor._rng_host[device][1] - s) & rng.MASK64 for device, s in first.items()}

def _replay_keys(cj: CapturedJit) -> list[tuple[int, int]]:
  """The keys of a replay's random draws: the capture's draws at the devices' current places in their streams, whose
  counters move on as a plain call's draws would move them."""
  at = {device: Tensor._rng_take(device, n) for device, n in cj.rng_used.items()}
  out = []
  for device, offset in cj.rng_draws:
    dkey, base = at[device]
    start = (base + offset) & rng.MASK64
    out.append(rng.draw_key(dkey, start & rng.MASK32, start >> 32))
  return out

class _Entry:
  """One argument signature's state: run once (captured None), then captured; `last` orders entries by last use."""
  __slots__ = ("captured", "last", "shown")
  def __init__(self, last: int, shown: dict[str, str]):
    self.captured: CapturedJit | None = None
    self.last, self.shown = last, shown

def _forget(instances: dict[int, Any], oid: int, ref: weakref.ref) -> None:
  """A jitted method's instance died: its captures go with it (unless the id already holds a newer instance)."""
  if (hit := instances.get(oid)) is not None and hit[0] is ref: del instances[oid]

class _BoundJit(functools.partial):
  """A jitted method of one instance: a partial over its jit's __call__, as tinygrad's (`.func.__self__` is the jit),
  that shows the jit's attributes too (`model.step.captured`, `model.step.reset()`)."""
  def __getattr__(self, name: str) -> Any: return getattr(self.func.__self__, name)  # type: ignore[attr-defined]

class TinyJit(Generic[ReturnType]):
  """Capture the kernels a function of Tensors runs, and replay them on later calls.

  The first call runs the function; the second runs it again while recording its kernels; every later call only
  replays those kernels, with the new inputs' buffers (and new values of bound Variables passed as arguments).
  As in tinygrad, the Tensor inputs (the Tensor arguments, and the Tensors in list, tuple and dict arguments) are
  fixed at the first capture: a later call whose Tensor inputs have other names, shapes, dtypes, devices or views
  raises JitError (`reset()` captures anew). Other arguments are keyed by value: bound Variables by their Variable
  (not their value), the rest by value (floats by their bits, containers element by element; they must be hashable),
  with the global modes a function reads (Tensor.training, default dtypes, Device.DEFAULT); a new value runs and
  captures anew, keeping the `max_captures` most recently used captures. A jitted method captures per instance.
  Returned Tensors are backed by the same buffers on every call, so a result is overwritten by the next call (read
  it, or copy it, before calling again). `JIT=0` turns capturing off.

  >>> from attograd import Tensor, TinyJit
  >>> @TinyJit
  ... def f(x: Tensor) -> Tensor: return (x * 2 + 1).sum()
  >>> [f(Tensor([float(i), 1.0])).item() for i in range(4)]
  [4.0, 6.0, 8.0, 10.0]
  """
  def __new__(cls, fxn: Callable[..., ReturnType] | None = None, max_captures: int = 8, prune: bool = False) -> Any:
    # `@TinyJit(prune=True)`: called without the function, it returns the decorator
    if fxn is None: return functools.partial(cls, max_captures=max_captures, prune=prune)
    return super().__new__(cls)
  def __init__(self, fxn: Callable[..., ReturnType], max_captures: int = 8, prune: bool = False):
    if max_captures < 1: raise JitValueError(f"TinyJit: max_captures must be at least 1, got {max_captures}")
    self.fxn, self.max_captures, self.prune = fxn, max_captures, prune
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]
    self._skip = 0  # 1 in the jit of one instance's method: the instance isn't part of the key
    self._instances: dict[int, tuple[Callable[[], Any], TinyJit[ReturnType]]] = {}  # a method's jit per instance
    self.reset()
  def reset(self) -> None:
    """Forget the captured kernels (a method's: of every instance): the next call runs normally and the one after
    captures again."""
    self.cnt = 0  # calls since the last reset
    self.captured: CapturedJit | None = None  # the capture the last call replayed or made
    self._entries: dict[tuple[Any, ...], _Entry] = {}
    self._sig: tuple[Any, ...] | None = None  # the Tensor inputs' names, shapes, dtypes, devices and views captured
    self._warned = False
    for _, jit in self._instances.values(): jit.reset()
  def __get__(self, obj: Any, objtype: Any = None) -> Any:
    """A jitted method: a jit of its own for each instance, so one instance never replays another's kernels (its
    weights are baked into the capture as buffers). It lives as long as the instance."""
    if obj is None: return self
    hit = self._instances.get(id(obj))
    if hit is None or hit[0]() is not obj:
      jit: TinyJit[ReturnType] = TinyJit(self.fxn, self.max_captures, self.prune)
      jit._skip = 1
      try: ref = weakref.ref(obj, functools.partial(_forget, self._instances, id(obj)))
      except TypeError: return _BoundJit(self.__call__, obj)  # no weak references (__slots__): keyed by the instance
      self._instances[id(obj)] = hit = (ref, jit)
    return _BoundJit(hit[1].__call__, obj)
  def __repr__(self) -> str: return f"<TinyJit {getattr(self.fxn, '__qualname__', self.fxn)!s} calls={self.cnt}>"

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    if (outer := recorder.active()) is not None:
      raise JitRuntimeError(f"TinyJit: {self!r} was called while {outer.owner!r} is capturing: having TinyJit inside "
                            "another TinyJit is not supported; jit only the outer function")
    if not JIT.value or DEBUG_NAN.value: return self.fxn(*args, **kwargs)  # NaN hunting checks every kernel as it runs
    # lazy writes made before the call run now: a replay reads its inputs' memory directly, and a capture must not
    # record them (they would run again on every replay)
    pending.flush_all()
    args, kwargs, key, names, tensors, variables, sig = _prepare_inputs(args, kwargs, self._skip)
    self.cnt += 1
    if self._sig is not None and sig != self._sig:
      raise JitValueError(f"TinyJit: {self!r} was captured for other inputs: {_mismatch(self._sig, sig)}. Its kernels "
                          "are fixed: call it with inputs like the captured ones (a bound Variable for a size that "
                          "changes), call .reset() to capture anew, or use one TinyJit per shape")
    entry = self._entries.get(key)
    if entry is not None and (cj := entry.captured) is not None:
      entry.last = self.cnt
      self.captured = cj
      if cj.freed: cj.reallocate()
      graphs = cj([t.uop.base for t in tensors], variables, _replay_keys(cj) if cj.rng_bufs else None)
      ret: Any = _like(Tensor._of_uop(graphs[0]), cj.ret) if cj.ret.__class__ is Tensor else \
        _rebuild(cj.ret, [Tensor._of_uop(u) for u in graphs])
      for i in cj.written_inputs: buffers[tensors[i].uop.base].version += 1  # results memoized from it are stale
      return ret
    bufs = [buffers[t.uop.base] for t in tensors]
    seen: dict[int, str] = {}
    for n, b in zip(names, bufs):
      if id(b) in seen:
        raise JitValueError(f"TinyJit: {seen[id(b)]} and {n} are the same buffer; pass distinct Tensors")
      seen[id(b)] = n
    versions = [b.version for b in bufs]
    if entry is None:  # a new signature: run the function; the next call with it captures
      entry = self._new_entry(key, args, kwargs)
      ret = self.fxn(*args, **kwargs)
      outs = _output_tensors(ret)
      if outs: outs[0].realize(*outs[1:])
      _check_copies(names, tensors, bufs, versions)
      self._entries[key] = entry
      return ret
    entry.last = self.cnt
    # the second call: record every kernel it runs; random draws note the buffers they read their keys from, which
    # each replay fills with its own keys, so each replay draws new numbers
    existing = live_buffers()  # once per capture: which outputs the capture made (free_intermediates frees those)
    # JITBEAM=n: the kernels built for the capture are BEAM-searched, since the replays run them many times
    with recorder.recording(recorder.Recorder(self)) as capture, \
         Context(BEAM=beam) if (beam := capture_beam()) else contextlib.nullcontext():
      ret = self.fxn(*args, **kwargs)
      outs = _output_tensors(ret)
      if outs: outs[0].realize(*outs[1:])
    _check_copies(names, tensors, bufs, versions)
    rec: Recording = capture.kernels
    if not rec:
      raise JitRuntimeError(f"TinyJit: {self!r} ran no kernels while capturing, so there is nothing to replay; its "
                         "results would never change. Return Tensors computed from the inputs, or don't jit it")
    if self.prune:
      changing = bufs + [b for key, _, _ in capture.rng_draws for b in _key_buffers(key)]
      before = len(rec)
      rec = prune_recording(rec, changing)
      if DEBUG >= 1: print(f"jit: pruned {before - len(rec)} of {before} kernels that read nothing the inputs change")
    rec = plan_jit(rec, bufs, [buffers[t.uop.base] for t in outs if t.uop.base.op is Ops.BUFFER])
    specs = [(_unbound_shape(t.shape), t.dtype, t.device) for t in tensors]
    self.captured = entry.captured = CapturedJit(rec, bufs, names, specs, variables, ret, [t.uop for t in outs],
                                                      existing)
    self._sig = sig  # later calls must match it: the kernels are built for these shapes, dtypes and views
    if capture.rng_draws: _note_draws(self.captured, capture.rng_draws)
    # the size facts over this call's Variables, checked again on each replay (those over constants hold for good)
    self.captured.size_checks = [c for c in dict.fromkeys(capture.size_checks) if _reads_any(c[:2], variables)]
    if DEBUG >= 1: print(f"jit: captured {len(rec)} kernels of {self!r}")
    return ret

  def _new_entry(self, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Entry:
    """The state of a signature not seen before; the least recently used one makes room for it when all are taken."""
    shown = {_name(i): _show(v) for i, v in enumerate(args) if i >= self._skip}
    shown.update({_name(k): _show(v) for k, v in kwargs.items()})
    shown.update({k: repr(v) for k, v in _modes().items()})
    if self._entries:
      last = max(self._entries.values(), key=lambda e: e.last)
      change = "; ".join(f"{n} is {shown.get(n, 'not passed')} (was {last.shown.get(n, 'not passed')})"
                         for n in sorted(set(shown) | set(last.shown)) if shown.get(n) != last.shown.get(n))
      change = change or "the same values, of other types or bits"
      if DEBUG >= 1: print(f"jit: {self!r} called with a new argument signature ({change}): capturing it anew")
      if len(self._entries) >= self.max_captures:
        del self._entries[min(self._entries, key=lambda k: self._entries[k].last)]
        if not self._warned:
          self._warned = True
          warnings.warn(f"TinyJit: {self!r} has been called with more than {self.max_captures} argument signatures "
                        f"(the latest: {change}), so it drops its least recently used captures, and calls with those "
                        "run and capture again. Plain Python values are baked into the captured kernels: pass a value "
                        "that changes between calls as a Tensor, or as a bound Variable", stacklevel=3)
    return _Entry(self.cnt, shown)
