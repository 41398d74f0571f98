"""codegen/offsets.py: the constant offset every load of an input buffer shares comes out of the kernel's AST as a
shift of the buffer's address, rounded down to keep the address 64-byte aligned."""
from __future__ import annotations
from attograd.codegen.offsets import split_offsets
from attograd.dtype import dtypes
from attograd.uop.ops import Ops, UOp
from attograd.uop.view import ShapeTracker, View

def _view(offset: int, shape: tuple[int, ...] = (4, 16)) -> UOp:
  return UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create(shape, None, offset),)))

def _kernel(*offsets: int, store_into_input: bool = False) -> UOp:
  """out[i, j] = sum of in[offset + 16 * i + j] over the given offsets (one load each), stored contiguously."""
  out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(64), (), 0)
  inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(1 << 20), (), 1)
  val = UOp(Ops.LOAD, dtypes.float32, (inp, _view(offsets[0])))
  for o in offsets[1:]: val = val + UOp(Ops.LOAD, dtypes.float32, (inp, _view(o)))
  stores = [UOp(Ops.STORE, dtypes.void, (out, _view(0), val))]
  if store_into_input: stores.append(UOp(Ops.STORE, dtypes.void, (inp, _view(0), val)))
  return UOp(Ops.SINK, dtypes.void, tuple(stores))

def test_layers_at_different_offsets_become_one_ast() -> None:
  a, sa = split_offsets(_kernel(4096, 4096 + 64))
  b, sb = split_offsets(_kernel(8192, 8192 + 64))
  assert a is b  # hash-consed: the same AST
  assert (sa, sb) == (((1, 4096 * 4),), ((1, 8192 * 4),))
  # the common part leaves, the difference stays in the views
  assert sorted(u.src[1].arg.views[0].offset for u in a.toposort() if u.op is Ops.LOAD) == [0, 64]

def test_shift_keeps_the_address_aligned() -> None:
  ast, shifts = split_offsets(_kernel(4096 + 5))  # 4096 floats is 64-byte aligned, 5 more is not
  assert shifts == ((1, 4096 * 4),)
  assert [u.src[1].arg.views[0].offset for u in ast.toposort() if u.op is Ops.LOAD] == [5]
  assert split_offsets(k := _kernel(15)) == (k, ())  # less than 64 bytes in: nothing to take out

def test_written_buffer_keeps_its_offsets() -> None:
  k = _kernel(4096, store_into_input=True)
  assert split_offsets(k) == (k, ())

def test_a_kernel_at_offset_zero_is_already_canonical() -> None:
  k = _kernel(0, 64)
  assert split_offsets(k) == (k, ())
  assert split_offsets(_kernel(4096, 4096 + 64))[0] is k
