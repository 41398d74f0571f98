"""docs/template_device.py works: TOY is registered through Device.register and passes part of the device suite.

The suite's own test functions are imported here; this module's `device` fixture runs them on TOY only.
"""
from __future__ import annotations
import importlib.util, os
from typing import Iterator
import numpy as np
import pytest
from attograd import Device, Tensor, dtypes
from attograd.device import ALL_DEVICES, Buffer
from attograd.uop.ops import Ops, UOp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("template_device", os.path.join(ROOT, "docs", "template_device.py"))
assert _spec is not None and _spec.loader is not None
template = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(template)
if "TOY" not in ALL_DEVICES: template.register()  # once per process, however pytest imports this module

# a representative slice of the device suite: elementwise ops, binary ops, reduces,
# matmul, movement ops and concatenation, and backward passes through conv/pool layers
from test_ops import (test_unary, test_binary, test_reduce, test_matmul_dtypes,  # noqa: E402,F401
                      test_matmul_views, test_movement, test_cat)
from test_gradient import test_backward_sets_grad, test_nn_vs_finite_differences  # noqa: E402,F401

@pytest.fixture(params=["TOY"])
def device(request: pytest.FixtureRequest) -> Iterator[str]:
  ok, why = Device.available(request.param)
  if not ok: pytest.skip(f"TOY unavailable: {why}")
  old = Device.DEFAULT
  Device.DEFAULT = request.param
  try: yield request.param
  finally: Device.DEFAULT = old

def test_toy_memory_is_bytearrays(device: str) -> None:
  b = Buffer("TOY", 3, dtypes.float32, initial=np.array([1, 2, 3], dtype=np.float32).data)
  assert isinstance(b._buf, bytearray) and np.frombuffer(b.as_bytes(), np.float32).tolist() == [1.0, 2.0, 3.0]
  assert (Tensor([1.0, 2.0, 3.0]) * 2).tolist() == [2.0, 4.0, 6.0]

def test_ensure_allocated_keeps_memory(device: str) -> None:
  b = Buffer("TOY", 3, dtypes.float32)
  assert not b.is_allocated() and b.ensure_allocated() is b and b.is_allocated()
  mem = b._buf
  assert b.ensure_allocated()._buf is mem  # tinygrad's name: allocates once, then keeps what it has

def test_toy_rewrite_rule_runs(device: str) -> None:
  x = UOp(Ops.DEFINE_GLOBAL, arg=0)
  sink = UOp(Ops.SINK, src=(UOp(Ops.RECIP, x.dtype, (UOp.const(x.dtype, 4.0),)),))
  out = Device["TOY"].renderer.prepare(sink)
  assert not any(u.op is Ops.RECIP for u in out.toposort())
  assert any(u.op is Ops.FDIV for u in out.toposort())

def test_toy_copies_to_and_from_cpu(device: str) -> None:
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  t = Tensor(a, device="TOY")
  np.testing.assert_equal(t.to("PYTHON").numpy(), a)
  np.testing.assert_equal(Tensor(a, device="PYTHON").to("TOY").add(1).numpy(), a + 1)

def test_register_refuses_duplicates_and_bad_names() -> None:
  with pytest.raises(ValueError, match="already registered"): Device.register("TOY", template.ToyDevice)
  with pytest.raises(ValueError, match="already registered"): Device.register("cpu", template.ToyDevice)
  with pytest.raises(ValueError, match="plain word"): Device.register("TOY:2", template.ToyDevice)
