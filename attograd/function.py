"""The `@function` decorator (tinygrad 0.14's `from tinygrad import function`): a function of Tensors whose body is
traced without touching a device, whose inputs are the Tensors in its arguments, and which may carry its own
gradient."""
from __future__ import annotations
import functools, time
from typing import Any, Callable, Generic, TypeVar, overload
from attograd.dtype import dtypes
from attograd.helpers import DEBUG, Context, dedup
from attograd.gradient import register_custom_grad
from attograd.nn.state import get_state_dict
from attograd.tensor import Tensor
from attograd.tensor.call import FunctionCall, grads_of, tinygrad_style
from attograd.uop.ops import Ops, UOp

R = TypeVar("R")

def _input_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Tensor]:
  return list({id(t): t for t in get_state_dict((args, kwargs)).values()}.values())

def _implicit_buffers(outs: list[UOp], explicit: set[UOp]) -> list[UOp]:
  """The BUFFERs the outputs read that are not part of an explicit input: a value the body captured from outside.
  As in tinygrad, a pending computation from outside (an assign or contiguous not made from the inputs) may be
  captured; only already-made buffers count."""
  found: list[UOp] = []
  seen: set[UOp] = set()
  stack = list(outs)
  while stack:
    u = stack.pop()
    if u in seen or u in explicit or u.op is Ops.DEVICE: continue
    seen.add(u)
    if u.op is Ops.BUFFER:
      # memory not allocated yet (a Tensor.empty or invalids the body made, for a custom kernel to write) is no value
      # captured from outside
      if u.realized is not None: found.append(u)
      continue
    if u.op in (Ops.ASSIGN, Ops.CONTIGUOUS) and not any(n in explicit for n in u.toposort()): continue
    stack.extend(u.src)
  return found

def _function_grad_rule(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
  """CUSTOM_GRAD("function", name, grad_fxn, i, outs, tinygrad_style): sources (value, *inputs), the function's output
  i of `outs` (their shapes and dtypes). grad_fxn gets one gradient per output, this one's and zeros for the others,
  then the inputs (attograd's grad_fxn(*grads, *inputs)) or the call (tinygrad's grad_fxn(*grads, call), call.src =
  (value, *inputs)); it gives each input's gradient (None for none). A gradient is linear in the outputs' gradients,
  so the rules of the outputs together add up to grad_fxn of all their gradients."""
  _, name, grad_fxn, i, outs, tiny = ret.arg
  inputs = [Tensor(u) for u in ret.src[1:]]
  out_grads = [Tensor(ctx) if j == i else Tensor.zeros(*shape, dtype=dtype, device=ctx.device)
               for j, (shape, dtype) in enumerate(outs)]
  rest = [FunctionCall((Tensor(ret.src[0]), *inputs), name)] if tiny else inputs
  return (None, *grads_of(name, grad_fxn(*out_grads, *rest), inputs, Tensor))
register_custom_grad("function", _function_grad_rule)
# CUSTOM_GRAD("function_inputs"): sources (value, *detached inputs) keep a function's inputs in its outputs' graphs
# (detached: the gradient flows only through the value), so backward() gives an input the body never read zeros,
# as in tinygrad, where every input is an argument of the call
register_custom_grad("function_inputs", lambda ctx, ret: (ctx,) + (None,) * (len(ret.src) - 1))

class _function(Generic[R]):
  depth = 0  # how many @function bodies are being traced right now (nested calls)
  def __init__(self, fxn: Callable[..., R], *, precompile: bool, precompile_backward: bool, allow_implicit: bool,
               grad_fxn: Callable[..., Any] | None):
    self.fxn, self.allow_implicit, self.grad_fxn = fxn, allow_implicit, grad_fxn
    # attograd caches each graph's schedule and each kernel's program on first use, so every function's body is
    # compiled once whether or not these ask for it up front
    self.precompile, self.precompile_backward = precompile, precompile_backward
    self.name = getattr(fxn, "__qualname__", None) or type(fxn).__qualname__
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]
  def __get__(self, obj: Any, objtype: Any = None) -> Any:
    return functools.partial(self.__call__, obj) if obj is not None else self

  def __call__(self, *args: Any, **kwargs: Any) -> R:
    st = time.perf_counter()
    inputs = _input_tensors(args, kwargs)
    # the inputs and the buffers they read: views of an input merge into views of its buffer, skipping its own node
    explicit = {u for t in inputs for u in (t.uop, *(n for n in t.uop.toposort() if n.op is Ops.BUFFER))}
    _function.depth += 1
    try:
      with Context(ALLOW_DEVICE_USAGE=0): ret = self.fxn(*args, **kwargs)
    finally: _function.depth -= 1
    outs: list[Tensor]
    if isinstance(ret, Tensor): outs = [ret]
    elif isinstance(ret, tuple) and ret and all(isinstance(x, Tensor) for x in ret): outs = list(ret)
    else:
      raise RuntimeError(f"function {self.name}: must return a Tensor or a tuple of Tensors, got {type(ret).__name__}")
    if not self.allow_implicit and (imp := dedup(_implicit_buffers([t.uop for t in outs], explicit))):
      lines = "\n  ".join(f"{i}: dtype={b.dtype}, size={b.arg[1]}, device={b.device}" for i, b in enumerate(imp))
      raise RuntimeError(f"function {self.name} reads {len(imp)} buffer(s) that are not among its arguments' Tensors "
                         f"(pass them in, or use @function(allow_implicit=True)):\n  {lines}")
    if self.grad_fxn is not None:
      spec = tuple((t.shape, t.dtype) for t in outs)
      srcs, tiny = [x.uop for x in inputs], tinygrad_style(self.grad_fxn, len(outs), len(inputs))
      outs = [Tensor(UOp(Ops.CUSTOM_GRAD, t.dtype, (t.uop, *srcs), ("function", self.name, self.grad_fxn, i, spec,
                                                                      tiny))) for i, t in enumerate(outs)]
    else:
      # inputs the body never read: kept (detached) in every output's graph, so backward() gives them zeros
      read = {n for t in outs for n in t.uop.toposort()}
      if (unread := [x.uop for x in inputs if x.uop not in read and dtypes.is_float(x.dtype)]):
        detached = tuple(UOp(Ops.DETACH, u.dtype, (u,)) for u in unread)
        outs = [Tensor(UOp(Ops.CUSTOM_GRAD, t.dtype, (t.uop, *detached), ("function_inputs",))) for t in outs]
    ret = outs[0] if isinstance(ret, Tensor) else tuple(outs)  # type: ignore[assignment]
    if DEBUG >= 2:
      print("  " * _function.depth + f"function {self.name} traced in {(time.perf_counter() - st) * 1e3:8.2f} ms")
    return ret

@overload
def function(fxn: Callable[..., R], *, precompile: bool = False, precompile_backward: bool = False,
             allow_implicit: bool = False, grad_fxn: Callable[..., Any] | None = None) -> _function[R]: ...
@overload
def function(fxn: None = None, *, precompile: bool = False, precompile_backward: bool = False,
             allow_implicit: bool = False,
             grad_fxn: Callable[..., Any] | None = None) -> Callable[[Callable[..., R]], _function[R]]: ...
def function(fxn: Callable[..., R] | None = None, *, precompile: bool = False, precompile_backward: bool = False,
             allow_implicit: bool = False, grad_fxn: Callable[..., Any] | None = None) -> Any:
  """Decorate a function (or method) of Tensors: `@function` or `@function(allow_implicit=True)`.

  The body is traced, never run on a device: realizing inside it raises. Its inputs are the Tensors found in its
  arguments (for a method, in `self` too: a model's weights). A body that reads another, already-made Tensor from
  outside raises unless allow_implicit=True, so a function's inputs are what its call says; one the body never reads
  gets a zero gradient. `grad_fxn(grad, *inputs)` (for a tuple of outputs `grad_fxn(*grads, *inputs)`, zeros for an
  output the loss doesn't use) replaces the body's gradient: it returns one gradient (or None) per input Tensor, in
  the order they appear in the arguments. tinygrad's form `grad_fxn(*grads, call)` works too (one parameter past the
  gradients, named `call` when there is one input): `call.src` is (the body's value, *the inputs), as Tensors.
  precompile and precompile_backward are accepted as in tinygrad: attograd compiles each body's kernels
  once on first use and caches them by graph structure either way.

  >>> from attograd import Tensor
  >>> @function
  ... def f(a: Tensor, b: Tensor) -> Tensor: return a * 2 + b
  >>> f(Tensor([1, 2]), Tensor([3, 4])).tolist()
  [5, 8]
  """
  def make(f: Callable[..., R]) -> _function[R]:
    return _function(f, precompile=precompile, precompile_backward=precompile_backward, allow_implicit=allow_implicit,
                     grad_fxn=grad_fxn)
  return make if fxn is None else make(fxn)
