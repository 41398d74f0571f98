"""tinygrad-style actions (`codegen.opt.Opt`) applied to attograd's loop space (`codegen.kernel.Kernel`).

tinygrad numbers a kernel's axes by kind, then by when each was made: output axes, work-group axes (LOCAL and a
GROUP's part), upcast axes, reduce axes, unrolled axes; an axis of size 1 is not counted. A split keeps the old
axis in place (its outer part) and adds the new part at the end of its kind. attograd's Kernel keeps split parts
side by side instead (`Kernel.split_axis`), so this module keeps each axis's age beside the Kernel and sorts by it to
find the axis an Opt names. The actions themselves are attograd's (`Kernel.apply_opt`): their rules and errors are
the loop space's, raised here as KernelOptError naming the action and the kernel."""
from __future__ import annotations
from typing import Sequence
from attograd.codegen.kernel import Kernel, Opt as Action
from attograd.codegen.opt import KernelOptError, Opt, OptOps, check
from attograd.renderer import Renderer

# an axis's kind, in tinygrad's order (its axis_to_pos: work-group parts of outputs and reduces rank alike)
GLOBAL, LOCAL, GROUP_REDUCE, UPCAST, REDUCE, UNROLL = "GLOBAL", "LOCAL", "GROUP_REDUCE", "UPCAST", "REDUCE", "UNROLL"
_RANK = {GLOBAL: 0, LOCAL: 2, GROUP_REDUCE: 2, UPCAST: 3, REDUCE: 4, UNROLL: 5}
_SPLITS = {OptOps.UPCAST: "UPCAST", OptOps.UNROLL: "UNROLL", OptOps.LOCAL: "LOCAL", OptOps.GROUP: "GROUP",
           OptOps.GROUPTOP: "GROUPTOP"}

class OptApplier:
  """Applies Opts one at a time to a Kernel, keeping tinygrad's numbering of its axes."""
  def __init__(self, k: Kernel, renderer: Renderer):
    self.k, self.ren = k, renderer
    self.age: list[int] = list(range(k.shape_len))  # per attograd axis: when it was made (tinygrad's range id)
    self.dont_use_locals = False
    self.applied: list[Opt] = []

  def kind(self, ax: int) -> str:
    k = self.k
    if ax in k.upcasted: return UPCAST
    if ax in k.unrolled: return UNROLL
    if ax in k.locals_: return LOCAL
    if ax in k.grouped: return GROUP_REDUCE
    return REDUCE if ax >= k.first_reduce else GLOBAL

  def axes(self) -> list[int]:
    """attograd's axis indices in tinygrad's order (size-1 axes left out)."""
    shape = self.k.full_shape
    return sorted((i for i in range(len(shape)) if shape[i].__class__ is not int or shape[i] != 1),
                  key=lambda i: (_RANK[self.kind(i)], self.age[i]))

  def axis_types(self) -> list[str]: return [self.kind(i) for i in self.axes()]

  def real_axis(self, opt: Opt) -> int:
    """The attograd axis an Opt names."""
    order = self.axes()
    if opt.op is OptOps.UNROLL:
      pool = [i for i in order if self.kind(i) in (GROUP_REDUCE, REDUCE) and self.k.full_shape[i].__class__ is int]
    elif opt.op in (OptOps.GROUP, OptOps.GROUPTOP): pool = [i for i in order if self.kind(i) == REDUCE]
    else: pool = order
    check(opt.axis is not None and 0 <= opt.axis < len(pool),
          f"axis {opt.axis} is not one of the {len(pool)} axes {opt.op.name} can take")
    return pool[opt.axis]  # type: ignore[index]

  def apply(self, opt: Opt) -> None:
    try: self._apply(opt)
    except KernelOptError as e:
      raise KernelOptError(f"{opt} on the kernel of loop shape {self.k.full_shape} "
                           f"(axis kinds {self.axis_types()}): {e}") from None
    except ValueError as e:  # the loop space's own rule
      raise KernelOptError(f"{opt} on the kernel of loop shape {self.k.full_shape}: {e}") from None
    self.applied.append(opt)

  def _apply(self, opt: Opt) -> None:
    k = self.k
    if opt.op is OptOps.NOLOCALS:
      check(not k.locals_ and not k.grouped, "NOLOCALS after work-group actions")
      self.dont_use_locals = True
      return
    if opt.op is OptOps.TC:
      check(not self.applied and not k.applied, "tensor core opts must be first")
      check(isinstance(opt.arg, tuple) and len(opt.arg) == 3, "TC's arg is (tc_select, tc_opt, use_tensor_cores)")
      check(bool(k.tensor_cores), f"no tensor cores on {self.ren.device}")
      k.apply_opt(Action("TC", 0, 0))
      self.age = list(range(k.shape_len))  # the tile's axes replace the matmul's: numbered afresh
      return
    ax = self.real_axis(opt)
    size, kind = k.full_shape[ax], self.kind(ax)
    if opt.op is OptOps.SWAP:
      check(isinstance(opt.arg, int), "SWAP's arg is the other axis")
      other = self.real_axis(Opt(OptOps.SWAP, opt.arg if isinstance(opt.arg, int) else None))
      check(kind == GLOBAL and self.kind(other) == GLOBAL, "swap only for output axes")
      self._swap(ax, other)
      return
    if opt.op is OptOps.PADTO:
      check(isinstance(opt.arg, int) and opt.arg > 0, "PADTO's arg is a size")
      check(size.__class__ is int, "only pad axes of a constant size")
      check(kind not in (UPCAST, UNROLL), "cannot pad upcasted")
      if size % opt.arg:  # type: ignore[operator]
        k.apply_opt(Action("PADTO", ax, opt.arg))  # type: ignore[arg-type]
      return  # a size already a multiple is padded by nothing, as tinygrad's round_up
    check(isinstance(opt.arg, int), f"{opt.op.name}'s arg is a size")
    amt = size if opt.arg == 0 else opt.arg
    check(amt.__class__ is int, "a symbolic axis can't be split whole")
    if opt.op is OptOps.THREAD:
      check(self.ren.has_threads, f"{self.ren.device} does not run kernels on threads")
      check(not k.parallel, "already threaded")
      check(kind == GLOBAL and ax == k.first_loop(),
            "attograd runs the outermost loop across its threads (as many as the machine has)")
      k.apply_opt(Action("THREAD", ax, amt))  # type: ignore[arg-type]
      return
    if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP):
      check(self.ren.has_local, f"{self.ren.device} has no work-groups (locals needed for {opt.op.name})")
      check(not self.dont_use_locals, "can't use locals after NOLOCALS")
      check(kind == (GLOBAL if opt.op is OptOps.LOCAL else REDUCE),
            f"{opt.op.name} is for {'output' if opt.op is OptOps.LOCAL else 'reduce'} axes, not {kind}")
    if opt.op is OptOps.UPCAST:
      check(amt <= 16, "don't upcast more than 16")  # type: ignore[operator]
      check(kind in (GLOBAL, LOCAL), f"upcast is for output axes, not {kind}")
    if opt.op is OptOps.UNROLL:
      check(amt <= 32, "don't unroll more than 32")  # type: ignore[operator]
    check(opt.op in _SPLITS, f"unsupported opt {opt.op}")
    check(size % amt == 0, f"{amt} does not divide the axis's size {size}")  # type: ignore[operator]
    k.apply_opt(Action(_SPLITS[opt.op], ax, amt))  # type: ignore[arg-type]
    # the axis split in two: its outer part keeps its age, the new part is the youngest. GROUPTOP's work-group part
    # is the outer one (attograd puts it first)
    new = len(self.age)
    self.age[ax + 1:ax + 1] = [new]
    if opt.op is OptOps.GROUPTOP: self.age[ax], self.age[ax + 1] = self.age[ax + 1], self.age[ax]

  def _swap(self, a: int, b: int) -> None:
    """Two plain output axes change places in the loop nest (each keeps its age's place in the numbering)."""
    k = self.k
    perm = list(range(k.shape_len))
    perm[a], perm[b] = b, a
    k._permute(tuple(perm))
    where = {old: new for new, old in enumerate(perm)}
    k.pads = [(tuple((where[x], c) for x, c in t), lim, g) for t, lim, g in k.pads]

def apply_opts(k: Kernel, opts: Sequence[Opt], renderer: Renderer) -> OptApplier:
  """Apply the given tinygrad-style actions to the kernel, in order (KernelOptError on one that does not fit)."""
  ap = OptApplier(k, renderer)
  for o in opts:
    if not isinstance(o, Opt): raise KernelOptError(f"{o!r} is not a codegen.opt.Opt")
    ap.apply(o)
  return ap
