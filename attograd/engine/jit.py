"""TinyJit: the first call of a function of Tensors runs it normally, the second records the kernels it runs, and
later calls replay those kernels with the new input buffers and variable values: no graph building, scheduling or
compiling."""
from __future__ import annotations
import functools, struct, time
from typing import Any, Callable, Generic, TypeVar
from attograd.device import Buffer
from attograd.dtype import DType, dtypes
from attograd.engine import realize as _realize
from attograd.engine.memory import plan_jit
from attograd.engine.nan import DEBUG_NAN
from attograd.engine.profile import PROFILER
from attograd.engine.realize import CompiledRunner, CopyRunner, _copy
from attograd.engine.schedule import buffers, new_buffer_uop
from attograd.helpers import DEBUG, JIT, GlobalCounters
from attograd.tensor import Tensor, _contiguous_view_of_buffer, _prefix_of_buffer
from attograd.uop.ops import GroupOp, Ops, UOp, unbind_sint
from attograd.engine.schedule import _SIZED, _bind_size, _map_arg, _sym_arg, _unbind_size

ReturnType = TypeVar("ReturnType")
Recording = list[tuple[CompiledRunner | CopyRunner, tuple[Buffer, ...], dict[str, int]]]
InputSpec = tuple[tuple[Any, ...], DType, str]  # shape, dtype, device
Prepared = tuple[tuple[Any, ...], dict[str, Any], list[str], list[Tensor], dict[str, UOp]]

# the TinyJit now recording, if any: a jitted function called while another records can't be captured correctly
_capturing: TinyJit | None = None

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

def _unbound_shape(shape: tuple[Any, ...]) -> tuple[Any, ...]:
  return shape if all(s.__class__ is int for s in shape) else tuple(unbind_sint(s) for s in shape)

def _named(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
  """(name for messages, value) of every argument; keywords sorted, so their order in the call doesn't matter."""
  return [(f"argument {i}", v) for i, v in enumerate(args)] + [(f"keyword argument {k!r}", kwargs[k])
                                                                for k in sorted(kwargs)]

def _prepare_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Prepared:
  """Realize every Tensor argument into a contiguous buffer of its own (a non-contiguous view gets a copy).
  Returns the arguments to call with, the Tensor arguments' names and Tensors, and the bound Variables by name."""
  named = _named(args, kwargs)
  for n, v in named:
    if isinstance(v, (list, tuple, dict)) and _holds_tensor(v):
      raise TypeError(f"TinyJit: {n} is a {type(v).__name__} holding Tensors; a replay would keep reading the Tensors "
                      "of the captured call. Pass each input Tensor as an argument of its own")
  todo = [v for _, v in named if isinstance(v, Tensor) and v.uop.base.op is not Ops.BUFFER]
  if todo: todo[0].realize(*todo[1:])
  fixed: dict[int, Tensor] = {}
  for _, v in named:
    if isinstance(v, Tensor) and not _is_whole_buffer(v.uop): fixed[id(v)] = v.contiguous().realize()
  if fixed:
    args = tuple(fixed.get(id(v), v) for v in args)
    kwargs = {k: fixed.get(id(v), v) for k, v in kwargs.items()}
    named = [(n, fixed.get(id(v), v)) for n, v in named]
  tensor_args = [(n, v) for n, v in named if isinstance(v, Tensor)]
  names, tensors = _shards([n for n, _ in tensor_args], [v for _, v in tensor_args])
  variables: dict[str, UOp] = {}
  # bound Variables come as arguments, or inside the symbolic shapes of Tensor arguments
  for n, v in named + [(n, b) for n, t in zip(names, tensors) for b in _shape_vars(t.shape)]:
    if isinstance(v, UOp) and v.op is Ops.BIND:
      vname = v.src[0].arg[0]
      if vname in variables and variables[vname] is not v:
        raise ValueError(f"TinyJit: Variable {vname!r} is bound twice in one call, to {variables[vname].val} and "
                         f"{v.val}")
      variables[vname] = v
  return args, kwargs, names, tensors, variables

def _output_tensors(ret: Any, where: str = "the return value") -> list[Tensor]:
  """The Tensors in a return value (a Tensor, None, or tuples, lists and dicts of them), in order."""
  if isinstance(ret, Tensor): return [ret]
  if ret is None: return []
  if isinstance(ret, (tuple, list)): return [t for i, x in enumerate(ret) for t in _output_tensors(x, f"{where}[{i}]")]
  if isinstance(ret, dict): return [t for k, x in ret.items() for t in _output_tensors(x, f"{where}[{k!r}]")]
  raise TypeError(f"TinyJit: {where} is a {type(ret).__name__} ({ret!r:.40}), not a Tensor; on replay it would keep "
                  "its value from the captured call. Return Tensors (or None), and read values with .item() outside")

def _holds_tensor(x: Any) -> bool:
  """Whether a (nested) list, tuple or dict holds a Tensor."""
  if isinstance(x, Tensor): return True
  if isinstance(x, (list, tuple)): return any(_holds_tensor(y) for y in x)
  if isinstance(x, dict): return any(_holds_tensor(y) for y in x.values())
  return False

def _rebuild(ret: Any, outs: list[Tensor]) -> Any:
  """`ret` with its Tensors replaced, in order, by `outs`."""
  it = iter(outs)
  def go(x: Any) -> Any:
    if isinstance(x, Tensor): return next(it)
    if isinstance(x, tuple): return tuple(go(y) for y in x)
    if isinstance(x, list): return [go(y) for y in x]
    if isinstance(x, dict): return {k: go(y) for k, y in x.items()}
    return x
  return go(ret)

def _swap_base(u: UOp, base: UOp, vals: dict[UOp, int]) -> UOp:
  """The movement ops above u's base, over `base` instead, with symbolic sizes bound to this call's values."""
  if u.op not in GroupOp.Movement: return base
  arg = _map_arg(u.arg, lambda x: _bind_size(x, vals)) if u.op in _SIZED and _sym_arg(u.arg) else u.arg
  return UOp(u.op, u.dtype, (_swap_base(u.src[0], base, vals),), arg)

def _unbind_chain(u: UOp) -> UOp:
  """A view chain with its symbolic sizes unbound (bound again to each call's values on replay)."""
  if u.op not in GroupOp.Movement: return u
  arg = _map_arg(u.arg, lambda x: _unbind_size(x, {})) if u.op in _SIZED and _sym_arg(u.arg) else u.arg
  return UOp(u.op, u.dtype, (_unbind_chain(u.src[0]),), arg)

class CapturedJit:
  """The recorded kernels of one call, as prebuilt (function, argument list) pairs, and where each call's input
  buffers and variable values go in those argument lists."""
  def __init__(self, rec: Recording, inputs: list[Buffer], names: list[str], specs: list[InputSpec],
               var_names: dict[str, UOp], ret: Any, outs: list[Tensor]):
    self.names, self.specs, self.var_names, self.ret = names, specs, var_names, ret
    self.n_kernels = sum(1 for r, _, _ in rec if isinstance(r, CompiledRunner))
    self.ops = sum(r.spec.op_estimate for r, _, _ in rec if isinstance(r, CompiledRunner))
    self.mem = sum(sum(b.nbytes for b in bufs) for _, bufs, _ in rec)
    self.keep: list[Buffer] = []  # every buffer the argument lists point into stays alive with the jit
    self.calls: list[tuple[Callable[..., Any], list[Any]]] = []
    self.kernel_names = [r.spec.name if isinstance(r, CompiledRunner) else "copy" for r, _, _ in rec]
    self.devices = [bufs[0].device for _, bufs, _ in rec]
    # per input: the (argument list, position, wants the raw handle) slots to fill on each call
    self.in_slots: list[list[tuple[list[Any], int, bool]]] = [[] for _ in inputs]
    self.var_slots: list[tuple[list[Any], int, str]] = []
    where = {id(b): i for i, b in enumerate(inputs)}
    written: dict[int, Buffer] = {}
    for runner, bufs, var_vals in rec:
      for b in bufs: b.allocate()
      self.keep.extend(bufs)
      if isinstance(runner, CopyRunner):
        args: list[Any] = [bufs[0], bufs[1]]
        self.calls.append((_copy, args))
        for pos, b in enumerate(bufs[:2]):
          if (i := where.get(id(b))) is not None: self.in_slots[i].append((args, pos, False))
        written[id(bufs[0])] = bufs[0]
        continue
      gl = runner.spec.globals
      args = [bufs[i]._buf for i in gl] + [var_vals[n] for n in runner.var_names]
      self.calls.append((_fast_call(runner, len(gl)), args))
      for pos, i in enumerate(gl):
        if (j := where.get(id(bufs[i]))) is not None: self.in_slots[j].append((args, pos, True))
      for k, n in enumerate(runner.var_names):
        if n in var_names: self.var_slots.append((args, len(gl) + k, n))
      for o in runner.spec.outs: written[id(bufs[o])] = bufs[o]
    # outputs: a fresh BUFFER node over the same buffer on every call, so graphs built from one call's outputs are
    # never confused with the next call's (whose kernels overwrite the buffer)
    self.outs: list[tuple[UOp, Buffer | None]] = []
    for t in outs:
      base = t.uop.base
      self.outs.append((_unbind_chain(t.uop), buffers[base] if base.op is Ops.BUFFER else None))
    self.written = [b for k, b in written.items() if k not in where]
    self.rng: tuple[Buffer, int] | None = None  # the random counter's buffer and how many numbers a call draws

  def __call__(self, tensors: list[Tensor], variables: dict[str, UOp]) -> Any:
    for t, (name, (shape, dtype, device)) in zip(tensors, zip(self.names, self.specs)):
      if _unbound_shape(t.shape) != shape or t.dtype != dtype or t.device != device:
        raise ValueError(f"TinyJit: {name} has shape {t.shape} ({t.dtype}, {t.device}), but the function was captured "
                         f"with shape {shape} ({dtype}, {device}); inputs can't change between calls (call jit.reset() "
                         "to capture anew)")
    st = time.perf_counter() if DEBUG >= 1 else 0.0
    for t, slots in zip(tensors, self.in_slots):
      b = buffers[t.uop.base]
      raw = b._buf
      for args, pos, want_raw in slots: args[pos] = raw if want_raw else b
    for args, pos, n in self.var_slots: args[pos] = variables[n].src[1].arg
    if self.rng is not None:
      self.rng[0].copyin(memoryview(struct.pack("<I", Tensor._rng_counter & 0xFFFFFFFF)))
      Tensor._rng_counter += self.rng[1]
    if DEBUG >= 2 or PROFILER.active:
      for (fn, args), kname, dev in zip(self.calls, self.kernel_names, self.devices):
        kt = time.perf_counter()
        fn(*args)
        ke = time.perf_counter()
        if PROFILER.active: PROFILER.span(kname, "jit", dev, kt, ke)
        if DEBUG >= 2: print(f"*** jit {kname:32s} {(ke - kt) * 1e6:9.2f} us")
    else:
      for fn, args in self.calls: fn(*args)
    for b in self.written: b.version += 1  # results memoized in these buffers are stale now
    GlobalCounters.kernel_count += self.n_kernels
    GlobalCounters.global_ops += self.ops
    GlobalCounters.global_mem += self.mem
    if DEBUG >= 1: print(f"jit: replayed {len(self.calls)} kernels in {(time.perf_counter() - st) * 1e3:.3f} ms")
    outs = []
    vals = {v.src[0]: v.src[1].arg for v in variables.values()}
    for u, buf in self.outs:
      if buf is None: outs.append(Tensor(_swap_base(u, u.base, vals)))
      else: outs.append(Tensor(_swap_base(u, new_buffer_uop(buf.device, buf.size, buf.dtype, buf), vals)))
    return _rebuild(self.ret, outs)

def _fast_call(runner: CompiledRunner, nbufs: int) -> Callable[..., Any]:
  """The cheapest callable running this kernel with (buffer handles..., variable values...): the ctypes function
  itself where the runtime exposes one with its argument types set, else a call through the program object."""
  fxn = getattr(runner.prg, "fxn", None)
  launch = getattr(runner, "launch", None) or {}  # GPU programs: global and local sizes
  if fxn is not None and getattr(fxn, "argtypes", None) is not None and not launch: return fxn
  prg = runner.prg
  def call(*args: Any) -> None: prg(*args[:nbufs], vals=tuple(args[nbufs:]), **launch)
  return call

class TinyJit(Generic[ReturnType]):
  """Capture the kernels a function of Tensors runs, and replay them on later calls.

  The first call runs the function; the second runs it again while recording its kernels; every later call only
  replays those kernels, with the new inputs' buffers (and new values of bound Variables passed as arguments). Tensor
  arguments must keep their shapes and dtypes; returned Tensors are backed by the same buffers on every call, so a
  result is overwritten by the next call (read it, or copy it, before calling again). `JIT=0` turns capturing off.

  >>> from attograd import Tensor, TinyJit
  >>> @TinyJit
  ... def f(x: Tensor) -> Tensor: return (x * 2 + 1).sum()
  >>> [f(Tensor([float(i), 1.0])).item() for i in range(4)]
  [4.0, 6.0, 8.0, 10.0]
  """
  def __init__(self, fxn: Callable[..., ReturnType]):
    self.fxn = fxn
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]
    self.reset()
  def reset(self) -> None:
    """Forget the captured kernels: the next call runs normally and the one after captures again."""
    self.cnt = 0
    self.captured: CapturedJit | None = None
  def __get__(self, obj: Any, objtype: Any = None) -> Any:
    return self if obj is None else functools.partial(self.__call__, obj)  # a jitted method
  def __repr__(self) -> str: return f"<TinyJit {getattr(self.fxn, '__qualname__', self.fxn)!s} calls={self.cnt}>"

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    global _capturing
    if _capturing is not None:
      raise RuntimeError(f"TinyJit: {self!r} was called while {_capturing!r} is capturing; a jit can't be captured "
                         "inside another: jit only the outer function")
    if not JIT or DEBUG_NAN.value: return self.fxn(*args, **kwargs)  # NaN hunting checks every kernel as it runs
    args, kwargs, names, tensors, variables = _prepare_inputs(args, kwargs)
    if self.captured is not None:
      if names != self.captured.names:
        raise ValueError(f"TinyJit: called with Tensor arguments {names}, but captured with {self.captured.names}")
      known = self.captured.var_names
      if set(variables) != set(known) or any(v.src[0] is not known[n].src[0] for n, v in variables.items()):
        raise ValueError(f"TinyJit: called with Variables {sorted(variables)}, but captured with {sorted(known)} "
                         "(names and bounds must stay the same)")
      self._check_constants(args, kwargs)
      self.cnt += 1
      return self.captured(tensors, variables)
    bufs = [buffers[t.uop.base] for t in tensors]
    seen: dict[int, str] = {}
    for n, b in zip(names, bufs):
      if id(b) in seen: raise ValueError(f"TinyJit: {seen[id(b)]} and {n} are the same buffer; pass distinct Tensors")
      seen[id(b)] = n
    if self.cnt == 0:
      ret = self.fxn(*args, **kwargs)
      outs = _output_tensors(ret)
      if outs: outs[0].realize(*outs[1:])
      self.cnt = 1
      self._constants = self._constants_of(args, kwargs)
      return ret
    # the second call: record every kernel it runs
    rec: Recording = []
    # random numbers read their counter from this buffer while capturing, so each replay draws new ones
    rng_start = Tensor._rng_counter
    rng = Tensor([rng_start & 0xFFFFFFFF], dtype=dtypes.uint32)
    _realize.capturing, _capturing, Tensor._rng_base = rec, self, (rng, rng_start)
    try:
      ret = self.fxn(*args, **kwargs)
      outs = _output_tensors(ret)
      if outs: outs[0].realize(*outs[1:])
    finally: _realize.capturing, _capturing, Tensor._rng_base = None, None, None
    if not rec:
      raise RuntimeError(f"TinyJit: {self!r} ran no kernels while capturing, so there is nothing to replay; its "
                         "results would never change. Return Tensors computed from the inputs, or don't jit it")
    for i, t in enumerate(outs):
      if t.uop.base.op is Ops.BUFFER and id(b := buffers[t.uop.base]) in seen:
        raise ValueError(f"TinyJit: output {i} is the same buffer as input {seen[id(b)]}; the replay would write into "
                         "the caller's tensor. Return a new Tensor (e.g. x.contiguous() of a computed value)")
    rec = plan_jit(rec, bufs, [buffers[t.uop.base] for t in outs if t.uop.base.op is Ops.BUFFER])
    specs = [(_unbound_shape(t.shape), t.dtype, t.device) for t in tensors]
    self.captured = CapturedJit(rec, bufs, names, specs, variables, ret, outs)
    if (used := Tensor._rng_counter - rng_start): self.captured.rng = (buffers[rng.uop.base], used)
    self._constants = self._constants_of(args, kwargs)
    self.cnt = 2
    if DEBUG >= 1: print(f"jit: captured {len(rec)} kernels of {self!r}")
    return ret

  # plain Python numbers and strings passed as arguments are baked into the captured kernels: they must not change
  @staticmethod
  def _constants_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {n: v for n, v in _named(args, kwargs) if isinstance(v, (int, float, str, bool))}
  def _check_constants(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    now = self._constants_of(args, kwargs)
    if now != self._constants:
      diff = [n for n in set(now) | set(self._constants) if now.get(n) != self._constants.get(n)]
      n = sorted(diff)[0]
      raise ValueError(f"TinyJit: {n} is {now.get(n)!r} but was {self._constants.get(n)!r} when captured; plain Python "
                       "values are baked into the captured kernels (pass a Tensor, or a bound Variable, to change it)")
