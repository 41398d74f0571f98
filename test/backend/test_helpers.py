"""helpers: Context and its flags (TRAINING, DEFAULT_FLOAT, DEFAULT_INT, tinygrad-only ones), getenv, the tqdm
progress bar and fetch (against a local HTTP server)."""
from __future__ import annotations
import gzip, hashlib, http.server, io, os, pathlib, tarfile, threading
from typing import Any, Iterator
import numpy as np
import pytest
from attograd import Context, Tensor, dtypes, nn
from attograd.helpers import TINYGRAD_ONLY_FLAGS, TRAINING, ContextVar, fetch, getenv, tqdm, trange

# ***** Context *****

def test_context_restores_on_exit_and_on_error() -> None:
  with Context(DEBUG=3): assert ContextVar._cache["DEBUG"].value == 3
  assert ContextVar._cache["DEBUG"].value == 0
  with pytest.raises(ZeroDivisionError):
    with Context(DEBUG=2): 1 / 0
  assert ContextVar._cache["DEBUG"].value == 0

def test_context_decorator_is_reentrant() -> None:
  @Context(TRAINING=1)
  def depth(n: int) -> list[bool]: return [Tensor.training] + (depth(n - 1) if n else [])
  with Context(TRAINING=0): assert depth(3) == [True] * 4 and not Tensor.training

def test_unknown_flag_names_the_known_ones() -> None:
  with pytest.raises(KeyError, match="unknown flag 'NOT_A_FLAG'.*TRAINING"):
    with Context(NOT_A_FLAG=1): pass

def test_bad_value_restores_earlier_flags() -> None:
  with pytest.raises(ValueError, match="DEFAULT_FLOAT: 'int32' is not a float dtype"):
    with Context(DEBUG=1, DEFAULT_FLOAT="int32"): pass
  assert ContextVar._cache["DEBUG"].value == 0 and dtypes.default_float is dtypes.float32

def test_tinygrad_only_flags_are_accepted() -> None:
  with Context(WINO=1, SPEC=2, CHECK_OOB=1, TRACK_MATCH_STATS=0):
    assert (Tensor([1.0, 2.0]) * 2).tolist() == [2.0, 4.0]
  assert all(why for why in TINYGRAD_ONLY_FLAGS.values())

# ***** TRAINING *****

def test_training_flag_is_tensor_training() -> None:
  assert Tensor.training is False
  with Context(TRAINING=1):
    assert Tensor.training is True
    with Tensor.train(False): assert not TRAINING
  Tensor.training = True  # the tinygrad < 0.10 way sets the same flag
  try: assert TRAINING.value == 1
  finally: Tensor.training = False
  assert TRAINING.value == 0

def test_training_drives_dropout_and_batchnorm() -> None:
  x = Tensor.ones(1000)
  assert x.dropout(0.5).tolist() == x.tolist()
  with Context(TRAINING=1): kept = x.dropout(0.5).numpy()
  assert set(np.unique(kept)) == {0.0, 2.0} and 350 < (kept == 0).sum() < 650
  bn = nn.BatchNorm(2)
  xb = Tensor(np.arange(8, dtype=np.float32).reshape(2, 2, 2))
  np.testing.assert_allclose(bn(xb).numpy(), xb.numpy() / np.sqrt(1 + 1e-5), rtol=1e-5)  # running stats: 0 and 1
  assert bn.num_batches_tracked.item() == 0
  with Context(TRAINING=1): out = bn(xb).numpy()
  np.testing.assert_allclose(out.mean(axis=(0, 2)), [0.0, 0.0], atol=1e-5)  # the batch's own statistics
  assert bn.num_batches_tracked.item() == 1 and abs(bn.running_mean.numpy()[0] - 0.1 * 2.5) < 1e-5

# ***** DEFAULT_FLOAT / DEFAULT_INT *****

def test_default_float_and_int(device: str) -> None:
  with Context(DEFAULT_FLOAT=dtypes.float16, DEFAULT_INT="int64"):
    assert Tensor([1.5]).dtype is dtypes.float16 and Tensor([1]).dtype is dtypes.int64
    assert Tensor.rand(3).dtype is dtypes.float16 and Tensor.arange(3).dtype is dtypes.int64
    assert (Tensor([1, 2]) / 2).dtype is dtypes.float16
    np.testing.assert_allclose((Tensor([1, 2]) / 4).numpy(), [0.25, 0.5])
  with Context(DEFAULT_FLOAT="HALF"): assert dtypes.default_float is dtypes.float16  # tinygrad's env spelling
  assert Tensor([1.5]).dtype is dtypes.float32 and Tensor([1]).dtype is dtypes.int32
  with pytest.raises(ValueError, match="DEFAULT_INT: dtypes.float is not an integer dtype"):
    with Context(DEFAULT_INT=dtypes.float32): pass

# ***** getenv *****

def test_getenv_types_and_empty(monkeypatch: pytest.MonkeyPatch) -> None:
  for k, v in (("ATTO_T_INT", "7"), ("ATTO_T_STR", "abc"), ("ATTO_T_EMPTY", ""), ("ATTO_T_FLOAT", "0.5")):
    monkeypatch.setenv(k, v)
  getenv.cache_clear()
  assert getenv("ATTO_T_INT") == 7 and getenv("ATTO_T_STR", "") == "abc" and getenv("ATTO_T_FLOAT", 0.0) == 0.5
  assert getenv("ATTO_T_EMPTY", 3) == 3 and getenv("ATTO_T_MISSING") == 0  # set-but-empty is unset (tinygrad: error)
  with pytest.raises(ValueError, match="ATTO_T_STR='abc' should be a int"): getenv("ATTO_T_STR", 1)
  getenv.cache_clear()

# ***** tqdm *****

def test_tqdm_counts_and_draws(capsys: pytest.CaptureFixture[str]) -> None:
  out = []
  for i in (t := trange(5, desc="work")):
    out.append(i)
    t.set_description(f"step {i}")
  assert out == [0, 1, 2, 3, 4] and t.n == 5
  err = capsys.readouterr().err
  assert err.endswith("\n") and "step 4: 100%|" in err and "5/5 [" in err
  with tqdm(total=3_000_000, unit="B", unit_scale=True) as bar: bar.update(1_500_000)
  err = capsys.readouterr().err
  assert " 50%|" in err and "1.50M/3M [" in err and "B/s]" in err
  assert list(tqdm(iter("ab"), disable=True)) == ["a", "b"] and capsys.readouterr().err == ""

# ***** fetch *****

@pytest.fixture
def server(tmp_path: pathlib.Path) -> Iterator[tuple[str, pathlib.Path]]:
  """A local HTTP server on 127.0.0.1 over a folder: (base url, folder)."""
  root = tmp_path / "www"
  root.mkdir()
  class Quiet(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a: Any, **kw: Any) -> None: super().__init__(*a, directory=str(root), **kw)
    def log_message(self, *a: Any) -> None: pass
  srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  try: yield f"http://127.0.0.1:{srv.server_address[1]}/", root
  finally: srv.shutdown()

def test_fetch_caches_checks_and_unpacks(server: tuple[str, pathlib.Path], tmp_path: pathlib.Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
  url, root = server
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path / "cache"))
  data = os.urandom(100_000)
  (root / "blob.bin").write_bytes(data)
  p = fetch(url + "blob.bin", subdir="t")
  assert p.read_bytes() == data and p.parent == tmp_path / "cache" / "downloads" / "t"
  (root / "blob.bin").write_bytes(b"changed")
  assert fetch(url + "blob.bin", subdir="t").read_bytes() == data  # cached
  assert fetch(url + "blob.bin", subdir="t", allow_caching=False).read_bytes() == b"changed"
  # sha256: a matching download is kept, a mismatch raises and leaves no file
  good = hashlib.sha256(b"changed").hexdigest()
  assert fetch(url + "blob.bin", name="named.bin", sha256=good).read_bytes() == b"changed"
  with pytest.raises(ValueError, match="sha256 .* expected 00"):
    fetch(url + "blob.bin", name="bad.bin", sha256="00" * 32)
  assert not (tmp_path / "cache" / "downloads" / "bad.bin").exists()
  # gunzip and tar extraction
  (root / "z.gz").write_bytes(gzip.compress(b"hello" * 1000))
  assert fetch(url + "z.gz", gunzip=True).read_bytes() == b"hello" * 1000
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w") as tf:
    info = tarfile.TarInfo("d/a.txt")
    info.size = 3
    tf.addfile(info, io.BytesIO(b"abc"))
  (root / "t.tar").write_bytes(buf.getvalue())
  assert (fetch(url + "t.tar", extract=True) / "d" / "a.txt").read_bytes() == b"abc"
  assert fetch(url + "t.tar", name=str(tmp_path / "x" / "t.tar")).read_bytes() == buf.getvalue()  # a path as name
  assert fetch("/etc/hostname") == pathlib.Path("/etc/hostname")  # local paths are returned as they are

def test_fetch_offline_error(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setenv("ATTOGRAD_CACHE_DIR", str(tmp_path))
  with pytest.raises(ConnectionError, match=r"can't download http://127.0.0.1:9/x .*put the file at"):
    fetch("http://127.0.0.1:9/x")
  (src := tmp_path / "local.bin").write_bytes(b"xyz")
  assert fetch(src.as_uri(), name="copied.bin").read_bytes() == b"xyz"  # file:// URLs work offline
