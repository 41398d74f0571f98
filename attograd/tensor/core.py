"""The user API: a lazy Tensor over a UOp graph. Shapes and dtypes are checked when a method is called;
nothing runs until realize(), numpy(), item() or tolist()."""
from __future__ import annotations
import functools, math, operator, os, pickle, struct, sys, time, weakref
import attograd.tensor.printing as printing
from typing import Any, Callable, Sequence, cast
from attograd.device import Buffer, Device, ExternalBuffer
from attograd.dtype import (bf16_bits_to_float, ConstType, DType, dtypes, DTYPES_DICT, float_to_bf16_bits,
                            float_to_fp8_bits, fp8_bits_to_float, from_np_dtype, Invalid, least_upper_dtype,
                            least_upper_float, strong_dtype, sum_acc_dtype, to_dtype, to_np_dtype,
                            WeakDTypeError)
from attograd.helpers import (ALLOW_DEVICE_USAGE, argfix, ArgumentError, AssertedArgumentError, Context, DEBUG,
                              DTypeOpError, fetch, GlobalCounters, make_tuple, prod, TRAINING)
from attograd.uop.ops import (GroupOp, Ops, SymbolicSizeError, UOp, afters_built, broadcast_pair, broadcast_shape,
                              shape_str, sint, new_uop, ssimp, sym_eq, sym_max, sym_val, sym_vals, unbind_sint)
from attograd.engine.buffers import IOTA_TAG, buffers, new_buffer_uop
from attograd.schedule import create_schedule, lookup_realized, remember_weakly
from attograd.uop import build
from attograd.uop.kernel import fold_constant_args, written_slots
from attograd.uop.state import ORIGIN, REALIZED, has, put, slots
from attograd.uop.variables import map_arg as _map_arg
from attograd.uop.view import ShapeTracker, is_symbolic, smax, strides_for_shape
from attograd.engine.item import ScheduleItem
from attograd.engine.realize import linear_of, run_schedule
from attograd.engine import multi
from attograd.engine.recorder import JitRuntimeError, active as _active_recorder
from attograd.engine.profile import PROFILER
import attograd.viz as viz
from attograd.viz import VIZ
from attograd.engine.nan import DEBUG_NAN, NaNError, call_site
import attograd.tensor.disk as tensor_disk
import attograd.tensor.rng as rng
import attograd.tensor.pending as pending
from attograd.tensor.buffer_views import (_ONE_TO_ONE, _contiguous_view_of_buffer, _is_realized, _is_whole_buffer,
                                         _prefix_of_buffer, _prefix_view_of_buffer, _writable_view)
from attograd.tensor.indexing import _getitem
from attograd.tensor.movement import MovementMixin
from attograd.tensor.compose import ComposeMixin
from attograd.tensor.functional import NNMixin
from attograd.tensor.autograd import (GradMixin, _grad_tensors, buffer_shared, drop_unheld_grad, old_values_for_grad,
                                     write_carries_grad, write_keeps_grad_path)
import attograd.tensor.live as live
from attograd.tensor.live import _made, _prune_at, _weakref
from attograd.tensor.elementwise import MathMixin
from attograd.tensor.linalg import LinalgMixin
from attograd.tensor.call import CallMixin
from attograd.tensor.hashing import HashMixin

def _takes_requires_grad(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
  """Creation functions build their result from several ops: set `requires_grad` on the tensor they return."""
  @functools.wraps(fn)
  def wrapper(*args: Any, **kw: Any) -> Tensor:
    rg = kw.pop("requires_grad", None)
    out = fn(*args, **kw)
    if rg is not None: out.requires_grad = rg
    return out
  return wrapper

def _shape_of_data(data: Any) -> tuple[int, ...]:
  shape: list[int] = []
  x = data
  while isinstance(x, (list, tuple)):
    shape.append(len(x))
    if len(x) == 0: break
    x = x[0]
  return tuple(shape)

def _flatten_data(data: Any) -> list[Any]:
  """The leaves of nested lists and tuples (and of arrays inside them), in order. A one-element Tensor among them is
  its value, as in PyTorch; a bigger one is an error naming Tensor.stack (it was read as an empty list of bytes)."""
  out: list[Any] = []
  stack: list[Any] = [iter(data)]
  while stack:
    for y in stack[-1]:
      if isinstance(y, Tensor):
        if y.numel() != 1:
          raise TypeError(f"Tensor: a list holding a Tensor of shape {y.shape} is not data: join Tensors with "
                          "Tensor.stack(...) (only one-element Tensors become values, as in PyTorch)")
        out.append(y.item())
      elif hasattr(y, "__len__") and hasattr(y, "__getitem__") and not isinstance(y, (str, bytes)):
        stack.append(iter(y))
        break
      else: out.append(y)
    else: stack.pop()
  return out

def _unpickle_tensor(uop: UOp, data: list[Any], requires_grad: bool | None, grad: Tensor | None) -> Tensor:
  """A pickled Tensor (Tensor.__reduce_ex__): each buffer of its graph a new buffer holding the pickled bytes. data
  is flat, [node, bytes or None, node, ...] (no tuples: the unpickler's memo would keep each one)."""
  subs = {}
  pairs = data if data and data[0].__class__ is tuple else zip(data[::2], data[1::2])  # (pickled before: pairs)
  for n, raw in pairs:
    nb = new_buffer_uop(n.device, n.arg[1], n.dtype, iota=n.arg[2:] == (IOTA_TAG,))
    if raw is not None: buffers[nb].copyin(memoryview(raw))
    subs[n] = nb
  # the unpickler's memo keeps this list until the whole load ends: emptied, the bytes it held (the out-of-band
  # buffers of protocol 5) are freed now, so loading many tensors never holds all their bytes twice
  data.clear()
  # a BUFFER node the pickle had no Buffer for (one built but never given memory) gets a fresh one too: its number
  # may be another buffer's here
  for n in uop.toposort():
    if n.op is Ops.BUFFER and n not in subs: subs[n] = new_buffer_uop(n.device, n.arg[1], n.dtype)
  t = Tensor(uop.substitute(subs) if subs else uop)
  t.requires_grad, t.grad = requires_grad, grad
  return t

def _check_ragged(data: Any, shape: tuple[int, ...]) -> None:
  stack = [(data, 0)]
  while stack:
    x, d = stack.pop()
    if d == len(shape): continue
    if not isinstance(x, (list, tuple)) or len(x) != shape[d]:
      raise ValueError(f"Tensor: nested lists must be rectangular; expected length {shape[d]} at depth {d}, "
                       f"got {x!r:.60}")
    stack.extend((y, d + 1) for y in x)

def _pack(values: list[Any], dtype: DType) -> bytes:
  if dtype is dtypes.bfloat16: return struct.pack(f"<{len(values)}H", *[float_to_bf16_bits(float(v)) for v in values])
  if dtype in dtypes.fp8s: return bytes(float_to_fp8_bits(float(v), dtype) for v in values)
  conv = [dtypes.as_const(v, dtype) for v in values]
  return struct.pack(f"<{len(conv)}{dtype.fmt}", *conv)

def _unpack(raw: bytes | memoryview, dtype: DType, n: int) -> list[Any]:
  if dtype is dtypes.bfloat16: return [bf16_bits_to_float(b) for b in struct.unpack(f"<{n}H", raw)]
  if dtype in dtypes.fp8s: return [fp8_bits_to_float(b, dtype) for b in bytes(raw)]
  return list(struct.unpack(f"<{n}{dtype.fmt}", raw))

def _like(u: UOp, x: UOp) -> UOp:
  """u, an elementwise node over operands broadcast to x's shape, with its shape and device set from x's (what
  UOp.shape and .device would compute, without their calls: this is on the path of every tensor op)."""
  if "shape" not in (d := u.__dict__) and (dev := x.device) is not None: d["shape"], d["device"] = x.shape, dev
  return u

def _rounded_once(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
  """A float function made of several ops, on half/bfloat16/fp8: computed in float32 and rounded once at the end, as
  PyTorch's kernels do (rounding after each step loses the low bits: exp's x * log2(e) rounded to fp8 first is off by
  up to 45%, to half by several steps)."""
  @functools.wraps(fn)
  def wrapper(self: Tensor) -> Tensor:
    if (w := self._weak) is not None:  # computed in the strong dtype; a float result is the weak float
      out = wrapper(self._strong())
      return out.cast(least_upper_float(w)) if dtypes.is_float(out.dtype) else out
    d = self.dtype
    if d.itemsize < 4 and dtypes.is_float(d): return fn(self.cast(dtypes.float32)).cast(d)
    return fn(self)
  return wrapper

class _TensorType(type):
  """Tensor's metaclass, for one class-level property: `Tensor.training` reads and sets the TRAINING flag, so that
  `Tensor.training = True`, `with Tensor.train():` and tinygrad's `Context(TRAINING=1)` are one switch."""
  @property
  def training(cls) -> bool: return bool(TRAINING.value)
  @training.setter
  def training(cls, flag: bool) -> None: TRAINING.value = int(flag)
  @training.deleter
  def training(cls) -> None: TRAINING.value = 0  # back to the default (monkeypatch restores a class attr by deleting)


# a matmul this big (M, K and N at least this) is bound by its multiply-adds, not by reading its operands, and one
# more kernel's launch is small next to it (300x300 stays one kernel)
_ALIGN_MIN = 512

def _aligned_cols(x: Tensor, y: Tensor) -> int:
  """The columns of y (K, N) a big matmul x @ y reads: N, or N rounded up to whole 64-byte cache lines, when y is a
  buffer whose rows start mid-line. The kernel's vector loads along a row of y then each span two lines: 1023x1023
  ran at 167 GFLOPS on one core against 1024's ~210. A zero-padded copy of y (one pass over it) and the product's
  first N columns cost less: 1023x1023 192-196 GFLOPS (CPU time, one thread, the copies counted)."""
  n, per_line = y.shape[-1], 64 // y.dtype.itemsize
  if y.ndim < 2 or not isinstance(n, int) or n < _ALIGN_MIN or n % per_line == 0 or not dtypes.is_float(y.dtype) or \
     isinstance(y.device, tuple) or not y.uop.has_buffer_identity():
    return n
  rows = prod(x.shape[:-1])
  if not isinstance(rows, int) or rows < _ALIGN_MIN or not isinstance(k := x.shape[-1], int) or k < _ALIGN_MIN: return n
  return -(-n // per_line) * per_line

class Tensor(GradMixin, NNMixin, MovementMixin, ComposeMixin, MathMixin, LinalgMixin, CallMixin, HashMixin,
             metaclass=_TensorType):
  """A multi-dimensional array whose operations build a lazy graph.

  >>> Tensor([1, 2, 3]).sum().item()
  6
  """
  _seed: int = 0
  # the weak dtype this tensor shows (dtypes.weakint/weakfloat), or None: a Python scalar's kind, which defers to the
  # dtype of what it meets (Tensor(2) + int8 tensor is int8). Its values are in self.uop's strong dtype all the same.
  _weak: DType | None = None
  # the random stream per device, as tinygrad keeps it (made by the device's first draw since the seed was set): its
  # key pair and the count of 32-bit words it drew, as uint32 Tensors (low word first). A draw reads its key from a
  # buffer, so every draw of a size runs one compiled kernel; the count's truth is kept on the host (_rng_host), and the
  # counter Tensor shows it as a lazy constant: a draw runs nothing. Assigning the counter moves the stream.
  _deviceless = False  # see __init__ and device
  _device_seeds: dict[str, Tensor] = {}
  _device_rng_counters: dict[str, Tensor] = {}
  _rng_host: dict[str, tuple[tuple[int, int], int, UOp]] = {}  # device: (its key pair, words drawn, counter's node)

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None):
    asked_device, device = device, Device.canonicalize(device)
    if dtype is not None: dtype = to_dtype(dtype)
    weak = dtype if dtype in _WEAK else None
    if weak is not None:
      if not isinstance(data, (bool, int, float, UOp, Tensor)) and data is not None:
        raise WeakDTypeError(f"Tensor: can't store {type(data).__name__} data as {weak}, which has no storage; "
                               f"use a concrete dtype such as {strong_dtype(weak)}")
      dtype = strong_dtype(weak)
    # a new Tensor is in no grad registry yet: only True needs the setter's bookkeeping (this runs for every input)
    if requires_grad: self.requires_grad = requires_grad
    else: self._requires_grad = requires_grad
    if data.__class__ in _ndarrays: uop = _uop_of_array(data, dtype, device)  # the common input: tested first
    elif isinstance(data, UOp):
      if data.dtype in _WEAK:  # (a constant of a weak dtype) its node computes in the strong one
        if dtype is None: weak = data.dtype
        data = UOp(data.op, strong_dtype(data.dtype), data.src, data.arg)
      uop = data if dtype is None or data.dtype == dtype else UOp(Ops.CAST, dtype, (data,))
      if uop.device is None and uop.op in _SCALAR_EXPR and \
         any(x.op is Ops.BIND or x.op is Ops.DEFINE_VAR for x in uop.toposort()):
        # a Variable's value as a tensor: 0 + v ties it to the device (the graph alone names none, so the same
        # graph realized for another device would reuse this one's schedule)
        uop = UOp(Ops.ADD, uop.dtype, (build.const(0, uop.dtype, device), uop))
        # a Variable of the default int defers like the Python int it stands for (tinygrad's weakint)
        if dtype is None and uop.dtype is dtypes.default_int: weak = dtypes.weakint
    elif isinstance(data, Tensor): uop = data.uop if dtype is None else data.cast(dtype).uop
    elif data is None:
      uop = _buffer_from_bytes(b"", (0,), dtype or dtypes.default_float, device)
      if dtype is None: weak = dtypes.weakfloat  # as tinygrad's Tensor(None), a 0.0 of no dtype
    elif isinstance(data, (bool, int, float)):
      d = dtype or dtypes.from_py(data)
      if d in _WEAK:  # a Python scalar: weak, stored in its strong dtype
        weak, d = d, dtypes.from_py_stored(data)
        # concrete: a leaf with a gradient (it has storage; tinygrad refuses one), an int the default int can't hold
        if requires_grad or d is not strong_dtype(weak): weak = None
      # a leaf that wants a gradient gets its own buffer: as a constant it would be the same node as every equal literal
      uop = build.const(data, d, device) if not requires_grad else _buffer_from_bytes(_pack([data], d), (), d, device)
    elif isinstance(data, (bytes, bytearray, memoryview)):
      # read now (the Buffer copies them in), so later changes to a bytearray or memoryview are not seen; a contiguous
      # one is read in place, without a copy to bytes first
      mv = memoryview(data)
      raw = mv.cast("B") if mv.c_contiguous else bytes(mv)
      # the bytes as elements of dtype (uint8 by default), reinterpreted like torch.frombuffer and tinygrad
      d = dtype or dtypes.uint8
      if len(raw) % d.itemsize:
        raise ValueError(f"Tensor: {len(raw)} bytes aren't a whole number of {d} elements ({d.itemsize} bytes each)")
      uop = _buffer_from_bytes(raw, (len(raw) // d.itemsize,), d, device)
    elif isinstance(data, (list, tuple)):
      if data and all(isinstance(x, (bytes, bytearray)) for x in data):  # rows of bytes, as tinygrad: uint8 by default
        data, dtype = [list(x) for x in data], dtype or dtypes.uint8
      shape = _shape_of_data(data)
      _check_ragged(data, shape)
      flat = _flatten_data(data)
      d = dtype or (dtypes.from_py(flat) if flat else dtypes.default_float)
      if flat and d is dtypes.bool: flat = [bool(v) for v in flat]
      uop = _buffer_from_bytes(_pack(flat, d), shape, d, device)
    elif type(data).__module__ == "numpy" or hasattr(data, "__array_interface__"):
      uop = _uop_of_array(data, dtype, device)
      if data.__class__.__name__ == "ndarray": _ndarrays.add(data.__class__)  # the next one takes the first branch
    elif isinstance(data, os.PathLike):
      # a file's bytes stay on DISK (memory-mapped, nothing read) unless a device is asked for, as in tinygrad
      uop = tensor_disk.file_uop(data, dtype or dtypes.uint8)
      if asked_device is not None and not tensor_disk.on_disk(device): uop = Tensor(uop).to(device).uop
    else: raise TypeError(f"Tensor: can't make a Tensor from {type(data).__name__}")
    self.uop: UOp = uop
    if weak is not None: self._weak = weak
    self._device = device if uop.device is None else uop.device
    # made from a UOp that names no device, none asked for: tinygrad's device-less tensor (device None); it computes
    # on the default device, which the ops and realize() use
    if uop.device is None and asked_device is None and isinstance(data, UOp): self._deviceless = True
    _made.append(_weakref(self))  # in tensor/live.py's registry
    if len(_made) > _prune_at[0]: live.prune()

  # ***** properties *****
  @property
  def shape(self) -> tuple[sint, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType:
    w = self._weak
    return self.uop.dtype if w is None else w
  @property
  def device(self) -> str:
    """The device (a tuple of them for a sharded tensor); None for a Tensor of a UOp that names none, as in tinygrad
    (it computes on the default device)."""
    return self.uop.device or (None if self._deviceless else self._device)  # type: ignore[return-value]
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)
  @property
  def max_shape(self) -> tuple[int, ...]:
    """The shape with each symbolic size at its Variables' largest values (what a buffer for it must hold).

    >>> from attograd import UOp
    >>> Tensor.empty(2, UOp.variable("n", 1, 8)).max_shape
    (2, 8)
    """
    return tuple(int(sym_max(s)) for s in self.shape)
  def max_numel(self) -> int: return prod(self.max_shape)
  def element_size(self) -> int: return self.uop.dtype.itemsize
  def nbytes(self) -> int: return self.numel() * self.uop.dtype.itemsize
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def _shape_repr(self) -> str:
    dims = [str(d) if d.__class__ is int else f"{d.render()}={sym_val(d)}" for d in self.shape]  # type: ignore
    return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"
  def __repr__(self) -> str:
    """The values, like PyTorch and NumPy print them (long dims summarized with `...`), then dtype, device and
    requires_grad. A lazy tensor is realized to print it; one too large to print whole computes only the edges
    shown."""
    lazy = not _is_realized(self.uop)
    try: body, whole = self._format_values()
    except Exception as e:  # printing must not fail where the data can't be computed: say why instead
      return f"<Tensor shape={self._shape_repr()} dtype={self.dtype} device={self.device!r}: values unavailable ({e})>"
    size = f"size={self._shape_repr()}, " if 0 in self.shape else ""  # `[]` alone doesn't say the shape
    grad = ", requires_grad=True" if self.requires_grad else ""
    extras = f"{size}dtype={self.dtype}, device={self.device!r}{grad}"
    note = ("  # lazy: realized to print" if whole else "  # lazy: edges computed to print") if lazy else ""
    if self.device is None:  # (the UOp as tinygrad's repr shows it: device, shape, dtype)
      note = f"  # <UOp None {self._shape_repr()}, {self.dtype}, {self.uop.op.name}>: no device, computed on " \
             f"{self._device} to print"
    return f"Tensor({body}, {extras}){note}"
  __str__ = __repr__
  def _format_values(self) -> tuple[str, bool]:
    """The values as text, and whether the whole tensor was realized for it (else only the edges printed)."""
    t = self._concrete() if is_symbolic(self.shape) else self
    shape: tuple[int, ...] = tuple(int(d) for d in t.shape)
    whole = prod(shape) <= printing.THRESHOLD
    kept = [printing.edge_indices(n, not whole) for n in shape]
    for d, idx in enumerate(kept):  # keep only the edge items of each summarized dim
      if idx is None: continue
      n, e = shape[d], printing.EDGEITEMS
      head = [(0, s) for s in t.shape[:d]] + [(0, e)] + [(0, s) for s in t.shape[d + 1:]]
      tail = [(0, s) for s in t.shape[:d]] + [(n - e, n)] + [(0, s) for s in t.shape[d + 1:]]
      t = t.shrink(head).cat(t.shrink(tail), dim=d)
    if whole: t = t.realize()
    text = printing.format_values(t.tolist(), shape, kept, dtypes.is_float(self.dtype), self.dtype is dtypes.bool)
    return text, whole
  def __format__(self, spec: str) -> str:
    """`f"{t:.3f}"` formats a one-element tensor's value; an empty spec gives str(t)."""
    if spec == "": return str(self)
    if self.numel() != 1:
      raise TypeError(f"Tensor.__format__: format spec {spec!r} needs a one-element tensor, got shape {self.shape}")
    return format(self.item(), spec)
  def __hash__(self) -> int: return id(self)
  def __reduce_ex__(self, protocol: Any) -> tuple[Any, tuple]:
    """Pickled as its graph and the bytes of every buffer the graph reads (for a realized tensor: its values), so it
    unpickles in another process too, where the same buffer numbers mean other buffers; requires_grad and .grad
    come along. Nothing is computed: a lazy tensor stays lazy (but a pending write into a buffer it reads runs). With
    protocol 5 the bytes go as pickle.PickleBuffer views of the memory (host memory is not copied), so
    pickle.dumps(..., buffer_callback=) can send them out of band."""
    pending.flush_for([self.uop])
    def raw(buf: Any) -> Any:
      if not buf.is_allocated(): return None
      return pickle.PickleBuffer(buf.as_memoryview()) if isinstance(protocol, int) and protocol >= 5 else buf.as_bytes()
    data = [x for n in self.uop.toposort() if n.op is Ops.BUFFER and (buf := buffers.get(n)) is not None
            for x in (n, raw(buf))]
    return (_unpickle_tensor, (self.uop, data, self.requires_grad, self.grad))
  def __bool__(self) -> bool:
    # as tinygrad: a Tensor is lazy and may be on a device, so `if t:` (and `t in [...]`, which compares with ==)
    # would hide a device sync; read the value with .item() (or reduce with .any()/.all()) to say so
    raise TypeError(f"the truth value of a Tensor (shape {self.shape}) is not defined: use .item(), .any() or .all()")
  def _in_buffer(self) -> Tensor:
    """This value computed into a buffer of its own: a plain CONTIGUOUS, which hash-consing shares between equal
    graphs (nothing writes into it; contiguous() numbers its node so that an assign into one copy can't show in
    another)."""
    return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
  def _new(self, uop: UOp, like: UOp | None = None) -> Tensor:
    """A Tensor of `uop` on this tensor's device. like: a node of uop's shape and device, an elementwise op's operand
    (set from its fields: UOp.shape and .device would compute the same, in more calls)."""
    weak = None
    if uop.dtype in _WEAK:  # built from a weak tensor's dtype: the node computes in the strong one
      weak, uop = uop.dtype, UOp(uop.op, strong_dtype(uop.dtype), uop.src, uop.arg)
    elif (w := self._weak) is not None and uop.dtype is self.uop.dtype: weak = w  # an op that keeps the dtype
    if like is not None and "shape" not in (d := uop.__dict__) and (dev := like.device) is not None:
      d["shape"], d["device"] = like.shape, dev
    else: _ = uop.shape, uop.device  # computed now, while the sources' are cached: no deep recursion later
    t = Tensor.__new__(Tensor)
    t.uop, t._requires_grad, t._device = uop, None, self._device  # in no grad registry yet (.grad: the class's None)
    if weak is not None: t._weak = weak
    if DEBUG_NAN.value and uop not in _op_sites: _op_sites[uop] = call_site()
    _made.append(_weakref(t))  # in tensor/live.py's registry
    if len(_made) > _prune_at[0]: live.prune()
    return t

  @staticmethod
  def _of_uop(uop: UOp) -> Tensor:
    """Tensor(uop) for a node that names its device (a TinyJit replay's outputs): no argument checks."""
    if (dev := uop.device) is None: return Tensor(uop)
    t = Tensor.__new__(Tensor)
    t.uop, t._requires_grad, t._device = uop, None, dev
    _made.append(_weakref(t))  # in tensor/live.py's registry
    if len(_made) > _prune_at[0]: live.prune()
    return t

  # ***** realize and data access *****
  def realize(self, *lst: Tensor, do_update_stats: bool = True) -> Tensor:
    """Compute this tensor (and `lst`) now. do_update_stats=False leaves GlobalCounters as they were."""
    # a whole buffer already (a TinyJit's output), with no write waiting to run into it: nothing to do
    if not lst and self.uop.op is Ops.BUFFER and not pending.pending: return self
    if do_update_stats:
      Tensor._realize_all([self, *lst])
      return self
    saved = {k: getattr(GlobalCounters, k) for k in ("global_ops", "global_mem", "time_sum_s", "kernel_count")}
    try: Tensor._realize_all([self, *lst])
    finally:
      for k, v in saved.items(): setattr(GlobalCounters, k, v)
    return self
  def callify(self, *lst: Tensor) -> Tensor:
    """tinygrad's: give this tensor (and `lst`) a buffer of its own now, nothing computed yet. Its value is written
    there at the first realize that needs it (a lazy assign, tensor/pending.py), so the graphs built on it from here
    read the buffer instead of repeating its computation. The values don't change; one that has a buffer already is
    left as it is. Returns self.

    >>> a = Tensor([1.0, 2.0])
    >>> b = (a + 1).callify()
    >>> b.uop.base.op.name, b.tolist()
    ('BUFFER', [2.0, 3.0])
    """
    seen: set[int] = set()
    for t in (self, *lst):
      if id(t) in seen or _is_whole_buffer(t.uop): continue
      seen.add(id(t))
      # (a sharded tensor's home is split the same way; a weak one commits to its strong dtype: storage has one)
      graph, home = t.uop, t._strong().empty_like()
      home._assign(t._strong(), value_private=False, lazy=True)
      t.__dict__.pop("_weak", None)
      # backward() through the tensor still reaches its graph, as through a realized one
      if _grad_tensors and not t.requires_grad: put(home.uop, ORIGIN, graph)
      t.uop = home.uop
    return self
  def linear_with_vars(self, *lst: Tensor) -> tuple[UOp, dict[str, int]]:
    """tinygrad's: the schedule that realizes this tensor (and `lst`), made but not run: a LINEAR UOp with one CALL per
    kernel or copy, in order (`call.src[0]` the kernel's AST, a SINK, or the COPY; `call.src[1:]` its buffers), and the
    values of the Variables bound in it. The tensors refer to their result buffers from now on; those hold their values
    once `attograd.engine.realize.run_linear(linear, var_vals)` has run it."""
    items: list[ScheduleItem] = []
    Tensor._realize_all([self, *lst], defer=items)
    return linear_of(items), {v.arg[0]: val for si in items for v, val in si.var_vals if not v.arg[0].startswith("_")}
  def schedule_linear(self, *lst: Tensor) -> UOp:
    """linear_with_vars() of tensors whose schedule binds no Variable: the LINEAR alone."""
    linear, var_vals = self.linear_with_vars(*lst)
    if var_vals: raise ValueError(f"schedule_linear: the schedule binds Variables {sorted(var_vals)}; use "
                                  "linear_with_vars(), which returns their values too")
    return linear
  @staticmethod
  def _realize_all(ts: Sequence[Tensor], keep_graph: bool = True, defer: list[ScheduleItem] | None = None) -> None:
    """Realize `ts` together. keep_graph: a realized value remembers the graph that computed it, for a later
    backward() through it (the optimizer's own writes and gradients never need that, and holding those graphs keeps
    a step's intermediates out of the memory planner's reuse). defer: the schedule's items go there instead of
    running (linear_with_vars)."""
    if afters_built[0]:  # tinygrad's lazy writes (UOp.after): run them, then realize what they were waited for
      for t in ts:
        if any(n.op is Ops.AFTER for n in t.uop.toposort()): t.uop = _run_afters(t.uop, defer)
    # lazy writes (Tensor.assign) into the buffers these read or write run first, each as it would have run then
    if pending.pending and ALLOW_DEVICE_USAGE.value: pending.flush_for([t.uop for t in ts], defer)
    # (one tensor, the usual realize, without the comprehensions: in this Python each is a call of its own)
    todo = ([] if _is_realized(ts[0].uop) else list(ts)) if len(ts) == 1 else [t for t in ts if not _is_realized(t.uop)]
    if not todo: return
    for t in todo:  # a device-less graph is computed on the tensor's device (see _on_device); not tinygrad's
      if t.uop.device is None and not t._deviceless: t.uop = _on_device(t.uop, t._device)  # device-less tensor
    # (the settings read through .value here and below: `if FLAG:` and `FLAG >= 1` are Python calls, on every realize)
    if not ALLOW_DEVICE_USAGE.value:
      raise RuntimeError("realize: device use is off here (inside a @function body, whose graph is traced, not run); "
                         "return the Tensor from the function and realize it outside")
    st = time.perf_counter() if (debug := DEBUG.value) >= 1 else 0.0
    k0 = GlobalCounters.kernel_count
    outs = [todo[0].uop] if len(todo) == 1 else list(dict.fromkeys(t.uop for t in todo))
    # in-place writes among them (an optimizer step): lazy tensors that read the written buffers get their values
    # now, in the same schedule (the scheduler runs a read of a buffer's old version before its write, as for
    # `loss.realize(*opt.schedule_step())`): a lazy loss read after opt.step() was a schedule of its own first, its
    # forward kernels computed there and again for the gradients
    readers: list[Tensor] = []
    if (len(outs) > 1 or outs[0].op is Ops.ASSIGN) and \
       (targets := {b for u in outs if u.op is Ops.ASSIGN and (b := u.src[0].base).op is Ops.BUFFER}) and \
       (readers := _readers_of(targets, set(outs))):
      if pending.pending: pending.flush_for([t.uop for t in readers], defer)  # what they read of other buffers
      todo = readers + todo
      outs = list(dict.fromkeys([t.uop for t in readers] + outs))
    sst = PROFILER.now() if PROFILER.active else 0.0
    items, becomes = create_schedule(outs)
    if PROFILER.active: PROFILER.span("schedule", "schedule", outs[0].device or Device.DEFAULT, sst, PROFILER.now(),
                                      kernels=len(items), outputs=len(outs))
    if VIZ.value: viz.record_schedule(outs, len(items))
    if defer is not None: defer.extend(items)
    else:
      try: run_schedule(items)  # (create_schedule remembered where each result now lives)
      except NaNError as e:
        e.blame(_first_nonfinite(outs))
        raise
    grads = bool(_grad_tensors)  # (a WeakValueDictionary: its len is a Python call)
    keep_graph = keep_graph and grads  # autograd may still need the graph behind a realized value
    kept = {id(t) for t in readers} if readers and grads else ()  # (a reader's graph is kept, as when realized alone)
    for t in todo:
      nu = becomes.get(t.uop, t.uop)
      # (not a file's: a DISK tensor has no gradient, and a weak memo would let a later realize run its copy into the
      # file again, over the writes made since: a live requires_grad tensor made a DISK slice's assign vanish)
      if (keep_graph or id(t) in kept) and nu is not t.uop and nu.base.op is Ops.BUFFER and t.uop.op is not Ops.ASSIGN \
         and not t.requires_grad and not getattr(t, "_is_grad", False) and not tensor_disk.on_disk(nu.device):
        put(nu, ORIGIN, t.uop)
        remember_weakly(t.uop)
      t.uop = nu
    if defer is None and len(items) > len(todo): _adopt_intermediates(todo, keep_graph)
    if debug >= 1:
      print(f"realize: {GlobalCounters.kernel_count - k0} kernels in {(time.perf_counter() - st) * 1e3:.2f} ms")
  def _buffer(self) -> tuple[Buffer, int]:
    """The Buffer holding this tensor's data contiguously (making it so if needed), and the element offset."""
    if _active_recorder() is not None:  # a TinyJit capturing: the value read now would be baked into every replay
      raise JitRuntimeError(f"TinyJit: reading a Tensor's values ({self._shape_repr()}, {self.dtype}) while a jit "
                            "captures would bake them into every replay; keep .item(), .tolist(), .numpy() and the ops "
                            "that read data (masked_select, nonzero, boolean indexing without size=) out of the jitted "
                            "function")
    if self.uop.device.__class__ is tuple: return self.to(self.device[0])._buffer()  # gathered on the first device
    if tensor_disk.on_disk(self.device): return buffers[tensor_disk.resolve(self).base], 0
    t = self.realize()
    if not (_contiguous_view_of_buffer(t.uop) or _prefix_of_buffer(t.uop)):
      t = t._in_buffer().realize()
    base = t.uop.base
    return buffers[base], 0
  def _concrete(self) -> Tensor:
    """This tensor seen with the bound values of its symbolic sizes (for reading its data out)."""
    t = self.realize()
    return self._new(_concrete_uop(t.uop))
  def data(self) -> memoryview:
    """The values as a memoryview with this tensor's shape."""
    if self._weak is not None: return self._strong().data()
    if is_symbolic(self.shape): return self._concrete().data()
    if 0 in self.shape:  # no values: an empty view of this dtype's format
      empty = memoryview(b"")
      return empty.cast("B") if self.dtype.fmt in (None, "e") else empty.cast(self.dtype.fmt)  # type: ignore
    buf, _ = self._buffer()
    mv = memoryview(bytearray(buf.nbytes))
    buf.copyout(mv)
    if buf.size != self.numel(): mv = mv[:self.numel() * self.dtype.itemsize]  # a symbolic shape's values: a prefix
    if self.dtype.fmt is None or self.dtype.fmt == "e": return mv  # half, bfloat16, fp8: their raw bytes
    fmt = self.dtype.fmt
    return mv.cast(fmt, self.shape)  # type: ignore[call-overload]  # (a 0-d tensor gives a 0-d view)
  def _strong(self) -> Tensor:
    """This tensor in the strong dtype its values are in (itself when it isn't weak): where a weak one commits."""
    if self._weak is None: return self
    t = self._new(self.uop)
    t.__dict__.pop("_weak", None)
    return t
  def _raw(self) -> bytes:
    if is_symbolic(self.shape): return self._concrete()._raw()
    if self.numel() == 0: return b""
    buf, _ = self._buffer()
    return buf.as_bytes() if buf.size == self.numel() else buf.as_bytes()[:self.numel() * self.dtype.itemsize]
  def numpy(self) -> Any:
    """A NumPy array with a copy of the values. NumPy has no bfloat16 or fp8: those come back as float32 (exact; where
    PyTorch refuses, and with or without ml_dtypes installed, so the result never depends on the environment)."""
    import numpy as np
    if self._weak is not None: return self._strong().numpy()
    if is_symbolic(self.shape): return self._concrete().numpy()
    if self.dtype is dtypes.bfloat16:  # NumPy has no bfloat16: widen the raw bits to float32 here, not in a kernel
      # (a cast kernel can't run where the tensor lives when that is DISK, a view of a GGUF or safetensors file)
      bits = np.frombuffer(self._raw(), dtype=np.uint16).astype(np.uint32) << 16
      return bits.view(np.float32).reshape(self.shape)
    if self.dtype.fmt is None: return self.float().numpy()  # fp8: widened in a kernel
    return np.frombuffer(self._raw(), dtype=to_np_dtype(self.dtype)).reshape(self.shape).copy()
  def tolist(self) -> Any:
    """The values as (nested) Python lists; a 0-d tensor gives a scalar."""
    if self._weak is not None: return self._strong().tolist()
    if is_symbolic(self.shape): return self._concrete().tolist()
    vals = _unpack(self._raw(), self.dtype, self.numel())
    if self.dtype is dtypes.bool: vals = [bool(v) for v in vals]
    if not self.shape: return vals[0]
    for d in reversed(self.shape[1:]):
      vals = [vals[i:i + d] for i in range(0, len(vals), d)] if d else [[] for _ in range(len(vals) // max(d, 1))]
    if 0 in self.shape[1:]:
      return _empty_nested(self.shape)
    return vals
  def item(self) -> ConstType:
    """The one value of a tensor with one element."""
    if self.numel() != 1:
      raise ValueError(f"item: the tensor must have exactly one element, but its shape is {self.shape}")
    return self.reshape(()).tolist()
  def to(self, device: str | tuple[str, ...] | None) -> Tensor:
    """This tensor on `device` (a copy when the device differs); a tuple of devices gives a whole copy on each."""
    device = Device.canonicalize(device)
    if device == self.device: return self
    if self.uop.device is None and device.__class__ is str: return self._new(_on_device(self.uop, device))
    if device.__class__ is tuple and self.uop.device.__class__ is not tuple:
      return self._new(multi.shard_uop(self.uop, device, None))
    # a DISK view is copied from the byte range under it (no kernel runs on DISK to make it contiguous)
    if tensor_disk.on_disk(self.device): src_uop = tensor_disk.resolve(self)
    else: src_uop = (self if _contiguous_view_of_buffer(self.uop) else self.contiguous()).uop
    return self._new(UOp(Ops.COPY, self.dtype, (src_uop, UOp(Ops.DEVICE, arg=device))))
  def to_(self, device: str | tuple[str, ...] | None) -> Tensor:
    self.uop = self.to(device).uop
    return self
  def shard(self, devices: tuple[str, ...], axis: int | None = None) -> Tensor:
    """This tensor split along `axis` over `devices` (uneven splits allowed: the last shards are smaller), or a whole
    copy on each device when axis is None. Ops on it run on every device; a reduce across the split axis sums the
    devices' partial results (an all-reduce).

    >>> t = Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).shard(("CPU:0", "CPU:1"), axis=0)
    >>> t.device, (t * 2).sum().item()
    (('CPU', 'CPU:1'), 42.0)
    """
    if self.uop.device.__class__ is tuple:
      raise ValueError(f"shard: the tensor is already on {self.device}; shard one-device tensors")
    devs = Device.canonicalize(tuple(devices))
    if devs.__class__ is str: return self.to(devs)  # a tuple of one device is that device
    if tensor_disk.on_disk(self.device): return self.to(Device.DEFAULT).shard(devs, axis)  # read the file once
    if axis is not None: axis = self._resolve_axis(axis, "shard")
    if axis is not None and self.shape[axis] < len(devs):
      raise ValueError(f"shard: axis {axis} of shape {self.shape} has fewer rows than the {len(devs)} devices")
    return self._new(multi.shard_uop(self.uop, devs, axis))
  def shard_(self, devices: tuple[str, ...], axis: int | None = None) -> Tensor:
    """shard() in place: this tensor now lives on `devices`."""
    self.uop = self.shard(devices, axis).uop
    return self
  def shard_like(self, y: Tensor) -> Tensor:
    """This tensor placed the way `y` is: on y's device, or split over y's devices along y's axis (the axis y's
    graph ends up split on, after its own movement ops), or whole on each of them.

    >>> t = Tensor.ones(4, 2).shard(("CPU:0", "CPU:1"), axis=0)
    >>> Tensor.zeros(2, 4).shard_like(t.T).device
    ('CPU', 'CPU:1')
    """
    if y.device.__class__ is str: return self.to(y.device)
    axis = y.uop.axis  # (where the multi-device layout splits y)
    if self.device == y.device and self.uop.axis == axis: return self
    src = self if self.device.__class__ is str else self.to(Device.DEFAULT)
    return src.shard(cast(tuple, y.device), axis)
  def clone(self, device: str | None = None) -> Tensor:
    """A copy in a buffer of its own (on `device` if given), detached from nothing: gradients flow through it.
    A `.grad` is copied along, as in tinygrad."""
    out = self._strong()._new(_unique_contiguous(self.uop))  # storage of its own: a weak tensor commits (tinygrad)
    if device is not None and Device.canonicalize(device) != self.device: out = out.to(device)
    if self.grad is not None: out.grad = self.grad.clone(device)
    return out
  def replace(self, x: Tensor) -> Tensor:
    """Make this Tensor hold x's value (same shape required; x's dtype and graph are taken over) and return it."""
    if not isinstance(x, Tensor) or x.shape != self.shape:
      raise ValueError(f"replace: needs a Tensor of shape {self.shape}, got "
                       f"{x.shape if isinstance(x, Tensor) else type(x).__name__}")
    self.uop, self._device = x.uop, x._device
    return self
  def contiguous(self, arg: tuple | None = None) -> Tensor:
    """A tensor whose data is laid out contiguously in its own buffer (its own: equal graphs don't share it). A tensor
    that already is a whole buffer, seen through reshapes only, is returned as it is (as in tinygrad and PyTorch:
    no copy, so a write through either shows in both). `arg`: optimization actions for the kernel that computes it
    (a tuple of attograd.codegen.opt.Opt, tinygrad's form), applied in place of the heuristic's; a tensor that is a
    buffer already gets no kernel, so none apply."""
    if _contiguous_view_of_buffer(self.uop): return self
    if arg is None:
      if self.uop.op is Ops.CONTIGUOUS and self.uop.arg is not None: return self  # already a copy of its own
      return self._new(_unique_contiguous(self.uop))
    from attograd.codegen.opt import Opt
    if not isinstance(arg, (tuple, list)) or not all(isinstance(o, Opt) for o in arg):
      raise TypeError(f"contiguous: arg is a tuple of codegen.opt.Opt, got {arg!r}")
    u = _unique_contiguous(self.uop)
    return self._new(u.replace(arg=(u.arg, tuple(arg))))
  def contiguous_backward(self) -> Tensor:
    """The same values; the gradient flowing back through this point gets its own contiguous buffer (in this
    tensor's shape and order), so the kernels that read it walk it in that layout."""
    return self._new(UOp(Ops.CONTIGUOUS_BACKWARD, self.dtype, (self.uop,)))
  def detach(self) -> Tensor:
    """The same values, cut off from the graph that gradients flow through."""
    return self._new(UOp(Ops.DETACH, self.dtype, (self.uop,)))
  def assign(self, x: Any) -> Tensor:
    """Write `x` into this tensor's buffer (shape and dtype must match) and return this tensor.

    As in tinygrad the write is lazy: its kernel runs at the first realize that reads or writes the buffer (this
    tensor, a view of it, anything computed from them; `Tensor.realize(a, b)` runs both writes), or before a later
    write it must precede. The values are those of a write at this line: as in PyTorch, tensors computed from this one
    before the write keep the values they had (lazy ones are realized now), and views of it see the new values. A
    write into a lazy tensor (no buffer yet) computes it and writes it now, as does one inside a @function body or
    while a TinyJit captures.

    >>> w = Tensor([1.0, 2.0]).realize()
    >>> before = w * 10
    >>> _ = w.assign(Tensor([5.0, 6.0]))
    >>> before.tolist(), w.tolist()
    ([10.0, 20.0], [5.0, 6.0])
    """
    # a value nothing else holds (`w.assign(w - g)`) is computed straight into the buffer; one the caller keeps is a
    # tensor of its own, realized before the write when it reads this buffer
    private = sys.getrefcount(x) <= _TEMP_ARG_REFS  # (measured before anything else here holds x)
    return self._assign(x, private, lazy=True)
  def _assign(self, x: Any, value_private: bool, lazy: bool = False) -> Tensor:
    """assign's work. lazy: a write into a realized buffer waits until a realize needs it (tensor/pending.py), as
    tinygrad's (assign, setitem, x += y); otherwise (into a lazy tensor, which is realized first) it runs now."""
    if tensor_disk.on_disk(self.device): return tensor_disk.assign(self, x)  # from any device: a copy into the file
    if not isinstance(x, Tensor): x = Tensor(x, device=self.device, dtype=self.dtype)
    if x.shape != self.shape:
      # a value that broadcasts to the target (a scalar, a row) fills it, as in tinygrad and PyTorch's copy_
      if is_symbolic(self.shape) or is_symbolic(x.shape) or len(x.shape) > len(self.shape) or \
         any(a != b and a != 1 for a, b in zip(x.shape[::-1], self.shape[::-1])):
        raise ValueError(f"assign: shape mismatch, target {self.shape} but value {x.shape}")
      x = x._broadcast_to(self.shape)
    if x.device != self.device:
      # a value built from device-less UOps (Tensor(UOp.const(2.0))) is a constant: it lives where it is written
      if not any(u.op is Ops.DEVICE for u in x.uop.toposort()): x = Tensor(x.uop, device=self.device)
      else: raise ArgumentError(f"assign: device mismatch, target on {self.device} but value on {x.device}")
    if self._weak is not None: self.__dict__.pop("_weak")  # written to, a weak tensor commits (tinygrad)
    if x._weak is not None and least_upper_dtype(self.dtype, x.dtype) is self.dtype: x = x.cast(self.dtype)  # defers
    if x.dtype != self.dtype:  # as tinygrad (PyTorch's copy_ casts): an implicit cast can lose precision or values
      raise RuntimeError(f"assign dtype mismatch: target {self.dtype} but value {x.dtype}; cast the value first "
                         f"(value.cast({self.dtype}))")
    if x.uop is self.uop and _is_whole_buffer(self.uop): return self  # t.assign(t): nothing changes
    if not _is_whole_buffer(self.uop) and (view := _writable_view(self.uop)) is not None:
      return self._assign_view(x, *view, value_private=value_private, lazy=lazy)
    if not _is_whole_buffer(self.uop) and self._assign_through(x, value_private, lazy) is not None: return self
    if not _is_whole_buffer(self.uop):
      self.realize()
      lazy = False  # a lazy target is computed now, and written now
    # a view that isn't one-to-one (expanded, padded) or a constant: just rebind; so too for Tensor.arange's buffer,
    # which every arange of its size shares (and which kernels never read: they compute it, as Ops.IOTA)
    if not _is_whole_buffer(self.uop) or self.uop.base.arg[2:] == (IOTA_TAG,):
      self.uop = x.uop
      return self
    base = self.uop.base
    # the kernel writes the target while it reads the value: reading the target at other positions (a flip, a
    # shift) would see half-written data, so such a value is computed into its own buffer first (a view that reads
    # each element where it is written, or nothing there, is safe: a + a[:, :2].pad(...))
    if _reads_elsewhere(x.uop, base, self.shape): x = x._in_buffer()
    target = new_buffer_uop(self.device, base.arg[1], self.dtype, buffers[base])
    assign = UOp(Ops.ASSIGN, self.dtype, (build.reshape(base, self.shape), x.uop))
    # this tensor sees the new version from now on; other tensors that read the old one keep their values
    self.uop = build.reshape(target, self.shape)
    _keep_values_of_readers({base}, {assign, x.uop} if value_private else {assign})
    _write(assign, lazy, whole=True)
    return self
  def _assign_through(self, x: Tensor, value_private: bool, lazy: bool = False) -> Tensor | None:
    """Write x through a view that no kernel can store through directly: of a realized sharded tensor (the view's
    pieces don't line up with the shards in general), or one with a pad its slices cut away again (a strided slice,
    t[1::2]). The whole buffer (every shard) under it is written, taking x where the view maps and its own values
    elsewhere; this tensor reads the new values through the same view. None when the view isn't of a realized buffer
    or duplicates elements (an expand): then the tensor just takes x's graph."""
    u = self.uop
    while u.op in _ONE_TO_ONE or u.op in (Ops.PAD, Ops.DETACH): u = u.src[0]
    if not ((u.op is Ops.MULTI and _is_realized(u)) or (u.op is Ops.BUFFER and u.arg[2:] != (IOTA_TAG,))): return None
    u, val, mask = _back_to_root(self.uop, x)
    whole = Tensor(u)
    new = val if mask is None else mask.where(val, whole)
    # the kernels write the buffer while they read the value: one that reads it elsewhere gets its own buffer first
    if any(n.op in GroupOp.Movement and n.base is u for n in val.uop.toposort()): new = new.contiguous()
    assign = UOp(Ops.ASSIGN, self.dtype, (u, new.uop))
    _keep_values_of_readers({s.base for s in u.src} if u.op is Ops.MULTI else {u},
                            {assign, new.uop} if value_private else {assign})
    _write(assign, lazy, whole=False)
    return self
  def _assign_view(self, x: Tensor, target: UOp, base_dtype: DType, value_private: bool,
                   lazy: bool = False) -> Tensor:
    """Write x through this view (a slice, a permute, a flip, a bitcast of a realized buffer) into the buffer under it,
    as in tinygrad and PyTorch: the buffer's other views and holders see the new values. `target`: this view over the
    buffer in its own dtype (bitcasts taken off, so the value is bitcast back instead)."""
    base = target.base
    xu = x.uop if x.dtype == base_dtype else UOp(Ops.BITCAST, base_dtype, (x.uop,))
    # a value that reads the buffer at other positions than it writes (xs.assign(xs + X) for xs = X[::-1]) would see
    # half-written data: computed into its own buffer first
    if _reads_besides(xu, base, target): xu = UOp(Ops.CONTIGUOUS, base_dtype, (xu,))
    assign = UOp(Ops.ASSIGN, base_dtype, (target, xu))
    _keep_values_of_readers({base}, {assign, xu, x.uop} if value_private else {assign})
    _write(assign, lazy, whole=False)
    return self

  # ***** creation *****
  @staticmethod
  @_takes_requires_grad
  def empty(*shape: Any, device: str | None = None, dtype: DType | str | None = None, **kw: Any) -> Tensor:
    d = to_dtype(dtype) if dtype is not None else dtypes.default_float
    shp = _check_shape(argfix(*shape), "empty")
    if is_symbolic(shp):  # a buffer for the Variables' largest values, seen as its first prod(shape) elements
      buf = new_buffer_uop(Device.canonicalize(device), sym_max(prod(shp)), d)
      return Tensor(build.reshape(UOp(Ops.SHRINK, d, (buf,), ((0, prod(shp)),)), shp), device=device, **kw)
    if (dev := Device.canonicalize(device)).__class__ is tuple:  # one whole buffer per device
      return Tensor(multi.multi([build.reshape(new_buffer_uop(x, prod(shp), d), shp) for x in dev], None),
                    device=dev, **kw)  # type: ignore[arg-type]  # devices of a sharded tensor
    return Tensor(build.reshape(new_buffer_uop(dev, prod(shp), d), shp), device=device, **kw)
  @staticmethod
  def invalids(*shape: Any, device: str | None = None, dtype: DType | str | None = None) -> Tensor:
    """A tensor whose values are undefined until written (tinygrad's name for an anonymous buffer, and what
    `Tensor.full(shape, Invalid)` gives): Tensor.empty, whose buffer holds whatever memory it gets.

    >>> z = Tensor.invalids(4, dtype="int32")
    >>> z[1:3] = 7
    >>> z[1:3].tolist()
    [7, 7]
    """
    return Tensor.empty(*shape, device=device, dtype=dtype)
  @staticmethod
  @_takes_requires_grad
  def full(shape: Any, fill_value: ConstType, dtype: DType | str | None = None, device: str | None = None,
           buffer: bool = False, **kw: Any) -> Tensor:
    """A Tensor of `shape` filled with `fill_value` (a broadcast constant; buffer=True gives it a buffer of its own).
    dtype comes before device, as in tinygrad 0.14, so `Tensor.full((2,), 1, dtypes.int8)` works."""
    if isinstance(dtype, str) and dtype not in DTYPES_DICT and device is None: dtype, device = None, dtype  # old order
    if buffer: return Tensor.full(shape, fill_value, dtype, device, **kw).contiguous()
    shp = _check_shape(make_tuple(shape, 1) if isinstance(shape, int) else tuple(shape), "full")
    if fill_value is Invalid:  # "any value": no kernel stores an element computed from it (an empty buffer alone)
      d = to_dtype(dtype) if dtype is not None else dtypes.bool
      return Tensor(_invalid_const(d, Device.canonicalize(device), shp), device=device, **kw)
    if isinstance(fill_value, UOp):  # a bound Variable (or an int expression of them): its value, read in the kernel
      fill = Tensor(_size_arg(fill_value, "full"), device=device, dtype=dtype)
      return Tensor(fill.uop, device=device, **kw).reshape((1,) * len(shp)).expand(shp)
    d = to_dtype(dtype) if dtype is not None else dtypes.from_py_stored(fill_value)
    const = Tensor(build.const(fill_value, d, Device.canonicalize(device)), device=device, **kw)
    return const.reshape((1,) * len(shp)).expand(shp)
  @staticmethod
  def const(b: ConstType | UOp, dtype: DType | str | None = None) -> Tensor:
    """A 0-d tensor of the value `b`: a Python number, or a scalar UOp expression such as a bound Variable (read in
    the kernel), in `dtype` if given (tinygrad's name).

    >>> from attograd import Variable, dtypes
    >>> Tensor.const(2.5, dtypes.int8).tolist(), Tensor.const(Variable("n", 1, 9).bind(4)).item()
    (2, 4)
    """
    if isinstance(b, UOp):
      if b.shape != (): raise ValueError(f"const: needs a scalar UOp, got one of shape {b.shape}")
      return Tensor(b, dtype=dtype)
    return Tensor(b, dtype=dtype) if dtype is not None else Tensor(b)
  @staticmethod
  @_takes_requires_grad
  def zeros(*shape: Any, **kw: Any) -> Tensor:
    return Tensor.full(argfix(*shape), 0.0, **{"dtype": dtypes.default_float, **kw})
  @staticmethod
  @_takes_requires_grad
  def ones(*shape: Any, **kw: Any) -> Tensor:
    return Tensor.full(argfix(*shape), 1.0, **{"dtype": dtypes.default_float, **kw})
  def _like(self, make: Callable[[tuple, Any], Tensor], kw: dict[str, Any]) -> Tensor:
    """make(shape, device) for a new tensor like this one. Split over several devices (and no device given), it is
    split the same way: each device makes its own shard, so nothing is made whole and copied (tinygrad keeps the
    axis too)."""
    if "device" not in kw and self.device.__class__ is tuple and (lay := multi.layout(self.uop)) is not None \
       and lay.arg is not None:
      return Tensor._of_uop(multi.multi([make(s.shape, s.device).uop for s in lay.src], lay.arg))
    return make(self.shape, kw.pop("device", self.device))
  @_takes_requires_grad
  def full_like(self, fill_value: ConstType, **kw: Any) -> Tensor:
    dt = kw.pop("dtype", self.dtype)
    return self._like(lambda shape, dev: Tensor.full(shape, fill_value, dtype=dt, device=dev, **kw), kw)
  def const_like(self, b: ConstType, dtype: DType | str | None = None) -> Tensor:
    """A tensor of this one's shape and device filled with `b`, in `dtype` (this one's by default); tinygrad's name
    for full_like without the keywords."""
    return self.full_like(b, dtype=self.dtype if dtype is None else dtype)
  @_takes_requires_grad
  def zeros_like(self, **kw: Any) -> Tensor: return self.full_like(0, **kw)
  @_takes_requires_grad
  def ones_like(self, **kw: Any) -> Tensor: return self.full_like(1, **kw)
  @_takes_requires_grad
  def empty_like(self, dtype: DType | str | None = None, device: str | tuple[str, ...] | None = None,
                 **kw: Any) -> Tensor:
    """A new buffer of this tensor's shape, its values unset; this tensor's dtype and device unless given (positional
    too, as in tinygrad)."""
    dt = self._strong().dtype if dtype is None else dtype  # (storage: a weak dtype has none)
    return self._like(lambda shape, dev: Tensor.empty(shape, dtype=dt, device=dev, **kw),
                      {} if device is None else {"device": device})
  @staticmethod
  @_takes_requires_grad
  def arange(start: ConstType, stop: ConstType | None = None, step: ConstType = 1, **kw: Any) -> Tensor:
    """Evenly spaced values in [start, stop): `Tensor.arange(5)` is 0, 1, 2, 3, 4."""
    if stop is None: start, stop = 0, start
    if isinstance(start, UOp) or isinstance(stop, UOp) or isinstance(step, UOp):
      return _symbolic_arange(start, stop, step, kw)
    if step == 0: raise ValueError("arange: step must not be zero")
    n = max(0, math.ceil((stop - start) / step))
    last = start + (n - 1) * step if n else start
    if "dtype" in kw: dtype = to_dtype(kw.pop("dtype"))
    # ints: default_int unless a value made needs int64 (stop isn't one, and an empty range has none)
    elif all(v.__class__ is int for v in (start, stop, step)): dtype = dtypes.from_py([start, last])
    else: dtype = dtypes.from_py([start, stop, step])
    if n and dtypes.is_int(dtype):
      # values past the dtype's range would wrap silently (PyTorch wraps them): refuse, as tinygrad does
      if not dtype.min <= min(start, last) <= max(start, last) <= dtype.max:
        raise OverflowError(f"arange: values {start}..{last} don't fit in {dtype} ({dtype.min}..{dtype.max})")
    device = Device.canonicalize(kw.pop("device", None))
    idx = _index_tensor(n, device)
    # in the output dtype: an int64 arange past 2**31 (arange(2**40, 2**40 + 5)) must not wrap in int32 first
    out = idx.cast(dtype) * step + start if (step != 1 or start != 0) else idx.cast(dtype)
    return Tensor(out.uop, device=device, **kw)
  @staticmethod
  @_takes_requires_grad
  def linspace(start: float, stop: float, steps: int, **kw: Any) -> Tensor:
    if steps < 0: raise ArgumentError(f"linspace: steps must be >= 0, got {steps}")
    dtype = to_dtype(kw.pop("dtype", dtypes.default_float))
    # points between start and stop aren't bools: PyTorch refuses it too (every point but start would be True)
    if dtype is dtypes.bool: raise DTypeOpError("linspace: needs a numeric dtype, got dtypes.bool")
    if steps == 1: return Tensor.full((1,), start, dtype=dtype, **kw)
    return (Tensor.arange(steps, **kw).cast(dtypes.float64 if dtype is dtypes.float64 else dtypes.float32)
            * ((stop - start) / (steps - 1)) + start).cast(dtype)
  @staticmethod
  @_takes_requires_grad
  def eye(n: int, m: int | None = None, **kw: Any) -> Tensor:
    m = n if m is None else m
    dtype = kw.pop("dtype", dtypes.default_float)
    device = kw.pop("device", None)
    return (Tensor.arange(n, device=device).reshape(n, 1) == Tensor.arange(m, device=device).reshape(1, m)).cast(dtype)

  # ***** random: tinygrad's Threefry stream (tensor/rng.py), computed inside kernels *****
  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Make the random functions reproducible: the numbers are tinygrad's for the same seed, on every device (each
    counts the words it drew, `Tensor._device_rng_counters`)."""
    Tensor._seed, Tensor._device_seeds, Tensor._device_rng_counters, Tensor._rng_host = int(seed), {}, {}, {}
  @staticmethod
  def _rng_take(device: str, num: int) -> tuple[tuple[int, int], int]:
    """The device's key pair and the count of words it drew before a draw of `num` words, which moves its counter."""
    if (host := Tensor._rng_host.get(device)) is None:
      key, count = rng.device_key(len(Tensor._device_seeds), Tensor._seed), 0
      Tensor._device_seeds[device] = Tensor(list(key), device=device, dtype=dtypes.uint32)
      Tensor._device_rng_counters[device] = counter = Tensor(_counter_uop(0, device))
    else:
      key, count, shown = host
      if (counter := Tensor._device_rng_counters[device]).uop is not shown:  # assigned (or realized) since: read it
        low, high = counter.tolist()
        count = int(low) | int(high) << 32
    end = (count + num) & rng.MASK64
    counter.uop = _counter_uop(end, device)
    Tensor._rng_host[device] = (key, end, counter.uop)
    return key, count
  @staticmethod
  def _threefry_random_bits(key: Tensor, counts0: Tensor, counts1: Tensor) -> Tensor:
    """Threefry-2x32 of the counter pairs (counts0[j], counts1[j]) under the uint32 pair `key`: the first words of
    every pair, then the second words (JAX's `threefry_2x32(key, concat(counts0, counts1))`)."""
    k = (key[0].cast(dtypes.uint32), key[1].cast(dtypes.uint32))
    lo, hi = rng.threefry2x32(k, (counts0.cast(dtypes.uint32), counts1.cast(dtypes.uint32)))
    return lo.cat(hi)
  def threefry(self, seed: Tensor) -> Tensor:
    """Threefry-2x32 (20 rounds) of each uint64 value under the uint64 key `seed` (broadcast): the value's low and
    high 32 bits are the counter pair, the key's low and high bits the key pair, and the cipher's two output words are
    the result's low and high bits (tinygrad's THREEFRY).

    >>> hex(Tensor([0], dtype=dtypes.uint64).threefry(Tensor([0], dtype=dtypes.uint64)).item())
    '0x99ba4efe6b200159'
    """
    u64 = dtypes.uint64
    if self.dtype != u64 or not isinstance(seed, Tensor) or seed.dtype != u64:
      raise TypeError(f"threefry: needs uint64 values and a uint64 Tensor seed, got {self.dtype} and "
                      f"{seed.dtype if isinstance(seed, Tensor) else type(seed).__name__}")
    x, key = self._broadcasted(seed)
    u32 = dtypes.uint32
    lo, hi = rng.threefry2x32((key.cast(u32), (key >> 32).cast(u32)), (x.cast(u32), (x >> 32).cast(u32)))
    return (hi.cast(u64) << 32) | lo.cast(u64)
  @classmethod
  def random_bits(cls, key: Tensor, counter: Tensor, num: int) -> Tensor:
    """`num` random 32-bit words (uint32, shape (num,)) of the stream keyed by the 2-word uint32 `key`, starting
    after `counter` words (a 2-word uint32 count, low word first): the words tinygrad's `random_bits` gives. Each
    draw enciphers the counter under the key into a fresh key, then the pairs (j, j + ceil(num / 2)) under it.

    >>> Tensor.random_bits(Tensor([0, 0], dtype=dtypes.uint32), Tensor([0, 0], dtype=dtypes.uint32), 3).shape
    (3,)
    """
    if not isinstance(num, int) or num < 0: raise ValueError(f"random_bits: num must be an int >= 0, got {num!r}")
    if key.shape != (2,) or counter.shape != (2,):
      raise ValueError(f"random_bits: key and counter are 2-word tensors, got shapes {key.shape} and {counter.shape}")
    low, high = counter[0:1].cast(dtypes.uint32), counter[1:2].cast(dtypes.uint32)
    chunk_max, out = int(dtypes.max(dtypes.uint32)), []
    for i in range(0, num, chunk_max):  # in draws of at most 2^32 - 1 words, the counter carried into its high word
      n = min(num - i, chunk_max)
      c_low = low + (i & rng.MASK32)
      c_high = high + (i >> 32) + (c_low < low).cast(dtypes.uint32)
      draw_key = cls._threefry_random_bits(key, c_low, c_high)
      half = -(-n // 2)
      counts0 = cls.arange(half, dtype=dtypes.uint32, device=key.device)
      out.append(cls._threefry_random_bits(draw_key, counts0, counts0 + half)[:n])
    return out[0].cat(*out[1:]) if out else counter[0:0].cast(dtypes.uint32)
  @staticmethod
  def _random_words(num: int, device: str | None) -> Tensor:
    """The next `num` 32-bit words of the device's stream (uint32, shape (num,))."""
    device = Device.canonicalize(device)
    dkey, start = Tensor._rng_take(device, num)
    # the draw's key, derived on the host and read by the kernel from a buffer: one program for every draw of a size
    key = Tensor(list(rng.draw_key(dkey, start & rng.MASK32, start >> 32)), device=device, dtype=dtypes.uint32)
    # a TinyJit capturing notes the draw: each replay writes the key of its own position in the stream into the buffer
    if (rec := _active_recorder()) is not None: rec.rng_draws.append((key, device, start))
    return rng.words(_index_tensor(num, device).cast(dtypes.uint32), num, (key[0], key[1]))
  @staticmethod
  @_takes_requires_grad
  def rand(*shape: Any, device: str | None = None, dtype: DType | str | None = None, contiguous: bool = True,
           **kw: Any) -> Tensor:
    """Uniform random values in [0, 1): random mantissa bits under the exponent of 1.0, minus 1 (tinygrad's numbers
    for a seed). contiguous (the default, as in tinygrad): computed into a buffer of their own, which every reader
    shares; False leaves them a lazy expression of the stream's counter, fused into each reader's kernel (the same
    values: the methods built on rand, such as randn, uniform and dropout, take it so)."""
    shp = _check_shape(argfix(*shape), "rand")
    d = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dtypes.is_float(d): raise ValueError(f"rand: needs a float dtype, got {d}")
    if d in _WEAK: raise WeakDTypeError(f"rand: {d} has no bits to draw; use a float such as {strong_dtype(d)}")
    out = Tensor._bits_to_rand(Tensor._random_words(-(-prod(shp) * d.itemsize // 4), device), shp, d)
    return Tensor((out.contiguous() if contiguous else out).uop, device=device, **kw)
  @staticmethod
  def _bits_to_rand(bits: Tensor, shape: tuple[int, ...], dtype: DType) -> Tensor:
    """Uniform values in [0, 1) of float `dtype` and `shape` from the random uint32 words `bits` (at least
    ceil(numel * itemsize / 4) of them; tinygrad's name): each value's bytes taken from the words lowest first, their
    top mantissa bits under the exponent of 1.0, minus 1."""
    n, size, w = prod(shape), dtype.itemsize, bits
    num = w.shape[0]
    udt = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[size]
    if size == 8: u = w[0:2 * n:2].cast(udt) | (w[1:2 * n:2].cast(udt) << 32)  # two words a value, the low one first
    elif size < 4:  # a word holds 4 // size values, the lowest bytes first
      per = 4 // size
      shifts = _index_tensor(per, w.device).cast(dtypes.uint32).reshape(1, per) * (8 * size)
      u = (w.reshape(num, 1) >> shifts).cast(udt).reshape(num * per)[:n]
    else: u = w if num == n else w[:n]
    nexp, nmant = dtypes.finfo(dtype)
    one = (((1 << (nexp - 1)) - 1) if dtype not in dtypes.fp8_fnuz else 1 << (nexp - 1)) << nmant  # the bits of 1.0
    return (((u >> (8 * size - nmant)) | one).bitcast(dtype) - 1).reshape(shape)
  @staticmethod
  def _rand(key: Tensor, counter: Tensor, shape: tuple[int, ...], dtype: DType, contiguous: bool = True) -> Tensor:
    """Tensor.rand's values from the stream keyed by `key`, after `counter` words (tinygrad's name; a pure function of
    its arguments, unlike rand, which reads the device's counter). contiguous as in rand, in a buffer equal calls
    share (equal arguments, equal values: one graph)."""
    out = Tensor._bits_to_rand(Tensor.random_bits(key, counter, -(-prod(shape) * dtype.itemsize // 4)), shape, dtype)
    return out._in_buffer() if contiguous else out
  @staticmethod
  @_takes_requires_grad
  def randn(*shape: Any, dtype: DType | str | None = None, **kw: Any) -> Tensor:
    """Standard normal values (Box-Muller)."""
    shp = _check_shape(argfix(*shape), "randn")
    u = _rand(2, *shp, device=kw.get("device"), dtype=dtypes.float32, contiguous=False)
    r = (1 - u[1]).log().mul(-2).sqrt()  # tinygrad's order: the first half gives the angle, the second the radius
    d = to_dtype(dtype) if dtype is not None else dtypes.default_float
    return Tensor(((u[0] * (2 * math.pi)).cos() * r).cast(d).uop, **kw)
  @staticmethod
  @_takes_requires_grad
  def randint(*shape: Any, low: int = 0, high: int = 10, **kw: Any) -> Tensor:
    if not isinstance(low, int) or not isinstance(high, int):
      raise TypeError(f"randint: low and high must be ints, got low={low!r} high={high!r}")
    if high <= low: raise ArgumentError(f"randint: needs low < high, got low={low} high={high}")
    dtype = to_dtype(kw.pop("dtype", dtypes.int32))
    if not dtypes.is_int(dtype): raise TypeError(f"randint: dtype must be an integer dtype, got {dtype}; use uniform")
    u = _rand(*shape, dtype=dtypes.float64 if high - low > 1 << 24 else dtypes.float32, contiguous=False, **kw)
    return (u * (high - low)).floor().cast(dtype) + low
  @staticmethod
  @_takes_requires_grad
  def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, **kw: Any) -> Tensor:
    dtype = kw.pop("dtype", dtypes.default_float)
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and high <= low:
      raise ArgumentError(f"uniform: needs low < high, got low={low} high={high}")
    # cast before adding low (tinygrad's order): an int dtype then rounds every value down, not toward zero
    return (_rand(*shape, dtype=dtypes.float32, contiguous=False, **kw) * (high - low)).cast(dtype) + low
  @staticmethod
  @_takes_requires_grad
  def normal(*shape: Any, mean: float = 0.0, std: float = 1.0, **kw: Any) -> Tensor:
    dtype = kw.pop("dtype", dtypes.default_float)
    if isinstance(std, (int, float)) and std < 0: raise ArgumentError(f"normal: std must be >= 0, got {std}")
    return (Tensor.randn(*shape, dtype=dtypes.float32, **kw) * std + mean).cast(dtype)
  def rand_like(self, **kw: Any) -> Tensor:
    """Uniform [0, 1) values of this Tensor's shape, dtype and device (each overridable)."""
    # a weak tensor's values are in its strong dtype: so are these (tinygrad raises there)
    dt = kw.pop("dtype", self.uop.dtype if dtypes.is_float(self.dtype) else None)
    return self._like(lambda shape, dev: Tensor.rand(*shape, dtype=dt, device=dev, **kw), kw)
  def randn_like(self, dtype: DType | str | None = None, **kw: Any) -> Tensor:
    """Standard normal values of this Tensor's shape, dtype and device (each overridable)."""
    d = dtype if dtype is not None else self.uop.dtype if dtypes.is_float(self.dtype) else None
    return self._like(lambda shape, dev: Tensor.randn(*shape, dtype=d, device=dev, **kw), kw)
  @staticmethod
  def scaled_uniform(*shape: Any, **kw: Any) -> Tensor:
    """Uniform in [-1, 1) scaled by prod(shape) ** -0.5."""
    return Tensor.uniform(*shape, low=-1.0, high=1.0, **kw).mul(prod(argfix(*shape)) ** -0.5)
  @staticmethod
  def glorot_uniform(*shape: Any, **kw: Any) -> Tensor:
    """Glorot (Xavier) uniform: bound sqrt(6 / (shape[0] + prod(shape[1:])))."""
    shp = argfix(*shape)
    bound = (6 / (shp[0] + prod(shp[1:]))) ** 0.5
    return Tensor.uniform(*shape, low=-bound, high=bound, **kw)
  @staticmethod
  def kaiming_uniform(*shape: Any, a: float = 0.01, **kw: Any) -> Tensor:
    """He uniform for a leaky relu of slope a: bound sqrt(6 / (1 + a^2) / fan_in), fan_in = prod(shape[1:])."""
    bound = (6 / (1 + a ** 2) / prod(argfix(*shape)[1:])) ** 0.5
    return Tensor.uniform(*shape, low=-bound, high=bound, **kw)
  @staticmethod
  def kaiming_normal(*shape: Any, a: float = 0.01, **kw: Any) -> Tensor:
    """He normal for a leaky relu of slope a: std sqrt(2 / (1 + a^2) / fan_in), fan_in = prod(shape[1:])."""
    std = (2 / (1 + a ** 2) / prod(argfix(*shape)[1:])) ** 0.5
    return Tensor.normal(*shape, mean=0.0, std=std, **kw)
  def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """Sample indices by the (unnormalized, non-negative) weights in the last dim of a 1-D or 2-D Tensor.

    >>> Tensor([0.0, 1.0, 0.0]).multinomial(2, replacement=True).tolist()
    [1, 1]
    """
    if not 1 <= self.ndim <= 2 or not isinstance(num_samples, int) or num_samples < 1:
      raise AssertedArgumentError(f"multinomial: needs 1-D or 2-D weights and num_samples >= 1, got shape "
                                  f"{self.shape} and num_samples={num_samples!r}")
    w = (self.unsqueeze(0) if self.ndim == 1 else self).float()
    if not replacement and num_samples > w.shape[1]:
      raise AssertedArgumentError(f"multinomial: can't draw {num_samples} samples without replacement from "
                                  f"{w.shape[1]} weights")
    if replacement or num_samples == 1:
      cdf = w.cumsum(1)
      cdf = cdf / cdf[:, -1:]
      u = _rand(w.shape[0], num_samples, 1, device=self.device, contiguous=False)
      idx = (u >= cdf.unsqueeze(1)).sum(2).minimum(w.shape[1] - 1)  # (B, num_samples)
    else:  # Efraimidis-Spirakis: the top keys u^(1/w), taken in log space
      idx = (_rand(*w.shape, device=self.device, contiguous=False).log() / w).topk(num_samples, dim=1)[1]
    return (idx.squeeze(0) if self.ndim == 1 else idx).cast(dtypes.int32)
  @staticmethod
  def from_blob(ptr: int, shape: tuple[int, ...], **kw: Any) -> Tensor:
    """A Tensor over raw host memory at address `ptr` (a ctypes buffer, another library's array) holding prod(shape)
    elements of `dtype` (default float32). On a device whose buffers are host memory (CPU, LLVM) the memory is used
    in place, as in tinygrad: later changes to it are seen, writes to the Tensor land in it, and it must outlive the
    Tensor. Other devices get a copy made now."""
    import ctypes
    d = to_dtype(kw.pop("dtype", dtypes.default_float))
    shp = _check_shape(tuple(shape), "from_blob")
    if not isinstance(ptr, int) or ptr == 0:
      raise ValueError(f"from_blob: needs a non-null integer address, got {ptr!r}")
    device, n = Device.canonicalize(kw.pop("device", None)), prod(shp)
    if device.__class__ is str and ExternalBuffer.supported(device):
      return Tensor(build.reshape(new_buffer_uop(device, n, d, ExternalBuffer(device, n, d, ptr)), shp), **kw)
    return Tensor(_buffer_from_bytes(ctypes.string_at(ptr, n * d.itemsize), shp, d, device), **kw)
  @staticmethod
  def from_url(url: str, gunzip: bool = False, **kw: Any) -> Tensor:
    """The bytes at `url` (downloaded once by helpers.fetch, cached) as a uint8 Tensor."""
    return Tensor(fetch(url, gunzip=gunzip).read_bytes(), **kw)

  @staticmethod
  @_takes_requires_grad
  def randperm(n: int, device: str | None = None, dtype: DType = dtypes.int32, **kw: Any) -> Tensor:
    """A random permutation of 0..n-1 (argsort of random keys)."""
    keys = Tensor.rand(n, device=device).realize()
    ranks = (keys.reshape(n, 1) > keys.reshape(1, n)).cast(dtypes.int32).sum(1)  # rank of each key: its position
    return (ranks.reshape(n, 1) == Tensor.arange(n, device=device).reshape(1, n)).cast(dtypes.int32) \
      .mul(Tensor.arange(n, device=device).reshape(n, 1)).sum(0).cast(dtype)

  # ***** elementwise *****
  def _const_like(self, x: ConstType, dtype: DType | None = None) -> Tensor:
    d = dtype or self.dtype
    if d in _WEAK: return self._strong()._const_like(x, strong_dtype(d)).cast(d)
    return self._strong()._new(build.const(x, d, self.device))
  def alu(self, op: Ops, *src: Tensor) -> Tensor:
    """The IR's elementwise op `op` (a member of GroupOp.ALU) of this tensor and `src`, as tinygrad's `Tensor.alu`:
    no broadcasting and no dtype promotion (operands of one shape and dtype; WHERE's condition is bool), comparisons
    give bools. The arithmetic methods (`+`, `where`, ...) are this with NumPy's rules on top.

    >>> from attograd.uop.ops import Ops
    >>> Tensor([1, 2]).alu(Ops.MAX, Tensor([3, 0])).tolist()
    [3, 2]
    """
    if not isinstance(op, Ops) or op not in GroupOp.ALU: raise ValueError(f"alu: {op!r} is not an elementwise op")
    if not all(isinstance(s, Tensor) for s in src): raise TypeError("alu: the sources must be Tensors (see ufix)")
    xs = tuple(x._strong() for x in (self, *src))  # a weak scalar tensor: its stored dtype
    vals = xs[1:] if op is Ops.WHERE else xs
    if op is Ops.WHERE and self.dtype is not dtypes.bool: raise DTypeOpError(f"alu: WHERE's condition must be bool, "
                                                                              f"got {self.dtype}")
    if len({x.shape for x in xs}) > 1 or len({x.dtype for x in vals}) > 1 or len({x.device for x in xs}) > 1:
      raise ValueError(f"alu {op.name}: operands must share shape, dtype and device (no broadcasting or promotion "
                       f"here), got {[(x.shape, x.dtype, x.device) for x in xs]}")
    return self._new(build.alu(op, *(x.uop for x in xs)))
  def ufix(self, x: Any) -> Tensor:
    """`x` as a Tensor on this tensor's device: a Tensor as it is, a Python number as a constant of its own dtype."""
    return x if isinstance(x, Tensor) else Tensor(x, device=self.device)
  def usum(self, *others: Any) -> Tensor:
    """This tensor plus each of `others`, in order (or of bools: OR-ed); a sum of terms, not a reduce."""
    return functools.reduce(operator.or_ if self.dtype is dtypes.bool else operator.add, argfix(*others), self)
  def uprod(self, *others: Any) -> Tensor:
    """This tensor times each of `others`, in order (or of bools: AND-ed)."""
    return functools.reduce(operator.and_ if self.dtype is dtypes.bool else operator.mul, argfix(*others), self)
  def _broadcasted(self, y: Tensor | ConstType, reverse: bool = False,
                   match_dtype: bool = True) -> tuple[Tensor, Tensor]:
    x: Tensor = self
    xu = x.uop
    if y.__class__ in (float, int) and (y.__class__ is float) <= dtypes.is_float(xu.dtype) and \
       xu.dtype is not dtypes.bool:
      # the common case, tensor op Python number: one cached broadcast constant, no checks needed
      yt = x._new(_broadcast_const(y, xu.dtype, x.device, xu.shape))
      return (yt, x) if reverse else (x, yt)
    if isinstance(y, Tensor) and y.uop.shape == xu.shape and y.uop.dtype is xu.dtype and y._weak is x._weak and \
       y.device == x.device:
      return (y, x) if reverse else (x, y)
    if not isinstance(y, Tensor):
      if isinstance(y, UOp):  # a symbolic int (a bound Variable) takes the tensor's dtype, as a Python int would
        if x._weak is None:
          yd = dtypes.default_int if x.dtype is dtypes.bool else x.dtype
          y = Tensor(y, device=x.device, dtype=yd)
        else: y = Tensor(y, device=x.device)  # (weakint, as a Python int: it meets the weak tensor below)
      elif y is Invalid:  # "any value" (tinygrad's): the tensor's dtype; an element computed from it is never stored
        y = x._new(_invalid_const(xu.dtype, x.device, xu.shape))
      elif not isinstance(y, (bool, int, float)):
        raise TypeError(f"can't combine a Tensor with {type(y).__name__} {y!r:.40}")
      else:
        # a Python scalar (weakint, weakfloat, bool) meets the tensor's dtype as in tinygrad: it takes the dtype when
        # that holds its kind (an int with an int tensor, a float with a float one); else both go to the scalar's
        # weak kind (int_tensor + 2.5 and bool_tensor + 2.5 are weakfloat, bool_tensor + 2 weakint), computed and
        # stored in the default float or int
        y = x._const_like(y, least_upper_dtype(x.dtype, dtypes.from_py(y)))
    if x.device != y.device:
      # a Tensor over device-less UOps (Tensor(UOp.const(1.0))) lives on the default device only nominally: it goes
      # where the other operand is, as in tinygrad
      if y.uop.device is None: y = x._new(y.uop)
      elif x.uop.device is None: x = y._new(x.uop)
      else:
        raise ArgumentError(f"device mismatch: {x.device} and {y.device} tensors can't be combined; move one with "
                            f".to('{x.device}')")
    if match_dtype and x.dtype != y.dtype:
      out = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(out), y.cast(out)
    if reverse: x, y = y, x
    shape = broadcast_pair(x.shape, y.shape)
    return x._broadcast_to(shape), y._broadcast_to(shape)
  def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
    if self.shape == shape: return self
    if len(self.shape) > len(shape): raise ValueError(f"can't broadcast {self.shape} to {shape}")
    padded = (1,) * (len(shape) - len(self.shape)) + self.shape
    for s, n in zip(padded, shape):
      if s != n and s != 1: raise ValueError(f"can't broadcast shape {self.shape} to {shape}")
    return self.reshape(padded).expand(shape)
  def _alu(self, op: Ops, *srcs: Tensor, dtype: DType | None = None) -> Tensor:
    x = self.uop
    return self._new(new_uop(op, dtype or x.dtype, (x, srcs[0].uop) if len(srcs) == 1 else
                             (x,) + tuple(s.uop for s in srcs), None), x)
  def _with_number(self, op: Ops, y: Any, reverse: bool) -> Tensor | None:
    """The two common cases of _broadcasted, built directly (the same node, without the calls, nor a Tensor for a
    constant): tensor op Python number where the number takes the tensor's dtype, and two tensors of one shape, dtype
    and device. None for every other case (and bool tensors, whose add and mul are other ops)."""
    xu = self.uop
    if y.__class__ is Tensor:
      yu = y.uop
      if yu.dtype is not xu.dtype or y._weak is not self._weak or xu.dtype is dtypes.bool or \
         (dev := xu.device) is None or yu.device != dev or \
         yu.shape != xu.shape:
        return None
      if reverse: return y._new(new_uop(op, xu.dtype, (yu, xu), None), yu)
      return self._new(new_uop(op, xu.dtype, (xu, yu), None), xu)
    if y.__class__ not in (float, int) or xu.dtype is dtypes.bool or \
       (y.__class__ is float and not dtypes.is_float(xu.dtype)):
      return None
    c = _broadcast_const(y, xu.dtype, xu.device or self._device, xu.shape)
    return self._new(new_uop(op, xu.dtype, (c, xu) if reverse else (xu, c), None), xu)
  def add(self, x: Any, reverse: bool = False) -> Tensor:
    if (r := self._with_number(Ops.ADD, x, reverse)) is not None: return r
    a, b = self._broadcasted(x, reverse)
    if a.dtype is dtypes.bool: return a | b
    return a._alu(Ops.ADD, b)
  def sub(self, x: Any, reverse: bool = False) -> Tensor:
    if (r := self._with_number(Ops.SUB, x, reverse)) is not None: return r
    a, b = self._broadcasted(x, reverse)
    if a.dtype is dtypes.bool: raise TypeError("sub: subtracting bool tensors is not supported; use ^ or logical_xor")
    return a._alu(Ops.SUB, b)
  def mul(self, x: Any, reverse: bool = False) -> Tensor:
    if (r := self._with_number(Ops.MUL, x, reverse)) is not None: return r
    a, b = self._broadcasted(x, reverse)
    if a.dtype is dtypes.bool: return a & b
    return a._alu(Ops.MUL, b)
  def div(self, x: Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division (ints give the default float); rounding_mode 'trunc' or 'floor' as in PyTorch."""
    a, b = self._broadcasted(x, reverse)
    if rounding_mode == "trunc":
      return a._alu(Ops.IDIV, b._safe_divisor()).mul(b.ne(0)) if dtypes.is_int(a.dtype) else a.div(b).trunc()
    if rounding_mode == "floor": return a // b
    if rounding_mode is not None:
      raise ArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    if not dtypes.is_float(a.dtype):  # ints and bools (weakint too, as in tinygrad) divide in the default float
      a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
    return a._alu(Ops.FDIV, b)
  def _safe_divisor(self) -> Tensor: return self.eq(0).where(self._const_like(1), self)
  def floordiv(self, x: Any, reverse: bool = False) -> Tensor:
    """Division rounded toward negative infinity, like Python's // (x // 0 is 0 for ints)."""
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_float(a.dtype): return a.div(b).floor()
    if a.dtype is dtypes.bool: a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
    bs = b._safe_divisor()
    q = a._alu(Ops.IDIV, bs)
    if not dtypes.is_unsigned(a.dtype):
      fix = (q * bs).ne(a) & ((a < 0) ^ (bs < 0))
      q = q - fix.cast(q.dtype)
    return b.eq(0).where(q._const_like(0), q)
  def mod(self, x: Any, reverse: bool = False) -> Tensor:
    """The remainder with the divisor's sign, like Python's %."""
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_float(a.dtype): return a - (a / b).floor() * b
    if a.dtype is dtypes.bool: a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
    bs = b._safe_divisor()
    r = a._alu(Ops.MOD, bs)
    if not dtypes.is_unsigned(a.dtype): r = (r.ne(0) & ((r < 0) ^ (bs < 0))).where(r + bs, r)
    return b.eq(0).where(r._const_like(0), r)
  def fmod(self, x: Any) -> Tensor:
    a, b = self._broadcasted(x)
    return a - (a / b).trunc() * b if dtypes.is_float(a.dtype) else a._alu(Ops.MOD, b._safe_divisor())
  def pow(self, x: Any, reverse: bool = False) -> Tensor:
    """Elementwise power; integer tensors stay integer."""
    if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool):
      # as in PyTorch: an int tensor to a float power is float (2.0 too), to a negative int power an error
      if isinstance(x, float) and not dtypes.is_float(self.dtype): return self._f().pow(x)
      if x < 0 and not dtypes.is_float(self.dtype):
        raise DTypeOpError(f"pow: an integer tensor ({self.dtype}) to a negative integer power ({x}) isn't an integer")
      if x == 2: return self * self
      if x == 1: return self + 0
      if x == 0: return self.ones_like()
      if x == 0.5 and dtypes.is_float(self.dtype): return self.sqrt()
      if x == -1 and dtypes.is_float(self.dtype): return self.reciprocal()
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_int(a.dtype) or a.dtype is dtypes.bool:
      return a._int_pow(b)
    # |a|^b via exp2/log2, negated for a negative base (-0.0 included) with an odd exponent, nan for a finite negative
    # base with a fractional one; a^0 and 1^b are 1 (nan and inf too), and so is (-1)^+-inf, as in C's pow
    mag = (b * a.abs().log2()).exp2()
    is_int_exp = b.eq(b.trunc())
    odd = is_int_exp & (b.abs() % 2).eq(1)
    neg = (a < 0) | (a.eq(0) & (a.reciprocal() < 0))
    res = (neg & odd).where(-mag, mag)
    res = ((a < 0) & a.isinf().logical_not() & is_int_exp.logical_not()).where(mag._const_like(math.nan), res)
    one = b.eq(0) | a.eq(1) | (a.eq(-1) & b.isinf())
    res = one.where(res._const_like(1.0), res)
    # the gradient of these formulas is nan at a = 0 (log2(0) * 0): pow's own rule instead (gradient.py)
    return res._new(UOp(Ops.CUSTOM_GRAD, res.dtype, (res.uop, a.uop, b.uop), ("pow",)))
  def _int_pow(self, b: Tensor) -> Tensor:
    # square-and-multiply over the bits of the exponent (up to 2^31)
    dtype = self.dtype if self.dtype is not dtypes.bool else dtypes.default_int
    base, e = self.cast(dtype), b.cast(dtype)
    out = base._const_like(1)
    cur = base
    neg = e < 0
    ee = neg.where(e._const_like(0), e)
    for i in range(32 if dtype.itemsize >= 4 else dtype.itemsize * 8):
      bit = ((ee >> i) & 1).eq(1)
      out = bit.where(out * cur, out)
      cur = cur * cur
    # negative exponents: 1 -> 1, -1 -> +-1, else 0 (like integer truncation)
    odd_pow = (e.abs() % 2).eq(1).where(base, base._const_like(1))
    neg_val = base.eq(1).where(base._const_like(1), base.eq(-1).where(odd_pow, base._const_like(0)))
    return neg.where(neg_val, out)
  def maximum(self, x: Any) -> Tensor:
    a, b = self._broadcasted(x)
    if a.dtype is dtypes.bool: return a | b
    return a._alu(Ops.MAX, b)
  def minimum(self, x: Any) -> Tensor:
    a, b = self._broadcasted(x)
    if a.dtype is dtypes.bool: return a & b
    # floats: -max(-a, -b), so NaN propagates and a tie splits the gradient evenly, as in maximum (and torch)
    return (a < b).where(a, b) if not dtypes.is_float(a.dtype) else -((-a)._alu(Ops.MAX, -b))
  def where(self, x: Any, y: Any) -> Tensor:
    """`x` where this bool tensor is true, else `y`. A condition of another dtype raises (as in tinygrad and
    PyTorch): say what true means, `(t != 0).where(x, y)`."""
    if self.dtype is not dtypes.bool:
      raise DTypeOpError(f"where: the condition must be a bool tensor, got {self.dtype}; compare it first "
                         f"(t != 0).where(x, y)")
    cond = self
    if isinstance(x, Tensor) and isinstance(y, Tensor):
      x, y = x._broadcasted(y)
    elif isinstance(x, Tensor): x, y = x._broadcasted(y)
    elif isinstance(y, Tensor): y, x = y._broadcasted(x)
    else:
      # two Python scalars: weak, as tinygrad shows them (an int the default int can't hold makes both int64)
      d = least_upper_dtype(dtypes.from_py(x), dtypes.from_py(y))
      if d is dtypes.weakint and dtypes.int64 in (dtypes.from_py_stored(x), dtypes.from_py_stored(y)): d = dtypes.int64
      x, y = cond._const_like(x, d), cond._const_like(y, d)
    if cond.device != x.device:  # (x and y were matched above)
      raise ArgumentError(f"where: device mismatch, the condition is on {cond.device} and the values on {x.device}; "
                          f"move one with .to('{x.device}')")
    shape = broadcast_shape(cond.shape, x.shape)
    cond, x, y = cond._broadcast_to(shape), x._broadcast_to(shape), y._broadcast_to(shape)
    return cond._new(UOp(Ops.WHERE, x.dtype, (cond.uop, x.uop, y.uop)))
  def _cmp(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._alu(op, b, dtype=dtypes.bool)
  def __lt__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPLT, x)
  def __gt__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPLT, x, True)
  def __le__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPLT, x, True).logical_not()
  def __ge__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPLT, x).logical_not()
  def __eq__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPEQ, x)  # type: ignore[override]
  def __ne__(self, x: Any) -> Tensor: return self._cmp(Ops.CMPNE, x)  # type: ignore[override]
  def eq(self, x: Any) -> Tensor: return self._cmp(Ops.CMPEQ, x)
  def ne(self, x: Any) -> Tensor: return self._cmp(Ops.CMPNE, x)
  def lt(self, x: Any) -> Tensor: return self < x
  def gt(self, x: Any) -> Tensor: return self > x
  def le(self, x: Any) -> Tensor: return self <= x
  def ge(self, x: Any) -> Tensor: return self >= x
  def logical_not(self) -> Tensor: return self.cast(dtypes.bool).ne(True)
  def _bitwise(self, op: Ops, x: Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_float(a.dtype):
      raise DTypeOpError(f"{op.name.lower()}: bitwise ops need int or bool tensors, got {a.dtype}")
    return a._alu(op, b)
  def bitwise_and(self, x: Any, reverse: bool = False) -> Tensor: return self._bitwise(Ops.AND, x, reverse)
  def bitwise_or(self, x: Any, reverse: bool = False) -> Tensor: return self._bitwise(Ops.OR, x, reverse)
  def bitwise_xor(self, x: Any, reverse: bool = False) -> Tensor: return self._bitwise(Ops.XOR, x, reverse)
  def bitwise_not(self) -> Tensor:
    if self.dtype is dtypes.bool: return self.logical_not()
    if dtypes.is_float(self.dtype): raise TypeError(f"bitwise_not: needs an int or bool tensor, got {self.dtype}")
    return self ^ -1 if not dtypes.is_unsigned(self.dtype) else self ^ dtypes.max(self.dtype)
  def lshift(self, x: Any) -> Tensor: return self._bitwise(Ops.SHL, x)
  def rshift(self, x: Any) -> Tensor: return self._bitwise(Ops.SHR, x)
  def logical_and(self, x: Any) -> Tensor:
    return self.cast(dtypes.bool) & (x.cast(dtypes.bool) if isinstance(x, Tensor) else bool(x))
  def logical_or(self, x: Any) -> Tensor:
    return self.cast(dtypes.bool) | (x.cast(dtypes.bool) if isinstance(x, Tensor) else bool(x))
  def logical_xor(self, x: Any) -> Tensor:
    return self.cast(dtypes.bool) ^ (x.cast(dtypes.bool) if isinstance(x, Tensor) else bool(x))

  # unary math
  def _float_unary(self, op: Ops) -> Tensor:
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
    return x._alu(op)
  def neg(self) -> Tensor:
    if self.dtype is dtypes.bool: return self.logical_not()
    return self._alu(Ops.NEG) if dtypes.is_float(self.dtype) else self * -1
  def exp2(self) -> Tensor: return self._float_unary(Ops.EXP2)
  def log2(self) -> Tensor: return self._float_unary(Ops.LOG2)
  @_rounded_once
  def exp(self) -> Tensor: return self._f().mul(1 / math.log(2)).exp2()
  @_rounded_once
  def log(self) -> Tensor: return self.log2().mul(math.log(2))
  @_rounded_once
  def log10(self) -> Tensor: return self.log2().mul(math.log10(2))
  @_rounded_once
  def log1p(self) -> Tensor:
    """log(1 + x), accurate for tiny x where 1 + x rounds to 1 (log1p(1e-8) is 1e-8, not 0).

    >>> f"{Tensor([1e-8]).log1p().item():.6g}"
    '1e-08'
    """
    # u = 1 + x is rounded, but log(u) * x / (u - 1) cancels that rounding: (u - 1) is exact, and log(u)/(u - 1)
    # varies slowly (Goldberg, "What every computer scientist should know...", theorem 4). x = inf gives itself.
    x = self._f()
    u = x + 1
    y = (u.eq(1) | x.eq(math.inf)).where(x, u.log() * (x / (u - 1)))
    return x._custom_grad("log1p", y)
  @_rounded_once
  def expm1(self) -> Tensor:
    """exp(x) - 1, accurate for small |x| where exp(x) rounds near 1 (expm1(1e-8) is 1e-8, not 0).

    >>> f"{Tensor([1e-8]).expm1().item():.6g}"
    '1e-08'
    """
    x = self._f()
    # |x| < 1/2: x * (1 + x * (1/2! + x/3! + ...)), the Taylor series to the dtype's precision (a product, so -0.0
    # stays -0.0); elsewhere exp(x) - 1 loses at most ~2 ulp to the subtraction
    small = x.abs() < 0.5
    xs = small.where(x, 0.0)
    n = {2: 8, 4: 10}.get(x.uop.dtype.itemsize, 17)  # (its stored dtype: a weakfloat is the default float)
    q = xs * (1 / math.factorial(n)) + 1 / math.factorial(n - 1)
    for k in range(n - 2, 1, -1): q = q * xs + 1 / math.factorial(k)
    y = small.where(xs * (xs * q + 1), x.exp() - 1)
    return x._custom_grad("expm1", y)
  def _custom_grad(self, name: str, y: Tensor) -> Tensor:
    """`y`, computed from this tensor, with the gradient rule `name` of gradient.py instead of the gradient of the
    ops that compute it (accurate formulas differentiate badly, or not at all at their special points)."""
    return y._new(UOp(Ops.CUSTOM_GRAD, y.dtype, (y.uop, self.uop), (name,)))
  def sqrt(self) -> Tensor: return self._float_unary(Ops.SQRT)
  @_rounded_once
  def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
  def reciprocal(self) -> Tensor: return self._float_unary(Ops.RECIP)
  def sin(self) -> Tensor: return self._float_unary(Ops.SIN)
  @_rounded_once
  def cos(self) -> Tensor:
    """cos(x) from x = q * pi/2 + r, |r| <= pi/4: +-sin(r) or +-cos(r) = +-sin(pi/2 - |r|) by q mod 4. Accurate to
    ~1 ulp also near cos's zeros, where sin(pi/2 - x) loses all precision to the rounding of pi/2 - x."""
    x = self._f().abs()                          # cos is even; q >= 0 from here
    p1, p2, p3, h, hl, limit = _COS_SPLIT[x.dtype is dtypes.float64]
    q = (x * (2 / math.pi) + 0.5).trunc()        # round(x / (pi/2)) for x >= 0
    r = ((x - q * p1) - q * p2) - q * p3         # Cody-Waite: pi/2 = p1 + p2 + p3, q * p1 and q * p2 exact
    m = q - (q * 0.25).trunc() * 4               # q mod 4
    odd = m.eq(1) | m.eq(3)
    # cos(r) = sin(h - |r| + hl): h - |r| in [pi/4, pi/2] loses at most half an ulp there, where cos(r) >= 0.7
    y = odd.where(r, (h - r.abs()) + hl).sin()
    # past the exact range of q * p1: 1 - 2 sin^2(x/2), from sin's own exact reduction (absolute error ~1 ulp of 1)
    far = 1 - 2 * (x * 0.5).sin().square()
    return (x < limit).where((m.eq(1) | m.eq(2)).where(-y, y), far)
  @_rounded_once
  def tan(self) -> Tensor: return self.sin() / self.cos()
  def _f(self) -> Tensor: return self if dtypes.is_float(self.dtype) else self.cast(least_upper_float(self.dtype))
  def trunc(self) -> Tensor: return self._alu(Ops.TRUNC) if dtypes.is_float(self.dtype) else self
  def floor(self) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Tensor:
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def round(self) -> Tensor:
    """Round half to even, like NumPy and PyTorch (-0.5 rounds to -0.0)."""
    if not dtypes.is_float(self.dtype): return self
    f = self.floor()
    diff = self - f
    up = (diff > 0.5) | (diff.eq(0.5) & (f % 2).eq(1))
    # f + 1 is +0.0 where it reaches 0 from below: the result keeps the input's sign instead
    return up.where((f + 1).eq(0).where(self * 0, f + 1), f)
  def abs(self) -> Tensor:
    """|x|; abs(-0.0) is 0.0 and the gradient at 0 is 0, like PyTorch."""
    if self.dtype is dtypes.bool or dtypes.is_unsigned(self.dtype): return self
    if not dtypes.is_float(self.dtype): return (self < 0).where(-self, self)
    # x + 0.0 turns -0.0 into 0.0 (and keeps NaN)
    return self._custom_grad("abs", (self < 0).where(-self, self + 0.0))
  def _neg_abs(self) -> Tensor:
    """-|x| whose gradient at 0 is -1 (the x >= 0 side): sigmoid, tanh and softplus pick their x >= 0 formula at 0,
    so this keeps their gradients right there."""
    return (self < 0).where(self, -self)
  def sign(self) -> Tensor:
    if self.dtype is dtypes.bool: return self
    return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype) if not dtypes.is_float(self.dtype) else \
      self.isnan().where(self, (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype))
  def isnan(self) -> Tensor:
    if dtypes.is_float(self.dtype): return self.ne(self)
    return self._const_like(False, dtypes.bool)._broadcast_to(self.shape)
  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    if not dtypes.is_float(self.dtype): return self._const_like(False, dtypes.bool)._broadcast_to(self.shape)
    return (self.eq(math.inf) & detect_positive) | (self.eq(-math.inf) & detect_negative)
  def isfinite(self) -> Tensor: return (self.isinf() | self.isnan()).logical_not()
  def relu(self) -> Tensor:
    """max(x, 0) like PyTorch: relu(nan) is nan, relu(-0.0) is -0.0, and the gradient is 0 at 0 and at nan (so not MAX,
    whose ties split the gradient). The value is one compare and select, marked with relu's own gradient rule."""
    u = self.uop
    zero = _broadcast_const(0, u.dtype, u.device or self._device, u.shape)
    cmp = _like(new_uop(Ops.CMPLT, dtypes.bool, (u, zero), None), u)
    val = _like(new_uop(Ops.WHERE, u.dtype, (cmp, zero, u), None), u)
    return self._new(new_uop(Ops.CUSTOM_GRAD, u.dtype, (val, u), ("relu",)), u)
  @_rounded_once
  def sigmoid(self) -> Tensor:
    # e = exp(-|x|) never overflows, so neither the value nor its gradient meets inf * 0
    x = self._f()
    e = (x._neg_abs() * (1 / math.log(2))).exp2()
    return (x >= 0).where((1 + e).reciprocal(), e / (1 + e))
  @_rounded_once
  def tanh(self) -> Tensor:
    """tanh(x) = sign(x) * -expm1(-2|x|) / (2 + expm1(-2|x|)): accurate for tiny |x| (tanh(1e-30) is 1e-30, tanh(-0.0)
    is -0.0), and +-1 at +-inf."""
    x = self._f()
    em = (x._neg_abs() * 2).expm1()
    t = -em / (em + 2)
    return (x < 0).where(-t, t)
  def clip(self, min_: Any = None, max_: Any = None) -> Tensor:
    """min(max(x, min_), max_) like torch.clamp: NaN stays NaN, -0.0 stays -0.0, and the gradient is 1 at both
    bounds (x itself is kept there, so ties go to x)."""
    if min_ is None and max_ is None: raise ArgumentError("clip: at least one of min and max must be given")
    out = self
    if min_ is not None:
      a, lo = out._broadcasted(min_)
      out = (a < lo).where(lo, a)
    if max_ is not None:
      a, hi = out._broadcasted(max_)
      out = (hi < a).where(hi, a)
    return out
  def clamp(self, min_: Any = None, max_: Any = None) -> Tensor: return self.clip(min_, max_)
  def lerp(self, end: Tensor, weight: Any) -> Tensor: return self + (end - self) * weight
  def square(self) -> Tensor: return self * self

  # casts
  def cast(self, dtype: DType | str) -> Tensor:
    """These values as `dtype` (floats to ints truncate toward zero)."""
    d = to_dtype(dtype)
    if self.dtype is d: return self
    if d in _WEAK:  # the kind's conversion (weakint truncates), computed in the strong dtype, shown weak
      t = self._strong().cast(strong_dtype(d))
      t = t._new(t.uop)
      t._weak = d
      return t
    t = self._strong()
    return t if t.uop.dtype is d else t._new(UOp(Ops.CAST, d, (t.uop,)))
  def bitcast(self, dtype: DType | str) -> Tensor:
    """The same bytes read as `dtype`, as torch's `view(dtype)`. Between item sizes that differ the last dim scales
    by their ratio (its bytes must divide evenly): int32 (2, 4) -> int8 (2, 16) -> int32 (2, 4).

    >>> Tensor([1.0]).bitcast(dtypes.uint16).tolist()
    [0, 16256]
    """
    d = to_dtype(dtype)
    if d in _WEAK:
      raise WeakDTypeError(f"bitcast: {d} has no bytes to read; use a concrete dtype such as {strong_dtype(d)}")
    self = self._strong()  # a weak tensor's bytes are those of its default dtype (tinygrad refuses one)
    src = self.dtype
    if d.itemsize == src.itemsize: return self if src == d else self._new(UOp(Ops.BITCAST, d, (self.uop,)))
    if tensor_disk.on_disk(self.device): return tensor_disk.bitcast(self, d)  # the file's bytes read as d
    last = self.shape[-1] if self.ndim else 1
    if not self.ndim or dtypes.bool in (src, d) or not isinstance(last, int) or (last * src.itemsize) % d.itemsize:
      raise RuntimeError(f"bitcast: {src} ({src.itemsize} bytes) to {d} ({d.itemsize} bytes) needs equal item sizes, "
                         f"or a last dim whose bytes divide by {d.itemsize} and no bools; got shape {self.shape}")
    # through unsigned ints of both sizes, little-endian (the byte order of every device): a wide item is its narrow
    # ones shifted into place, so the split and the join are shifts, masks and ors in one elementwise kernel
    uint_of = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
    u_src, u_dst = uint_of[src.itemsize], uint_of[d.itemsize]
    x = self.bitcast(u_src)
    if src.itemsize > d.itemsize:  # split: item k of the r narrow ones is bits [k*w, (k+1)*w) of the wide one
      r, w = src.itemsize // d.itemsize, 8 * d.itemsize
      parts = [((x >> (k * w)) & ((1 << w) - 1)).cast(u_dst) for k in range(r)]
      out = Tensor.stack(*parts, dim=-1).reshape(*self.shape[:-1], last * r)
    else:  # join: r neighbours along the last dim make one wide item, the first in the lowest bits
      r, w = d.itemsize // src.itemsize, 8 * src.itemsize
      y = x.reshape(*self.shape[:-1], last // r, r).cast(u_dst)
      out = functools.reduce(Tensor.bitwise_or, [y[..., k] << (k * w) for k in range(r)])
    return out.bitcast(d)
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)

  # ***** movement (zero-copy views) *****
  def _resolve_axis(self, axis: int, op: str, ndim: int | None = None) -> int:
    n = self.ndim if ndim is None else ndim
    if not isinstance(axis, int): raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    if not -max(n, 1) <= axis < max(n, 1):
      raise IndexError(f"{op}: axis {axis} is out of range for a tensor with shape {self.shape}")
    return axis + n if axis < 0 else axis
  def reshape(self, shape: Any, *args: Any) -> Tensor:
    """The same elements with a new shape; one dim may be -1. A dim may be a bound Variable (or an expression of
    them): the tensor then has a symbolic shape, and kernels over it compile once for every value."""
    new = argfix(shape, *args)
    if None in new:  # None keeps the dim at that position, as in tinygrad
      if len(new) > self.ndim and None in new[self.ndim:]:
        raise ArgumentError(f"reshape: None keeps a dim, but {self.shape} has no dim {new.index(None, self.ndim)}: "
                         f"got {new}")
      new = tuple(self.shape[i] if s is None else s for i, s in enumerate(new))
    if any(not isinstance(s, int) for s in new):
      if any(not isinstance(s, UOp) for s in new if not isinstance(s, int)):
        raise TypeError(f"reshape: shape must be ints, got {new}")
      new = tuple(_size_arg(s, "reshape", bound=False) for s in new)
    if new.count(-1) > 1: raise ArgumentError(f"reshape: only one dim can be -1, got {new}")
    numel = self.numel()
    if sym_vals(*new, numel) is None:  # an unbound Variable: the sizes must agree for every value
      if -1 in new or not sym_eq(prod(new), numel):
        raise ValueError(f"reshape: can't reshape {shape_str(self.shape)} to {shape_str(new)}: with an unbound "
                         "Variable the element counts must be equal for every value (bind it to check them with "
                         "its value)")
      return self if new == self.shape else self._new(build.reshape(self.uop, new))
    if -1 in new:
      rest = prod(s for s in new if s != -1)
      if sym_val(rest) == 0 or sym_val(numel) % sym_val(rest):
        raise ValueError(f"reshape: can't reshape {self.shape} to {new}")
      new = tuple(ssimp(numel // rest) if s == -1 else s for s in new)
    if any(sym_val(s) < 0 for s in new): raise ValueError(f"reshape: can't reshape {self.shape} to {new}: negative dim")
    if sym_val(prod(new)) != sym_val(numel):
      raise ValueError(f"reshape: can't reshape {self.shape} ({sym_val(numel)} elements) to {new} "
                       f"({sym_val(prod(new))} elements)")
    if (rec := _active_recorder()) is not None and (numel.__class__ is not int or is_symbolic(new)) \
       and not sym_eq(prod(new), numel):
      rec.size_check(prod(new), numel, True, f"reshape of {self._shape_repr()} to {shape_str(new)}")
    return self if new == self.shape else self._new(build.reshape(self.uop, new))
  def view(self, *shape: Any, **kw: Any) -> Tensor:
    """reshape under PyTorch's name; `view(shape=(2, 3))` as in tinygrad."""
    if kw:
      if shape or set(kw) != {"shape"}: raise TypeError(f"view: takes a shape, positionally or as shape=, got {kw}")
      shape = (kw["shape"],)
    return self.reshape(*shape)
  def permute(self, order: Any, *args: Any) -> Tensor:
    order = argfix(order, *args)
    ax = tuple(self._resolve_axis(a, "permute") for a in order)
    if sorted(ax) != list(range(self.ndim)):
      raise ArgumentError(f"permute: {order} is not a permutation of the {self.ndim} dims of {self.shape}")
    return self if ax == tuple(range(self.ndim)) else self._new(UOp(Ops.PERMUTE, self.dtype, (self.uop,), ax))
  def expand(self, shape: Any, *args: Any) -> Tensor:
    """Repeat size-1 dims without copying; -1 keeps a dim."""
    new = tuple(_size_arg(s, "expand") if isinstance(s, UOp) else s for s in argfix(shape, *args))
    if len(new) < self.ndim: raise ValueError(f"expand: shape {new} has fewer dims than the tensor's {self.shape}")
    old = (1,) * (len(new) - self.ndim) + self.shape
    new = tuple(o if n == -1 else n for o, n in zip(old, new))
    for o, n in zip(old, new):
      if o != n and o != 1: raise ValueError(f"expand: can't expand {self.shape} to {new}")
    x = self.reshape(old) if old != self.shape else self
    return x if new == x.shape else x._new(UOp(Ops.EXPAND, x.dtype, (x.uop,), new))
  def pad_(self, arg: tuple[tuple[sint, sint], ...]) -> Tensor:
    if all(b.__class__ is int and a.__class__ is int and b == 0 and a == 0 for b, a in arg): return self
    return self._new(UOp(Ops.PAD, self.dtype, (self.uop,), arg))
  def shrink(self, arg: Sequence[tuple[int | UOp, int | UOp] | None]) -> Tensor:
    """Keep [start, end) of each dim (None keeps the dim whole). An end that is a bound Variable (or an expression of
    one) may pass the dim, as in tinygrad: the positions past it read zeros, never memory outside the buffer
    (`Tensor.ones(3)[:Variable("a", 1, 10).bind(5)]` is [1, 1, 1, 0, 0]). A concrete end past the dim is an error."""
    if len(arg) != self.ndim: raise ValueError(f"shrink: need one (start, end) per dim of {self.shape}, got {arg}")
    full = tuple((0, s) if a is None else (_size_arg(a[0], "shrink", bound=False),
                                           _size_arg(a[1], "shrink", bound=False)) for a, s in zip(arg, self.shape))
    past = [0] * self.ndim  # per dim: the zeros a symbolic end past the dim reads (pad up to the end's largest value)
    for i, ((b, e), s) in enumerate(zip(full, self.shape)):
      # with an unbound Variable the check waits for its value (the kernel's bounds come from the Variable's range)
      if (v := sym_vals(b, e, s)) is None or 0 <= v[0] <= v[1] <= v[2]: continue
      if 0 <= v[0] <= v[1] and isinstance(e, UOp) and s.__class__ is int: past[i] = int(e.vmax) - s
      else: raise ValueError(f"shrink: {_args_str(arg)} is out of bounds for shape {self._shape_repr()}")
    if any(past): return self.pad_(tuple((0, p) for p in past)).shrink(full)
    for (b, e), s in zip(full, self.shape):
      if (rec := _active_recorder()) is not None \
         and not (b.__class__ is int and e.__class__ is int and s.__class__ is int):
        what = f"shrink {_args_str(arg)} of {self._shape_repr()}"
        for lo, hi in ((0, b), (b, e), (e, s)): rec.size_check(lo, hi, False, what)
    if all(b.__class__ is int and b == 0 and (e is s or (e.__class__ is int and e == s))
           for (b, e), s in zip(full, self.shape)):
      return self
    return self._new(UOp(Ops.SHRINK, self.dtype, (self.uop,), full))
  def flip(self, axis: Any, *args: Any) -> Tensor:
    given = [self._resolve_axis(a, "flip") for a in argfix(axis, *args)]
    axes = set(given)
    if len(axes) != len(given): raise ArgumentError(f"flip: a dim appears more than once in {argfix(axis, *args)}")
    arg = tuple(i in axes for i in range(self.ndim))
    return self if not any(arg) else self._new(UOp(Ops.FLIP, self.dtype, (self.uop,), arg))
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0: return self.reshape(1)
    s, e = self._resolve_axis(start_dim, "flatten"), self._resolve_axis(end_dim, "flatten")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def unflatten(self, dim: int, sizes: tuple[int, ...]) -> Tensor:
    d = self._resolve_axis(dim, "unflatten")
    sizes = tuple(sizes)
    if -1 in sizes:
      rest = prod(s for s in sizes if s != -1)
      sizes = tuple(self.shape[d] // rest if s == -1 else s for s in sizes)
    if prod(sizes) != self.shape[d]:
      raise ValueError(f"unflatten: sizes {sizes} don't multiply to dim {d} of {self.shape}")
    return self.reshape(self.shape[:d] + sizes + self.shape[d + 1:])
  def squeeze(self, dim: int | None = None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    d = self._resolve_axis(dim, "squeeze")  # a 0-d tensor takes dim 0 or -1, as in PyTorch
    return self if self.ndim == 0 or self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])
  def unsqueeze(self, dim: int) -> Tensor:
    d = self._resolve_axis(dim, "unsqueeze", self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    order = list(range(self.ndim))
    a, b = self._resolve_axis(dim0, "transpose"), self._resolve_axis(dim1, "transpose")
    order[a], order[b] = order[b], order[a]
    return self.permute(order)
  @property
  def T(self) -> Tensor: return self.permute(tuple(reversed(range(self.ndim))))

  # ***** reductions *****
  def _axes(self, axis: Any, op: str) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = tuple(sorted({self._resolve_axis(a, op) for a in axes}))
    if len(out) != len(axes): raise ValueError(f"{op}: repeated axis in {axis}")
    return out
  def _reduce(self, op: Ops, axis: Any, keepdim: bool, name: str) -> Tensor:
    self = self._strong()  # a reduce's result is concrete (tinygrad): its accumulator was chosen for the values
    axes = self._axes(axis, name)
    if self.ndim == 0: return self
    out_shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
    if any(self.shape[a] == 0 for a in axes):  # reducing nothing gives the identity
      ident = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtypes.min(self.dtype)}[op]
      ret = Tensor.full(out_shape, ident, dtype=self.dtype, device=self.device)
    else:
      ret = self._new(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes)))
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
  def sum(self, axis: Any = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    """Sum over `axis` (all axes when None). Small ints and bools accumulate and return as int32, like PyTorch's int64
    rule; half, bfloat16 and fp8 accumulate in float32 and round to their own dtype once, at the end.

    >>> Tensor.ones(4096).half().sum().item()
    4096.0
    """
    return self._acc_reduce(Ops.ADD, axis, keepdim, dtype, "sum")
  def prod(self, axis: Any = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
    return self._acc_reduce(Ops.MUL, axis, keepdim, dtype, "prod")
  def _acc_reduce(self, op: Ops, axis: Any, keepdim: bool, dtype: DType | str | None, name: str) -> Tensor:
    if dtype is not None: return self.cast(to_dtype(dtype))._reduce(op, axis, keepdim, name)
    d = strong_dtype(self.dtype)
    acc = sum_acc_dtype(d)
    ret = self.cast(acc)._reduce(op, axis, keepdim, name)
    return ret if acc is d or not dtypes.is_float(d) else ret.cast(d)
  def max(self, axis: Any = None, keepdim: bool = False) -> Tensor:
    """The largest value over `axis`. An empty dim reduces to the op's identity, as in tinygrad: -inf for floats and
    the dtype's minimum for ints (so `min` gives +inf and the maximum); PyTorch raises there."""
    if self.dtype is dtypes.bool:
      return self.cast(dtypes.uint8)._reduce(Ops.MAX, axis, keepdim, "max").cast(dtypes.bool)
    return self._reduce(Ops.MAX, axis, keepdim, "max")
  def min(self, axis: Any = None, keepdim: bool = False) -> Tensor:
    if self.dtype is dtypes.bool: return self.logical_not().max(axis, keepdim).logical_not()
    if dtypes.is_unsigned(self.dtype):
      return dtypes.max(self.dtype) - (dtypes.max(self.dtype) - self).max(axis, keepdim)
    # ~x = -x - 1 reverses the order of signed ints without overflowing (-INT_MIN wraps to INT_MIN)
    if dtypes.is_int(self.dtype): return ~((~self).max(axis, keepdim))
    return -((-self).max(axis, keepdim))
  def any(self, axis: Any = None, keepdim: bool = False) -> Tensor:
    return self.cast(dtypes.bool).cast(dtypes.uint8)._reduce(Ops.MAX, axis, keepdim, "any").cast(dtypes.bool)
  def all(self, axis: Any = None, keepdim: bool = False) -> Tensor:
    return self.logical_not().any(axis, keepdim).logical_not()
  def mean(self, axis: Any = None, keepdim: bool = False) -> Tensor:
    # half, bfloat16 and fp8: summed and divided in float32, rounded once (PyTorch's result, not a rounded sum / n)
    x = self._strong()._f()  # a reduction's result is concrete, a weak tensor's too (as sum's)
    axes = self._axes(axis, "mean")
    n = prod(self.shape[a] for a in axes)
    out = x.sum(axis, keepdim, dtype=sum_acc_dtype(x.dtype))
    return (out.div(n) if n else out * math.nan).cast(x.dtype)
  def var(self, axis: Any = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    # low-precision floats: the whole computation in float32, rounded once (squares of half values overflow half)
    x = self._strong()._f()
    x, out_dtype = x.cast(sum_acc_dtype(x.dtype)), x.dtype
    axes = self._axes(axis, "var")
    n = prod(self.shape[a] for a in axes)
    sq = (x - x.mean(axes, keepdim=True)).square().sum(axes, keepdim=keepdim)
    if isinstance(n, UOp):  # a symbolic count: divide by max(0, n - correction) in the kernel (0 dof gives nan or inf)
      return sq.div(smax(ssimp(n - correction), 0)).cast(out_dtype)  # type: ignore[arg-type]
    # no degrees of freedom left: sq / 0 (inf, or nan where sq is 0), as PyTorch
    return sq.div(max(0, n - correction)).cast(out_dtype)
  def std(self, axis: Any = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    return self.var(axis, keepdim, correction).sqrt()
  def var_mean(self, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    """(var, mean) together, as torch.var_mean."""
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self, axis: Any = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    """(std, mean) together, as torch.std_mean."""
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def size(self, dim: int | None = None) -> Any:
    """The shape, or one dim of it (PyTorch's size())."""
    return self.shape if dim is None else self.shape[self._resolve_axis(dim, "size")]
  def logsumexp(self, axis: Any = None, keepdim: bool = False) -> Tensor:
    m = self._f().max(axis, keepdim=True)
    m = m.isinf().where(m.zeros_like(), m)
    out = (self - m).exp().sum(axis, keepdim=True).log() + m
    return out if keepdim else out.squeeze_axes(self._axes(axis, "logsumexp"))
  def squeeze_axes(self, axes: tuple[int, ...]) -> Tensor:
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first maximum (over the flattened tensor when axis is None)."""
    if axis is None: return self.flatten().argmax(0)
    ax = self._resolve_axis(axis, "argmax")
    n = self.shape[ax]
    if n == 0: raise ValueError(f"argmax: can't take argmax over an empty dim of {self.shape}")
    x = self if self.dtype is not dtypes.bool else self.cast(dtypes.int32)
    m = x.max(ax, keepdim=True)
    is_max = x.eq(m) | (x.isnan() if dtypes.is_float(x.dtype) else x.eq(m))
    rev = Tensor.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - ax - 1))
    idx = n - (is_max * rev).max(ax, keepdim=keepdim)
    return idx.cast(dtypes.int32)
  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    if self.dtype is dtypes.bool: return self.logical_not().argmax(axis, keepdim)
    if dtypes.is_unsigned(self.dtype): return (dtypes.max(self.dtype) - self).argmax(axis, keepdim)
    return (~self if dtypes.is_int(self.dtype) else -self).argmax(axis, keepdim)  # (~: see min)

  # ***** matmul *****
  def image_dot(self, w: Tensor, dtype: DType | str | None = None) -> Tensor:
    """dot(), under tinygrad's name for its image-memory variant (IMAGE=1 on Qualcomm GPUs, a 1x1 convolution over
    image buffers). attograd has no image buffers: the product is computed as dot() computes it, the same values.

    >>> Tensor([[1.0, 2.0]]).image_dot(Tensor([[3.0], [4.0]])).tolist()
    [[11.0]]
    """
    if not isinstance(w, Tensor): raise TypeError(f"image_dot: needs a Tensor, got {type(w).__name__}")
    return self.dot(w, dtype)
  def dot(self, w: Any, dtype: DType | str | None = None) -> Tensor:
    """Matrix product with NumPy's rules for 1-D operands and broadcast batch dims. `dtype` is the dtype to
    accumulate in and return (tinygrad's `dtype=`), else the operands' common dtype (accumulated in (u)int32 for
    small ints, so `int8 @ int8` is the exact product wrapped to int8, as in NumPy and PyTorch).

    A convenience beyond tinygrad: `w` may also be a layer, anything callable with a `weight` Tensor such as
    nn.Linear, and then `x.dot(layer)` is `layer(x)`, so a model reads as a chain:
    `x.flatten(1).dot(self.l1).relu().dot(self.l2)`.

    >>> Tensor([[1.0, 2.0]]).dot(Tensor([[3.0], [4.0]])).tolist()
    [[11.0]]
    """
    if not isinstance(w, Tensor):
      if callable(w) and isinstance(getattr(w, "weight", None), Tensor):
        out = w(self)
        return out if dtype is None else out.cast(dtype)
      raise TypeError(f"matmul: expected a Tensor or a layer with a .weight (like nn.Linear), got {type(w).__name__}")
    if self.ndim == 0 or w.ndim == 0:
      raise ArgumentError(f"matmul: both operands need at least 1 dim, got {self.shape} and {w.shape}")
    x, y = self, w
    if x.shape[-1] != (y.shape[-2] if y.ndim >= 2 else y.shape[0]):
      raise ArgumentError(f"matmul: inner dims don't match: {self.shape} @ {w.shape}")
    d = to_dtype(dtype) if dtype is not None else least_upper_dtype(x.dtype, y.dtype)
    # the operands are cast to the accumulator before multiplying: int8 products wrap at 8 bits otherwise, and
    # half/bfloat16/fp8 products are exact in float32 (then summed there, rounded to `d` once: PyTorch's result)
    acc = sum_acc_dtype(d)
    x, y = x.cast(acc), y.cast(acc)
    try: broadcast_shape(x.shape[:-2], y.shape[:-2])
    except ValueError:
      raise ValueError(f"matmul: batch dims of {self.shape} and {w.shape} can't be broadcast together") from None
    squeeze_x, squeeze_y = x.ndim == 1, y.ndim == 1
    if squeeze_x: x = x.reshape(1, -1)
    if squeeze_y: y = y.reshape(-1, 1)
    k, n = x.shape[-1], y.shape[-1]
    if (aligned := _aligned_cols(x, y)) != n: y = y.pad_to(*[None] * (y.ndim - 1), aligned).contiguous()
    xb = x.reshape(x.shape[:-1] + (1, k))                               # (..., M, 1, K)
    yb = y.transpose(-1, -2).reshape(y.shape[:-2] + (1, y.shape[-1], k))  # (..., 1, N, K)
    out = (xb * yb).sum(-1)
    if aligned != n: out = out.shrink_to(*[None] * (out.ndim - 1), n)
    # the operands' dtype, as NumPy, PyTorch and tinygrad return it: a small int product wraps like int8 + int8 does
    # (summed exactly in the accumulator, so the result is the exact one modulo the width); bool @ bool is the OR of
    # ANDs, as NumPy's. sum() and conv2d keep the wide accumulator (as tinygrad's), and dtype= gives any width
    out = out.cast(d)
    if squeeze_x: out = out.squeeze(-2)
    if squeeze_y: out = out.squeeze(-1)
    return out
  def matmul(self, x: Any, reverse: bool = False, dtype: DType | str | None = None) -> Tensor:
    """self @ x (x @ self with reverse=True); see dot() for `dtype` and for passing a layer."""
    return x.dot(self, dtype=dtype) if reverse else self.dot(x, dtype=dtype)

  # ***** indexing (basic; more in the indexing section below) *****
  def __getitem__(self, indices: Any) -> Tensor: return _getitem(self, indices)

  # ***** operators *****
  def __neg__(self) -> Tensor: return self.neg()
  def __add__(self, x: Any) -> Tensor: return self.add(x)
  def __radd__(self, x: Any) -> Tensor: return self.add(x, True)
  def __sub__(self, x: Any) -> Tensor: return self.sub(x)
  def __rsub__(self, x: Any) -> Tensor: return self.sub(x, True)
  def __mul__(self, x: Any) -> Tensor: return self.mul(x)
  def __rmul__(self, x: Any) -> Tensor: return self.mul(x, True)
  def __truediv__(self, x: Any) -> Tensor: return self.div(x)
  def __rtruediv__(self, x: Any) -> Tensor: return self.div(x, True)
  def __floordiv__(self, x: Any) -> Tensor: return self.floordiv(x)
  def __rfloordiv__(self, x: Any) -> Tensor: return self.floordiv(x, True)
  def __mod__(self, x: Any) -> Tensor: return self.mod(x)
  def __rmod__(self, x: Any) -> Tensor: return self.mod(x, True)
  def __pow__(self, x: Any) -> Tensor: return self.pow(x)
  def __rpow__(self, x: Any) -> Tensor: return self.pow(x, True)
  def __matmul__(self, x: Tensor) -> Tensor: return self.matmul(x)
  def __rmatmul__(self, x: Tensor) -> Tensor: return self.matmul(x, True)
  def __and__(self, x: Any) -> Tensor: return self.bitwise_and(x)
  def __rand__(self, x: Any) -> Tensor: return self.bitwise_and(x, True)
  def __or__(self, x: Any) -> Tensor: return self.bitwise_or(x)
  def __ror__(self, x: Any) -> Tensor: return self.bitwise_or(x, True)
  def __xor__(self, x: Any) -> Tensor: return self.bitwise_xor(x)
  def __rxor__(self, x: Any) -> Tensor: return self.bitwise_xor(x, True)
  def __invert__(self) -> Tensor: return self.bitwise_not()
  def __lshift__(self, x: Any) -> Tensor: return self.lshift(x)
  def __rshift__(self, x: Any) -> Tensor: return self.rshift(x)
  def __abs__(self) -> Tensor: return self.abs()
  def _remember_write(self, graph: UOp, before: UOp) -> None: _record_write(self, graph, before)
  def _inplace(self, out: Tensor) -> Tensor:
    # x += y: the result keeps x's dtype and shape, and x now refers to it
    if out.shape != self.shape: raise ValueError(f"in-place op: result shape {out.shape} doesn't match {self.shape}")
    out = out.cast(self.dtype)
    # a realized buffer, or a one-to-one view of one, is written in place as in PyTorch and tinygrad (its views and
    # other holders see the new values); a lazy value, or one autograd tracks (requires_grad, realized from a graph
    # a backward() may still go through, or made from a requires_grad tensor), takes the new graph instead, which
    # keeps the gradient path
    u = self.uop
    if not self.requires_grad and (not has(u.base, ORIGIN) or buffer_shared(self)) and u.base.op is Ops.BUFFER and \
       u.base.arg[2:] != (IOTA_TAG,) and (_is_whole_buffer(u) or _writable_view(u) is not None) and \
       not write_keeps_grad_path(self, out.uop):
      # other tensors view the buffer and must see the write; a gradient the value carries (z[:2] += y) is kept by
      # the written tensor's new node
      graph = old_values_for_grad(self, out.uop) if write_carries_grad(out.uop, u) else None
      self._assign(out, value_private=True, lazy=graph is None)  # (_remember_write needs the write done)
      if graph is not None: self._remember_write(graph, u)
      return self
    self.uop = out.uop
    return self
  def __iadd__(self, x: Any) -> Tensor: return self._inplace(self + x)
  def __isub__(self, x: Any) -> Tensor: return self._inplace(self - x)
  def __imul__(self, x: Any) -> Tensor: return self._inplace(self * x)
  def __itruediv__(self, x: Any) -> Tensor: return self._inplace(self / x)
  def __ifloordiv__(self, x: Any) -> Tensor: return self._inplace(self // x)
  def __imod__(self, x: Any) -> Tensor: return self._inplace(self % x)
  def __ipow__(self, x: Any) -> Tensor: return self._inplace(self ** x)
  def __imatmul__(self, x: Any) -> Tensor: return self._inplace(self @ x)  # type: ignore[misc]
  def __iand__(self, x: Any) -> Tensor: return self._inplace(self & x)
  def __ior__(self, x: Any) -> Tensor: return self._inplace(self | x)
  def __ixor__(self, x: Any) -> Tensor: return self._inplace(self ^ x)
  def __ilshift__(self, x: Any) -> Tensor: return self._inplace(self << x)
  def __irshift__(self, x: Any) -> Tensor: return self._inplace(self >> x)

  # ***** casts by dtype name: last in the class, since in its body `int`, `bool` and `float` would name these *****
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def bfloat16(self) -> Tensor: return self.cast(dtypes.bfloat16)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def short(self) -> Tensor: return self.cast(dtypes.int16)
  def char(self) -> Tensor: return self.cast(dtypes.int8)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)

# ***** helpers below the class *****

# Tensor.rand as defined here, for the methods built on it (randn, uniform, ...), which pass contiguous=False: they
# keep working where a caller replaces Tensor.rand (tinygrad's test_randn_isnt_inf_on_zero puts Tensor.zeros there)
_rand = Tensor.rand

_SCALAR_EXPR = GroupOp.ALU | {Ops.CAST, Ops.BIND, Ops.DEFINE_VAR}
_WEAK = frozenset(dtypes.weaks)  # (a set: DTypes hash by identity, a tuple compares each with ==)

def _size_arg(x: Any, op: str, bound: bool = True) -> sint:
  """A size given to a movement op: an int, or an int expression over Variables (bound ones unless bound=False)."""
  if not isinstance(x, UOp): return int(x)
  if not dtypes.is_int(x.dtype): raise TypeError(f"{op}: a symbolic size must be an int expression, got {x.dtype}")
  if bound:
    try: sym_val(x)  # type: ignore[arg-type]  # a UOp: sizes (sint) are typed as int
    except ValueError as e: raise ValueError(f"{op}: {e}") from None
  return ssimp(x)  # type: ignore[arg-type]

def _args_str(arg: Any) -> str:
  """Movement args for messages: symbolic sizes as their expressions."""
  if isinstance(arg, UOp): return arg.render()
  if isinstance(arg, (tuple, list)):
    return "(" + ", ".join(_args_str(a) for a in arg) + ("," if len(arg) == 1 else "") + ")"
  return repr(arg)

def _concrete_uop(u: UOp) -> UOp:
  """A view chain with each symbolic size in its movement args replaced by its bound value."""
  if u.op not in GroupOp.Movement: return u
  return UOp(u.op, u.dtype, (_concrete_uop(u.src[0]),), _map_arg(u.arg, sym_val))

def _empty_nested(shape: tuple[int, ...]) -> Any:
  if not shape: return []
  if shape[0] == 0: return []
  return [_empty_nested(shape[1:]) for _ in range(shape[0])]

def _check_shape(shape: tuple[Any, ...], op: str) -> tuple[sint, ...]:
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
  if not all(isinstance(s, (int, UOp)) for s in shape):
    # an integer of another type (numpy's) is that int; a float size (2.0 too) is a mistake, not a size: as in
    # tinygrad, refused rather than truncated
    bad = [s for s in shape if not isinstance(s, (int, UOp)) and not hasattr(type(s), "__index__")]
    if bad: raise ArgumentError(f"{op}: shape must be int sizes (or symbolic ones), got {type(bad[0]).__name__} "
                                f"{bad[0]!r} in {shape}")
    shape = tuple(s if isinstance(s, (int, UOp)) else operator.index(s) for s in shape)
  # a constant over a symbolic shape is only a view: nothing to allocate; empty's buffer is sized for the largest
  # values, so its Variables need no value yet (tinygrad's max_shape of an unbound one)
  if op in ("full", "empty") and is_symbolic(shape):
    return tuple(_size_arg(s, op, bound=op == "full") if isinstance(s, UOp) else s for s in shape)
  for s in shape:
    if isinstance(s, UOp): _symbolic_error(op, s)
    if not isinstance(s, int) or s < 0: raise ValueError(f"{op}: shape must be non-negative ints, got {shape}")
  return tuple(shape)

def _symbolic_error(op: str, size: UOp, where: str = "") -> None:
  names = ", ".join(repr(v.expr) for v in size.variables())
  raise SymbolicSizeError(f"{op}: needs concrete sizes, but {where or 'it was given'} the symbolic size "
                          f"{size.render()} "
                          f"(Variable {names}); use a concrete shape here (e.g. reshape to the bound value) or pad "
                          "to the maximum")

# ops whose sizes are Python ints in their construction (index ranges, windows, sort networks, random counters):
# a tensor with a symbolic shape gets an error naming the op and the Variable instead of a failure deep inside
_CONCRETE_ONLY = ("conv_transpose2d", "max_pool2d", "max_unpool2d", "avg_pool2d", "argmax", "argmin",
                  "argsort", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "sort", "topk", "one_hot",
                  "interpolate", "gather", "scatter", "scatter_reduce", "diag", "diagonal", "unfold",
                  "meshgrid", "rearrange", "repeat_interleave", "roll", "masked_select", "qr", "svd",
                  "newton_schulz")

def _concrete_only(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
  @functools.wraps(fn)
  def wrapper(self: Tensor, *args: Any, **kw: Any) -> Any:
    for t in (self, *args, *kw.values()):
      if isinstance(t, Tensor) and (dims := [d for d in t.shape if d.__class__ is not int]):
        _symbolic_error(name, dims[0], f"a tensor of shape {t._shape_repr()} has")  # type: ignore[arg-type]
    return fn(self, *args, **kw)
  return wrapper

# cos's constants: pi/2 = p1 + p2 + p3 (p1, p2 with 8 bits for float32, 26 for float64: q * p1 and q * p2 are exact
# for the q of |x| below `limit`) and pi/2 = h + hl, each exact in the dtype (float32's also serve half and bfloat16)
_COS_SPLIT = {False: (1.5703125, 0.000484466552734375, -6.397578431460715e-07, 1.5707963705062866,
                      -4.371138828673793e-08, 1e5),
              True: (1.5707963407039642, -1.3909067675399456e-08, 6.123233995736766e-17, 1.5707963267948966,
                     6.123233995736766e-17, 2e8)}

_const_cache: dict[tuple, UOp] = {}
def _invalid_const(dtype: DType, device: str, shape: tuple[int, ...]) -> UOp:
  """tinygrad's Invalid ("any value") as a constant of `dtype` expanded to `shape`: a kernel's store of a value that
  depends on it writes nothing there (codegen/lowerer.py, invalid_gate)."""
  u = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),), Invalid)
  return UOp(Ops.EXPAND, dtype, (UOp(Ops.RESHAPE, dtype, (u,), (1,) * len(shape)),), shape) if shape else u

def _broadcast_const(val: ConstType, dtype: DType, device: str, shape: tuple[int, ...]) -> UOp:
  """A constant expanded to `shape`, remembered: scalars in arithmetic are the most common graph nodes."""
  key: tuple = (val.__class__, val, dtype, device, shape)
  # 0.0 == -0.0 (same hash): a cached 0.0 would stand in for -0.0 and the reverse (x + 0.0 must turn -0.0 into 0.0)
  if val == 0 and val.__class__ is float and math.copysign(1.0, val) < 0: key += ("-0",)
  if (u := _const_cache.get(key)) is None:
    if len(_const_cache) >= 4096: _const_cache.clear()
    u = build.const(val, dtype, device)
    if shape: u = UOp(Ops.EXPAND, dtype, (UOp(Ops.RESHAPE, dtype, (u,), (1,) * len(shape)),), shape)
    _const_cache[key] = u
  return u

_np_dtypes: dict[Any, DType] = {}  # NumPy dtype -> attograd's, for Tensor(ndarray)
_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"  # how NumPy spells this machine's byte order
_ndarrays: set[type] = set()  # numpy.ndarray, once one was seen (numpy is imported only when used)

def _uop_of_array(data: Any, dtype: DType | None, device: str) -> UOp:
  """The BUFFER (viewed with its shape) holding a copy of a NumPy array's (or an __array_interface__ object's)
  values, cast to `dtype` when one is given."""
  if data.__class__ in _ndarrays: arr: Any = data  # an ndarray already (the common input): no module lookup and asarray
  else: arr = (sys.modules.get("numpy") or __import__("numpy")).asarray(data)  # (an import statement costs more)
  # big-endian bytes (a '>i4' array, as some files store them) read as this machine's: swapped to its order first
  if arr.dtype.byteorder not in "=|" and arr.dtype.byteorder != _NATIVE_ORDER:
    arr = arr.astype(arr.dtype.newbyteorder("="))
  if (d := _np_dtypes.get(arr.dtype)) is None:
    d = _np_dtypes[arr.dtype] = from_np_dtype(arr.dtype)
  # the array's bytes, copied once (into the Buffer), through the buffer protocol; a non-contiguous array, or a
  # dtype the protocol doesn't know (ml_dtypes' bfloat16), through a contiguous view of it as uint8
  try: raw = memoryview(arr).cast("B")
  except (TypeError, ValueError, BufferError):
    np: Any = sys.modules["numpy"]
    as_bytes: Any = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    raw = memoryview(as_bytes)
  uop = _buffer_from_bytes(raw, arr.shape, d, device)
  return uop if dtype is None or dtype is d else UOp(Ops.CAST, dtype, (uop,))

_n_contiguous = [0]
def _unique_contiguous(u: UOp) -> UOp:
  # hash-consing would make two copies of equal graphs one node (one buffer): an assign into one would show in both
  _n_contiguous[0] += 1
  return UOp(Ops.CONTIGUOUS, u.dtype, (u,), _n_contiguous[0])

def _buffer_from_bytes(raw: bytes | memoryview, shape: tuple[int, ...], dtype: DType, device: str) -> UOp:
  if device.__class__ is tuple: return multi.shard_uop(_buffer_from_bytes(raw, shape, dtype, device[0]), device, None)
  n = shape[0] if len(shape) == 1 else prod(shape)
  if len(raw) != n * dtype.itemsize: raise ValueError(f"Tensor: {len(raw)} bytes don't fill shape {shape} of {dtype}")
  buf = Buffer(device, n, dtype, raw if n else None)
  u = new_buffer_uop(device, n, dtype, buf)
  return u if len(shape) == 1 else build.reshape(u, shape)  # (n,): the buffer's own shape

def _iota_buffer(n: int, device: str) -> UOp:
  """0..n-1 in a buffer tagged as such: kernels compute the values from their index math rather than load them (the
  bytes are there for copies, the PYTHON device's pickles, and anything that reads the buffer as data)."""
  raw = struct.pack(f"<{n}i", *range(n))
  if device.__class__ is tuple: return _buffer_from_bytes(raw, (n,), dtypes.int32, device)
  return new_buffer_uop(device, n, dtypes.int32, Buffer(device, n, dtypes.int32, raw if n else None), iota=True)

# DEBUG_NAN: the user's line that created each op (weak: forgetting a node forgets its line)
_op_sites: weakref.WeakKeyDictionary[UOp, str] = weakref.WeakKeyDictionary()
_BLAME_MAX_ELEMENTS = 1 << 24  # intermediates bigger than this (a matmul's broadcast product) are not computed alone

def _first_nonfinite(outs: list[UOp]) -> str:
  """After a kernel made a NaN or inf: compute each op of the graph that was being realized on its own, in
  dependency order, and name the first whose values are not all finite (the op, the user's line, its shape)."""
  order = [u for out in outs for u in out.toposort() if u in _op_sites and dtypes.is_float(u.dtype)]
  cands = [u for u in dict.fromkeys(order) if u.op not in GroupOp.Movement and u.op is not Ops.CONST
           and not is_symbolic(u.shape) and 0 < prod(u.shape) <= _BLAME_MAX_ELEMENTS]
  if not cands: return "(no op of the graph could be computed on its own to find it)"
  with Context(DEBUG_NAN=0):
    ts = [Tensor(u).float() for u in cands]
    Tensor._realize_all(ts, keep_graph=False)
    for u, t in zip(cands, ts):
      if not all(math.isfinite(v) for v in _unpack(t._raw(), dtypes.float32, t.numel())):
        return f"{_op_sites[u]} ({u.op.name.lower()}, shape {u.shape}, {u.dtype.name})"
  return "(every op computed on its own gave finite values: the kernel's fused form differs)"

# ***** eager values under in-place writes *****
# An in-place write (assign, setitem, an optimizer step) must first realize the lazy tensors that read the buffer it
# writes: built before the write, they hold the values of then, as in PyTorch (tensor/live.py finds them).

def _refs_of_arg(x: Any) -> int: return sys.getrefcount(x)
# what sys.getrefcount shows for an argument nothing but the call holds (measured, not assumed: it is a CPython detail)
_TEMP_ARG_REFS = _refs_of_arg(object())

def _alias_of_buffer(u: UOp) -> bool:
  """A view of a buffer (movement ops, detach): it shares the buffer's storage, as a PyTorch view does."""
  while u.op in GroupOp.Movement or u.op is Ops.DETACH or u.op is Ops.CONTIGUOUS_BACKWARD: u = u.src[0]
  return u.op is Ops.BUFFER or (u.op is Ops.MULTI and all(_alias_of_buffer(s) for s in u.src))

def _reads_any(root: UOp, memo: dict[UOp, bool], bufs: set[Buffer] | None = None,
               written: set[Buffer] | None = None) -> bool:
  """Whether computing `root` reads one of the nodes memo maps to True (the written BUFFERs), or a BUFFER node of
  one of `bufs`, going through the values already remembered for realized nodes, as the scheduler does. A value
  remembered from one of the `written` Buffers counts too: the write makes that memo stale, and the node would be
  computed again from the new values."""
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:
    n, visited = stack.pop()
    if n in memo: continue
    if visited:
      memo[n] = any(memo[s] for s in _sources_now(n)) or (written is not None and _remembered_from(n, written))
      continue
    if n.op is Ops.BUFFER or not n.src:
      memo[n] = bufs is not None and n.op is Ops.BUFFER and buffers.get(n) in bufs
      continue
    stack.append((n, True))
    stack.extend((s, False) for s in _sources_now(n) if s not in memo)
  return memo[root]

def _remembered_from(n: UOp, bufs: set[Buffer]) -> bool:
  """Whether n's remembered value (if any) was computed from one of `bufs`."""
  return (m := slots(n).get(REALIZED)) is not None and any(b in bufs for b, _ in m[2])

def _sources_now(n: UOp) -> tuple[UOp, ...]:
  """What n's value is computed from now: the view holding it when it was realized, else its sources."""
  return (r,) if (r := lookup_realized(n)) is not None and r is not n else n.src

def _record_write(t: Tensor, graph: UOp, before: UOp) -> None:
  """After an in-place write of `graph` into t's buffer (t's node was `before`), which has run: the buffer gets a new
  version node (same memory, its own identity) remembering, as its ORIGIN, its graph: `graph` where t's view maps,
  the old node elsewhere; t holds it. A write cuts the graph of what was written out of the nodes, so without this
  backward() wouldn't reach it (z[:2] += x: x's gradient). On the buffer node, not t's view of it: later views of t
  compose with t's movement ops, which would drop a node above the buffer."""
  root, val, mask = _back_to_root(before if t.uop is before else t.uop, Tensor(graph, device=t.device))
  if root.op is not Ops.BUFFER: return  # (a bitcast view: its values aren't what a gradient flows through)
  whole = val if mask is None else mask.where(val, Tensor(root, device=t.device))
  if t.uop is before:  # written through a view: t still holds the old node
    nb = new_buffer_uop(root.device, root.arg[1], root.dtype, buffers[root])
    t.uop = before.substitute({root: nb})
  else: nb = root  # (a whole write gave t a new version already)
  put(nb, ORIGIN, whole.uop)

def _adopt_intermediates(done: list[Tensor], keep_graph: bool) -> None:
  """After a realize whose kernels computed more than its results: every other live lazy tensor made contiguous
  (contiguous(), clone(), Tensor.rand) whose buffer one of them filled (an intermediate a tensor holds is never pooled,
  and is remembered) now holds that buffer, as tinygrad's realize rebinds every tensor (b = a[2:10].clone();
  b.realize() gives the contiguous a its buffer too). Its graph is kept for backward() as for a realized result.
  (Only those: a held intermediate of any op became a buffer later kernels read instead of fusing it, and a bool one
  read four at a time hit the C renderer's missing bool vectors.)"""
  ids = {id(t) for t in done}
  for r in _made:
    if (t := r()) is None or (u := t.uop).op is not Ops.CONTIGUOUS or REALIZED not in slots(u) or id(t) in ids: continue
    if (v := lookup_realized(u)) is None or v is u or v.base.op is not Ops.BUFFER: continue
    if keep_graph and not t.requires_grad and not getattr(t, "_is_grad", False) and u.op is not Ops.ASSIGN:
      put(v, ORIGIN, u)
      remember_weakly(u)
    t.uop = v

def _on_device(u: UOp, device: str) -> UOp:
  """A device-less graph (constants, no buffer) with its constants on `device`: the value computed there. (Left
  device-less, the scheduler would compute it on the default device of the time, and its cached schedule is the
  graph's alone: realized again with another default, it ran the first device's program.)"""
  return u.substitute({c: build.const(c.arg, c.dtype, device) for c in u.toposort() if c.op is Ops.CONST and not c.src})

def _back_to_root(view: UOp, x: Tensor) -> tuple[UOp, Tensor, Tensor | None]:
  """x (of view's shape) carried back through view's one-to-one ops, pads and detaches to the node under them: (that
  node, x in its shape, the bool mask of the positions x covers there, None when it covers all)."""
  chain, u = [], view
  while u.op in _ONE_TO_ONE or u.op in (Ops.PAD, Ops.DETACH):
    if u.op is not Ops.DETACH: chain.append(u)
    u = u.src[0]
  # (no mask until a shrink or pad: reshapes, permutes and flips cover the whole buffer)
  val, mask = x, None
  for op in chain:
    below = op.src[0].shape
    if op.op is Ops.RESHAPE: back: Callable[[Tensor], Tensor] = lambda t: t.reshape(below)  # noqa: E731
    elif op.op is Ops.PERMUTE:
      order = tuple(sorted(range(len(op.arg)), key=op.arg.__getitem__))
      back = lambda t: t.permute(order)  # noqa: E731
    elif op.op is Ops.FLIP:
      axes = [i for i, f in enumerate(op.arg) if f]
      back = lambda t: t.flip(axes)  # noqa: E731
    else:
      if mask is None: mask = Tensor.full(op.shape, True, dtypes.bool, x.device)
      if op.op is Ops.SHRINK:  # what the view left out is padded back, outside the mask
        pads = tuple((lo, n - hi) for (lo, hi), n in zip(op.arg, below))
        val, mask = val.pad(pads), mask.pad(pads, value=False)
        continue
      region = tuple((lo, lo + n) for (lo, _), n in zip(op.arg, below))  # PAD: its padding holds no element
      back = lambda t: t.shrink(region)  # noqa: E731
    val, mask = back(val), None if mask is None else back(mask)
  return u, val, mask

def _write(assign: UOp, lazy: bool, whole: bool) -> None:
  """Run the in-place write `assign` now (after the pending writes it must follow), or, lazy (Tensor.assign into a
  realized buffer), record it to run when a realize needs its buffer (tensor/pending.py). whole: it writes every
  element of its buffer. A write inside a @function body (whose graph is traced, nothing realized) or while a TinyJit
  captures (the write must be among the kernels it replays) runs now, as does one into memory owned outside attograd
  (Tensor.from_blob: its owner reads the memory directly, with no realize to run a pending write)."""
  if lazy and ALLOW_DEVICE_USAGE.value and _active_recorder() is None and \
     not isinstance(buffers.get(assign.src[0].base), ExternalBuffer):
    pending.add(assign, whole)
    return
  pending.flush_for([assign])
  run_schedule(create_schedule([assign])[0])

def _keep_values_of_readers(targets: set[UOp], skip: set[UOp]) -> None:
  """Before the BUFFER nodes `targets` are written in place: realize every live lazy Tensor whose value reads them
  (views of them excepted: those share the storage), so it keeps the value it has now. `skip`: nodes the write's own
  schedule computes. Any node over the same Buffer counts: a tensor built on an old view of the buffer (taken before
  an earlier write gave the tensor a new version node) reads the memory this write changes."""
  bufs = {b for u in targets if (b := buffers.get(u)) is not None}
  if (todo := _readers_of(targets, skip, bufs)): Tensor._realize_all(todo)

def _readers_of(targets: set[UOp], skip: set[UOp], bufs: set[Buffer] | None = None) -> list[Tensor]:
  """The live lazy Tensors whose values read the BUFFER nodes `targets` or BUFFER nodes of `bufs` (see
  _keep_values_of_readers), each made a graph of its own to realize."""
  memo: dict[UOp, bool] = dict.fromkeys(targets, True)
  written = bufs if bufs is not None else {b for u in targets if (b := buffers.get(u)) is not None}
  todo: list[Tensor] = []
  for r in _made:
    if (t := r()) is None or (u := t.uop) in skip or _alias_of_buffer(u) or u.op is Ops.ASSIGN: continue
    if _reads_any(u, memo, bufs, written) and not drop_unheld_grad(t): todo.append(t)
  # each into a buffer of its own: a graph equal to one realized before is the same node, and would otherwise resolve
  # to that result's buffer, the very one about to be written (a = x * 2; b = x * 2; a.realize(); a[0] = 5)
  for t in todo: t.uop = _unique_contiguous(t.uop)
  return todo

def _run_afters(u: UOp, defer: list[ScheduleItem] | None = None) -> UOp:
  """u with each AFTER node (UOp.after) replaced by the value it waits for, once its writes (UOp.store: ASSIGNs) have
  run, inner ones and each node's writes in order first. attograd writes in place when a write is made; a lazy write
  of this API is made when a realize reaches it. Other lazy tensors reading a written buffer keep their values, as
  for assign; the graph being realized reads the buffer after the write. defer: a hand-written kernel's items go there
  instead of running (linear_with_vars)."""
  subs: dict[UOp, UOp] = {}
  topo = u.toposort()
  # a hand-written kernel's body (a CALL's src[0]) orders its own statements with AFTERs: not lazy writes
  body: set[UOp] = set().union(*[c.src[0].toposort() for c in topo if c.op is Ops.CALL])
  for n in topo:
    if n.op is not Ops.AFTER or n in body: continue
    now = n.substitute(subs) if subs else n
    for d in now.src[1:]:
      if d.op is Ops.NOOP: continue  # a store of Invalid: nothing to write
      if d.op is Ops.ASSIGN:
        if (base := d.src[0].base).op is not Ops.BUFFER:
          raise RuntimeError(f"store: the target (shape {d.src[0].shape}) must be a view of a realized buffer, "
                             f"not of a lazy {base.op.name.lower()}; realize() it first")
        _keep_values_of_readers({base}, set(topo) | {d})
        _write(d, False, False)
      elif d.op is Ops.CALL:  # a hand-written kernel (Tensor.custom_kernel): the value is where it ran
        subs[n] = subs[now] = _run_call(d, defer)[d.src[1:].index(now.src[0])]
        break
      elif not _is_realized(d): Tensor._realize_all([Tensor(d)])
    else: subs[n] = subs[now] = now.src[0]  # (the outer nodes are rebuilt over the replaced inner ones: `now` is met)
  return u.substitute(subs)

# each hand-written kernel that ran -> the buffer views it ran on, one per argument (by its CallInfo, which rewriting
# the CALL's sources keeps): it runs once however many of its outputs are realized, and whenever
_calls_ran: weakref.WeakKeyDictionary[Any, tuple[UOp, ...]] = weakref.WeakKeyDictionary()

def _without_markers(u: UOp) -> UOp:
  """u's movement ops over the value under its autograd markers (which hold the same values)."""
  chain: list[UOp] = []
  while u.op in GroupOp.Movement or u.op in GroupOp.Marker:
    if u.op in GroupOp.Movement: chain.append(u)
    u = u.src[0]
  for m in reversed(chain): u = UOp(m.op, u.dtype, (u,), m.arg)
  return u

def _uniform_const(u: UOp) -> bool:
  """A constant on a device seen through views that keep every element the constant (not a pad)."""
  while u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP): u = u.src[0]
  return u.op is Ops.CONST and bool(u.src) and u.src[0].op is Ops.DEVICE

def _run_call(call: UOp, defer: list[ScheduleItem] | None = None) -> tuple[UOp, ...]:
  """Run the kernel of a CALL (its body src[0], over the arguments src[1:]) once, now: each argument computed into a
  whole buffer of its own first unless it is one, then the kernel as one ScheduleItem over those buffers (argument i
  is the body's placeholder slot i), or into `defer` (linear_with_vars). It writes in place, as in tinygrad: a lazy
  tensor that reads a buffer the kernel writes and is realized after it sees the new values."""
  if (done := _calls_ran.get(call.arg)) is not None: return done
  body, args = call.src[0], call.src[1:]
  if args and args[0].device.__class__ is tuple:  # over several devices: the body runs on each device's part
    layouts = [m for a in args if (m := a._layout()) is not None]
    if len(layouts) != len(args): raise RuntimeError("custom_kernel: an argument over several devices has no layout")
    per_dev = [_run_body(body, tuple(m.src[k] for m in layouts), defer) for k in range(len(layouts[0].src))]
    out = tuple(UOp(Ops.MULTI, a.dtype, tuple(o[i] for o in per_dev), m.arg)
                for i, (a, m) in enumerate(zip(args, layouts)))
  else: out = _run_body(body, args, defer)
  _calls_ran[call.arg] = out
  return out

def _run_body(body: UOp, args: tuple[UOp, ...], defer: list[ScheduleItem] | None) -> tuple[UOp, ...]:
  """A kernel body run over the one-device values `args` (see _run_call); the views of the buffers it ran on."""
  # a constant argument the kernel only reads (Tensor.ones(...), realized or not, is a constant) is folded into the
  # body: no buffer, no kernel to fill one
  written = written_slots(body) if body.op is Ops.SINK else set(range(len(args)))  # (a PROGRAM's source is opaque)
  consts = {i: a.base.arg for i, a in enumerate(args) if _uniform_const(a) and
            not any(j in written for j, b in enumerate(args) if b is a)}
  if consts: body, kept = fold_constant_args(body, consts)
  else: kept = list(range(len(args)))
  homes: dict[UOp, UOp] = {}
  for i, a in enumerate(args):
    if a in homes: continue
    if i in consts: homes[a] = a
    else:
      v = _without_markers(a)  # (another kernel's output carries its gradient marker: the value is the buffer's)
      t = Tensor(v) if _prefix_view_of_buffer(v) else Tensor(a).contiguous()
      Tensor._realize_all([t], defer=defer)
      homes[a] = t.uop
  out = tuple(homes[a] for a in args)
  pending.flush_for([out[s] for s in kept], defer)  # lazy writes into these buffers (Tensor.assign) run first
  if len({out[s].device for s in kept}) > 1:
    raise RuntimeError(f"custom_kernel: its tensors are on several devices ({sorted({h.device for h in out})}); a "
                       "kernel runs on one")
  if kept:  # (a body that touches no buffer has nothing to do)
    # bound Variables (a loop over 0..n-1 of a bound n) are kernel arguments: the body keeps the Variable, the item
    # its value, so one program serves every value
    binds = {b: b.src[0] for b in body.toposort() if b.op is Ops.BIND}
    if binds: body = body.substitute(binds)
    si = ScheduleItem(body, tuple(buffers[out[s].base] for s in kept),
                      tuple((v, b.src[1].arg) for b, v in binds.items()))
    if defer is not None: defer.append(si)
    else: run_schedule([si])
  return out

def _reads_elsewhere(value: UOp, base: UOp, shape: tuple[sint, ...]) -> bool:
  """Whether a value written into the whole BUFFER `base` (seen with `shape`) may read base at another element than
  the one the kernel writes at that position (a flip, a shift, a permute of something computed from base). Reading
  each element where it is written, or nothing there, is safe: `a + a[:, :2].pad(...)`. A reduce reads base in a
  kernel of its own first unless it fuses through reshapes, so what is above a reduce doesn't count."""
  topo = value.toposort()
  below: set[UOp] = {base}  # the nodes computed from base element by element
  for n in topo:
    if n.op is not Ops.REDUCE_AXIS and any(s in below for s in n.src): below.add(n)
  for n in topo:
    if n.op in GroupOp.Movement:
      if n.src[0] in below and n.base is not base: return True  # it moves a value computed from base
      continue
    if any(_moves_elsewhere(s, base, shape) for s in n.src): return True
  return _moves_elsewhere(value, base, shape)

def _moves_elsewhere(s: UOp, base: UOp, shape: tuple[sint, ...]) -> bool:
  """For a chain of movement ops `s` read whole by a node: whether it reads `base` at another element (see above)."""
  if s.op not in GroupOp.Movement or s.base is not base: return False
  if s.shape != shape or is_symbolic(shape): return True
  chain = []
  while s.op in GroupOp.Movement:
    chain.append(s)
    s = s.src[0]
  st = ShapeTracker.from_shape(base.shape)
  for m in reversed(chain): st = st.apply(m.op, m.arg)
  st = st.simplify()
  if len(st.views) != 1: return True
  v = st.views[0]
  return v.offset != 0 or any(d != 1 and a != b for d, a, b in zip(shape, v.strides, strides_for_shape(shape)))

def _reads_besides(u: UOp, base: UOp, view: UOp) -> bool:
  """Whether u reads the BUFFER `base` other than through `view` (and views of the value must not: see assign)."""
  seen: set[UOp] = set()
  stack = [u]
  while stack:
    n = stack.pop()
    if n is view or n in seen: continue
    if n is base: return True
    seen.add(n)
    stack.extend(n.src)
  return False

_index_cache: dict[tuple[int, str], Tensor] = {}
def _symbolic_arange(start: sint, stop: sint, step: sint, kw: dict[str, Any]) -> Tensor:
  """arange with bounds or step that are int expressions of bound Variables: a symbolic length ceil((stop - start) /
  step), as a view of the index buffer for the largest length, and values start + step * i computed in the kernel."""
  for x in (start, stop, step):
    if isinstance(x, UOp): _size_arg(x, "arange")
    elif not isinstance(x, int): raise TypeError(f"arange: symbolic bounds need int start, stop and step, got {x!r}")
  if step.__class__ is int and step == 0: raise ValueError("arange: step must not be zero")
  if isinstance(step, UOp) and not (unbind_sint(step).simplify().vmin > 0):
    raise ValueError(f"arange: a symbolic step must be positive for every value of its Variables, got {step.render()}")
  sign = 1 if isinstance(step, UOp) or step > 0 else -1
  span = ssimp((stop - start) * sign + (step * sign - 1))  # type: ignore[operator]
  count = ssimp(span // (step * sign)) if isinstance(span, UOp) or isinstance(step, UOp) else span // (step * sign)
  n = smax(count, 0)
  dtype = to_dtype(kw.pop("dtype")) if "dtype" in kw else dtypes.default_int
  device = Device.canonicalize(kw.pop("device", None))
  top = sym_max(n)
  idx = _index_tensor(top, device)
  if n.__class__ is not int or n != top: idx = idx.shrink(((0, n),))
  out = idx.cast(dtype)
  if not (step.__class__ is int and step == 1): out = out * step
  if not (start.__class__ is int and start == 0): out = out + start
  return Tensor(out.uop, device=device, **kw)

def _counter_uop(count: int, device: str) -> UOp:
  """A random counter's value as a lazy (2,) uint32 constant: [low word, high word] (built from UOps directly: a draw
  makes one)."""
  def word(v: int, pad: tuple[int, int]) -> UOp:
    return UOp(Ops.PAD, dtypes.uint32, (build.reshape(build.const(v, dtypes.uint32, device), (1,)),), (pad,))
  return build.add(word(count & rng.MASK32, (0, 1)), word(count >> 32, (1, 0)))

def _index_tensor(n: int, device: str) -> Tensor:
  """0..n-1 as int32 (int64 past 2**31 - 1). Small ones are stored once per device; large ones combine two small ones
  (i*B + j)."""
  if n <= 4096:
    key = (n, device)
    if (t := _index_cache.get(key)) is None:
      t = _index_cache[key] = Tensor(_iota_buffer(n, device))
    return t
  b = math.isqrt(n - 1) + 1
  a = -(-n // b)
  outer = _index_tensor(a, device) if n <= dtypes.max(dtypes.int32) + 1 else _index_tensor(a, device).cast(dtypes.int64)
  grid = outer.reshape(a, 1) * b + _index_tensor(b, device).reshape(1, b)
  return grid.reshape(a * b).shrink(((0, n),))


for _name in _CONCRETE_ONLY: setattr(Tensor, _name, _concrete_only(getattr(Tensor, _name), _name))
