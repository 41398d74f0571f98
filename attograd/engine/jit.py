"""The replay half of TinyJit (tensor/jit.py has the half that takes and returns Tensors): a capture's recorded
kernels as prebuilt (function, argument list) pairs, run again with new input buffers and variable values: no graph
building, scheduling or compiling."""
from __future__ import annotations
import ctypes, functools, struct, time
from typing import Any, Callable
from attograd.device import Buffer, Device
from attograd.dtype import DType, dtypes
from attograd.engine.buffers import buffers, new_buffer_uop
from attograd.engine.memory import PooledBuffer
from attograd.engine.profile import PROFILER
from attograd.engine.realize import CompiledRunner, CopyRunner, _copy
from attograd.helpers import DEBUG, JITBEAM, GlobalCounters, getenv
from attograd.engine.recorder import JitError, JitRuntimeError, JitTypeError, JitValueError  # noqa: F401
from attograd.uop.ops import GroupOp, Ops, UOp, UOpMetaClass, sym_val
from attograd.uop.state import BUFFER, slots as slots_of
from attograd.uop.variables import SIZED, bind_size, map_arg, sym_arg, unbind_size

Recording = list[tuple[CompiledRunner | CopyRunner, tuple[Buffer, ...], dict[str, int]]]
InputSpec = tuple[tuple[Any, ...], DType, str]  # shape, dtype, device

def _swap_base(u: UOp, base: UOp, vals: dict[UOp, int]) -> UOp:
  """The movement ops above u's base, over `base` instead, with symbolic sizes bound to this call's values."""
  if u.op not in GroupOp.Movement: return base
  arg = map_arg(u.arg, lambda x: bind_size(x, vals)) if u.op in SIZED and sym_arg(u.arg) else u.arg
  return UOp(u.op, u.dtype, (_swap_base(u.src[0], base, vals),), arg)

def _out(entry: tuple[UOp, Buffer | None, int | None], inputs: list[UOp], vals: dict[UOp, int]) -> UOp:
  """One output of a replay: over this call's input, over a fresh BUFFER node of its own buffer, or the graph kept."""
  u, buf, src = entry
  if src is not None: return _swap_base(u, inputs[src], vals)
  if buf is None: return _swap_base(u, u.base, vals)
  if u.op is Ops.BUFFER: return new_buffer_uop(buf.device, buf.size, buf.dtype, buf)  # a whole buffer
  return _swap_base(u, new_buffer_uop(buf.device, buf.size, buf.dtype, buf), vals)

def _unbind_chain(u: UOp) -> UOp:
  """A view chain with its symbolic sizes unbound (bound again to each call's values on replay)."""
  if u.op not in GroupOp.Movement: return u
  arg = map_arg(u.arg, lambda x: unbind_size(x, {})) if u.op in SIZED and sym_arg(u.arg) else u.arg
  return UOp(u.op, u.dtype, (_unbind_chain(u.src[0]),), arg)

class CapturedJit:
  """The recorded kernels of one call, as prebuilt (function, argument list) pairs, and where each call's input
  buffers and variable values go in those argument lists."""
  @functools.cached_property
  def linear(self) -> UOp:
    """What a replay runs, in tinygrad's form: a LINEAR UOp with one CALL per kernel or copy, in order, each with a
    SINK (a kernel, named by its arg) or a COPY as its first source. `len(jit.captured.linear.src)` counts them."""
    calls = tuple(UOp(Ops.CALL, dtypes.void, (UOp(Ops.COPY if n == "copy" else Ops.SINK, dtypes.void, arg=n),), arg=n)
                  for n in self.kernel_names)
    return UOp(Ops.LINEAR, dtypes.void, calls)
  def __init__(self, rec: Recording, inputs: list[Buffer], names: list[str], specs: list[InputSpec],
               var_names: dict[str, UOp], ret: Any, outs: list[UOp], existing: set[int]):
    # ret: the captured call's return value, kept for the caller to rebuild each replay's with its outputs
    self.names, self.specs, self.var_names, self.ret = names, specs, var_names, ret
    self.n_kernels = sum(1 for r, _, _ in rec if isinstance(r, CompiledRunner))
    self.ops = sum(r.spec.op_estimate for r, _, _ in rec if isinstance(r, CompiledRunner))
    self.mem = sum(sum(b.nbytes for b in bufs) for _, bufs, _ in rec)
    self.keep: list[Buffer] = []  # every buffer the argument lists point into stays alive with the jit
    self.calls: list[tuple[Callable[..., Any], Any]] = []
    self.kernel_names = [r.spec.name if isinstance(r, CompiledRunner) else "copy" for r, _, _ in rec]
    self.devices = [bufs[0].device for _, bufs, _ in rec]
    # per input: the (argument list, position, wants the raw handle) slots to fill on each call
    self.in_slots: list[list[tuple[list[Any], int, bool]]] = [[] for _ in inputs]
    self.var_slots: list[tuple[list[Any], int, str]] = []
    # the other buffers' raw handles: filled again after free_intermediates
    self.buf_slots: list[tuple[list[Any], int, Buffer]] = []
    self.freed = False
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
        else: self.buf_slots.append((args, pos, bufs[i]))
      for k, n in enumerate(runner.var_names):
        if n in var_names: self.var_slots.append((args, len(gl) + k, n))
      for o in runner.spec.outs: written[id(bufs[o])] = bufs[o]
    # one per kernel: what DEBUG >= 2 and the profiler time, one by one
    self.kernel_calls: list[tuple[Callable[..., Any], Any]] = list(self.calls)
    self.calls = self._batched(rec)
    # outputs: a fresh BUFFER node over the same buffer on every call, so graphs built from one call's outputs are
    # never confused with the next call's (whose kernels overwrite the buffer)
    # an output that is an input (written in place, as x.assign(...) returned) is that input of each call
    def entry(out: UOp) -> tuple[UOp, Buffer | None, int | None]:
      buf = buffers[base] if (base := out.base).op is Ops.BUFFER else None
      return (_unbind_chain(out), buf, where.get(id(buf)) if buf is not None else None)
    self.outs: list[tuple[UOp, Buffer | None, int | None]] = [entry(out) for out in outs]
    # an output over several devices: each shard as an output of its own (a shard may be an input's buffer)
    self.multi_outs = {i: [entry(s) for s in out.base.src] for i, out in enumerate(outs) if out.base.op is Ops.MULTI}
    self.written_inputs = [i for i, b in enumerate(inputs) if id(b) in written]  # their versions bump on each call
    # an input that is a buffer these kernels write (a previous call's output fed back) is copied first, as a kernel
    # writing it would change values another one still reads
    self.fed_back = {k for k in written if k not in where}
    # the written buffers whose versions a call bumps: those a BUFFER node reaches now (state written in place, the
    # outputs). The others (plan_jit's pooled intermediates, a capture's dead ones) no node reaches, so no memo
    # (schedule/realized.py) can be made in or from them; bumping each one cost a step of SmolLM2's 820 kernels ~0.3
    # ms, their Buffer objects cold in cache after the kernels streamed the weights through it
    live = live_buffers() | {id(buffers[o.base]) for o in outs if o.base.op is Ops.BUFFER}
    self.written = [b for k, b in written.items() if k not in where and k in live]
    # the random draws: the buffers each reads its key from (one per device it draws on), the device and the draw's
    # place in the device's stream (words after the capture's first draw there), and the words a call draws per
    # device (see tensor/jit.py)
    self.rng_bufs: list[tuple[Buffer, ...]] = []
    self.rng_draws: list[tuple[Any, int]] = []
    self.rng_used: dict[Any, int] = {}
    # what free_intermediates frees: the pooled intermediates (the slots under them), and the outputs made while
    # capturing (not state that existed before, as x of x += y returned, whose values must stay)
    self.freeable: list[Buffer] = [b for b in dict.fromkeys(x for _, bufs, _ in rec for x in bufs)
                                   if isinstance(b, PooledBuffer)]
    self.freeable += list({id(b): b for _, b, src in [*self.outs, *(e for es in self.multi_outs.values() for e in es)]
                           if b is not None and src is None and id(b) not in existing}.values())
    self.size_checks: list[tuple[Any, Any, bool, str]] = []  # see recorder.Recorder

  def _batched(self, rec: Recording) -> list[tuple[Callable[..., Any], Any]]:
    """The calls, each run of consecutive kernels that their device can call from C in one call (CPU: CallBatch)
    as one call; their arguments move into the batch's array (the slots filled on each call point there). A kernel
    that picks its thread count per call (ThreadChoice) joins a batch only when its parallel loop runs on one thread
    for small values of a Variable (an OpenMP `if` clause, as attention over the filled positions has): the replay
    runs the batches while the Variable is below the smallest value that wakes a kernel's threads (`split`), and
    above it `calls_high`, the same batches cut around those kernels, each called alone."""
    out: list[tuple[Callable[..., Any], Any]] = []
    self.calls_high: list[tuple[Callable[..., Any], Any]] = []
    self.split: tuple[str, int] | None = None  # (Variable, the value from which calls_high runs)
    # per kernel: None (not batched), or (batch entry, the Variable and value from which it may run threads)
    plan: list[tuple[tuple[int, int, int, dict[int, int]], tuple[str, int] | None] | None] = []
    for i, (runner, _, _) in enumerate(rec):
      dev = Device[self.devices[i]]
      e = dev.batch_entry(runner.prg, runner.spec.src) if isinstance(runner, CompiledRunner) and not runner.launch \
        and dev.call_batch is not None else None
      if e is None or not isinstance(runner, CompiledRunner): plan.append(None)
      else:
        thr = _threads_from(runner, e[3]) if e[2] else None
        if thr is not None and thr[0] not in self.var_names: thr = None  # a Variable the calls don't set
        entry = (e[0], len(runner.spec.globals), len(runner.var_names), e[1])
        plan.append(None if e[2] and thr is None else (entry, thr))
    limits = {t for p in plan if p is not None and (t := p[1]) is not None}
    if len({n for n, _ in limits}) > 1:  # conditions over different Variables: those kernels stay out
      plan = [None if p is not None and p[1] is not None else p for p in plan]
      limits = set()
    if limits: self.split = (next(iter(limits))[0], min(v for _, v in limits))
    moved: dict[int, tuple[Any, int]] = {}  # id(an argument list) -> (the batch's array, its first position there)
    old = [args for _, args in self.kernel_calls]  # alive until the slots point at the arrays (their ids are keys)
    run: list[int] = []
    def make(idx: list[int]) -> Any:
      mk = Device[self.devices[idx[0]]].call_batch
      assert mk is not None
      return mk([plan[i][0] for i in idx])  # type: ignore[index]
    def flush() -> None:
      if len(run) < 2:
        out.extend(self.kernel_calls[i] for i in run)
        self.calls_high.extend(self.kernel_calls[i] for i in run)
        run.clear()
        return
      batch, off, starts = make(run), 0, {}
      for i in run:
        fn, args = self.kernel_calls[i]
        for j, v in enumerate(args): batch.args[off + j] = v
        moved[id(args)] = (batch.args, off)
        n = plan[i][0][1] + plan[i][0][2]  # type: ignore[index]
        self.kernel_calls[i] = (fn, _ArgsAt(batch.args, off, n))
        starts[i] = off
        off += n
      out.append((batch.fxn, [batch.fns, batch.args]))
      # calls_high: the pieces between kernels that may run threads, each piece a batch over the same arguments
      piece: list[int] = []
      for i in run + [-1]:
        if i >= 0 and plan[i][1] is None:  # type: ignore[index]
          piece.append(i)
          continue
        if len(piece) == 1: self.calls_high.append(self.kernel_calls[piece[0]])
        elif piece:
          sub = make(piece)
          at = ctypes.cast(ctypes.addressof(batch.args) + 8 * starts[piece[0]], ctypes.POINTER(ctypes.c_int64))
          self.calls_high.append((sub.fxn, [sub.fns, at]))
          self._alive.append(batch.args)
        if i >= 0: self.calls_high.append(self.kernel_calls[i])
        piece = []
      run.clear()
    self._alive: list[Any] = []  # the arrays the pieces point into
    for i in range(len(rec)):
      p = plan[i]
      if p is None or (run and self.devices[run[0]] != self.devices[i]): flush()
      if p is None:
        out.append(self.kernel_calls[i])
        self.calls_high.append(self.kernel_calls[i])
      else: run.append(i)
    flush()
    if self.split is None: self.calls_high = out
    def at(args: Any, pos: int) -> tuple[Any, int]:
      arr, off = moved.get(id(args), (args, 0))
      return arr, off + pos
    self.in_slots = [[(*at(a, p), raw) for a, p, raw in slots] for slots in self.in_slots]
    self.var_slots = [(*at(a, p), n) for a, p, n in self.var_slots]
    self.buf_slots = [(*at(a, p), b) for a, p, b in self.buf_slots]
    del old
    return out

  def free_intermediates(self) -> None:
    """Free the memory only the replays use, as tinygrad's: the intermediates, and the outputs the kernels write whole
    (the last call's outputs lose their values). The next call allocates it again."""
    for b in self.freeable:
      if isinstance(b, PooledBuffer) and b.slot.is_allocated(): b.slot.deallocate()  # (slots are shared)
      if b.is_initialized(): b.deallocate()
    self.freed = True

  def reallocate(self) -> None:
    """After free_intermediates: memory again under every buffer, and its handles in the argument lists."""
    for args, pos, b in self.buf_slots: args[pos] = b.allocate()._buf
    self.freed = False

  def __call__(self, inputs: list[UOp], variables: dict[str, UOp],
               rng_keys: list[tuple[int, int]] | None = None) -> list[UOp]:
    """Run the kernels on this call's input buffers (the BUFFER nodes `inputs`, in the capture's order) with its
    Variables' values, and the keys of this call's random draws where the capture draws random numbers (one uint32
    pair per draw, in rng_bufs' order). Returns the outputs' graphs, in order: views of the buffers the kernels
    wrote."""
    # the call's key matched this capture's: the inputs have its shapes, dtypes and devices
    debug = DEBUG.value  # read once: each comparison with the setting is a Python call
    st = time.perf_counter() if debug >= 1 else 0.0
    if self.size_checks: self._check_sizes(variables)
    copies: list[Buffer] = []  # fed-back inputs' copies: alive until the kernels ran
    for base, slots in zip(inputs, self.in_slots):
      if (b := slots_of(base).get(BUFFER)) is None: b = buffers[base]  # (that raises: an input without a Buffer)
      if b._buf is None or id(b) in self.fed_back: b = _own(b, copies)
      raw = b._buf
      for args, pos, want_raw in slots: args[pos] = raw if want_raw else b
    for args, pos, n in self.var_slots: args[pos] = variables[n].src[1].arg
    for bufs, key in zip(self.rng_bufs, rng_keys or ()):
      for b in bufs: b.copyin(memoryview(struct.pack("<II", *key)))
    if debug >= 2 or PROFILER.active:
      for (fn, args), kname, dev in zip(self.kernel_calls, self.kernel_names, self.devices):
        kt = time.perf_counter()
        fn(*args)
        ke = time.perf_counter()
        if PROFILER.active: PROFILER.span(kname, "jit", dev, kt, ke)
        if DEBUG >= 2: print(f"*** jit {kname:32s} {(ke - kt) * 1e6:9.2f} us")
    else:
      calls = self.calls if (sp := self.split) is None or variables[sp[0]].src[1].arg < sp[1] else self.calls_high
      for fn, args in calls: fn(*args)
    for b in self.written: b.version += 1  # results memoized in these buffers are stale now
    GlobalCounters.kernel_count += self.n_kernels
    GlobalCounters.global_ops += self.ops
    GlobalCounters.global_mem += self.mem
    if debug >= 1: print(f"jit: replayed {len(self.kernel_calls)} kernels in {(time.perf_counter() - st) * 1e3:.3f} ms")
    outs = []
    vals = {v.src[0]: v.src[1].arg for v in variables.values()} if variables else {}
    for i, (u, buf, src) in enumerate(self.outs):
      if (shards := self.multi_outs.get(i)) is not None:
        m = u.base
        outs.append(_swap_base(u, m.replace(src=tuple(_out(e, inputs, vals) for e in shards)), vals))
      else: outs.append(_out((u, buf, src), inputs, vals))
    return outs

  def _check_sizes(self, variables: dict[str, UOp]) -> None:
    """The captured kernels are right only where the traced function's size checks pass for this call's values."""
    vals = {n: v.src[1].arg for n, v in variables.items()}
    for a, b, is_eq, what in self.size_checks:
      va, vb = sym_val(a, vals), sym_val(b, vals)
      if (va != vb) if is_eq else (va > vb):
        shown = ", ".join(f"{n}={v}" for n, v in sorted(vals.items()))
        cmp = "!=" if is_eq else ">"
        raise JitValueError(f"TinyJit: with {shown} the captured {what} is out of bounds ({va} {cmp} "
                            f"{vb}): its kernels would read outside their buffers. Keep the Variables in the range the "
                            "function allows, or call it without the jit for this value")

def _threads_from(runner: CompiledRunner, wakes: Callable[..., int] | None) -> tuple[str, int] | None:
  """(Variable, value) when the kernel's parallel loop wakes its threads (`wakes`, its `if` clause, is true) only
  from that value of its one Variable on: the clause compares work that grows with the Variable with a minimum,
  checked at 17 values across its range. None for a loop without a clause, or a clause it can't place."""
  if wakes is None or len(runner.var_names) != 1: return None
  var = next((v for v in runner.spec.vars if v.arg[0] == runner.var_names[0]), None)
  if var is None: return None
  name, lo, hi = var.arg[0], var.arg[1], var.arg[2]
  samples = [bool(wakes(lo + (hi - lo) * k // 16)) for k in range(17)]
  if any(a and not b for a, b in zip(samples, samples[1:])): return None  # not monotone
  if not samples[-1]: return (name, hi + 1)
  while lo < hi:  # the smallest value that wakes the threads
    mid = (lo + hi) // 2
    if wakes(mid): hi = mid
    else: lo = mid + 1
  return (name, lo)

class _ArgsAt:
  """A batched kernel's arguments, where its batch keeps them (n values of an array from position off): DEBUG >= 2
  and the profiler call the kernel alone with them."""
  def __init__(self, arr: Any, off: int, n: int): self.arr, self.off, self.n = arr, off, n
  def __iter__(self) -> Any: return iter(self.arr[self.off:self.off + self.n])

_JITBEAM_AT_IMPORT = JITBEAM.value  # the environment's value when attograd loaded

def capture_beam() -> int:
  """The BEAM width for the kernels a capture builds (they are replayed many times), 0 for no search: JITBEAM as a
  Context sets it, else as getenv reads it from the environment, where tinygrad's capture reads it (tinygrad code
  may stand in for this module's getenv to steer it)."""
  return int(JITBEAM.value if JITBEAM.value != _JITBEAM_AT_IMPORT else getenv("JITBEAM", JITBEAM.value))

def live_buffers() -> set[int]:
  """The ids of the Buffers behind every BUFFER node alive now."""
  return {id(b) for u in UOpMetaClass.live() if u.op is Ops.BUFFER and (b := buffers.get(u)) is not None}

def graph_class(dev: Any) -> Any:
  """tinygrad's graph runner class for a device (None where it has none): attograd's replays call the kernels
  themselves (runs of them in one call where the device offers call_batch), so every device's is None."""
  return dev.graph

def _own(b: Buffer, copies: list[Buffer]) -> Buffer:
  """An input buffer a replay can hand its kernels: allocated (Tensor.empty(n) has no memory yet, and a kernel would
  write to NULL), and copied when it is one the kernels write (a previous call's output fed back: a kernel writing it
  would change values another one still reads)."""
  if b._buf is None: return b.allocate()
  copies.append(nb := Buffer(b.device, b.size, b.dtype))
  _copy(nb, b)
  return nb

def _fast_call(runner: CompiledRunner, nbufs: int) -> Callable[..., Any]:
  """The cheapest callable running this kernel with (buffer handles..., variable values...): the ctypes function
  itself where the runtime exposes one with its argument types set, else a call through the program object."""
  fxn = getattr(runner.prg, "fxn", None)
  launch = getattr(runner, "launch", None) or {}  # GPU programs: global and local sizes
  if fxn is not None and getattr(fxn, "argtypes", None) is not None and not launch: return fxn
  prg = runner.prg
  def call(*args: Any) -> None: prg(*args[:nbufs], vals=tuple(args[nbufs:]), **launch)
  return call

def prune_recording(rec: Recording, changing: list[Any]) -> Recording:
  """TinyJit(prune=True): only the recorded kernels whose results can differ between calls, those that read a buffer
  the inputs (or the random counter) change, directly or through an earlier such kernel, or that take a Variable.
  The others ran once while capturing; their results stay in their buffers, which the replay reads (a buffer read
  before it is written is never pooled by plan_jit)."""
  live = {id(b) for b in changing}
  kept: Recording = []
  for runner, kbufs, var_vals in rec:
    if var_vals or any(id(b) in live for b in kbufs):
      kept.append((runner, kbufs, var_vals))
      live.update(id(b) for b in kbufs)
  return kept

