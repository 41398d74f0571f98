"""nn.state.fs_store / fs_load against a tinyfs server (nn/tinyfs.py's protocol) run in this process: round trips of
one chunk and of a hash tree, the hash tree's root, equal bytes giving equal hashes, and the error without a server."""
from __future__ import annotations
import hashlib, json, socket, socketserver, threading
from typing import Iterator
import numpy as np
import pytest
from attograd import Tensor, dtypes
from attograd.helpers import CHUNK_SIZE
from attograd.nn.state import fs_load, fs_store
from attograd.nn.tinyfs import TinyFSError

def _h(chunk: bytes) -> bytes: return hashlib.blake2b(chunk, digest_size=16).digest()  # (the server's own choice)

class _Server(socketserver.ThreadingTCPServer):
  daemon_threads, allow_reuse_address = True, True
  chunks: dict[bytes, bytes]

class _Handler(socketserver.StreamRequestHandler):
  server: _Server
  def handle(self) -> None:
    while (line := self.rfile.readline()):
      cmd, *arg = line.decode().split()
      if cmd == "INFO":
        self.wfile.write(json.dumps({"n0": ["n0", "127.0.0.1:%d" % self.server.server_address[1]]}).encode() + b"\r\n")
      elif cmd == "STORE_IN":
        data, out = self.rfile.read(int(arg[0])), b""
        for i in range(0, len(data), CHUNK_SIZE):
          self.server.chunks[h := _h(data[i:i + CHUNK_SIZE])] = data[i:i + CHUNK_SIZE]
          out += h
        self.wfile.write(out)
      elif cmd == "LOAD_IN":
        self.wfile.write(json.dumps(["n0"] * (int(arg[0]) // 16)).encode() + b"\r\n")
        self.rfile.read(int(arg[0]))
      elif cmd == "CHUNK_OUT": self.wfile.write(self.server.chunks[self.rfile.read(16)][:int(arg[0])])
      self.wfile.flush()

@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
  srv = _Server(("127.0.0.1", 0), _Handler)
  srv.chunks = {}
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  monkeypatch.setenv("TINYFS_ENDPOINT", "127.0.0.1:%d" % srv.server_address[1])
  yield srv
  srv.shutdown()
  srv.server_close()

def _root(data: bytes) -> bytes:
  """The hash naming `data`: chunks hashed level by level until one chunk is left."""
  pad = lambda b: b + bytes(-len(b) % CHUNK_SIZE)  # noqa: E731
  level = pad(data)
  while True:
    level = pad(b"".join(_h(level[i:i + CHUNK_SIZE]) for i in range(0, len(level), CHUNK_SIZE)))
    if len(level) == CHUNK_SIZE and level[16:] == bytes(CHUNK_SIZE - 16): return level[:16]

@pytest.mark.parametrize("n", [7, 256, CHUNK_SIZE + 1000])
def test_round_trip(device: str, server: _Server, n: int) -> None:
  arr = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
  h = fs_store(Tensor(arr, device=device))
  assert h.shape == (16,) and h.dtype == dtypes.uint8 and h.device == Tensor([1], device=device).device
  assert bytes(h.tolist()) == _root(arr.tobytes())
  assert (len(server.chunks) > 2) == (n > CHUNK_SIZE)  # a blob of two chunks has a level of hashes above them
  back = fs_load(h, n)
  assert back.dtype == dtypes.uint8 and back.device == h.device
  np.testing.assert_array_equal(back.numpy(), arr)

def test_float_bytes_and_equal_hashes(device: str, server: _Server) -> None:
  a = fs_store(Tensor([1.0, 2.0, 3.0, 4.0], device=device)).tolist()
  assert a == fs_store(Tensor([1.0, 2.0, 3.0, 4.0], device=device)).tolist()
  assert a != fs_store(Tensor([5.0, 6.0, 7.0, 8.0], device=device)).tolist()
  back = fs_load(Tensor(a, dtype=dtypes.uint8, device=device), 16).bitcast(dtypes.float32)
  assert back.tolist() == [1.0, 2.0, 3.0, 4.0]

def test_errors(monkeypatch: pytest.MonkeyPatch) -> None:
  with socket.socket() as s:  # a port nothing listens on
    s.bind(("127.0.0.1", 0))
    monkeypatch.setenv("TINYFS_ENDPOINT", "127.0.0.1:%d" % s.getsockname()[1])
  with pytest.raises(TinyFSError, match="TINYFS_ENDPOINT"): fs_store(Tensor([1, 2], dtype=dtypes.uint8))
  with pytest.raises(ValueError, match="16 uint8"): fs_load(Tensor([1, 2], dtype=dtypes.uint8), 2)
