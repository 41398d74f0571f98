"""Optimizers (SGD, Adam, AdamW, LAMB, LARS, Muon): one step updates every parameter and its state in a single realize.

A step is planned as lazy in-place writes (ASSIGN nodes) of all parameters and state, scheduled and run together;
`lr` is a tensor, so changing it between steps reuses the compiled kernels.
"""
from __future__ import annotations
from typing import Any, Callable, Sequence
from attograd.dtype import dtypes, least_upper_dtype
from attograd.helpers import TRAINING
from attograd.tensor import Tensor
from attograd.tensor.writes import WritePlan, own_buffers, realize_writes

def _dedup(ts: Sequence[Tensor]) -> list[Tensor]:
  # by identity: Tensor.__eq__ is elementwise
  return list({id(t): t for t in ts}.values())

def _on_device_of(x: Tensor, t: Tensor) -> Tensor:
  """x moved to t's device(s), split as t is when t is sharded."""
  if x.device == t.device: return x
  return x.shard(t.device, t.uop.axis) if isinstance(t.device, tuple) else x.to(t.device)

def _check_hyper(opt: str, **values: float) -> None:
  """Refuse negative hyperparameters (a negative lr or decay climbs the loss), as PyTorch's optimizers do."""
  for name, v in values.items():
    if isinstance(v, (int, float)) and v < 0: raise ValueError(f"{opt}: {name} must be >= 0, got {v}")

# ***** the optimizers *****

class Optimizer:
  """The base class: the parameters, a learning rate tensor, zero_grad() and step(). Subclasses write `_step`.

  Parameters with requires_grad None are switched to True; those with False are kept in `buffers` and not updated.
  """
  def __init__(self, params: Sequence[Tensor], lr: float | Tensor):
    if not hasattr(self, "_step") and type(self)._plan_step is Optimizer._plan_step:
      raise TypeError(f"{type(self).__name__}: an optimizer subclass defines _step (the update of each parameter); "
                      "use SGD, Adam, AdamW, LAMB or LARS, or write one")
    _check_hyper(type(self).__name__, lr=lr if isinstance(lr, (int, float)) else 0.0)
    params = list(params)
    for x in params:
      if x.requires_grad is None: x.requires_grad = True
    self.params: list[Tensor] = _dedup([x for x in params if x.requires_grad])
    if not self.params: raise ValueError("optimizer: no parameters with requires_grad to optimize (got an empty list "
                                         "or only requires_grad=False tensors)")
    self.buffers: list[Tensor] = _dedup([x for x in params if not x.requires_grad])
    self.device = self.params[0].device
    # a (1,) tensor like tinygrad's, at least float32: a new lr is written into it, so the step isn't recompiled
    lr_dtype = least_upper_dtype(dtypes.default_float, dtypes.float32)
    if isinstance(lr, Tensor):
      if lr.numel() != 1: raise ValueError(f"optimizer: lr must be a single value, got a tensor of shape {lr.shape}")
      self.lr = lr.reshape(1).cast(lr_dtype).to(self.device)
    else: self.lr = Tensor([lr], device=self.device, dtype=lr_dtype)
  def __setattr__(self, name: str, value: Any) -> None:
    # `opt.lr = 0.01` writes into the existing lr tensor rather than replacing it: a replaced Python float would be
    # baked into the kernels (a recompile per change), and a replaced tensor would be missed by a captured step
    if name == "lr" and isinstance(self.__dict__.get("lr"), Tensor):
      lr: Tensor = self.__dict__["lr"]
      new = value if isinstance(value, Tensor) else Tensor([value], device=lr.device, dtype=lr.dtype)
      if new.numel() != 1: raise ValueError(f"optimizer: lr must be a single value, got a tensor of shape {new.shape}")
      lr.assign(new.reshape(lr.shape).cast(lr.dtype).to(lr.device))
      return
    super().__setattr__(name, value)
  def _new_optim_param(self) -> list[Tensor]:
    """A zero state tensor per parameter (a constant until _realize_state gives it a buffer)."""
    return [Tensor.zeros(*t.shape, dtype=t.dtype, device=t.device) for t in self.params]
  def _realize_state(self, *state: Tensor) -> None: own_buffers([self.lr, *self.params, *state])

  def zero_grad(self) -> None:
    """Forget the gradients: the next backward() sets .grad afresh instead of adding to it."""
    for p in self.params: p.grad = None
  def step(self) -> None:
    """Update every parameter from its .grad. The whole update is one realize (a few kernels per parameter).

    Parameters whose .grad is None are skipped, as in PyTorch. Read (or realize) the loss before step(): a lazy loss
    computed afterwards would see the new weights. `loss.realize(*opt.schedule_step())` does both in one go.
    """
    realize_writes(self.schedule_step())
  def schedule_step(self) -> list[Tensor]:
    """The lazy tensors that perform one step when realized together (the parameters refer to their updated
    buffers at once). Realize them first thing, before other work that reads the parameters."""
    if not TRAINING:
      raise RuntimeError(f"{type(self).__name__}.step: TRAINING is {TRAINING.value}, and an optimizer steps only in "
                         "training (so that evaluation code can't change the weights); wrap the training step in "
                         "`with Context(TRAINING=1):` or `with Tensor.train():`")
    plan = WritePlan()
    self._plan_step(plan)
    return self.buffers + plan.tensors()  # lazy buffers (state the forward pass left) see the weights before the step
  def _plan_step(self, plan: WritePlan) -> None:
    self._realize_state()  # only does something if a parameter was rebound to a lazy value since the last step
    items = [(i, p, p.grad) for i, p in enumerate(self.params) if p.grad is not None]
    if not items: raise RuntimeError("step: no parameter has a .grad; call loss.backward() before opt.step()")
    todo = [(i, p, plan.grad(p, g)) for i, p, g in items]
    for (_, p, _), update in zip(todo, self._step(plan, todo)):
      plan.assign(p, p.detach() - update)
  # subclasses define `_step(plan, todo) -> list[Tensor]`: the amount to subtract from each parameter, given
  # (index in self.params, parameter, gradient) triples; state is written with plan.assign, whose result reads the
  # new value. (OptimizerGroup plans its members' steps instead.)
  _step: Callable[[WritePlan, list[tuple[int, Tensor, Tensor]]], list[Tensor]]

class OptimizerGroup(Optimizer):
  """Several optimizers stepped as one (e.g. different learning rates for two parts of a model); one realize per step.

  >>> from attograd import Tensor
  >>> a, b = Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)
  >>> opt = OptimizerGroup(SGD([a], lr=0.1), SGD([b], lr=0.5))
  >>> a.grad, b.grad = Tensor([1.0]), Tensor([1.0])
  >>> with Tensor.train(): opt.step()
  >>> [round(a.item(), 6), round(b.item(), 6)]
  [0.9, 0.5]
  """
  def __init__(self, *optimizers: Optimizer):
    if not optimizers: raise ValueError("OptimizerGroup: needs at least one optimizer")
    self.optimizers = optimizers
    self.params = [p for o in optimizers for p in o.params]
    self.buffers = [b for o in optimizers for b in o.buffers]
    self.device = self.params[0].device
  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()
  def _plan_step(self, plan: WritePlan) -> None:
    for o in self.optimizers: o._plan_step(plan)

class LARS(Optimizer):
  """SGD with momentum and layer-wise adaptive rate scaling (You et al. 2017): each layer's step is scaled by
  tcoef * |w| / (|g| + weight_decay * |w|). tcoef=0 turns the scaling off (that is SGD).

  classic=True is Sutskever momentum (lr inside the momentum buffer: b = m*b + lr*g; w -= b); classic=False is
  PyTorch's (b = m*b + g; w -= lr*b). Weight decay is added to the gradient first.
  """
  def __init__(self, params: Sequence[Tensor], lr: float | Tensor = 0.001, momentum: float = 0.9,
               weight_decay: float = 1e-4, nesterov: bool = False, classic: bool = True, tcoef: float = 0.001):
    super().__init__(params, lr)
    _check_hyper(type(self).__name__, momentum=momentum, weight_decay=weight_decay)
    if nesterov and momentum <= 0:
      raise ValueError(f"{type(self).__name__}: nesterov needs momentum > 0, got momentum={momentum}")
    self.momentum, self.wd, self.nesterov, self.classic, self.tcoef = momentum, weight_decay, nesterov, classic, tcoef
    self.b = self._new_optim_param() if self.momentum else []
    self._realize_state(*self.b)
  def _step(self, plan: WritePlan, todo: list[tuple[int, Tensor, Tensor]]) -> list[Tensor]:
    lr = self.lr.reshape(())
    ret = []
    for i, t, g in todo:
      w = t.detach()
      r: Tensor | float = 1.0
      if self.tcoef != 0:
        r1, r2 = w.square().sum().sqrt(), g.square().sum().sqrt()
        # a zero weight or gradient norm leaves the step unscaled
        r = (r1 > 0).where((r2 > 0).where(self.tcoef * r1 / (r2 + self.wd * r1), 1.0), 1.0)
      if self.wd != 0: g = g + self.wd * w
      scale = lr if self.tcoef == 0 else r * lr
      if self.classic: g = g * scale
      if self.momentum:
        b = plan.assign(self.b[i], self.momentum * self.b[i] + g)  # the first step gives b = g, like PyTorch
        g = g + self.momentum * b if self.nesterov else b
      if not self.classic: g = g * scale
      ret.append(g)
    return ret

class SGD(LARS):
  """Stochastic gradient descent, optionally with momentum (PyTorch's kind by default), Nesterov momentum and L2
  weight decay.

  >>> from attograd import Tensor
  >>> w = Tensor([1.0, 2.0], requires_grad=True)
  >>> opt = SGD([w], lr=0.1)
  >>> w.grad = Tensor([1.0, -1.0])
  >>> with Tensor.train(): opt.step()
  >>> [round(v, 6) for v in w.tolist()]
  [0.9, 2.1]
  """
  def __init__(self, params: Sequence[Tensor], lr: float | Tensor = 0.001, momentum: float = 0.0,
               weight_decay: float = 0.0, nesterov: bool = False, classic: bool = False):
    super().__init__(params, lr, momentum, weight_decay, nesterov, classic, tcoef=0.0)

def newton_schulz(x: Tensor, steps: int, coefficients: Sequence[float], eps: float = 1e-7) -> Tensor:
  """Approximately orthogonalize the last two dims of `x` (push every singular value towards 1, keeping the singular
  vectors): scale x to unit Frobenius norm, then `steps` times apply the odd polynomial
  X <- c0*X + c1*(X X^T) X + c2*(X X^T)^2 X + ... (tinygrad's Tensor.newton_schulz). A tall matrix is done transposed,
  so X X^T is the smaller Gram matrix."""
  if x.ndim < 2: raise ValueError(f"newton_schulz: needs a matrix (2 or more dims), got shape {x.shape}")
  if x.shape[-2] > x.shape[-1]: return newton_schulz(x.transpose(-2, -1), steps, coefficients, eps).transpose(-2, -1)
  g = x / (x.square().sum(axis=(-2, -1), keepdim=True).sqrt() + eps)
  for _ in range(steps):
    gram = g @ g.transpose(-2, -1)
    term, out = g, coefficients[0] * g
    for c in coefficients[1:]:
      term = gram @ term
      out = out + c * term
    g = out
  return g

class Muon(Optimizer):
  """MomentUm Orthogonalized by Newton-Schulz (Jordan et al. 2024), with tinygrad 0.14's semantics and defaults: the
  Nesterov momentum of the gradient is orthogonalized by `ns_steps` Newton-Schulz iterations (see newton_schulz), then
  w <- w * (1 - lr * weight_decay) - lr * update. Each parameter is seen as a matrix (shape[0], rest): a conv weight
  by its output channels, a vector as a column. ns_coefficients=None skips the orthogonalization; momentum=0 turns
  momentum (and so nesterov) off.

  >>> from attograd import Tensor
  >>> w = Tensor([[3.0, 0.0], [0.0, 1.0]], requires_grad=True)
  >>> opt = Muon([w], lr=0.1, momentum=0.0, weight_decay=0.0)
  >>> w.grad = Tensor([[2.0, 0.0], [0.0, 1.0]])
  >>> with Tensor.train(): opt.step()
  >>> [[round(v, 1) for v in row] for row in w.tolist()]  # both directions take a step of about lr: orthogonalized
  [[2.9, 0.0], [0.0, 0.9]]
  """
  def __init__(self, params: Sequence[Tensor], lr: float | Tensor = 0.001, momentum: float = 0.95,
               weight_decay: float = 0.1, ns_steps: int = 5,
               ns_coefficients: Sequence[float] | None = (3.4445, -4.775, 2.0315), nesterov: bool = True):
    if momentum < 0: raise ValueError(f"Muon: momentum must be >= 0, got {momentum}")
    if weight_decay < 0: raise ValueError(f"Muon: weight_decay must be >= 0, got {weight_decay}")
    if type(ns_steps) is not int or ns_steps < 0:
      raise ValueError(f"Muon: ns_steps must be an int >= 0, got {ns_steps!r}")
    if ns_coefficients is not None and (len(ns_coefficients) == 0 or
                                        not all(isinstance(c, (int, float)) for c in ns_coefficients)):
      raise ValueError(f"Muon: ns_coefficients must be a non-empty sequence of numbers or None, "
                       f"got {ns_coefficients!r}")
    super().__init__(params, lr)
    self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
    self.ns_steps, self.ns_coefficients = ns_steps, tuple(ns_coefficients) if ns_coefficients is not None else None
    self.b = self._new_optim_param() if self.momentum else []
    self._realize_state(*self.b)
  def _step(self, plan: WritePlan, todo: list[tuple[int, Tensor, Tensor]]) -> list[Tensor]:
    lr = self.lr.reshape(())
    ret = []
    for i, t, g in todo:
      if self.momentum:
        b = plan.assign(self.b[i], self.momentum * self.b[i] + g)
        g = g + self.momentum * b if self.nesterov else b
      if self.ns_coefficients is not None:
        mat = g.reshape(g.shape[0] if g.ndim else 1, -1)  # (rows, rest); a scalar as 1x1
        g = newton_schulz(mat, self.ns_steps, self.ns_coefficients).reshape(g.shape)
      up = g * lr
      # decoupled weight decay, applied after the momentum (so it doesn't enter the orthogonalized direction)
      if self.wd != 0: up = up + t.detach() * (self.wd * lr)
      ret.append(up.cast(t.dtype))
    return ret

class LAMB(Optimizer):
  """Adam with a layer-wise trust ratio (You et al. 2019): each layer's step is scaled by |w| / |update|.
  adam=True drops the ratio, which gives AdamW (decoupled weight decay) or, with weight_decay=0, Adam.
  """
  def __init__(self, params: Sequence[Tensor], lr: float | Tensor = 0.001, b1: float = 0.9, b2: float = 0.999,
               eps: float = 1e-6, weight_decay: float = 0.0, adam: bool = False):
    super().__init__(params, lr)
    _check_hyper(type(self).__name__, eps=eps, weight_decay=weight_decay)
    for name, b in (("b1", b1), ("b2", b2)):
      if not 0.0 <= b < 1.0: raise ValueError(f"{type(self).__name__}: {name} must be in [0, 1), got {b}")
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    self.l2 = 0.0  # PyTorch Adam's weight_decay: added to the gradient (see Adam)
    # b1**t and b2**t for the bias correction, kept as tensors so the step's kernels don't change with t
    self.b1_t, self.b2_t = (Tensor.ones((1,), dtype=dtypes.float32, device=self.device) for _ in range(2))
    self.m, self.v = self._new_optim_param(), self._new_optim_param()
    self._realize_state(self.b1_t, self.b2_t, *self.m, *self.v)
  def _step(self, plan: WritePlan, todo: list[tuple[int, Tensor, Tensor]]) -> list[Tensor]:
    lr = self.lr.reshape(())
    b1_t = plan.assign(self.b1_t, self.b1_t * self.b1).reshape(())
    b2_t = plan.assign(self.b2_t, self.b2_t * self.b2).reshape(())
    ret = []
    for i, t, g in todo:
      w = t.detach()
      if self.l2 != 0: g = g + self.l2 * w
      # moments kept on another device than the parameter (offloaded to the CPU): computed there, the update moves back
      if g.device != self.m[i].device: g = g.contiguous().to(self.m[i].device)
      m = plan.assign(self.m[i], self.b1 * self.m[i] + (1.0 - self.b1) * g)
      v = plan.assign(self.v[i], self.b2 * self.v[i] + (1.0 - self.b2) * (g * g))
      m_hat = m / (1.0 - b1_t.to(m.device)).cast(m.dtype)
      v_hat = v / (1.0 - b2_t.to(v.device)).cast(v.dtype)
      up = _on_device_of(m_hat / (v_hat.sqrt() + self.eps), t) + self.wd * w
      r: Tensor | float = 1.0
      if not self.adam:
        r1, r2 = w.square().sum().sqrt(), up.square().sum().sqrt()
        r = (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
      ret.append(lr * r * up)
    return ret

class Adam(LAMB):
  """Adam (Kingma & Ba 2014). weight_decay is PyTorch Adam's L2 penalty, added to the gradient; for decoupled weight
  decay use AdamW.

  >>> from attograd import Tensor
  >>> w = Tensor([1.0, 2.0], requires_grad=True)
  >>> opt = Adam([w], lr=0.1)
  >>> w.grad = Tensor([1.0, -1.0])
  >>> with Tensor.train(): opt.step()  # the first Adam step moves each weight by about lr
  >>> [round(v, 4) for v in w.tolist()]
  [0.9, 2.1]
  """
  def __init__(self, params: Sequence[Tensor], lr: float | Tensor = 0.001, b1: float = 0.9, b2: float = 0.999,
               eps: float = 1e-8, weight_decay: float = 0.0):
    super().__init__(params, lr, b1, b2, eps, 0.0, adam=True)
    _check_hyper("Adam", weight_decay=weight_decay)
    self.l2 = weight_decay

class AdamW(LAMB):
  """Adam with decoupled weight decay (Loshchilov & Hutter 2017): w -= lr * (adam_update + weight_decay * w)."""
  def __init__(self, params: Sequence[Tensor], lr: float | Tensor = 0.001, b1: float = 0.9, b2: float = 0.999,
               eps: float = 1e-8, weight_decay: float = 0.01):
    super().__init__(params, lr, b1, b2, eps, weight_decay, adam=True)
