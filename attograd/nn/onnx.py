"""ONNX models: a protobuf reader of attograd's own and `OnnxRunner`, which runs a model's graph as Tensor ops.

Reading a file never runs anything in it: the reader only decodes the messages it knows (a table of fields per
message), checks every length and size against the bytes there are, and raises OnnxError naming what is wrong.
The operators themselves are a table in `attograd.nn.onnx_ops`.
"""
from __future__ import annotations
import os, pathlib, struct
from dataclasses import dataclass, field
from typing import Any, Iterator
from attograd.dtype import DType, dtypes
from attograd.helpers import getenv, prod
from attograd.device import Device
from attograd.tensor import Tensor
from attograd.nn.onnx_ops import lookup
from attograd.nn.onnx_types import ONNX_DTYPE_NAMES, ONNX_DTYPES, OnnxError, onnx_dtype  # noqa: F401  (public here)

# ***** the wire format *****
# A message is a run of fields; each starts with a varint key (field number << 3 | wire type). Wire types:
# 0 varint, 1 fixed 8 bytes, 2 length-delimited (bytes, string, sub-message, packed numbers), 5 fixed 4 bytes.

MAX_DEPTH = 64  # messages nest (a graph in an If's attribute in a graph ...): deeper than this is refused

def _varint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
  """(value, position after it) of the varint at pos; at most 10 bytes, all of them before end."""
  val = shift = 0
  while True:
    if pos >= end: raise OnnxError(f"onnx: truncated varint at byte {pos}")
    b = buf[pos]
    pos += 1
    val |= (b & 0x7F) << shift
    if not b & 0x80: return val, pos
    shift += 7
    if shift >= 70: raise OnnxError(f"onnx: varint longer than 10 bytes at byte {pos}")

def _signed64(v: int) -> int: return v - (1 << 64) if v >= 1 << 63 else v

def _fields(buf: memoryview, pos: int, end: int) -> Iterator[tuple[int, int, Any]]:
  """(field number, wire type, value) of each field in buf[pos:end]: an int for varints and fixed numbers, a
  (start, stop) span for length-delimited fields."""
  while pos < end:
    key, pos = _varint(buf, pos, end)
    num, wt = key >> 3, key & 7
    val: Any
    if wt == 0: val, pos = _varint(buf, pos, end)
    elif wt == 1:
      if pos + 8 > end: raise OnnxError(f"onnx: truncated 8-byte field {num} at byte {pos}")
      val, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
    elif wt == 5:
      if pos + 4 > end: raise OnnxError(f"onnx: truncated 4-byte field {num} at byte {pos}")
      val, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
    elif wt == 2:
      n, pos = _varint(buf, pos, end)
      if pos + n > end: raise OnnxError(f"onnx: field {num} says it is {n} bytes long but only {end - pos} are left")
      val, pos = (pos, pos + n), pos + n
    else: raise OnnxError(f"onnx: unsupported wire type {wt} of field {num} at byte {pos} (not an ONNX file?)")
    if num == 0: raise OnnxError(f"onnx: field number 0 at byte {pos} (not an ONNX file?)")
    yield num, wt, val

# Each message type is a table: field number -> (name, kind). Kinds: "int" (varint, signed 64-bit), "str", "bytes",
# "f32"/"f64" (fixed), a message name, and the repeated forms "*int" (packed or not), "*f32", "*f64", "*str",
# "*bytes", "*<message>". Fields not in a table are skipped, as protobuf readers do.
SCHEMA: dict[str, dict[int, tuple[str, str]]] = {
  "Model": {1: ("ir_version", "int"), 2: ("producer_name", "str"), 4: ("domain", "str"), 5: ("model_version", "int"),
            7: ("graph", "Graph"), 8: ("opset_import", "*OpsetId"), 25: ("functions", "*Function")},
  "OpsetId": {1: ("domain", "str"), 2: ("version", "int")},
  "Graph": {1: ("node", "*Node"), 2: ("name", "str"), 5: ("initializer", "*Tensor"), 11: ("input", "*ValueInfo"),
            12: ("output", "*ValueInfo"), 15: ("sparse_initializer", "*SparseTensor")},
  "Node": {1: ("input", "*str"), 2: ("output", "*str"), 3: ("name", "str"), 4: ("op_type", "str"),
           5: ("attribute", "*Attribute"), 7: ("domain", "str")},
  "Attribute": {1: ("name", "str"), 2: ("f", "f32"), 3: ("i", "int"), 4: ("s", "bytes"), 5: ("t", "Tensor"),
                6: ("g", "Graph"), 7: ("floats", "*f32"), 8: ("ints", "*int"), 9: ("strings", "*bytes"),
                10: ("tensors", "*Tensor"), 11: ("graphs", "*Graph"), 14: ("tp", "Type"), 15: ("type_protos", "*Type"),
                20: ("type", "int"), 21: ("ref_attr_name", "str"), 22: ("sparse_tensor", "SparseTensor")},
  "Tensor": {1: ("dims", "*int"), 2: ("data_type", "int"), 4: ("float_data", "*f32"), 5: ("int32_data", "*int"),
             6: ("string_data", "*bytes"), 7: ("int64_data", "*int"), 8: ("name", "str"), 9: ("raw_data", "span"),
             10: ("double_data", "*f64"), 11: ("uint64_data", "*int"), 13: ("external_data", "*StringEntry"),
             14: ("data_location", "int")},
  "SparseTensor": {1: ("values", "Tensor"), 2: ("indices", "Tensor"), 3: ("dims", "*int")},
  "StringEntry": {1: ("key", "str"), 2: ("value", "str")},
  "ValueInfo": {1: ("name", "str"), 2: ("type", "Type")},
  "Type": {1: ("tensor_type", "TensorType"), 4: ("sequence_type", "ElemType"), 5: ("map_type", "MapType"),
           8: ("sparse_tensor_type", "TensorType"), 9: ("optional_type", "ElemType")},
  "TensorType": {1: ("elem_type", "int"), 2: ("shape", "Shape")},
  "ElemType": {1: ("elem_type", "Type")},
  "MapType": {1: ("key_type", "int"), 2: ("value_type", "Type")},
  "Shape": {1: ("dim", "*Dim")},
  "Dim": {1: ("dim_value", "int"), 2: ("dim_param", "str")},
  "Function": {1: ("name", "str"), 4: ("input", "*str"), 5: ("output", "*str"), 6: ("attribute", "*str"),
               11: ("attribute_proto", "*Attribute"), 7: ("node", "*Node"), 9: ("opset_import", "*OpsetId"),
               10: ("domain", "str")},
}

def _packed(buf: memoryview, span: tuple[int, int], kind: str) -> list[Any]:
  s, e = span
  if kind == "int": return [_signed64(v) for _, v in _packed_varints(buf, s, e)]
  size, fmt = (4, "f") if kind == "f32" else (8, "d")
  if (e - s) % size: raise OnnxError(f"onnx: packed {kind} field of {e - s} bytes is not a whole number of values")
  return list(struct.unpack(f"<{(e - s) // size}{fmt}", buf[s:e]))

def _packed_varints(buf: memoryview, s: int, e: int) -> Iterator[tuple[int, int]]:
  while s < e:
    v, s = _varint(buf, s, e)
    yield s, v

def _scalar(buf: memoryview, wt: int, val: Any, kind: str, msg: str, name: str) -> Any:
  want = {"int": 0, "f32": 5, "f64": 1}.get(kind, 2)
  if wt != want: raise OnnxError(f"onnx: field {msg}.{name} has wire type {wt}, expected {want}")
  if kind == "int": return _signed64(val)
  if kind == "f32": return struct.unpack("<f", val.to_bytes(4, "little"))[0]
  if kind == "f64": return struct.unpack("<d", val.to_bytes(8, "little"))[0]
  if kind == "span": return val
  raw = bytes(buf[val[0]:val[1]])
  if kind == "bytes": return raw
  try: return raw.decode("utf-8")
  except UnicodeDecodeError: raise OnnxError(f"onnx: field {msg}.{name} is not valid UTF-8") from None

def decode(buf: memoryview, msg: str, span: tuple[int, int], depth: int = 0) -> dict[str, Any]:
  """The fields of message type `msg` in buf[span] as a dict (repeated fields as lists)."""
  if depth > MAX_DEPTH: raise OnnxError(f"onnx: messages nested deeper than {MAX_DEPTH} levels")
  table, out = SCHEMA[msg], dict[str, Any]()
  for num, wt, val in _fields(buf, span[0], span[1]):
    if (entry := table.get(num)) is None: continue
    name, kind = entry
    if kind.startswith("*"):
      kind = kind[1:]
      lst: list[Any] = out.setdefault(name, [])
      if kind in SCHEMA:
        if wt != 2: raise OnnxError(f"onnx: field {msg}.{name} has wire type {wt}, expected 2")
        lst.append(decode(buf, kind, val, depth + 1))
      elif wt == 2 and kind in ("int", "f32", "f64"): lst.extend(_packed(buf, val, kind))
      else: lst.append(_scalar(buf, wt, val, kind, msg, name))
    elif kind in SCHEMA:
      if wt != 2: raise OnnxError(f"onnx: field {msg}.{name} has wire type {wt}, expected 2")
      out[name] = decode(buf, kind, val, depth + 1)
    else: out[name] = _scalar(buf, wt, val, kind, msg, name)
  return out

# ***** tensors (their data types: onnx_types.py) *****

class _Source:
  """The model's bytes, and where its external data files may be read from."""
  def __init__(self, raw: bytes | memoryview, base_dir: pathlib.Path | None, device: str | None):
    self.buf, self.base_dir, self.device = memoryview(raw), base_dir, device

  def external(self, t: dict[str, Any], name: str, nbytes: int) -> bytes:
    """The bytes of an external-data tensor: a file beside the model (never outside its folder), offset, length."""
    kv = {e.get("key"): e.get("value", "") for e in t.get("external_data", [])}
    if "location" not in kv: raise OnnxError(f"onnx: external tensor {name!r} has no location")
    if self.base_dir is None:
      raise OnnxError(f"onnx: tensor {name!r} keeps its data in the file {kv['location']!r}; load the model from its "
                      "path (onnx_load(path) or OnnxRunner(path)) so that file can be found")
    loc = pathlib.Path(kv["location"])
    path = (self.base_dir / loc).resolve()
    if loc.is_absolute() or not path.is_relative_to(self.base_dir.resolve()):
      raise OnnxError(f"onnx: external data location {kv['location']!r} of tensor {name!r} is outside the "
                      "model's folder")
    if not path.is_file(): raise OnnxError(f"onnx: external data file {str(path)!r} of tensor {name!r} doesn't exist")
    try: offset, length = int(kv.get("offset", 0)), int(kv.get("length", nbytes))
    except ValueError:
      raise OnnxError(f"onnx: external data offset/length of tensor {name!r} aren't integers") from None
    size = path.stat().st_size
    if offset < 0 or length != nbytes or offset + length > size:
      raise OnnxError(f"onnx: external data of tensor {name!r} ({length} bytes at offset {offset}) doesn't fit "
                      f"its shape ({nbytes} bytes) or the file {str(path)!r} ({size} bytes)")
    with open(path, "rb") as f:
      f.seek(offset)
      return f.read(length)

def tensor_from_proto(t: dict[str, Any], src: _Source) -> Tensor:
  """A Tensor holding a TensorProto's values; sizes are checked against the data before anything is allocated."""
  name = t.get("name", "")
  dims = t.get("dims", [])
  if any(d < 0 for d in dims): raise OnnxError(f"onnx: tensor {name!r} has negative dims {dims}")
  dtype = onnx_dtype(t.get("data_type", 0), f"tensor {name!r}")
  n = prod(dims)
  shape = tuple(dims)
  if t.get("data_location", 0) == 1: raw = src.external(t, name, n * dtype.itemsize)
  elif "raw_data" in t:
    s, e = t["raw_data"]
    if e - s != n * dtype.itemsize:
      raise OnnxError(f"onnx: tensor {name!r} of shape {shape} and dtype {dtype.name} needs {n * dtype.itemsize} "
                      f"bytes, its raw_data has {e - s}")
    raw = bytes(src.buf[s:e])
  else:
    vals = _typed_values(t, dtype, name)
    if len(vals) != n:
      raise OnnxError(f"onnx: tensor {name!r} of shape {shape} needs {n} values, it has {len(vals)}")
    return _from_values(vals, dtype, shape, src.device)
  return _from_bytes(raw, dtype, shape, src.device)

def _typed_values(t: dict[str, Any], dtype: DType, name: str) -> list[Any]:
  """The values of a tensor kept in one of the typed lists (float_data, int32_data, ...) rather than raw_data."""
  if "string_data" in t: raise OnnxError(f"onnx: tensor {name!r} holds strings, which attograd doesn't support")
  if dtype in (dtypes.float32,): return t.get("float_data", [])
  if dtype is dtypes.float64: return t.get("double_data", [])
  if dtype is dtypes.int64: return t.get("int64_data", [])
  if dtype in (dtypes.uint32, dtypes.uint64): return [v & ((1 << 64) - 1) for v in t.get("uint64_data", [])]
  vals = t.get("int32_data", [])
  if dtype is dtypes.float16: return [struct.unpack("<e", (v & 0xFFFF).to_bytes(2, "little"))[0] for v in vals]
  if dtype is dtypes.bfloat16: return [struct.unpack("<f", ((v & 0xFFFF) << 16).to_bytes(4, "little"))[0] for v in vals]
  if dtype is dtypes.bool: return [bool(v) for v in vals]
  return vals

def _from_values(vals: list[Any], dtype: DType, shape: tuple[int, ...], device: str | None) -> Tensor:
  if dtype is dtypes.bfloat16: return Tensor(vals, dtype=dtypes.float32, device=device).cast(dtype).reshape(shape)
  packed = struct.pack(f"<{len(vals)}{dtype.fmt}", *[dtypes.as_const(v, dtype) for v in vals])
  return _from_bytes(packed, dtype, shape, device)

def _from_bytes(raw: bytes, dtype: DType, shape: tuple[int, ...], device: str | None) -> Tensor:
  """A buffer of `dtype` holding these little-endian bytes: host data, no kernel."""
  if dtype is dtypes.bool: raw = raw.translate(_BOOL_BYTES)  # any nonzero byte is true; a bool buffer holds 0 or 1
  return Tensor(raw, dtype=dtype, device=Device.canonicalize(device)).reshape(shape)

_BOOL_BYTES = bytes([0] + [1] * 255)

def _sparse_to_dense(sp: dict[str, Any], src: _Source) -> Tensor:
  """A SparseTensorProto as a dense Tensor: the values scattered at their (linear or per-dim) indices."""
  if "values" not in sp or "indices" not in sp: raise OnnxError("onnx: sparse tensor without values or indices")
  vals, idx = tensor_from_proto(sp["values"], src), tensor_from_proto(sp["indices"], src)
  dims = tuple(sp.get("dims", []))
  if any(d < 0 for d in dims): raise OnnxError(f"onnx: sparse tensor has negative dims {dims}")
  n, nnz = prod(dims), vals.numel()
  flat_idx = idx.tolist()
  if idx.ndim == 2: flat_idx = [sum(i * prod(dims[k + 1:]) for k, i in enumerate(row)) for row in flat_idx]
  elif idx.ndim != 1: raise OnnxError(f"onnx: sparse tensor indices must be 1-d or 2-d, got shape {idx.shape}")
  if len(flat_idx) != nnz or any(not 0 <= i < n for i in flat_idx):
    raise OnnxError(f"onnx: sparse tensor of dims {dims} has {nnz} values but indices {flat_idx[:8]}...")
  dense = [0] * n
  for i, v in zip(flat_idx, vals.flatten().tolist()): dense[i] = v
  return _from_values(dense, vals.dtype, dims, src.device)

# ***** the model as plain Python objects *****

@dataclass(frozen=True)
class ValueInfo:
  """A graph input's or output's declared type: kind is "tensor", "sequence", "optional", "map" or "unknown"; a dim
  is an int, a named (symbolic) str, or None."""
  name: str
  kind: str
  dtype: DType | None
  shape: tuple[int | str | None, ...] | None
  elem: ValueInfo | None = None  # what a sequence or optional holds

@dataclass
class Node:
  op: str
  domain: str
  inputs: tuple[str, ...]
  outputs: tuple[str, ...]
  attrs: dict[str, Any]
  name: str

@dataclass
class Graph:
  name: str
  nodes: list[Node]
  initializers: dict[str, Tensor]
  inputs: list[ValueInfo]
  outputs: list[ValueInfo]

@dataclass
class Function:
  """A model-local function: a node whose (domain, op_type) names one runs these nodes with its inputs and
  attributes (attributes of the inner nodes can refer to the caller's by name)."""
  name: str
  domain: str
  inputs: tuple[str, ...]
  outputs: tuple[str, ...]
  attr_defaults: dict[str, Any]
  nodes: list[Node]
  opsets: dict[str, int]

@dataclass(frozen=True)
class AttrRef:
  """An attribute of a function's node that takes the value of the calling node's attribute `name`."""
  name: str

def _domain(d: str | None) -> str: return "" if d in (None, "", "ai.onnx") else d

def _value_info(v: dict[str, Any], name: str = "") -> ValueInfo:
  name = v.get("name", name)
  t = v.get("type")
  if t is None: return ValueInfo(name, "unknown", None, None)
  if "tensor_type" in t or "sparse_tensor_type" in t:
    tt = t.get("tensor_type", t.get("sparse_tensor_type", {}))
    dtype = ONNX_DTYPES.get(tt.get("elem_type", 0))
    shape = None
    if "shape" in tt:
      shape = tuple(d["dim_value"] if "dim_value" in d else d.get("dim_param") for d in tt["shape"].get("dim", []))
    return ValueInfo(name, "tensor", dtype, shape)
  for kind in ("sequence", "optional"):
    if f"{kind}_type" in t:
      inner = t[f"{kind}_type"].get("elem_type")
      elem = _value_info({"type": inner}, name) if inner is not None else None
      return ValueInfo(name, kind, elem.dtype if elem else None, elem.shape if elem else None, elem)
  if "map_type" in t: return ValueInfo(name, "map", None, None)
  return ValueInfo(name, "unknown", None, None)

ATTR_FIELDS = {1: "f", 2: "i", 3: "s", 4: "t", 5: "g", 6: "floats", 7: "ints", 8: "strings", 9: "tensors",
               10: "graphs", 11: "sparse_tensor", 13: "tp", 14: "type_protos"}

class _Loader:
  """Turns decoded messages into Graph, Node and Tensor objects."""
  def __init__(self, src: _Source): self.src = src

  def attr(self, a: dict[str, Any], op: str) -> Any:
    name = a.get("name", "")
    if "ref_attr_name" in a: return AttrRef(a["ref_attr_name"])
    typ = a.get("type", 0)
    if typ == 0:  # old writers leave the type out: take the one field that is there
      present = [k for k, f in ATTR_FIELDS.items() if f in a and a[f] != []]
      typ = present[0] if present else 7
    if typ not in ATTR_FIELDS: raise OnnxError(f"onnx: attribute {name!r} of {op} has unknown type {typ}")
    val: Any = a.get(ATTR_FIELDS[typ], [] if typ in (6, 7, 8, 9, 10, 14) else None)
    if typ == 3: return _text(val)
    if typ == 8: return [_text(s) for s in val]
    if typ == 4: return tensor_from_proto(val, self.src) if val is not None else None
    if typ == 9: return [tensor_from_proto(t, self.src) for t in val]
    if typ == 5: return self.graph(val) if val is not None else None
    if typ == 10: return [self.graph(g) for g in val]
    if typ == 11: return _sparse_to_dense(val, self.src)
    if typ == 13: return _value_info({"type": val})
    if typ == 14: return [_value_info({"type": v}) for v in val]
    return val

  def node(self, n: dict[str, Any]) -> Node:
    op = n.get("op_type", "")
    if not op: raise OnnxError(f"onnx: node {n.get('name', '')!r} has no op_type")
    attrs = {a.get("name", ""): self.attr(a, op) for a in n.get("attribute", [])}
    return Node(op, _domain(n.get("domain")), tuple(n.get("input", [])), tuple(n.get("output", [])), attrs,
                n.get("name", ""))

  def graph(self, g: dict[str, Any]) -> Graph:
    inits = {t.get("name", ""): tensor_from_proto(t, self.src) for t in g.get("initializer", [])}
    for sp in g.get("sparse_initializer", []):
      inits[sp.get("values", {}).get("name", "")] = _sparse_to_dense(sp, self.src)
    return Graph(g.get("name", ""), [self.node(n) for n in g.get("node", [])], inits,
                 [_value_info(v) for v in g.get("input", [])], [_value_info(v) for v in g.get("output", [])])

  def function(self, f: dict[str, Any]) -> Function:
    defaults = {a.get("name", ""): self.attr(a, f.get("name", "")) for a in f.get("attribute_proto", [])}
    return Function(f.get("name", ""), _domain(f.get("domain")), tuple(f.get("input", [])), tuple(f.get("output", [])),
                    defaults, [self.node(n) for n in f.get("node", [])],
                    {_domain(o.get("domain")): o.get("version", 1) for o in f.get("opset_import", [])})

def _text(b: bytes | None) -> str | bytes | None:
  if b is None: return None
  try: return b.decode("utf-8")
  except UnicodeDecodeError: return b

@dataclass
class Model:
  graph: Graph
  opsets: dict[str, int]
  functions: dict[tuple[str, str], Function] = field(default_factory=dict)
  ir_version: int = 0

def _model_bytes(model: Any) -> tuple[bytes | memoryview, pathlib.Path | None]:
  if isinstance(model, (str, os.PathLike)):
    path = pathlib.Path(model)
    if not path.is_file(): raise OnnxError(f"onnx: no model file at {str(path)!r}")
    return path.read_bytes(), path.parent
  if isinstance(model, Tensor):
    if model.dtype is not dtypes.uint8 or model.ndim != 1:
      raise OnnxError(f"onnx: a model given as a Tensor must hold its file's bytes (1-d uint8), got {model!r}")
    dev = model.device
    base = pathlib.Path(dev[5:]).parent if dev.startswith("DISK:") else None
    return model.data(), base
  if isinstance(model, (bytes, bytearray, memoryview)): return bytes(model), None
  # an onnx.ModelProto (or anything else with SerializeToString), without importing onnx here
  if hasattr(model, "SerializeToString"): return model.SerializeToString(), None
  raise TypeError(f"onnx: expected a path, bytes or a uint8 Tensor of an ONNX file, got {type(model).__name__}")

def onnx_load(model: Any, device: str | None = None) -> Model:
  """Parse an ONNX model (a path, its bytes, or a uint8 Tensor of them) into a Model: graph, opsets, functions.
  External-data tensors are read from files beside a model given by path."""
  raw, base = _model_bytes(model)
  src = _Source(raw, base, device)
  m = decode(src.buf, "Model", (0, len(src.buf)))
  if "graph" not in m: raise OnnxError("onnx: the file has no graph (not an ONNX model?)")
  loader = _Loader(src)
  opsets = {_domain(o.get("domain")): o.get("version", 1) for o in m.get("opset_import", [])}
  opsets.setdefault("", 1 if m.get("opset_import") else 7)
  funcs = {(f.domain, f.name): f for f in (loader.function(f) for f in m.get("functions", []))}
  return Model(loader.graph(m["graph"]), opsets, funcs, m.get("ir_version", 0))

# ***** running a graph *****

DEBUGONNX = getenv("DEBUGONNX", 0)
Value = Any  # a Tensor, a list of Tensors (a sequence), or None (an absent optional)

class OpContext:
  """What an operator that runs subgraphs or reads other values gets besides its inputs (`ctx=True` in its entry)."""
  def __init__(self, runner: OnnxRunner, scope: dict[str, Value], node: Node, opset: int):
    self.runner, self.scope, self.node, self.opset = runner, scope, node, opset
  @property
  def num_outputs(self) -> int: return len(self.node.outputs)
  def run(self, graph: Graph, feeds: list[Value]) -> list[Value]:
    """Run a subgraph with its inputs bound to `feeds`; it sees the values of every enclosing graph."""
    if len(feeds) > len(graph.inputs):
      raise OnnxError(f"onnx: {self.node.op} gives its subgraph {graph.name!r} {len(feeds)} inputs, it takes "
                      f"{len(graph.inputs)}")
    scope = dict(self.scope)
    scope.update({vi.name: v for vi, v in zip(graph.inputs, feeds)})
    return self.runner._run_graph(graph, scope, self.runner.model.opsets)

class OnnxRunner:
  """Runs an ONNX model with attograd: `OnnxRunner(model)` where model is a path, the file's bytes, or a uint8 Tensor
  of them; call it with a dict of named inputs (Tensors, NumPy arrays or lists) to get a dict of named outputs.

  Every operator is written in Tensor ops, so a model's graph fuses, differentiates and runs on any device, and a
  call can be captured by TinyJit.

  >>> runner = OnnxRunner("model.onnx")                         # doctest: +SKIP
  >>> runner({"input": Tensor.rand(1, 3, 224, 224)})["output"]  # doctest: +SKIP
  """
  def __init__(self, model: Any, device: str | None = None):
    self.device = Device.canonicalize(device)
    self.model = model if isinstance(model, Model) else onnx_load(model, self.device)
    self._lookup = lookup
    self.training = any(d in ("ai.onnx.training", "ai.onnx.preview.training") for d in self.model.opsets)
    self._check_ops(self.model.graph, self.model.opsets)
    g = self.model.graph
    self.graph_inputs = {vi.name: vi for vi in g.inputs if vi.name not in g.initializers}
    self.graph_outputs = tuple(vi.name for vi in g.outputs)

  def _check_ops(self, graph: Graph, opsets: dict[str, int]) -> None:
    """Refuse a model with an operator attograd doesn't have before anything runs."""
    for n in graph.nodes:
      if (n.domain, n.op) not in self.model.functions: self._impl(n, opsets)
      for a in n.attrs.values():
        for g in (a if isinstance(a, list) else [a]):
          if isinstance(g, Graph): self._check_ops(g, opsets)
    for f in self.model.functions.values():
      for n in f.nodes:
        if (n.domain, n.op) not in self.model.functions: self._impl(n, {**opsets, **f.opsets})

  def _impl(self, node: Node, opsets: dict[str, int]) -> Any:
    version = opsets.get(node.domain, 1)
    impl = self._lookup(node.domain, node.op, version)
    if impl is None:
      where = f"domain {node.domain!r}, " if node.domain else ""
      raise OnnxError(f"onnx: operator {node.op} ({where}opset {version}) of node {node.name!r} is not supported")
    return impl

  def _input(self, vi: ValueInfo, value: Any, dims: dict[str, int]) -> Value:
    """A caller's input as a Value, checked against the graph's declared type."""
    if vi.kind == "optional" and value is None: return None
    if vi.kind == "sequence" or (vi.kind == "optional" and vi.elem is not None and vi.elem.kind == "sequence"):
      if not isinstance(value, (list, tuple)): raise OnnxError(f"onnx: input {vi.name!r} is a sequence; pass a list")
      return [v if isinstance(v, Tensor) else Tensor(v, dtype=vi.dtype, device=self.device) for v in value]
    if isinstance(value, Tensor): t = value if value.device == self.device else value.to(self.device)
    else:
      t = Tensor(value, device=self.device)
      if vi.dtype is not None and t.dtype is not vi.dtype: t = t.cast(vi.dtype)
    if vi.dtype is not None and t.dtype is not vi.dtype:
      raise OnnxError(f"onnx: input {vi.name!r} must be {vi.dtype.name}, got a {t.dtype.name} Tensor")
    if vi.shape is not None:
      if len(vi.shape) != t.ndim:
        raise OnnxError(f"onnx: input {vi.name!r} must have shape {vi.shape}, got {t.shape}")
      for want, got in zip(vi.shape, t.shape):
        if isinstance(want, str): want = dims.setdefault(want, got)
        if isinstance(want, int) and want > 0 and want != got:
          raise OnnxError(f"onnx: input {vi.name!r} must have shape {vi.shape}, got {t.shape}")
    return t

  def __call__(self, inputs: dict[str, Any], debug: int = DEBUGONNX) -> dict[str, Value]:
    """Run the model: `inputs` maps each graph input's name to its value; returns each output by name."""
    if not isinstance(inputs, dict):
      raise TypeError(f"OnnxRunner: inputs must be a dict of name -> value, got {type(inputs).__name__}")
    unknown = set(inputs) - set(self.graph_inputs)
    if unknown:
      raise OnnxError(f"onnx: the model has no inputs {sorted(unknown)}; its inputs are {list(self.graph_inputs)}")
    scope: dict[str, Value] = dict(self.model.graph.initializers)
    dims: dict[str, int] = {}
    for name, vi in self.graph_inputs.items():
      if name not in inputs:
        if vi.kind == "optional":
          scope[name] = None
          continue
        raise OnnxError(f"onnx: missing input {name!r}; the model's inputs are {list(self.graph_inputs)}")
      scope[name] = self._input(vi, inputs[name], dims)
    for name, value in inputs.items():  # an initializer the caller overrides
      if name not in self.graph_inputs: scope[name] = value
    self.debug = debug
    # operators make their constants (arange, full, ...) on the default device: make it the model's for the call
    old, Device.DEFAULT = Device.DEFAULT, self.device
    try: outs = self._run_graph(self.model.graph, scope, self.model.opsets)
    finally: Device.DEFAULT = old
    return dict(zip(self.graph_outputs, outs))

  def _run_graph(self, graph: Graph, scope: dict[str, Value], opsets: dict[str, int]) -> list[Value]:
    scope.update(graph.initializers)
    for num, node in enumerate(graph.nodes): self._run_node(node, scope, opsets, num)
    missing = [vi.name for vi in graph.outputs if vi.name not in scope]
    if missing: raise OnnxError(f"onnx: graph {graph.name!r} never computes its outputs {missing}")
    return [scope[vi.name] for vi in graph.outputs]

  def _run_node(self, node: Node, scope: dict[str, Value], opsets: dict[str, int], num: int = 0,
                attrs: dict[str, Any] | None = None) -> None:
    for name in node.inputs:
      if name and name not in scope:
        raise OnnxError(f"onnx: input {name!r} of node {node.name!r} ({node.op}) is computed by no earlier node")
    args = [scope[name] if name else None for name in node.inputs]
    kwargs = {k: (attrs[v.name] if isinstance(v, AttrRef) and attrs is not None and v.name in attrs else v)
              for k, v in node.attrs.items()}
    kwargs = {k: v for k, v in kwargs.items() if not isinstance(v, AttrRef)}  # an unset reference: the default
    if getattr(self, "debug", 0) >= 1:
      print(f"onnx {num}: {node.op} {node.name!r} {list(node.inputs)} -> {list(node.outputs)}")
    if (fn := self.model.functions.get((node.domain, node.op))) is not None:
      outs = self._run_function(fn, node, args, kwargs, opsets)
    else:
      impl = self._impl(node, opsets)
      for i in impl.consts:
        if i < len(args) and isinstance(args[i], Tensor): args[i] = _python_value(args[i])
      if impl.ctx: kwargs["ctx"] = OpContext(self, scope, node, opsets.get(node.domain, 1))
      try: ret = impl.fn(*args, **kwargs)
      except TypeError as e:
        raise OnnxError(f"onnx: node {node.name!r} ({node.op}) with {len(args)} inputs and attributes "
                        f"{sorted(node.attrs)}: {e}") from e
      outs = list(ret) if isinstance(ret, tuple) else [ret]
    for name, val in zip(node.outputs, outs):
      if name: scope[name] = val
    if len(outs) < len([o for o in node.outputs if o]):
      raise OnnxError(f"onnx: node {node.name!r} ({node.op}) computes {len(outs)} outputs, the graph asks for "
                      f"{len(node.outputs)}")
    if getattr(self, "debug", 0) >= 2:
      for name, val in zip(node.outputs, outs): print(f"    {name}: {val!r}")

  def _run_function(self, fn: Function, node: Node, args: list[Value], kwargs: dict[str, Any],
                    opsets: dict[str, int]) -> list[Value]:
    scope: dict[str, Value] = {name: val for name, val in zip(fn.inputs, args)}
    attrs = {**fn.attr_defaults, **kwargs}
    inner = {**opsets, **fn.opsets}
    for n in fn.nodes: self._run_node(n, scope, inner, attrs=attrs)
    return [scope.get(o) for o in fn.outputs]

def _python_value(t: Tensor) -> Any:
  """A Tensor's values as Python numbers (a list for 1-d and up): for inputs that are shapes, axes or counts."""
  return t.tolist()
