"""nn.state: safetensors (round trips, byte compatibility with the `safetensors` package, malformed files), the DISK
device, torch_load (zip and legacy files written by torch, and malicious pickles that must run nothing), state dicts."""
from __future__ import annotations
import io, json, os, pickle, struct, subprocess, sys, zipfile
from collections import OrderedDict
from typing import Any
import numpy as np
import pytest
from attograd import Device, Tensor, dtypes
from attograd.dtype import DType, strong_dtype, to_np_dtype
from attograd.nn.state import (as_strided, disk_tensor, get_parameters, get_state_dict, load_state_dict, safe_load,
                               safe_load_metadata, safe_save, torch_load)
from attograd.runtime.ops_disk import DiskBuffer

def P(name: str, *args: Any) -> Any: return pytest.param(*args, id=name)

def values(t: Tensor) -> np.ndarray:
  """The tensor's values as NumPy (bfloat16 and fp8 as float32), copied off DISK first."""
  t = t.to(Device.DEFAULT) if t.device == "DISK" else t
  return t.numpy()

def sample(d: DType, shape: tuple[int, ...], seed: int = 0) -> Tensor:
  rng = np.random.default_rng(seed)
  if d is dtypes.bfloat16 or d in dtypes.fp8s: return Tensor(rng.uniform(-4, 4, shape).astype(np.float32)).cast(d)
  if d is dtypes.bool: return Tensor(rng.integers(0, 2, shape).astype(bool))
  if dtypes.is_float(d): return Tensor(rng.uniform(-4, 4, shape).astype(to_np_dtype(d)))
  info = np.iinfo(to_np_dtype(d))
  return Tensor(rng.integers(info.min, info.max, shape, dtype=to_np_dtype(d), endpoint=True))

# ***** safetensors round trips *****

@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (3, 0, 2)], ids=str)
@pytest.mark.parametrize("d", dtypes.all, ids=lambda d: d.name)
def test_safetensors_roundtrip(tmp_path, d: DType, shape: tuple[int, ...]) -> None:
  t = sample(d, shape)
  safe_save({"t": t}, tmp_path / "a.safetensors")
  got = safe_load(tmp_path / "a.safetensors")["t"]
  assert got.device == "DISK" and got.shape == shape and got.dtype is d
  np.testing.assert_array_equal(values(got), values(t))

def test_safetensors_many_tensors_and_metadata(tmp_path) -> None:
  ts = {f"layer.{i}.{d.name}": sample(d, (i + 1, 2), seed=i) for i, d in enumerate(dtypes.all)}
  safe_save(ts, tmp_path / "m.safetensors", metadata={"format": "pt", "note": "ü"})
  got = safe_load(tmp_path / "m.safetensors")
  assert set(got) == set(ts)
  for k, t in ts.items(): np.testing.assert_array_equal(values(got[k]), values(t))
  whole, data_start, header = safe_load_metadata(tmp_path / "m.safetensors")
  assert header["__metadata__"] == {"format": "pt", "note": "ü"} and data_start % 8 == 0
  assert whole.shape == (os.path.getsize(tmp_path / "m.safetensors"),) and whole.dtype is dtypes.uint8

def test_safe_load_from_tensor(tmp_path) -> None:
  safe_save({"a": Tensor([1.0, 2.0]), "b": Tensor([[3, 4]])}, tmp_path / "a.safetensors")
  raw = open(tmp_path / "a.safetensors", "rb").read()
  for src in (Tensor(raw), disk_tensor(tmp_path / "a.safetensors")):
    got = safe_load(src)
    assert values(got["a"]).tolist() == [1.0, 2.0] and values(got["b"]).tolist() == [[3, 4]]

def test_safe_save_rejects_bad_input(tmp_path) -> None:
  with pytest.raises(TypeError, match="metadata must map strings to strings"):
    safe_save({"a": Tensor([1.0])}, tmp_path / "x", {"n": 1})  # type: ignore[dict-item]
  with pytest.raises(TypeError, match="'a' is a list"): safe_save({"a": [1.0]}, tmp_path / "x")  # type: ignore[dict-item]

def test_safe_save_replaces_atomically(tmp_path) -> None:
  # tensors mapped from the old file keep their bytes: the new file is a new inode, never the old one rewritten
  p = tmp_path / "w.safetensors"
  safe_save({"w": Tensor([1.0, 2.0, 3.0])}, p)
  old = safe_load(p)["w"]
  safe_save({"w": Tensor([7.0])}, p)
  assert values(old).tolist() == [1.0, 2.0, 3.0] and values(safe_load(p)["w"]).tolist() == [7.0]
  assert os.listdir(tmp_path) == ["w.safetensors"]

# ***** byte compatibility with the safetensors package *****

def _compat_tensors() -> dict[str, Tensor]:
  names = ["b", "a", "é\u0001x", "z"]
  ts = {f"{names[i % 4]}{i}": sample(d, (i % 3 + 1, 2), seed=i) for i, d in enumerate(dtypes.all)}
  ts["scalar"], ts["empty"] = Tensor(2.5), Tensor.empty(0, 3)
  return ts

@pytest.mark.parametrize("metadata", [None, {}, {"k": "\u00fc\u0007"}, {"k": "v", "a": "b", "z": "x"}],
                         ids=["none", "empty", "one", "three"])
def test_safetensors_bytes_match_package(tmp_path, metadata: dict | None) -> None:
  torch = pytest.importorskip("torch", reason="torch makes the reference files (numpy has no bfloat16)")
  st = pytest.importorskip("safetensors.torch", reason="`pip install safetensors` for the byte-compatibility tests")
  ts = _compat_tensors()
  # (a Python scalar's tensor, weakfloat, is saved as the float32 it holds)
  ref = {k: torch.from_numpy(values(t)).to(getattr(torch, strong_dtype(t.dtype).name)) for k, t in ts.items()}
  safe_save(ts, tmp_path / "ours.safetensors", metadata)
  st.save_file(ref, tmp_path / "theirs.safetensors", metadata)
  ours, theirs = (tmp_path / "ours.safetensors").read_bytes(), (tmp_path / "theirs.safetensors").read_bytes()
  if metadata is None or len(metadata) <= 1: assert ours == theirs
  else:
    # the package writes metadata keys in Rust HashMap order, which changes from run to run; we sort them
    assert len(ours) == len(theirs) and ours[-200:] == theirs[-200:]
    header = safe_load_metadata(tmp_path / "ours.safetensors")[2]
    assert header == safe_load_metadata(tmp_path / "theirs.safetensors")[2]
  # and each reads the other's
  got = safe_load(tmp_path / "theirs.safetensors")
  back = st.load_file(tmp_path / "ours.safetensors")
  for k, t in ts.items():
    np.testing.assert_array_equal(values(got[k]), values(t))
    assert back[k].dtype == ref[k].dtype and torch.equal(back[k], ref[k])

def test_safetensors_reads_numpy_package_files(tmp_path) -> None:
  stn = pytest.importorskip("safetensors.numpy", reason="`pip install safetensors` for the byte-compatibility tests")
  arrs = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "i": np.array([-1, 2], np.int64),
          "m": np.array([True, False])}
  stn.save_file(arrs, tmp_path / "n.safetensors", metadata={"x": "y"})
  got = safe_load(tmp_path / "n.safetensors")
  for k, a in arrs.items(): np.testing.assert_array_equal(values(got[k]), a)
  assert safe_load_metadata(tmp_path / "n.safetensors")[2]["__metadata__"] == {"x": "y"}

# ***** malformed safetensors files *****

def _st_file(header: Any, data: bytes = b"", n: int | None = None, raw_header: bytes | None = None) -> bytes:
  h = raw_header if raw_header is not None else json.dumps(header).encode()
  return struct.pack("<Q", len(h) if n is None else n) + h + data

MALFORMED = [
  P("too_short", b"\x01\x02", r"file is 2 bytes, too short for the 8-byte header length"),
  P("header_past_end", _st_file({}, n=1000), r"header length 1000 runs past the end of the file \(10 bytes\)"),
  P("invalid_json", _st_file(None, raw_header=b'{"a": {'), r"header is not valid JSON"),
  P("not_object", _st_file([1, 2]), r"header must be a JSON object"),
  P("unknown_dtype", _st_file({"w": {"dtype": "F8_E8M0", "shape": [2], "data_offsets": [0, 2]}}, b"\0\0"),
    r"tensor 'w' has unknown dtype 'F8_E8M0'"),
  P("offsets_out_of_range", _st_file({"w": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(8)),
    r"tensor 'w' has data_offsets \[4, 12\] outside the data section of 8 bytes"),
  P("truncated", _st_file({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(10)),
    r"tensor 'w' has data_offsets \[0, 16\] outside the data section of 10 bytes \(the file may be truncated\)"),
  P("negative_offset", _st_file({"w": {"dtype": "U8", "shape": [2], "data_offsets": [-2, 0]}}, bytes(2)),
    r"tensor 'w' has data_offsets \[-2, 0\] outside the data section of 2 bytes"),
  P("size_mismatch", _st_file({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8)),
    r"tensor 'w' has 8 bytes \(data_offsets \[0, 8\]\) but shape \[3\] of F32 needs 12"),
  P("overlap", _st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)),
    r"tensors 'a' \[0, 8\] and 'b' \[4, 12\] overlap"),
  P("bad_shape", _st_file({"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}}),
    r"tensor 'w' has a bad shape \[-1\]"),
  P("missing_field", _st_file({"w": {"dtype": "U8", "shape": [1]}}, b"\0"),
    r"tensor 'w' needs dtype, shape and data_offsets"),
  P("bad_metadata", _st_file({"__metadata__": [1]}), r"__metadata__ must be a JSON object"),
]

@pytest.mark.parametrize("content, msg", MALFORMED)
def test_safe_load_malformed(tmp_path, content: bytes, msg: str) -> None:
  p = tmp_path / "bad.safetensors"
  p.write_bytes(content)
  with pytest.raises(ValueError, match=rf"safe_load: .*bad\.safetensors: (the )?{msg}"): safe_load(p)

def test_safe_load_truncated_real_file(tmp_path) -> None:
  p = tmp_path / "t.safetensors"
  safe_save({"w": Tensor.ones(64, 64)}, p)
  p.write_bytes(p.read_bytes()[:-100])
  with pytest.raises(ValueError, match=r"'w' has data_offsets \[0, 16384\] outside the data section of 16284 bytes"):
    safe_load(p)

# ***** the DISK device *****

def test_disk_tensor_is_a_view_of_the_file(tmp_path) -> None:
  p = tmp_path / "raw.bin"
  p.write_bytes(np.arange(100, dtype=np.float32).tobytes())
  t = disk_tensor(p, 40, (3, 4), dtypes.float32)
  buf, _ = t._buffer()
  assert isinstance(buf, DiskBuffer) and buf._buf.offset == 40 and buf._buf.nbytes == 48
  np.testing.assert_array_equal(t.to("CPU").numpy(), np.arange(10, 22, dtype=np.float32).reshape(3, 4))
  np.testing.assert_array_equal(t.numpy(), np.arange(10, 22, dtype=np.float32).reshape(3, 4))  # reading works directly
  with pytest.raises(ValueError, match=r"raw\.bin: 10 elements of dtypes.float at byte 380 end at byte 420, past"):
    disk_tensor(p, 380, (10,), dtypes.float32)

def test_disk_reads_only_what_is_moved(tmp_path) -> None:
  # a sparse 1 GB file: loading it and moving one small tensor must not read (or allocate) the big one
  n = 250_000_000
  h = json.dumps({"big": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]},
                  "small": {"dtype": "I32", "shape": [2], "data_offsets": [4 * n, 4 * n + 8]}}).encode()
  h += b" " * ((8 - len(h) % 8) % 8)
  p = tmp_path / "big.safetensors"
  with open(p, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    f.seek(8 + len(h) + 4 * n)  # the gap before it is a hole: no disk, no reads
    f.write(struct.pack("<2i", 7, -7))
  code = (f"import json, resource; from attograd.nn.state import safe_load; sd = safe_load({str(p)!r}); "
          "small = sd['small'].to('CPU').tolist(); "
          # anonymous memory is what a copy would cost; file-backed pages of the mapping are the kernel's to keep
          "rss = int([l for l in open('/proc/self/status') if l.startswith('RssAnon')][0].split()[1]); "
          "print(json.dumps([small, sd['big'].shape, rss]))")
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  # a minimal environment: the measurement is about this process only, not about flags other tests set
  env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "ATTOGRAD_CACHE_DIR", "CC")}
  env.update(PYTHONPATH=root, MALLOC_ARENA_MAX="2")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
  assert r.returncode == 0, r.stderr
  small, shape, rss_kb = json.loads(r.stdout)
  assert small == [7, -7] and shape == [n] and rss_kb < 400 * 1024, r.stdout  # far below the file's 1000 MB

def test_disk_copies_to_every_device(tmp_path, device: str) -> None:
  p = tmp_path / "a.safetensors"
  safe_save({"w": Tensor([[1.0, -2.0], [3.5, 4.0]]), "h": Tensor([0.5, 1.5], dtype=dtypes.bfloat16)}, p)
  sd = safe_load(p)
  w, h = sd["w"].to(device), sd["h"].to(device)
  assert w.device == device and (w * 2).tolist() == [[2.0, -4.0], [7.0, 8.0]]
  assert h.float().tolist() == [0.5, 1.5]

def test_disk_runs_no_kernels(tmp_path) -> None:
  p = tmp_path / "a.safetensors"
  safe_save({"w": Tensor([1.0, 2.0])}, p)
  w = safe_load(p)["w"]
  for bad in (lambda: (w + 1).realize(), lambda: Tensor([1.0]).to("DISK").realize()):
    with pytest.raises(RuntimeError, match=r"no kernel runs on DISK\. Move the tensor to a compute device first"): bad()
  assert w.to("CPU").bitcast(dtypes.int32).tolist() == [0x3F800000, 0x40000000]  # views apply after the copy
  # a bitcast is a view of the same bytes, so it reads straight from DISK too
  assert w.bitcast(dtypes.int32).to("CPU").tolist() == [0x3F800000, 0x40000000]

def test_disk_device_name_and_shared_mapping(tmp_path) -> None:
  p = tmp_path / "a.bin"
  p.write_bytes(bytes(range(16)))
  a, b = disk_tensor(p, 0, (4,)), disk_tensor(p, 4, (4,))
  assert a.device == "DISK" and a._buffer()[0]._buf.mapping is b._buffer()[0]._buf.mapping
  assert b.to("CPU").tolist() == [4, 5, 6, 7]

# ***** torch_load *****

try: import torch
except ImportError: torch = None  # type: ignore[assignment]
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (it writes the reference files)")

def _torch_state() -> dict[str, Any]:
  x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
  base = torch.arange(10, dtype=torch.float64)
  sd: dict[str, Any] = OrderedDict()
  unsigned = (torch.uint8, torch.uint16, torch.uint32, torch.uint64)
  for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
            torch.int8, torch.bool) + unsigned:
    vals = torch.arange(6) % 3 == 1 if d is torch.bool else (torch.arange(6) * 7 - (0 if d in unsigned else 20)).to(d)
    sd[f"dt.{str(d)[6:]}"] = vals.reshape(2, 3)
  sd.update({
    "contig": x, "transposed": x.t(), "step": x[:, ::2], "rows_cols": x[1::2, 1:5],
    "permuted": torch.arange(24).reshape(2, 3, 4).permute(2, 0, 1), "expanded": torch.arange(3.0).expand(4, 3),
    "overlap": torch.arange(10.0).unfold(0, 4, 1), "odd_step": torch.arange(10.0).reshape(2, 5)[:, ::2],
    "shared_a": base[:4], "shared_b": base[4:], "shared_all": base, "shared_tail_t": base[:6].reshape(2, 3).t(),
    "scalar": torch.tensor(3.5), "empty": torch.zeros(0, 2), "param": torch.nn.Parameter(torch.ones(2, 2)),
  })
  return sd

def _check_loaded(got: Any, ref: dict[str, Any]) -> None:
  assert list(got) == list(ref)
  for k, r in ref.items():
    v = got[k]
    assert isinstance(v, Tensor), k
    want = r.detach().float().numpy() if r.dtype is torch.bfloat16 else r.detach().numpy()
    g = values(v)
    assert g.shape == want.shape and g.dtype == want.dtype, (k, g.shape, want.shape, g.dtype, want.dtype)
    np.testing.assert_array_equal(g, want, err_msg=k)

@needs_torch
@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_torch_load_state_dict(tmp_path, zip_format: bool) -> None:
  ref = _torch_state()
  torch.save(ref, tmp_path / "sd.pt", _use_new_zipfile_serialization=zip_format)
  got = torch_load(tmp_path / "sd.pt")
  _check_loaded(got, ref)
  # contiguous tensors stay views of the file; strided ones are viewed after a copy
  assert got["contig"].device == "DISK" and got["transposed"].device == Device.DEFAULT

@needs_torch
@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_torch_load_module_checkpoint(tmp_path, zip_format: bool) -> None:
  model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
  ckpt = {"model": model.state_dict(), "epoch": 7, "lrs": [0.1, 0.01], "opt": {"betas": (0.9, 0.99), "ids": {1, 2}}}
  torch.save(ckpt, tmp_path / "ck.pth", _use_new_zipfile_serialization=zip_format)
  got = torch_load(tmp_path / "ck.pth")
  assert got["epoch"] == 7 and got["lrs"] == [0.1, 0.01] and got["opt"] == {"betas": (0.9, 0.99), "ids": {1, 2}}
  assert isinstance(got["model"], OrderedDict) and got["model"]._metadata[""] == {"version": 1}  # type: ignore[attr-defined]
  _check_loaded(got["model"], model.state_dict())

@needs_torch
@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_torch_load_fp8(tmp_path, zip_format: bool) -> None:
  vals = torch.tensor([1.0, -2.5, 448.0, 0.01, -0.0, 3e-3])
  ref = {"e4m3": vals.to(torch.float8_e4m3fn), "e5m2": vals.to(torch.float8_e5m2),
         "e4m3fnuz": vals.to(torch.float8_e4m3fnuz), "e5m2fnuz": vals.to(torch.float8_e5m2fnuz)}  # 448: NaN in e4m3fnuz
  torch.save(ref, tmp_path / "f8.pt", _use_new_zipfile_serialization=zip_format)
  got = torch_load(tmp_path / "f8.pt")
  assert got["e4m3"].dtype is dtypes.fp8e4m3 and got["e5m2"].dtype is dtypes.fp8e5m2
  assert got["e4m3fnuz"].dtype is dtypes.fp8e4m3fnuz and got["e5m2fnuz"].dtype is dtypes.fp8e5m2fnuz
  for k, r in ref.items(): np.testing.assert_array_equal(values(got[k]), r.float().numpy(), err_msg=k)

@needs_torch
def test_torch_load_shared_storage_is_stored_once(tmp_path) -> None:
  base = torch.arange(8, dtype=torch.float32)
  torch.save({"a": base[:3], "b": base[3:], "c": base}, tmp_path / "s.pt")
  with zipfile.ZipFile(tmp_path / "s.pt") as z: assert len([n for n in z.namelist() if "/data/" in n]) == 1
  got = torch_load(tmp_path / "s.pt")
  assert values(got["b"]).tolist() == [3.0, 4.0, 5.0, 6.0, 7.0] and values(got["c"]).shape == (8,)
  assert got["a"]._buffer()[0]._buf.mapping is got["b"]._buffer()[0]._buf.mapping

@needs_torch
def test_torch_load_into_model(tmp_path) -> None:
  lin = torch.nn.Linear(3, 2)
  torch.save(lin.state_dict(), tmp_path / "lin.pt")
  class Linear:
    def __init__(self) -> None: self.weight, self.bias = Tensor.zeros(2, 3).contiguous(), Tensor.zeros(2).contiguous()
  m = Linear()
  load_state_dict(m, torch_load(tmp_path / "lin.pt"))
  np.testing.assert_allclose(m.weight.numpy(), lin.weight.detach().numpy())
  np.testing.assert_allclose(m.bias.numpy(), lin.bias.detach().numpy())

@needs_torch
def test_torch_load_truncated(tmp_path) -> None:
  torch.save({"w": torch.ones(1000)}, tmp_path / "l.pt", _use_new_zipfile_serialization=False)
  p = tmp_path / "l.pt"
  p.write_bytes(p.read_bytes()[:-10])
  with pytest.raises(ValueError, match=r"l\.pt: storage '\d+' \(1000 elements of dtypes.float at byte \d+\) runs"):
    torch_load(p)

def test_torch_load_not_a_torch_file(tmp_path) -> None:
  (tmp_path / "x.pt").write_bytes(b"hello, not a pickle")
  with pytest.raises(ValueError, match=r"x\.pt is not a torch\.save file"): torch_load(tmp_path / "x.pt")
  with zipfile.ZipFile(tmp_path / "z.pt", "w") as z: z.writestr("a/other.txt", "x")
  with pytest.raises(ValueError, match=r"zip file without <archive>/data\.pkl"): torch_load(tmp_path / "z.pt")

# ***** malicious files: every one must fail naming the global, and run nothing *****

class _System:
  def __init__(self, marker: str): self.marker = marker
  def __reduce__(self) -> Any: return (os.system, (f"touch {self.marker}",))

class _Eval:
  def __init__(self, marker: str): self.marker = marker
  def __reduce__(self) -> Any: return (eval, (f"open({self.marker!r}, 'w').close()",))

def _torch_zip(path: Any, pkl: bytes) -> None:
  with zipfile.ZipFile(path, "w") as z:
    z.writestr("archive/data.pkl", pkl)
    z.writestr("archive/byteorder", "little")
    z.writestr("archive/version", "3\n")

def _torch_legacy(pkl: bytes) -> bytes:
  f = io.BytesIO()
  sys_info = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"int": 4}}
  for header in (0x1950A86A20F9469CFC6C, 1001, sys_info):
    pickle.dump(header, f, protocol=2)
  f.write(pkl)
  pickle.dump([], f, protocol=2)
  return f.getvalue()

@pytest.mark.parametrize("payload, glob", [P("os.system", _System, r"(posix|nt)\.system"),
                                           P("eval", _Eval, r"builtins\.eval")])
@pytest.mark.parametrize("container", ["zip", "legacy", "raw_pickle"])
def test_torch_load_refuses_malicious_pickle(tmp_path, payload: type, glob: str, container: str) -> None:
  marker = tmp_path / "pwned"
  pkl = pickle.dumps({"w": payload(str(marker))}, protocol=2)
  p = tmp_path / "evil.pt"
  if container == "zip": _torch_zip(p, pkl)
  else: p.write_bytes(_torch_legacy(pkl) if container == "legacy" else pkl)
  with pytest.raises(pickle.UnpicklingError, match=rf"evil\.pt refers to the global {glob}, which is not allowed"):
    torch_load(p)
  assert not marker.exists()
  pickle.loads(pkl)  # the payload is real: plain pickle runs it
  assert marker.exists()

def _hand_pickle(*ops: bytes) -> bytes: return b"\x80\x02" + b"".join(ops) + b"."

@pytest.mark.parametrize("pkl, msg", [
  # BUILD on an allowed function (to set attributes such as __defaults__ on it) is refused
  P("build_on_function",
    _hand_pickle(b"ctorch._utils\n_rebuild_tensor_v2\n", b"N}X\x0c\x00\x00\x00__defaults__)s\x86b"),
    r"tries to set '__defaults__' on torch\._utils\._rebuild_tensor_v2"),
  P("build_dict_on_function", _hand_pickle(b"ctorch._utils\n_rebuild_tensor_v2\n", b"}X\x03\x00\x00\x00fooK\x01sb"),
    r"data\.pkl is not a valid pickle \(AttributeError: '_Rebuild' object has no attribute '__dict__'\)"),
  # a storage type is data: calling it is refused
  P("call_storage_type", _hand_pickle(b"ctorch\nFloatStorage\n", b")R"),
    r"calls torch\.FloatStorage, which isn't allowed"),
  # a global outside the allow-list, even under torch
  P("torch_other", _hand_pickle(b"ctorch\nload\n", b")R"), r"refers to the global torch\.load, which is not allowed"),
  P("getattr", _hand_pickle(b"cbuiltins\ngetattr\n"), r"refers to the global builtins\.getattr"),
  P("subprocess", _hand_pickle(b"csubprocess\nPopen\n"), r"refers to the global subprocess\.Popen"),
])
def test_torch_load_refuses_crafted_pickles(tmp_path, pkl: bytes, msg: str) -> None:
  _torch_zip(tmp_path / "c.pt", pkl)
  with pytest.raises((pickle.UnpicklingError, ValueError), match=msg): torch_load(tmp_path / "c.pt")

# ***** as_strided *****

@pytest.mark.parametrize("size, stride, offset", [
  ((3, 4), (4, 1), 0), ((4, 3), (1, 4), 0), ((2, 3), (5, 2), 1), ((3,), (0,), 2), ((2, 3, 2), (1, 4, 12), 0),
  ((4, 3), (2, 1), 0), ((5, 2), (1, 1), 3), ((), (), 5), ((2, 1, 2), (3, 7, 1), 0)], ids=str)
def test_as_strided_matches_numpy(size: tuple, stride: tuple, offset: int) -> None:
  base = np.arange(30, dtype=np.int32)
  want = np.lib.stride_tricks.as_strided(base[offset:], size, tuple(s * 4 for s in stride))
  np.testing.assert_array_equal(as_strided(Tensor(base), size, stride, offset).numpy(), want)

# ***** state dicts *****

class _Lin:
  def __init__(self, i: int, o: int):
    self.weight, self.bias = Tensor.zeros(o, i).contiguous(), Tensor.zeros(o).contiguous()

class _Net:
  def __init__(self) -> None:
    self.l1, self.blocks, self.extra = _Lin(2, 3), [_Lin(3, 3), _Lin(3, 1)], {"scale": Tensor.ones(1).contiguous()}
    self.name, self.parent = "net", None

def test_get_state_dict_names() -> None:
  net = _Net()
  net.blocks[0].owner = net  # type: ignore[attr-defined]  # a cycle back to the root is not followed
  assert list(get_state_dict(net)) == ["l1.weight", "l1.bias", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight",
                                       "blocks.1.bias", "extra.scale"]
  assert list(get_state_dict(net, prefix="model.")) == [f"model.{k}" for k in get_state_dict(net)]
  net.tied = net.l1  # type: ignore[attr-defined]  # the same layer under two names: two keys, one parameter
  assert len(get_state_dict(net)) == 9 and len(get_parameters(net)) == 7

def test_load_state_dict_roundtrip_through_safetensors(tmp_path) -> None:
  src, dst = _Net(), _Net()
  for i, t in enumerate(get_parameters(src)): t.assign(Tensor.full(t.shape, float(i)))
  safe_save(get_state_dict(src), tmp_path / "net.safetensors")
  load_state_dict(dst, safe_load(tmp_path / "net.safetensors"))
  for (k, a), b in zip(get_state_dict(src).items(), get_state_dict(dst).values()):
    assert b.device == Device.DEFAULT and b.tolist() == a.tolist(), k

def test_load_state_dict_casts_and_consumes() -> None:
  net = _Net()
  sd = {k: Tensor.full(t.shape, 2, dtype=dtypes.int8) for k, t in get_state_dict(net).items()}
  load_state_dict(net, sd, consume=True)
  assert net.l1.weight.dtype is dtypes.float32 and net.l1.weight.tolist() == [[2.0, 2.0]] * 3 and sd == {}

def test_load_state_dict_strict_errors() -> None:
  net = _Net()
  sd = get_state_dict(_Net())
  del sd["l1.bias"], sd["extra.scale"]
  sd["l9.weight"] = Tensor.zeros(1)
  with pytest.raises(ValueError, match=r"missing 2 key\(s\) the model has: \['l1.bias', 'extra.scale'\]; "
                                       r"and 1 unexpected key\(s\) the model doesn't have: \['l9.weight'\]"):
    load_state_dict(net, sd)
  del sd["l9.weight"]
  load_state_dict(net, sd, strict=False)  # loads what matches

def test_load_state_dict_returns_the_loaded_tensors_and_takes_scalars_as_one_element() -> None:
  # tinygrad returns the model's loaded tensors, and lets () and (1,) stand for each other
  class Scalars:
    def __init__(self) -> None: self.a, self.b, self.c = Tensor(0.0), Tensor([0.0]), Tensor([0.0, 0.0])
  m = Scalars()
  got = load_state_dict(m, {"a": Tensor([3.0]), "b": Tensor(4.0), "c": Tensor([5.0, 6.0])})
  assert [t is u for t, u in zip(got, (m.a, m.b, m.c))] == [True] * 3 and len(got) == 3
  assert (m.a.shape, m.a.item(), m.b.shape, m.b.tolist(), m.c.tolist()) == ((), 3.0, (1,), [4.0], [5.0, 6.0])
  assert load_state_dict(m, {"c": Tensor([1.0, 1.0])}, strict=False) == [m.c]
  with pytest.raises(ValueError, match=r"layer `c`: Expected shape \(2,\), but found \(\) in state dict"):
    load_state_dict(m, {"a": Tensor(1.0), "b": Tensor(1.0), "c": Tensor(1.0)})

def test_accept_filename(tmp_path) -> None:
  from attograd.nn.state import accept_filename
  @accept_filename
  def first_bytes(t: Tensor) -> bytes: return bytes(t.to(Device.DEFAULT).data()[:3])
  (p := tmp_path / "f.bin").write_bytes(b"abcdef")
  assert first_bytes(p) == first_bytes(str(p)) == first_bytes(Tensor(b"abcdef")) == b"abc"
  assert first_bytes.__name__ == "first_bytes"

def test_load_state_dict_shape_mismatch() -> None:
  sd = get_state_dict(_Net())
  sd["blocks.1.weight"] = Tensor.zeros(3, 1)
  with pytest.raises(ValueError, match=r"layer `blocks.1.weight`: Expected shape \(1, 3\), but found \(3, 1\)"):
    load_state_dict(_Net(), sd, strict=False)

def test_load_state_dict_into_sharded_parameters() -> None:
  # each parameter keeps its layout: split along its axis, or whole copies; to() would have copied every value whole
  class M:
    def __init__(self) -> None: self.w, self.b = Tensor.zeros(4, 3).contiguous(), Tensor.zeros(3).contiguous()
  devs = ("CPU:1", "CPU:2")
  m = M()
  m.w.shard_(devs, 0)
  m.b.shard_(devs, None)
  w, b = np.arange(12, dtype=np.float32).reshape(4, 3), np.array([1.0, 2.0, 3.0], np.float32)
  load_state_dict(m, {"w": Tensor(w), "b": Tensor(b)})
  assert m.w.device == devs and m.w.uop.axis == 0 and m.b.uop.axis is None and Tensor(1.0).uop.axis is None
  np.testing.assert_array_equal(m.w.numpy(), w)
  np.testing.assert_array_equal(m.b.numpy(), b)
