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
                 inits: dict[str, np.ndarray] | None = None, domains: dict[str, int] | None = None) -> bytes:
  from onnx import numpy_helper
  ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()]
  outs = [onnx.ValueInfoProto(name=o) for o in outputs]  # untyped: onnxruntime infers them
  inits_ = [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()]
  g = helper.make_graph(nodes, "g", ins, outs, inits_)
  opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (domains or {}).items()]
  return helper.make_model(g, opset_imports=opsets, ir_version=10 if opset >= 21 else 8).SerializeToString()

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
  # MaxPool and LpPool go through max_pool2d and avg_pool2d: ceil_mode, the column-major indices, dilation
  "maxpool_ceil_colmajor": ([helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 3], strides=[2, 2],
                                              ceil_mode=1, storage_order=1, pads=[0, 1, 0, 0])],
                            {"x": _rng.standard_normal((2, 2, 6, 7)).astype(np.float32)}, {}),
  "maxpool_dilation": ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 1],
                                         pads=[1, 0, 0, 1])], {"x": _x4}, {}),
  "lppool": ([helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], p=3)],
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
  if case in ("maxpool_indices", "maxpool_ceil_colmajor"): outs = ["y", "i"]
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

# ***** ai.onnx.ml, com.microsoft and the newer ai.onnx operators, against onnxruntime *****

MS, ML = {"com.microsoft": 1}, {"ai.onnx.ml": 3}
_f = lambda *shape: _rng.standard_normal(shape).astype(np.float32)  # noqa: E731
_h, _h2 = _f(2, 3, 8), _f(2, 3, 8)
_ids = np.array([[1, 2, 3, 0], [4, 0, 1, 1]], np.int32)
_xa, _wa, _ba = _f(2, 4, 8), _f(8, 24), _f(24)

def _ms(op: str, ins: list[str], outs: list[str], **attrs: object) -> onnx.NodeProto:
  return helper.make_node(op, ins, outs, domain="com.microsoft", **attrs)

def _q(shape: tuple[int, ...], dtype: type) -> np.ndarray:
  lo, hi = (0, 256) if dtype is np.uint8 else (-128, 128)
  return _rng.integers(lo, hi, shape).astype(dtype)

# case: (nodes, graph inputs, initializers, domains, opset)
NEW_OP_CASES: dict[str, tuple] = {
  "array_feature_extractor": ([helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml")],
                              {"x": _f(2, 3, 5)}, {"i": np.array([4, 0, 0], np.int64)}, ML, 17),
  "array_feature_extractor_1d_int": ([helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"],
                                                       domain="ai.onnx.ml")], {"x": np.arange(6, dtype=np.int32)},
                                     {"i": np.array([[5], [1]], np.int64)}, ML, 17),
  "binarizer": ([helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.3)], {"x": _f(3, 4)}, {},
                ML, 17),
  "binarizer_at_threshold": ([helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=-0.5)],
                             {"x": np.array([-0.5, -0.25, -1, 0, np.inf, -np.inf], np.float32)}, {}, ML, 17),
  "bias_gelu": ([_ms("BiasGelu", ["x", "b"], ["y"])], {"x": _h}, {"b": _f(8)}, MS, 17),
  "fast_gelu": ([_ms("FastGelu", ["x", "b"], ["y"]), _ms("FastGelu", ["x"], ["y2"])], {"x": _h * 3}, {"b": _f(8)},
                MS, 17),
  "ms_gelu_quick_gelu": ([_ms("Gelu", ["x"], ["y"]), _ms("QuickGelu", ["x"], ["y2"], alpha=1.3)], {"x": _h}, {}, MS,
                         17),
  "skip_layernorm": ([_ms("SkipLayerNormalization", ["x", "s", "g", "be", "bi"], ["y", "m", "iv", "sum"],
                          epsilon=1e-3)],
                     {"x": _h}, {"s": _h2, "g": _f(8), "be": _f(8), "bi": _f(8)}, MS, 17),
  "skip_layernorm_broadcast_skip": ([_ms("SkipLayerNormalization", ["x", "s", "g"], ["y"])], {"x": _h},
                                    {"s": _h2[0], "g": _f(8)}, MS, 17),
  "skip_simplified_layernorm": ([_ms("SkipSimplifiedLayerNormalization", ["x", "s", "g", "bi"], ["y", "", "iv", "sum"],
                                     epsilon=1e-4)], {"x": _h}, {"s": _h2, "g": _f(8), "bi": _f(8)}, MS, 17),
  "simplified_layernorm": ([helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y", "iv"], axis=1,
                                             epsilon=1e-3)], {"x": _h}, {"g": _f(3, 8)}, {}, 17),
  "embed_layernorm": ([_ms("EmbedLayerNormalization", ["ids", "seg", "we", "pe", "se", "g", "b", "mask"],
                           ["y", "mi", "emb"], epsilon=1e-5)], {"ids": _ids},
                      {"seg": (_ids % 2).astype(np.int32), "we": _f(5, 8), "pe": _f(6, 8), "se": _f(2, 8), "g": _f(8),
                       "b": _f(8), "mask": np.array([[1, 1, 1, 0], [1, 0, 1, 1]], np.int32)}, MS, 17),
  "embed_layernorm_no_segment_position_ids": ([_ms("EmbedLayerNormalization", ["ids", "", "we", "pe", "", "g", "b", "",
                                                                             "pid"], ["y", "mi"])], {"ids": _ids},
                                              {"we": _f(5, 8), "pe": _f(6, 8), "g": _f(8), "b": _f(8),
                                               "pid": np.array([[5, 4, 3, 2], [0, 1, 2, 3]], np.int32)}, MS, 17),
  "attention": ([_ms("Attention", ["x", "w", "b"], ["y", "p"], num_heads=2)], {"x": _xa}, {"w": _wa, "b": _ba}, MS, 17),
  "attention_causal_lengths": ([_ms("Attention", ["x", "w", "b", "m"], ["y"], num_heads=4, unidirectional=1,
                                    scale=0.3, mask_filter_value=-500.0)], {"x": _xa},
                               {"w": _wa, "b": _ba, "m": np.array([3, 2], np.int32)}, MS, 17),
  "attention_left_padding": ([_ms("Attention", ["x", "w", "", "m"], ["y"], num_heads=2)], {"x": _xa},
                             {"w": _wa, "m": np.array([4, 3, 1, 0], np.int32)}, MS, 17),
  "attention_raw_mask_2d": ([_ms("Attention", ["x", "w", "b", "m"], ["y"], num_heads=2)], {"x": _xa},
                            {"w": _wa, "b": _ba, "m": np.array([[1, 0, 1, 1], [1, 1, 0, 0]], np.int32)}, MS, 17),
  "attention_raw_mask_3d_bias": ([_ms("Attention", ["x", "w", "b", "m", "", "ab"], ["y"], num_heads=2)], {"x": _xa},
                                 {"w": _wa, "b": _ba, "m": (_rng.random((2, 4, 4)) > 0.3).astype(np.int32),
                                  "ab": _f(1, 2, 4, 4)}, MS, 17),
  "attention_past_causal": ([_ms("Attention", ["x", "w", "b", "", "past"], ["y", "present"], num_heads=2,
                                 unidirectional=1)], {"x": _xa}, {"w": _wa, "b": _ba, "past": _f(2, 2, 2, 3, 4)},
                            MS, 17),
  "attention_qkv_sizes": ([_ms("Attention", ["x", "w", "b"], ["y"], num_heads=2, qkv_hidden_sizes=[4, 4, 16])],
                          {"x": _xa}, {"w": _wa, "b": _ba}, MS, 17),
  "ms_rotary_offset": ([_ms("RotaryEmbedding", ["x", "pid", "c", "s"], ["y"], num_heads=2)], {"x": _h},
                       {"pid": np.array([2], np.int64), "c": _f(10, 2), "s": _f(10, 2)}, MS, 17),
  "ms_rotary_interleaved_partial": ([_ms("RotaryEmbedding", ["x", "pid", "c", "s"], ["y"], num_heads=2, interleaved=1,
                                         rotary_embedding_dim=2)], {"x": _h},
                                    {"pid": np.array([[0, 1, 2], [5, 6, 7]], np.int64), "c": _f(10, 1),
                                     "s": _f(10, 1)}, MS, 17),
  "ms_rotary_4d": ([_ms("RotaryEmbedding", ["x", "pid", "c", "s"], ["y"])], {"x": _f(2, 2, 3, 4)},
                   {"pid": np.array([[0, 1, 2], [3, 4, 5]], np.int64), "c": _f(10, 2), "s": _f(10, 2)}, MS, 17),
  "tensorscatter_prefill": ([helper.make_node("TensorScatter", ["c", "u"], ["y"])], {"c": _f(2, 3, 5, 2)},
                            {"u": _f(2, 3, 2, 2)}, {}, 24),
  "tensorscatter_indices": ([helper.make_node("TensorScatter", ["c", "u", "w"], ["y"])], {"c": _f(2, 3, 5, 2)},
                            {"u": _f(2, 3, 2, 2), "w": np.array([3, 1], np.int64)}, {}, 24),
  "tensorscatter_circular_axis1": ([helper.make_node("TensorScatter", ["c", "u", "w"], ["y"], mode="circular", axis=1)],
                                   {"c": np.arange(30, dtype=np.int64).reshape(2, 5, 3)},
                                   {"u": -np.arange(18, dtype=np.int64).reshape(2, 3, 3) - 1,
                                    "w": np.array([4, 2], np.int64)}, {}, 24),
  "qlinear_add_mul_uint8": ([_ms("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"]),
                             _ms("QLinearMul", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y2"])],
                            {"a": _q((2, 5), np.uint8)},
                            {"as": np.array(0.05, np.float32), "az": np.array(120, np.uint8), "b": _q((5,), np.uint8),
                             "bs": np.array(0.02, np.float32), "bz": np.array(130, np.uint8),
                             "cs": np.array(0.1, np.float32), "cz": np.array(128, np.uint8)}, MS, 17),
  "qlinear_add_mul_int8": ([_ms("QLinearAdd", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"]),
                            _ms("QLinearMul", ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y2"])],
                           {"a": _q((3, 4), np.int8)},
                           {"as": np.array(0.03, np.float32), "az": np.array(-3, np.int8), "b": _q((3, 4), np.int8),
                            "bs": np.array(0.04, np.float32), "bz": np.array(5, np.int8),
                            "cs": np.array(0.07, np.float32), "cz": np.array(-1, np.int8)}, MS, 17),
  "qlinear_global_average_pool": ([_ms("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"]),
                                   _ms("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y2"],
                                       channels_last=1)], {"x": _q((2, 3, 4, 5), np.uint8)},
                                  {"xs": np.array(0.05, np.float32), "xz": np.array(100, np.uint8),
                                   "ys": np.array(0.02, np.float32), "yz": np.array(110, np.uint8)}, MS, 17),
  "ms_quantize_dequantize": ([_ms("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
                              _ms("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)], {"x": _f(2, 3, 4)},
                             {"s": np.array([0.01, 0.02, 0.05], np.float32), "z": np.array([0, 3, -4], np.int8)},
                             MS, 17),
  "qlinear_matmul_conv": ([helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"]),
                           helper.make_node("QLinearConv", ["x", "as", "az", "w", "ws", "wz", "ys", "yz", "bias"],
                                            ["y2"], pads=[1, 1, 1, 1])],
                          {"a": _q((3, 4), np.uint8), "x": _q((1, 2, 4, 4), np.uint8)},
                          {"as": np.array(0.02, np.float32), "az": np.array(128, np.uint8), "b": _q((4, 5), np.uint8),
                           "bs": np.array(0.03, np.float32), "bz": np.array(120, np.uint8),
                           "w": _q((3, 2, 3, 3), np.uint8), "ws": np.array([0.01, 0.02, 0.03], np.float32),
                           "wz": np.array([128, 128, 128], np.uint8), "ys": np.array(0.5, np.float32),
                           "yz": np.array(100, np.uint8), "bias": np.array([10, -20, 30], np.int32)}, {}, 13),
  "qlinear_matmul_conv_int8": ([helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                                                 ["y"]),
                                helper.make_node("QLinearConv", ["x", "as", "az", "w", "ws", "wz", "ys", "yz"], ["y2"],
                                                 strides=[2, 1], group=2)],
                               {"a": _q((2, 3, 4), np.int8), "x": _q((1, 4, 5, 5), np.int8)},
                               {"as": np.array(0.02, np.float32), "az": np.array(-3, np.int8), "b": _q((4, 5), np.int8),
                                "bs": np.array([0.01, 0.02, 0.03, 0.04, 0.05], np.float32),
                                "bz": np.zeros(5, np.int8), "w": _q((2, 2, 3, 3), np.int8),
                                "ws": np.array([0.01, 0.03], np.float32), "wz": np.zeros(2, np.int8),
                                "ys": np.array(0.3, np.float32), "yz": np.array(4, np.int8)}, {}, 13),
  "integer_matmul_conv_dynamic_quantize": ([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"]),
                                            helper.make_node("ConvInteger", ["x", "w", "xz"], ["y2"], strides=[2, 2]),
                                            helper.make_node("DynamicQuantizeLinear", ["f"], ["q", "qs", "qz"])],
                                           {"a": _q((3, 4), np.uint8), "x": _q((1, 2, 5, 5), np.uint8), "f": _f(3, 7)},
                                           {"b": _q((4, 2), np.uint8), "az": np.array(12, np.uint8),
                                            "bz": np.array(200, np.uint8), "w": _q((2, 2, 3, 3), np.uint8),
                                            "xz": np.array(7, np.uint8)}, {}, 13),
}

@pytest.mark.parametrize("case", sorted(NEW_OP_CASES))
def test_new_op_matches_onnxruntime(device, case):
  nodes, inputs, inits, domains, opset = NEW_OP_CASES[case]
  outs = [o for n in nodes for o in n.output if o]
  _check(_graph_model(nodes, inputs, outs, opset=opset, inits=inits, domains=domains), inputs)

_BAD_INPUTS: dict[str, tuple] = {
  "ArrayFeatureExtractor": ([helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml")],
                            {"x": _f(2, 3)}, {"i": np.array([3], np.int64)}, ML, 17, "out of range"),
  "Binarizer": ([helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml")], {"x": np.array([True])}, {}, ML,
                17, "bool"),
  "SkipLayerNormalization": ([_ms("SkipLayerNormalization", ["x", "s", "g"], ["y"])], {"x": _h},
                             {"s": _h2, "g": _f(7)}, MS, 17, r"gamma must have shape \(8,\)"),
  "EmbedLayerNormalization": ([_ms("EmbedLayerNormalization", ["ids", "seg", "we", "pe", "", "g", "b"], ["y"])],
                              {"ids": _ids}, {"seg": _ids, "we": _f(5, 8), "pe": _f(6, 8), "g": _f(8), "b": _f(8)},
                              MS, 17, "segment_ids and segment_embedding"),
  "Attention": ([_ms("Attention", ["x", "w"], ["y"], num_heads=3)], {"x": _xa}, {"w": _wa}, MS, 17,
                "multiples of num_heads=3"),
  "Attention do_rotary": ([_ms("Attention", ["x", "w"], ["y"], num_heads=2, do_rotary=1)], {"x": _xa}, {"w": _wa}, MS,
                          17, "do_rotary"),
  "Attention mask_index": ([_ms("Attention", ["x", "w", "", "m"], ["y"], num_heads=2)], {"x": _xa},
                           {"w": _wa, "m": np.ones((2, 1, 4, 4), np.int32)}, MS, 17, r"mask_index must be"),
  "RotaryEmbedding": ([_ms("RotaryEmbedding", ["x", "pid", "c", "s"], ["y"], num_heads=3)], {"x": _h},
                      {"pid": np.array([0], np.int64), "c": _f(10, 2), "s": _f(10, 2)}, MS, 17, "num_heads=3"),
  "TensorScatter": ([helper.make_node("TensorScatter", ["c", "u"], ["y"])], {"c": _f(2, 5, 2)}, {"u": _f(2, 6, 2)},
                    {}, 24, "no longer"),
  "ImageDecoder": ([helper.make_node("ImageDecoder", ["x"], ["y"])], {"x": np.frombuffer(b"GIF89a..", np.uint8)}, {},
                   {}, 20, "not a known image format"),
}

@pytest.mark.parametrize("op", sorted(_BAD_INPUTS))
def test_new_op_bad_input_names_the_op(op):
  nodes, inputs, inits, domains, opset, msg = _BAD_INPUTS[op]
  raw = _graph_model(nodes, inputs, [nodes[-1].output[0]], opset=opset, inits=inits, domains=domains)
  with pytest.raises(OnnxError, match=op.split()[0]) as e: OnnxRunner(raw)(inputs)
  assert e.match(msg)

def test_bias_add():
  # onnxruntime has BiasAdd on CUDA only: checked against its definition, X + bias + skip
  raw = _graph_model([_ms("BiasAdd", ["x", "b", "s"], ["y"])], {"x": _h, "s": _h2}, ["y"], inits={"b": _f(8)},
                     domains=MS)
  b = onnx.numpy_helper.to_array(onnx.load_from_string(raw).graph.initializer[0])
  np.testing.assert_allclose(OnnxRunner(raw)({"x": _h, "s": _h2})["y"].numpy(), _h + b + _h2, atol=1e-6)

def test_contrib_ops_differentiate():
  # SkipLayerNormalization then FastGelu, against the same math in torch: the gradient flows through both inputs
  torch = pytest.importorskip("torch")
  g, b = _f(8), _f(8)
  nodes = [_ms("SkipLayerNormalization", ["x", "s", "g", "b"], ["n"], epsilon=1e-5), _ms("FastGelu", ["n"], ["y"])]
  raw = _graph_model(nodes, {"x": _h, "s": _h2}, ["y"], inits={"g": g, "b": b}, domains=MS)
  x, s = Tensor(_h, requires_grad=True), Tensor(_h2, requires_grad=True)
  OnnxRunner(raw)({"x": x, "s": s})["y"].sum().backward()
  tx, ts = torch.tensor(_h, requires_grad=True), torch.tensor(_h2, requires_grad=True)
  tn = torch.nn.functional.layer_norm(tx + ts, (8,), torch.tensor(g), torch.tensor(b), eps=1e-5)
  torch.nn.functional.gelu(tn, approximate="tanh").sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy(), atol=1e-4, rtol=1e-4)

def test_tensorscatter_replays_new_indices_under_tinyjit():
  # the write position stays a device value: a captured decode step writes where each call's indices say
  cache, upd = np.zeros((2, 4, 2), np.float32), np.ones((2, 1, 2), np.float32)
  raw = _graph_model([helper.make_node("TensorScatter", ["c", "u", "w"], ["y"])],
                     {"c": cache, "u": upd, "w": np.array([0, 0], np.int64)}, ["y"], opset=24)
  runner = OnnxRunner(raw)
  step = TinyJit(lambda c, u, w: runner({"c": c, "u": u, "w": w})["y"].realize())
  for i in range(3):
    w = np.array([i, 3 - i], np.int64)
    got = step(Tensor(cache), Tensor(upd * (i + 1)), Tensor(w)).numpy()
    want = cache.copy()
    want[0, i], want[1, 3 - i] = i + 1, i + 1
    np.testing.assert_array_equal(got, want)

def _onnx_image(name: str) -> tuple[np.ndarray, np.ndarray]:
  """ONNX's frozen test image `name` (its encoded stream) and the pixels its reference decoder (Pillow) gives."""
  from onnx.backend.test.case.node import _image_decoder_data
  d = getattr(_image_decoder_data, f"image_decoder_decode_{name}")
  return d.data, d.output

def _decode(stream: np.ndarray, pixel_format: str = "RGB") -> Tensor:
  raw = _graph_model([helper.make_node("ImageDecoder", ["x"], ["y"], pixel_format=pixel_format)], {"x": stream}, ["y"],
                     opset=20)
  return OnnxRunner(raw)({"x": stream})["y"]

@pytest.mark.parametrize("fmt", ["png", "bmp", "pnm"])
def test_image_decoder_matches_onnx_reference(device, fmt):
  stream, want = _onnx_image(f"{fmt}_rgb")
  np.testing.assert_array_equal(_decode(stream).numpy(), want)

@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_image_decoder_pixel_formats(device, pixel_format):
  stream, rgb = _onnx_image("png_rgb")
  r, g, b = (rgb[..., i:i + 1].astype(np.int64) for i in range(3))
  want = {"RGB": rgb, "BGR": rgb[..., ::-1],
          "Grayscale": ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint8)}[pixel_format]
  np.testing.assert_array_equal(_decode(stream, pixel_format).numpy(), want)

def test_image_decoder_jpeg_needs_pillow():
  stream, want = _onnx_image("jpeg_rgb")
  try: import PIL  # noqa: F401
  except ImportError:
    with pytest.raises(OnnxError, match="ImageDecoder: JPEG images need Pillow"): _decode(stream)
    return
  got = _decode(stream).numpy()
  assert got.shape == want.shape and np.abs(got.astype(int) - want).max() <= 1  # JPEG decoders may round differently
