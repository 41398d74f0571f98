"""Tensor.as_param and Tensor.call (tinygrad's): a body written with Tensor ops over placeholders of its arguments,
then applied to the arguments. attograd has no CALL node: call() puts the arguments where the placeholders were, so
the result is the graph the body would have built on them (scheduled, cached and differentiated as such)."""
from __future__ import annotations
import weakref
from typing import TYPE_CHECKING, Any, Callable
from attograd.gradient import register_custom_grad
from attograd.dtype import AddrSpace, dtypes
from attograd.uop import build
from attograd.uop.ops import CallInfo, Ops, UOp
if TYPE_CHECKING: from attograd.tensor.core import Tensor

# each placeholder's node -> its slot: the BUFFER under a one-device placeholder (views of it fold into views of the
# buffer), the MULTI node of a sharded one
_slots: weakref.WeakKeyDictionary[UOp, int] = weakref.WeakKeyDictionary()

class FunctionCall:
  """What a tinygrad-style `grad_fxn(*grads, call)` gets as `call`: `src` is (the body's value, *the argument
  Tensors), as the sources of tinygrad's CALL node are (body, *arguments)."""
  def __init__(self, src: tuple[Tensor, ...], name: str):
    self.src, self.name = src, name
  def __repr__(self) -> str: return f"FunctionCall({self.name}, {len(self.src) - 1} argument(s))"

def tinygrad_style(grad_fxn: Callable[..., Any], n_outputs: int, n_inputs: int) -> bool:
  """Whether grad_fxn takes tinygrad's (*grads, call) rather than attograd's (*grads, *inputs): exactly one
  positional parameter past the gradients, and either not one input or that parameter named `call`."""
  import inspect
  try: params = list(inspect.signature(grad_fxn).parameters.values())
  except (TypeError, ValueError): return False
  if any(p.kind is p.VAR_POSITIONAL for p in params): return False
  pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  return len(pos) == n_outputs + 1 and (n_inputs != 1 or pos[-1].name == "call")

def grads_of(name: str, got: Any, inputs: list[Tensor], cls: type[Tensor]) -> list[UOp | None]:
  """grad_fxn's answer as one gradient UOp (or None) per input, each checked against its input's shape; a UOp
  answer (tinygrad's grad_fxn works on UOps) is taken as a Tensor of it."""
  grads = tuple(got) if isinstance(got, (tuple, list)) else (got,)
  if len(grads) != len(inputs):
    raise ValueError(f"function {name}: grad_fxn returned {len(grads)} gradients for {len(inputs)} inputs")
  out: list[UOp | None] = []
  for g, x in zip(grads, inputs):
    if isinstance(g, UOp): g = cls(g)
    if g is None: out.append(None)
    elif not isinstance(g, cls) or g.shape != x.shape:
      raise ValueError(f"function {name}: grad_fxn's gradient for an input of shape {x.shape} is "
                       f"{g.shape if isinstance(g, cls) else type(g).__name__}; expected a Tensor of that shape")
    else: out.append(g.cast(x.dtype).uop)
  return out

def _call_grad_rule(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
  """CUSTOM_GRAD("call", grad_fxn, cls): sources (value, *arguments); grad_fxn(grad, call) as in tinygrad."""
  _, grad_fxn, cls = ret.arg
  args = [cls(u) for u in ret.src[1:]]
  return (None, *grads_of("call", grad_fxn(cls(ctx), FunctionCall((cls(ret.src[0]), *args), "call")), args, cls))
register_custom_grad("call", _call_grad_rule)

def _kernel_grad_rule(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
  """CUSTOM_GRAD("custom_kernel", grad_fxn, call, i, cls): sources (the kernel's output i, *its arguments); tinygrad's
  grad_fxn(grad, call), call.src[1:] the arguments, giving one gradient (or None) per argument. A grad_fxn of several
  gradients, grad_fxn(*grads, call), gets one per buffer the kernel writes (in argument order): this output's, zeros
  for the others; the rules of the outputs add up to grad_fxn of all their gradients (a gradient is linear)."""
  _, grad_fxn, call, i, cls = ret.arg
  args = [cls(u) for u in ret.src[1:]]
  if (n := _n_grads(grad_fxn)) <= 1: got = grad_fxn(ctx, call)
  else:
    written = sorted({p.arg.slot for st in call.src[0].toposort() if st.op is Ops.STORE for p in st.src[0].toposort()
                      if p.op is Ops.PARAM and p.arg.addrspace is AddrSpace.GLOBAL})
    if len(written) != n or i not in written:
      raise ValueError(f"custom_kernel: grad_fxn takes {n} gradients, but the kernel writes {len(written)} of its "
                       f"tensors ({written}) and output {i} is {'not ' if i not in written else ''}one of them")
    got = grad_fxn(*[ctx if s == i else build.zeros_like(call.src[1 + s]) for s in written], call=call)
  return (None, *grads_of("custom_kernel", got, args, cls))

def _no_grad_rule(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
  raise RuntimeError("gradient: a hand-written kernel (Tensor.custom_kernel) has no gradient of its own; pass "
                     "grad_fxn=, which gives one gradient (or None) per tensor")
register_custom_grad("custom_kernel_no_grad", _no_grad_rule)

def _n_grads(grad_fxn: Callable[..., Any]) -> int:
  """How many gradients a tinygrad-style grad_fxn(*grads, call) takes (1 when its signature can't be read)."""
  import inspect
  try: params = list(inspect.signature(grad_fxn).parameters.values())
  except (TypeError, ValueError): return 1
  return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) - 1
register_custom_grad("custom_kernel", _kernel_grad_rule)

class CallMixin:
  def as_param(self: Tensor, slot: int) -> Tensor:  # type: ignore[misc]
    """A placeholder for argument `slot` of a Tensor.call, with this tensor's shape, dtype and device: build the
    body with Tensor ops on placeholders, then `Tensor.call(*args, fxn=body)` applies it to the arguments.

    >>> from attograd import Tensor
    >>> a, b = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
    >>> Tensor.call(a, b, fxn=a.as_param(0) * b.as_param(1) + 1).tolist()
    [4.0, 9.0]
    """
    if not isinstance(slot, int) or isinstance(slot, bool) or slot < 0:
      raise ValueError(f"as_param: slot must be an int >= 0, not {slot!r}")
    ph = type(self).empty(*self.shape, dtype=self.dtype, device=self.device)
    _slots[ph.uop if ph.uop.op is Ops.MULTI else ph.uop.base] = slot
    return ph

  def custom_kernel(self: Tensor, *args: Tensor, fxn: Callable[..., UOp],  # type: ignore[misc]
                    grad_fxn: Callable[..., Any] | None = None) -> list[Tensor]:
    """A kernel written by hand in UOps, run over (self, *args): `fxn(*placeholders)` gets one placeholder per
    tensor (slot i, its shape and dtype) and returns the kernel body, a SINK (docs/tutorials/custom-kernel.md). Returns
    each tensor as it is after the kernel ran, in order; nothing runs before one of them is realized. The kernel runs
    once, as one kernel, over the tensors' buffers (a tensor that isn't a whole buffer yet is computed into one
    first), and writes what its stores write in place. `grad_fxn(grad, call)` gives the gradients, tinygrad's way:
    `call.src[1:]` are the tensors' UOps, and it returns one gradient (or None) per tensor.

    >>> from attograd import Tensor, UOp
    >>> from attograd.uop.ops import KernelInfo
    >>> def add_one(out: UOp, x: UOp) -> UOp:
    ...   i = UOp.range(x.shape[0], 0)
    ...   return out[i].store(x[i] + 1).end(i).sink(arg=KernelInfo(name="add_one"))
    >>> Tensor.empty(3).custom_kernel(Tensor([1.0, 2.0, 3.0]), fxn=add_one)[0].tolist()
    [2.0, 3.0, 4.0]
    """
    cls, lst = type(self), (self, *args)
    for t in lst:
      if not isinstance(t, cls): raise TypeError(f"custom_kernel: its arguments are Tensors, not {type(t).__name__}")
    if len({t.device for t in lst}) > 1:
      raise ValueError(f"custom_kernel: its tensors are on different devices ({', '.join(str(t.device) for t in lst)})"
                       "; a kernel runs on one device, or on each device of several with every tensor on all of them")
    body = fxn(*[t.uop.placeholder_like(i) for i, t in enumerate(lst)])
    if not isinstance(body, UOp) or body.op not in (Ops.SINK, Ops.PROGRAM):
      raise TypeError(f"custom_kernel: fxn returns the kernel body, a SINK UOp (.sink(arg=KernelInfo(...))), not "
                      f"{type(body).__name__ if not isinstance(body, UOp) else body.op}")
    k = UOp(Ops.CALL, dtypes.void, (body, *[t.uop for t in lst]), CallInfo(grad_fxn, "custom_kernel"))
    outs = [t.uop.after(k) for t in lst]
    if grad_fxn is not None:
      outs = [UOp(Ops.CUSTOM_GRAD, o.dtype, (o, *k.src[1:]), ("custom_kernel", grad_fxn, k, i, cls))
              for i, o in enumerate(outs)]
    else:  # a backward() through it says what is missing
      outs = [UOp(Ops.CUSTOM_GRAD, o.dtype, (o, *k.src[1:]), ("custom_kernel_no_grad",)) for o in outs]
    return [cls(o) for o in outs]

  def call(self: Tensor, *args: Tensor, fxn: Tensor, grad_fxn: Callable[..., Any] | None = None) -> Tensor:  # type: ignore[misc]
    """`fxn`, a body built on placeholders (as_param(i)), applied to (self, *args): placeholder i reads argument i.
    The gradient flows through the body unless `grad_fxn(grad, call)` gives it: one gradient (or None) per
    argument, with `call.src` = (the body's value, *the arguments) as in tinygrad."""
    cls, lst = type(self), (self, *args)
    if isinstance(fxn, UOp):
      raise TypeError("call: fxn is a UOp; attograd builds the body with Tensor ops: arg.as_param(i) for argument i")
    subs: dict[UOp, UOp] = {}
    for n in fxn.uop.toposort():
      if (slot := _slots.get(n)) is None: continue
      if slot >= len(lst): raise IndexError(f"call: the body reads argument {slot} but got {len(lst)} argument(s)")
      a = lst[slot]
      want = (n.shape, n.dtype, n.device) if n.op is Ops.MULTI else (None, n.dtype, n.device)
      if a.dtype != n.dtype or a.device != n.device or (want[0] is not None and a.shape != want[0]) or \
         (want[0] is None and a.numel() != n.arg[1]):
        raise ValueError(f"call: argument {slot} is {a.shape} {a.dtype} on {a.device}, its placeholder was made "
                         f"for {n.dtype} on {n.device}" + (f" of shape {n.shape}" if want[0] is not None else ""))
      subs[n] = a.uop if n.op is Ops.MULTI else build.reshape(a.uop, (a.numel(),))
    out = cls(fxn.uop.substitute(subs))
    if grad_fxn is not None:
      out = cls(UOp(Ops.CUSTOM_GRAD, out.dtype, (out.uop, *[a.uop for a in lst]), ("call", grad_fxn, cls)))
    return out
