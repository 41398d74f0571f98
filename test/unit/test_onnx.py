"""attograd.nn.onnx: the protobuf reader (malformed and hostile files), the runner (inputs, opsets, subgraphs,
sequences, external data, TinyJit, gradients) and operators on every device, checked against onnxruntime."""
from __future__ import annotations
import struct
import pytest
from attograd import Tensor, TinyJit, dtypes
from attograd.nn.onnx import OnnxError, OnnxRunner, decode, onnx_load

np = pytest.importorskip("numpy")

# ***** a protobuf writer, just enough to build hostile files without the onnx package *****

def _varint(v: int) -> bytes:
  v &= (1 << 64) - 1
  out = bytearray()
  while True:
    b = v & 0x7F
    v >>= 7
    out.append(b | (0x80 if v else 0))
    if not v: return bytes(out)

def _field(num: int, val: int | bytes) -> bytes:
  if isinstance(val, int): return _varint(num << 3) + _varint(val)
  return _varint(num << 3 | 2) + _varint(len(val)) + val

def _tensor(name: str, dims: list[int], data_type: int, raw: bytes, **extra: bytes) -> bytes:
  out = b"".join(_field(1, d) for d in dims) + _field(2, data_type) + _field(8, name.encode())
  if raw is not None: out += _field(9, raw)
  return out + b"".join(extra.values())

def _value_info(name: str, elem: int, dims: list[int]) -> bytes:
  shape = b"".join(_field(1, _field(1, d)) for d in dims)
  return _field(1, name.encode()) + _field(2, _field(1, _field(1, elem) + _field(2, shape)))

def _node(op: str, ins: list[str], outs: list[str]) -> bytes:
  return b"".join(_field(1, i.encode()) for i in ins) + b"".join(_field(2, o.encode()) for o in outs) + \
    _field(4, op.encode())

def _model(nodes: list[bytes], inits: list[bytes], ins: list[bytes], outs: list[bytes], opset: int = 17) -> bytes:
  graph = b"".join(_field(1, n) for n in nodes) + _field(2, b"g") + b"".join(_field(5, t) for t in inits) + \
    b"".join(_field(11, i) for i in ins) + b"".join(_field(12, o) for o in outs)
  return _field(1, 8) + _field(7, graph) + _field(8, _field(2, opset))

def _add_model(raw: bytes | None = struct.pack("<3f", 1, 2, 3), dims: list[int] | None = None,
               extra: dict | None = None) -> bytes:
  """y = x + w with w a float tensor of 3: raw=None leaves w's raw_data out (for external data)."""
  w = _tensor("w", dims if dims is not None else [3], 1, raw, **(extra or {}))
  return _model([_node("Add", ["x", "w"], ["y"])], [w], [_value_info("x", 1, [3])], [_value_info("y", 1, [3])])

# ***** the reader *****

def test_handwritten_model_runs():
  out = OnnxRunner(_add_model())({"x": [1.0, 1.0, 1.0]})["y"]
  assert out.tolist() == [2.0, 3.0, 4.0]

def test_model_from_tensor_bytes_and_path(tmp_path):
  raw = _add_model()
  path = tmp_path / "m.onnx"
  path.write_bytes(raw)
  for src in (raw, Tensor(raw), str(path), path):
    assert OnnxRunner(src)({"x": [0.0, 0.0, 0.0]})["y"].tolist() == [1.0, 2.0, 3.0]
  assert onnx_load(str(path)).opsets[""] == 17

@pytest.mark.parametrize("cut", [1, 5, 17, 40])
def test_truncated_file_is_an_error(cut):
  raw = _add_model()
  with pytest.raises(OnnxError): OnnxRunner(raw[:len(raw) - cut])

def test_garbage_is_an_error():
  import random
  rng = random.Random(0)
  for _ in range(200):
    junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    try: onnx_load(junk)
    except OnnxError: pass  # any other exception (or a crash) fails the test

def test_overlong_varint_is_an_error():
  with pytest.raises(OnnxError, match="varint"): decode(memoryview(b"\x08" + b"\xff" * 11 + b"\x01"), "Model", (0, 13))

def test_length_past_the_end_is_an_error():
  with pytest.raises(OnnxError, match="bytes long"): onnx_load(_varint(7 << 3 | 2) + _varint(1000) + b"abc")

def test_raw_data_size_must_match_shape():
  with pytest.raises(OnnxError, match="needs 12 bytes"): OnnxRunner(_add_model(raw=b"\x00" * 8))
  with pytest.raises(OnnxError, match="negative dims"): OnnxRunner(_add_model(dims=[-3]))

def test_huge_dims_are_refused_before_allocating():
  with pytest.raises(OnnxError, match="needs"): OnnxRunner(_add_model(dims=[1 << 40, 1 << 20]))

def test_nesting_is_bounded():
  # a graph inside an attribute inside a node inside a graph ... 200 levels deep
  g = _field(2, b"inner")
  for _ in range(200): g = _field(1, _field(5, _field(1, b"then_branch") + _field(20, 5) + _field(6, g)) + _field(4, b"If"))
  with pytest.raises(OnnxError, match="nested deeper"): onnx_load(_field(7, g))

def test_unknown_data_type_is_named():
  with pytest.raises(OnnxError, match="STRING"): OnnxRunner(_add_model(extra={"t": _field(2, 8)}))

def test_unsupported_operator_is_refused_at_load():
  raw = _model([_node("NoSuchOp", ["x"], ["y"])], [], [_value_info("x", 1, [3])], [_value_info("y", 1, [3])])
  with pytest.raises(OnnxError, match="NoSuchOp"): OnnxRunner(raw)

def test_external_data(tmp_path):
  (tmp_path / "w.bin").write_bytes(b"junk" + struct.pack("<3f", 4, 5, 6))
  ext = b"".join(_field(13, _field(1, k.encode()) + _field(2, v.encode()))
                 for k, v in (("location", "w.bin"), ("offset", "4"), ("length", "12")))
  raw = _add_model(raw=None, extra={"ext": ext + _field(14, 1)})
  (tmp_path / "m.onnx").write_bytes(raw)
  assert OnnxRunner(tmp_path / "m.onnx")({"x": [0.0, 0.0, 0.0]})["y"].tolist() == [4.0, 5.0, 6.0]
  with pytest.raises(OnnxError, match="from its path"): OnnxRunner(raw)

@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../x.bin"])
def test_external_data_stays_in_the_model_folder(tmp_path, location):
  ext = b"".join(_field(13, _field(1, k.encode()) + _field(2, v.encode())) for k, v in (("location", location),))
  raw = _add_model(raw=None, extra={"ext": ext + _field(14, 1)})
  (tmp_path / "m").mkdir()
  (tmp_path / "secret.bin").write_bytes(b"\x00" * 12)
  (tmp_path / "m" / "m.onnx").write_bytes(raw)
  with pytest.raises(OnnxError, match="outside the model's folder"): OnnxRunner(tmp_path / "m" / "m.onnx")

def test_input_checks():
  r = OnnxRunner(_add_model())
  with pytest.raises(OnnxError, match="missing input 'x'"): r({})
  with pytest.raises(OnnxError, match="shape"): r({"x": [1.0, 2.0]})
  with pytest.raises(OnnxError, match="float32"): r({"x": Tensor([1, 2, 3], dtype=dtypes.int32)})
  with pytest.raises(OnnxError, match="no inputs"): r({"x": [1.0, 2.0, 3.0], "z": [1.0]})
