"""Code generation: one kernel AST -> optimized loops with explicit index math -> a linear program of UOps."""
from __future__ import annotations
import dataclasses, functools
from typing import TYPE_CHECKING, Any, Callable
from attograd.device import disk_cache_get, disk_cache_put
from attograd.dtype import PtrDType, dtypes
from attograd.helpers import BEAM, DEBUG, getenv, prod
from attograd.renderer import Estimates, ProgramSpec, Renderer
from attograd.uop.ops import KernelInfo, Ops, PatternMatcher, UOp, graph_rewrite, pretty_print, sym_max
import attograd.viz as viz
from attograd.codegen.program_cache import ast_key, spec_from_bytes, spec_to_bytes
from attograd.viz import VIZ

# The code generator's own modules load on the first build, not at `import attograd` (a fifth of its import time): a
# process whose programs all come from the disk cache never needs them
if TYPE_CHECKING: from attograd.codegen.kernel import Kernel, Opt

CACHE_PROGRAMS = getenv("CACHE_PROGRAMS", 1)

def kernel_name(k: Kernel) -> str:
  """r_ for kernels with a reduce, E_ for elementwise, then the loop sizes: e.g. r_64_128."""
  prefix = "r" if k.first_reduce < k.shape_len else "E"
  def dim(s: object) -> str:  # a symbolic size by its Variables' names: r_bs_128
    return str(s) if s.__class__ is int else "".join(c if c.isalnum() else "_" for c in s.render()).strip("_")  # type: ignore[attr-defined]
  return f"{prefix}_" + "_".join(dim(s) for s in k.full_shape) if k.full_shape else f"{prefix}_1"

def _has_vars(ast: UOp) -> bool:
  """Symbolic sizes (or Variables as values): BEAM can't time a kernel without values for them."""
  from attograd.uop.variables import ast_variables
  return bool(ast_variables(ast))

def get_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
  """The program for a kernel: from the on-disk cache when this code made it before (not for the PYTHON device,
  whose programs are pickles), else built by the pipeline. A hand-written kernel body (Tensor.custom_kernel) is
  compiled as written (codegen/custom.py)."""
  from attograd.codegen.custom import custom_program, is_custom_kernel
  if is_custom_kernel(ast): return custom_program(ast, renderer)
  if opts is None and BEAM and renderer.device != "PYTHON" and not _has_vars(ast) and requested_opts(ast) is None:
    # search by timing (cached on disk)
    from attograd.codegen.lowerer import new_kernel
    from attograd.codegen.opt import search  # (its module attribute, read per call: a test may stand in for it)
    opts = list(search.beam_search(new_kernel(ast), renderer, int(BEAM.value), _build_program).applied)
  if renderer.device == "PYTHON" or DEBUG >= 3 or VIZ or not CACHE_PROGRAMS: return _build_program(ast, renderer, opts)
  key = ast_key(ast, renderer, opts)
  if (data := disk_cache_get("program", key)) is not None and (sp := spec_from_bytes(data)) is not None: return sp
  sp = _build_program(ast, renderer, opts)
  disk_cache_put("program", key, spec_to_bytes(sp))
  return sp

def requested_opts(ast: UOp) -> tuple | None:
  """The actions a kernel's AST asks for (its SINK's KernelInfo.opts_to_apply: codegen.opt.Opt), or None."""
  return ast.arg.opts_to_apply if ast.op is Ops.SINK and isinstance(ast.arg, KernelInfo) else None

def to_program(ast: UOp, renderer: Renderer | None = None) -> UOp:
  """A kernel built, in tinygrad's form: a PROGRAM UOp whose src is (the kernel's AST with a KernelInfo of its name,
  the actions applied and its cost, a LINEAR of its linear program's UOps in order, a SOURCE with the rendered
  source as its arg) and whose arg is its ProgramSpec (`.name`, `.src`, ...). For reading what the code generator
  made (which dtypes a kernel computes in, say); renders the source but compiles nothing. The renderer is the default
  device's unless given. The KernelInfo's `estimates` are renderer.Estimates; its `applied_opts` are the requested
  codegen.opt.Opts where the AST asked for some, else attograd's own actions (codegen.kernel.Opt)."""
  if renderer is None:
    from attograd.device import Device
    renderer = Device[Device.DEFAULT].renderer
  spec = _build_program(ast, renderer)
  info = ast.arg if isinstance(ast.arg, KernelInfo) else KernelInfo()
  requested = requested_opts(ast)
  info = dataclasses.replace(info, name=spec.name, opts_to_apply=None, estimates=spec.estimates,
                             applied_opts=tuple(requested) if requested is not None else spec.applied_opts)
  return UOp(Ops.PROGRAM, dtypes.void, (ast.replace(arg=info) if ast.op is Ops.SINK else ast,
                                        UOp(Ops.LINEAR, dtypes.void, spec.uops), UOp(Ops.SOURCE, arg=spec.src)), spec)

def do_to_program(ast: UOp, renderer: Renderer) -> UOp:
  """tinygrad's uncached to_program (its to_program caches by AST): attograd's builds afresh on every call."""
  return to_program(ast, renderer)

# ***** the pipeline: a kernel AST -> a linear program, as a list of named passes *****

# (name, what runs, its ctx): a rule table runs under graph_rewrite with the ctx; a function is called on what the pass
# before it made (a Kernel, then a graph, then the linear program)
Pass = tuple[str, "PatternMatcher | Callable[[Any], Any]", Any]

def passes(renderer: Renderer, opts: list[Opt] | None, requested: tuple | None = None) -> list[Pass]:
  """The code generator, one named pass a line, each with why. VIZ shows the kernel after each, by its name. Four are
  functions, not rule tables: choosing actions (a search over the loop space), lowering the loop space to loops (it
  builds the graph from views, not by rewriting one), the renderer's own step (a backend may compose tables) and
  linearizing (an ordering of the whole graph)."""
  from attograd.codegen.fma import pm_fma
  from attograd.codegen.intsafe import pm_int_safety
  from attograd.codegen.linearize import linearize
  from attograd.codegen.lowerer import pm_reduce_acc
  from attograd.codegen.transcendental import pm_exp_reduce, pm_transcendental
  dt = renderer.decompose_transcendentals
  return [
    # the actions on the loop space: upcasts, unrolls, threads, work-groups (BEAM's or a test's, else the heuristic's)
    ("optimization actions applied", functools.partial(optimize, renderer=renderer, opts=opts, requested=requested),
     None),
    # loops (or GPU thread indices), index math from views, simplified; lanes as vectors
    ("lowered: loops and index math", functools.partial(lower_to_loops, renderer=renderer), None),
    # x // 0, INT_MIN // -1 and wide shifts: NumPy's answers, not C's traps and undefined behaviour
    ("integer safety", pm_int_safety, None),
    ("float32 accumulators", pm_reduce_acc, None),  # half/bfloat16/fp8 reduces accumulate in float32
    # exp's range reduction done on x, not on x * log2(e) rounded (accurate to a few ulp)
    ("exp range reduction", pm_exp_reduce, dt),
    # exp2/log2 as arithmetic on CPUs: vector lanes instead of libm calls
    *([("transcendentals as arithmetic", pm_transcendental, None)] if dt else []),
    # the language's own rewrites (e.g. half math done in float)
    ("after the renderer's own rewrites", renderer.prepare, None),
    # every float a*b+c one fused multiply-add, where the language has one: the compiler fuses nothing itself, so an
    # expression computed by two kernels rounds the same in both
    *([("fused multiply-adds", pm_fma, None)] if renderer.fma else []),
    # a flat ordered program: loops, accumulators (fused multiply-adds too), hoisted invariants
    ("linearized program", functools.partial(linearize, fma=renderer.fma), None),
  ]

def optimize(k: Kernel, renderer: Renderer, opts: list[Opt] | None, requested: tuple | None = None) -> Kernel:
  """The actions applied to the kernel: the given ones, else the ones its AST asks for (`requested`: tinygrad-style
  codegen.opt.Opt, numbered as tinygrad numbers axes), else the heuristic's for this kind of target."""
  from attograd.codegen.heuristic import gpu_optimizations, hand_coded_optimizations, thread_condition
  if opts is None and requested is not None:
    from attograd.codegen.opt.apply import apply_opts
    apply_opts(k, requested, renderer)
  elif opts is None and renderer.has_local: gpu_optimizations(k, renderer.local_max)  # work-groups for GPUs
  elif opts is None: hand_coded_optimizations(k, (renderer.thread_min_work, renderer.thread_min_bytes))  # by heuristic
  else:
    for o in opts: k.apply_opt(o)
  if not renderer.has_threads: k.parallel = False
  k.thread_if = thread_condition(k, (renderer.thread_min_work, renderer.thread_min_bytes))
  if DEBUG >= 3: print(f"index math: {k.index_dtype().name} (largest index bound {k.index_bound()})")
  return k

def lower_to_loops(k: Kernel, renderer: Renderer) -> UOp:
  from attograd.codegen.lowerer import lower
  return lower(k, renderer.supports_vectors, renderer.has_local, renderer.global_max)

def _viz_view(x: Any) -> Any:
  from attograd.codegen.kernel import Kernel
  return ("\n".join(str(o) for o in x.applied) or "(none)") if isinstance(x, Kernel) else x

def _build_program(ast: UOp, renderer: Renderer, opts: list[Opt] | None = None) -> ProgramSpec:
  """The pipeline run: each pass on what the one before made."""
  from attograd.codegen.lowerer import new_kernel
  if DEBUG >= 5: print(pretty_print(ast, max_nodes=10**6))
  if VIZ: viz.begin_kernel(renderer.device, ast)
  # the loop space: full shape, reduce axes, views over it
  k = new_kernel(ast, tensor_cores=getattr(renderer, "tensor_cores", ()), warp_size=getattr(renderer, "warp_size", 0))
  x: Any = k
  for name, step, ctx in passes(renderer, opts, requested_opts(ast) if opts is None else None):
    x = graph_rewrite(x, step, ctx) if isinstance(step, PatternMatcher) else step(x)
    if VIZ: viz.stage(name, _viz_view(x))
  uops: list[UOp] = x
  # a name the AST asks for (KernelInfo's, tinygrad's default "test" aside), else one from the loop shape
  name = ast.arg.function_name if isinstance(ast.arg, KernelInfo) and ast.arg.name != "test" else kernel_name(k)
  src = renderer.render(name, uops)
  if VIZ:
    viz.stage(f"{renderer.device} source", src)
    viz.end_kernel(renderer.device, ast, name, tuple(k.applied))
  if DEBUG >= 4: print(src)
  globs = tuple(sorted({u.arg for u in uops if u.op is Ops.DEFINE_GLOBAL}))
  variables = tuple(sorted({u for u in uops if u.op is Ops.DEFINE_VAR}, key=lambda v: v.arg[0]))
  # memory moved: each buffer's bytes once per direction, so a buffer both read and written (`x += y`) counts twice
  size = {u: u.dtype.bufsize * u.dtype.itemsize for u in uops
          if u.op is Ops.DEFINE_GLOBAL and isinstance(u.dtype, PtrDType)}
  moved = {(u.src[0], u.op) for u in uops if u.op in (Ops.LOAD, Ops.STORE) and u.src[0] in size}
  mem = sum(size[g] for g, _ in moved) + sum(n for g, n in size.items() if all(g is not m for m, _ in moved))
  # float ops per run: a tensor-core tile does a multiply and an add per point of its m x n x k space
  ops = 2 * prod(sym_max(x) for x in k.full_shape) if k.tc is not None else Estimates.float_ops(tuple(uops))
  launch = renderer.launch_sizes(uops)                  # GPU: work-groups and threads, read from the thread indices
  return ProgramSpec(name, src, renderer.device, tuple(uops), globs, (0,), variables, ops, mem,
                     tuple(k.applied), *launch, Estimates.bytes_moved(tuple(uops)))
