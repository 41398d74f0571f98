"""The renderers' rule tables (renderer/cstyle.py, renderer/llvmir.py): every op a linear program holds has a rule in
every language, an op without one is an error naming it and the language, a dialect's override changes only the
text of its own op, and the launch sizes come from one place (renderer.launch_dims). Device-free."""
from __future__ import annotations
import difflib
import numpy as np
import pytest
import attograd.codegen as cg
from attograd.codegen import get_program
from attograd.codegen.kernel import Opt
from attograd.dtype import dtypes
from attograd.schedule import create_schedule
from attograd.renderer import FMA_OPS, GPU_OPS, PROGRAM_OPS, WARP_OPS, launch_dims
from attograd.renderer.cstyle import (ClangRenderer, CStyleLanguage, CUDARenderer, MetalRenderer, OpenCLRenderer,
                                      pm_render_c)
from attograd.renderer.llvmir import LLVMRenderer, pm_render_llvm
from attograd.tensor import Tensor
from attograd.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, Variable

@pytest.fixture(autouse=True)
def _built_here(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(cg, "CACHE_PROGRAMS", 0)  # a program from the disk cache has no uops to look at

C_FAMILY = [ClangRenderer(), ClangRenderer(fma=True), OpenCLRenderer(), OpenCLRenderer(fp16=True), CUDARenderer(),
            MetalRenderer()]

def _asts(*ts: Tensor) -> list[UOp]:
  return [si.ast for si in create_schedule([t.uop for t in ts])[0] if si.ast.op is Ops.SINK]

def _x(*shape: int, dtype=dtypes.float32) -> Tensor:
  return Tensor((np.arange(int(np.prod(shape))).reshape(shape) % 7 - 3).astype(np.float32)).cast(dtype).realize()

def _ops_needed(r) -> set[Ops]:
  ops = set(PROGRAM_OPS)
  if r.has_local: ops |= GPU_OPS
  if getattr(r, "warp_size", 0) or getattr(r, "tensor_cores", ()): ops |= WARP_OPS
  if r.fma: ops |= FMA_OPS
  return ops

# ***** coverage: every op a program holds has a rule in every language *****

@pytest.mark.parametrize("r", C_FAMILY, ids=lambda r: type(r).__name__)
def test_c_family_tables_cover_every_program_op(r: CStyleLanguage) -> None:
  for op in _ops_needed(r):
    # ALU ops render through the language's code_for_op table (one rule reads it); the rest have rules of their own
    if op in GroupOp.ALU: assert op in r.alu and op in r.code_for_op, f"{r.dialect}: no ALU entry for {op}"
    else: assert op in r.string_rewrite.pdict, f"{r.dialect}: no rule for {op}"

def test_llvm_table_covers_every_program_op() -> None:
  assert _ops_needed(LLVMRenderer()) - set(pm_render_llvm.pdict) == set()

def test_program_ops_are_what_the_linearizer_emits() -> None:
  # the declared sets must hold every op real programs have, or the coverage tests above check too little
  x, h = _x(16, 64), _x(32, 48, dtype=dtypes.float16)
  xs = _x(8, 33).reshape(Variable("bs", 1, 64).bind(8), 33)
  asts = _asts(x.sum(axis=1), (x.exp() + 1).maximum(x).sqrt(), x.softmax(axis=1), x.cast(dtypes.bfloat16) * 2,
               x.bitcast(dtypes.int32) >> 1, (xs * 2).sum(axis=0), x.argmax(axis=1))
  seen: set[Ops] = set()
  for r in (ClangRenderer(), ClangRenderer(fma=True), LLVMRenderer(), OpenCLRenderer(), CUDARenderer()):
    for ast in asts:
      uops = get_program(ast, r).uops
      assert {u.op for u in uops} <= _ops_needed(r), type(r).__name__
      seen |= {u.op for u in uops}
  cuda = CUDARenderer()
  tc, shuffle = _asts(h @ _x(48, 16, dtype=dtypes.float16))[0], _asts(x.sum(axis=1))[0]
  for ast, opts in [(tc, None), (shuffle, [Opt("GROUP", 1, 32)])]:
    uops = get_program(ast, cuda, opts).uops
    assert {u.op for u in uops} <= _ops_needed(cuda)
    seen |= {u.op for u in uops}
  assert {Ops.SPECIAL, Ops.DEFINE_LOCAL, Ops.WMMA, Ops.SHUFFLE, Ops.GEP, Ops.DEFINE_VAR, Ops.RANGE} <= seen

def _program(r, t: Tensor, opts: list | None = None) -> list[UOp]:
  return list(get_program(_asts(t)[0], r, opts).uops)

@pytest.mark.parametrize("r, op", [(ClangRenderer(), Ops.SPECIAL), (OpenCLRenderer(), Ops.WMMA),
                                   (MetalRenderer(), Ops.SHUFFLE), (LLVMRenderer(), Ops.SPECIAL)],
                         ids=lambda x: getattr(x, "name", type(x).__name__))
def test_an_op_without_a_rule_is_named_with_the_language(r, op: Ops) -> None:
  uops = _program(ClangRenderer(), _x(8) * 2)
  stray = UOp(op, dtypes.int32, (), ("gidx0", 4)) if op is Ops.SPECIAL else UOp(op, dtypes.float32, (uops[-2],), 1)
  with pytest.raises(RuntimeError, match=f"{getattr(r, 'dialect', 'LLVM IR')}.*no rule renders {op}"):
    r.render("bad", uops[:-1] + [stray] + uops[-1:])

def test_an_alu_op_missing_from_the_table_is_named() -> None:
  class NoSqrt(ClangRenderer):
    alu = {op: fn for op, fn in ClangRenderer.alu.items() if op is not Ops.SQRT}
  with pytest.raises(RuntimeError, match=r"C renderer \(NoSqrt\): no rule renders Ops.SQRT on dtypes.float"):
    NoSqrt().render("k", _program(ClangRenderer(), _x(8).sqrt()))

# ***** dialects: an override changes only its own rule's text *****

def _changed_lines(a: str, b: str) -> list[str]:
  return [line for line in difflib.unified_diff(a.split("\n"), b.split("\n"), lineterm="", n=0)
          if line[:1] in "+-" and not line.startswith(("+++", "---"))]

def test_a_dialect_override_changes_only_its_rule() -> None:
  class FencedCL(OpenCLRenderer):
    string_rewrite = PatternMatcher([(UPat(Ops.BARRIER), lambda: "work_group_barrier(CLK_LOCAL_MEM_FENCE);")]) \
      + OpenCLRenderer.string_rewrite
  uops = _program(OpenCLRenderer(), _x(16, 256).sum(axis=1), [Opt("GROUP", 1, 32)])
  base, fenced = OpenCLRenderer().render("k", uops), FencedCL().render("k", uops)
  assert _changed_lines(base, fenced) == ["-  barrier(CLK_LOCAL_MEM_FENCE);",
                                          "+  work_group_barrier(CLK_LOCAL_MEM_FENCE);"]

def test_an_alu_override_changes_only_that_op() -> None:
  class FastSqrt(ClangRenderer):
    alu = {**ClangRenderer.alu, Ops.SQRT: lambda r, x, d: f"__builtin_sqrtf({x})"}
  uops = _program(ClangRenderer(), (_x(4, 8) + 1).sqrt() * 3)
  base, fast = ClangRenderer().render("k", uops), FastSqrt().render("k", uops)
  changed = _changed_lines(base, fast)
  assert len(changed) == 2 and all("sqrt" in line for line in changed) and "__builtin_sqrtf(" in changed[1]

def test_the_dialects_own_rules_are_only_what_differs() -> None:
  # each dialect's own table holds its thread indices and barrier (and CUDA its vector structs and warp ops); the
  # rest is the shared C table, so a rule fixed there is fixed for every C-like language
  assert set(OpenCLRenderer.dialect_rules.pdict) == set(MetalRenderer.dialect_rules.pdict) == {Ops.SPECIAL, Ops.BARRIER}
  assert set(CUDARenderer.dialect_rules.pdict) == {Ops.SPECIAL, Ops.BARRIER, Ops.GEP, Ops.VECTORIZE, Ops.WMMA,
                                                   Ops.SHUFFLE}
  assert set(ClangRenderer.dialect_rules.pdict) == {Ops.RANGE, Ops.ADD}  # ADD: int8 dot products (dot4_rule)
  for r in C_FAMILY: assert r.string_rewrite.patterns[-len(pm_render_c.patterns):] == pm_render_c.patterns

def test_dialect_expr_is_the_dialects_own_text() -> None:
  x = UOp(Ops.DEFINE_VAR, dtypes.float32, (), ("x", 0, 1))
  assert CUDARenderer().dialect_expr(UOp(Ops.SHUFFLE, dtypes.float32, (x,), 16), ["v"]) == \
    "__shfl_xor_sync(0xffffffffu, v, 16)"
  assert CUDARenderer().dialect_expr(UOp(Ops.GEP, dtypes.float32, (x,), 2), ["f"]) == "f.v[2]"
  assert ClangRenderer().dialect_expr(UOp(Ops.ADD, dtypes.float32, (x, x)), ["a", "b"]) is None

def test_int8_dot_rule_only_where_the_target_has_it() -> None:
  # the four byte products of words a (16 int32 lanes) and b, as nn/gguf.py's dot4 writes them, are one vpdpbusd
  # only on a renderer whose target has it; three of the four products, or no such target, keep the C ops
  from attograd.renderer.cstyle import CWriter, dot4_rule
  v16, i32 = dtypes.int32.vec(16), dtypes.int32
  a, b, acc = (UOp(Ops.DEFINE_VAR, d, (), (n, 0, 1)) for d, n in ((v16, "a"), (i32, "b"), (v16, "c")))
  def c(v: int) -> UOp: return UOp.const(i32, v)
  def shr(x: UOp, i: int) -> UOp: return UOp(Ops.SHR, x.dtype, (x, c(8 * i))) if i else x
  def term(i: int) -> UOp:
    ub = UOp(Ops.AND, v16, (shr(a, i), c(255)))
    sb = UOp(Ops.CAST, i32, (UOp(Ops.CAST, dtypes.int8, (shr(b, i),)),))
    return UOp(Ops.MUL, v16, (ub, sb) if i % 2 else (sb, ub))  # either operand order
  def total(terms: list[UOp]) -> UOp:
    out = acc
    for t in terms: out = UOp(Ops.ADD, v16, (out, t))
    return out
  def render(ren: ClangRenderer, root: UOp) -> str | None:
    ctx = CWriter(ren)
    for u in root.toposort(): ctx.r[u] = f"v{len(ctx.r)}"
    return dot4_rule(ctx, root)
  whole = total([term(i) for i in (2, 0, 3, 1)])
  out = render(ClangRenderer(int8_dot=True), whole)
  assert out is not None and out.count("__builtin_ia32_vpdpbusd_v16si(") == 1, out
  assert render(ClangRenderer(int8_dot=False), whole) is None
  assert render(ClangRenderer(int8_dot=True), total([term(i) for i in (0, 1, 2)])) is None

def test_parallel_pragma_is_clangs_rule() -> None:
  rng = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 8),), (0, "parallel"))
  assert ClangRenderer(threads=True).dialect_expr(rng, ["8"]) == \
    "#pragma omp parallel for\nfor (int ridx0 = 0; ridx0 < 8; ridx0++) {"
  assert ClangRenderer(threads=False).dialect_expr(rng, ["8"]) is None  # the shared loop rule renders it

def test_parallel_loop_over_symbolic_sizes_tests_them_per_call() -> None:
  # attention over the filled part of an 8192-row KV cache: worth the cores at 8192 rows, not at 10, and one program
  # serves both, so the parallel loop carries OpenMP's `if` clause over the Variable; constant sizes decide when
  # compiling (no clause)
  from attograd.codegen.heuristic import thread_condition
  from attograd.codegen.lowerer import new_kernel
  n = Variable("n", 1, 8192)
  cache, q = Tensor.empty(3, 8192, 64), Tensor.empty(3, 3, 64)
  ast = _asts(q @ cache.shrink((None, (0, n.bind(10)), None)).transpose(1, 2))[0]
  ren = ClangRenderer(threads=True)
  src = get_program(ast, ren).src
  assert src.count("#pragma omp parallel for if(") == 1 and "n" in src.split("#pragma omp parallel for if(")[1], src
  k = new_kernel(ast)
  k.apply_opt(Opt("THREAD", 0, 0))
  cond = thread_condition(k, (ren.thread_min_work, ren.thread_min_bytes))
  assert cond is not None
  at = [cond.substitute({n: UOp.const(n.dtype, v)}).simplify() for v in (1, 10, 4000, 8192)]
  assert [u.arg for u in at] == [False, False, False, True], at
  assert "omp" not in get_program(ast, ClangRenderer(threads=False)).src  # no OpenMP: no clause either
  big, y = Tensor.empty(2048, 2048), Tensor.empty(1, 2048)
  src = get_program(_asts((y.reshape(1, 1, 2048) * big.reshape(1, 2048, 2048)).sum(-1))[0], ren).src
  assert "#pragma omp parallel for\n" in src and "if(" not in src, src
  # never worth the cores even at its largest size (a 512-row cache): no parallel loop at all
  small = Tensor.empty(3, 512, 64)
  m = Variable("m", 1, 512)
  assert "omp parallel" not in get_program(_asts(q @ small.shrink((None, (0, m.bind(9)), None)).transpose(1, 2))[0],
                                           ren).src

# ***** launch sizes: read once, from the program's thread indices *****

def test_launch_dims_reads_the_thread_indices() -> None:
  g0, g2 = (UOp(Ops.SPECIAL, dtypes.int32, (), (n, s)) for n, s in (("gidx0", 5), ("gidx2", 3)))
  l0 = UOp(Ops.SPECIAL, dtypes.int32, (), ("lidx0", 32))
  assert launch_dims([g0, g2, l0]) == ((5, 1, 3), (32,))  # a dimension nothing reads launches once
  assert launch_dims([]) == ((1,), (1,))
  assert ClangRenderer().launch_sizes([g0]) == (None, None)  # C kernels run their own loops

@pytest.mark.parametrize("opts", [[Opt("LOCAL", 1, 16), Opt("LOCAL", 0, 4)], [Opt("GROUP", 1, 32)], None])
def test_program_launch_sizes_agree_with_the_kernel_source(opts: list | None) -> None:
  t = (_x(64, 48).T * 2) if opts is None or opts[0].op == "LOCAL" else _x(8, 256).sum(axis=1)
  ast = _asts(t)[0]
  cl, cuda = get_program(ast, OpenCLRenderer(), opts), get_program(ast, CUDARenderer(), opts)
  assert cl.global_size == cuda.global_size and cl.local_size == cuda.local_size
  threads = int(np.prod(cuda.local_size))
  assert f"__launch_bounds__({threads})" in cuda.src  # CUDA's bound is the same local size, from the same place
  for spec in (cl, cuda):
    specials = {u.arg[0]: u.arg[1] for u in spec.uops if u.op is Ops.SPECIAL}
    assert all(spec.global_size[int(n[-1])] == s for n, s in specials.items() if n[0] == "g")
    assert all(spec.local_size[int(n[-1])] == s for n, s in specials.items() if n[0] == "l")

def test_renderer_target_is_its_devices_dev_target():
  # tinygrad's Renderer.target: the DEV target of the renderer's device, its arch as DEV names it
  from attograd.device import Device
  from attograd.helpers import Context, Target
  assert Device["NULL"].renderer.target == Target("NULL")
  with Context(DEV="NULL::gfx1100"): assert Device["NULL"].renderer.target.arch == "gfx1100"
  with Context(DEV="CL;NULL:X:sm_80"): assert Device["NULL"].renderer.target == Target("NULL", "X", "sm_80")
