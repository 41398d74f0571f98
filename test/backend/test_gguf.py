"""gguf_load: the real stories260K files (metadata, shapes, dequantization vs a NumPy reference and vs F32), and small
files written here for the other quant types, GGUF v2, every metadata type and malformed headers."""
from __future__ import annotations
import os, re, struct
from typing import Any, Callable
import numpy as np
import pytest
from attograd.dtype import dtypes
from attograd.tensor import Tensor
from attograd.nn.gguf import QuantizedTensor, gguf_load
from attograd.schedule import create_schedule
from attograd.uop.ops import Ops

LLM = "/work/shared/datasets/llm"
F32_FILE = os.path.join(LLM, "stories260K.gguf")
DERIVED = {q: os.path.join(LLM, "derived", f"stories260K-{q}.gguf") for q in ("F16", "Q8_0", "Q4_0")}
# README: max |dequant - f32| is F16 4.8e-4, Q8_0 7.2e-3, Q4_0 0.13, rounded to 2 digits (F16 is 4.83e-4)
TOLERANCE = {"F16": 4.9e-4, "Q8_0": 7.3e-3, "Q4_0": 0.131}
needs_data = pytest.mark.skipif(not os.path.exists(F32_FILE), reason=f"{F32_FILE} is missing")

# ***** a tiny GGUF writer *****

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q", I64: "<q",
        F64: "<d"}
GGML = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10, "Q3_K": 11, "Q4_K": 12,
        "Q5_K": 13, "Q6_K": 14, "IQ2_XXS": 16, "BF16": 30}

def _str(s: str) -> bytes: return struct.pack("<Q", len(s.encode())) + s.encode()

def _value(vtype: int, v: Any) -> bytes:
  if vtype == STR: return _str(v)
  if vtype == ARR:
    etype, items = v
    return struct.pack("<IQ", etype, len(items)) + b"".join(_value(etype, x) for x in items)
  return struct.pack(_FMT[vtype], v)

def write_gguf(kv: list[tuple[str, int, Any]], tensors: list[tuple[str, tuple[int, ...], int, bytes]],
               version: int = 3, align: int = 32) -> bytes:
  """A GGUF file: kv is (key, type, value) (arrays: (element type, items)), tensors (name, ggml dims, type, raw)."""
  head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv))
  for k, t, v in kv: head += _str(k) + struct.pack("<I", t) + _value(t, v)
  data, offsets = b"", []
  for _, _, _, raw in tensors:
    data += b"\0" * (-len(data) % align)
    offsets.append(len(data))
    data += raw
  for (name, dims, gtype, _), off in zip(tensors, offsets):
    head += _str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    head += struct.pack("<IQ", gtype, off)
  return head + b"\0" * (-len(head) % align) + data

def write_file(tmp_path: Any, blob: bytes, name: str = "t.gguf") -> str:
  p = os.path.join(tmp_path, name)
  with open(p, "wb") as f: f.write(blob)
  return p

# ***** NumPy reference dequantizers (ggml's block layouts) *****

BLOCK = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q8_0": 34, "Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176,
         "Q6_K": 210}
# where each block keeps its f16 scales: (first byte, how many)
F16_AT = {"Q4_1": (0, 2), "Q5_1": (0, 2), "Q2_K": (80, 2), "Q3_K": (108, 1), "Q4_K": (0, 2), "Q5_K": (0, 2),
          "Q6_K": (208, 1)}

def _f16(b: np.ndarray, i: int) -> np.ndarray: return b[:, i:i + 2].copy().view(np.float16).astype(np.float32)
def _nib(qs: np.ndarray) -> np.ndarray: return np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int32)
def _hbits(qh: np.ndarray) -> np.ndarray:
  h = qh.copy().view("<u4").astype(np.uint32)
  return (((h >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.int32)

def ref_q6_k(b: np.ndarray) -> np.ndarray:
  """ggml's dequantize_row_q6_K, loop for loop."""
  out = np.zeros((b.shape[0], 256), np.float32)
  for i, blk in enumerate(b):
    d = blk[208:210].copy().view(np.float16).astype(np.float32)[0]
    sc = blk[192:208].copy().view(np.int8)
    for n in range(2):
      ql, qh, s, y = blk[64 * n:], blk[128 + 32 * n:], sc[8 * n:], out[i, 128 * n:]
      for j in range(32):
        k = j // 16
        y[j] = d * s[k] * (int((ql[j] & 0xF) | ((qh[j] >> 0) & 3) << 4) - 32)
        y[j + 32] = d * s[k + 2] * (int((ql[j + 32] & 0xF) | ((qh[j] >> 2) & 3) << 4) - 32)
        y[j + 64] = d * s[k + 4] * (int((ql[j] >> 4) | ((qh[j] >> 4) & 3) << 4) - 32)
        y[j + 96] = d * s[k + 6] * (int((ql[j + 32] >> 4) | ((qh[j] >> 6) & 3) << 4) - 32)
  return out

def _h(blk: np.ndarray, i: int) -> np.float32: return blk[i:i + 2].copy().view(np.float16).astype(np.float32)[0]

def ref_q2_k(b: np.ndarray) -> np.ndarray:
  """ggml's dequantize_row_q2_K, loop for loop: scales[16], qs[64], d, dmin."""
  out = np.zeros((b.shape[0], 256), np.float32)
  for i, blk in enumerate(b):
    d, dmin, sc, y, k = _h(blk, 80), _h(blk, 82), blk[0:16], out[i], 0
    for n in range(2):
      q = blk[16 + 32 * n:]
      for j in range(4):
        for half in range(2):
          s = int(sc[2 * (4 * n + j) + half])
          dl, ml = d * np.float32(s & 0xF), dmin * np.float32(s >> 4)
          for l in range(16):
            y[k] = dl * np.float32((int(q[16 * half + l]) >> (2 * j)) & 3) - ml
            k += 1
  return out

def ref_q3_k(b: np.ndarray) -> np.ndarray:
  """ggml's dequantize_row_q3_K: hmask[32], qs[64], 12 bytes of 6-bit scales unpacked with kmask1/kmask2, d."""
  out = np.zeros((b.shape[0], 256), np.float32)
  kmask1, kmask2 = 0x03030303, 0x0F0F0F0F
  for i, blk in enumerate(b):
    aux = [int(x) for x in blk[96:108].copy().view("<u4")] + [0]
    tmp = aux[2]
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4)
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4)
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4)
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4)
    scales = np.array(aux, "<u4").view(np.int8)
    d_all, hm, y, k, m, is_ = _h(blk, 108), blk[0:32], out[i], 0, 1, 0
    for n in range(2):
      q = blk[32 + 32 * n:]
      for j in range(4):
        for half in range(2):
          dl = d_all * np.float32(int(scales[is_]) - 32)
          is_ += 1
          for l in range(16 * half, 16 * half + 16):
            y[k] = dl * np.float32(((int(q[l]) >> (2 * j)) & 3) - (0 if int(hm[l]) & m else 4))
            k += 1
        m <<= 1
  return out

def _scale_min_k4(j: int, q: np.ndarray) -> tuple[int, int]:
  if j < 4: return int(q[j]) & 63, int(q[j + 4]) & 63
  return (int(q[j + 4]) & 0xF) | ((int(q[j - 4]) >> 6) << 4), (int(q[j + 4]) >> 4) | ((int(q[j]) >> 6) << 4)

def ref_q45_k(b: np.ndarray, five: bool) -> np.ndarray:
  """ggml's dequantize_row_q4_K / q5_K: d, dmin, scales[12], (q5: qh[32]), qs[128]."""
  out = np.zeros((b.shape[0], 256), np.float32)
  for i, blk in enumerate(b):
    d, dmin, scales, y, k = _h(blk, 0), _h(blk, 2), blk[4:16], out[i], 0
    qh, ql = (blk[16:48], blk[48:176]) if five else (None, blk[16:144])
    for c in range(4):
      for half in range(2):
        sc, mn = _scale_min_k4(2 * c + half, scales)
        d1, m1 = d * np.float32(sc), dmin * np.float32(mn)
        for l in range(32):
          q = (int(ql[32 * c + l]) >> (4 * half)) & 0xF
          if qh is not None and int(qh[l]) & (1 << (2 * c + half)): q += 16
          y[k] = d1 * np.float32(q) - m1
          k += 1
  return out

def ref_dequant(raw: bytes, qtype: str) -> np.ndarray:
  b = np.frombuffer(raw, np.uint8).reshape(-1, BLOCK[qtype])
  if qtype == "Q6_K": return ref_q6_k(b)
  if qtype == "Q2_K": return ref_q2_k(b)
  if qtype == "Q3_K": return ref_q3_k(b)
  if qtype in ("Q4_K", "Q5_K"): return ref_q45_k(b, qtype == "Q5_K")
  if qtype == "Q4_0": return (_nib(b[:, 2:18]) - 8).astype(np.float32) * _f16(b, 0)
  if qtype == "Q4_1": return _nib(b[:, 4:20]).astype(np.float32) * _f16(b, 0) + _f16(b, 2)
  if qtype == "Q5_0": return ((_nib(b[:, 6:22]) | _hbits(b[:, 2:6])) - 16).astype(np.float32) * _f16(b, 0)
  if qtype == "Q5_1": return (_nib(b[:, 8:24]) | _hbits(b[:, 4:8])).astype(np.float32) * _f16(b, 0) + _f16(b, 2)
  assert qtype == "Q8_0"
  return b[:, 2:34].copy().view(np.int8).astype(np.float32) * _f16(b, 0)

def random_blocks(qtype: str, n_blocks: int, seed: int = 0) -> bytes:
  """Random quant bytes with finite f16 scales (and mins) in front."""
  rng = np.random.default_rng(seed)
  b = rng.integers(0, 256, (n_blocks, BLOCK[qtype]), dtype=np.uint8)
  at, n_scales = F16_AT.get(qtype, (0, 1))
  scales = rng.uniform(-2, 2, (n_blocks, n_scales)).astype(np.float16)
  b[:, at:at + 2 * n_scales] = scales.view(np.uint8).reshape(n_blocks, 2 * n_scales)
  return b.tobytes()

# ***** the real files *****

@pytest.fixture(scope="module")
def stories() -> tuple[dict[str, Any], dict[str, Tensor]]: return gguf_load(F32_FILE)

@needs_data
def test_stories_metadata(stories: Any) -> None:
  kv, _ = stories
  assert kv["general.architecture"] == "llama" and kv["general.name"] == "llama"
  assert kv["llama.embedding_length"] == 64 and kv["llama.block_count"] == 5
  assert kv["llama.attention.head_count"] == 8 and kv["llama.attention.head_count_kv"] == 4
  assert kv["llama.context_length"] == 2048 and kv["llama.feed_forward_length"] == 172
  assert kv["llama.rope.dimension_count"] == 8
  assert kv["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
  assert len(kv) == 19 and "general.alignment" not in kv
  toks, scores, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.scores"], kv["tokenizer.ggml.token_type"]
  assert len(toks) == len(scores) == len(types) == 512
  assert toks[:3] == ["<unk>", "<s>", "</s>"] and toks[3] == "<0x00>"
  assert all(isinstance(s, float) for s in scores) and scores[-1] == -252.0
  assert all(isinstance(t, int) for t in types) and types[:4] == [2, 3, 3, 6]
  assert kv["tokenizer.ggml.model"] == "llama"
  assert (kv["tokenizer.ggml.unknown_token_id"], kv["tokenizer.ggml.bos_token_id"]) == (0, 1)
  assert kv["tokenizer.ggml.eos_token_id"] == 2 and kv["tokenizer.ggml.seperator_token_id"] == 0xFFFFFFFF

@needs_data
def test_stories_tensors(stories: Any) -> None:
  _, w = stories
  assert len(w) == 48
  want = {"token_embd.weight": (512, 64), "output_norm.weight": (64,), "output.weight": (512, 64)}
  for i in range(5):
    want |= {f"blk.{i}.attn_q.weight": (64, 64), f"blk.{i}.attn_k.weight": (32, 64), f"blk.{i}.attn_v.weight": (32, 64),
             f"blk.{i}.attn_output.weight": (64, 64), f"blk.{i}.attn_norm.weight": (64,),
             f"blk.{i}.ffn_gate.weight": (172, 64), f"blk.{i}.ffn_down.weight": (64, 172),
             f"blk.{i}.ffn_up.weight": (172, 64), f"blk.{i}.ffn_norm.weight": (64,)}
  assert {k: v.shape for k, v in w.items()} == want
  assert sum(v.numel() for v in w.values()) == 292_800
  assert all(v.dtype is dtypes.float32 and v.device == "DISK" for v in w.values())
  # bytes straight from the file: the data starts at 14176 and token_embd.weight is first
  with open(F32_FILE, "rb") as f:
    f.seek(14176)
    first = np.frombuffer(f.read(64 * 4), np.float32)
  np.testing.assert_array_equal(w["token_embd.weight"].to("CPU").numpy()[0], first)

def _header_dump(qtype: str) -> tuple[int, dict[str, tuple[str, int, int]]]:
  """data_start and {name: (type, offset, nbytes)} from the README's header dump (parsed apart from the library)."""
  text = open(DERIVED[qtype] + ".header.txt").read()
  data_start = int(re.search(r"data_start=(\d+)", text).group(1))  # type: ignore[union-attr]
  rows = re.findall(r"^(\S+)\s+\[[\d, ]+\]\s+(\w+)\s+off=\s*(\d+) nbytes=(\d+)", text, re.M)
  return data_start, {n: (t, int(o), int(nb)) for n, t, o, nb in rows}

@needs_data
@pytest.mark.parametrize("qtype", ["F16", "Q8_0", "Q4_0"])
def test_derived_files(device: str, qtype: str, stories: Any) -> None:
  if device == "PYTHON": pytest.skip("the whole model is too slow on the PYTHON backend; synthetic tests cover it")
  kv, w = gguf_load(DERIVED[qtype])
  assert kv["general.architecture"] == "llama" and kv["general.quantization_version"] == 2
  data_start, rows = _header_dump(qtype)
  assert len(rows) == len(w) == 48
  raw = open(DERIVED[qtype], "rb").read()
  f32 = stories[1]
  for name, (t, off, nbytes) in rows.items():
    got = w[name].to(device).float().numpy()
    assert got.shape == f32[name].shape, name
    b = raw[data_start + off:data_start + off + nbytes]
    if t == "F32": ref = np.frombuffer(b, np.float32)
    elif t == "F16":
      assert w[name].dtype is dtypes.float16
      ref = np.frombuffer(b, np.float16).astype(np.float32)
    else:
      assert t == qtype and w[name].dtype is dtypes.float32 and w[name].device == device
      ref = ref_dequant(b, t)
    np.testing.assert_array_equal(got, ref.reshape(got.shape), err_msg=name)
    assert np.abs(got - f32[name].to("CPU").numpy()).max() <= TOLERANCE[qtype], name

# ***** synthetic files *****

@pytest.mark.parametrize("qtype", list(BLOCK))
def test_dequant_synthetic(tmp_path: Any, device: str, qtype: str) -> None:
  ne0 = 256 if qtype.endswith("_K") else 64
  raw = random_blocks(qtype, 3 * ne0 // 32 if ne0 == 64 else 3, seed=len(qtype))  # a (3, ne0) tensor
  p = write_file(tmp_path, write_gguf([], [("w", (ne0, 3), GGML[qtype], raw)]))
  _, w = gguf_load(p)
  assert w["w"].shape == (3, ne0) and w["w"].dtype is dtypes.float32
  np.testing.assert_array_equal(w["w"].numpy(), ref_dequant(raw, qtype).reshape(3, ne0))

@pytest.mark.parametrize("qtype", list(BLOCK))
def test_quantized_stays_quantized(tmp_path: Any, device: str, qtype: str) -> None:
  # quantized=True keeps the blocks (no float copy): realized on the device (the simple types split into quant bytes
  # and float scales), they dequantize to the reference, and a one-row matmul dequantizes inside its kernel
  from attograd.llm.model import linear
  ne0 = 256 if qtype.endswith("_K") else 64
  raw = random_blocks(qtype, 3 * ne0 // 32 if ne0 == 64 else 3, seed=len(qtype) + 1)
  p = write_file(tmp_path, write_gguf([], [("w", (ne0, 3), GGML[qtype], raw)]))
  _, w = gguf_load(p, quantized=True)
  q = w["w"]
  assert isinstance(q, QuantizedTensor) and q.device == "DISK" and (q.qtype, q.shape) == (qtype, (3, ne0))
  assert q.row_bytes(1) == raw[len(raw) // 3:2 * len(raw) // 3]
  ref = ref_dequant(raw, qtype).reshape(3, ne0)
  np.testing.assert_array_equal(q.dequantize().numpy(), ref)  # from DISK: moved to the default device first
  q = q.to(device).realize()
  assert q.nbytes <= len(raw) * 1.2  # quant bytes plus float32 scales: about the file's size, not 4 bytes a weight
  np.testing.assert_array_equal(q.dequantize().numpy(), ref)
  x = np.random.default_rng(0).standard_normal((2, ne0)).astype(np.float32)
  np.testing.assert_allclose(linear(Tensor(x[:1], device=device), q).numpy(), x[:1] @ ref.T, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(linear(Tensor(x, device=device), q).numpy(), x @ ref.T, rtol=1e-4, atol=1e-3)
  with pytest.raises(ValueError, match="QuantizedTensor: Q4_0 \\(2, 64\\) needs uint8 blocks"):
    QuantizedTensor(Tensor.zeros(2, 2, 17, dtype=dtypes.uint8), "Q4_0", (2, 64))

def test_q5_high_bits(tmp_path: Any, device: str) -> None:
  # one Q5_0 block with d=1, all nibbles 0 and only bit 5 of the high word set: element 5 is 16-16=0, the rest -16
  blk = np.float16(1).tobytes() + struct.pack("<I", 1 << 5) + bytes(16)
  _, w = gguf_load(write_file(tmp_path, write_gguf([], [("w", (32,), GGML["Q5_0"], blk)])))
  want = np.full(32, -16, np.float32)
  want[5] = 0
  np.testing.assert_array_equal(w["w"].numpy(), want)

def _k_block(qtype: str) -> tuple[bytes, np.ndarray]:
  """One hand-made block of a k-quant and its values worked out by hand from ggml's layout (not by the reference)."""
  b, want = np.zeros(BLOCK[qtype], np.uint8), np.zeros(256, np.float32)
  one, half = np.frombuffer(np.float16(1).tobytes(), np.uint8), np.frombuffer(np.float16(0.5).tobytes(), np.uint8)
  if qtype == "Q2_K":  # scale/min pair 5 (elements 80..95: half 0, field 2, qs bytes 16..31) = 3, 2
    b[80:82], b[82:84], b[5] = one, one, 0x23
    b[16 + 16 + 7] = 3 << 4  # field 2 of qs byte 23 is element 64 + 23 = 87
    want[80:96] = -2
    want[87] = 3 * 3 - 2
  elif qtype == "Q3_K":  # every 6-bit scale 0 -> -32 except k=13 (elements 208..223) = 45 -> 13; every q = 0 - 4
    b[108:110], b[96 + 5], b[96 + 9] = one, 13 << 4, 2 << 6
    want[:] = -32 * -4
    want[208:224] = 13 * -4
    b[32 + 32 + 19], b[19] = 3 << 4, 1 << 6  # element 128 + 64 + 19 = 211: qs[32 + 19] field 2 = 3, hmask bit 4+2
    want[211] = 13 * 3
  else:  # sub-block 5 (elements 160..191): scale 7 | 3 << 4 = 55, min 3 | 2 << 4 = 35; every nibble of sub-block 5 = 2
    b[0:2], b[2:4], b[4 + 9], b[4 + 1], b[4 + 5] = one, half, 0x37, 0xC0, 0x80
    qs = 48 if qtype == "Q5_K" else 16
    b[qs:qs + 128] = 0x21
    want[160:192] = 55 * 2 - 0.5 * 35
    if qtype == "Q5_K":
      b[16 + 3] = 1 << 5  # qh bit 5 of byte 3: element 3 of sub-block 5 gets +16
      want[163] = 55 * 18 - 0.5 * 35
  return b.tobytes(), want

@pytest.mark.parametrize("qtype", ["Q2_K", "Q3_K", "Q4_K", "Q5_K"])
def test_k_quant_by_hand(tmp_path: Any, qtype: str) -> None:
  blk, want = _k_block(qtype)
  np.testing.assert_array_equal(ref_dequant(blk, qtype)[0], want)
  _, w = gguf_load(write_file(tmp_path, write_gguf([], [("w", (256,), GGML[qtype], blk)])))
  np.testing.assert_array_equal(w["w"].numpy(), want)

def test_metadata_types_v2(tmp_path: Any) -> None:
  kv = [("u8", U8, 255), ("i8", I8, -128), ("u16", U16, 65535), ("i16", I16, -32768), ("u32", U32, 2**32 - 1),
        ("i32", I32, -2**31), ("f32", F32, 1.5), ("b", BOOL, True), ("s", STR, "héllo"), ("u64", U64, 2**64 - 1),
        ("i64", I64, -2**63), ("f64", F64, 0.1), ("strs", ARR, (STR, ["a", "", "▁the"])),
        ("nested", ARR, (ARR, [(I32, [1, 2]), (STR, ["x"]), (U8, [])])), ("empty", ARR, (F32, [])),
        ("bools", ARR, (BOOL, [True, False]))]
  for version in (2, 3):
    got, w = gguf_load(write_file(tmp_path, write_gguf(kv, [], version=version), f"v{version}.gguf"))
    assert w == {}
    assert got == {"u8": 255, "i8": -128, "u16": 65535, "i16": -32768, "u32": 2**32 - 1, "i32": -2**31, "f32": 1.5,
                   "b": True, "s": "héllo", "u64": 2**64 - 1, "i64": -2**63, "f64": 0.1, "strs": ["a", "", "▁the"],
                   "nested": [[1, 2], ["x"], []], "empty": [], "bools": [True, False]}

def test_arrays_of_every_type(tmp_path: Any) -> None:
  vals = {U8: [0, 255], I8: [-128, 127], U16: [0, 65535], I16: [-32768, 7], U32: [2**32 - 1], I32: [-2**31, 2**31 - 1],
          F32: [0.5, -2.25], BOOL: [False, True], STR: ["", "é", "<|im_end|>"], U64: [2**64 - 1], I64: [-2**63],
          F64: [1e300, -0.1]}
  deep: Any = (I8, [-1])
  for _ in range(5): deep = (ARR, [deep, (ARR, [])])  # nested arrays five deep, with empty siblings
  kv = [(f"a{t}", ARR, (t, v)) for t, v in vals.items()] + [("deep", ARR, deep)]
  got, _ = gguf_load(write_file(tmp_path, write_gguf(kv, [])))
  assert {k: got[f"a{t}"] for t, k in zip(vals, vals)} == vals
  want: Any = [-1]
  for _ in range(5): want = [want, []]
  assert got["deep"] == want

def test_plain_types_and_alignment(tmp_path: Any) -> None:
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  h = np.array([[0.5, -2]], np.float16)
  bf = (np.array([1.0, -3.0, 0.25], np.float32).view(np.uint32) >> 16).astype(np.uint16)
  tensors = [("a", (3, 2), GGML["F32"], a.tobytes()), ("h", (2, 1), GGML["F16"], h.tobytes()),
             ("bf", (3,), GGML["BF16"], bf.tobytes())]
  blob = write_gguf([("general.alignment", U32, 64)], tensors, version=2, align=64)
  kv, w = gguf_load(write_file(tmp_path, blob))
  assert kv["general.alignment"] == 64
  assert (w["a"].dtype, w["h"].dtype, w["bf"].dtype) == (dtypes.float32, dtypes.float16, dtypes.bfloat16)
  np.testing.assert_array_equal(w["a"].numpy(), a)
  np.testing.assert_array_equal(w["h"].numpy(), h)
  assert w["bf"].to("CPU").float().tolist() == [1.0, -3.0, 0.25]
  # .numpy() straight from the file (a DISK view, where no cast kernel can run) widens bfloat16 on the host
  assert w["bf"].numpy().dtype == np.float32 and w["bf"].numpy().tolist() == [1.0, -3.0, 0.25]
  assert w["bf"].tolist() == [1.0, -3.0, 0.25]
  # the same bytes given as a uint8 Tensor
  _, w2 = gguf_load(Tensor(np.frombuffer(blob, np.uint8)))
  np.testing.assert_array_equal(w2["a"].numpy(), a)

# ***** malformed files: each is a ValueError naming the file and what is wrong *****

def _good() -> bytes:
  return write_gguf([("general.name", STR, "x")], [("w", (32,), GGML["F32"], bytes(128))])

def _bad(tmp_path: Any, blob: bytes, *patterns: str) -> None:
  p = write_file(tmp_path, blob, "bad.gguf")
  with pytest.raises(ValueError) as e: gguf_load(p)
  msg = str(e.value)
  assert "bad.gguf" in msg, msg
  for pat in patterns: assert re.search(pat, msg), (pat, msg)

def test_bad_magic(tmp_path: Any) -> None: _bad(tmp_path, b"GGML" + _good()[4:], "bad magic", "not a GGUF file")
def test_empty_file(tmp_path: Any) -> None: _bad(tmp_path, b"", "magic", "truncated")
def test_bad_version(tmp_path: Any) -> None: _bad(tmp_path, b"GGUF" + struct.pack("<I", 1) + _good()[8:], "version 1")

def test_truncated(tmp_path: Any) -> None:
  good = _good()
  _bad(tmp_path, good[:12], "tensor count", "past the end")
  _bad(tmp_path, good[:30], "past the end")
  _bad(tmp_path, good[:-1], "tensor 'w'", "past the end of the data section")
  for n in range(len(good) - 128):  # every cut inside the header fails cleanly
    with pytest.raises(ValueError): gguf_load(write_file(tmp_path, good[:n], "cut.gguf"))

def test_huge_counts(tmp_path: Any) -> None:
  _bad(tmp_path, b"GGUF" + struct.pack("<IQQ", 3, 2**60, 2**60) + bytes(64), "metadata pairs", "past the end")

def test_string_past_end(tmp_path: Any) -> None:
  blob = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 10**12) + b"key" + bytes(16)
  _bad(tmp_path, blob, "metadata key 0", "1000000000000-byte string", "past the end")
  blob = write_gguf([("general.name", STR, "x")], [])
  _bad(tmp_path, blob.replace(struct.pack("<Q", 1) + b"x", struct.pack("<Q", 2**40) + b"x"), "'general.name'")
  blob = write_gguf([("a", ARR, (STR, ["x"]))], [])
  _bad(tmp_path, blob.replace(struct.pack("<IQ", STR, 1), struct.pack("<IQ", STR, 2**50)), "'a'", "past the end")

def test_unknown_value_type(tmp_path: Any) -> None:
  blob = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _str("k") + struct.pack("<I", 13) + bytes(8)
  _bad(tmp_path, blob, "'k'", "unknown value type 13")

def test_offset_past_end(tmp_path: Any) -> None:
  good = _good()
  at = good.index(_str("w")) + len(_str("w")) + 4 + 8 + 4
  blob = good[:at] + struct.pack("<Q", 4096) + good[at + 8:]
  _bad(tmp_path, blob, "tensor 'w'", "data offset 4096", "past the end")

def test_unknown_ggml_type(tmp_path: Any) -> None:
  _bad(tmp_path, write_gguf([], [("w", (32,), 99, bytes(128))]), "tensor 'w'", "unknown ggml type 99")

def test_unsupported_ggml_type(tmp_path: Any) -> None:
  _bad(tmp_path, write_gguf([], [("w", (256,), GGML["IQ2_XXS"], bytes(66))]), "tensor 'w'", "IQ2_XXS", "supported")

def test_bad_row_length(tmp_path: Any) -> None:
  _bad(tmp_path, write_gguf([], [("w", (16,), GGML["Q8_0"], bytes(34))]), "tensor 'w'", "ne0=16", "block size 32")

def test_overlap_and_alignment(tmp_path: Any) -> None:
  good = write_gguf([], [("a", (32,), GGML["F32"], bytes(128)), ("b", (32,), GGML["F32"], bytes(128))])
  at = good.index(_str("b")) + len(_str("b")) + 4 + 8 + 4
  _bad(tmp_path, good[:at] + struct.pack("<Q", 64) + good[at + 8:], "'a' and 'b' overlap")
  _bad(tmp_path, good[:at] + struct.pack("<Q", 136) + good[at + 8:], "'b'", "offset 136", "alignment 32")
  _bad(tmp_path, write_gguf([("general.alignment", U32, 24)], []), "general.alignment", "power of two", "24")

def test_duplicate_names(tmp_path: Any) -> None:
  _bad(tmp_path, write_gguf([], [("a", (32,), 0, bytes(128)), ("a", (32,), 0, bytes(128))]), "'a' appears twice")

def test_bogus_n_dims(tmp_path: Any) -> None:
  good = _good()
  at = good.index(_str("w")) + len(_str("w"))
  _bad(tmp_path, good[:at] + struct.pack("<I", 2**31) + good[at + 4:], "tensor 'w'", "n_dims=2147483648")
  _bad(tmp_path, good[:at + 4] + struct.pack("<Q", 2**62) + good[at + 12:], "tensor 'w'", "past the end")  # huge dim

def test_quantized_scalar(tmp_path: Any) -> None:  # n_dims=0 is one element: no whole block
  _bad(tmp_path, write_gguf([], [("w", (), GGML["Q8_0"], bytes(34))]), "tensor 'w'", "block size 32")

def test_bad_strings(tmp_path: Any) -> None:
  blob = write_gguf([("general.name", STR, "xy")], [])
  _bad(tmp_path, blob.replace(b"xy", b"\xff\xfe"), "'general.name'", "not UTF-8")
  blob = write_gguf([], [("w", (32,), GGML["F32"], bytes(128))])
  _bad(tmp_path, blob.replace(_str("w"), struct.pack("<Q", 2**63) + b"w"), "tensor 0 name", "past the end")

def test_bad_arrays(tmp_path: Any) -> None:
  blob = write_gguf([("a", ARR, (U8, [1, 2]))], [])
  _bad(tmp_path, blob.replace(struct.pack("<IQ", U8, 2), struct.pack("<IQ", 13, 2)), "'a'", "unknown value type 13")
  _bad(tmp_path, blob.replace(struct.pack("<IQ", U8, 2), struct.pack("<IQ", U8, 2**62)), "'a'", "past the end")
  deep: Any = (U8, [])
  for _ in range(20): deep = (ARR, [deep])
  _bad(tmp_path, write_gguf([("d", ARR, deep)], []), "'d'", "more than 16 deep")

def test_data_section_missing(tmp_path: Any) -> None:
  good = _good()
  head = len(good) - 128
  _bad(tmp_path, good[:head], "tensor 'w'", "128 bytes at data offset 0", "past the end of the data section")
  _bad(tmp_path, good[:head - 5], "tensor 'w'", "past the end of the data section \\(0 bytes\\)")

def test_bytes_source_checked(tmp_path: Any) -> None:  # a Tensor of the bytes gets the same checks
  with pytest.raises(ValueError, match="past the end of the data section"):
    gguf_load(Tensor(np.frombuffer(_good()[:-4], np.uint8)))

@pytest.mark.parametrize("qtype", list(BLOCK))
def test_one_row_matmul_kernel_is_vector_lanes_without_division(qtype: str) -> None:
  # the values in each type's natural block shape: the matvec's loops index the quant bytes with no division or
  # modulo, and its innermost loop runs as vector lanes (16 floats) over contiguous bytes
  from attograd import Device
  from attograd.codegen import get_program
  from attograd.llm.model import linear
  from attograd.schedule import create_schedule
  ne0 = 512 if qtype.endswith("_K") else 128
  raw = random_blocks(qtype, 8 * ne0 // (256 if qtype.endswith("_K") else 32), seed=3)
  q = QuantizedTensor(Tensor(np.frombuffer(raw, np.uint8).reshape(8, -1, BLOCK[qtype]), device="CPU"), qtype,
                      (8, ne0)).realize()
  x = Tensor(np.random.default_rng(1).standard_normal((1, ne0)).astype(np.float32), device="CPU").realize()
  out = linear(x, q)
  items, _ = create_schedule([out.uop])
  src = get_program(items[-1].ast, Device["CPU"].renderer).src
  body = src[src.index("void r_"):]
  assert "float16 acc0" in body and "/" not in body and "%" not in body, body
  ref = ref_dequant(raw, qtype).reshape(8, ne0)
  np.testing.assert_allclose(out.numpy(), x.numpy() @ ref.T, rtol=1e-4, atol=1e-3)

def _q8_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """llama.cpp's Q8 activations: per 32 values, d = max|x| / 127 and the int8 values round(x / d), as float64."""
  xb = x.reshape(-1, 32).astype(np.float64)
  amax = np.abs(xb).max(1, keepdims=True)
  q = np.round(xb * np.where(amax > 0, 127 / np.where(amax > 0, amax, 1), 0))
  return q, amax / 127

@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q8_0"])
@pytest.mark.parametrize("rows,ne0", [(40, 64), (33, 96), (16, 32)])
def test_int8_dot_product(qtype: str, rows: int, ne0: int) -> None:
  # the int8 layout (16 rows interleaved, rows padded) dequantizes to the same values, and a one-row matmul with the
  # activation row in int8 blocks equals llama.cpp's math in float64; against the exact float product its error is
  # within the rounding of the activations: |x - d * round(x / d)| <= d / 2 per value, times |w|
  raw = random_blocks(qtype, rows * ne0 // 32, seed=rows)
  ref = ref_dequant(raw, qtype).reshape(rows, ne0).astype(np.float64)
  q = QuantizedTensor(Tensor(np.frombuffer(raw, np.uint8).reshape(rows, -1, BLOCK[qtype]), device="CPU"), qtype,
                      (rows, ne0)).realize(int8=True)
  assert q.words is not None and q.words[0].shape == (-(-rows // 16), ne0 // 32, 4 if qtype != "Q8_0" else 8, 16)
  # the scales stay the file's float16: with rows a multiple of 16 the layout is exactly the file's bytes
  assert q.words[1].dtype == dtypes.float16 and (rows % 16 or q.nbytes == len(raw))
  np.testing.assert_array_equal(q.dequantize().numpy(), ref.astype(np.float32))
  x = np.random.default_rng(rows + ne0).standard_normal(ne0).astype(np.float32)
  x[:32] = 0.0  # a block of zeros: scale 0, values 0
  out = q.dot(Tensor(x).reshape(1, -1))
  # the activations' block maxima, int8 words and sums (Q4_1: the sums times d, their min term), then the matvec
  assert sum(si.ast.op is Ops.SINK for si in create_schedule([out.uop])[0]) == 4
  got = out.numpy().reshape(-1).astype(np.float64)
  xq, d = _q8_reference(x)
  want = ref @ (xq * d).reshape(-1)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
  bound = (np.abs(ref).reshape(rows, -1, 32).sum(2) * d.reshape(1, -1) / 2).sum(1)
  assert (np.abs(got - ref @ x) <= bound * 1.001 + 1e-4).all()

def test_int8_dot_renders_vnni_and_equals_plain_integer_math(monkeypatch: pytest.MonkeyPatch) -> None:
  # where the CPU has VNNI each word's four byte products are one vpdpbusd; the sums are the same integers as the
  # plain ops', so the results are the same floats
  run = _int8_matvec_runner(monkeypatch, "Q4_1", 5, 2, wide=False)
  plain_src, plain = run(False)
  assert "vpdpbusd" not in plain_src
  if not _has_vnni(): pytest.skip("this CPU has no AVX-512 VNNI")
  src, got = run(True)
  assert src.count("vpdpbusd") >= 8, src  # 8 words of each block (4 low nibbles, 4 high) for 16 rows
  np.testing.assert_array_equal(got, plain)

@pytest.mark.parametrize("rows,ne0,T", [(40, 96, 1), (33, 64, 2), (16, 32, 1)])
def test_wide_dot_product_is_near_the_float_product(rows: int, ne0: int, T: int) -> None:
  # Q8_0 weights times activations in 23-bit blocks (three int8 planes): within float32's own rounding of the exact
  # product (int8 activations: ~1% of the largest value), for several rows of x, a block of zeros among them
  raw = random_blocks("Q8_0", rows * ne0 // 32, seed=rows)
  ref = ref_dequant(raw, "Q8_0").reshape(rows, ne0).astype(np.float64)
  q = QuantizedTensor(Tensor(np.frombuffer(raw, np.uint8).reshape(rows, -1, BLOCK["Q8_0"]), device="CPU"), "Q8_0",
                      (rows, ne0)).realize(int8=True)
  x = np.random.default_rng(rows + ne0).standard_normal((T, ne0)).astype(np.float32) * 30
  x[0, :32] = 0.0
  got = q.dot(Tensor(x), wide=True).numpy().astype(np.float64)
  want = x.astype(np.float64) @ ref.T
  assert got.shape == (T, rows)
  # each value off by at most 2**-23 of its block's largest activation, times |w|; then float32 sums
  bound = (np.abs(ref).reshape(1, rows, -1, 32).sum(3) * np.abs(x).reshape(T, 1, -1, 32).max(3)).sum(2) * 2.0 ** -23
  assert (np.abs(got - want) <= bound + 1e-6 * np.abs(want).max()).all()
  with pytest.raises(ValueError, match="wide=True needs Q8_0"):
    QuantizedTensor(Tensor(np.frombuffer(random_blocks("Q4_0", 16, seed=1), np.uint8).reshape(16, 1, BLOCK["Q4_0"]),
                           device="CPU"), "Q4_0", (16, 32)).realize(int8=True).dot(Tensor(x[:, :32]), wide=True)

def test_wide_dot_renders_vnni_for_every_plane_and_equals_plain_integer_math(monkeypatch: pytest.MonkeyPatch) -> None:
  # the high plane is a dot4 of the weights' words (unsigned) with x's (signed, one word for all 16 rows); the other
  # two of x's words (unsigned, one for all rows) with the weights' (signed, a vector): each is one vpdpbusd, and no
  # byte product is left as a multiply
  run = _int8_matvec_runner(monkeypatch, "Q8_0", 6, 3, wide=True)
  plain_src, plain = run(False)
  assert "vpdpbusd" not in plain_src
  if not _has_vnni(): pytest.skip("this CPU has no AVX-512 VNNI")
  src, got = run(True)
  # x's unsigned words go in as one word for every lane: `(valN) + (int16){0}` as the instruction's second argument
  broadcast = re.findall(r"vpdpbusd_v16si\((?:[^()]|\([^()]*\))*?, \(val\d+\) \+ \(int16\)\{0\}, ", src)
  assert src.count("vpdpbusd") >= 24 and broadcast, src
  np.testing.assert_array_equal(got, plain)

def _int8_matvec_runner(monkeypatch: pytest.MonkeyPatch, qtype: str, seed: int, xseed: int,
                        wide: bool) -> Callable[[bool], tuple[str, Any]]:
  """run(vnni): the int8-layout matvec of 48x128 random `qtype` weights by one random row, built with the CPU
  renderer's int8 dot product on or off: (the last kernel's source, the result)."""
  from attograd import Device
  from attograd.codegen import get_program
  from attograd.engine import realize
  from attograd.schedule import create_schedule
  ren = Device["CPU"].renderer
  raw = random_blocks(qtype, 48 * 128 // 32, seed=seed)
  q = QuantizedTensor(Tensor(np.frombuffer(raw, np.uint8).reshape(48, -1, BLOCK[qtype]), device="CPU"), qtype,
                      (48, 128)).realize(int8=True)
  x = Tensor(np.random.default_rng(xseed).standard_normal((1, 128)).astype(np.float32), device="CPU").realize()
  def run(vnni: bool) -> tuple[str, Any]:
    monkeypatch.setattr(ren, "int8_dot", vnni)
    monkeypatch.setattr(realize, "_runners", realize._RunnerCache())  # compiled again, not the other's program
    out = q.dot(x, wide=True) if wide else q.dot(x)
    items, _ = create_schedule([out.uop])
    return get_program(items[-1].ast, ren).src, out.numpy()
  return run

def _has_vnni() -> bool:
  from attograd import Device
  return bool(getattr(Device["CPU"].compiler, "int8_dot", False))

def test_int8_dot_without_the_int8_layout_names_the_weight_and_x() -> None:
  q = QuantizedTensor(Tensor(np.zeros((2, 1, 18), dtype=np.uint8)), "Q4_0", (2, 32))
  with pytest.raises(ValueError, match=r"Q4_0 \(2, 32\).*shape \(1, 32\).*realize\(int8=True\)"):
    q.dot(Tensor.ones(1, 32))
