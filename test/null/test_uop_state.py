"""uop/state.py: the named slots other layers keep on UOps, and that no code outside it reads or writes them raw."""
from __future__ import annotations
import gc, os, re, weakref
import pytest
from attograd import Tensor
from attograd.dtype import dtypes
from attograd.engine.buffers import buffers
from attograd.uop import state
from attograd.uop.ops import Ops, UOp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _fresh(name: str) -> UOp: return UOp(Ops.DEFINE_VAR, dtypes.int32, arg=(name, 0, 7))  # a node of its own

class _Value: pass

def test_get_has_put_drop() -> None:
  u = _fresh("state_roundtrip")
  for slot in state.SLOTS:
    assert not state.has(u, slot) and state.get(u, slot) is None and state.get(u, slot, 3) == 3
    state.put(u, slot, slot + "!")
    assert state.has(u, slot) and state.get(u, slot) == slot + "!" and state.slots(u)[slot] == slot + "!"
    state.drop(u, slot)
    state.drop(u, slot)  # dropping an empty slot is fine
    assert not state.has(u, slot)

def test_slot_value_lives_as_long_as_its_node() -> None:
  u, v = _fresh("state_lifetime"), _Value()
  state.put(u, state.ORIGIN, v)
  ref = weakref.ref(v)
  del v
  assert ref() is not None
  del u
  gc.collect()
  assert ref() is None

def test_engine_slots_are_the_listed_ones() -> None:
  t = Tensor([1.0, 2.0]).realize()
  base = t.uop.base
  assert state.get(base, state.BUFFER) is buffers[base] and base.realized is buffers[base]
  assert set(state.SLOTS) == {state.BUFFER, state.REALIZED, state.PURE, state.ORIGIN}

def test_no_raw_slot_access_outside_state() -> None:
  # every slot goes through uop/state.py: a raw `x.__dict__["buffer"]` elsewhere is a slot nobody lists
  names = "|".join(re.escape(s) for s in state.SLOTS)
  subscript = r"__dict__\s*(\[|\.get\(|\.setdefault\(|\.pop\()\s*[\"'](" + names + r")[\"']"
  membership = r"[\"'](" + names + r")[\"']\s+(not\s+)?in\s+[\w.]*__dict__"
  raw = re.compile(subscript + "|" + membership)
  bad = []
  for d, _, files in os.walk(os.path.join(ROOT, "attograd")):
    for f in files:
      if not f.endswith(".py") or os.path.join(d, f).endswith(os.path.join("uop", "state.py")): continue
      with open(os.path.join(d, f), encoding="utf-8") as fh:
        bad += [f"{os.path.relpath(os.path.join(d, f), ROOT)}:{i}: {line.strip()}"
                for i, line in enumerate(fh, 1) if raw.search(line)]
  assert not bad, "raw access to UOp state slots (use attograd.uop.state):\n" + "\n".join(bad)

def test_buffer_of_a_buffer_node_and_its_reshapes():
  a = Tensor.empty(10, device="NULL")
  assert a.uop.buffer is a.uop.buffer and a.uop.buffer.size == 10 and not a.uop.buffer.is_allocated()
  assert a.reshape(2, 5).uop.buffer is a.uop.buffer
  with pytest.raises(RuntimeError, match="contiguous"): a.reshape(2, 5).permute(1, 0).uop.buffer
  with pytest.raises(AssertionError, match="must be BUFFER"): (a + 1).uop.buffer
  b = Tensor.zeros(4, device="NULL").contiguous()
  c, d, e = b * 2, b * 2, b * 3
  Tensor.realize(c, d, e)
  assert c.uop.buffer is d.uop.buffer and c.uop.buffer is not e.uop.buffer and c.uop.buffer.is_allocated()
