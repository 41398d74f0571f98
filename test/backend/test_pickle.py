"""Tensors through pickle: a realized tensor carries its values (the unpickled graph gets buffers of its own, also in
another process), a lazy one its graph, and requires_grad and .grad come along."""
from __future__ import annotations
import os, pickle, subprocess, sys
import numpy as np
from attograd import Device, Tensor

def test_realized_tensor_round_trip(device: str) -> None:
  t = Tensor.rand(10, 10).realize()
  want = t.numpy()
  blob = pickle.dumps(t)
  del t  # its buffer freed: the pickle holds the values
  t2 = pickle.loads(blob)
  assert t2.device == Device.canonicalize(device)
  np.testing.assert_array_equal(t2.numpy(), want)

def test_lazy_graph_stays_lazy_and_independent(device: str) -> None:
  a = Tensor([1.0, 2.0, 3.0]).realize()
  lazy = a * 3 + Tensor.arange(3)
  back = pickle.loads(pickle.dumps(lazy))
  assert not any(n.op.name == "BUFFER" and n in lazy.uop.toposort() for n in back.uop.toposort())  # own buffers
  a.assign(Tensor([0.0, 0.0, 0.0]))  # the original's buffer changes; the unpickled graph reads its own copy
  assert back.tolist() == [3.0, 7.0, 11.0] and (a * 3 + Tensor.arange(3)).tolist() == [0.0, 1.0, 2.0]

def test_requires_grad_and_grad_come_along(device: str) -> None:
  a = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  (a * a).sum().backward()
  b = pickle.loads(pickle.dumps(a))
  assert b.requires_grad and b.grad is not None and b.grad.tolist() == [2.0, 4.0, 6.0]
  (b * 2).sum().backward()
  assert b.grad.tolist() == [4.0, 6.0, 8.0]

def test_sharded_tensor_round_trip() -> None:
  s = Tensor(np.arange(8, dtype=np.float32).reshape(4, 2)).shard(("CPU:0", "CPU:1"), 0).contiguous().realize()
  s2 = pickle.loads(pickle.dumps(s))
  assert s2.device == s.device and s2.tolist() == s.tolist()

def test_unpickled_in_another_process(tmp_path: object) -> None:
  # the same buffer numbers mean other buffers in the other process: its own tensors must not be touched
  path = os.path.join(str(tmp_path), "t.pkl")
  with open(path, "wb") as f: pickle.dump(Tensor([[1.5, -2.0], [3.0, 4.25]]).realize() * 2, f)
  code = ("import pickle; from attograd import Tensor; mine = Tensor([9.0, 9.0]).realize(); "
          f"t = pickle.load(open({path!r}, 'rb')); print(t.tolist(), mine.tolist())")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")})
  assert out.stdout.strip() == "[[3.0, -4.0], [6.0, 8.5]] [9.0, 9.0]"

def test_protocol_5_sends_the_bytes_out_of_band(device: str) -> None:
  # PickleBuffer views of the memory: with a buffer_callback the bytes leave the pickle (no copy of host memory)
  t = Tensor(np.arange(1000, dtype=np.float32), device=device).realize()
  oob: list = []
  blob = pickle.dumps(t, protocol=5, buffer_callback=oob.append)
  assert len(oob) == 1 and len(blob) < 1000 and memoryview(oob[0]).nbytes == 4000
  np.testing.assert_array_equal(pickle.loads(blob, buffers=oob).numpy(), np.arange(1000, dtype=np.float32))
  for protocol in (2, 4, 5):  # in band, the values are in the pickle
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(t, protocol=protocol)).numpy(), t.numpy())

def test_loading_many_tensors_frees_each_ones_bytes_as_it_goes() -> None:
  import tracemalloc
  n, m = 6, 250_000
  blob = pickle.dumps([Tensor.rand(m).realize() for _ in range(n)], protocol=5, buffer_callback=lambda pb: pb.release())
  tracemalloc.start()
  try:
    out = pickle.loads(blob, buffers=(pickle.PickleBuffer(bytearray(m * 4)) for _ in range(n)))
    assert tracemalloc.get_traced_memory()[1] < 2 * m * 4  # one tensor's bytes at a time, not all six
  finally: tracemalloc.stop()
  assert len(out) == n and out[0].shape == (m,)

def test_old_pickles_of_pairs_still_load() -> None:
  from attograd.tensor.core import _unpickle_tensor
  t = Tensor([1.0, 2.0]).realize()
  fn, (uop, data, rg, grad) = t.__reduce_ex__(4)
  old = [(data[i], data[i + 1]) for i in range(0, len(data), 2)]
  assert fn(uop, old, rg, grad).tolist() == [1.0, 2.0] and fn is _unpickle_tensor
