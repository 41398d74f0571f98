"""GGUF model files (llama.cpp's format): the header and metadata, checked against the file size; plain tensors as
DISK views; ggml block-quantized tensors (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K) dequantized by Tensor ops."""
from __future__ import annotations
import os, struct
from typing import Any, Callable
from attograd.device import Device
from attograd.dtype import DType, dtypes
from attograd.helpers import prod
from attograd.tensor import Tensor
from attograd.runtime.ops_disk import DiskMapping
from attograd.nn.disk import mapping_of, disk_tensor

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
_MAX_DIMS = 8  # ggml uses 4; a little slack, and a bound on what a corrupt n_dims can make us read

# metadata value types: id -> (name, struct format); STRING (8) and ARRAY (9) are read separately
_KV_SCALARS: dict[int, tuple[str, str]] = {
  0: ("UINT8", "<B"), 1: ("INT8", "<b"), 2: ("UINT16", "<H"), 3: ("INT16", "<h"), 4: ("UINT32", "<I"),
  5: ("INT32", "<i"), 6: ("FLOAT32", "<f"), 7: ("BOOL", "<?"), 10: ("UINT64", "<Q"), 11: ("INT64", "<q"),
  12: ("FLOAT64", "<d")}
_KV_STRING, _KV_ARRAY = 8, 9

# ggml tensor types: id -> (name, elements per block, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
  0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
  7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
  12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
  16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
  20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
  24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
  29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2)}

# types stored as plain arrays: a DISK view with this dtype, no conversion
_PLAIN: dict[str, DType] = {
  "F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F64": dtypes.float64,
  "I8": dtypes.int8, "I16": dtypes.int16, "I32": dtypes.int32, "I64": dtypes.int64}

# ***** header parsing *****

class _Reader:
  """Reads little-endian fields from [start, start + size) of a mapping; every read is bounds-checked first."""
  def __init__(self, mapping: DiskMapping, start: int, size: int, name: str):
    self.mapping, self.start, self.size, self.name, self.pos = mapping, start, size, name, 0
  def need(self, n: int, what: str) -> None:
    if n < 0 or self.pos + n > self.size:
      raise ValueError(f"gguf_load: {self.name}: {what} needs {n} bytes at byte {self.pos}, past the end of the file "
                       f"({self.size} bytes); the file is truncated or corrupt")
  def bytes(self, n: int, what: str) -> bytes:
    self.need(n, what)
    out = bytes(self.mapping.read(self.start + self.pos, n))
    self.pos += n
    return out
  def unpack(self, fmt: str, what: str) -> Any: return struct.unpack(fmt, self.bytes(struct.calcsize(fmt), what))[0]
  def u32(self, what: str) -> int: return self.unpack("<I", what)
  def u64(self, what: str) -> int: return self.unpack("<Q", what)
  def string(self, what: str) -> str:
    n = self.u64(f"{what} (length)")
    raw = self.bytes(n, f"{what} ({n}-byte string)")
    try: return raw.decode("utf-8")
    except UnicodeDecodeError as err: raise ValueError(f"gguf_load: {self.name}: {what} is not UTF-8: {err}") from None

def _read_value(r: _Reader, vtype: int, what: str, depth: int = 0) -> Any:
  if vtype in _KV_SCALARS: return r.unpack(_KV_SCALARS[vtype][1], what)
  if vtype == _KV_STRING: return r.string(what)
  if vtype != _KV_ARRAY:
    raise ValueError(f"gguf_load: {r.name}: {what} has unknown value type {vtype}; known: 0..12")
  if depth > 16: raise ValueError(f"gguf_load: {r.name}: {what} nests arrays more than 16 deep")
  etype, n = r.u32(f"{what} (array element type)"), r.u64(f"{what} (array length)")
  if etype in _KV_SCALARS:
    # numbers in one unpack; the bounds check comes first so a corrupt length can't make a huge read
    fmt = _KV_SCALARS[etype][1]
    r.need(n * struct.calcsize(fmt), f"{what} ({n} x {_KV_SCALARS[etype][0]})")
    return list(struct.unpack(f"<{n}{fmt[1]}", r.bytes(n * struct.calcsize(fmt), what)))
  if etype not in (_KV_STRING, _KV_ARRAY):
    raise ValueError(f"gguf_load: {r.name}: {what} is an array of unknown value type {etype}; known: 0..12")
  # each string or inner array takes at least 8 bytes, so this bounds n before the loop
  r.need(n * 8, f"{what} ({n} array elements)")
  return [_read_value(r, etype, f"{what}[{i}]", depth + 1) for i in range(n)]

def _tensor_info(r: _Reader, i: int) -> TensorInfo:
  """Tensor info number i."""
  name = r.string(f"tensor {i} name")
  n_dims = r.u32(f"tensor {name!r} n_dims")
  if n_dims > _MAX_DIMS:
    raise ValueError(f"gguf_load: {r.name}: tensor {name!r} has n_dims={n_dims}, more than {_MAX_DIMS}")
  dims = tuple(r.u64(f"tensor {name!r} dim {d}") for d in range(n_dims))
  gtype = r.u32(f"tensor {name!r} type")
  offset = r.u64(f"tensor {name!r} offset")
  return name, dims, gtype, offset

TensorInfo = tuple[str, tuple[int, ...], int, int]  # name, ggml dims (ne0 first), ggml type, offset in the data

def _parse(mapping: DiskMapping, start: int, size: int) -> tuple[dict[str, Any], list[TensorInfo], int]:
  """The metadata, the tensor infos and the absolute byte where the data section starts."""
  r = _Reader(mapping, start, size, mapping.path)
  magic = r.bytes(4, "the magic number")
  if magic != GGUF_MAGIC:
    raise ValueError(f"gguf_load: {r.name}: bad magic {magic!r}, expected {GGUF_MAGIC!r}; not a GGUF file")
  version = r.u32("the version")
  if version not in (2, 3):
    raise ValueError(f"gguf_load: {r.name}: GGUF version {version} is not supported (only 2 and 3)")
  n_tensors, n_kv = r.u64("the tensor count"), r.u64("the metadata count")
  # a kv pair takes >= 12 bytes (key length + type), a tensor info >= 24 (name length, n_dims, type, offset)
  r.need(n_kv * 12 + n_tensors * 24, f"{n_kv} metadata pairs and {n_tensors} tensor infos")
  kv: dict[str, Any] = {}
  for i in range(n_kv):
    key = r.string(f"metadata key {i}")
    if key in kv: raise ValueError(f"gguf_load: {r.name}: metadata key {key!r} appears twice")
    kv[key] = _read_value(r, r.u32(f"metadata {key!r} type"), f"metadata {key!r}")
  infos = [_tensor_info(r, i) for i in range(n_tensors)]
  align = kv.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
  if not isinstance(align, int) or isinstance(align, bool) or align <= 0 or align & (align - 1):
    raise ValueError(f"gguf_load: {r.name}: general.alignment must be a power of two, got {align!r}")
  data_start = (r.pos + align - 1) // align * align
  _check_tensors(r.name, infos, align, size - data_start if data_start <= size else -1)
  return kv, infos, start + data_start

def _type_info(name: str, tname: str, gtype: int) -> tuple[str, int, int]:
  if gtype not in GGML_TYPES:
    raise ValueError(f"gguf_load: {name}: tensor {tname!r} has unknown ggml type {gtype}; known: {sorted(GGML_TYPES)}")
  return GGML_TYPES[gtype]

def _nbytes(name: str, tname: str, dims: tuple[int, ...], gtype: int) -> int:
  tn, blk, bsz = _type_info(name, tname, gtype)
  if (dims[0] if dims else 1) % blk:
    raise ValueError(f"gguf_load: {name}: tensor {tname!r} is {tn} with row length ne0={dims[0] if dims else 1}, "
                     f"not a multiple of its block size {blk}")
  return prod(dims) // blk * bsz

def _check_tensors(name: str, infos: list[TensorInfo], align: int, data_len: int) -> None:
  seen: set[str] = set()
  spans: list[tuple[int, int, str]] = []
  for tname, dims, gtype, offset in infos:
    if tname in seen: raise ValueError(f"gguf_load: {name}: tensor {tname!r} appears twice")
    seen.add(tname)
    nbytes = _nbytes(name, tname, dims, gtype)
    if offset % align:
      raise ValueError(f"gguf_load: {name}: tensor {tname!r} offset {offset} isn't a multiple of the alignment {align}")
    if offset + nbytes > data_len:
      raise ValueError(f"gguf_load: {name}: tensor {tname!r} ({nbytes} bytes at data offset {offset}) ends at "
                       f"{offset + nbytes}, past the end of the data section ({max(data_len, 0)} bytes); "
                       "the file is truncated or corrupt")
    spans.append((offset, offset + nbytes, tname))
  spans.sort()
  for (_, end, a), (lo, _, b) in zip(spans, spans[1:]):
    if lo < end: raise ValueError(f"gguf_load: {name}: tensors {a!r} and {b!r} overlap (bytes {lo}..{end} of the data)")

# ***** dequantization: (n_blocks, block_bytes) uint8 on the compute device -> float32 values *****
# Each type's values come out in its block's natural shape, BLOCK_SHAPES[qtype] per block, in ggml's element order:
# every axis is one field of the layout (a half of the nibbles, a 2-bit field, a group of 16 sharing a scale), so
# the innermost axis is a unit-stride run of quant bytes whose shift and scale stay fixed along it. A matmul reading
# the values this way (QuantizedTensor.blockwise) gets loops with no division in their index math, and the code
# generator can run the innermost one as vector lanes. (Flattened, the values are the row in ggml's order.)

BLOCK_SHAPES: dict[str, tuple[int, ...]] = {
  "Q4_0": (2, 16), "Q4_1": (2, 16), "Q5_0": (2, 16), "Q5_1": (2, 16), "Q8_0": (32,), "Q2_K": (2, 4, 2, 16),
  "Q3_K": (2, 4, 2, 16), "Q4_K": (4, 2, 32), "Q5_K": (4, 2, 32), "Q6_K": (2, 2, 2, 2, 16)}

def _f16(blocks: Tensor, i: int) -> Tensor:
  """The little-endian float16 at bytes [i, i+2) of each block, as float32, shape (n_blocks, 1)."""
  return _half(blocks, i).float()

def _half(blocks: Tensor, i: int) -> Tensor:
  """The little-endian float16 at bytes [i, i+2) of each block, shape (n_blocks, 1) float16."""
  b = blocks[:, i:i + 2].cast(dtypes.uint16)
  return (b[:, 0:1] | (b[:, 1:2] << 8)).bitcast(dtypes.float16)

def _per_block(x: Tensor, nd: int) -> Tensor:
  """(n_blocks, 1) values broadcast over a block of nd axes: (n_blocks, 1, ..., 1)."""
  return x.reshape(x.shape[0], *([1] * nd))

def _shifts(n: int, step: int, device: str, shape: tuple[int, ...]) -> Tensor:
  """0, step, 2*step, ... (n values) as shift amounts for int32 fields (see _wide), reshaped to broadcast."""
  return (Tensor.arange(n, device=device, dtype=dtypes.int32) * step).reshape(shape)

def _wide(b: Tensor) -> Tensor:
  """Quant bytes as int32, before their fields are shifted and masked out: fused into a matmul, a run of 16 bytes
  is widened once and its two nibbles are then cut from the wide lanes (widening each nibble on its own cost a Q4_1
  matvec a third of its speed on x86)."""
  return b.cast(dtypes.int32)

def _nibbles(qs: Tensor) -> Tensor:
  """Bytes (..., n) to int32 (..., 2, n): the low nibbles, then the high ones (ggml's order: a block's first n
  elements are the low nibbles). A shift by 0 or 4 along a broadcast axis, not a concatenation: fused into a matmul,
  each half is a unit-stride run of bytes with one fixed shift."""
  return (_wide(qs).reshape(*qs.shape[:-1], 1, qs.shape[-1]) >> _shifts(2, 4, qs.device, (2, 1))) & 0xF

def _high_bits(qh: Tensor) -> Tensor:
  """4 bytes per block (a little-endian uint32) to the 5th bits of its 32 elements, (n_blocks, 2, 16) int32 as 0 or
  16: bit j is element j's."""
  shifts = Tensor.arange(8, device=qh.device, dtype=dtypes.int32)
  return (((_wide(qh).reshape(qh.shape[0], 4, 1) >> shifts) & 1) << 4).reshape(qh.shape[0], 2, 16)

def _q4_0(b: Tensor) -> Tensor: return (_nibbles(b[:, 2:18]).float() - 8) * _per_block(_f16(b, 0), 2)
def _q4_1(b: Tensor) -> Tensor:
  return _nibbles(b[:, 4:20]).float() * _per_block(_f16(b, 0), 2) + _per_block(_f16(b, 2), 2)
def _q5_0(b: Tensor) -> Tensor:
  return ((_nibbles(b[:, 6:22]) | _high_bits(b[:, 2:6])).float() - 16) * _per_block(_f16(b, 0), 2)
def _q5_1(b: Tensor) -> Tensor:
  return (_nibbles(b[:, 8:24]) | _high_bits(b[:, 4:8])).float() * _per_block(_f16(b, 0), 2) + _per_block(_f16(b, 2), 2)
def _q8_0(b: Tensor) -> Tensor: return b[:, 2:34].bitcast(dtypes.int8).float() * _f16(b, 0)

def _q6_k(b: Tensor) -> Tensor:
  """256 values in two halves of 128: ql[64] (low 4 bits), qh[32] (2 high bits each), then 16 int8 scales and f16 d.
  Element 128n + 64h + 32a + 16c + e (the natural shape's axes n, h, a, c, e) has its low 4 bits in nibble h of
  ql[64n + 32a + 16c + e], its high 2 bits at bits 2(2h + a) of qh[32n + 16c + e], and scale 8n + 4h + 2a + c."""
  nb, dev = b.shape[0], b.device
  ql = _nibbles(b[:, 0:128].reshape(nb, 2, 64)).reshape(nb, 2, 2, 2, 2, 16)
  hi = (_wide(b[:, 128:192]).reshape(nb, 2, 1, 1, 2, 16) >> _shifts(4, 2, dev, (1, 1, 2, 2, 1, 1))) & 3
  q = (ql | (hi << 4)).float() - 32
  scales = b[:, 192:208].bitcast(dtypes.int8).float().reshape(nb, 2, 2, 2, 2, 1)
  return _per_block(_f16(b, 208), 5) * scales * q

def _q2_k(b: Tensor) -> Tensor:
  """scales[16] (low nibble scale, high nibble min, one pair per 16 elements), qs[64], f16 d, f16 dmin. Element
  128n + 32j + 16c + e is 2-bit field j (bits 2j, 2j+1) of qs[32n + 16c + e], with scale pair 8n + 2j + c."""
  nb = b.shape[0]
  sc = b[:, 0:16].reshape(nb, 2, 4, 2, 1)
  q = (_wide(b[:, 16:80]).reshape(nb, 2, 1, 2, 16) >> _shifts(4, 2, b.device, (1, 1, 4, 1, 1))) & 3
  d, m = _per_block(_f16(b, 80), 4) * (sc & 0xF).float(), _per_block(_f16(b, 82), 4) * (sc >> 4).float()
  return d * q.float() - m

def _q3_k(b: Tensor) -> Tensor:
  """hmask[32], qs[64], 12 bytes of 16 packed 6-bit scales, f16 d. Element 128n + 32j + 16c + e has its low 2 bits
  in field j of qs[32n + 16c + e] and its high bit in bit 4n + j of hmask[16c + e]; value (low | high << 2) - 4,
  times d * (scale 8n + 2j + c - 32). Scale k: its low 4 bits are byte k % 8's low (k < 8) or high nibble, its high
  2 bits are at 2 * (k // 4) in byte 8 + k % 4."""
  nb, dev = b.shape[0], b.device
  low = (_wide(b[:, 32:96]).reshape(nb, 2, 1, 2, 16) >> _shifts(4, 2, dev, (1, 1, 4, 1, 1))) & 3
  high = (_wide(b[:, 0:32]).reshape(nb, 1, 1, 2, 16) >> _shifts(8, 1, dev, (1, 2, 4, 1, 1))) & 1
  q = (low | (high << 2)).float() - 4
  s = _wide(b[:, 96:108])
  lo = (s[:, 0:8] & 0xF).cat(s[:, 0:8] >> 4, dim=1)
  hi = ((s[:, 8:12].reshape(nb, 1, 4) >> _shifts(4, 2, dev, (1, 4, 1))) & 3).reshape(nb, 16)
  return (_f16(b, 108) * ((lo | (hi << 4)).float() - 32)).reshape(nb, 2, 4, 2, 1) * q

def _scale_min_k4(s: Tensor) -> tuple[Tensor, Tensor]:
  """The 8 6-bit scales and 8 6-bit mins packed in 12 bytes (ggml's get_scale_min_k4), each (n_blocks, 8) float32."""
  s = _wide(s)
  a, b, c = s[:, 0:4], s[:, 4:8], s[:, 8:12]
  sc = (a & 63).cat((c & 0xF) | ((a >> 6) << 4), dim=1)
  mn = (b & 63).cat((c >> 4) | ((b >> 6) << 4), dim=1)
  return sc.float(), mn.float()

def _k4_apply(b: Tensor, q: Tensor) -> Tensor:
  """d * scale * q - dmin * min for Q4_K/Q5_K blocks (f16 d, f16 dmin, 12 scale bytes first); q is (n_blocks, 4, 2,
  32): sub-block 2c + h is [:, c, h]."""
  nb = b.shape[0]
  sc, mn = _scale_min_k4(b[:, 4:16])
  return (_f16(b, 0) * sc).reshape(nb, 4, 2, 1) * q.float() - (_f16(b, 2) * mn).reshape(nb, 4, 2, 1)

def _q4_k(b: Tensor) -> Tensor:
  """f16 d, f16 dmin, 12 scale bytes, qs[128]: element 64c + 32h + e is nibble h of qs[32c + e], in sub-block 2c + h
  (8 sub-blocks of 32, each with its own scale and min)."""
  return _k4_apply(b, _nibbles(b[:, 16:144].reshape(b.shape[0], 4, 32)))

def _q5_k(b: Tensor) -> Tensor:
  """Q4_K with qh[32] between the scales and qs: bit 2c + h of qh[e] is the 5th bit (16) of element 64c + 32h + e."""
  nb = b.shape[0]
  hi = ((_wide(b[:, 16:48]).reshape(nb, 1, 1, 32) >> _shifts(8, 1, b.device, (1, 4, 2, 1))) & 1) << 4
  return _k4_apply(b, _nibbles(b[:, 48:176].reshape(nb, 4, 32)) | hi)

# qtype -> (n_blocks, block_bytes) uint8 -> (n_blocks, *BLOCK_SHAPES[qtype]) float32
_NATURAL: dict[str, Callable[[Tensor], Tensor]] = {
  "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0, "Q2_K": _q2_k, "Q3_K": _q3_k,
  "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k}

def _flat(f: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
  return lambda b: f(b).reshape(b.shape[0], -1)

# qtype -> (n_blocks, block_bytes) uint8 -> (n_blocks, block_elems) float32
DEQUANTIZERS: dict[str, Callable[[Tensor], Tensor]] = {k: _flat(f) for k, f in _NATURAL.items()}

# the simple 32-element types split into their float scales and their quant bytes once they are on a compute device:
# a matmul then reads each block's scale as a float, instead of decoding a float16 for every element it multiplies.
# Q5's 32 fifth bits become one int32 per block: element j's bit is bit j of it, which a matmul's vector lanes read
# with one shift per lane from one load (from the 4 bytes, lane j would read byte j // 8: no vector load does that).
# qtype -> (f16 scale offsets (d, then m), first quant byte, the fifth bits' offset (or None), dequantize(quant
# bytes (n, Q) uint8, scales (n, S) float32, fifth bits (n, 1) int32 or None) in the natural shape)
def _sc(s: Tensor, i: int, nd: int) -> Tensor: return _per_block(s[:, i:i + 1], nd)

def _word(blocks: Tensor, i: int) -> Tensor:
  """The little-endian 32-bit word at bytes [i, i+4) of each block, as int32 (its bits), shape (n_blocks, 1)."""
  b = blocks[:, i:i + 4].cast(dtypes.uint32)
  return (b[:, 0:1] | (b[:, 1:2] << 8) | (b[:, 2:3] << 16) | (b[:, 3:4] << 24)).bitcast(dtypes.int32)

def _fifth_bits(h: Tensor) -> Tensor:
  """(n, 1) int32 words to their 32 bits in the natural (n, 2, 16) shape, as 0 or 16."""
  return ((h.reshape(h.shape[0], 1, 1) >> Tensor.arange(32, device=h.device, dtype=dtypes.int32).reshape(1, 2, 16))
          & 1) << 4

Dequant = Callable[[Tensor, Tensor, "Tensor | None"], Tensor]
_SPLIT: dict[str, tuple[tuple[int, ...], int, int | None, Dequant]] = {
  "Q4_0": ((0,), 2, None, lambda q, s, h: (_nibbles(q).float() - 8) * _sc(s, 0, 2)),
  "Q4_1": ((0, 2), 4, None, lambda q, s, h: _nibbles(q).float() * _sc(s, 0, 2) + _sc(s, 1, 2)),
  "Q5_0": ((0,), 6, 2, lambda q, s, h: ((_nibbles(q) | _fifth_bits(h)).float() - 16) * _sc(s, 0, 2)),  # type: ignore[arg-type]
  "Q5_1": ((0, 2), 8, 4, lambda q, s, h: (_nibbles(q) | _fifth_bits(h)).float() * _sc(s, 0, 2)  # type: ignore[arg-type]
           + _sc(s, 1, 2)),
  "Q8_0": ((0,), 2, None, lambda q, s, h: q.bitcast(dtypes.int8).float() * s[:, 0:1])}

# ***** the int8 dot product: llama.cpp's Q8 activations *****
# A one-row matmul (a decode step) can quantize its activation row too: each 32-element block becomes 32 int8 values
# x_j = round(a_j / d) with one float scale d = max|a| / 127, once per matvec. Each weight block's dot product with it
# is then integer math, sum_j q_j * x_j over the quant bytes (int32, exact), scaled once per block: d_w * d * isum (+
# the Q4_1 min term m_w * d * sum_j x_j; Q4_0's q - 8 and Q8_0's signed bytes fold into isum as -8 * sum_j x_j and
# -128 * sum_j x_j, see _DOT). A CPU with an int8 dot-product instruction (x86 VNNI: 64 byte products per instruction)
# runs that in a fraction of the float path's work: its renderer turns each word's four byte products into one
# instruction (renderer/cstyle.py, dot4_rule). It changes the rounding as llama.cpp's does (the activation row is
# rounded to 8 bits per block), so it is an option (Renderer.int8_dot: on where that instruction exists).
#
# Its layout: the quant bytes as little-endian int32 words of 4 bytes, 16 rows interleaved, (row groups, blocks per
# row, words per block, 16) int32, and the scales the same way, (row groups, blocks per row, scales, 16) float16 (the
# file's own: float32 copies were a sixth of a Q4_1 matvec's bytes, a step's kernels read them at memory speed): one
# vector load reads a word of 16 rows, whose 16 dot products run on the lanes of one int32 vector. Rows are padded to
# a multiple of 16 with zero blocks.

# qtype -> (f16 scale offsets (d, then m), first quant byte, quant bytes, byte offset folded into isum: the value a
# byte stands for is byte - offset; Q8_0's int8 bytes are stored with their top bit flipped: unsigned byte + 128)
_DOT: dict[str, tuple[tuple[int, ...], int, int, int]] = {
  "Q4_0": ((0,), 2, 16, 8), "Q4_1": ((0, 2), 4, 16, 0), "Q8_0": ((0,), 2, 32, 128)}
DOT_ROWS = 16  # rows interleaved in the int8 layout: an int32 vector of 16 lanes (AVX-512)

def _interleave(t: Tensor, rows: int) -> Tensor:
  """(rows, blocks, n) -> (groups, blocks, n, DOT_ROWS), rows padded with zeros to whole groups, realized."""
  padded = -(-rows // DOT_ROWS) * DOT_ROWS
  t = t.pad(((0, padded - rows), None, None)) if padded != rows else t
  return t.reshape(padded // DOT_ROWS, DOT_ROWS, *t.shape[1:]).permute(0, 2, 3, 1).contiguous().realize()

def _sbyte(b: Tensor, i: int) -> Tensor:
  """Byte i of int32 words, as a signed value (-128..127)."""
  return (b >> (8 * i) if i else b).cast(dtypes.int8).cast(dtypes.int32)

def dot4(a: Tensor, b: Tensor, nibble: int | None = None) -> Tensor:
  """sum over i < 4 of (unsigned byte i of a) * (signed byte i of b), int32: what one lane of x86's vpdpbusd adds.
  nibble=h: a's bytes are the nibbles h (0: low, 1: high) of its bytes, (a >> 4h) & 0x0F0F0F0F, each cut from a by
  one shift and mask (few ops per term: a matmul of several rows keeps them fused, not in buffers of their own).
  Written as these ops, which every device runs; the C renderer makes them one instruction where it can."""
  def ubyte(i: int) -> Tensor:
    sh, mask = 8 * i + (4 * nibble if nibble is not None else 0), 15 if nibble is not None else 255
    return (a >> sh if sh else a) & mask
  terms = [ubyte(i) * _sbyte(b, i) for i in range(4)]
  return terms[0] + terms[1] + terms[2] + terms[3]

def quantize_row_q8(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
  """Activation rows x (T, K) float32 in int8 blocks of 32: (words (T, K/32, 8) int32, the int8 values 4 to a word,
  little-endian; the blocks' scales d (T, K/32) float32; the sums of each block's int8 values (T, K/32) int32).
  x_j = round(a_j / d), d = max|a| / 127 (a block of zeros: d = 0, values 0). Small kernels of their own, each
  reading x or the words once: a matvec reads them once per row group, and would compute them that many times. The
  sums are lazy: the caller gives them a buffer, or a kernel that computes what it needs from them as well."""
  T, nb = x.shape[0], x.shape[1] // 32
  xb = x.reshape(T, nb, 32)
  amax = xb.abs().max(2, keepdim=True)
  # round half to even by the float adder: v + 1.5 * 2**23 keeps no fraction (|v| <= 127), and taking it off again
  # is exact (cheaper than Tensor.round's floor and comparisons)
  v = (xb * (amax > 0).where(127 / amax, 0.0) + 12582912.0) - 12582912.0
  words = v.cast(dtypes.int8).bitcast(dtypes.int32).contiguous()
  sums = _sbytes(words).sum((2, 3))
  return words, amax.reshape(T, nb) / 127, sums  # d: a divide the matvec does per block

def quantize_row_q24(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
  """Activation rows x (T, K) float32 in 23-bit blocks of 32, as three int8 planes for the int8 dot product: x_j =
  round(a_j / d), d = max|a| / (2**22 - 1), split as x_j = 65536 * h_j + 256 * m_j + l_j with h_j = x_j >> 16
  (signed, -64..63), m_j and l_j its other two bytes (unsigned). Returns (words (T, K/32, 24) int32: the h values 4
  to a word, then the m values, then the l values; d (T, K/32) float32; the sums of each block's h values (T, K/32)
  int32). Its rounding, 2**-23 of a block's largest value, is near float32's own (QuantizedTensor.dot's `wide`)."""
  T, nb = x.shape[0], x.shape[1] // 32
  xb = x.reshape(T, nb, 32)
  amax = xb.abs().max(2, keepdim=True)
  # exact integers |v| < 2**22, rounded half to even by the float adder (as quantize_row_q8's)
  v = ((xb * (amax > 0).where(4194303 / amax, 0.0) + 12582912.0) - 12582912.0).cast(dtypes.int32)
  # the unsigned planes' bytes as int8 bits (b - 256 where b > 127): read back as unsigned bytes, the same bits
  words = (v >> 16).cat((((v >> 8) & 255) ^ 128) - 128, ((v & 255) ^ 128) - 128, dim=2)
  words = words.cast(dtypes.int8).bitcast(dtypes.int32).contiguous()
  hsums = _sbytes(words[:, :, :8]).sum((2, 3))
  return words, amax.reshape(T, nb) / 4194303, hsums

def _sbytes(words: Tensor) -> Tensor:
  """(n, k) int32 words -> (n, k, 4) their bytes as signed values."""
  shifts = _shifts(4, 8, words.device, (1,) * words.ndim + (4,))
  return (words.reshape(*words.shape, 1) >> shifts).cast(dtypes.int8).cast(dtypes.int32)

# ***** quantized tensors kept as their blocks *****

class QuantizedTensor:
  """A ggml block-quantized tensor kept as its raw blocks, `blocks` (rows, blocks per row, block bytes) uint8, where
  a row is the last dim of `shape` (ggml's ne0). `dequantize()` is a lazy float32 Tensor: read by a matmul, the
  dequantization fuses into the matmul's kernel and no float copy of the weights is ever in memory. `host` is the
  raw bytes on the host when there are any (a zero-copy view of the file), for reading single rows (embeddings).

  >>> kv, w = gguf_load("model.Q4_1.gguf", quantized=True)  # doctest: +SKIP
  >>> w["blk.0.ffn_up.weight"]  # doctest: +SKIP
  <QuantizedTensor Q4_1 (1536, 576) on DISK>
  """
  def __init__(self, blocks: Tensor, qtype: str, shape: tuple[int, ...], host: memoryview | None = None):
    if qtype not in DEQUANTIZERS:
      raise ValueError(f"QuantizedTensor: ggml type {qtype} can't be dequantized; supported: {list(DEQUANTIZERS)}")
    _, self.block_elems, self.block_bytes = _TYPE_BY_NAME[qtype]
    rows, n = prod(shape[:-1]), shape[-1] if shape else 1
    if n % self.block_elems or blocks.shape != (rows, n // self.block_elems, self.block_bytes) \
       or blocks.dtype != dtypes.uint8:
      raise ValueError(f"QuantizedTensor: {qtype} {shape} needs uint8 blocks of shape "
                       f"{(rows, n // self.block_elems, self.block_bytes)}, got {blocks.dtype} {blocks.shape}")
    self.blocks, self.qtype, self.shape, self.host = blocks, qtype, tuple(shape), host
    # (quant bytes, float32 scales[, Q5's fifth bits as int32 words]) once realized on a compute device
    self.split: tuple[Tensor, ...] | None = None
    # or, realized for the int8 dot product: (quant words, scales) in its interleaved layout (see _DOT)
    self.words: tuple[Tensor, Tensor] | None = None
  dtype = dtypes.float32  # what it dequantizes to
  @property
  def device(self) -> str: return self.blocks.device
  @property
  def nbytes(self) -> int:
    return sum(prod(t.shape) * t.dtype.itemsize for t in (self.words or self.split or (self.blocks,)))
  def to(self, device: str | None) -> QuantizedTensor:
    if self.split is not None or self.words is not None:
      raise ValueError(f"QuantizedTensor.to({device!r}): {self!r} is realized (its blocks split); move it before "
                       "realize()")
    return QuantizedTensor(self.blocks.to(device), self.qtype, self.shape, self.host)
  def realize(self, int8: bool = False) -> QuantizedTensor:
    """The blocks in device memory (a no-op on DISK); the simple types split into quant bytes and float scales (and
    Q5's fifth bits into a word per block). int8: Q4_0, Q4_1 and Q8_0 in the int8 dot product's layout instead (one-
    row matmuls then quantize their activation row to int8: see _DOT), which every other type ignores."""
    if self.device == "DISK" or self.split is not None or self.words is not None: return self
    if int8 and self.qtype in _DOT:
      offs, start, n, off = _DOT[self.qtype]
      rows, nbr = self.blocks.shape[:2]
      flat = self.blocks.reshape(-1, self.block_bytes)
      words = self.blocks[:, :, start:start + n].bitcast(dtypes.uint32)
      if off == 128: words = words ^ 0x80808080  # int8 bytes as unsigned ones, + 128
      scales = Tensor.cat(*[_half(flat, i) for i in offs], dim=1).reshape(rows, nbr, len(offs))
      self.words = (_interleave(words.bitcast(dtypes.int32), rows), _interleave(scales, rows))
      self.blocks = self.words[0]
      return self
    if self.qtype in _SPLIT:
      offs, start, high, _ = _SPLIT[self.qtype]
      b, flat = self.blocks, self.blocks.reshape(-1, self.block_bytes)
      scales = Tensor.cat(*[_f16(flat, i) for i in offs], dim=1)
      self.split = (b[:, :, start:].contiguous().realize(), scales.reshape(*b.shape[:2], len(offs)).realize(),
                    *([_word(flat, high).reshape(*b.shape[:2], 1).realize()] if high is not None else []))
      self.blocks = self.split[0]  # the scales live in self.split alone now; the blocks' f16 copies are dropped
    else: self.blocks = self.blocks.contiguous().realize()
    return self
  @property
  def block_shape(self) -> tuple[int, ...]:
    """The natural shape of one block's values (BLOCK_SHAPES): its fields as axes, in ggml's element order."""
    return BLOCK_SHAPES[self.qtype]
  def blockwise(self) -> Tensor:
    """The values as (rows, blocks per row, *block_shape) float32: a matmul reduces over every dim but the first, so
    its index math has no division by the block size or a field's, and the innermost loop walks contiguous bytes."""
    rows, nbr = self.blocks.shape[:2]
    if self.split is not None:
      q, sc, *h = (t.reshape(rows * nbr, -1) for t in self.split)
      vals = _SPLIT[self.qtype][3](q, sc, h[0] if h else None)
    else: vals = _NATURAL[self.qtype](self.blocks.reshape(rows * nbr, -1))
    return vals.reshape(rows, nbr, *self.block_shape)
  def dequantize(self) -> Tensor:
    """The values as a float32 Tensor of `shape` (lazy: nothing runs until it is realized)."""
    if self.device == "DISK": return self.to(Device.DEFAULT).dequantize()
    if self.words is not None: return self._from_words()
    return self.blockwise().reshape(self.shape)
  def _from_words(self) -> Tensor:
    """The values from the int8 dot product's layout: each word's 4 bytes (Q4: each byte's two nibbles), in the
    block's element order (Q4: the low nibbles of its 16 bytes, then the high ones)."""
    assert self.words is not None
    words, scales = self.words
    G, nbr, W, L = words.shape
    dev, off = words.device, _DOT[self.qtype][3]
    # (G, L, nbr, W, 4): byte i of word k of each row's block
    b = (words.permute(0, 3, 1, 2).reshape(G, L, nbr, W, 1) >> _shifts(4, 8, dev, (1, 1, 1, 1, 4))) & 255
    sc = scales.float().permute(0, 3, 1, 2)  # (G, L, nbr, S)
    if W == 4:  # Q4: the low nibbles (elements 0..15), then the high ones
      q = (b.reshape(G, L, nbr, 1, W, 4) >> _shifts(2, 4, dev, (1, 1, 1, 2, 1, 1))) & 15
      d = sc[..., 0:1].reshape(G, L, nbr, 1, 1, 1)
      vals = q.float() * d + sc[..., 1:2].reshape(G, L, nbr, 1, 1, 1) if sc.shape[-1] == 2 else (q - off).float() * d
    else: vals = (b - off).float() * sc[..., 0:1].reshape(G, L, nbr, 1, 1)
    # its own buffer in (G, L, ...) order, reshaped once realized: the rows of a lazy view would be row // 16 and
    # row % 16 of the layout's axes in every load's index math (a prompt's dequantized weights took twice as long)
    rows = prod(self.shape[:-1])
    return vals.contiguous().reshape(G * L, -1)[:rows].reshape(self.shape)
  def dot(self, x: Tensor, wide: bool = False) -> Tensor:
    """x (T, K) @ the values.T, (T, rows) float32, with x quantized to int8 blocks (quantize_row_q8): needs the int8
    layout (realize(int8=True)). Per row and block, isum = sum_j q_j * x_j in int32 (dot4 of each word's bytes, the
    byte offset folded in as -offset * sum_j x_j), then d_w * d_x * isum (+ m_w * d_x * sum_j x_j for Q4_1). A few
    rows of x share each weight load (the kernel keeps an accumulator per row). wide (Q8_0 only): x in 16-bit blocks
    instead (quantize_row_q24), three int8 dot products per word, for a product whose rounding must stay near the
    float one's (a model's output projection: greedy decoding compares its logits directly)."""
    if self.words is None:
      raise ValueError(f"QuantizedTensor.dot: {self!r} (times x of shape {x.shape}) needs the int8 layout: "
                       "realize(int8=True) it first")
    if wide: return self._dot24(x)
    words, scales = self.words
    G, nbr, W, L = words.shape
    T = x.shape[0]
    xw, dx, xs = quantize_row_q8(x)
    off = _DOT[self.qtype][3]
    # Q4_1's min term needs the sums only as d_x * sum_j x_j: that product is their kernel's own output, one kernel
    # fewer per matvec (each one costs a launch, 120 of them per SmolLM2 decode step); the others add them into isum
    mins = (dx * xs.float()).contiguous().reshape(T, 1, nbr, 1) if scales.shape[2] == 2 else None
    # (T, G, nbr, L): x's blocks broadcast over the row groups and the 16 rows of each
    xw, dx, xs = xw.reshape(T, 1, nbr, 8, 1), dx.reshape(T, 1, nbr, 1), xs.contiguous().reshape(T, 1, nbr, 1)
    isum = (xs * -off) if off else None
    for k in range(W):
      # (T, G, nbr, L): word k of each block of 16 rows, expanded over x's rows before any op on it (an op read
      # through an expansion would get a buffer of its own; here each row's copy is the same value in the kernel)
      w = words[:, :, k].reshape(1, G, nbr, L).expand(T, G, nbr, L)
      # Q4: the word's low nibbles pair with the block's first 16 activations, its high ones with the last 16
      terms = [dot4(w, xw[..., k, :], 0), dot4(w, xw[..., 4 + k, :], 1)] if W == 4 else [dot4(w, xw[..., k, :])]
      for t in terms: isum = t if isum is None else isum + t
    assert isum is not None
    val = isum.float() * (scales[:, :, 0].float() * dx)
    if mins is not None: val = val + scales[:, :, 1].float() * mins
    return val.sum(2).reshape(T, G * L)[:, :prod(self.shape[:-1])]
  def _dot24(self, x: Tensor) -> Tensor:
    """dot(x, wide=True). Q8_0's layout holds u = q + 128 as unsigned bytes; with x_j = 65536 * h_j + 256 * m_j +
    l_j (quantize_row_q24), sum_j q_j * x_j = 65536 * H + 256 * M + L: H = sum_j u_j * h_j - 128 * sum_j h_j, a dot4
    of the word (unsigned) with h (signed), M and L dot4s of m and l (unsigned) with the word's top bits flipped back
    (q, signed). Each is exact in int32 (at most 32 * 255 * 128 in size); the total, up to 2**35, adds in float."""
    assert self.words is not None
    if self.qtype != "Q8_0": raise ValueError(f"QuantizedTensor.dot: wide=True needs Q8_0, {self!r} is {self.qtype}")
    words, scales = self.words
    G, nbr, W, L = words.shape
    T = x.shape[0]
    xw, dx, hs = quantize_row_q24(x)
    xw, dx, hs = xw.reshape(T, 1, nbr, 24, 1), dx.reshape(T, 1, nbr, 1), hs.contiguous().reshape(T, 1, nbr, 1)
    planes: list[Tensor | None] = [None, None, None]
    for k in range(W):
      w = words[:, :, k].reshape(1, G, nbr, L).expand(T, G, nbr, L)
      q = w ^ -0x7F7F7F80  # 0x80808080: the bytes as signed values again
      terms = [dot4(w, xw[..., k, :])] + [dot4(xw[..., 8 * p + k, :].expand(T, G, nbr, L), q) for p in (1, 2)]
      planes = [t if acc is None else acc + t for acc, t in zip(planes, terms)]
    high, mid, low = planes
    assert high is not None and mid is not None and low is not None
    # added in float (each int32 sum converts exactly): a sum scaled in int32 would be a multiply of every product
    isum = (high - hs * 128).float() * 65536.0 + mid.float() * 256.0 + low.float()
    val = isum * (scales[:, :, 0].float() * dx)
    return val.sum(2).reshape(T, G * L)[:, :prod(self.shape[:-1])]
  def float(self) -> Tensor: return self.dequantize()
  def numpy(self) -> Any: return self.dequantize().numpy()
  def row_bytes(self, i: int) -> bytes:
    """The raw blocks of row i."""
    n = self.blocks.shape[1] * self.block_bytes
    if self.host is None: self.host = memoryview(bytes(self.blocks.to(Device.DEFAULT).contiguous().data()))
    return bytes(self.host[i * n:(i + 1) * n])
  def __repr__(self) -> str: return f"<QuantizedTensor {self.qtype} {self.shape} on {self.device}>"

_TYPE_BY_NAME = {name: (name, blk, bsz) for name, blk, bsz in GGML_TYPES.values()}

def _load_tensor(mapping: DiskMapping, path: str, start: int, tname: str, dims: tuple[int, ...], gtype: int,
                 quantized: bool) -> Tensor | QuantizedTensor:
  tn, blk, bsz = GGML_TYPES[gtype]
  shape = tuple(reversed(dims))
  if tn in _PLAIN: return disk_tensor(mapping, start, shape, _PLAIN[tn])
  if tn not in DEQUANTIZERS:
    raise ValueError(f"gguf_load: {path}: tensor {tname!r} has ggml type {tn}, which isn't supported yet; "
                     f"supported: {list(_PLAIN) + list(DEQUANTIZERS)}")
  n_blocks = prod(dims) // blk
  rows = n_blocks // (dims[0] // blk) if dims else 1
  raw = disk_tensor(mapping, start, (rows, n_blocks // rows, bsz))
  q = QuantizedTensor(raw, tn, shape, mapping.read(start, n_blocks * bsz))
  return q if quantized else q.dequantize()

def gguf_metadata(src: str | os.PathLike | Tensor) -> dict[str, Any]:
  """The metadata of a GGUF file alone (its header is parsed and checked; no tensor is read): what a caller checks,
  like the tokenizer, before it spends time loading weights."""
  return _parse(*mapping_of(src, "gguf_metadata"))[0]

def gguf_load(src: str | os.PathLike | Tensor, quantized: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
  """Metadata and tensors of a GGUF file (a path, or a 1-D uint8 Tensor of its bytes). Shapes are numpy order (ggml
  dims reversed). F32/F16/BF16 (and the int types) are DISK views of the file in their own dtype, until moved;
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q2_K, Q3_K, Q4_K, Q5_K, Q6_K tensors are dequantized to float32 on Device.DEFAULT
  (lazily), or with quantized=True stay QuantizedTensors: their blocks as DISK views, dequantized where they are used.

  >>> kv, weights = gguf_load("/work/shared/datasets/llm/stories260K.gguf")  # doctest: +SKIP
  >>> kv["general.architecture"], weights["token_embd.weight"].shape  # doctest: +SKIP
  ('llama', (512, 64))
  """
  mapping, start, size = mapping_of(src, "gguf_load")
  kv, infos, data_start = _parse(mapping, start, size)
  tensors = {tname: _load_tensor(mapping, mapping.path, data_start + off, tname, dims, gtype, quantized)
             for tname, dims, gtype, off in infos}
  return kv, tensors
