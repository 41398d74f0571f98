"""The scheduler's fusion rules (schedule/fusion.py), on graphs alone: a permute or shrink of a reduce read only there
is pushed into the reduce's input (through elementwise ops and reshapes that add or drop size-1 dims), and the
rebuilt nodes map back to the nodes whose values they hold."""
from attograd import Tensor, dtypes
from attograd.schedule.fusion import fuse_graph
from attograd.uop.ops import Ops, UOp

def _fused(*outs: Tensor) -> tuple[list[UOp], dict[UOp, UOp]]:
  us = [t.uop for t in outs]
  topo = list({n: None for u in us for n in u.toposort()})
  new, _, back = fuse_graph(us, topo)
  return new, back

def _ops(u: UOp) -> list[Ops]: return [n.op for n in u.toposort()]

def test_permute_of_a_reduce_becomes_a_reduce_of_the_permute():
  x = Tensor.empty(4, 5, 6, device="NULL")
  out = x.sum(1, keepdim=True).permute(2, 1, 0)
  (new,), back = _fused(out)
  assert new.op is Ops.REDUCE_AXIS and new.arg == (Ops.ADD, (1,)) and new.src[0].op is Ops.PERMUTE
  assert new.shape == out.shape == (6, 1, 4) and back[new] is out.uop

def test_shrink_of_a_reduce_reduces_only_the_kept_rows():
  x = Tensor.empty(8, 5, device="NULL")
  out = x.max(1)[2:6]  # a reshape dropping the size-1 dim, then the shrink
  (new,), _ = _fused(out)
  assert new.op is Ops.RESHAPE and new.shape == (4,)
  red = new.src[0]
  assert red.op is Ops.REDUCE_AXIS and red.src[0].op is Ops.SHRINK and red.src[0].arg == ((2, 6), (0, 5))

def test_pushed_through_elementwise_ops_and_casts():
  x, b = Tensor.empty(4, 6, device="NULL"), Tensor.empty(6, 4, device="NULL")
  out = (x.sum(1, keepdim=True).cast(dtypes.half) * 2).permute(1, 0) + b[:1]
  (new,), _ = _fused(out)
  # no movement op is left above the reduce: it fuses with the add
  reds = [n for n in new.toposort() if n.op is Ops.REDUCE_AXIS]
  assert len(reds) == 1 and reds[0].src[0].op is Ops.PERMUTE and new.shape == out.shape

def test_a_reduce_read_twice_is_left_alone():
  # it gets a buffer of its own anyway; pushing the permute would reduce twice
  x = Tensor.empty(4, 6, device="NULL")
  r = x.sum(1, keepdim=True)
  outs, back = _fused(r.permute(1, 0) + 1, r * 2)
  assert outs == [(r.permute(1, 0) + 1).uop, (r * 2).uop]
  assert back == {}

def test_other_views_are_not_pushed():
  # an expand (softmax's max read by every element) and a pad keep their place
  x = Tensor.empty(4, 6, device="NULL")
  for out in (x - x.max(1, keepdim=True), x.sum(1, keepdim=True).pad(((1, 1), (0, 0)))):
    (new,), back = _fused(out)
    assert new is out.uop and back == {}

def test_reduce_of_a_reduce_is_one_reduce():
  x = Tensor.empty(4, 5, 6, device="NULL")
  cases = ((x.sum(2).sum(0), (0, 2)), (x.max(1, keepdim=True).max(2), (1, 2)), (x.sum((0, 1)).sum(), (0, 1, 2)))
  for out, axes in cases:
    (new,), back = _fused(out)
    reds = [n for n in new.toposort() if n.op is Ops.REDUCE_AXIS]
    assert len(reds) == 1 and reds[0].arg[1] == axes and reds[0].src[0] is x.uop and new.shape == out.shape
  # different ops, or a value between them, stay two reduces
  for out in (x.sum(2).max(0), x.sum(2).relu().sum(0)):
    (new,), _ = _fused(out)
    assert sum(1 for n in new.toposort() if n.op is Ops.REDUCE_AXIS) == 2

def test_pad_of_nothing_is_zeros():
  x = Tensor.empty(4, device="NULL")
  out = x[2:2].pad(((1, 2),))
  (new,), _ = _fused(out)
  assert Ops.BUFFER not in _ops(new) and new.shape == (3,)
