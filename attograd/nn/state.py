"""Weights in and out: safetensors files, PyTorch .pt/.pth files (read without torch and without running anything from
the file), and state dicts (a model's Tensors by dotted name). Loaded tensors are DISK views of the file until moved."""
from __future__ import annotations
import _compat_pickle, functools, importlib, io, json, os, pickle, struct, time, zipfile
from collections import OrderedDict
from typing import Any, BinaryIO, Callable, Iterable
from attograd.device import Device
from attograd.dtype import DType, dtypes, strong_dtype
from attograd.helpers import prod
from attograd.tensor import Tensor
from attograd.runtime.ops_disk import DiskMapping
import attograd.nn.tinyfs as tinyfs
from attograd.nn.disk import PathLike, disk_device, disk_tensor, disk_view, mapping_of  # noqa: F401  (disk_tensor: public)

def _short(keys: list[str], n: int = 10) -> str:
  return str(keys[:n])[:-1] + (f", ... and {len(keys) - n} more]" if len(keys) > n else "]")

# ***** DISK tensors *****

def accept_filename(fn: Callable[[Tensor], Any]) -> Callable[[Tensor | PathLike], Any]:
  """Let a function of a uint8 Tensor (a file's bytes) take a path too, as a DISK tensor of the file (tinygrad's
  decorator for its loaders)."""
  @functools.wraps(fn)
  def wrapper(src: Tensor | PathLike) -> Any: return fn(src if isinstance(src, Tensor) else disk_tensor(src))
  return wrapper

# ***** archives: a file object over a Tensor, tar and zip members as views *****

class TensorIO(io.RawIOBase, BinaryIO):
  """A read-only, seekable binary file over the bytes of a 1-D uint8 Tensor, for the stdlib's archive readers.
  A DISK tensor is read straight from its mapped file; a tensor on a compute device is copied to host memory once, on
  the first read (a slice per read would run a kernel per read). Seeks are clamped to [0, len(t)], as in tinygrad.

  >>> f = TensorIO(Tensor(b"Hello World!"))
  >>> f.read(5), f.seek(-6, 2), f.read()
  (b'Hello', 6, b'World!')
  """
  def __init__(self, t: Tensor):
    if not isinstance(t, Tensor) or t.ndim != 1 or t.dtype is not dtypes.uint8:
      raise ValueError(f"TensorIO: need a 1-D uint8 Tensor, got {t!r:.120}")
    self._tensor, self._position, self._size = t, 0, t.shape[0]
    if not isinstance(self._size, int): raise ValueError(f"TensorIO: need a concrete length, got {t.shape}")
    self._host: memoryview | None = None
  def _bytes(self) -> memoryview:
    if self._host is None:
      if (v := disk_view(self._tensor)) is not None: self._host = v[0].read(v[1], self._size)
      else: self._host = self._tensor.data().cast("B") if self._size else memoryview(b"")
    return self._host
  def readable(self) -> bool: return True
  def seekable(self) -> bool: return True
  def _check_open(self, op: str) -> None:
    if self.closed: raise ValueError(f"TensorIO.{op}: the TensorIO is closed")
  def readinto(self, buffer: Any) -> int:
    self._check_open("read")
    dest = memoryview(buffer).cast("B")
    n = max(0, min(dest.nbytes, self._size - self._position))
    dest[:n] = self._bytes()[self._position:self._position + n]
    self._position += n
    return n
  def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
    self._check_open("seek")
    if whence not in (io.SEEK_SET, io.SEEK_CUR, io.SEEK_END): raise ValueError(f"TensorIO.seek: bad whence {whence}")
    base = (0, self._position, self._size)[whence]
    self._position = min(self._size, max(0, base + offset))
    return self._position
  def tell(self) -> int: return self._position
  # BinaryIO's writing half: this file is read-only
  def writable(self) -> bool: return False
  def write(self, s: Any) -> int: raise io.UnsupportedOperation("TensorIO.write: a TensorIO is read-only")
  def writelines(self, lines: Iterable[Any]) -> None:
    raise io.UnsupportedOperation("TensorIO.writelines: a TensorIO is read-only")
  def __enter__(self) -> TensorIO: return self

class _Archive:
  """The bytes of an archive given as a path or a 1-D uint8 Tensor: a file object to parse them with, and member
  views that share the archive's memory (DISK views of a file, lazy slices of a compute tensor)."""
  def __init__(self, src: PathLike | Tensor, op: str):
    if isinstance(src, Tensor):
      if src.dtype is not dtypes.uint8 or src.ndim != 1: raise TypeError(f"{op}: need a 1-D uint8 Tensor, got {src}")
      self.t, self.name = src, f"<{src.numel()}-byte Tensor on {src.device}>"
    elif isinstance(src, (str, os.PathLike)):
      self.t, self.name = disk_tensor(src), os.fspath(src)
    else: raise TypeError(f"{op}: need a path or a 1-D uint8 Tensor, got {type(src).__name__}")
    self.size, self.disk = self.t.numel(), disk_view(self.t)
  def file(self) -> TensorIO: return TensorIO(self.t)
  def view(self, begin: int, size: int) -> Tensor:
    assert 0 <= begin and 0 <= size and begin + size <= self.size, "callers check the range against the archive"
    if self.disk is not None: return disk_tensor(self.disk[0], self.disk[1] + begin, (size,))
    return self.t[begin:begin + size]

# the magic numbers of the compressions tarfile reads, and the stdlib module that undoes each
_TAR_COMPRESSIONS = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "lzma"))

def tar_extract(fn: Tensor | PathLike) -> dict[str, Tensor]:
  """The regular files of a tar archive (ustar, GNU or pax; a path or its bytes as a 1-D uint8 Tensor), by member name,
  as views of the archive's bytes: nothing is copied. Directories, links and devices are left out. A gzip, bzip2 or xz
  compressed archive is decompressed once, and the views are of the decompressed bytes. A malformed or truncated
  archive raises tarfile.ReadError naming it.

  >>> import io, tarfile; buf = io.BytesIO(); info = tarfile.TarInfo("a.txt"); info.size = 2
  >>> with tarfile.open(fileobj=buf, mode="w") as tar: tar.addfile(info, io.BytesIO(b"hi"))
  >>> bytes(tar_extract(Tensor(buf.getvalue()))["a.txt"].data())
  b'hi'
  """
  import tarfile
  ar = _Archive(fn, "tar_extract")
  head = bytes(ar.file().read(6))
  for magic, module in _TAR_COMPRESSIONS:
    if head.startswith(magic):
      try: raw = importlib.import_module(module).decompress(bytes(ar.file().read()))
      except Exception as e:  # each module has its own error class; all mean the stream is broken
        raise tarfile.ReadError(f"tar_extract: {ar.name}: can't decompress its {module} stream "
                                f"({type(e).__name__}: {e})") from None
      return tar_extract(disk_tensor(raw) if ar.disk is not None else Tensor(raw, device=ar.t.device))
  out: dict[str, Tensor] = {}
  try:
    with tarfile.open(fileobj=ar.file(), mode="r:") as tar:
      for m in tar:
        if not m.isreg(): continue
        if m.issparse():
          raise tarfile.ReadError(f"tar_extract: {ar.name}: member {m.name!r} is a sparse file, whose bytes aren't "
                                  "stored in one piece, so it can't be a view; extract it with the tarfile module")
        if m.size < 0 or m.offset_data + m.size > ar.size:
          raise tarfile.ReadError(f"tar_extract: {ar.name}: member {m.name!r} ({m.size} bytes at byte {m.offset_data}) "
                                  f"runs past the end of the archive ({ar.size} bytes); the archive is truncated")
        out[m.name] = ar.view(m.offset_data, m.size)
  except tarfile.TarError as e:
    if str(e).startswith("tar_extract: "): raise
    raise tarfile.ReadError(f"tar_extract: {ar.name} is not a valid tar archive ({e})") from None
  return out

def zip_extract(fn: Tensor | PathLike) -> dict[str, Tensor]:
  """The files of a zip archive (a path or its bytes as a 1-D uint8 Tensor), by name. Stored (uncompressed) members
  are views of the archive's bytes; compressed ones (deflate, bzip2, lzma) are decompressed, their CRC checked, into
  new Tensors on the archive's device. Directories are left out. A malformed archive raises zipfile.BadZipFile naming
  it.

  >>> import io, zipfile; buf = io.BytesIO()
  >>> with zipfile.ZipFile(buf, "w") as z: z.writestr("a.txt", b"hi")
  >>> bytes(zip_extract(Tensor(buf.getvalue()))["a.txt"].data())
  b'hi'
  """
  ar = _Archive(fn, "zip_extract")
  out: dict[str, Tensor] = {}
  def bad(why: str) -> zipfile.BadZipFile: return zipfile.BadZipFile(f"zip_extract: {ar.name}: {why}")
  f = ar.file()
  # the parser and the decompressors each raise their own error classes (zipfile for an unsupported version,
  # lzma.LZMAError, zlib.error, ...): from untrusted bytes, any of them means a malformed archive
  try: zf = zipfile.ZipFile(f)
  except Exception as e: raise bad(f"not a valid zip archive ({type(e).__name__}: {e})") from None
  with zf:
    for zi in zf.infolist():
      if zi.is_dir(): continue
      if zi.flag_bits & 0x1: raise bad(f"member {zi.filename!r} is encrypted, which isn't supported")
      if zi.compress_type != zipfile.ZIP_STORED:
        try: data = zf.read(zi)
        except Exception as e:
          raise bad(f"can't read member {zi.filename!r} ({type(e).__name__}: {e})") from None
        out[zi.filename] = disk_tensor(data) if ar.disk is not None else Tensor(data, device=ar.t.device)
        continue
      # a stored member's bytes follow its local header, whose extra field may differ in length from the central
      # directory's copy, so the local header is read for where the data starts
      if zi.header_offset < 0 or zi.header_offset + 30 > ar.size:
        raise bad(f"member {zi.filename!r} has its local header at byte {zi.header_offset}, outside the archive "
                  f"({ar.size} bytes)")
      f.seek(zi.header_offset)
      hdr = f.read(30)
      if hdr[:4] != b"PK\x03\x04": raise bad(f"member {zi.filename!r} has no local header at byte {zi.header_offset}")
      name_len, extra_len = struct.unpack("<HH", hdr[26:30])
      start = zi.header_offset + 30 + name_len + extra_len
      if zi.compress_size != zi.file_size:
        raise bad(f"stored member {zi.filename!r} has {zi.compress_size} stored bytes but a size of {zi.file_size}")
      if start + zi.file_size > ar.size:
        raise bad(f"member {zi.filename!r} ({zi.file_size} bytes at byte {start}) runs past the end of the archive "
                  f"({ar.size} bytes); the archive is truncated")
      out[zi.filename] = ar.view(start, zi.file_size)
  return out

# ***** safetensors *****

# the file format's dtype names; the order (widest first) is the order the `safetensors` package writes tensors in
safe_dtypes: dict[str, DType] = {
  "U64": dtypes.uint64, "I64": dtypes.int64, "F64": dtypes.float64, "F32": dtypes.float32, "U32": dtypes.uint32,
  "I32": dtypes.int32, "BF16": dtypes.bfloat16, "F16": dtypes.float16, "U16": dtypes.uint16, "I16": dtypes.int16,
  "F8_E5M2FNUZ": dtypes.fp8e5m2fnuz, "F8_E4M3FNUZ": dtypes.fp8e4m3fnuz, "F8_E4M3": dtypes.fp8e4m3,
  "F8_E5M2": dtypes.fp8e5m2, "I8": dtypes.int8, "U8": dtypes.uint8, "BOOL": dtypes.bool}
inverse_safe_dtypes: dict[DType, str] = {v: k for k, v in safe_dtypes.items()}
_SAFE_RANK = {d: i for i, d in enumerate(safe_dtypes.values())}

def _safe_header(mapping: DiskMapping, start: int, size: int) -> tuple[dict[str, Any], int]:
  """The validated JSON header and where the data section starts. Every offset is checked against the file."""
  name = mapping.path
  if size < 8: raise ValueError(f"safe_load: {name}: the file is {size} bytes, too short for the 8-byte header length")
  n = struct.unpack("<Q", mapping.read(start, 8))[0]
  if 8 + n > size:
    raise ValueError(f"safe_load: {name}: the header length {n} runs past the end of the file ({size} bytes); "
                     "the file is truncated or not a safetensors file")
  try: header = json.loads(bytes(mapping.read(start + 8, n)).decode("utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as err:
    raise ValueError(f"safe_load: {name}: the header is not valid JSON: {err}") from None
  if not isinstance(header, dict):
    raise ValueError(f"safe_load: {name}: the header must be a JSON object, got {type(header).__name__}")
  if not isinstance(header.get("__metadata__", {}), dict):
    raise ValueError(f"safe_load: {name}: __metadata__ must be a JSON object, got {header['__metadata__']!r:.80}")
  data_len = size - 8 - n
  spans: list[tuple[int, int, str]] = []
  for k, info in header.items():
    if k == "__metadata__": continue
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
      raise ValueError(f"safe_load: {name}: tensor {k!r} needs dtype, shape and data_offsets, got {info!r:.120}")
    dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
    if dt not in safe_dtypes:
      raise ValueError(f"safe_load: {name}: tensor {k!r} has unknown dtype {dt!r}; known: {list(safe_dtypes)}")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
      raise ValueError(f"safe_load: {name}: tensor {k!r} has a bad shape {shape!r}; need a list of non-negative ints")
    if not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs):
      raise ValueError(f"safe_load: {name}: tensor {k!r} has bad data_offsets {offs!r}; need [begin, end]")
    b, e = offs
    if not 0 <= b <= e <= data_len:
      raise ValueError(f"safe_load: {name}: tensor {k!r} has data_offsets [{b}, {e}] outside the data section of "
                       f"{data_len} bytes" + (" (the file may be truncated)" if e > data_len else ""))
    want = prod(shape) * safe_dtypes[dt].itemsize
    if e - b != want:
      raise ValueError(f"safe_load: {name}: tensor {k!r} has {e - b} bytes (data_offsets [{b}, {e}]) but shape {shape} "
                       f"of {dt} needs {want}")
    if e > b: spans.append((b, e, k))
  spans.sort()
  for (b0, e0, k0), (b1, e1, k1) in zip(spans, spans[1:]):
    if b1 < e0: raise ValueError(f"safe_load: {name}: tensors {k0!r} [{b0}, {e0}] and {k1!r} [{b1}, {e1}] overlap")
  return header, start + 8 + n

def safe_load_metadata(fn: PathLike | Tensor) -> tuple[Tensor, int, dict[str, Any]]:
  """(the file as a uint8 DISK tensor, where the data starts, the JSON header), as in tinygrad.
  The header maps tensor names to {dtype, shape, data_offsets}; user metadata is under "__metadata__"."""
  mapping, start, size = mapping_of(fn, "safe_load_metadata")
  header, data_start = _safe_header(mapping, start, size)
  return disk_tensor(mapping, start, (size,)), data_start - start, header

def safe_load(fn: PathLike | Tensor) -> dict[str, Tensor]:
  """The tensors of a .safetensors file (a path, or its bytes as a uint8 Tensor), by name, in file order.
  They are DISK views of the file: nothing is read until `.to(device)`, `.numpy()` or `load_state_dict`.

  >>> import tempfile; p = tempfile.mktemp()
  >>> safe_save({"w": Tensor([[1.0, 2.0]])}, p)
  >>> safe_load(p)["w"].to("CPU").tolist()
  [[1.0, 2.0]]
  """
  mapping, start, size = mapping_of(fn, "safe_load")
  header, data_start = _safe_header(mapping, start, size)
  out: dict[str, Tensor] = {}
  for k, info in header.items():
    if k == "__metadata__": continue
    begin = data_start + info["data_offsets"][0]
    out[k] = disk_tensor(mapping, begin, tuple(info["shape"]), safe_dtypes[info["dtype"]])
  return out

def safe_save(tensors: dict[str, Tensor], fn: PathLike, metadata: dict[str, str] | None = None) -> None:
  """Write `tensors` to a .safetensors file, byte for byte as the `safetensors` package writes it (tensors widest dtype
  first, then by name; header padded with spaces to 8 bytes). Metadata keys are sorted; the package writes them in hash
  order, which varies between runs, so only there can its files differ. The file is replaced atomically, so tensors
  still mapped from an old version of it stay valid."""
  for k, t in tensors.items():
    if not isinstance(k, str): raise TypeError(f"safe_save: tensor names must be strings, got {k!r}")
    if not isinstance(t, Tensor): raise TypeError(f"safe_save: {k!r} is a {type(t).__name__}, not a Tensor")
  # a weak tensor (Tensor(2.5)) is saved as what it holds, its default dtype (tinygrad refuses it)
  tensors = {k: t.cast(strong_dtype(t.dtype)) if t.dtype in dtypes.weaks else t for k, t in tensors.items()}
  for k, t in tensors.items():
    if t.dtype not in inverse_safe_dtypes:
      raise ValueError(f"safe_save: {k!r} has dtype {t.dtype}, which safetensors can't store")
  header: dict[str, Any] = {}
  if metadata is not None:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
      raise TypeError(f"safe_save: metadata must map strings to strings (as the safetensors format requires), "
                      f"got {metadata!r:.120}")
    header["__metadata__"] = dict(sorted(metadata.items()))
  order = sorted(tensors.items(), key=lambda kv: (_SAFE_RANK[kv[1].dtype], kv[0]))
  offset = 0
  for k, t in order:
    header[k] = {"dtype": inverse_safe_dtypes[t.dtype], "shape": list(t.shape),
                 "data_offsets": [offset, offset + t.nbytes()]}
    offset += t.nbytes()
  j = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
  j += b" " * ((8 - len(j) % 8) % 8)
  _write_atomic(fn, [struct.pack("<Q", len(j)), j] + [t.data() for _, t in order])

def _write_atomic(fn: PathLike, chunks: list[Any]) -> None:
  path = os.fspath(fn)
  tmp = f"{path}.tmp{os.getpid()}"
  try:
    with open(tmp, "wb") as f:
      for c in chunks:
        if c.nbytes if isinstance(c, memoryview) else len(c): f.write(c)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp): os.unlink(tmp)

# ***** state dicts *****

# ***** tinyfs (nn/tinyfs.py): tinygrad's content-addressed store *****

def fs_store(t: Tensor) -> Tensor:
  """Store t's bytes in tinyfs, the content-addressed store at TINYFS_ENDPOINT (host:port): the 16-byte hash that names
  them, a uint8 Tensor on t's device (CPU for a DISK tensor). Equal bytes give equal hashes. The bytes are read and
  sent now (tinygrad runs the store as a copy to its TINYFS device at the realize)."""
  raw = bytes(t.contiguous().flatten().bitcast(dtypes.uint8).data()) if t.numel() else b""
  dev = "CPU" if str(t.device).startswith("DISK") else t.device
  return Tensor(list(tinyfs.store(raw)), dtype=dtypes.uint8, device=dev)

def fs_load(t: Tensor, size: int) -> Tensor:
  """The first `size` bytes of what fs_store stored under the hash `t` (16 uint8 values), as a uint8 Tensor on t's
  device."""
  if t.dtype != dtypes.uint8 or t.numel() != 16:
    raise ValueError(f"fs_load: needs a tinyfs hash, 16 uint8 values; got {t.dtype} of shape {t.shape}")
  data = tinyfs.load(bytes(t.flatten().tolist()), size)
  return Tensor(data, device=t.device) if data else Tensor.empty(0, dtype=dtypes.uint8, device=t.device)

def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """Every Tensor reachable from `obj` through attributes, lists, tuples and dicts, by dotted name.

  >>> class Net:
  ...   def __init__(self): self.l1, self.blocks = Tensor.zeros(2), [Tensor.zeros(3)]
  >>> list(get_state_dict(Net()))
  ['l1', 'blocks.0']
  """
  out: dict[str, Tensor] = {}
  _collect(obj, prefix, tensor_type, out, set())
  return out

def _collect(obj: Any, prefix: str, tensor_type: type, out: dict[str, Any], path: set[int]) -> None:
  if isinstance(obj, tensor_type):
    out[prefix.strip(".")] = obj
    return
  if id(obj) in path: return  # a cycle (a child pointing at its parent): each object once per path
  if hasattr(obj, "_asdict"): items: Any = obj._asdict().items()  # namedtuples by field name
  elif isinstance(obj, (list, tuple)): items = enumerate(obj)
  elif isinstance(obj, dict): items = obj.items()
  elif hasattr(obj, "__dict__"): items = vars(obj).items()
  else: return
  path.add(id(obj))
  for k, v in list(items): _collect(v, f"{prefix}{k}.", tensor_type, out, path)
  path.discard(id(obj))

def get_parameters(obj: Any) -> list[Tensor]:
  """The Tensors of `obj` (see get_state_dict), each once even when reachable by several names."""
  return list({id(t): t for t in get_state_dict(obj).values()}.values())

def load_state_dict(model: Any, state_dict: dict[str, Any], strict: bool = True, verbose: bool = False,
                    consume: bool = False, realize: bool = True) -> list[Tensor]:
  """Copy `state_dict`'s tensors into `model`'s, by dotted name, moved to each parameter's device and cast to its dtype;
  returns the model's tensors that were loaded (as tinygrad does). strict=True refuses missing and unexpected keys; a
  shape mismatch is an error, except () against (1,), which tinygrad lets through as a reshape. consume=True deletes
  each entry from `state_dict` once loaded, so its memory can go."""
  model_sd = get_state_dict(model)
  missing = [k for k in model_sd if k not in state_dict]
  unexpected = [k for k in state_dict if k not in model_sd]
  if strict and (missing or unexpected):
    why = []
    if missing: why.append(f"missing {len(missing)} key(s) the model has: {_short(missing)}")
    if unexpected: why.append(f"{len(unexpected)} unexpected key(s) the model doesn't have: {_short(unexpected)}")
    raise ValueError(f"load_state_dict: the state dict is {'; and '.join(why)} "
                     "(strict=False loads only the keys in both)")
  st, nbytes, loaded = time.perf_counter(), 0, []
  for k, p in model_sd.items():
    if k not in state_dict: continue
    v: Any = state_dict[k]
    if not isinstance(v, Tensor): v = Tensor(v, device=p.device)
    if {v.shape, p.shape} == {(), (1,)}: v = v.reshape(p.shape)  # a scalar saved as one element, or the reverse
    if v.shape != p.shape:
      raise ValueError(f"load_state_dict: Shape mismatch in layer `{k}`: Expected shape {p.shape}, but found "
                       f"{v.shape} in state dict.")  # tinygrad's words: code catching this error matches them
    if v.device != p.device:
      # a sharded parameter takes the value split as it is split (to() would copy it whole to every device)
      if p.device.__class__ is tuple and v.device.__class__ is not tuple: v = v.shard(p.device, p.uop.axis)
      else: v = v.to(p.device)
    p.assign(v.cast(p.dtype) if v.dtype != p.dtype else v)
    if realize: p.realize()
    nbytes += p.nbytes()
    loaded.append(p)
    if consume: del state_dict[k]
  if verbose:
    print(f"load_state_dict: loaded {len(model_sd) - len(missing)} tensors ({nbytes / 1e6:.2f} MB) "
          f"in {time.perf_counter() - st:.2f} s" + (f"; not in the state dict: {_short(missing)}" if missing else "")
          + (f"; unused: {_short(unexpected)}" if unexpected else ""))
  return loaded

# ***** PyTorch .pt / .pth *****
# torch.save pickles the object with every tensor storage replaced by a persistent id; the storages' bytes are stored
# apart (zip format: one zip entry per storage; legacy format: after the pickle). A pickle can name any Python global,
# and unpickling calls what it names, so the unpickler below resolves names only from an allow-list, to our stand-ins.

_TORCH_STORAGES = {
  "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
  "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
  "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
  "Float8_e4m3fnStorage": dtypes.fp8e4m3, "Float8_e5m2Storage": dtypes.fp8e5m2,
  "Float8_e4m3fnuzStorage": dtypes.fp8e4m3fnuz, "Float8_e5m2fnuzStorage": dtypes.fp8e5m2fnuz}
_TORCH_DTYPES = {
  "float32": dtypes.float32, "float": dtypes.float32, "float64": dtypes.float64, "double": dtypes.float64,
  "float16": dtypes.float16, "half": dtypes.float16, "bfloat16": dtypes.bfloat16, "int64": dtypes.int64,
  "long": dtypes.int64, "int32": dtypes.int32, "int": dtypes.int32, "int16": dtypes.int16, "short": dtypes.int16,
  "int8": dtypes.int8, "uint8": dtypes.uint8, "bool": dtypes.bool, "uint16": dtypes.uint16, "uint32": dtypes.uint32,
  "uint64": dtypes.uint64, "float8_e4m3fn": dtypes.fp8e4m3, "float8_e5m2": dtypes.fp8e5m2,
  "float8_e4m3fnuz": dtypes.fp8e4m3fnuz, "float8_e5m2fnuz": dtypes.fp8e5m2fnuz}
_LEGACY_MAGIC, _LEGACY_PROTOCOL = 0x1950A86A20F9469CFC6C, 1001

class _Frozen:
  """What the unpickler hands out: slotted (no __dict__) and read-only, so a pickle's BUILD opcode (which sets
  attributes or calls __setstate__) can't change it. (A frozen slotted dataclass won't do: it has a __setstate__.)"""
  __slots__: tuple[str, ...] = ()
  def __init__(self, *args: Any) -> None:
    for k, v in zip(self.__slots__, args): object.__setattr__(self, k, v)
  def __setattr__(self, k: str, v: Any) -> None:
    raise pickle.UnpicklingError(f"torch_load: the file tries to set {k!r} on {self!r}")

class _Marker(_Frozen):
  """An allow-listed torch name that is data (a storage type, a dtype, a tensor class): it can't be called."""
  __slots__ = ("name", "dtype")
  name: str
  dtype: DType | None
  def __call__(self, *args: Any, **kw: Any) -> Any:
    raise pickle.UnpicklingError(f"torch_load: the file calls {self.name}, which isn't allowed")
  def __repr__(self) -> str: return self.name

class _Rebuild(_Frozen):
  """An allow-listed torch function, replaced by our own code that only records what to build."""
  __slots__ = ("name", "fn")
  name: str
  fn: Callable[..., Any]
  def __call__(self, *args: Any) -> Any: return self.fn(*args)
  def __repr__(self) -> str: return self.name

class _StorageRef(_Frozen):
  """A storage named by a persistent id: `numel` elements of `dtype`, `offset` elements into the bytes of `key`."""
  __slots__ = ("key", "dtype", "numel", "offset")
  key: str
  dtype: DType
  numel: int
  offset: int
  def __repr__(self) -> str: return f"<storage {self.key!r} of {self.numel} {self.dtype}>"

class _TensorRef(_Frozen):
  """A tensor to build once the storages' places in the file are known."""
  __slots__ = ("storage", "offset", "size", "stride", "dtype")
  storage: _StorageRef
  offset: int
  size: tuple[int, ...]
  stride: tuple[int, ...]
  dtype: DType
  def __repr__(self) -> str: return f"<tensor {self.size} {self.dtype}>"

def _check_ints(what: str, xs: Any) -> tuple[int, ...]:
  if not isinstance(xs, (tuple, list)) or not all(type(x) is int and x >= 0 for x in xs):
    raise pickle.UnpicklingError(f"torch_load: bad tensor {what} {xs!r:.80}; need a tuple of non-negative ints")
  return tuple(xs)

def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, dtype: DType | None = None) -> _TensorRef:
  if not isinstance(storage, _StorageRef):
    raise pickle.UnpicklingError(f"torch_load: a tensor's storage is {storage!r:.80}, not a storage")
  if type(offset) is not int or offset < 0:
    raise pickle.UnpicklingError(f"torch_load: bad storage offset {offset!r:.80}")
  size, stride = _check_ints("size", size), _check_ints("stride", stride)
  if len(size) != len(stride):
    raise pickle.UnpicklingError(f"torch_load: tensor size {size} and stride {stride} differ in length")
  return _TensorRef(storage, offset, size, stride, dtype or storage.dtype)

def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> _TensorRef:
  return _rebuild_tensor(storage, offset, size, stride)
def _rebuild_tensor_v3(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any, hooks: Any, dtype: Any,
                       *rest: Any) -> _TensorRef:
  # dtypes without a typed storage class (uint16/32/64): a byte storage plus the dtype
  if not isinstance(dtype, _Marker) or dtype.dtype is None:
    raise pickle.UnpicklingError(f"torch_load: {dtype!r:.80} is not a dtype")
  return _rebuild_tensor(storage, offset, size, stride, dtype.dtype)
def _rebuild_parameter(data: Any, *rest: Any) -> Any:
  if not isinstance(data, _TensorRef):
    raise pickle.UnpicklingError(f"torch_load: a Parameter's data is {data!r:.80}, not a tensor")
  return data
def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any) -> Any:
  # how torch pickles a tensor with Python attributes: func(*args) builds it, then the attributes are set (we drop them)
  if not isinstance(func, _Rebuild) or not isinstance(args, tuple):
    raise pickle.UnpicklingError(f"torch_load: bad tensor rebuild {func!r:.80}")
  return func(*args)

_SAFE_BUILTINS: dict[str, Any] = {"set": set, "frozenset": frozenset, "slice": slice}

def _allowed_global(module: str, name: str) -> Any:
  """The stand-in for an allow-listed global, or None."""
  if module == "collections" and name == "OrderedDict": return OrderedDict
  if module == "builtins" and name in _SAFE_BUILTINS: return _SAFE_BUILTINS[name]
  if module == "torch._utils":
    fns = {"_rebuild_tensor_v2": _rebuild_tensor_v2, "_rebuild_tensor_v3": _rebuild_tensor_v3,
           "_rebuild_parameter": _rebuild_parameter, "_rebuild_parameter_with_state": _rebuild_parameter}
    if name in fns: return _Rebuild(f"{module}.{name}", fns[name])
  if module == "torch._tensor" and name == "_rebuild_from_type_v2":
    return _Rebuild(f"{module}.{name}", _rebuild_from_type_v2)
  if module == "torch" and name in _TORCH_STORAGES: return _Marker(f"torch.{name}", _TORCH_STORAGES[name])
  if module == "torch" and name in _TORCH_DTYPES: return _Marker(f"torch.{name}", _TORCH_DTYPES[name])
  if module == "torch" and name == "Size": return tuple
  if (module, name) in (("torch.storage", "UntypedStorage"), ("torch", "UntypedStorage")):
    return _Marker(f"{module}.{name}", dtypes.uint8)
  if (module, name) in (("torch.storage", "TypedStorage"), ("torch", "Tensor"), ("torch._tensor", "Tensor"),
                        ("torch.nn.parameter", "Parameter")): return _Marker(f"{module}.{name}", None)
  return None

class _TorchUnpickler(pickle.Unpickler):
  """Resolves globals only from the allow-list; storages become _StorageRefs, tensors _TensorRefs."""
  def __init__(self, f: Any, path: str, storages: dict[str, _StorageRef]):
    super().__init__(f)
    self.path, self.storages = path, storages
  def find_class(self, module: str, name: str) -> Any:
    # protocol 0-2 pickles name Python 2 modules (__builtin__.set); map them as pickle itself would
    if (module, name) in _compat_pickle.NAME_MAPPING: module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    else: module = _compat_pickle.IMPORT_MAPPING.get(module, module)
    if (obj := _allowed_global(module, name)) is not None: return obj
    raise pickle.UnpicklingError(f"torch_load: {self.path} refers to the global {module}.{name}, which is not allowed: "
                                 "only torch's tensor-rebuilding functions, storage types and dtypes (and "
                                 "collections.OrderedDict, set, frozenset, slice) can be loaded. "
                                 "Nothing from the file was run.")
  def persistent_load(self, pid: Any) -> Any:
    if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
      raise pickle.UnpicklingError(f"torch_load: {self.path}: unknown persistent id {pid!r:.80}")
    stype, key, numel = pid[1], pid[2], pid[4]
    if not isinstance(stype, _Marker) or stype.dtype is None:
      raise pickle.UnpicklingError(f"torch_load: {self.path}: storage type {stype!r:.80} is not supported; "
                                   f"supported: {sorted(_TORCH_STORAGES)} and UntypedStorage")
    if not isinstance(key, str) or type(numel) is not int or numel < 0:
      raise pickle.UnpicklingError(f"torch_load: {self.path}: bad storage id {pid!r:.120}")
    if (s := self.storages.get(key)) is None: s = self.storages[key] = _StorageRef(key, stype.dtype, numel, 0)
    view = pid[5] if len(pid) > 5 else None
    if view is not None:  # very old files: a storage view (view key, element offset, size) into the root storage
      if not (isinstance(view, tuple) and len(view) == 3 and all(type(v) is int and v >= 0 for v in view[1:])):
        raise pickle.UnpicklingError(f"torch_load: {self.path}: bad storage view {view!r:.80}")
      return _StorageRef(key, stype.dtype, view[2], view[1])
    return s

def _unpickle(f: Any, path: str, storages: dict[str, _StorageRef], what: str) -> Any:
  """One pickle from `f`, through the allow-list. A refused name is an UnpicklingError; a broken pickle a ValueError."""
  try: return _TorchUnpickler(f, path, storages).load()
  except pickle.UnpicklingError as e:
    if path in str(e): raise
    if str(e).startswith("torch_load: "): raise pickle.UnpicklingError(f"torch_load: {path}: {str(e)[12:]}") from None
    raise ValueError(f"torch_load: {path}: its {what} is not a valid pickle ({e})") from None
  except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, MemoryError, RecursionError) as e:
    raise ValueError(f"torch_load: {path}: its {what} is not a valid pickle ({type(e).__name__}: {e})") from None

def torch_load(fn: PathLike | Tensor) -> Any:
  """Read a file written by `torch.save` (zip or legacy format; a path, or its bytes as a 1-D uint8 Tensor, as in
  tinygrad) without importing torch and without running anything from it: only an allow-list of torch's
  tensor-rebuilding names is resolved, and any other global is an error. Returns the saved object (usually a state
  dict) with every torch tensor as a Tensor: contiguous ones are DISK views of the file; strided ones (a transpose, a
  slice with a step) are read and viewed on Device.DEFAULT."""
  if isinstance(fn, Tensor):
    mapping, start, size = mapping_of(fn, "torch_load")
    path = mapping.path if fn.device == "DISK" else f"<{size}-byte Tensor on {fn.device}>"
    # a view inside a bigger file (a tar or zip member) is parsed as a file of its own
    if (start, size) != (0, mapping.size): mapping = disk_device().open(mapping.read(start, size))
  else:
    path = os.fspath(fn)
    mapping = disk_device().open(path)
  storages: dict[str, _StorageRef] = {}
  places: dict[str, tuple[DiskMapping, int, int]]
  if mapping.size >= 4 and bytes(mapping.read(0, 4)) == b"PK\x03\x04": obj, places = _load_zip(path, mapping, storages)
  else: obj, places = _load_legacy(path, mapping, storages)
  return _resolve(obj, places, path, "", set())

Places = dict[str, tuple[DiskMapping, int, int]]  # storage key -> (mapping, byte offset, byte size)

def _load_zip(path: str, mapping: DiskMapping, storages: dict[str, _StorageRef]) -> tuple[Any, Places]:
  try: zf = zipfile.ZipFile(TensorIO(disk_tensor(mapping)))
  except zipfile.BadZipFile as e:
    raise ValueError(f"torch_load: {path} starts like a zip file but isn't one: {e}") from None
  with zf:
    infos = {i.filename: i for i in zf.infolist()}
    pkls = [n for n in infos if n.endswith("/data.pkl") and n.count("/") == 1]
    if not pkls:
      raise ValueError(f"torch_load: {path} is a zip file without <archive>/data.pkl, so not a torch.save file")
    prefix = pkls[0][:-len("data.pkl")]
    if (bo := infos.get(prefix + "byteorder")) is not None and zf.read(bo).strip() != b"little":
      raise ValueError(f"torch_load: {path} was saved on a big-endian machine ({zf.read(bo)!r}), which isn't supported")
    obj = _unpickle(io.BytesIO(zf.read(pkls[0])), path, storages, pkls[0])
    places: Places = {}
    for key in storages:
      info = infos.get(f"{prefix}data/{key}")
      if info is None:
        raise ValueError(f"torch_load: {path}: storage {key!r} is missing (no zip entry {prefix}data/{key})")
      if info.compress_type == zipfile.ZIP_STORED:
        # torch stores entries uncompressed: the bytes sit in the file after the entry's local header
        hdr = bytes(mapping.read(info.header_offset, 30))
        if hdr[:4] != b"PK\x03\x04": raise ValueError(f"torch_load: {path}: bad zip header for entry {info.filename}")
        name_len, extra_len = struct.unpack("<HH", hdr[26:30])
        start = info.header_offset + 30 + name_len + extra_len
        if start + info.file_size > mapping.size:
          raise ValueError(f"torch_load: {path}: storage {key!r} ({info.file_size} bytes at {start}) runs past the end "
                           f"of the file ({mapping.size} bytes); the file is truncated")
        places[key] = (mapping, start, info.file_size)
      else: places[key] = (disk_device().open(zf.read(info)), 0, info.file_size)  # recompressed by some tool: read it
  return obj, places

def _load_legacy(path: str, mapping: DiskMapping, storages: dict[str, _StorageRef]) -> tuple[Any, Places]:
  places: Places = {}
  with io.BufferedReader(TensorIO(disk_tensor(mapping))) as f:  # buffered: the unpickler reads a byte at a time
    def load(what: str) -> Any: return _unpickle(f, path, storages, what)
    try: magic = load("magic number")
    except ValueError:
      raise ValueError(f"torch_load: {path} is not a torch.save file: it starts with neither a zip header "
                       "nor a pickle") from None
    if magic != _LEGACY_MAGIC: raise ValueError(f"torch_load: {path} is not a torch.save file (bad magic number)")
    if (proto := load("protocol version")) != _LEGACY_PROTOCOL:
      raise ValueError(f"torch_load: {path}: legacy protocol version {proto!r} is not supported "
                       f"(only {_LEGACY_PROTOCOL})")
    info = load("system info")
    if isinstance(info, dict) and info.get("little_endian") is False:
      raise ValueError(f"torch_load: {path} was saved on a big-endian machine, which isn't supported")
    obj = load("pickled object")
    keys = load("storage keys")
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
      raise ValueError(f"torch_load: {path}: bad storage key list {keys!r:.80}")
    pos = f.tell()
  # then each storage: its element count (int64) and its bytes
  for key in keys:
    if key not in storages:
      raise ValueError(f"torch_load: {path}: storage {key!r} is stored but never used, so its dtype is unknown")
    if pos + 8 > mapping.size:
      raise ValueError(f"torch_load: {path}: the file ends inside storage {key!r}'s header; the file is truncated")
    numel = struct.unpack("<q", mapping.read(pos, 8))[0]
    nbytes = numel * storages[key].dtype.itemsize
    if numel < 0 or pos + 8 + nbytes > mapping.size:
      raise ValueError(f"torch_load: {path}: storage {key!r} ({numel} elements of {storages[key].dtype} at byte "
                       f"{pos + 8}) runs past the end of the file ({mapping.size} bytes); the file is truncated")
    places[key] = (mapping, pos + 8, nbytes)
    pos += 8 + nbytes
  return obj, places

def _resolve(obj: Any, places: Places, path: str, where: str, seen: set[int]) -> Any:
  """The unpickled object with every _TensorRef built into a Tensor (containers are updated in place)."""
  if isinstance(obj, _TensorRef): return _tensor_from_ref(obj, places, path, where.strip("."))
  if isinstance(obj, (dict, list)):
    if id(obj) in seen: return obj
    seen.add(id(obj))
    keys = obj.keys() if isinstance(obj, dict) else range(len(obj))
    for k in list(keys): obj[k] = _resolve(obj[k], places, path, f"{where}{k}.", seen)
  elif isinstance(obj, tuple):
    return tuple(_resolve(x, places, path, f"{where}{i}.", seen) for i, x in enumerate(obj))
  return obj

def _tensor_from_ref(ref: _TensorRef, places: Places, path: str, name: str) -> Tensor:
  st = ref.storage
  if st.key not in places:
    raise ValueError(f"torch_load: {path}: tensor {name!r} uses storage {st.key!r}, which isn't in the file")
  mapping, start, nbytes = places[st.key]
  base = start + st.offset * st.dtype.itemsize  # storage views (old files) start inside their root storage
  avail = nbytes - st.offset * st.dtype.itemsize
  isz = ref.dtype.itemsize
  if prod(ref.size) == 0: return disk_tensor(mapping, base, ref.size, ref.dtype)
  end = (ref.offset + sum((n - 1) * s for n, s in zip(ref.size, ref.stride)) + 1) * isz
  have = min(avail, st.numel * st.dtype.itemsize)
  if end > have:
    raise ValueError(f"torch_load: {path}: tensor {name!r} (offset {ref.offset}, size {ref.size}, stride {ref.stride}) "
                     f"reads up to byte {end} of its storage, which has {have}")
  if _is_contiguous(ref.size, ref.stride): return disk_tensor(mapping, base + ref.offset * isz, ref.size, ref.dtype)
  # strided: copy the span it covers, then view it with movement ops on the compute device
  lo = ref.offset
  span = end // isz - lo
  flat = disk_tensor(mapping, base + lo * isz, (span,), ref.dtype).to(Device.DEFAULT)
  return as_strided(flat, ref.size, ref.stride, 0)

def _is_contiguous(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
  acc = 1
  for n, s in reversed(list(zip(size, stride))):
    if n != 1 and s != acc: return False
    acc *= n
  return True

def as_strided(flat: Tensor, size: tuple[int, ...], stride: tuple[int, ...], offset: int = 0) -> Tensor:
  """Elements flat[offset + sum(i_k * stride_k)] in shape `size`, from a 1-D tensor, with movement ops only (like
  torch.as_strided; strides must be >= 0). Non-overlapping strides are one reshape chain; overlapping ones are
  concatenated slice by slice along the outermost dim."""
  dims = [i for i, (n, s) in enumerate(zip(size, stride)) if n != 1 and s != 0]
  order = sorted(dims, key=lambda i: -stride[i])
  # nested: each dim's elements fit within one step of the next-larger stride, so (n, stride) reshapes peel them off
  nested = all(stride[a] >= (size[b] - 1) * stride[b] + 1 for a, b in zip(order, order[1:]))
  if not nested:
    a = order[0]
    rest_size, rest_stride = size[:a] + (1,) + size[a + 1:], stride[:a] + (0,) + stride[a + 1:]
    parts = [as_strided(flat, rest_size, rest_stride, offset + i * stride[a]) for i in range(size[a])]
    return parts[0].cat(*parts[1:], dim=a)
  def window(x: Tensor, start: int, length: int) -> Tensor:
    # [start, start + length) of the last dim, padded past its end (those places are never picked)
    have = x.shape[-1]
    x = x.shrink(tuple(None for _ in x.shape[:-1]) + ((min(start, have), min(start + length, have)),))
    return x.pad(tuple((0, 0) for _ in x.shape[:-1]) + ((0, length - x.shape[-1]),)) if x.shape[-1] < length else x
  if not order: x = window(flat, offset, 1)
  else:
    x = window(flat, offset, size[order[0]] * stride[order[0]]).reshape(size[order[0]], stride[order[0]])
    for b in order[1:]:
      x = window(x, 0, size[b] * stride[b])
      x = x.reshape(x.shape[:-1] + (size[b], stride[b]))
    x = window(x, 0, 1)
  x = x.reshape(tuple(size[i] for i in order))
  # back to the original dim order, then size-1 and stride-0 dims
  x = x.permute(tuple(sorted(range(len(order)), key=lambda j: order[j]))) if order else x
  x = x.reshape(tuple(size[i] if i in dims else 1 for i in range(len(size))))
  return x.expand(size) if x.shape != tuple(size) else x
from attograd.nn.gguf import gguf_load  # noqa: F401,E402
