"""tinygrad's kernel-building UOp API at the IR level (uop/ops.py's kernel-building block, uop/kernel.py) and its
compiler (codegen/custom.py), device-free: what placeholders, ranges, elements, stores and ENDs build; the views a
body takes of a placeholder; the linear program a body becomes (loops where the body puts them, registers for REG
placeholders, validity-gated reads through pads); the errors for bodies that can't be compiled; tinygrad's names
(DType.const, Ops aliases, broadcast_axes, dtype_from_uop)."""
from __future__ import annotations
import pytest
from attograd.codegen.custom import CustomKernelError, custom_program, is_custom_kernel
from attograd.dtype import AddrSpace, Invalid, dtypes
from attograd.renderer.cstyle import ClangRenderer, OpenCLRenderer
from attograd.renderer.llvmir import LLVMRenderer
from attograd.uop.kernel import fold_constant_args, written_slots
from attograd.uop.ops import AxisType, KernelInfo, Ops, UOp, broadcast_axes, dtype_from_uop
import attograd.tensor  # noqa: F401  (lends UOp the view methods a body uses)

def _copy_t(out: UOp, x: UOp) -> UOp:
  """out = x.T, written with two loops."""
  i, j = UOp.range(out.shape[0], 0), UOp.range(out.shape[1], 1)
  return out[i, j].store(x.T[i, j]).end(i, j).sink(arg=KernelInfo(name="copy_t"))

def test_placeholder_and_param() -> None:
  p = UOp.placeholder((3, 4), dtypes.float32, 2)
  assert p.op is Ops.RESHAPE and p.shape == (3, 4) and p.src[0].op is Ops.PARAM and p.src[0].arg.slot == 2
  assert p.src[0].shape == (12,) and p.dtype is dtypes.float32
  assert UOp.placeholder((5,), dtypes.int32, 0).op is Ops.PARAM  # one dim: the PARAM itself
  q = UOp.param(1, dtypes.half, (2, 2))
  assert q.shape == (2, 2) and q.arg.addrspace is AddrSpace.GLOBAL and UOp.param(1, dtypes.half, (2, 2)) is q
  with pytest.raises(TypeError, match="weak"): UOp.param(0, dtypes.weakfloat, (1,))
  with pytest.raises(ValueError, match="no device"):
    UOp.placeholder((1,), dtypes.float32, 0, addrspace=AddrSpace.REG, device="CPU")
  like = UOp.placeholder((2, 3), dtypes.int8, 0).placeholder_like(4)
  assert like.shape == (2, 3) and like.dtype is dtypes.int8 and like.src[0].arg.slot == 4

def test_range_index_store_end_sink() -> None:
  i = UOp.range(8, 3, AxisType.REDUCE)
  assert i.op is Ops.RANGE and i.arg == (3, AxisType.REDUCE) and i.dtype is dtypes.int32 and i.vmin_vmax == (0, 7)
  with pytest.raises(TypeError, match="int"): UOp.range(4, 0, dtype=dtypes.float32)
  c = UOp.placeholder((8,), dtypes.float32, 0)
  el = c[i]
  assert el.op is Ops.INDEX and el.shape == () and el.src == (c, i)
  st = el.store(1.5)
  assert st.op is Ops.STORE and st.src[1].arg == 1.5 and st.src[1].dtype is dtypes.float32
  e = st.end(i)
  assert e.op is Ops.END and e.src == (st, i) and st.end() is st
  s = e.sink(arg=KernelInfo(name="k"))
  assert s.op is Ops.SINK and s.src == (e,) and UOp.sink(e, None, arg=KernelInfo(name="k")) is s
  after = el.set(2.0, end=i)
  assert after.op is Ops.AFTER and after.src[0] is c and after.src[1].op is Ops.END
  assert UOp.group(st) is st and UOp.group(st, e).op is Ops.GROUP
  with pytest.raises(TypeError, match="RANGE"): st.end(c)  # type: ignore[arg-type]

def test_kernel_views() -> None:
  x = UOp.placeholder((4, 6), dtypes.float32, 0)
  i, j = UOp.range(4, 0), UOp.range(3, 1)
  assert x.flatten().shape == (24,) and x.T.shape == (6, 4) and x.reshape(2, -1).shape == (2, 12)
  assert x.numel() == 24 and x.permute(1, 0).op is Ops.PERMUTE and x.flip(0).op is Ops.FLIP
  row = x[i]  # a partial index is a view of the remaining dims; indexing it again selects the element
  assert row.shape == (6,) and row[j].src == (x, i, j)
  cut = x[i, 1:4]
  assert cut.shape == (3,) and cut.src[0].op is Ops.SHRINK
  assert (x[i, j] / 2).op is Ops.FDIV
  assert x[..., 2:5].shape == (4, 3) and x[...].shape == (4, 6) and x[..., j].src == (x.T, j)
  with pytest.raises(IndexError, match="indices"): x[i, j, j]
  with pytest.raises(ValueError, match="can't be seen"): x.reshape(5, 5)

def test_compiled_program_loops_and_stores() -> None:
  body = _copy_t(UOp.placeholder((3, 2), dtypes.float32, 0), UOp.placeholder((2, 3), dtypes.float32, 1))
  assert is_custom_kernel(body)
  sp = custom_program(body, ClangRenderer())
  ops = [u.op for u in sp.uops]
  assert ops.count(Ops.RANGE) == 2 and ops.count(Ops.ENDRANGE) == 2 and ops.count(Ops.STORE) == 1
  assert sp.name == "copy_t" and sp.globals == (0, 1) and sp.outs == (0,)
  assert "void copy_t(" in sp.src and "data1[" in sp.src
  # the same body renders for the other languages
  assert "__kernel" in custom_program(body, OpenCLRenderer()).src
  assert "define" in custom_program(body, LLVMRenderer()).src

def test_accumulator_in_registers_and_statement_order() -> None:
  # out[r] = sum over c of x[r, c], the sum kept in a REG placeholder: zeroed inside the row loop, accumulated in
  # the column loop (it reads the register after the zeroing, through .after), stored after the column loop closes
  out, x = UOp.placeholder((4,), dtypes.float32, 0), UOp.placeholder((4, 5), dtypes.float32, 1)
  r, c = UOp.range(4, 0), UOp.range(5, 1, AxisType.REDUCE)
  acc = UOp.placeholder((1,), dtypes.float32, 0, addrspace=AddrSpace.REG)
  acc = acc.after(r)[0].set(0.0)
  acc = acc[0].set(acc.after(c)[0] + x[r, c], end=c)
  body = out[r].set(acc[0], end=r).sink(arg=KernelInfo(name="row_sum"))
  uops = custom_program(body, ClangRenderer()).uops
  ops = [u.op for u in uops]
  assert ops.count(Ops.DEFINE_ACC) == 1 and ops.count(Ops.ACC_ASSIGN) == 2
  # zeroing, then the inner loop with its accumulate, then the store, all inside the row loop
  order = [op for op in ops if op in (Ops.RANGE, Ops.ENDRANGE, Ops.ACC_ASSIGN, Ops.STORE)]
  assert order == [Ops.RANGE, Ops.ACC_ASSIGN, Ops.RANGE, Ops.ACC_ASSIGN, Ops.ENDRANGE, Ops.STORE, Ops.ENDRANGE]

def test_reduce_value_runs_its_own_loop_once() -> None:
  # a REDUCE is an accumulator and a loop of its own inside the open ones; two stores of it share one computation
  out, twice, x = (UOp.placeholder((3,), dtypes.float32, 0), UOp.placeholder((3,), dtypes.float32, 1),
                   UOp.placeholder((3, 8), dtypes.float32, 2))
  r, c = UOp.range(3, 0), UOp.range(8, 1, AxisType.REDUCE)
  total = x[r, c].reduce(c, arg=Ops.ADD)
  assert total.op is Ops.REDUCE and total.src[1:] == (c,) and total.arg is Ops.ADD
  body = UOp.group(out[r].store(total), twice[r].store(total * 2)).end(r).sink(arg=KernelInfo(name="sums"))
  ops = [u.op for u in custom_program(body, ClangRenderer()).uops]
  assert ops.count(Ops.RANGE) == 2 and ops.count(Ops.DEFINE_ACC) == 1 and ops.count(Ops.STORE) == 2
  with pytest.raises(ValueError, match="ADD, MUL or MAX"): x[r, c].reduce(c, arg=Ops.SUB)

def test_read_through_pad_is_gated() -> None:
  out, x = UOp.placeholder((6,), dtypes.float32, 0), UOp.placeholder((4,), dtypes.float32, 1)
  i = UOp.range(6, 0)
  body = out[i].store(x.pad(((1, 1),))[i]).end(i).sink(arg=KernelInfo(name="padded"))
  loads = [u for u in custom_program(body, ClangRenderer()).uops if u.op is Ops.LOAD]
  assert len(loads) == 1 and len(loads[0].src) == 3  # (buffer, index, validity)

def test_errors_name_the_problem() -> None:
  out, x = UOp.placeholder((4,), dtypes.float32, 0), UOp.placeholder((4, 4), dtypes.float32, 1)
  i = UOp.range(4, 0)
  reg = UOp.placeholder((4,), dtypes.float32, 1, addrspace=AddrSpace.REG)
  with pytest.raises(CustomKernelError, match="indexed by constants"):
    custom_program(reg[i].store(1.0).end(i).sink(arg=KernelInfo()), ClangRenderer())
  with pytest.raises(CustomKernelError, match="index every dim"):
    custom_program(out[i].store(x[i]).end(i).sink(arg=KernelInfo()), ClangRenderer())  # type: ignore[arg-type]

def test_variable_as_kernel_param() -> None:
  v = UOp.variable("n", 0, 9, dtypes.float32, param=True)
  assert v.op is Ops.PARAM and v.arg.addrspace is AddrSpace.ALU and v.arg.name == "n" and v.arg.vmin_vmax == (0, 9)
  assert UOp.variable("n", 0, 9).op is Ops.DEFINE_VAR

def test_fold_constant_args() -> None:
  out, x, y = (UOp.placeholder((4,), dtypes.float32, 0), UOp.placeholder((4,), dtypes.float32, 1),
               UOp.placeholder((4,), dtypes.float32, 2))
  i = UOp.range(4, 0)
  body = out[i].store(x[i] * y[i]).end(i).sink(arg=KernelInfo(name="mul"))
  assert written_slots(body) == {0}
  folded, kept = fold_constant_args(body, {1: 3.0})
  assert kept == [0, 2]  # slot 2 is now slot 1; slot 1's reads are the constant
  params = {u.arg.slot for u in folded.toposort() if u.op is Ops.PARAM}
  assert params == {0, 1} and any(u.op is Ops.CONST and u.arg == 3.0 for u in folded.toposort())

def test_tinygrad_names() -> None:
  assert Ops.CDIV is Ops.IDIV and Ops.CMOD is Ops.MOD and Ops.RECIPROCAL is Ops.RECIP and Ops.STACK is Ops.VECTORIZE
  assert dtypes.float32.const(0.1) == pytest.approx(0.1, rel=1e-7) and dtypes.float32.const(0.1) != 0.1
  assert dtypes.int8.const(200) == -56 and dtypes.bool.const(3) is True and dtypes.int32.const(Invalid) is Invalid
  assert broadcast_axes((3, 1), (2, 3, 4)) == (0, 2) and broadcast_axes((4,), (4,)) == ()
  with pytest.raises(RuntimeError): broadcast_axes((1, 2, 3), (2, 3))
  f16, f32 = UOp.const(dtypes.float16, 1.0), UOp.const(dtypes.float32, 1.0)
  assert dtype_from_uop(Ops.ADD, (f32, f16), None) is dtypes.float32
  assert dtype_from_uop(Ops.CMPLT, (f32, f32), None) is dtypes.bool
  assert dtype_from_uop(Ops.CONST, (), 1.0) is dtypes.weakfloat and dtype_from_uop(Ops.CONST, (), True) is dtypes.bool
  assert dtype_from_uop(Ops.SQRT, (UOp.const(dtypes.int32, 4),), None) is dtypes.default_float
  with pytest.raises(TypeError): dtype_from_uop(Ops.CONST, (), (1, 2))
