"""gguf_load: the real stories260K files (metadata, shapes, dequantization vs a NumPy reference and vs F32), and small
files written here for the other quant types, GGUF v2, every metadata type and malformed headers."""
from __future__ import annotations
import os, re, struct
from typing import Any
import numpy as np
import pytest
from attograd.dtype import dtypes
from attograd.tensor import Tensor
from attograd.nn.gguf import gguf_load

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
GGML = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q6_K": 14, "BF16": 30}

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

BLOCK = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "Q8_0": 34, "Q6_K": 210}

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

def ref_dequant(raw: bytes, qtype: str) -> np.ndarray:
  b = np.frombuffer(raw, np.uint8).reshape(-1, BLOCK[qtype])
  if qtype == "Q6_K": return ref_q6_k(b)
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
  n_scales = 2 if qtype in ("Q4_1", "Q5_1") else 1
  scales = rng.uniform(-2, 2, (n_blocks, n_scales)).astype(np.float16)
  where = slice(208, 210) if qtype == "Q6_K" else slice(0, 2 * n_scales)  # Q6_K keeps d at the end
  b[:, where] = scales.view(np.uint8).reshape(n_blocks, 2 * n_scales)
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

def test_q5_high_bits(tmp_path: Any, device: str) -> None:
  # one Q5_0 block with d=1, all nibbles 0 and only bit 5 of the high word set: element 5 is 16-16=0, the rest -16
  blk = np.float16(1).tobytes() + struct.pack("<I", 1 << 5) + bytes(16)
  _, w = gguf_load(write_file(tmp_path, write_gguf([], [("w", (32,), GGML["Q5_0"], blk)])))
  want = np.full(32, -16, np.float32)
  want[5] = 0
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
  _bad(tmp_path, write_gguf([], [("w", (256,), GGML["Q4_K"], bytes(144))]), "tensor 'w'", "Q4_K", "supported")

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
