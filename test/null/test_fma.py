"""Fused multiply-adds are the code generator's choice (codegen/fma.py), made per node so an expression rounds the
same in every kernel: the rule, the linearizer's accumulators, and what each language writes for them. Device-free."""
from __future__ import annotations
import numpy as np
import pytest
import attograd.codegen as cg
from attograd.codegen import get_program
from attograd.codegen.fma import pm_fma
from attograd.dtype import dtypes
from attograd.renderer.cstyle import ClangRenderer, CUDARenderer, OpenCLRenderer
from attograd.renderer.llvmir import LLVMRenderer
from attograd.schedule import create_schedule
from attograd.tensor import Tensor
from attograd.uop.ops import Ops, UOp, graph_rewrite

@pytest.fixture(autouse=True)
def _built_here(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(cg, "CACHE_PROGRAMS", 0)  # a program from the disk cache has no uops to look at

def _v(name: str, dtype=dtypes.float32) -> UOp: return UOp(Ops.DEFINE_VAR, dtype, (), (name, 0, 9))

def test_float_mul_add_becomes_one_mulacc() -> None:
  a, b, c = _v("a"), _v("b"), _v("c")
  assert graph_rewrite(a * b + c, pm_fma) is UOp(Ops.MULACC, dtypes.float32, (a, b, c))
  assert graph_rewrite(c + a * b, pm_fma) is UOp(Ops.MULACC, dtypes.float32, (a, b, c))
  # a left-leaning sum of products keeps its order: the product on the right is fused into what is on the left
  p, q = a * b, b * c
  assert graph_rewrite(p + q, pm_fma) is UOp(Ops.MULACC, dtypes.float32, (b, c, p))
  # subtractions: a*b - c is fma(a, b, -c); c - a*b is fma(-a, b, c)
  assert graph_rewrite(UOp(Ops.SUB, dtypes.float32, (p, c)), pm_fma).op is Ops.MULACC
  got = graph_rewrite(UOp(Ops.SUB, dtypes.float32, (c, p)), pm_fma)
  assert got.op is Ops.MULACC and got.src[0].op is Ops.NEG and got.src[2] is c

@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.float16, dtypes.bfloat16])
def test_other_dtypes_are_left_alone(dtype) -> None:
  # integers are exact either way; half math has no fused form on every target, so it is never fused anywhere
  a, b, c = _v("a", dtype), _v("b", dtype), _v("c", dtype)
  assert graph_rewrite(a * b + c, pm_fma).op is Ops.ADD

def test_the_rule_looks_at_one_node_not_its_users() -> None:
  # the same a*b+c is fused whether or not its product has other users: its value can't depend on the kernel
  a, b, c = _v("a"), _v("b"), _v("c")
  alone = graph_rewrite(a * b + c, pm_fma)
  shared = graph_rewrite(UOp(Ops.SINK, dtypes.void, (a * b + c, UOp(Ops.EXP2, dtypes.float32, (a * b,)))), pm_fma)
  assert shared.src[0] is alone

def _program(r, t: Tensor) -> tuple[list[UOp], str]:
  items, _ = create_schedule([t.uop])
  sp = get_program([si for si in items if si.ast.op is Ops.SINK][-1].ast, r)
  return list(sp.uops), sp.src

def _mm() -> Tensor:
  return Tensor(np.ones((32, 64), np.float32)).realize() @ Tensor(np.ones((64, 48), np.float32)).realize()

def test_a_matmul_accumulates_with_fused_multiply_adds() -> None:
  uops, src = _program(ClangRenderer(fma=True), _mm())
  assert any(u.op is Ops.MULACC for u in uops)
  assert not any(u.op is Ops.MUL and u.dtype.scalar() is dtypes.float32 for u in uops)  # no product left unfused
  assert "#define __atto_fma_float" in src  # a vector fma: the helper that writes it lane by lane

def test_without_fma_nothing_is_fused() -> None:
  uops, _ = _program(ClangRenderer(fma=False), _mm())
  assert not any(u.op is Ops.MULACC for u in uops)

@pytest.mark.parametrize("r, text", [(ClangRenderer(fma=True), "fmaf("), (LLVMRenderer(fma=True), "@llvm.fma.f32"),
                                     (OpenCLRenderer(), "fma("), (CUDARenderer(), "fmaf(")],
                         ids=lambda x: type(x).__name__ if not isinstance(x, str) else x)
def test_each_language_writes_its_fused_multiply_add(r, text: str) -> None:
  x = Tensor(np.arange(8, dtype=np.float32)).realize()
  _, src = _program(r, x * x + 3)
  assert text in src
  if isinstance(r, LLVMRenderer): assert "contract" not in src  # LLVM may fuse nothing itself

def test_the_interpreter_rounds_a_mulacc_once() -> None:
  # the PYTHON device runs CUDA-flavoured programs for the tensor-core emulator: MULACC is a*b+c rounded once
  from attograd.uop.ops import exec_alu
  assert exec_alu(Ops.MULACC, dtypes.float64, [0.1, 0.1, -0.01]) == 9.020562075079397e-19  # the product's own error
  assert 0.1 * 0.1 - 0.01 != 9.020562075079397e-19
  assert exec_alu(Ops.MULACC, dtypes.float64, [1e308, 10.0, -1e308]) == float("inf")
  assert str(exec_alu(Ops.MULACC, dtypes.float64, [-1e-200, 1e-200, 0.0])) == "-0.0"
