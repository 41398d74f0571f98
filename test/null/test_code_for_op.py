"""`renderer.code_for_op`: tinygrad's table of the ALU ops a language writes natively, as functions of source text."""
from attograd import Device, dtypes
from attograd.renderer.cstyle import ClangRenderer, OpenCLRenderer
from attograd.uop.ops import Ops

def test_c_table_renders_what_the_kernels_use():
  t = ClangRenderer().code_for_op
  assert Ops.SQRT in t and Ops.ADD in t and Ops.WHERE in t
  assert t[Ops.ADD]("a", "b", dtypes.int32) == "(a+b)"
  assert t[Ops.SQRT]("x", dtypes.float32) == "sqrtf(x)" and t[Ops.SQRT]("x", dtypes.float64) == "sqrt(x)"
  assert t[Ops.WHERE]("c", "x", "y", dtypes.float32) == "(c?x:y)"
  assert t[Ops.MAX]("a", "b", dtypes.int32) == "((a>b)?a:b)"

def test_opencl_table_uses_overloads():
  assert OpenCLRenderer().code_for_op[Ops.SIN]("x", dtypes.float32) == "sin(x)"

def test_every_device_has_a_table():
  # tinygrad's tests test membership (`Ops.SQRT in renderer.code_for_op`): a mapping on every renderer
  for d in ("CPU", "PYTHON"):
    assert isinstance(Device[d].renderer.code_for_op, dict)
