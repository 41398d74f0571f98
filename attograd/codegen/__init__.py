"""Code generation: one kernel AST -> optimized loops with explicit index math -> a linear program of UOps."""
from __future__ import annotations
from attograd.dtype import PtrDType
from attograd.helpers import DEBUG
from attograd.renderer import ProgramSpec, Renderer
from attograd.uop.ops import Ops, UOp, pretty_print

def kernel_name(k) -> str:
  """r_ for kernels with a reduce, E_ for elementwise, then the loop sizes: e.g. r_64_128."""
  prefix = "r" if k.first_reduce < k.shape_len else "E"
  return f"{prefix}_" + "_".join(str(s) for s in k.full_shape) if k.full_shape else f"{prefix}_1"

def get_program(ast: UOp, renderer: Renderer, opts: list | None = None) -> ProgramSpec:
  """The pipeline, one named pass a line."""
  from attograd.codegen.kernel import Kernel
  from attograd.codegen.lowerer import estimate_ops, gpu_launch, lower
  from attograd.codegen.linearize import linearize
  if DEBUG >= 5: print(pretty_print(ast, max_nodes=10**6))
  k = Kernel(ast)                                      # the loop space: full shape, reduce axes, views over it
  if opts is None and renderer.has_local: k.gpu_optimizations(renderer.local_max)  # work-groups for GPUs
  elif opts is None: k.hand_coded_optimizations()      # pick upcasts/unrolls/threads by heuristic
  else:
    for o in opts: k.apply_opt(o)
  if not renderer.has_threads: k.parallel = False
  sink = lower(k, renderer.supports_vectors, renderer.has_local, renderer.global_max)  # loops (or GPU thread
                                                       # indices), index math from views, simplified; lanes as vectors
  sink = renderer.prepare(sink)                        # the language's own rewrites (e.g. half -> float math)
  uops = linearize(sink)                               # a flat ordered program
  name = kernel_name(k)
  src = renderer.render(name, uops)
  if DEBUG >= 4: print(src)
  globs = tuple(sorted({u.arg for u in uops if u.op is Ops.DEFINE_GLOBAL}))
  variables = tuple(sorted({u for u in uops if u.op is Ops.DEFINE_VAR}, key=lambda v: v.arg[0]))
  mem = 0
  for u in uops:
    if u.op is Ops.DEFINE_GLOBAL and isinstance(u.dtype, PtrDType): mem += u.dtype.bufsize * u.dtype.itemsize
  launch = gpu_launch(k, renderer.global_max)[1:] if renderer.has_local else (None, None)
  return ProgramSpec(name, src, renderer.device, tuple(uops), globs, (0,), variables, estimate_ops(sink, k), mem,
                     tuple(k.applied), *launch)
