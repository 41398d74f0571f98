"""A client of tinyfs, tinygrad's content-addressed blob store (nn.state.fs_store / fs_load): a server at
TINYFS_ENDPOINT (host:port, default localhost:6767) keeps CHUNK_SIZE-byte chunks under 16-byte hashes it computes.

The protocol, one command a line (CRLF), over TCP:
- `INFO`: a JSON line {node: [name, "host:port"], ...}, the nodes holding chunks;
- `STORE_IN n` then n bytes (a multiple of CHUNK_SIZE): the server stores each chunk and answers with its hashes,
  16 bytes each, in order;
- `LOAD_IN n` then n bytes of hashes: a JSON line, the node holding each chunk;
- `CHUNK_OUT n` then one 16-byte hash, sent to that node: the chunk's first n bytes.
A blob larger than a chunk is stored as a hash tree: the chunks' hashes are stored as chunks themselves, level by
level, until one hash names it all."""
from __future__ import annotations
import json, math, os, socket
from attograd.helpers import CHUNK_SIZE

class TinyFSError(ConnectionError):
  """The tinyfs server can't be reached, or it broke the protocol."""

def _connect(endpoint: str) -> socket.socket:
  host, port = endpoint.rsplit(":", 1)
  try: return socket.create_connection((host, int(port)), timeout=float(os.environ.get("TINYFS_TIMEOUT") or 60))
  except OSError as e:
    raise TinyFSError(f"tinyfs: can't connect to the server at {endpoint} ({e}); start one, or point "
                      "TINYFS_ENDPOINT=host:port at it") from None

def _read_exactly(f, n: int, what: str) -> bytes:  # noqa: ANN001  (a socket's file)
  data = f.read(n)
  if data is None or len(data) != n:
    raise TinyFSError(f"tinyfs: the server closed the connection during {what} ({len(data or b'')} of {n} bytes)")
  return data

def _json_line(f, what: str):  # noqa: ANN001, ANN202
  line = f.readline()
  if not line: raise TinyFSError(f"tinyfs: the server closed the connection during {what}")
  return json.loads(line)

def levels(size: int) -> int:
  """How many levels of hashes above the data a blob of `size` bytes has (0: one chunk's hash names it)."""
  chunks = max(1, math.ceil(size / CHUNK_SIZE))
  return math.ceil(math.log(chunks, CHUNK_SIZE // 16)) if chunks > 1 else 0

def _pad(data: bytes) -> bytes:
  return data + bytes(-len(data) % CHUNK_SIZE) if len(data) % CHUNK_SIZE or not data else data

class Client:
  """One connection to the server at TINYFS_ENDPOINT (read when made), and one to each node a load reads from."""
  def __init__(self) -> None:
    self.endpoint = os.environ.get("TINYFS_ENDPOINT") or "localhost:6767"  # (read now: getenv caches)
    self.sock = _connect(self.endpoint)
    self.f = self.sock.makefile("rwb")
    self.f.write(b"INFO\r\n")
    self.f.flush()
    self.nodes: dict[str, list[str]] = _json_line(self.f, "INFO")
    self.node_files: dict[str, object] = {}
  def close(self) -> None:
    for nf in self.node_files.values(): nf.close()  # type: ignore[attr-defined]
    self.f.close()
    self.sock.close()
  def __enter__(self) -> Client: return self
  def __exit__(self, *exc: object) -> None: self.close()

  def store_chunks(self, data: bytes) -> bytes:
    """Store `data` (a multiple of CHUNK_SIZE bytes): the hash of each chunk, in order."""
    self.f.write(f"STORE_IN {len(data)}\r\n".encode())
    self.f.write(data)
    self.f.flush()
    return _read_exactly(self.f, len(data) // CHUNK_SIZE * 16, "STORE_IN")

  def load_chunks(self, hashes: bytes, out_size: int) -> bytes:
    """The chunks named by `hashes` (16 bytes each), concatenated and cut to `out_size` bytes."""
    self.f.write(f"LOAD_IN {len(hashes)}\r\n".encode())
    self.f.write(hashes)
    self.f.flush()
    where: list[str] = _json_line(self.f, "LOAD_IN")
    out = bytearray(out_size)
    for i, node in enumerate(where):
      n = min(CHUNK_SIZE, out_size - i * CHUNK_SIZE)
      if n <= 0: break
      nf = self._node(node)
      nf.write(f"CHUNK_OUT {n}\r\n".encode())  # type: ignore[attr-defined]
      nf.write(hashes[i * 16:(i + 1) * 16])  # type: ignore[attr-defined]
      nf.flush()  # type: ignore[attr-defined]
      out[i * CHUNK_SIZE:i * CHUNK_SIZE + n] = _read_exactly(nf, n, "CHUNK_OUT")
    return bytes(out)

  def _node(self, node: str) -> object:
    if (nf := self.node_files.get(node)) is None:
      if node not in self.nodes: raise TinyFSError(f"tinyfs: the server named a node {node!r} its INFO didn't list")
      nf = self.node_files[node] = _connect(self.nodes[node][-1]).makefile("rwb")
    return nf

def store(data: bytes) -> bytes:
  """Store a blob: the 16-byte hash that names it (the root of its hash tree)."""
  with Client() as c:
    level = _pad(data)
    for _ in range(levels(len(level)) + 1): level = _pad(c.store_chunks(level))
  return level[:16]

def load(root: bytes, size: int) -> bytes:
  """The first `size` bytes of the blob named by the 16-byte hash `root`."""
  if len(root) != 16: raise ValueError(f"fs_load: a tinyfs hash is 16 bytes, got {len(root)}")
  chunks = max(1, math.ceil(size / CHUNK_SIZE))
  depth = levels(size)
  with Client() as c:
    data = root
    for i in reversed(range(depth + 1)):  # each level's hashes name the chunks of the level below
      n = chunks * CHUNK_SIZE if i == 0 else 16 * math.ceil(chunks / (CHUNK_SIZE // 16) ** (i - 1))
      data = c.load_chunks(data[:16 * math.ceil(n / CHUNK_SIZE)], n)
  return data[:size]
