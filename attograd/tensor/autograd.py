"""Autograd on Tensor: backward(), gradient(), requires_grad and the train() switch."""
from __future__ import annotations
import sys, weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar
from attograd.dtype import dtypes
from attograd.helpers import ALLOW_DEVICE_USAGE, TRAINING
from attograd.gradient import compute_gradient
from attograd.uop.build import full_like, reshape
from attograd.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite
from attograd.schedule.realized import lookup_realized
from attograd.engine.buffers import IOTA_TAG, buffers
from attograd.uop.state import ORIGIN, get, has
from attograd.engine import recorder
from attograd.tensor.buffer_views import view_root
from attograd.tensor.live import live_tensors
if TYPE_CHECKING: from attograd.tensor.core import Tensor

F = TypeVar("F", bound=Callable[..., Any])

# every live Tensor with requires_grad=True, by id: while there is one, a realized value remembers the graph that
# computed it (autograd_graph below). Keyed by id: Tensor.__eq__ is elementwise (a WeakSet would compare with it).
_grad_tensors: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()

class GradientSeedError(RuntimeError, AssertionError):
  """backward()/gradient() of a non-scalar output without a `gradient` to seed it. A RuntimeError as in PyTorch;
  also an AssertionError because tinygrad asserts it, and code ported from tinygrad catches that."""

class _Train:
  """`with Tensor.train():` or `@Tensor.train()`: sets the TRAINING flag (Tensor.training) for the block, then
  restores it; the same as `with Context(TRAINING=1):`."""
  def __init__(self, mode: bool = True): self.mode = mode
  def __enter__(self) -> None: self.prev, TRAINING.value = TRAINING.value, int(self.mode)
  def __exit__(self, typ: type[BaseException] | None, val: BaseException | None, tb: TracebackType | None) -> None:
    TRAINING.value = self.prev
  def __call__(self, fn: F) -> F:
    mode = self.mode
    def wrapper(*args: Any, **kwargs: Any) -> Any:
      with _Train(mode): return fn(*args, **kwargs)
    wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = fn.__name__, fn.__doc__, fn  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]

class StaleGradError(RuntimeError):
  """Reading a `.grad` backward() left lazy that an in-place write has since invalidated (see GradMixin.grad)."""

# what a tensor's _grad holds once its lazy gradient was dropped at an in-place write (drop_unheld_grad)
_DROPPED: Any = object()

class GradMixin:
  train = _Train
  _grad: Any = None  # a Tensor, None, or _DROPPED

  @property
  def grad(self: Tensor) -> Tensor | None:
    """The gradient backward() accumulated here (None before any). For a tensor the caller didn't mark with
    requires_grad=True it stays lazy; if an optimizer step (or another in-place write) then changes values it reads
    while nothing but this tensor holds it, it is dropped rather than computed, and reading it raises StaleGradError:
    computing it after the write would use the new values (tinygrad's answer), computing it at the write would cost
    a kernel each step for gradients nobody reads (a training batch's)."""
    g = self._grad
    if g is _DROPPED:
      raise StaleGradError(f"grad: the gradient of this tensor (shape {self.shape}) read values that an in-place write "
                           "(an optimizer step?) changed before it was computed, so it was dropped; read .grad before "
                           "that write, or set requires_grad=True on the tensor to have it computed then")
    return g
  @grad.setter
  def grad(self, g: Tensor | None) -> None: self._grad = g

  # ***** requires_grad *****
  @property
  def requires_grad(self) -> bool | None:
    """True: backward() fills this tensor's .grad. None (the default) and False: it doesn't."""
    return getattr(self, "_requires_grad", None)
  @requires_grad.setter
  def requires_grad(self, flag: bool | None) -> None:
    self._requires_grad = flag
    if not flag:
      _grad_tensors.pop(id(self), None)
      return
    _grad_tensors[id(self)] = self  # type: ignore[assignment]
    # UOps are hash-consed, so a tensor made of constants only (Tensor.ones(3)) is the very same graph as every equal
    # one, and gradients couldn't tell them apart: such a tensor gets a buffer of its own. (Not yet possible inside
    # Tensor.__init__, which sets requires_grad before the uop.)
    u = self.__dict__.get("uop")
    if u is not None and u.size and not _has_storage(u, {}):  # constants, aranges (their buffer is shared)
      _own_buffer(self)  # type: ignore[arg-type]
  def requires_grad_(self: Tensor, requires_grad: bool = True) -> Tensor:
    """Set requires_grad in place and return this tensor."""
    self.requires_grad = requires_grad
    return self
  @property
  def is_param(self) -> bool:
    """tinygrad's name: an optimizer updates this tensor (requires_grad None or True) rather than keeping it as a
    buffer (requires_grad False, as BatchNorm's running statistics)."""
    return self.requires_grad is not False
  def is_param_(self: Tensor, is_param: bool = True) -> Tensor:
    """tinygrad's marker: is_param_(False) is requires_grad_(False); is_param_(True) undoes that (requires_grad None)
    and leaves a tensor that already requires grad as it is."""
    if not is_param: self.requires_grad = False
    elif self.requires_grad is False: self.requires_grad = None
    return self

  # ***** gradients *****
  def gradient(self: Tensor, *targets: Tensor, gradient: Tensor | None = None,
               materialize_grads: bool = True) -> list[Tensor]:
    """The gradients of this tensor with respect to `targets`, as lazy Tensors (which can be differentiated again).
    A target this tensor doesn't depend on (or only through detach()) gets zeros, as in tinygrad;
    `materialize_grads=False` raises for it instead, as `torch.autograd.grad` does without `allow_unused`.
    `gradient` seeds the output; like tinygrad, it may differ from the output's shape by size-1 dims.

    >>> from attograd import Tensor
    >>> x = Tensor([1.0, 2.0, 3.0])
    >>> (x * x).sum().gradient(x)[0].tolist()
    [2.0, 4.0, 6.0]
    """
    for t in targets:
      if not dtypes.is_float(t.dtype): raise RuntimeError(f"gradient: only float tensors have gradients, not {t.dtype}")
      if _strip_views(t.uop).op is Ops.CONST:
        # hash-consing makes a constant the very node of every equal literal: (t * 2.0) with t = Tensor(2.0) uses
        # it twice, so its gradient would count the literal too
        raise RuntimeError(f"gradient: a target of shape {t.shape} is a constant, the same node as every equal "
                           "literal; give it storage with Tensor(..., requires_grad=True) or .requires_grad_()")
    if gradient is not None and gradient.shape != self.shape and _squeezed(gradient.shape) == _squeezed(self.shape):
      gradient = gradient.reshape(self.shape)
    by_current, root = _graph_index(self.uop)
    grads = _gradients(self, root, [_group(t.uop, by_current) for t in targets], [t.shape for t in targets], gradient)
    out: list[Tensor] = []
    for t, g in zip(targets, grads):
      if g is None:
        if not materialize_grads:
          raise RuntimeError(f"gradient: a target of shape {t.shape} is not in the output's graph (or only through "
                             "detach()); materialize_grads=True (the default) gives zeros")
        g = full_like(t.uop, 0)
      out.append(_grad_tensor(t, g))
    return out

  def backward(self: Tensor, gradient: Tensor | None = None) -> Tensor:
    """Add the gradient of this tensor to `.grad` of every tensor in its graph that can have one, as tinygrad does:
    every live float tensor, intermediates included, except a bare constant (`Tensor(2.0)`, `Tensor.ones(3)`: the very
    node of every equal literal) and a tensor with requires_grad=False. One the graph holds only under a detach()
    gets zeros.

    >>> from attograd import Tensor
    >>> w = Tensor([1.0, -2.0], requires_grad=True)
    >>> _ = (w * w).sum().backward()
    >>> w.grad.tolist()
    [2.0, -4.0]
    """
    by_current, root = _graph_index(self.uop)
    targets = _backward_targets()
    found = [(t, grp) for t in targets if (grp := _group(t.uop, by_current))]
    grads = _gradients(self, root, [grp for _, grp in found], [t.shape for t, _ in found], gradient)
    tensors = [t for t, _ in found]
    # a tensor the graph holds only under a detach() gets zeros, as in tinygrad: the output doesn't depend on it
    if (below := _below_detach(by_current)):
      filled = {id(t) for t, g in zip(tensors, grads) if g is not None}
      for t in targets:
        if id(t) not in filled and ((g := t._grad) is None or g is _DROPPED) and t.uop in below:
          t._grad = _grad_tensor(t, full_like(t.uop, 0))
    for t, g in zip(tensors, grads):
      if g is None: continue  # reached only through a detach(): handled above
      gt = _grad_tensor(t, g)
      # accumulate into the same .grad object, as PyTorch and tinygrad do: a reference taken earlier sees the sum
      if (old := t._grad) is None or old is _DROPPED:
        t._grad = old = gt
        # unasked for: an in-place write may drop it rather than compute it (see grad)
        if not t.requires_grad: gt._grad_of = weakref.ref(t)  # type: ignore[attr-defined]
      else: old.uop = (old + gt).uop
      old._is_grad = True  # a realized .grad doesn't keep the graph behind it
    return self

def _refs_when_owned(owner: dict[str, Any]) -> int:
  g = owner["_grad"]
  return sys.getrefcount(g)
# what sys.getrefcount shows for a gradient held by its tensor and one local variable (measured: a CPython detail)
_OWNED_REFS = _refs_when_owned({"_grad": object()})

def drop_unheld_grad(g: Tensor) -> bool:
  """Called by an in-place write for a lazy tensor `g` that reads what it writes, which would otherwise be computed
  now to keep its value: if `g` is the unasked-for gradient backward() gave a tensor and nothing but that tensor holds
  it, drop it (reading that .grad raises StaleGradError) and return True. The caller holds `g` in one local."""
  owner_ref = g.__dict__.get("_grad_of")
  if owner_ref is None or (owner := owner_ref()) is None or owner._grad is not g: return False
  if sys.getrefcount(g) - 1 > _OWNED_REFS: return False  # (-1: this call's own argument) someone else holds it
  owner._grad = _DROPPED
  return True

def _backward_targets() -> list[Tensor]:
  """The tensors backward() may fill .grad of: every live float tensor whose requires_grad isn't False and that isn't a
  bare constant (tinygrad has no requires_grad; its backward fills every live float tensor of the graph). Walking the
  registry here, once per backward(), costs nothing on the path of an op."""
  out: list[Tensor] = []
  for t in live_tensors():
    if t.requires_grad is False or not dtypes.is_float(t.dtype): continue
    if t.requires_grad or _strip_views(t.uop).op is not Ops.CONST: out.append(t)
  return out

def _has_storage(root: UOp, memo: dict[UOp, bool]) -> bool:
  """Whether `root`'s graph reads a buffer other than an arange's, or a copy of its own (clone(), contiguous(): a
  unique node), depth first: a parameter's answers at once."""
  stack, seen = [root], set()
  while stack:
    u = stack.pop()
    if (known := memo.get(u)) is not None:
      if known: break
      continue
    if (u.op is Ops.BUFFER and u.arg[2:] != (IOTA_TAG,)) or (u.op is Ops.CONTIGUOUS and u.arg is not None):
      memo[u] = True
      break
    if u in seen: continue
    seen.add(u)
    stack.extend(u.src)
  else:
    for u in seen: memo[u] = False
    return False
  memo[root] = True
  return True

def reaches_grad_tensor(u: UOp) -> bool:
  """Whether backward() through u reaches a tensor with requires_grad=True: u's graph holds its node, not under a
  detach() nor inside such a tensor's .grad (gradients are values here, not differentiated again), looking through
  the graphs realized values remember. An in-place write of such a value into a buffer would cut that path."""
  if not _grad_tensors: return False
  return _reaches(u, {t.uop for t in _grad_tensors.values()}, _grad_tensors.values())

def write_carries_grad(value: UOp, target: UOp) -> bool:
  """Whether backward() through `value`, written in place into the buffer under `target`, could fill the .grad of a
  tensor (any that backward() itself counts: a live float tensor, not a constant nor requires_grad=False) other
  than a view of that buffer, whose gradient comes from its own node. The write would cut that path unless the
  written tensor remembers value's graph (tensor/core.py's _remember_write)."""
  # (not while a TinyJit captures, whose replays repeat only the writes, nor in a @function body, which realizes
  # nothing: the copy old_values_for_grad may make can't run there)
  if recorder.active() is not None or not ALLOW_DEVICE_USAGE.value: return False
  root = view_root(target)
  buf = buffers.get(root)
  # (not the value's own tensor when it is a lazy result, such as the temporary of x[:2] += 1: its .grad would be
  # that of an expression, and keeping a graph only for it costs a copy for nothing)
  lazy_value = view_root(value).op is not Ops.BUFFER
  holders = [t for t in _backward_targets() if (r := view_root(t.uop)) is not root and
             (buf is None or buffers.get(r) is not buf) and not (lazy_value and t.uop is value)]
  return bool(holders) and _reaches(value, {t.uop for t in holders}, holders)

def _reaches(u: UOp, marked: set[UOp], owners: Iterable[Tensor]) -> bool:
  """Whether u's graph holds a node of `marked`, not under a detach() nor inside the .grad of one of `owners`."""
  stop = {g.uop for t in owners if (g := t._grad) is not None and g is not _DROPPED}
  seen: set[UOp] = set()
  stack = [u]
  while stack:
    if (n := stack.pop()) in seen or n in stop: continue
    if n in marked: return True
    seen.add(n)
    if n.op is Ops.DETACH: continue
    if (o := get(n, ORIGIN)) is not None: stack.append(o)
    stack.extend(n.src)
  return False

def write_keeps_grad_path(target: Tensor, value: UOp) -> bool:
  """Whether an in-place write of `value` into target's buffer should rebind target to the new graph instead: the
  value leads to a requires_grad tensor, whose gradient the write would cut, and rebinding can't be told from
  writing: no other live tensor views the buffer (it would miss the write), and no TinyJit is capturing (its replays
  repeat the writes it records)."""
  if recorder.active() is not None or not reaches_grad_tensor(value): return False
  return not buffer_shared(target)

def buffer_shared(target: Tensor) -> bool:
  """Whether another live tensor views what target views (its buffer: a write's new version node is another node
  over the same memory)."""
  base = view_root(target.uop)
  buf = buffers.get(base)
  return any(t is not target and ((r := view_root(t.uop)) is base or (buf is not None and buffers.get(r) is buf))
             for t in live_tensors())

def _below_detach(by_current: dict[UOp, list[UOp]]) -> set[UOp]:
  """The nodes under the DETACHes of a graph indexed by _graph_index (empty when it has none)."""
  below: set[UOp] = set()
  for d in [n for n in by_current if n.op is Ops.DETACH]: below.update(d.src[0].toposort())
  return below

# A realized tensor holds a view of its buffer; the graph that computed it is remembered on that view (while tensors
# with requires_grad exist), so backward() through a realized result (after loss.item(), or using a realized
# intermediate) still reaches the leaves. The graph's nodes resolve to their buffers when scheduled: nothing is
# computed twice.
_origin_pm = PatternMatcher([(UPat(name="x"), lambda x: get(x, ORIGIN))])

def autograd_graph(u: UOp, done: dict[UOp, UOp] | None = None) -> UOp:
  """`u` with every realized view that remembers its graph replaced by that graph (`done`: each node of u's graph to
  its form in the result)."""
  if not any(has(n, ORIGIN) for n in u.toposort()): return u
  return graph_rewrite(u, _origin_pm, done=done)

def _own_buffer(t: Tensor) -> None:
  # a unique CONTIGUOUS: a buffer of its own when realized, lazily, so a model's parameters are computed together
  # with what first reads them (an optimizer's state, the first forward pass): one schedule, their kernels built in
  # one batch, instead of a schedule and a compiler run each (MNIST's 10 initializers: 1.1 s of its first step)
  t.uop = t.contiguous().uop

def _graph_index(out: UOp) -> tuple[dict[UOp, list[UOp]], UOp]:
  """The graph backward() differentiates for `out` (autograd_graph), and each node of it that a gradient can reach
  (nothing under a DETACH) under its current form: itself, and the buffer view it was realized into since the graph
  was built (a realized tensor holds that view, while the graph still holds the node it came from, or that node's
  graph rebuilt over the graphs of realized views it read). A node seen only under a DETACH is not in the graph for
  _group: that used to hide the uses of a reshape of it (`t.reshape(a) + t.detach()` gave t a zero gradient)."""
  done: dict[UOp, UOp] = {}
  root = autograd_graph(out, done)
  by_current: dict[UOp, list[UOp]] = {}
  seen: dict[UOp, None] = {}
  stack = [root]
  while stack:
    if (n := stack.pop()) in seen: continue
    seen[n] = None
    if n.op is not Ops.DETACH: stack.extend(n.src)
  for n in seen:
    by_current.setdefault(n, []).append(n)
    if (r := lookup_realized(n)) is not None and r is not n: by_current.setdefault(r, []).append(n)
  for n, r in done.items():  # a realized view replaced by its graph, or a node rebuilt over one
    if r is not n and r in seen: by_current.setdefault(n, []).append(r)
  return by_current, root

def _strip_views(u: UOp) -> UOp:
  while u.op in (Ops.RESHAPE, Ops.EXPAND): u = u.src[0]
  return u

def _squeezed(shape: tuple) -> tuple:
  return tuple(s for s in shape if s != 1)

def _strip_reshapes(u: UOp) -> UOp:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u

def _group(u: UOp, by_current: dict[UOp, list[UOp]]) -> list[UOp]:
  """The graph nodes that hold the value of the tensor whose node is `u` (empty if it isn't used)."""
  cands = [u]
  # Tensor.reshape composes reshapes (x.reshape(a).reshape(b) is one RESHAPE of x), so a graph can use a reshaped
  # tensor through its source without holding its node. The source stands in for it when that source is the
  # tensor's own storage (a BUFFER), or when the tensor's node is missing from the graph altogether.
  if (b := _strip_reshapes(u)) is not u and (b.op is Ops.BUFFER or u not in by_current): cands.append(b)
  members = dict.fromkeys(n for c in cands for n in by_current.get(c, ()))
  # a reshape of another member passes its gradient on to that member: counting both would count it twice
  return [n for n in members if not _reshape_of_member(n, members)]

def _reshape_of_member(n: UOp, members: dict[UOp, None]) -> bool:
  while n.op is Ops.RESHAPE:
    if (n := n.src[0]) in members: return True
  return False

def _gradients(out: Tensor, root: UOp, groups: list[list[UOp]], shapes: list[tuple],
               gradient: Tensor | None) -> list[UOp | None]:
  """The gradient of `out` for each group of nodes, summed over the group and reshaped to `shapes`; None where no
  gradient flows."""
  cls = type(out)  # the Tensor class (this module is below tensor/core.py)
  if gradient is None:
    if out.shape != ():
      raise GradientSeedError(f"backward: the output has shape {out.shape}; need a scalar or `gradient`")
    gradient = cls(1.0, device=out.device, dtype=out.dtype)
  elif gradient.shape != out.shape:
    raise ValueError(f"backward: `gradient` has shape {gradient.shape} but the output has shape {out.shape}")
  if not dtypes.is_float(out.dtype): raise RuntimeError(f"backward: only float tensors have gradients, not {out.dtype}")
  seed = gradient.uop if gradient.dtype == out.dtype else gradient.cast(out.dtype).uop
  grads = compute_gradient(root, seed, {u for group in groups for u in group})
  ret: list[UOp | None] = []
  for group, shape in zip(groups, shapes):
    found = [reshape(grads[u], shape) for u in group if u in grads]
    ret.append(_sum_all(found) if found else None)
  return ret

def _sum_all(gs: list[UOp]) -> UOp:
  acc = gs[0]
  for g in gs[1:]: acc = acc + g
  return acc

def _grad_tensor(t: Tensor, g: UOp) -> Tensor:
  assert g.shape == t.shape, f"gradient shape {g.shape} != tensor shape {t.shape}"
  return type(t)(g if g.dtype == t.dtype else g.cast(t.dtype), device=t.device)

# ***** gradients through in-place writes *****
# A write into a realized buffer (x[:2] += y, x[:2] = y with x shared) keeps the buffer, so the graph of what was
# written is gone from the tensors' nodes. When backward() could reach a tensor through it (write_carries_grad), the
# written tensor takes a new version node of its buffer (same memory, its own identity) that remembers the graph as
# its ORIGIN, as a realized value does. That graph reads the buffer's old values where its gradient needs them
# (x *= y): those are copied first (old_values_for_grad), so backward() sees the values the write read.

# ops whose gradient with respect to an operand doesn't read that operand's values (WHERE: its two branches)
_LINEAR = {Ops.ADD, Ops.SUB, Ops.NEG, Ops.CAST, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY}

def old_values_for_grad(t: Tensor, graph: UOp) -> UOp:
  """`graph` (about to be written into t's buffer), with its reads of that buffer moved to a copy of the old values
  when its gradient needs them: a marker whose value is the copy's and whose gradient goes to the buffer's node."""
  buf = buffers.get(view_root(t.uop).base)
  reads: dict[UOp, bool] = {}
  def reads_buf(n: UOp) -> bool:
    if (r := reads.get(n)) is None:
      r = reads[n] = buffers.get(n) is buf if n.op is Ops.BUFFER else any(reads_buf(s) for s in n.src)
    return r
  def needs_values(n: UOp) -> bool:
    if n.op in _LINEAR or n.op in GroupOp.Movement or has(n, ORIGIN): return False
    if n.op is Ops.WHERE: return reads_buf(n.src[0])
    if n.op is Ops.REDUCE_AXIS and n.arg[0] is Ops.ADD: return False
    return any(reads_buf(s) for s in n.src)
  if buf is None or not any(needs_values(n) for n in graph.toposort()): return graph
  olds = {n for n in graph.toposort() if n.op is Ops.BUFFER and buffers.get(n) is buf}
  copy = type(t)(next(iter(olds))).clone()
  type(t)._realize_all([copy], keep_graph=False)  # (its value is the copy's: no graph to go back to)
  # (not substitute: it would substitute inside the markers too, which hold the nodes they replace)
  return graph_rewrite(graph, _no_rules, done={o: UOp(Ops.CUSTOM_GRAD, o.dtype, (copy.uop, o), ("old_values",))
                                                for o in olds})

_no_rules = PatternMatcher([])
