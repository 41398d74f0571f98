"""The one data structure: the hash-consed, immutable UOp; Ops; UPat/PatternMatcher; the iterative graph_rewrite."""
from __future__ import annotations
import builtins, dataclasses, functools, hashlib, importlib, itertools, marshal, math, operator, sys, time, types
import weakref
from _weakref import _remove_dead_weakref  # type: ignore[attr-defined]  # CPython's, not in the stubs
from dataclasses import dataclass
from enum import IntEnum, auto
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence
from attograd.dtype import AddrSpace, ConstType, DType, Invalid, InvalidType, dtypes, to_dtype, truncate_to
from attograd.helpers import ContextVar, prod
import attograd.uop.state as state
from attograd.uop.state import buffers  # noqa: F401  (tinygrad's tests import the table from here)

class Ops(IntEnum):  # an IntEnum hashes in C: ops are dictionary keys on every hot path
  # graph structure and memory
  SINK = auto(); NOOP = auto(); DEVICE = auto(); BUFFER = auto(); CONST = auto(); VIEW = auto()  # noqa: E702
  CONTIGUOUS = auto(); CONTIGUOUS_BACKWARD = auto(); DETACH = auto(); COPY = auto(); ASSIGN = auto()  # noqa: E702
  # a value (src[0]) with a gradient rule of its own: arg[0] names it in gradient.py, src[1:] are what it reads
  CUSTOM_GRAD = auto()
  # a captured TinyJit's program as tinygrad shows it (CapturedJit.linear): a LINEAR of one CALL per kernel or copy;
  # CUSTOM_FUNCTION is tinygrad's batched-graph call, which attograd's jit never makes (named so its checks can run)
  LINEAR = auto(); CALL = auto(); CUSTOM_FUNCTION = auto()  # noqa: E702
  # a built kernel as tinygrad shows it (codegen.to_program): src (its AST, a LINEAR of its linear program), arg its
  # ProgramSpec. Nothing runs one: it is for reading
  PROGRAM = auto()
  DEFINE_VAR = auto(); BIND = auto()  # noqa: E702
  # movement (tensor level only; lowered into views)
  RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()  # noqa: E702
  # reduce
  REDUCE_AXIS = auto(); REDUCE = auto()  # noqa: E702
  # unary ALU
  EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIP = auto(); NEG = auto(); TRUNC = auto()  # noqa: E702
  CAST = auto(); BITCAST = auto()  # noqa: E702
  # binary ALU
  ADD = auto(); SUB = auto(); MUL = auto(); FDIV = auto(); IDIV = auto(); MOD = auto(); MAX = auto()  # noqa: E702
  CMPLT = auto(); CMPNE = auto(); CMPEQ = auto(); AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()  # noqa: E702
  POW = auto()  # noqa: E702
  # ternary ALU. MULACC is a*b+c with one rounding (a fused multiply-add): made only by the code generator, for the
  # languages that have one (codegen/fma.py), so that every kernel computes a given expression to the same bits
  WHERE = auto(); MULACC = auto()  # noqa: E702
  # kernel level (after lowering)
  DEFINE_GLOBAL = auto(); LOAD = auto(); STORE = auto(); RANGE = auto(); ENDRANGE = auto()  # noqa: E702
  DEFINE_ACC = auto(); ACC_ASSIGN = auto(); VECTORIZE = auto(); GEP = auto(); SPECIAL = auto()  # noqa: E702
  DEFINE_LOCAL = auto(); BARRIER = auto()  # noqa: E702  GPU: work-group shared memory, and a work-group barrier
  # kernel AST: a read of a buffer that holds 0..n-1 (Tensor.arange's), through the view in src[0], as the index it
  # would read at: no memory traffic, and index math the rewrite rules can see (a one-hot gather folds to one load)
  IOTA = auto()
  # GPU: one warp's matrix multiply-accumulate on tensor cores (arg: the shape and dtypes, see codegen/lowerer.py), and
  # a lane's value read from the lane whose index differs by the xor mask in arg (__shfl_xor_sync)
  WMMA = auto(); SHUFFLE = auto()  # noqa: E702
  # one tensor over several devices: src[i] is the shard on device i, split along the axis in arg (None: whole copies)
  MULTI = auto()
  # src[0]'s value once the writes in src[1:] (ASSIGNs, UOp.store) have run: tinygrad's lazy-write API, resolved by
  # Tensor.realize (tensor/core.py), which runs the writes and then reads src[0]
  AFTER = auto()
  # kernel-building ops (tinygrad names): a kernel body written by hand (UOp.placeholder/param/range, see "kernel
  # building" below; codegen/custom.py compiles one). PARAM: a buffer argument of the kernel (arg: ParamArg); INDEX:
  # src[0] (a view of a PARAM) at the indices src[1:], a value where read and the target of a STORE; END: src[0]'s
  # statements, then the loops of the RANGEs in src[1:] close; GROUP: its sources' statements, in order
  PARAM = auto(); INDEX = auto(); END = auto(); GROUP = auto()  # noqa: E702
  # a kernel given as source text (a PROGRAM of (SINK of its buffer placeholders, LINEAR, SOURCE, BINARY)): the text
  # and the binary it compiled to, each in arg
  SOURCE = auto(); BINARY = auto()  # noqa: E702
  # tinygrad's names of attograd's ops (aliases: the same members): C's truncating division and remainder, 1/x, and a
  # vector of lanes
  CDIV = IDIV; CMOD = MOD; RECIPROCAL = RECIP; STACK = VECTORIZE  # noqa: E702
  def __repr__(self) -> str: return f"Ops.{self.name}"
  def __str__(self) -> str: return f"Ops.{self.name}"

class GroupOp:
  Unary = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.NEG, Ops.TRUNC}
  Binary = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND,
            Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.POW}
  Ternary = {Ops.WHERE, Ops.MULACC}
  ALU = Unary | Binary | Ternary
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
  Movement = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}
  Comparison = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}
  # autograd markers: the value is src[0]; the scheduler sees straight through them
  Marker = {Ops.DETACH, Ops.CONTIGUOUS_BACKWARD, Ops.CUSTOM_GRAD}
  Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR}
  All = set(Ops)
  Associative = {Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX}

# ***** kernel building (tinygrad's API): the records a hand-written kernel body is made of *****

class AxisType(IntEnum):
  """What a kernel loop is for (tinygrad's names). A hand-written body's loops (UOp.range) all run as plain loops in
  attograd (codegen/custom.py); the type documents the loop and is kept in the RANGE's arg."""
  DEVICE = auto(); GLOBAL = auto(); WARP = auto(); LOCAL = auto(); WEAK = auto(); GROUP_REDUCE = auto()  # noqa: E702
  REDUCE = auto(); UPCAST = auto(); UNROLL = auto(); THREAD = auto(); PLACEHOLDER = auto(); LOOP = auto()  # noqa: E702
  def __repr__(self) -> str: return f"AxisType.{self.name}"
  __str__ = __repr__

@dataclass(frozen=True)
class ParamArg:
  """A PARAM's arg (tinygrad's record, plus the shape attograd keeps here): argument `slot` of the kernel, holding
  `dtype` elements; where it lives (addrspace: GLOBAL a buffer argument, REG/LOCAL a per-kernel scratch array)."""
  slot: int
  dtype: DType
  vmin_vmax: tuple[ConstType, ConstType] | None = None
  multiple_of: int | None = None
  name: str | None = None
  addrspace: AddrSpace = AddrSpace.GLOBAL
  axis: int | None = None
  device: str | tuple[str, ...] | None = None
  volatile: bool = False
  shape: tuple[sint, ...] | None = None

@dataclass(frozen=True)
class ProgramInfo:
  """A hand-written PROGRAM's arg (tinygrad's record): its function name, launch sizes and the argument slots it
  takes (globals), in order."""
  name: str = "test"
  global_size: tuple[int, ...] = (1, 1, 1)
  local_size: tuple[int, ...] | None = None
  vars: tuple[UOp, ...] = ()
  globals: tuple[int, ...] = ()
  outs: tuple[int, ...] = ()
  ins: tuple[int, ...] = ()
  @property
  def function_name(self) -> str: return "".join(c if c.isalnum() or c == "_" else "_" for c in self.name)

@dataclass(frozen=True, eq=False)
class CallInfo:
  """A CALL's arg (UOp.call, Tensor.custom_kernel): the gradient function, if any, and a name. Compared by identity,
  so each call of custom_kernel is a node of its own (it runs once, even when it writes the same buffers again)."""
  grad_fxn: Callable[..., Any] | None = None
  name: str | None = None

def broadcast_axes(src_shape: tuple[sint, ...], out_shape: tuple[sint, ...]) -> tuple[int, ...]:
  """The axes of `out_shape` that broadcasting `src_shape` to it adds (leading) or expands (a 1 made larger)."""
  if (extra := len(out_shape) - len(src_shape)) < 0:  # (RuntimeError: tinygrad's)
    raise RuntimeError(f"broadcast_axes: shape {src_shape} has more dims than {out_shape}")
  return tuple(range(extra)) + tuple(extra + i for i, s in enumerate(src_shape)
                                     if s.__class__ is int and s == 1 and not (out_shape[extra + i].__class__ is int
                                                                                and out_shape[extra + i] == 1))

def dtype_from_uop(op: Ops, src: tuple[UOp, ...], arg: Any) -> DType | None:
  """The dtype a node of `op` over `src` with `arg` has by the IR's rules (tinygrad's helper); None where the op
  doesn't decide it (NOOP). Raises TypeError for a CONST whose value isn't a scalar."""
  from attograd.dtype import InvalidType, least_upper_dtype, least_upper_float
  if op in (Ops.STORE, Ops.SINK, Ops.END, Ops.GROUP, Ops.LINEAR, Ops.PROGRAM, Ops.BARRIER, Ops.ENDRANGE,
            Ops.ACC_ASSIGN): return dtypes.void
  if op is Ops.CALL: return dtypes.void if src[0].dtype is dtypes.void else None
  if op is Ops.NOOP: return None
  if op is Ops.CONST:
    if arg.__class__ is bool or isinstance(arg, InvalidType): return dtypes.bool
    if isinstance(arg, int): return dtypes.weakint
    if isinstance(arg, float): return dtypes.weakfloat
    raise TypeError(f"dtype_from_uop: no dtype for a CONST of {arg!r}")
  if op in GroupOp.Comparison: return dtypes.bool
  if op in (Ops.CAST, Ops.BITCAST): return arg if isinstance(arg, DType) else None
  if op in (Ops.PARAM, Ops.BUFFER): return arg.dtype if isinstance(arg, ParamArg) else None
  if op in (Ops.INDEX, Ops.LOAD, Ops.AFTER, Ops.RANGE, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.COPY, Ops.DETACH,
            Ops.SPECIAL, Ops.REDUCE, Ops.REDUCE_AXIS) or op in GroupOp.Movement: return src[0].dtype
  if op in (Ops.SIN, Ops.LOG2, Ops.EXP2, Ops.SQRT, Ops.RECIP): return least_upper_float(src[0].dtype)
  if op is Ops.WMMA: return src[2].dtype
  if op is Ops.WHERE:
    if src[0].dtype is not dtypes.bool:
      raise TypeError(f"dtype_from_uop: where's condition must be bool, not {src[0].dtype}")
    return src[1].dtype if src[1].dtype is src[2].dtype else least_upper_dtype(src[1].dtype, src[2].dtype)
  if op in (Ops.SHL, Ops.SHR): return src[0].dtype
  if op is Ops.VECTORIZE:
    if not src: return dtypes.void
    d = src[0].dtype if all(x.dtype is src[0].dtype for x in src) else least_upper_dtype(*(x.dtype for x in src))
    return d.vec(len(src))
  if op in GroupOp.Unary: return src[0].dtype
  if op in GroupOp.ALU: return src[0].dtype if all(x.dtype is src[0].dtype for x in src) else \
    least_upper_dtype(*(x.dtype for x in src))
  raise TypeError(f"dtype_from_uop: no dtype rule for {op}")

class cached:
  """A lock-free cached property (functools.cached_property takes a lock on every first access in Python 3.11,
  and UOps are created by the thousand on hot paths). The value lands in the instance dict, which wins after."""
  def __init__(self, fn: Callable[[Any], Any]):
    self.fn, self.name = fn, fn.__name__
  def __get__(self, obj: Any, cls: Any = None) -> Any:
    if obj is None: return self
    val = obj.__dict__[self.name] = self.fn(obj)
    return val

sint = int  # a size: an int, or (with symbolic shapes) a UOp; kept as an alias so signatures read well

class SymbolicSizeError(ValueError, AssertionError):
  """An op that needs a concrete size was given a symbolic one. A ValueError like attograd's other argument errors;
  also an AssertionError because tinygrad asserts on the same misuse (chunk along a symbolic dim), and code ported
  from it catches that."""

class UndecidableError(TypeError, ValueError):
  """A symbolic expression used where one value is needed (a bool of a comparison, an int) that takes several, as
  its Variables' bounds allow. A TypeError, as for any value that isn't a number; also the ValueError tinygrad
  raises for it."""

class BindMismatchError(ValueError, RuntimeError):
  """One graph binds a Variable to two values. A ValueError like attograd's other argument errors; also the
  RuntimeError tinygrad raises for it."""

# ***** kernel info (h32o): what a kernel AST's SINK carries besides its stores *****
@dataclasses.dataclass(frozen=True)
class KernelInfo:
  """A kernel AST's SINK arg: its name, and the optimization actions asked of it (`opts_to_apply`: a tuple of
  attograd.codegen.opt.Opt, applied by the code generator in place of its heuristic or BEAM; None: let it choose).
  The scheduler gives every kernel one; tinygrad's field names, so `dataclasses.replace(ast.arg, opts_to_apply=...)`
  asks for given actions on a scheduled kernel. `applied_opts`, `axis_types`, `estimates` and `beam` are tinygrad's
  bookkeeping fields, kept (and compared) but unused: attograd records a built kernel's actions in its ProgramSpec.
  A hand-written kernel (Tensor.custom_kernel) names itself with one; its loops run as written, so it uses no opts."""
  name: str = "test"
  axis_types: tuple[AxisType, ...] = ()
  dont_use_locals: bool = False
  applied_opts: tuple = ()
  opts_to_apply: tuple | None = None
  estimates: Any = None
  beam: int = 0
  @property
  def function_name(self) -> str: return "".join(c if c.isalnum() or c == "_" else "_" for c in self.name)
# ***** end kernel info (h32o) *****

def _cache_key(op: Ops, dtype: DType, src: tuple, arg: Any) -> tuple:
  # floats need care: -0.0 == 0.0 and nan != nan, but they are different constants
  if arg.__class__ is float: arg = ("f", arg if arg == arg else "nan", math.copysign(1.0, arg))
  return (op, dtype, src, arg)

class _KeyedRef(weakref.ref):
  """A weak reference that knows its cache key (set after construction: a Python-level __init__, as in
  weakref.KeyedRef, costs more than the rest of making a node)."""
  __slots__ = ("key",)
  key: tuple

# the hash-consing table (UOpMetaClass.ucache), also bound here: at interpreter exit module globals are cleared while
# nodes are still being freed, and the callback must not look the class up then
_ucache: dict[tuple, _KeyedRef] = {}

def _node_gone(r: _KeyedRef, _remove: Any = _remove_dead_weakref, _cache: dict = _ucache) -> None:
  _remove(_cache, r.key)  # removes the entry only if it still is this dead reference

# set once any AFTER node is built: until then Tensor.realize needn't look for them
afters_built = [False]
# the layout of a graph over several devices lives in engine/multi.py (a layer above): it sets this to its function
shard_layout_of: list[Callable[[UOp], UOp | None] | None] = [None]

# each scalar int dtype's (min, max): UOp.const's fast path
_INT_RANGE: dict[DType, tuple[int, int]] = {d: (int(dtypes.min(d)), int(dtypes.max(d))) for d in dtypes.ints}

class UOpMetaClass(type):
  # the hash-consing table: key -> weak reference to the one live node with that key. A plain dict of weak references
  # rather than a WeakValueDictionary: making and dropping nodes is the hot path of building graphs, and the
  # WeakValueDictionary's Python-level bookkeeping took more than half of it
  ucache: dict[tuple, _KeyedRef] = _ucache
  def __call__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None,
               tag: Any = None) -> UOp:
    key = (op, dtype, src, arg) if arg.__class__ is not float else _cache_key(op, dtype, src, arg)
    if tag is not None: key += (tag,)  # a tagged node's key is one longer: it never meets an untagged one
    if (r := UOpMetaClass.ucache.get(key)) is not None and (ret := r()) is not None: return ret
    ret = _new_object(cls)  # type: ignore[arg-type]  # no __init__: the fields are set through their slots
    _set_op(ret, op)
    _set_dtype(ret, dtype)
    _set_src(ret, src)
    _set_arg(ret, arg)
    if tag is not None: ret.__dict__["tag"] = tag
    r = UOpMetaClass.ucache[key] = _KeyedRef(ret, _node_gone)
    r.key = key
    return ret
  @staticmethod
  def live() -> list[UOp]:
    """Every node alive now."""
    return [u for r in list(UOpMetaClass.ucache.values()) if (u := r()) is not None]

class UOp(metaclass=UOpMetaClass):
  """An immutable node (op, dtype, src, arg). Building the same node twice returns the same object."""
  __slots__ = ("op", "dtype", "src", "arg", "__weakref__", "__dict__")
  if TYPE_CHECKING:  # the fields live in the slots; the metaclass builds nodes: both said here for the type checker
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    def __init__(self, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None,
                 tag: Any = None) -> None: ...
  # a mark a rewrite pass may put on a node (tinygrad's): part of the node's identity, kept when graph_rewrite rebuilds
  # the node over new sources. Most nodes have none: the class's None, so untagged nodes store nothing
  tag: Any = None
  def __setattr__(self, k: str, v: Any) -> None:
    if k in ("op", "dtype", "src", "arg", "tag"): raise AttributeError("UOp is immutable")
    object.__setattr__(self, k, v)
  def __reduce__(self) -> Any: return (UOp, (self.op, self.dtype, self.src, self.arg, self.tag))
  def replace(self, **kw: Any) -> UOp:
    return UOp(kw.get("op", self.op), kw.get("dtype", self.dtype), kw.get("src", self.src), kw.get("arg", self.arg),
               kw.get("tag", self.tag))
  @property
  def key(self) -> bytes:
    """A hash of the graph's content (op, dtype, arg and tag of each node, sources in order; tinygrad's name), the
    same in every process where the args print the same: for caches shared across processes. Computed once per
    node, sources first."""
    if (k := self.__dict__.get("key")) is not None: return k
    for n in self.toposort():
      if "key" not in n.__dict__:
        head = repr((n.op, n.dtype, n.arg, n.tag)).encode()
        n.__dict__["key"] = hashlib.sha256(head + b"".join([s.__dict__["key"] for s in n.src])).digest()
    return self.__dict__["key"]
  def rtag(self, tag: Any = True) -> UOp:
    """This node with its tag replaced (tinygrad's name): `tag=None` takes it off."""
    return self.replace(tag=tag)
  def __repr__(self) -> str: return pretty_print(self)

  # ***** graph walking (iterative: graphs may be 100k nodes deep) *****
  def toposort(self) -> dict[UOp, None]:
    """Every node reachable from self, each after its sources."""
    out: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      n, visited = stack.pop()
      if n in out: continue
      if visited: out[n] = None
      else:
        stack.append((n, True))
        for s in reversed(n.src):
          if s not in out: stack.append((s, False))
    return out
  def sparents(self) -> dict[UOp, None]: return self.toposort()
  def substitute(self, subs: dict[UOp, UOp], name: str | None = None, extra_pm: PatternMatcher | None = None,
                 walk: bool = False, enter_calls: bool = False) -> UOp:
    """self with each node that is a key of `subs` replaced by its value, bottom-up: a node whose sources were
    replaced and now equals a key is replaced too, and a replacement is itself substituted (graph_rewrite with a
    lookup rule does the same; VIZ traces that one). A direct walk: lowering substitutes every register tile
    position into a whole kernel, and the rule table's per-node matching was most of that time.

    With `extra_pm` (rules tried before the lookup) or `walk`, it is tinygrad's substitute: a graph_rewrite that
    tries each node before its sources (bottom_up), so the sources of a replaced node are never visited."""
    if extra_pm is not None or walk or enter_calls:
      pm = _substitute if extra_pm is None else extra_pm + _substitute
      return graph_rewrite(self, pm, subs, bottom_up=True, name=name, walk=walk, enter_calls=enter_calls)
    if rewrite_tracer is not None or name is not None: return graph_rewrite(self, _substitute_pm, subs, name=name)
    return _substitute_walk(self, subs, {})

  # ***** tensor-level properties *****
  @cached
  def shape(self) -> tuple[sint, ...]: return _shape_of(self)
  @property
  def size(self) -> int: return prod(self.shape)
  @property
  def ndim(self) -> int: return len(self.shape)
  @cached
  def device(self) -> str:
    if self.op is Ops.DEVICE: return self.arg
    if self.op is Ops.COPY: return self.src[1].arg
    if (src := self.src) and any("device" not in s.__dict__ for s in src): _fill_devices(src)
    if self.op is Ops.MULTI: return tuple(s.device for s in src)  # type: ignore[return-value]  # sharded
    for s in src:
      if (d := s.device) is not None: return d
    return None  # type: ignore[return-value]
  @property
  def base(self) -> UOp:
    """The node below any movement ops."""
    x = self
    while x.op in GroupOp.Movement: x = x.src[0]
    return x
  @property
  def axis(self) -> int | None:
    """The axis a value over several devices is split along, as laying its graph out over the devices places it
    (tinygrad's name): a MULTI's own, an op over MULTIs the axis its result gets; None for whole copies and for
    one-device values."""
    return None if (m := self._layout()) is None else m.arg
  def unshard(self, axis: int) -> UOp:
    """tinygrad's: a value held whole on each of several devices, seen as the shards of one value split along `axis`
    (its size there is the sum of theirs): how a sharded output is made from one empty per device."""
    if (m := self._layout()) is None or m.arg is not None:
      raise ValueError(f"unshard: needs a value held whole on each of several devices, not one on {self.device}")
    if not 0 <= axis < len(m.src[0].shape): raise ValueError(f"unshard: axis {axis} is out of range")
    return UOp(Ops.MULTI, self.dtype, m.src, axis)
  @property
  def shard_shape(self) -> tuple[sint, ...]:
    """The shape of one device's part (tinygrad's name): the shape, with the split axis's size divided among the
    devices for a value split over several."""
    if (m := self._layout()) is None or m.arg is None: return self.shape
    return m.src[0].shape
  @property
  def bounds(self) -> list[tuple[int, int]]:
    """(start, end) of each device's shard along the split axis (tinygrad's name)."""
    if (m := self._layout()) is None or m.arg is None:
      raise RuntimeError(f"bounds: a value of shape {self.shape} on {self.device} isn't split over devices along an "
                         "axis, so it has no shard bounds")
    out, at = [], 0
    for s in m.src:
      out.append((at, at + s.shape[m.arg]))
      at += s.shape[m.arg]
    return out
  def _layout(self) -> UOp | None:
    """This value laid out over its devices: a MULTI of one graph per device (engine/multi.py, which does the
    layout, sets shard_layout_of); None on one device."""
    if self.op is Ops.MULTI: return self
    if self.device.__class__ is not tuple or (f := shard_layout_of[0]) is None: return None
    return f(self)
  @property
  def buf_uop(self) -> UOp:
    """The BUFFER node this view reads (tinygrad's name); a node that holds no buffer raises."""
    if (b := self.base).op is not Ops.BUFFER:
      raise RuntimeError(f"buf_uop: {self.op} holds no buffer; realize() it first")
    return b
  @property
  def buffer(self) -> Any:
    """tinygrad's: the device Buffer (allocated or not yet) of a BUFFER node, or of a reshape of one. A view that
    reorders or cuts the buffer raises RuntimeError; a node that holds no buffer (not realized) AssertionError."""
    x = self
    while x.op is Ops.RESHAPE: x = x.src[0]
    if x.op in GroupOp.Movement:
      raise RuntimeError(f"buffer: a {x.op} view is not its buffer's contiguous whole; use .base.buffer for the buffer")
    if x.op is not Ops.BUFFER or (b := state.get(x, state.BUFFER)) is None:
      raise AssertionError(f"buffer: must be BUFFER, got {x.op} (realize() it first)")
    return b
  def has_buffer_identity(self, after_ok: bool = False) -> bool:
    """Whether this node is a buffer itself (tinygrad's name): a BUFFER seen through reshapes, or a sharded value whose
    shards are; with `after_ok`, also such a buffer once lazy writes (AFTER) have run."""
    x = self
    while x.op is Ops.RESHAPE or (after_ok and x.op is Ops.AFTER): x = x.src[0]
    if x.op is Ops.MULTI: return all(s.has_buffer_identity(after_ok) for s in x.src)
    return x.op is Ops.BUFFER
  @property
  def realized(self) -> Any:
    """The allocated Buffer of a BUFFER node (the engine records it on the node), else None."""
    b = state.get(self, state.BUFFER) if self.op is Ops.BUFFER else None
    return b if b is not None and b.is_allocated() else None
  @property
  def is_realized(self) -> bool:
    """Whether this node's values sit in allocated memory (a view of an allocated BUFFER)."""
    return self.base.realized is not None

  # ***** constructors and ALU sugar (used by symbolic index math and the lowerer) *****
  @staticmethod
  def const(dtype: DType, val: ConstType = None) -> UOp:  # type: ignore[assignment]
    # UOp.const(8): tinygrad's newer spelling, the value alone (its dtype from the Python type; nodes are never weak);
    # UOp.const(8, dtypes.int) its order, the value first
    if not isinstance(dtype, DType):
      dtype, val = (val, dtype) if isinstance(val, DType) else (dtypes.from_py_stored(dtype), dtype)
    # the common case of index math, an int that its int dtype holds as is, without as_const's conversions: lowering
    # a conv tile makes tens of thousands of these
    if val.__class__ is int and (rng := _INT_RANGE.get(dtype)) is not None and rng[0] <= val <= rng[1]:  # type: ignore[operator]
      return UOp(Ops.CONST, dtype, arg=val)
    return UOp(Ops.CONST, dtype, arg=dtypes.as_const(val, dtype))
  def const_like(self, val: ConstType) -> UOp: return UOp.const(self.dtype, val)
  # ----- h32b: tinygrad's Invalid as a node (a store of a value computed from it is skipped: codegen/lowerer) -----
  @staticmethod
  def invalid(dtype: DType = dtypes.int32) -> UOp:
    """tinygrad's Invalid ("any value") as a constant of `dtype`."""
    return UOp(Ops.CONST, dtype, arg=Invalid)
  @property
  def is_invalid(self) -> bool: return self.op is Ops.CONST and self.arg is Invalid
  # ----- end h32b -----
  def alu(self, op: Ops, *src: UOp) -> UOp:
    out_dtype = dtypes.bool if op in GroupOp.Comparison else (src[-1] if op is Ops.WHERE else self).dtype
    return UOp(op, out_dtype, (self,) + src)
  def _binop(self, op: Ops, x: UOp | ConstType, reverse: bool) -> UOp:
    if hasattr(x, "uop"): return NotImplemented  # a Tensor: Variable * Tensor is the Tensor's op (its __rmul__)
    y = x if isinstance(x, UOp) else self.const_like(x)
    if y.dtype is not self.dtype and {y.dtype, self.dtype} == _INDEX_PAIR:  # an int32 Variable with an int64 one
      y, s = y.cast(dtypes.int64), self.cast(dtypes.int64)
      return y.alu(op, s) if reverse else s.alu(op, y)
    return y.alu(op, self) if reverse else self.alu(op, y)
  def __add__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.ADD, x, False)
  # c + x and c * x of a Python number c are built as x + c and x * c, the order the simplifier gives sums and
  # products (so 2*i + 3 is the very node a shape computed as i + i + 3 holds, and sizes compare by identity)
  def __radd__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.ADD, x, isinstance(x, UOp))
  def __sub__(self, x: UOp | ConstType) -> UOp: return self + (-x if not isinstance(x, UOp) else x * -1)
  def __rsub__(self, x: UOp | ConstType) -> UOp: return self * -1 + x
  def __mul__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.MUL, x, False)
  def __rmul__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.MUL, x, isinstance(x, UOp))
  def __floordiv__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.IDIV, x, False)
  def __mod__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.MOD, x, False)
  def __neg__(self) -> UOp: return self * -1 if dtypes.is_int(self.dtype) else self.alu(Ops.NEG)
  def __lt__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.CMPLT, x, False)
  def __ge__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.CMPLT, x, False).logical_not()
  def __gt__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.CMPLT, x, True)
  def __le__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.CMPLT, x, True).logical_not()
  def __and__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.AND, x, False)
  def __or__(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.OR, x, False)
  def ne(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.CMPNE, x, False)
  def eq(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.CMPEQ, x, False)
  def maximum(self, x: UOp | ConstType) -> UOp: return self._binop(Ops.MAX, x, False)
  def minimum(self, x: UOp | ConstType) -> UOp: return -((-self).maximum(-x if not isinstance(x, UOp) else -x))
  def logical_not(self) -> UOp: return self.ne(True)
  def where(self, x: UOp | ConstType, y: UOp | ConstType) -> UOp:
    if not isinstance(x, UOp):
      x = y.const_like(x) if isinstance(y, UOp) else UOp.const(dtypes.from_py_stored(x), x)
    if not isinstance(y, UOp): y = x.const_like(y)
    return UOp(Ops.WHERE, x.dtype, (self, x, y))
  def cast(self, dtype: DType | str) -> UOp:
    """This value as `dtype` (a DType or its name, as tinygrad's): itself when it has that dtype already."""
    d = dtype if dtype.__class__ is DType else to_dtype(dtype)
    return self if self.dtype == d else UOp(Ops.CAST, d, (self,))
  # ***** lazy writes (tinygrad's API) *****
  def store(self, value: UOp | ConstType | Any) -> UOp:
    """A write of `value` (a UOp of this shape and dtype, or a number for every element) into this view of a buffer (an
    ASSIGN; nothing runs until a realize needs it); Invalid writes nothing (a NOOP). In a kernel body, a store into an
    element (an INDEX: `C[i, j].store(x)`) is a STORE statement."""
    if self.op is Ops.INDEX:
      v = value if isinstance(value, UOp) else self.const_like(value)
      return UOp(Ops.STORE, dtypes.void, (self, v))
    if value is Invalid: return UOp(Ops.NOOP)  # storing "no value" (tinygrad's Invalid) writes nothing
    if not isinstance(value, UOp):  # a number: the constant in every element
      c = UOp(Ops.CONST, self.dtype, (UOp(Ops.DEVICE, arg=self.device),), dtypes.as_const(value, self.dtype))
      value = c if not self.shape else \
        UOp(Ops.EXPAND, self.dtype, (UOp(Ops.RESHAPE, self.dtype, (c,), (1,) * len(self.shape)),), self.shape)
    if self.shape != value.shape or self.dtype != value.dtype:
      raise ValueError(f"store: the value ({value.dtype}, shape {value.shape}) must match the target "
                       f"({self.dtype}, shape {self.shape})")
    return UOp(Ops.ASSIGN, self.dtype, (self, value))
  def after(self, *deps: UOp) -> UOp:
    """This value once `deps` (stores, or values after stores) have run: realizing it runs them first, in order."""
    if not deps: return self
    afters_built[0] = True
    return UOp(Ops.AFTER, self.dtype, (self,) + deps)

  # ***** kernel building (tinygrad's API): a kernel body written by hand. Placeholders stand for the kernel's buffers
  # (PARAM), RANGEs are its loops, `buf[i, j]` an element (INDEX) that is read where used as a value and written by
  # .store(); .end(*ranges) closes loops after the statements before it; .sink(arg=KernelInfo(name)) is the body.
  # Tensor.custom_kernel runs one over Tensors' buffers; codegen/custom.py compiles it *****
  @staticmethod
  def range(end: sint, axis_id: int, axis_type: AxisType = AxisType.LOOP, *_: Any, dtype: DType = dtypes.int32,
            src: tuple[UOp, ...] = ()) -> UOp:
    """A loop over 0..end-1 (an index value in the body); `axis_id` tells loops apart and orders ones opened
    together (outer first)."""
    if not dtypes.is_int(dtype): raise TypeError(f"range: a loop index is an int, not {dtype}")
    e = end.cast(dtype) if isinstance(end, UOp) else UOp.const(dtype, end)
    return UOp(Ops.RANGE, dtype, (e, *src), (axis_id, axis_type))
  @staticmethod
  def param(slot: int, dtype: DType, shape: tuple[sint, ...] | None = None, device: str | tuple[str, ...] | None = None,
            vmin_vmax: tuple[ConstType, ConstType] | None = None, multiple_of: int | None = None,
            name: str | None = None, addrspace: AddrSpace = AddrSpace.GLOBAL, axis: int | None = None,
            volatile: bool = False) -> UOp:
    """Argument `slot` of a kernel: a buffer of `shape` (flat or not) holding `dtype`, indexed as `p[i]`."""
    if dtype in (dtypes.weakint, dtypes.weakfloat):
      raise TypeError(f"param: a kernel argument needs a concrete dtype, not the weak {dtype}")
    if not isinstance(slot, int) or slot < (-1 if addrspace is AddrSpace.ALU else 0):  # (-1: a Variable's, unplaced)
      raise ValueError(f"param: slot must be an int >= 0, not {slot!r}")
    arg = ParamArg(slot, dtype.scalar() if dtype.__class__ is not DType else dtype, vmin_vmax, multiple_of, name,
                   addrspace, axis, device, volatile, None if shape is None else tuple(shape))
    return UOp(Ops.PARAM, arg.dtype, (), arg)
  @staticmethod
  def placeholder(shape: tuple[sint, ...], dtype: DType, slot: int, addrspace: AddrSpace = AddrSpace.GLOBAL,
                  device: str | None = None, volatile: bool = False) -> UOp:
    """A kernel's buffer `slot` seen with `shape` (a flat PARAM, reshaped): GLOBAL an argument the caller passes,
    REG or LOCAL an array the kernel keeps for itself (an accumulator)."""
    if addrspace is not AddrSpace.GLOBAL and device is not None:
      raise ValueError("placeholder: a REG or LOCAL placeholder belongs to the kernel; it has no device")
    p = UOp.param(slot, dtype, (prod(shape),), device, addrspace=addrspace, volatile=volatile)
    return p if len(shape) == 1 else UOp(Ops.RESHAPE, p.dtype, (p,), tuple(shape))
  def placeholder_like(self, slot: int, addrspace: AddrSpace = AddrSpace.GLOBAL) -> UOp:
    """A placeholder with this value's shape (one device's part of a value over several) and dtype."""
    shape = self.shard_shape if self.device.__class__ is tuple else self.shape  # over several devices: one's part
    if not all(d.__class__ is int for d in shape):
      raise ValueError(f"placeholder_like: needs a concrete shape, not {shape_str(shape)}")
    return UOp.placeholder(shape, self.dtype, slot, addrspace)
  def sink(*srcs: UOp | None, arg: Any = None) -> UOp:  # noqa: N805  (UOp.sink(a, b) and a.sink() alike)
    """The root of a graph over `srcs` (None left out); a kernel body's, with arg=KernelInfo(name=...)."""
    return UOp(Ops.SINK, dtypes.void, tuple(x for x in srcs if x is not None), arg)
  @staticmethod
  def group(*srcs: UOp | None) -> UOp:
    """Statements run in order, as one (a lone statement is itself)."""
    xs = tuple(x for x in srcs if x is not None)
    return xs[0] if len(xs) == 1 else UOp(Ops.GROUP, dtypes.void, xs)
  def index(self, *idx: UOp | int) -> UOp:
    """The element of this kernel buffer view at `idx` (leading dims): a value where read, a target for .store()."""
    us = tuple(UOp.const(dtypes.int32, i) if not isinstance(i, UOp) else i for i in idx)
    if self.op is Ops.INDEX: return UOp(Ops.INDEX, self.dtype, self.src + us)
    if len(us) > len(self.shape):
      raise IndexError(f"index: {len(us)} indices for a buffer view of shape {shape_str(self.shape)}")
    return UOp(Ops.INDEX, self.dtype, (self, *us))
  def load(self) -> UOp:
    """This element's value (a kernel body reads an element where it uses it; this says so explicitly)."""
    if self.op is not Ops.INDEX or self.shape: raise TypeError(f"load: reads one element (buf[i]), not a {self.op}")
    return UOp(Ops.LOAD, self.dtype, (self,))
  def reduce(self, *ranges: UOp, arg: Ops = Ops.ADD, dtype: DType | None = None) -> UOp:
    """In a kernel body: this value accumulated with `arg` (ADD, MUL or MAX) over the loops `ranges`, which run for
    it (a REDUCE; its value is the result, outside those loops)."""
    if arg not in (Ops.ADD, Ops.MUL, Ops.MAX): raise ValueError(f"reduce: accumulates with ADD, MUL or MAX, not {arg}")
    if not ranges or any(r.op is not Ops.RANGE for r in ranges): raise TypeError("reduce: over loops (RANGEs)")
    x = self if dtype is None or dtype == self.dtype else self.cast(dtype)
    return UOp(Ops.REDUCE, x.dtype, (x, *ranges), arg)
  def end(self, *ranges: UOp) -> UOp:
    """These statements, then the loops of `ranges` close."""
    if any(r.op is not Ops.RANGE for r in ranges): raise TypeError("end: closes loops; pass the RANGEs")
    return UOp(Ops.END, dtypes.void, (self, *ranges)) if ranges else self
  def set(self, val: UOp | ConstType, end: UOp | tuple[UOp, ...] | list[UOp] = ()) -> UOp:
    """Store `val` into this element, close the loops `end`, and return the buffer view as it is after that."""
    if self.op is not Ops.INDEX: raise TypeError(f"set: stores into an element (buf[i]), not a {self.op}")
    ends = (end,) if isinstance(end, UOp) else tuple(end)
    return self.src[0].after(self.store(val).end(*ends))  # type: ignore[arg-type]
  def call(self, *srcs: UOp, grad_fxn: Callable[..., Any] | None = None, name: str | None = None) -> UOp:
    """This kernel body run over `srcs` (argument i is placeholder slot i): a CALL, as in tinygrad; run it by
    `run_linear(UOp(Ops.LINEAR, src=(call,)))` over BUFFER nodes, or through Tensor.custom_kernel."""
    return UOp(Ops.CALL, dtypes.void, (self, *srcs), CallInfo(grad_fxn, name))

  __hash__ = object.__hash__
  __eq__ = object.__eq__  # hash-consed: identity is equality
  def __bool__(self) -> bool:
    """A comparison of symbolic sizes is True/False when the Variables' bounds decide it, else an error: a shape
    check must never pass by accident (a UOp would otherwise always be truthy)."""
    if self.dtype is not dtypes.bool: return True
    if self.op is Ops.CONST: return bool(self.arg)
    lo, hi = self.simplify().vmin_vmax
    if lo == hi: return bool(lo)
    raise UndecidableError(f"can't decide {self.render()} for every value of "
                           f"{', '.join(v.expr for v in self.variables())}: the answer depends on the Variable's value")
  def __index__(self) -> int:
    raise TypeError(f"a symbolic size {self.render()} was used where a concrete int is needed")

  # ***** symbolic bounds *****
  @cached
  def vmin_vmax(self) -> tuple[ConstType, ConstType]: return _bounds(self)
  @property
  def vmin(self) -> ConstType: return self.vmin_vmax[0]
  @property
  def vmax(self) -> ConstType: return self.vmin_vmax[1]

  # ***** symbolic variables *****
  @staticmethod
  def variable(name: str, min_val: ConstType, max_val: ConstType, dtype: DType | None = None,
               multiple_of: int = 1, param: bool = False) -> UOp:
    """A Variable of `dtype`: by default int32, or int64 where its bounds pass int32's (it is then typed and passed
    to kernels as int64 on every device). bind refuses a value its dtype can't hold. `multiple_of`: every value it
    takes is a multiple of this (an int Variable's; kept in its arg after the bounds). A float Variable (a float
    dtype, float bounds, infinite ones too) stands for a float in symbolic math, as for gradients of UOp expressions.
    param=True gives tinygrad's kernel-side form instead: a scalar kernel argument (a PARAM in the ALU address space)
    with those bounds."""
    if param:
      return UOp.param(-1, dtype or dtypes.int32, (), vmin_vmax=(min_val, max_val), name=name,
                       addrspace=AddrSpace.ALU)
    if dtype is not None and dtypes.is_float(dtype):
      if not all(isinstance(v, (int, float)) and v == v for v in (min_val, max_val)) or min_val > max_val:
        raise ValueError(f"Variable {name!r}: need bounds min <= max, got min={min_val!r} max={max_val!r}")
      return UOp(Ops.DEFINE_VAR, dtype, arg=(name, min_val, max_val))
    if not (isinstance(min_val, int) and isinstance(max_val, int)) or min_val > max_val:
      raise ValueError(f"Variable {name!r}: need integer bounds min <= max, got min={min_val!r} max={max_val!r} (a "
                       "float Variable needs a float dtype)")
    if not isinstance(multiple_of, int) or multiple_of < 1:
      raise ValueError(f"Variable {name!r}: multiple_of must be a positive int, got {multiple_of!r}")
    if dtype is None: dtype = dtypes.int32 if -2**31 <= min_val and max_val < 2**31 else dtypes.int64
    return UOp(Ops.DEFINE_VAR, dtype, arg=(name, min_val, max_val) + ((multiple_of,) if multiple_of != 1 else ()))
  def bind(self, val: int) -> UOp:
    if self.op is not Ops.DEFINE_VAR: raise TypeError(f"bind: only a Variable can be bound, not a {self.op}")
    name, lo, hi = self.arg[:3]
    if not isinstance(val, int) or not lo <= val <= hi:
      raise ValueError(f"bind: {val!r} is outside Variable {name!r}'s range [{lo}, {hi}]")
    if len(self.arg) > 3 and val % self.arg[3] != 0:
      raise ValueError(f"bind: {val} for Variable {name!r} is not a multiple of {self.arg[3]}")
    if dtypes.is_int(self.dtype) and not dtypes.min(self.dtype) <= val <= dtypes.max(self.dtype):
      # a kernel takes the value as the Variable's dtype: it would wrap silently
      raise ValueError(f"bind: {val} for Variable {name!r} doesn't fit its dtype {self.dtype}; leave the dtype out "
                       "(int64 is chosen for bounds past int32) or give a wider one")
    return UOp(Ops.BIND, self.dtype, (self, self.const_like(val)))
  def unbind(self) -> tuple[UOp, int]:
    if self.op is not Ops.BIND: raise TypeError(f"unbind: {self.op} is not a bound Variable")
    return self.src[0], self.src[1].arg
  def unbind_all(self) -> tuple[UOp, dict[UOp, int]]:
    """This graph with every bound Variable (in sources and in movement ops' symbolic sizes) replaced by the
    Variable itself, and the values they were bound to: {Variable: value}."""
    vals: dict[UOp, int] = {}
    memo: dict[UOp, UOp] = {}
    for u in self.toposort():
      if u.op is Ops.BIND:
        var, val = u.src[0], u.src[1].arg
        if vals.setdefault(var, val) != val:
          raise BindMismatchError(f"unbind_all: bind mismatch on Variable {var.expr!r}: bound to both {vals[var]} and "
                                  f"{val}")
        memo[u] = var
        continue
      arg = u.arg
      if u.op in GroupOp.Movement and _has_sym(arg):
        arg = tuple(tuple(_unbind_into(b, vals) for b in a) if isinstance(a, tuple) else _unbind_into(a, vals)
                    for a in arg)
      src = tuple(memo[x] for x in u.src)
      memo[u] = u if arg is u.arg and src == u.src else UOp(u.op, u.dtype, src, arg)
    return memo[self], vals
  def contiguous_view_offset(self) -> sint | None:
    """The element offset into its buffer when this is a contiguous run of a buffer's elements (a BUFFER seen through
    reshapes and one shrink of its flat elements), else None."""
    x, offset = self, 0
    while x.op is Ops.RESHAPE: x = x.src[0]
    if x.op is Ops.SHRINK and len(x.arg) == 1:
      offset, x = x.arg[0][0], x.src[0]
      while x.op is Ops.RESHAPE: x = x.src[0]
    return offset if x.op is Ops.BUFFER else None
  @property
  def expr(self) -> str: return self.arg[0]
  @property
  def val(self) -> int:
    """The value of a bound Variable, or of an expression over bound Variables."""
    return sym_val(self)  # type: ignore[arg-type]  # sint is typed as int
  def variables(self) -> list[UOp]:
    return sorted({x.src[0] if x.op is Ops.BIND else x for x in self.toposort() if x.op in (Ops.DEFINE_VAR, Ops.BIND)},
                  key=lambda v: v.arg)
  def simplify(self) -> UOp:
    """This expression with the symbolic rules (uop/symbolic.py) applied until none matches."""
    assert simplifier is not None, "attograd.uop.symbolic hands in the simplifier when attograd.uop loads"
    return graph_rewrite(self, simplifier)
  def render(self) -> str:
    """A readable infix string of an index expression (for messages and tests)."""
    return render_expr(self)
  def ssimplify(self) -> UOp | ConstType:
    ret = self.simplify()
    return ret.arg if ret.op is Ops.CONST else ret

  # ***** tinygrad's symbolic helpers: divisibility, bounds by its name, bound Variables *****
  @property
  def _min_max(self) -> tuple[ConstType, ConstType]: return self.vmin_vmax  # tinygrad's name
  def const_factor(self) -> int:
    """A positive int known to divide this int expression (1 when nothing better is known; not always the largest)."""
    if self.op is Ops.CONST and self.arg.__class__ is int: return self.arg
    if self.op is Ops.ADD: return math.gcd(self.src[0].const_factor(), self.src[1].const_factor())
    if self.op is Ops.MUL:
      if self.src[0].op is Ops.CONST and self.src[0].arg.__class__ is int: return self.src[0].arg
      if self.src[1].op is Ops.CONST and self.src[1].arg.__class__ is int: return self.src[1].arg
    if self.op is Ops.DEFINE_VAR and len(self.arg) > 3: return self.arg[3]
    if self.op is Ops.BIND: return self.src[0].const_factor()
    return 1
  def divides(self, v: int) -> UOp | None:
    """This int expression divided by `v` when it is provably a multiple of `v` (exactly, for every value of its
    Variables), else None."""
    if v == 1: return self
    if self.op is Ops.CONST: return self.const_like(self.arg // v) if self.arg % v == 0 else None
    if self.op is Ops.ADD:
      if (d0 := self.src[0].divides(v)) is None or (d1 := self.src[1].divides(v)) is None: return None
      return d0 + d1
    if self.op is Ops.MUL:
      if (d0 := self.src[0].divides(v)) is not None: return self.src[1] if d0.op is Ops.CONST and d0.arg == 1 else \
        d0 * self.src[1]
      if (d1 := self.src[1].divides(v)) is not None: return self.src[0] if d1.op is Ops.CONST and d1.arg == 1 else \
        self.src[0] * d1
      return None
    if self.op in (Ops.DEFINE_VAR, Ops.BIND) and self.const_factor() % v == 0: return self // v
    return None
  @property
  def is_bound_var(self) -> bool:
    """Whether this is a Variable bound to a value (tinygrad's name)."""
    return self.op is Ops.BIND and self.src[0].op is Ops.DEFINE_VAR
  def __int__(self) -> int: return int(self._single_value(int))
  def __float__(self) -> float: return float(self._single_value(float))
  def _single_value(self, kind: type) -> ConstType:
    """The one value this expression takes (its bounds meet once simplified), for int() and float()."""
    if kind is int and not (dtypes.is_int(self.dtype) or self.dtype is dtypes.bool):
      raise TypeError(f"int(): a {self.dtype} UOp is not an int; cast it first")
    lo, hi = (s := self.simplify()).vmin_vmax
    if lo != hi or (isinstance(lo, float) and lo != lo):
      raise UndecidableError(f"{kind.__name__}(): {s.render()} is not one number: it ranges over [{lo}, {hi}] (a "
                             "symbolic size was used where a concrete number is needed)")
    return lo

def _fill_devices(roots: tuple[UOp, ...]) -> None:
  """Computes .device of `roots` and of the nodes below them whose device isn't known yet, sources first and without
  recursion: a kernel's index math can be thousands of nodes deep, and the tensor methods UOp lends (tensor/
  uop_methods.py) ask each operand's device."""
  stack: list[tuple[UOp, bool]] = [(r, False) for r in roots]
  while stack:
    n, ready = stack.pop()
    if "device" in n.__dict__: continue
    if ready: _ = n.device  # its sources' devices are known: no recursion
    else:
      stack.append((n, True))
      stack.extend((s, False) for s in n.src if "device" not in s.__dict__)

def resolve(x: UOp | bool, default: bool = True) -> bool:
  """A condition's truth: a bool as it is, a symbolic comparison's when its Variables' bounds decide it, else
  `default` (tinygrad's: for checks that may be skipped when they can't be decided)."""
  if not isinstance(x, UOp): return bool(x)
  if x.dtype is not dtypes.bool: raise TypeError(f"resolve: needs a bool UOp, got a {x.dtype} one")
  lo, hi = x.simplify().vmin_vmax
  return bool(lo) if lo == hi else default

def sym_vals(*xs: Any) -> list[int] | None:
  """The values of sizes, or None when one has an unbound Variable."""
  try: return [sym_val(x) for x in xs]
  except ValueError: return None

def sym_val(x: sint, vals: dict[str, int] | None = None) -> int:
  """The value of a size: an int as is, an expression over bound Variables (or Variables named in `vals`) computed."""
  if not isinstance(x, UOp): return x
  if x.op is Ops.CONST: return x.arg
  if x.op is Ops.BIND: return x.src[1].arg if vals is None or x.src[0].arg[0] not in vals else vals[x.src[0].arg[0]]
  if x.op is Ops.DEFINE_VAR:
    if vals is None or x.arg[0] not in vals: raise ValueError(f"Variable {x.arg[0]!r} has no value: bind it first")
    return vals[x.arg[0]]
  return exec_alu(x.op, x.dtype, [sym_val(s, vals) for s in x.src])

def _has_sym(arg: Any) -> bool:
  return isinstance(arg, tuple) and \
    any(isinstance(a, UOp) or (isinstance(a, tuple) and any(isinstance(b, UOp) for b in a)) for a in arg)

def _unbind_into(x: Any, vals: dict[UOp, int]) -> Any:
  """A size with its bound Variables replaced by the Variables, their values noted in `vals`."""
  if not isinstance(x, UOp): return x
  unbound, v = x.unbind_all()
  for var, val in v.items():
    if vals.setdefault(var, val) != val:
      raise BindMismatchError(f"unbind_all: bind mismatch on Variable {var.expr!r}: bound to both {vals[var]} and "
                              f"{val}")
  return unbound

def sym_infer(x: sint, var_vals: dict[str, int]) -> int:
  """tinygrad's name for sym_val: the value of a size with its Variables given by name."""
  return sym_val(x, var_vals)

def ssimp(x: sint) -> sint:
  """A size in its simplest form: an int when it is one."""
  if not isinstance(x, UOp): return x
  y = x.simplify()
  return y.arg if y.op is Ops.CONST else y

def sym_eq(a: sint, b: sint) -> bool:
  """Two sizes are the same for every value of their Variables."""
  if a is b or (not isinstance(a, UOp) and not isinstance(b, UOp)): return a == b
  d = ssimp(a - b) if isinstance(a, UOp) else ssimp(b - a)  # type: ignore[operator]
  return isinstance(d, int) and d == 0

def unbind_sint(x: sint) -> sint:
  """The size with each bound Variable replaced by the Variable itself (what a kernel sees)."""
  if not isinstance(x, UOp): return x
  return x.substitute({b: b.src[0] for b in x.toposort() if b.op is Ops.BIND})

def sym_max(x: sint) -> int:
  """The largest value a size can take (an int as is)."""
  if not isinstance(x, UOp): return x
  return int(unbind_sint(x).simplify().vmax)

_new_object = object.__new__
_set_op, _set_dtype, _set_src, _set_arg = (UOp.op.__set__, UOp.dtype.__set__,  # type: ignore[attr-defined]
                                            UOp.src.__set__, UOp.arg.__set__)  # type: ignore[attr-defined]

# new_uop(op, dtype, src, arg) is UOp(op, dtype, src, arg), the same hash-consed node, without the metaclass call:
# CPython calls a metaclass's Python-level __call__ as a bound method with an argument tuple, about a third of the
# cost of building a node that is already in the cache. Every tensor op and every realize builds nodes by the dozen
# (Tensor ops, the scheduler's normalize pass, new buffers): those paths call this.
new_uop: Callable[[Ops, DType, tuple[UOp, ...], Any], UOp] = functools.partial(UOpMetaClass.__call__, UOp)

_INDEX_PAIR = {dtypes.int32, dtypes.int64}

def Variable(name: str, min_val: int, max_val: int, dtype: DType | None = None) -> UOp:
  """A symbolic integer with known bounds, e.g. `Variable("bs", 1, 64)`; `.bind(10)` gives it a value. int32, or
  int64 where the bounds pass int32's (`Variable("n", 0, 2**40)`)."""
  return UOp.variable(name, min_val, max_val, dtype)

# ***** shapes of tensor-level nodes *****

def _ssum(d: sint, b: sint, a: sint) -> sint:
  return d + b + a if d.__class__ is int and b.__class__ is int and a.__class__ is int else ssimp(d + b + a)

def _shape_of(u: UOp) -> tuple[sint, ...]:
  op = u.op
  if op in GroupOp.Movement:
    if op is Ops.RESHAPE or op is Ops.EXPAND: return u.arg
    s = u.src[0].shape
    if op is Ops.PERMUTE: return tuple(s[i] for i in u.arg)
    if op is Ops.PAD: return tuple(_ssum(d, b, a) for d, (b, a) in zip(s, u.arg))
    if op is Ops.SHRINK:
      return tuple(e - b if e.__class__ is int and b.__class__ is int else ssimp(e - b) for b, e in u.arg)
    return s  # FLIP
  if op is Ops.REDUCE_AXIS: return tuple(1 if i in u.arg[1] else d for i, d in enumerate(u.src[0].shape))
  if op is Ops.AFTER: return u.src[0].shape
  if op is Ops.BUFFER: return (u.arg[1],)
  if op is Ops.PARAM: return u.arg.shape or ()
  if op is Ops.INDEX: return u.src[0].shape[len(u.src) - 1:]
  if op in (Ops.STORE, Ops.END, Ops.GROUP, Ops.RANGE, Ops.CALL): return ()
  if op is Ops.MULTI:
    s = u.src[0].shape
    return s if u.arg is None else s[:u.arg] + (sum(x.shape[u.arg] for x in u.src),) + s[u.arg + 1:]
  if op is Ops.VIEW: return u.arg.shape
  if op is Ops.LOAD: return u.src[1].shape if len(u.src) > 1 else ()  # (a kernel body's load of one element)
  if (op is Ops.CONST or op is Ops.IOTA) and u.src and u.src[0].op is Ops.VIEW: return u.src[0].shape
  if op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND, Ops.DEVICE, Ops.SINK, Ops.NOOP): return ()
  if op is Ops.BITCAST:
    s = u.src[0].shape
    if u.dtype.itemsize == u.src[0].dtype.itemsize or not s: return s
    return s[:-1] + (s[-1] * u.src[0].dtype.itemsize // u.dtype.itemsize,)
  # in a kernel a Variable has no view (shape ()), so an expression over Variables only takes the others' shape
  s = u.src[0].shape if u.src else ()
  return s if s or len(u.src) < 2 else next((t for x in u.src[1:] if (t := x.shape)), ())

class BroadcastError(ValueError, IndexError):
  """Shapes that can't be broadcast together. A ValueError like attograd's other shape errors; also an IndexError,
  which tinygrad's broadcast_shape raises (and code ported from it catches)."""

def shape_str(shape: tuple[sint, ...]) -> str:
  """A shape for messages: symbolic sizes as their expressions (a UOp's repr is its whole graph)."""
  return f"({', '.join(d.render() if isinstance(d, UOp) else str(d) for d in shape)}{',' if len(shape) == 1 else ''})"

def broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
  """The shape `shapes` broadcast to, NumPy's rules aligned right: per dim the sizes other than 1 must agree (symbolic
  sizes equal for every value of their Variables, so i+j meets j+i)."""
  out = shapes[0]
  for b in shapes[1:]: out = broadcast_pair(out, b, shapes)
  return out

_broadcast_shape = broadcast_shape  # tinygrad's name (its tests import it from uop.ops)

def broadcast_pair(a: tuple[sint, ...], b: tuple[sint, ...],
                    shapes: tuple[tuple[sint, ...], ...] = ()) -> tuple[sint, ...]:
  # two shapes, ints first: this runs for every binary op whose operands' shapes differ
  n = max(len(a), len(b))
  pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
  out: list[sint] = []
  for x, y in zip(pa, pb):  # (a UOp equals only itself here: == on UOps is identity)
    if x == y or y == 1: out.append(x)
    elif x == 1: out.append(y)
    elif (x.__class__ is not int or y.__class__ is not int) and sym_eq(x, y): out.append(x)
    else: break
  else: return tuple(out)
  raise BroadcastError(f"shapes {' and '.join(map(shape_str, shapes or (a, b)))} can't be broadcast together")

# ***** bounds of integer/boolean expressions (for the symbolic simplifier) *****

def _bounds(u: UOp) -> tuple[ConstType, ConstType]:
  op, d = u.op, u.dtype
  if op is Ops.CONST:
    if u.arg.__class__ is not tuple: return u.arg, u.arg
    # a vector constant: its lanes' extremes, leaving out Invalid (a lane with no value), each as the dtype holds it
    lanes = [truncate_to(v, d) for v in u.arg if not isinstance(v, InvalidType)]
    return (min(lanes), max(lanes)) if lanes else (dtypes.min(d), dtypes.max(d))
  if op is Ops.DEFINE_VAR: return u.arg[1], u.arg[2]
  if op is Ops.BIND: return u.src[0].vmin_vmax
  if op is Ops.RANGE:
    hi = u.src[0].vmax
    return 0, (hi - 1 if isinstance(hi, int) else hi)
  if op is Ops.SPECIAL:  # attograd's arg (name, size), or tinygrad's form: the name as arg, the size as src[0]
    return (0, u.src[0].vmax - 1) if u.arg.__class__ is str and u.src else (0, u.arg[1] - 1)
  if op is Ops.CAST and dtypes.is_float(d): return _cast_float_bounds(u)
  if op is Ops.CAST and dtypes.is_int(d) and dtypes.is_float(u.src[0].dtype):
    lo, hi = u.src[0].vmin_vmax
    # truncation toward zero is monotone: finite bounds that fit stay bounds
    if math.isfinite(lo) and math.isfinite(hi) and fits_dtype(math.trunc(lo), math.trunc(hi), d):
      return math.trunc(lo), math.trunc(hi)
  if not (dtypes.is_int(d) or d is dtypes.bool): return dtypes.min(d), dtypes.max(d)
  if op in GroupOp.Binary or op is Ops.WHERE:
    s = u.src
    if op is Ops.WHERE: return min(s[1].vmin, s[2].vmin), max(s[1].vmax, s[2].vmax)
    (a0, a1), (b0, b1) = s[0].vmin_vmax, s[1].vmin_vmax
    if op is Ops.ADD: return _clamp(a0 + b0, a1 + b1, d)
    if op is Ops.SUB: return _clamp(a0 - b1, a1 - b0, d)
    if op is Ops.MUL:
      vals = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
      return _clamp(min(vals), max(vals), d)
    if op is Ops.MAX: return max(a0, b0), max(a1, b1)
    if op is Ops.IDIV and b0 == b1 and b0 != 0 and a0 >= 0:
      return (a0 // b0, a1 // b0) if b0 > 0 else (-(a1 // -b0), -(a0 // -b0))
    if op is Ops.IDIV and b0 > 0 and a0 >= 0: return 0, a1 // b0
    if op is Ops.MOD and b0 > 0 and a0 >= 0: return 0, min(a1, b1 - 1)
    if op is Ops.MOD and b0 > 0: return -(b1 - 1) if a0 < 0 else 0, min(max(a1, 0), b1 - 1)
    if op is Ops.CMPLT: return (a1 < b0), (a0 < b1)
    if op is Ops.CMPNE:
      if a0 == a1 == b0 == b1: return False, False
      return (a1 < b0 or b1 < a0), True
    if op is Ops.CMPEQ: return (a0 == a1 == b0 == b1), not (a1 < b0 or b1 < a0)
    if op is Ops.AND and d is dtypes.bool: return bool(a0 and b0), bool(a1 and b1)
    if op is Ops.OR and d is dtypes.bool: return bool(a0 or b0), bool(a1 or b1)
    if op is Ops.AND and a0 >= 0 and b0 >= 0: return 0, min(a1, b1)
    # a mask without the sign bit clears it: the result is in [0, mask] whatever x's sign
    if op is Ops.AND and b0 == b1 and b0 >= 0: return 0, b1
    if op is Ops.SHR and a0 >= 0 and 0 <= b0 and b1 < d.itemsize * 8: return a0 >> b1, a1 >> b0
    if op is Ops.SHL and a0 >= 0 and 0 <= b0 and b1 < d.itemsize * 8: return _clamp(a0 << b0, a1 << b1, d)
    if op is Ops.XOR and b0 == b1 == -1: return ~a1, ~a0  # ~x reverses the order
  if op is Ops.CMPNE: return False, True
  if op is Ops.CAST and (dtypes.is_int(u.src[0].dtype) or u.src[0].dtype is dtypes.bool):
    lo, hi = u.src[0].vmin_vmax
    if dtypes.min(d) <= lo and hi <= dtypes.max(d):
      return (bool(lo), bool(hi)) if d is dtypes.bool else (int(lo), int(hi))
  return dtypes.min(d), dtypes.max(d)

def fits_dtype(lo: Any, hi: Any, d: DType) -> bool: return dtypes.min(d) <= lo and hi <= dtypes.max(d)

def _cast_float_bounds(u: UOp) -> tuple[ConstType, ConstType]:
  """A cast to a float: the source's bounds rounded onto the float's grid (rounding is monotone), when they are
  finite; else the float's range."""
  lo, hi = u.src[0].vmin_vmax
  d = u.dtype
  if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and math.isfinite(lo) and math.isfinite(hi):
    return truncate_to(lo, d), truncate_to(hi, d)
  return dtypes.min(d), dtypes.max(d)

def _clamp(lo: Any, hi: Any, d: DType) -> tuple[Any, Any]:
  # an expression that could overflow its dtype has unknown bounds
  if lo < dtypes.min(d) or hi > dtypes.max(d): return dtypes.min(d), dtypes.max(d)
  return lo, hi

# ***** Python semantics of every ALU op (constant folding and the PYTHON device use these) *****

def _safe(fn: Callable[..., Any], nanval: Any = math.nan) -> Callable[..., Any]:
  def wrapped(*args: Any) -> Any:
    try: return fn(*args)
    except (ValueError, ZeroDivisionError): return nanval
    except OverflowError: return math.inf
  return wrapped

def _c_idiv(a: int, b: int) -> int:
  if b == 0: return 0
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q
def _c_mod(a: int, b: int) -> int: return 0 if b == 0 else a - _c_idiv(a, b) * b
def _fdiv(a: float, b: float) -> float:
  if b == 0:
    if a == 0 or a != a: return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)
  return a / b
def _exp2(x: float) -> float:
  if x != x: return x
  try: return 2.0 ** x
  except OverflowError: return math.inf
def _log2(x: float) -> float:
  if x != x or x < 0: return math.nan
  if x == 0: return -math.inf
  return math.log2(x) if x != math.inf else math.inf
def _sin(x: float) -> float: return math.nan if math.isinf(x) or x != x else math.sin(x)
def _sqrt(x: float) -> float: return math.nan if x < 0 or x != x else math.sqrt(x)
def _recip(x: float) -> float: return _fdiv(1.0, x)
def _trunc(x: Any) -> Any:  # the sign stays, as in C's trunc: trunc(-0.5) is -0.0
  return x if isinstance(x, int) or math.isinf(x) or x != x else math.copysign(float(math.trunc(x)), x)
def _max(a: Any, b: Any) -> Any: return a if a != a else (b if b != b else max(a, b))
def _shl(a: int, b: int) -> int: return a << b if 0 <= b < 64 else 0
def _shr(a: int, b: int) -> int: return a >> b if 0 <= b < 64 else (-1 if a < 0 else 0)
def _pow(a: Any, b: Any) -> Any:
  try:
    r = a ** b
    return math.nan if isinstance(r, complex) else r
  except ZeroDivisionError: return math.inf
  except OverflowError: return math.inf

python_alu: dict[Ops, Callable[..., Any]] = {
  Ops.EXP2: _exp2, Ops.LOG2: _log2, Ops.SIN: _sin, Ops.SQRT: _sqrt, Ops.RECIP: _recip, Ops.NEG: operator.neg,
  Ops.TRUNC: _trunc, Ops.ADD: operator.add, Ops.SUB: operator.sub, Ops.MUL: operator.mul, Ops.FDIV: _fdiv,
  Ops.IDIV: _c_idiv, Ops.MOD: _c_mod,
  Ops.MAX: _max, Ops.CMPLT: operator.lt, Ops.CMPNE: operator.ne, Ops.CMPEQ: operator.eq, Ops.AND: operator.and_,
  Ops.OR: operator.or_, Ops.XOR: operator.xor, Ops.SHL: _shl, Ops.SHR: _shr, Ops.POW: _pow,
  Ops.WHERE: lambda c, a, b: a if c else b, Ops.MULACC: lambda a, b, c: _fma(a, b, c)}

def _fma(a: float, b: float, c: float) -> float:
  """a*b+c rounded once (to a Python float; exec_alu then rounds a float32 result again, which can differ from one
  float32 rounding in a tie of the double's last bit). Python 3.13's math.fma, else exact rational arithmetic."""
  if (fma := getattr(math, "fma", None)) is not None: return fma(a, b, c)
  if not all(math.isfinite(v) for v in (a, b, c)): return a * b + c
  from fractions import Fraction
  exact = Fraction(a) * Fraction(b) + Fraction(c)
  try: r = float(exact)
  except OverflowError: return math.inf if exact > 0 else -math.inf
  if r != 0: return r
  return (0.0 if exact > 0 else -0.0) if exact != 0 else a * b + c  # an exact zero's sign as IEEE addition gives it

def exec_alu(op: Ops, dtype: DType, operands: Sequence[Any]) -> Any:
  """Evaluate one ALU op on Python values with the result rounded/wrapped to `dtype`."""
  if dtype.count > 1: return tuple(exec_alu(op, dtype.scalar(), [x[i] if isinstance(x, tuple) else x for x in operands])
                                   for i in range(dtype.count))
  if op is Ops.NEG and dtypes.is_int(dtype): return truncate_to(-operands[0], dtype)
  if op is Ops.NEG and dtype is dtypes.bool: return not operands[0]
  return truncate_to(python_alu[op](*operands), dtype)

# ***** pattern matching *****

class UPat:
  """A pattern over UOps. `UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c")))` matches x + const and names the parts.

  `src` is a tuple (the sources in order), a single UPat (every source matches it) or a list (the sources in any
  order: each permutation is tried). `UPat.any(a, b)` matches what a or b matches; `tag` matches the node's tag. A
  pattern with such choices in it matches in every way it can (match_all), and its rule is tried with each."""
  __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "custom_early_reject", "tag", "perms", "alts",
               "simple", "location")
  def __init__(self, op: Ops | tuple[Ops, ...] | set[Ops] | frozenset[Ops] | None = None,
               dtype: DType | tuple[DType, ...] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False, custom_early_reject: Any = None, location: Any = None,
               is_any: bool = False, tag: Any = None):
    if name == "ctx": raise ValueError("UPat: the name 'ctx' is taken by the rewrite context a rule is given")
    self.op: frozenset[Ops] | None = None if op is None else frozenset([op] if isinstance(op, Ops) else op)
    self.dtype: frozenset[DType] | None = \
      None if dtype is None else frozenset([dtype] if isinstance(dtype, DType) else dtype)
    # (custom_early_reject is a hint for tinygrad's matcher compiler: attograd's matcher needs none)
    self.arg, self.name, self.allow_any_len, self.custom_early_reject = arg, name, allow_any_len, custom_early_reject
    # where the pattern was written, (file, line): the first frame outside this module (its helpers build UPats too)
    self.location: tuple[str, int] = location or _caller_location()
    self.tag: tuple[Any, ...] | None = None if tag is None else tuple(tag) if isinstance(tag, (set, tuple)) else (tag,)
    # the sources' orders to try (a list src), and the alternatives of UPat.any: None when there is no choice
    self.perms: list[tuple[UPat, ...]] | None = None
    self.alts: tuple[UPat, ...] | None = None
    if is_any:
      self.alts = tuple(src) if isinstance(src, (tuple, list)) else (src,) if isinstance(src, UPat) else ()
      src = None
    elif isinstance(src, list):
      self.perms = list(dict.fromkeys(itertools.permutations(src)))
      src = tuple(src)
    self.src: tuple[UPat, ...] | UPat | None = src
    # simple: no choice anywhere below, so the one greedy walk of match() decides (the fast path of every rewrite)
    kids: tuple[UPat, ...] = (() if src is None else (src,) if isinstance(src, UPat) else src) + (self.alts or ())
    self.simple: bool = self.perms is None and self.alts is None and self.tag is None and all(k.simple for k in kids)
  @property
  def match_dtype(self) -> tuple[DType, ...] | None:
    """The dtypes this pattern matches (tinygrad's name), None for any."""
    return None if self.dtype is None else tuple(self.dtype)
  @staticmethod
  def var(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
    return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None, arg: Any = None) -> UPat:
    return UPat(Ops.CONST, dtype=dtype, name=name, arg=arg)
  @staticmethod
  def const(dtype: Any, val: Any = None) -> UPat:
    """A constant of value `val`: `UPat.const(dtype, val)`, or tinygrad's order `UPat.const(val, dtype=None)`."""
    if not (dtype is None or isinstance(dtype, DType) or (isinstance(dtype, tuple) and
                                                           all(isinstance(d, DType) for d in dtype))):
      dtype, val = val, dtype  # tinygrad's order: the value first
    return UPat(Ops.CONST, dtype=dtype, arg=val)
  @staticmethod
  def any(*src: UPat) -> UPat:
    """Matches what any of `src` matches (each is tried)."""
    return UPat(src=src, is_any=True)
  def named(self, name: str) -> UPat:
    """This pattern, binding what it matches to `name`."""
    src = list(self.perms[0]) if self.perms is not None else self.src
    return UPat(self.op, None if self.dtype is None else tuple(self.dtype), src, self.arg, name, self.allow_any_len,
                tag=self.tag)
  def or_casted(self, name: str | None = None) -> UPat:
    """This pattern, or a CAST of it."""
    return UPat.any(self if name is None else self.named(name), UPat(Ops.CAST, name=name, src=(self,)))
  def f(self, op: Ops, **kwargs: Any) -> UPat: return UPat(op, src=(self,), **kwargs)
  def cast(self, dtype: DType | None = None, **kwargs: Any) -> UPat: return UPat(Ops.CAST, dtype, (self,), **kwargs)
  def _bin(self, op: Ops, x: UPat | ConstType) -> UPat:
    return UPat(op, src=(self, x if isinstance(x, UPat) else UPat.const(None, x)))
  def __add__(self, x: UPat | ConstType) -> UPat: return self._bin(Ops.ADD, x)
  def __mul__(self, x: UPat | ConstType) -> UPat: return self._bin(Ops.MUL, x)
  def __floordiv__(self, x: UPat | ConstType) -> UPat: return self._bin(Ops.IDIV, x)
  def __mod__(self, x: UPat | ConstType) -> UPat: return self._bin(Ops.MOD, x)
  def __lt__(self, x: UPat | ConstType) -> UPat: return self._bin(Ops.CMPLT, x)
  def __and__(self, x: UPat | ConstType) -> UPat: return self._bin(Ops.AND, x)
  def __or__(self, x: UPat | ConstType) -> UPat: return self._bin(Ops.OR, x)
  def ne(self, x: UPat | ConstType) -> UPat: return self._bin(Ops.CMPNE, x)
  def maximum(self, x: UPat | ConstType) -> UPat: return self._bin(Ops.MAX, x)
  def where(self, x: UPat, y: UPat) -> UPat: return UPat(Ops.WHERE, src=(self, x, y))
  def __repr__(self) -> str:
    if self.alts is not None: return f"UPat.any({', '.join(map(repr, self.alts))})"
    return f"UPat({self.op}, {self.dtype}, arg={self.arg!r}, name={self.name!r}, src={self.src!r})"

  def match(self, u: UOp, store: dict[str, UOp]) -> bool:
    """Match `u`, filling `store` with named parts. A name bound twice must be the same node. For a simple pattern
    (no list src, UPat.any or tag below it): a pattern with choices matches through match_all."""
    if self.op is not None and u.op not in self.op: return False
    if self.dtype is not None and u.dtype not in self.dtype and u.dtype.scalar() not in self.dtype: return False
    # (a NaN arg matches a NaN constant, as hash-consing keys them)
    if self.arg is not None and (self.arg != u.arg and not (self.arg != self.arg and u.arg != u.arg) or
                                 self.arg.__class__ is not u.arg.__class__ and u.op is Ops.CONST
                                 and not (isinstance(self.arg, (int, float)) and isinstance(u.arg, (int, float)))):
      return False
    if self.name is not None:
      if (prev := store.get(self.name)) is not None and prev is not u: return False
      store[self.name] = u
    if self.src is None: return True
    if isinstance(self.src, UPat): return all(self.src.match(s, store) for s in u.src)
    if len(self.src) != len(u.src) and not (self.allow_any_len and len(u.src) >= len(self.src)): return False
    return all(p.match(s, store) for p, s in zip(self.src, u.src))

  def match_all(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    """Every way this pattern matches `u`: one store (a copy of `store` with the parts named) per way. `store` is
    left as it is."""
    if self.simple: return [st] if self.match(u, st := dict(store)) else []
    if self.alts is not None: return [st for p in self.alts for st in p.match_all(u, store)]
    if self.tag is not None and u.tag not in self.tag: return []
    # the node itself: the simple checks, on a pattern without sources
    if not UPat.match(_node_only(self), u, st := dict(store)): return []
    if self.src is None: return [st]
    if isinstance(self.src, UPat): orders: list[tuple[UPat, ...]] = [(self.src,) * len(u.src)]
    else:
      if len(self.src) != len(u.src) and not (self.allow_any_len and len(u.src) >= len(self.src)): return []
      orders = self.perms or [self.src]
    out: list[dict[str, UOp]] = []
    for order in orders:
      stores = [st]
      for p, s in zip(order, u.src): stores = [t for x in stores for t in p.match_all(s, x)]
      out.extend(stores)
    return out

def _caller_location() -> tuple[str, int]:
  frame = sys._getframe(2)
  while frame.f_back is not None and frame.f_code.co_filename == __file__: frame = frame.f_back
  return frame.f_code.co_filename, frame.f_lineno

@functools.lru_cache(maxsize=None)
def _node_only(p: UPat) -> UPat:
  """`p` without its sources: what match_all checks of the node itself before trying the sources' choices."""
  return UPat(p.op, None if p.dtype is None else tuple(p.dtype), None, p.arg, p.name)

class PatternMatcher:
  """An ordered table of (pattern, rewrite function) rules. The first rule whose function returns a UOp wins."""
  def __init__(self, patterns: Sequence[tuple[UPat, Callable[..., Any]]], compiled: bool = True):
    # (compiled: tinygrad's switch for its matcher compiler; attograd's matcher has one way of matching)
    self.patterns = list(patterns)
    # each rule's mode: bit 0 says the function takes ctx, bit 1 that the pattern has choices (matched by match_all)
    self.pdict: dict[Ops | None, list[tuple[UPat, Callable[..., Any], int]]] = {}
    for p, fn in self.patterns:
      mode = ("ctx" in fn.__code__.co_varnames[:fn.__code__.co_argcount]) + (0 if p.simple else 2)
      for op in (p.op if p.op is not None else [None]): self.pdict.setdefault(op, []).append((p, fn, mode))
    any_rules = self.pdict.pop(None, [])
    # rules that match any op are tried after the op's own rules
    self.pdict = {op: rules + any_rules for op, rules in self.pdict.items()}
    self._any = any_rules
  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.patterns + other.patterns)
  def __reduce__(self) -> tuple[Any, ...]:
    # a rule function pickles by reference when its module has it by name; a lambda or local function as its code
    return (type(self), ([(p, fn if _by_reference(fn) else _PickledFunction(fn)) for p, fn in self.patterns],))
  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
    for p, fn, mode in self.pdict.get(u.op, self._any):
      if mode < 2:
        store: dict[str, UOp] = {}
        if p.match(u, store):
          if mode: store["ctx"] = ctx
          if (ret := fn(**store)) is not None and ret is not u: return ret
      elif (ret := _rewrite_choices(p, fn, mode, u, ctx)) is not None: return ret
    return None
  def rewrite_traced(self, u: UOp, ctx: Any = None) -> tuple[UOp | None, Callable[..., Any] | None]:
    """rewrite(), also saying which rule's function fired (for the VIZ graph explorer)."""
    for p, fn, mode in self.pdict.get(u.op, self._any):
      if mode < 2:
        store: dict[str, UOp] = {}
        if p.match(u, store):
          if mode: store["ctx"] = ctx
          if (ret := fn(**store)) is not None and ret is not u: return ret, fn
      elif (ret := _rewrite_choices(p, fn, mode, u, ctx)) is not None: return ret, fn
    return None, None

def _by_reference(fn: Callable[..., Any]) -> bool:
  mod = sys.modules.get(getattr(fn, "__module__", None) or "")
  return mod is not None and getattr(mod, fn.__qualname__, None) is fn

def deconstruct_function(fn: Callable[..., Any]) -> tuple[types.CodeType, dict[str, Any], str, tuple | None]:
  """`fn` as (code, the globals it reads, name, defaults): what types.FunctionType rebuilds it from, for a function
  that can't be found by name (a lambda, a local function). A closure is refused: its cells aren't data."""
  if fn.__closure__: raise ValueError(f"deconstruct_function: {fn.__qualname__} is a closure; its cells can't be kept")
  def names(code: types.CodeType) -> set[str]:  # nested code (comprehensions, inner lambdas) reads globals too
    return set(code.co_names).union(*(names(c) for c in code.co_consts if isinstance(c, types.CodeType)))
  g = {k: v for k, v in fn.__globals__.items() if k in names(fn.__code__)}
  return fn.__code__, g, fn.__name__, fn.__defaults__

class _PickledFunction:
  """A rule function pickled as its code (marshal) and the globals it reads; modules among them by name."""
  def __init__(self, fn: Callable[..., Any]): self.fn = fn
  def __reduce__(self) -> tuple[Any, ...]:
    code, g, name, defaults = deconstruct_function(self.fn)
    mods = {k: v.__name__ for k, v in g.items() if isinstance(v, types.ModuleType)}
    vals = {k: v for k, v in g.items() if k not in mods}
    return (_rebuild_function, (marshal.dumps(code), vals, mods, name, defaults))

def _rebuild_function(code: bytes, vals: dict[str, Any], mods: dict[str, str], name: str,
                      defaults: tuple | None) -> Callable[..., Any]:
  g = {**vals, **{k: importlib.import_module(m) for k, m in mods.items()}, "__builtins__": builtins}
  return types.FunctionType(marshal.loads(code), g, name, defaults)

def _rewrite_choices(p: UPat, fn: Callable[..., Any], mode: int, u: UOp, ctx: Any) -> Any:
  """A rule whose pattern has choices: its function is tried with each way the pattern matches, until one returns."""
  for store in p.match_all(u, {}):
    if mode & 1: store["ctx"] = ctx  # type: ignore[assignment]
    if (ret := fn(**store)) is not None and ret is not u: return ret
  return None

# UOp.simplify's rule table. uop/symbolic.py builds it from UOps and UPats, so it loads after this module and sets it
# here (this module cannot import it: that is a cycle); the package's __init__ loads symbolic with the IR.
simplifier: PatternMatcher | None = None

# VIZ: when set, every graph_rewrite reports (matcher, input, [(before, after, rule fn)], output) to this function
rewrite_tracer: Callable[[PatternMatcher, UOp, list[tuple[UOp, UOp, Callable[..., Any]]], UOp], None] | None = None

class BottomUpGate(Exception):
  """Raised by a rule of a bottom-up rewrite (tinygrad's name): the node stays as it is now, and its sources are not
  walked."""

REWRITE_STACK_LIMIT = ContextVar("REWRITE_STACK_LIMIT", 250000)

def _rewrite_loop_error(n: UOp) -> RuntimeError:
  return RuntimeError(f"graph_rewrite: the rules keep rewriting (the walk's stack passed REWRITE_STACK_LIMIT="
                      f"{REWRITE_STACK_LIMIT.value}) near a {n.op} node: two rules undo each other, or one keeps "
                      "growing its result")

def graph_rewrite(root: UOp, pm: PatternMatcher | None, ctx: Any = None, bottom_up: bool = False,
                  name: str | None = None, bpm: PatternMatcher | None = None, walk: bool = False,
                  enter_calls: bool = False, *, done: dict[UOp, UOp] | None = None) -> UOp:
  """Rewrite `root` with `pm` until no rule matches: each node once its sources are rewritten (post-order), and a
  rule's result rewritten again. Iterative (no recursion), linear in graph size.

  `bpm` (or `pm` with `bottom_up=True`) is tried on each node before its sources, to a fixed point, and then on the
  result's sources; a rule raising BottomUpGate keeps the node and skips its sources. `walk=True` visits each node
  once and never walks into a rule's result (no fixed point). A CALL's body (src[0]) is left as it is unless
  `enter_calls`. `name` names the rewrite for tracking (rewrite_group). `done` (node -> its rewritten form) may be
  shared by calls with the same `pm` and ctx: nodes rewritten by an earlier call aren't walked again."""
  if bottom_up is not True and bottom_up is not False:
    raise TypeError(f"graph_rewrite: bottom_up must be a bool, got {bottom_up!r} (done= is keyword-only)")
  if bottom_up: pm, bpm = None, pm
  if done is None: done = {}
  if rewrite_tracer is not None or TRACK_MATCH_STATS.value >= 2 or bpm is not None or walk or pm is None:
    return _tracked_rewrite(root, pm, bpm, ctx, done, walk, enter_calls, name, bottom_up)
  # the hot loop of lowering (~60 rewrites of each kernel's graph): methods bound once, a node without sources is
  # rewritten when first seen instead of being pushed again, and rebuilt sources compared as a tuple (UOps compare
  # by identity)
  stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
  pop, push, rewrite = stack.pop, stack.append, pm.rewrite
  while stack:
    n, stage, alias = pop()
    if n in done: continue
    if stage == 0 and n.src:
      push((n, 1, None))
      if n.op is Ops.CALL and not enter_calls: done.setdefault(n.src[0], n.src[0])
      for s in reversed(n.src):
        if s not in done: push((s, 0, None))
    elif stage < 2:
      src = n.src
      if src:
        new_src = tuple([done[s] for s in src])
        nn = n if new_src == src else UOp(n.op, n.dtype, new_src, n.arg, n.tag)
      else: nn = n
      if (rw := rewrite(nn, ctx)) is None:
        done[n] = nn
        if nn is not n and nn not in done: done[nn] = nn
      else:
        # the replacement is itself rewritten; once it is done, n maps to its result
        if len(stack) > REWRITE_STACK_LIMIT.value: raise _rewrite_loop_error(n)
        push((n, 2, rw))
        push((rw, 0, None))
    else:
      done[n] = done[alias]  # type: ignore[index]
  return done[root]

def _rewrite_general(root: UOp, pm: Callable[[UOp], UOp | None] | None, bpm: Callable[[UOp], UOp | None] | None,
                     done: dict[UOp, UOp], enter_calls: bool) -> UOp:
  """graph_rewrite with a bottom-up matcher: `bpm` is tried on a node (to a fixed point) before its sources are
  walked, `pm` after they are rewritten."""
  stack: list[tuple[UOp, int, UOp]] = [(root, 0, root)]
  while stack:
    n, stage, cur = stack.pop()
    if n in done: continue
    if stage == 0:
      if bpm is not None:
        seen: set[UOp] = set()
        try:
          while (r := bpm(cur)) is not None:
            if r in seen: raise RuntimeError(f"graph_rewrite: the bottom-up rules rewrite a {r.op} node in a circle")
            seen.add(cur)
            cur = r
        except BottomUpGate:
          done[n] = cur
          continue
      # (a bottom-up rule can grow the graph as it walks in: the limit is checked here too)
      if len(stack) > REWRITE_STACK_LIMIT.value: raise _rewrite_loop_error(n)
      stack.append((n, 1, cur))
      if cur.op is Ops.CALL and cur.src and not enter_calls: done.setdefault(cur.src[0], cur.src[0])
      stack.extend((s, 0, s) for s in reversed(cur.src) if s not in done)
    elif stage == 1:
      new_src = tuple([done[s] for s in cur.src])
      if new_src == cur.src:
        if pm is None or (r := pm(cur)) is None:
          done[n] = cur
          continue
      else: r = UOp(cur.op, cur.dtype, new_src, cur.arg, cur.tag)
      # the new node is rewritten in full (bpm first); once it is done, n maps to its result
      if len(stack) > REWRITE_STACK_LIMIT.value: raise _rewrite_loop_error(n)
      stack.append((n, 2, r))
      stack.append((r, 0, r))
    else:
      done[n] = done[cur]
  return done[root]

def _rewrite_walk(root: UOp, pm: Callable[[UOp], UOp | None] | None, bpm: Callable[[UOp], UOp | None] | None,
                  done: dict[UOp, UOp], enter_calls: bool) -> UOp:
  """graph_rewrite(walk=True): one pass, each node visited once. `bpm` is tried on a node before its sources (a
  result is kept as is, its sources never walked); `pm` on the node rebuilt over its rewritten sources."""
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:
    n, ready = stack.pop()
    if n in done: continue
    if not ready:
      if bpm is not None and (r := bpm(n)) is not None:
        done[n] = r
        continue
      stack.append((n, True))
      if n.op is Ops.CALL and n.src and not enter_calls: done.setdefault(n.src[0], n.src[0])
      stack.extend((s, False) for s in reversed(n.src) if s not in done)
    else:
      new_src = tuple([done.get(s, s) for s in n.src])
      nn = n if new_src == n.src else UOp(n.op, n.dtype, new_src, n.arg, n.tag)
      done[n] = r if pm is not None and (r := pm(nn)) is not None else nn
  return done.get(root, root)

def _tracked_rewrite(root: UOp, pm: PatternMatcher | None, bpm: PatternMatcher | None, ctx: Any, done: dict[UOp, UOp],
                     walk: bool, enter_calls: bool, name: str | None, bottom_up: bool) -> UOp:
  """graph_rewrite's other walks, reporting each rule that fired to VIZ (rewrite_tracer) and to rewrite tracking."""
  steps: list[tuple[UOp, UOp, Callable[..., Any]]] = []
  tracking = TRACK_MATCH_STATS.value >= 2
  tracked = _begin_tracked(root, name, bottom_up, walk, enter_calls) if tracking else None
  traced = rewrite_tracer is not None or tracking
  def apply(m: PatternMatcher) -> Callable[[UOp], UOp | None]:
    if not traced: return functools.partial(m.rewrite, ctx=ctx)
    def rewrite(u: UOp) -> UOp | None:
      r, fn = m.rewrite_traced(u, ctx)
      if r is not None:
        steps.append((u, r, fn))  # type: ignore[arg-type]
        if tracked is not None: tracked.matches.append((u, r, fn))  # type: ignore[arg-type]
      return r
    return rewrite
  try:
    run = _rewrite_walk if walk else _rewrite_general
    out = run(root, None if pm is None else apply(pm), None if bpm is None else apply(bpm), done, enter_calls)
  finally:
    if tracked is not None: active_rewrites.pop()
  if rewrite_tracer is not None and pm is not None: rewrite_tracer(pm, root, steps, out)
  return out

# ***** rewrite tracking: the graph_rewrites a function makes, grouped under its name (tinygrad's rewrite_group) *****

# 2 or more: every graph_rewrite records the rules that fired, in the group of the rewrite_group function running
TRACK_MATCH_STATS = ContextVar("TRACK_MATCH_STATS", 0)

@dataclasses.dataclass(frozen=True)
class TrackedGraphRewrite:
  """One graph_rewrite: where it was called, its input, the rules that fired (before, after, rule function), its name,
  how deep in other rewrites it ran, and how it walked."""
  loc: tuple[str, int]
  sink: UOp
  matches: list[tuple[UOp, UOp, Callable[..., Any]]]
  name: str | None
  depth: int
  bottom_up: bool
  walk: bool = False
  enter_calls: bool = False

tracked_keys: list[str] = []                        # each group's name
tracked_ctxs: list[list[TrackedGraphRewrite]] = []  # each group's rewrites, in order
active_group: list[int] = []                        # the groups of the rewrite_group functions running, innermost last
active_rewrites: list[TrackedGraphRewrite] = []     # the graph_rewrites running, innermost last
_name_cnt: dict[str, itertools.count] = {}

def _begin_tracked(root: UOp, name: str | None, bottom_up: bool, walk: bool, enter_calls: bool) -> TrackedGraphRewrite:
  frame = sys._getframe(3)  # graph_rewrite's caller (past _tracked_rewrite and graph_rewrite)
  if not tracked_ctxs: _add_group("default")
  group = active_group[-1] if active_group else len(tracked_ctxs) - 1
  t = TrackedGraphRewrite((frame.f_code.co_filename, frame.f_lineno), root, [], name, len(active_rewrites), bottom_up,
                          walk, enter_calls)
  tracked_ctxs[group].append(t)
  active_rewrites.append(t)
  return t

def _add_group(name: str) -> int:
  tracked_keys.append(name)
  tracked_ctxs.append([])
  return len(tracked_keys) - 1

def rewrite_group(name: Callable[..., str] | bool = True, new_ctx: bool = True) -> Callable[[Callable], Callable]:
  """A decorator: while tracking (TRACK_MATCH_STATS >= 2), the graph_rewrites the function makes are recorded as one
  group, named after the function and a call counter ("fn n1", "fn n2"), or by `name(*args, ret=..., **kwargs)`.
  With `new_ctx=False` the function is instead one step of the group running: its first argument is the UOp it
  rewrites, its name the step's. Untracked, the function just runs."""
  def decorator(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
      if TRACK_MATCH_STATS.value < 2: return fn(*args, **kwargs)
      if not new_ctx: return _tracked_step(fn, args, kwargs)
      idx = _add_group(f"{fn.__name__} n{next(_name_cnt.setdefault(fn.__name__, itertools.count(1)))}")
      active_group.append(idx)
      try: ret = fn(*args, **kwargs)
      finally: active_group.pop()
      if callable(name):
        if not isinstance(named := name(*args, **kwargs, ret=ret), str):
          raise TypeError(f"rewrite_group: the name function of {fn.__name__} returned a {type(named).__name__}, "
                          "not a str")
        tracked_keys[idx] = tracked_keys[idx].replace(fn.__name__, named, 1)
      return ret
    return wrapper
  return decorator

def _tracked_step(fn: Callable, args: tuple, kwargs: dict) -> Any:
  """A rewrite_group(new_ctx=False) function's call: one tracked step of the running group, over args[0]."""
  if not args or not isinstance(args[0], UOp):
    raise AssertionError(f"invalid match tracing inputs for {fn.__name__}: its first argument must be the UOp it "
                         f"rewrites, got {args!r}")
  frame = sys._getframe(2)
  if not tracked_ctxs: _add_group("default")
  group = active_group[-1] if active_group else len(tracked_ctxs) - 1
  t = TrackedGraphRewrite((frame.f_code.co_filename, frame.f_lineno), args[0], [], str(kwargs.get("name") or
                          fn.__name__), len(active_rewrites), kwargs.get("bottom_up", False))
  tracked_ctxs[group].append(t)
  active_rewrites.append(t)
  try: return fn(*args, **kwargs)
  finally: active_rewrites.pop()

class TrackedPatternMatcher(PatternMatcher):
  """A PatternMatcher that counts, per rule, how often it was tried and fired and the time it took (match_stats:
  pattern -> [fired, tried, seconds not firing, seconds firing])."""
  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None: return self.rewrite_traced(u, ctx)[0]
  def rewrite_traced(self, u: UOp, ctx: Any = None) -> tuple[UOp | None, Callable[..., Any] | None]:
    for p, fn, mode in self.pdict.get(u.op, self._any):
      stats = match_stats.setdefault(p, [0, 0, 0.0, 0.0])
      stats[1] += 1
      t0 = time.perf_counter()
      ret = _rewrite_choices(p, fn, mode | 2, u, ctx)
      if ret is not None:
        stats[0] += 1
        stats[3] += time.perf_counter() - t0
        return ret, fn
      stats[2] += time.perf_counter() - t0
    return None, None

match_stats: dict[UPat, list[Any]] = {}

# tinygrad's name for the substitution rule table: ctx is the {node: replacement} dict
_substitute = PatternMatcher([(UPat(name="x"), lambda ctx, x: ctx.get(x))])
_substitute_pm = _substitute

def _substitute_walk(root: UOp, subs: dict[UOp, UOp], done: dict[UOp, UOp]) -> UOp:
  for n in root.toposort():
    if n in done: continue
    src = tuple([done[s] for s in n.src])
    nn = n if src == n.src else UOp(n.op, n.dtype, src, n.arg, n.tag)
    r = subs.get(nn)
    done[n] = nn if r is None or r is nn else _substitute_walk(r, subs, done)
  return done[root]

# ***** printing *****

_infix = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<", Ops.CMPNE: "!=",
          Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.FDIV: "/", Ops.SHL: "<<", Ops.SHR: ">>"}
def render_expr(u: UOp) -> str:
  memo: dict[UOp, str] = {}
  for n in u.toposort():
    if n.op is Ops.CONST: memo[n] = repr(n.arg)
    elif n.op is Ops.DEFINE_VAR: memo[n] = n.arg[0]
    elif n.op is Ops.BIND: memo[n] = memo[n.src[0]]
    elif n.op is Ops.RANGE: memo[n] = f"r{n.arg}"
    elif n.op is Ops.SPECIAL: memo[n] = n.arg[0]
    elif n.op in _infix: memo[n] = f"({memo[n.src[0]]}{_infix[n.op]}{memo[n.src[1]]})"
    elif n.op is Ops.MAX: memo[n] = f"max({memo[n.src[0]]}, {memo[n.src[1]]})"
    elif n.op is Ops.WHERE: memo[n] = f"({memo[n.src[1]]} if {memo[n.src[0]]} else {memo[n.src[2]]})"
    elif n.op is Ops.NEG: memo[n] = f"(-{memo[n.src[0]]})"
    else: memo[n] = f"{n.op.name.lower()}({', '.join(memo[s] for s in n.src)})"
  return memo[u]

def pretty_print(u: UOp, max_nodes: int = 60) -> str:
  nodes = list(u.toposort())
  if len(nodes) > max_nodes: return f"UOp({u.op}, {u.dtype}, arg={u.arg!r}, <{len(nodes)} nodes>)"
  ids = {n: i for i, n in enumerate(nodes)}
  lines = [f"  %{ids[n]} = {n.op.name} {n.dtype} {n.arg!r} [{', '.join(f'%{ids[s]}' for s in n.src)}]" for n in nodes]
  return "UOp(\n" + "\n".join(lines) + "\n)"

def print_graph(u: UOp) -> None: print(pretty_print(u, max_nodes=10**9))
def iter_nodes(u: UOp) -> Iterator[UOp]: return iter(u.toposort())
