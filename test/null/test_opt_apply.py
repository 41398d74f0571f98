"""tinygrad-style optimization actions (attograd.codegen.opt.Opt) on the IR: how a kernel asks for them (its SINK's
KernelInfo, set by Tensor.contiguous(arg=...) or dataclasses.replace), how an Opt's axis number finds attograd's axis
(tinygrad's numbering: by kind, then by age), what each does to the loop space, and the errors for actions that do
not fit the kernel or the target. Scheduled on the NULL device; nothing runs."""
from __future__ import annotations
import dataclasses
import pytest
from attograd import Tensor
from attograd.codegen import get_program, requested_opts
from attograd.codegen.kernel import Opt as Action
from attograd.codegen.lowerer import new_kernel
from attograd.codegen.opt import KernelOptError, Opt, OptOps
from attograd.codegen.opt.apply import OptApplier, apply_opts
from attograd.renderer.cstyle import ClangRenderer, OpenCLRenderer
from attograd.schedule import create_schedule
from attograd.uop.ops import KernelInfo, Ops, UOp

CPU = ClangRenderer("CPU", threads=False)
CPU_THREADS = ClangRenderer("CPU", threads=True)
GPU = OpenCLRenderer()

def _asts(t: Tensor) -> list[UOp]:
  return [si.ast for si in create_schedule([t.uop])[0] if si.ast.op is Ops.SINK]

def _gemm(m: int = 8, k: int = 16, n: int = 32, arg: tuple | None = None) -> UOp:
  a, b = Tensor.empty(m, k, device="NULL"), Tensor.empty(k, n, device="NULL")
  return _asts((a @ b).contiguous(arg=arg))[-1]

def _sizes(ap: OptApplier) -> list:
  return [ap.k.full_shape[i] for i in ap.axes()]

def test_every_kernel_carries_a_kernel_info():
  ast = _gemm()
  assert ast.arg == KernelInfo() and ast.arg.opts_to_apply is None and requested_opts(ast) is None
  asked = ast.replace(arg=dataclasses.replace(ast.arg, opts_to_apply=(Opt(OptOps.UPCAST, 0, 4),)))
  assert requested_opts(asked) == (Opt(OptOps.UPCAST, 0, 4),)

def test_contiguous_arg_reaches_its_kernel_only():
  opts = (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 2))
  a, b = Tensor.empty(8, 16, device="NULL"), Tensor.empty(16, 32, device="NULL")
  asts = _asts(((a + 1).contiguous() @ b).contiguous(arg=opts))
  assert [x.arg.opts_to_apply for x in asts] == [None, opts]

def test_opts_are_part_of_the_schedule_key():
  # the same graph with other opts is another kernel, not the cached schedule of the first
  one = _gemm(arg=(Opt(OptOps.UPCAST, 0, 4),))
  two = _gemm(arg=(Opt(OptOps.UPCAST, 0, 2),))
  assert requested_opts(one) != requested_opts(two)

def test_contiguous_arg_must_be_opts():
  with pytest.raises(TypeError, match="codegen.opt.Opt"): Tensor.empty(4, device="NULL").add(1).contiguous(arg=(4,))

def test_upcast_numbering_puts_new_axes_after_the_outputs():
  ap = OptApplier(new_kernel(_gemm()), CPU)
  assert _sizes(ap) == [8, 32, 16] and ap.axis_types() == ["GLOBAL", "GLOBAL", "REDUCE"]
  ap.apply(Opt(OptOps.UPCAST, 0, 4))
  # attograd keeps the parts side by side; tinygrad's numbering moves the upcast part after the output axes
  assert ap.k.full_shape == (2, 4, 32, 16) and ap.k.upcasted == [1]
  assert _sizes(ap) == [2, 32, 4, 16] and ap.axis_types() == ["GLOBAL", "GLOBAL", "UPCAST", "REDUCE"]
  ap.apply(Opt(OptOps.UPCAST, 1, 2))  # axis 1 is still the 32 output axis
  assert _sizes(ap) == [2, 16, 4, 2, 16]
  ap.apply(Opt(OptOps.UPCAST, 0, 2))  # the remaining 2 of the first output axis: a size-1 axis drops out
  assert _sizes(ap) == [16, 4, 2, 2, 16] and ap.axis_types() == ["GLOBAL", "UPCAST", "UPCAST", "UPCAST", "REDUCE"]
  ap.apply(Opt(OptOps.UNROLL, 0, 4))  # UNROLL counts reduce axes only
  assert _sizes(ap) == [16, 4, 2, 2, 4, 4] and ap.axis_types()[-2:] == ["REDUCE", "UNROLL"]
  assert ap.k.applied == [Action("UPCAST", 0, 4), Action("UPCAST", 2, 2), Action("UPCAST", 0, 2),
                          Action("UNROLL", 5, 4)]

def test_arg_zero_takes_the_whole_axis():
  ap = apply_opts(new_kernel(_gemm()), [Opt(OptOps.UPCAST, 0, 0), Opt(OptOps.UNROLL, 0, 0)], CPU)
  assert _sizes(ap) == [32, 8, 16] and ap.axis_types() == ["GLOBAL", "UPCAST", "UNROLL"]

def test_padto_rounds_up_and_a_multiple_is_left_alone():
  ap = apply_opts(new_kernel(_gemm(m=7)), [Opt(OptOps.PADTO, 0, 4), Opt(OptOps.PADTO, 1, 8)], CPU)
  assert _sizes(ap) == [8, 32, 16] and len(ap.k.pads) == 1 and len(ap.applied) == 2

def test_swap_exchanges_the_output_loops():
  ap = apply_opts(new_kernel(_gemm()), [Opt(OptOps.SWAP, 0, 1)], CPU)
  assert ap.k.full_shape == (32, 8, 16)
  st = next(st for u, st in ap.k.sts.items() if u.op is Ops.STORE)
  assert st.index_strides()[:2] == (1, 32)  # the loop over n is now outermost; the store still walks m by 32

def test_work_group_parts_rank_together_by_age():
  ap = apply_opts(new_kernel(_gemm(m=2, k=256, n=4)), [Opt(OptOps.GROUPTOP, 0, 16)], GPU)
  assert ap.k.full_shape == (2, 4, 16, 16) and ap.k.grouped == [2]  # GROUPTOP's work-group part is the outer one
  assert ap.axis_types() == ["GLOBAL", "GLOBAL", "GROUP_REDUCE", "REDUCE"]
  ap.apply(Opt(OptOps.LOCAL, 1, 2))
  assert ap.k.full_shape == (2, 2, 2, 16, 16)
  # LOCAL and GROUP_REDUCE parts rank alike: the older (the group's) first
  assert _sizes(ap) == [2, 2, 16, 2, 16] and ap.axis_types() == ["GLOBAL", "GLOBAL", "GROUP_REDUCE", "LOCAL", "REDUCE"]

def test_local_on_a_gpu_renderer():
  ap = apply_opts(new_kernel(_gemm()), [Opt(OptOps.LOCAL, 1, 8)], GPU)
  assert _sizes(ap) == [8, 4, 8, 16] and ap.axis_types() == ["GLOBAL", "GLOBAL", "LOCAL", "REDUCE"]
  with pytest.raises(KernelOptError, match="NOLOCALS after work-group actions"): ap.apply(Opt(OptOps.NOLOCALS))

@pytest.mark.parametrize("opts, renderer, why", [
  ([Opt(OptOps.LOCAL, 0, 4)], CPU, "has no work-groups"),
  ([Opt(OptOps.GROUP, 0, 4)], CPU, "has no work-groups"),
  ([Opt(OptOps.NOLOCALS), Opt(OptOps.LOCAL, 0, 4)], GPU, "after NOLOCALS"),
  ([Opt(OptOps.UPCAST, 1, 32)], CPU, "more than 16"),
  ([Opt(OptOps.UNROLL, 0, 0), Opt(OptOps.UNROLL, 0, 4)], CPU, "axis 0 is not one of the 0 axes"),
  ([Opt(OptOps.UPCAST, 2, 4)], CPU, "upcast is for output axes, not REDUCE"),
  ([Opt(OptOps.UNROLL, 1, 4)], CPU, "axis 1 is not one of the 1 axes UNROLL"),
  ([Opt(OptOps.UPCAST, 0, 3)], CPU, "3 does not divide"),
  ([Opt(OptOps.THREAD, 0, 2)], CPU, "does not run kernels on threads"),
  ([Opt(OptOps.THREAD, 1, 2)], CPU_THREADS, "outermost loop"),
  ([Opt(OptOps.TC, 0, (-1, 0, 1))], CPU, "no tensor cores"),
  ([Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.PADTO, 2, 8)], CPU, "cannot pad upcasted"),
  ([Opt(OptOps.SWAP, 0, 2)], CPU, "swap only for output axes"),
])
def test_errors_name_the_opt_and_the_kernel(opts: list[Opt], renderer, why: str):
  with pytest.raises(KernelOptError, match=why) as e: apply_opts(new_kernel(_gemm()), opts, renderer)
  assert repr(opts[-1]) in str(e.value) and "kernel of loop shape (" in str(e.value)

def test_thread_on_the_outermost_loop():
  k = apply_opts(new_kernel(_gemm()), [Opt(OptOps.THREAD, 0, 2)], CPU_THREADS).k
  assert k.parallel

def test_get_program_applies_the_requested_opts_instead_of_the_heuristic():
  ast = _gemm(arg=(Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 4)))
  sp = get_program(ast, CPU)
  assert sp.applied_opts == (Action("UPCAST", 0, 4), Action("UNROLL", 3, 4))
  with pytest.raises(KernelOptError, match="UPCAST"):
    get_program(_gemm(arg=(Opt(OptOps.UPCAST, 0, 3),)), CPU)

def test_opt_is_a_value():
  assert Opt(OptOps.UPCAST, 0, 4) == Opt(op=OptOps.UPCAST, axis=0, arg=4)
  assert sorted([Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.UPCAST, 1, 2)])[0].op is OptOps.UPCAST
  assert issubclass(KernelOptError, ValueError)

def test_to_program_shows_the_requested_opts_and_name():
  from attograd.codegen import to_program
  ast = _gemm()
  prg = to_program(ast.replace(arg=KernelInfo(opts_to_apply=(Opt(OptOps.UPCAST, 0, 4),))), CPU)
  assert prg.src[0].arg.applied_opts == (Opt(OptOps.UPCAST, 0, 4),) and prg.src[0].arg.opts_to_apply is None
  assert prg.src[2].op is Ops.SOURCE and prg.src[2].arg == prg.arg.src and prg.src[0].arg.name == prg.arg.name
  assert to_program(ast.replace(arg=KernelInfo(opts_to_apply=())), CPU).src[0].arg.applied_opts == ()
  named = to_program(ast.replace(arg=KernelInfo(name="my gemm")), CPU)
  assert named.arg.name == "my_gemm" and "my_gemm(" in named.arg.src

@pytest.mark.parametrize("opts, loads", [
  ((), 2 * 64 ** 3),                                          # every multiply loads both operands
  ((Opt(OptOps.UPCAST, 0, 4),), 64 ** 3 + 64 ** 3 // 4),      # 4 rows share each load of B
  ((Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 4)), 2 * 64 ** 3 // 4),
])
def test_estimates_count_what_the_actions_save(opts: tuple, loads: int):
  from attograd.codegen import to_program
  est = to_program(_gemm(64, 64, 64).replace(arg=KernelInfo(opts_to_apply=opts)), CPU).src[0].arg.estimates
  # the store of 64x64 floats once; ops: a multiply and an add per point; mem: the three buffers once each
  assert (est.ops, est.lds, est.mem) == (2 * 64 ** 3, loads * 4 + 4 * 64 * 64, 3 * 64 * 64 * 4)

def test_a_program_rebuilt_from_its_kernel_info_is_the_same():
  # what a process replay does: the AST given the built program's name (and actions) builds the same source
  from attograd.codegen import do_to_program, to_program
  for ast in (_gemm(), _gemm().replace(arg=KernelInfo(opts_to_apply=(Opt(OptOps.UPCAST, 0, 4),)))):
    p = do_to_program(ast, CPU)
    again = to_program(ast.replace(arg=dataclasses.replace(ast.arg, name=p.src[0].arg.name)), CPU)
    assert again.src[2].arg == p.src[2].arg and again.arg.name == p.arg.name
