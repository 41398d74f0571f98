"""nn.datasets (MNIST from the real IDX files; CIFAR-10 from a small fake tarball of the real layout; checksums,
downloads, the offline error) and nn.data (DataLoader)."""
from __future__ import annotations
import gzip, hashlib, io, os, shutil, struct, tarfile
import numpy as np
import pytest
from attograd import Device, Tensor, dtypes
from attograd.nn import datasets
from attograd.nn.data import DataLoader, normalize_mnist
from attograd.nn.datasets import cifar, fashion_mnist, mnist

SHARED = "/work/shared/datasets/mnist"
needs_mnist = pytest.mark.skipif(not all(os.path.exists(os.path.join(SHARED, f)) for f in datasets._FILES),
                                 reason=f"the MNIST files are not in {SHARED}")

def _no_download(url: str, dest: str) -> None: raise OSError("network disabled in tests")

# ***** MNIST *****

@needs_mnist
def test_mnist_real_files(monkeypatch) -> None:
  monkeypatch.setenv("MNIST_DIR", SHARED)
  monkeypatch.setattr(datasets, "_download", _no_download)
  X, Y, Xt, Yt = mnist()
  assert (X.shape, Y.shape, Xt.shape, Yt.shape) == ((60000, 1, 28, 28), (60000,), (10000, 1, 28, 28), (10000,))
  assert X.dtype is Y.dtype is Xt.dtype is Yt.dtype is dtypes.uint8 and X.device == Device.DEFAULT
  assert np.bincount(Y.numpy()).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
  assert np.bincount(Yt.numpy()).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
  assert abs(X.float().mean().item() - 33.3184) < 1e-3 and abs(Xt.float().mean().item() - 33.7912) < 1e-3
  assert X.max().item() == 255 and X.min().item() == 0

@needs_mnist
def test_mnist_downloads_missing_files_and_checks_them(tmp_path, monkeypatch, capsys) -> None:
  # a mirror served from the shared copy over file:// runs the real download code (urllib, progress bar, rename)
  monkeypatch.setenv("MNIST_DIR", str(tmp_path / "dl"))
  monkeypatch.setitem(datasets._MIRRORS, "mnist", ["file:///nonexistent/", f"file://{SHARED}/"])
  _, Y, _, _ = mnist()
  assert Y.shape == (60000,) and sorted(os.listdir(tmp_path / "dl")) == sorted(datasets._FILES)
  assert "train-images-idx3-ubyte.gz: [##############################]" in capsys.readouterr().err

def test_mnist_offline_and_missing_says_where_to_put_the_files(tmp_path, monkeypatch) -> None:
  monkeypatch.setenv("MNIST_DIR", str(tmp_path))
  monkeypatch.setattr(datasets, "_download", _no_download)
  with pytest.raises(FileNotFoundError) as e: mnist()
  msg = str(e.value)
  assert f"train-images-idx3-ubyte.gz is not in {tmp_path} and could not be downloaded" in msg
  assert "network disabled" in msg
  assert all(f in msg for f in datasets._FILES) and "set MNIST_DIR to a folder that holds them" in msg
  assert os.listdir(tmp_path) == []

def test_fashion_mnist_has_its_own_dir(tmp_path, monkeypatch) -> None:
  monkeypatch.setenv("FASHION_MNIST_DIR", str(tmp_path))
  monkeypatch.setattr(datasets, "_download", _no_download)
  with pytest.raises(FileNotFoundError, match="fashion_mnist: .* set FASHION_MNIST_DIR"): fashion_mnist()

def test_default_dir_is_under_the_cache(tmp_path, monkeypatch) -> None:
  monkeypatch.delenv("MNIST_DIR", raising=False)
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))
  assert datasets.dataset_dir("mnist") == os.path.join(str(tmp_path), "datasets", "mnist")

@needs_mnist
def test_mnist_corrupt_file_is_reported(tmp_path, monkeypatch) -> None:
  for f in datasets._FILES: shutil.copy(os.path.join(SHARED, f), tmp_path / f)
  with open(tmp_path / datasets._FILES[1], "r+b") as fh: fh.write(b"\0")
  monkeypatch.setenv("MNIST_DIR", str(tmp_path))
  with pytest.raises(ValueError, match=r"train-labels-idx1-ubyte\.gz is corrupt \(md5 [0-9a-f]{32}, expected d53e105e"):
    mnist()

def _idx(magic: int, dims: tuple[int, ...], data: bytes) -> bytes:
  return struct.pack(f">I{len(dims)}I", magic, *dims) + data

@pytest.mark.parametrize("content, msg", [
  (_idx(0x801, (2, 28, 28), bytes(2 * 784)), r"has magic 0x801, expected 0x803"),
  (_idx(0x803, (2, 28, 28), bytes(100)), r"has 100 data bytes, but its dims \(2, 28, 28\) need 1568"),
  (b"\0\0\x08", r"is 3 bytes, too short for its header"),
])
def test_idx_header_validation(tmp_path, content: bytes, msg: str) -> None:
  p = tmp_path / "x.gz"
  with gzip.open(p, "wb") as f: f.write(content)
  with pytest.raises(ValueError, match=msg): datasets._parse_idx(str(p), 0x803, 3)

# ***** CIFAR-10 *****

def fake_cifar(tmp_path, per_batch: int = 3, test: int = 2, seed: int = 0,
               edit: dict[str, bytes] | None = None) -> tuple[str, np.ndarray, np.ndarray]:
  """A cifar-10-binary.tar.gz with the real layout (cifar-10-batches-bin/, five data batches, a test batch, the
  meta file, records of a label byte and 3072 pixel bytes) but a few records per batch. Returns the folder it is
  served from, and the records (train, test) as arrays."""
  rng = np.random.default_rng(seed)
  def records(n: int) -> np.ndarray:
    r = rng.integers(0, 256, (n, 3073), dtype=np.uint8)
    r[:, 0] = rng.integers(0, 10, n)
    return r
  batches = {f"data_batch_{i}.bin": records(per_batch) for i in range(1, 6)} | {"test_batch.bin": records(test)}
  members = {f"cifar-10-batches-bin/{k}": v.tobytes() for k, v in batches.items()}
  members["cifar-10-batches-bin/batches.meta.txt"] = b"airplane\nautomobile\n"
  members.update(edit or {})
  src = tmp_path / "mirror"
  src.mkdir(exist_ok=True)
  with tarfile.open(src / "cifar-10-binary.tar.gz", "w:gz") as tar:
    for name, content in members.items():
      info = tarfile.TarInfo(name)
      info.size = len(content)
      tar.addfile(info, io.BytesIO(content))
  train = np.concatenate([batches[f"data_batch_{i}.bin"] for i in range(1, 6)])
  return str(src), train, batches["test_batch.bin"]

def _serve(monkeypatch, src: str) -> None:
  """Mirrors: one that fails, then the fake over file:// (the real urllib download code runs); the fake's checksum."""
  monkeypatch.setitem(datasets._MIRRORS, "cifar10", ["file:///nonexistent/", f"file://{src}/"])
  md5 = hashlib.md5(open(os.path.join(src, "cifar-10-binary.tar.gz"), "rb").read()).hexdigest()
  monkeypatch.setitem(datasets._CHECKSUMS, "cifar10", {"cifar-10-binary.tar.gz": (md5, None)})

def test_cifar_downloads_and_has_tinygrads_shapes(tmp_path, monkeypatch, capsys) -> None:
  src, train, test = fake_cifar(tmp_path)
  monkeypatch.setenv("CIFAR_DIR", str(tmp_path / "dl"))
  _serve(monkeypatch, src)
  X, Y, Xt, Yt = cifar()
  assert (X.shape, Y.shape, Xt.shape, Yt.shape) == ((15, 3, 32, 32), (15,), (2, 3, 32, 32), (2,))
  assert X.dtype is Y.dtype is Xt.dtype is Yt.dtype is dtypes.uint8 and X.device == Device.DEFAULT
  np.testing.assert_array_equal(X.numpy(), train[:, 1:].reshape(-1, 3, 32, 32))
  np.testing.assert_array_equal(Y.numpy(), train[:, 0])
  np.testing.assert_array_equal(Xt.numpy(), test[:, 1:].reshape(-1, 3, 32, 32))
  np.testing.assert_array_equal(Yt.numpy(), test[:, 0])
  assert os.listdir(tmp_path / "dl") == ["cifar-10-binary.tar.gz"]
  assert "cifar-10-binary.tar.gz: [##############################]" in capsys.readouterr().err
  # the second call finds the cached copy: no download
  monkeypatch.setattr(datasets, "_download", _no_download)
  assert cifar(device="PYTHON")[3].tolist() == test[:, 0].tolist()

def test_cifar_default_dir_and_the_real_checksum(tmp_path, monkeypatch) -> None:
  monkeypatch.delenv("CIFAR_DIR", raising=False)
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))
  assert datasets.dataset_dir("cifar10") == os.path.join(str(tmp_path), "datasets", "cifar10")
  assert datasets._CHECKSUMS["cifar10"] == {"cifar-10-binary.tar.gz": ("c32a1d4ab5d03f1284b67883e8d87530", None)}
  # a download that doesn't match the published md5 is deleted and reported
  src, _, _ = fake_cifar(tmp_path)
  monkeypatch.setitem(datasets._MIRRORS, "cifar10", [f"file://{src}/"])
  with pytest.raises(FileNotFoundError, match=r"downloaded file has md5 [0-9a-f]{32}, expected c32a1d4a"): cifar()
  assert os.listdir(tmp_path / "datasets" / "cifar10") == []

def test_cifar_offline_says_where_to_put_the_tarball(tmp_path, monkeypatch) -> None:
  monkeypatch.setenv("CIFAR_DIR", str(tmp_path))
  monkeypatch.setattr(datasets, "_download", _no_download)
  with pytest.raises(FileNotFoundError) as e: cifar()
  msg = str(e.value)
  assert f"cifar10: cifar-10-binary.tar.gz is not in {tmp_path} and could not be downloaded" in msg
  assert "network disabled" in msg and "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz" in msg
  assert f"Put the original cifar-10-binary.tar.gz in {tmp_path}, or set CIFAR_DIR to a folder that holds it." in msg

@pytest.mark.parametrize("edit, msg", [
  ({"cifar-10-batches-bin/data_batch_3.bin": b"x" * 3072}, r"data_batch_3.bin has 3072 bytes, not a whole number"),
  ({"cifar-10-batches-bin/test_batch.bin": bytes([10]) + bytes(3072)}, r"test_batch.bin has label 10, expected 0..9"),
])
def test_cifar_bad_tarball(tmp_path, monkeypatch, edit: dict[str, bytes], msg: str) -> None:
  src, _, _ = fake_cifar(tmp_path, edit=edit)
  monkeypatch.setenv("CIFAR_DIR", src)  # the file is already there: no download
  _serve(monkeypatch, src)
  with pytest.raises(ValueError, match=msg): cifar()

def test_cifar_missing_member(tmp_path, monkeypatch) -> None:
  d = tmp_path / "c"
  d.mkdir()
  with tarfile.open(d / "cifar-10-binary.tar.gz", "w:gz") as tar:
    info = tarfile.TarInfo("cifar-10-batches-bin/data_batch_1.bin")
    info.size = 3073
    tar.addfile(info, io.BytesIO(bytes(3073)))
  monkeypatch.setenv("CIFAR_DIR", str(d))
  _serve(monkeypatch, str(d))
  with pytest.raises(ValueError, match=r"cifar: cifar-10-binary.tar.gz has no cifar-10-batches-bin/data_batch_2.bin"):
    cifar()

# ***** DataLoader *****

X = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
Y = np.arange(10, dtype=np.int64)

def _epoch(dl: DataLoader) -> list[tuple[list, list]]: return [(xb.tolist(), yb.tolist()) for xb, yb in dl]

@pytest.mark.parametrize("as_tensor", [False, True], ids=["numpy", "tensor"])
def test_dataloader_in_order(as_tensor: bool) -> None:
  dl = DataLoader(Tensor(X) if as_tensor else X, Tensor(Y) if as_tensor else Y, batch_size=4, shuffle=False)
  ep = _epoch(dl)
  assert len(dl) == 3 and [y for _, y in ep] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
  assert ep[2][0] == X[8:].tolist()
  xb, yb = next(iter(dl))
  assert xb.dtype is dtypes.float32 and yb.dtype is dtypes.int64 and xb.device == Device.DEFAULT

def test_dataloader_drop_last() -> None:
  dl = DataLoader(X, Y, batch_size=4, shuffle=False, drop_last=True)
  assert len(dl) == 2 and [y for _, y in _epoch(dl)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
  assert len(DataLoader(X, Y, batch_size=5, drop_last=True)) == 2
  assert len(DataLoader(X, Y, batch_size=11, drop_last=True)) == 0

def test_dataloader_shuffle_is_seeded_and_complete() -> None:
  a, b = DataLoader(X, Y, 3, seed=7), DataLoader(Tensor(X), Tensor(Y), 3, seed=7)
  ea1, ea2, eb1 = _epoch(a), _epoch(a), _epoch(b)
  assert ea1 == eb1  # same seed, same order, whatever the input type
  assert ea1 != ea2  # a new order each epoch
  for ep in (ea1, ea2):
    ys = [y for _, yb in ep for y in yb]
    assert sorted(ys) == list(range(10)) and ys != list(range(10))
    for xb, yb in ep: assert xb == X[yb].tolist()  # rows stay paired
  assert _epoch(DataLoader(X, Y, 3, seed=8)) != ea1

def test_dataloader_batches_on_device(device: str) -> None:
  xb, yb = next(iter(DataLoader(X, Y, 4, seed=0, device=device)))
  assert xb.device == yb.device == device and (xb.sum(1) == Tensor(X[yb.numpy()].sum(1), device=device)).all().item()

def test_dataloader_errors() -> None:
  with pytest.raises(ValueError, match=r"X and Y need the same length, got X \(10, 3\) and Y \(9,\)"):
    DataLoader(X, Y[:9], 2)
  with pytest.raises(ValueError, match="batch_size must be a positive int, got 0"): DataLoader(X, Y, 0)
  with pytest.raises(TypeError, match="X must be a Tensor or a NumPy array, got list"): DataLoader([1, 2], Y, 2)

def test_normalize_mnist() -> None:
  x = normalize_mnist(Tensor([0, 255, 33], dtype=dtypes.uint8))
  assert x.dtype is dtypes.float32
  np.testing.assert_allclose(x.numpy(), (np.array([0, 255, 33]) / 255 - 0.1307) / 0.3081, rtol=1e-6)

def test_dataloader_takes_rows_from_a_sampler() -> None:
  from attograd.distributed import DistributedSampler
  from attograd.nn.data import DataLoader
  X, Y = np.arange(20, dtype=np.float32).reshape(10, 2), np.arange(10, dtype=np.int32)
  dl = DataLoader(X, Y, batch_size=2, sampler=DistributedSampler(10, 1, 2, shuffle=False))
  assert len(dl) == 3 and [yb.tolist() for _, yb in dl] == [[1, 3], [5, 7], [9]]
  with pytest.raises(IndexError, match="the sampler gave row 10"): list(DataLoader(X, Y, 2, sampler=[10]))
