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
  for _ in range(200):
    g = _field(1, _field(5, _field(1, b"then_branch") + _field(20, 5) + _field(6, g)) + _field(4, b"If"))
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

# ***** operators on every device, against onnxruntime *****

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

def _graph_model(nodes: list, inputs: dict[str, np.ndarray], outputs: list[str], opset: int = 17,
                 inits: dict[str, np.ndarray] | None = None) -> bytes:
  from onnx import numpy_helper
  ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()]
  outs = [onnx.ValueInfoProto(name=o) for o in outputs]  # untyped: onnxruntime infers them
  inits_ = [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()]
  g = helper.make_graph(nodes, "g", ins, outs, inits_)
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8).SerializeToString()

def _check(raw: bytes, inputs: dict[str, np.ndarray], atol: float = 1e-5) -> None:
  ort = pytest.importorskip("onnxruntime")
  want = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, inputs)
  got = list(OnnxRunner(raw)(inputs).values())
  for g, w in zip(got, want):
    assert g.dtype.name == str(w.dtype) or (g.dtype is dtypes.bool and w.dtype == np.bool_), (g.dtype, w.dtype)
    np.testing.assert_allclose(g.numpy(), w, atol=atol, rtol=1e-4)

_rng = np.random.default_rng(0)
_x4 = _rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
_w4 = _rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
OP_CASES = {
  "conv": ([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 0, 1, 2], strides=[2, 1])], {"x": _x4}, {"w": _w4}),
  "maxpool_indices": ([helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], strides=[2, 2],
                                        pads=[1, 1, 1, 1])],
                      {"x": _x4}, {}),
  "resize_linear": ([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")], {"x": _x4},
                    {"s": np.array([1, 1, 1.6, 0.6], np.float32)}),
  "gather_neg": ([helper.make_node("Gather", ["x", "i"], ["y"], axis=2)], {"x": _x4},
                 {"i": np.array([[-1, 0], [2, 4]], np.int64)}),
  "scatternd": ([helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add")], {"x": _x4[0, 0]},
                {"i": np.array([[1], [3], [1]], np.int64), "u": np.ones((3, 5), np.float32)}),
  "trig": ([helper.make_node(op, ["x"], [f"y{op}"]) for op in ("Erf", "Atan", "Sinh", "Asinh")], {"x": _x4 * 2}, {}),
  "inverse_trig": ([helper.make_node(op, ["x"], [f"y{op}"]) for op in ("Asin", "Acos", "Atanh")],
                   {"x": np.tanh(_x4) * 0.99}, {}),
  "layernorm": ([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=2)], {"x": _x4},
                {"g": _rng.standard_normal((5, 5)).astype(np.float32), "b": np.ones((5, 5), np.float32)}),
  "softmax_13": ([helper.make_node("Softmax", ["x"], ["y"], axis=1)], {"x": _x4}, {}),
  "einsum": ([helper.make_node("Einsum", ["x", "w"], ["y"], equation="bchw,ochw->bo")], {"x": _x4[..., :3, :3]},
             {"w": _w4}),
  "quantize": ([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
               {"x": _x4}, {"s": np.array(0.02, np.float32), "z": np.array(128, np.uint8)}),
  "int_math": ([helper.make_node("Div", ["a", "b"], ["d"]), helper.make_node("Mod", ["a", "b"], ["m"]),
                helper.make_node("ReduceSum", ["a", "ax"], ["s"], keepdims=0)],
               {"a": np.array([[7, -7, 5], [-9, 8, 3]], np.int32)},
               {"b": np.array([2, 3, -4], np.int32), "ax": np.array([1], np.int64)}),
}

@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_op_matches_onnxruntime(device, case):
  nodes, inputs, inits = OP_CASES[case]
  outs = [o for n in nodes for o in n.output][-4:] if case not in ("quantize",) else ["q", "y"]
  if case == "maxpool_indices": outs = ["y", "i"]
  _check(_graph_model(nodes, inputs, outs, inits=inits), inputs)

def test_softmax_opset_11_flattens():
  x = _rng.standard_normal((2, 3, 4)).astype(np.float32)
  for opset in (11, 13):
    _check(_graph_model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], {"x": x}, ["y"], opset=opset), {"x": x})

def test_if_and_loop():
  x = np.array([1.0, 2.0, 3.0], np.float32)
  # the branches read x from the enclosing graph
  then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                           [helper.make_tensor_value_info("t", 1, [3])])
  els = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                          [helper.make_tensor_value_info("e", 1, [3])])
  node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=els)
  for c in (True, False): _check(_graph_model([node], {"x": x, "c": np.array(c)}, ["y"]), {"x": x, "c": np.array(c)})
  # a loop that doubles a value M times and collects each step
  body = helper.make_graph(
    [helper.make_node("Add", ["v", "v"], ["v2"]), helper.make_node("Identity", ["cond"], ["cond2"]),
     helper.make_node("Identity", ["v2"], ["scan"])], "body",
    [helper.make_tensor_value_info("i", 7, []), helper.make_tensor_value_info("cond", 9, []),
     helper.make_tensor_value_info("v", 1, [3])],
    [helper.make_tensor_value_info("cond2", 9, []), helper.make_tensor_value_info("v2", 1, [3]),
     helper.make_tensor_value_info("scan", 1, [3])])
  loop = helper.make_node("Loop", ["M", "", "x"], ["final", "steps"], body=body)
  _check(_graph_model([loop], {"x": x}, ["final", "steps"], inits={"M": np.array(4, np.int64)}), {"x": x})

def test_sequences():
  x = _rng.standard_normal((4, 3)).astype(np.float32)
  nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0, keepdims=0),
           helper.make_node("SequenceErase", ["seq", "p"], ["seq2"]),
           helper.make_node("ConcatFromSequence", ["seq2"], ["y"], axis=0, new_axis=1),
           helper.make_node("SequenceLength", ["seq2"], ["n"])]
  _check(_graph_model(nodes, {"x": x}, ["y", "n"], inits={"p": np.array(1, np.int64)}), {"x": x})

def test_runner_graph_differentiates():
  torch = pytest.importorskip("torch")
  nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Erf", ["c"], ["e"]),
           helper.make_node("MaxPool", ["e"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
  raw = _graph_model(nodes, {"x": _x4[..., :4, :4]}, ["y"], inits={"w": _w4})
  x = Tensor(_x4[..., :4, :4], requires_grad=True)
  OnnxRunner(raw)({"x": x})["y"].sum().backward()
  tx = torch.tensor(_x4[..., :4, :4], requires_grad=True)
  ty = torch.nn.functional.max_pool2d(torch.erf(torch.nn.functional.conv2d(tx, torch.tensor(_w4), padding=1)), 2)
  ty.sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-4, rtol=1e-4)

def test_tinyjit_replays_runner():
  raw = _graph_model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": _x4}, ["y"], inits={"w": _w4})
  runner = OnnxRunner(raw)
  step = TinyJit(lambda t: runner({"x": t})["y"].realize())
  for i in range(4):
    x = (_x4 + i).astype(np.float32)
    want = OnnxRunner(raw)({"x": x})["y"].numpy()
    np.testing.assert_allclose(step(Tensor(x)).numpy(), want, atol=1e-5)
