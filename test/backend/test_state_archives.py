"""nn.state archives: TensorIO (a file object over a uint8 Tensor), tar_extract and zip_extract checked against the
stdlib's tarfile and zipfile on real archives, and the clear errors for malformed, truncated and hostile ones."""
from __future__ import annotations
import io, os, struct, tarfile, zipfile
import numpy as np
import pytest
from attograd import Device, Tensor, dtypes
from attograd.nn.state import TensorIO, disk_tensor, tar_extract, torch_load, zip_extract

def raw(t: Tensor) -> bytes: return bytes(t.data()) if t.numel() else b""

# ***** TensorIO *****

DATA = b"Hello World!"

def test_tensorio_reads_like_a_file(device: str) -> None:
  f = TensorIO(Tensor(DATA, device=device))
  ref = io.BytesIO(DATA)
  assert f.readable() and f.seekable() and not f.writable() and f.tell() == 0
  for n in (1, 5, 0, 100, 100):  # past the end a read gives b""
    assert f.read(n) == ref.read(n)
  assert f.tell() == len(DATA)
  f.seek(2)
  assert f.read() == DATA[2:] and f.read() == b""
  buf = bytearray(4)
  f.seek(3)
  assert f.readinto(buf) == 4 and bytes(buf) == DATA[3:7] and f.tell() == 7
  assert io.BufferedReader(TensorIO(Tensor(DATA, device=device)), 4).read() == DATA  # through a buffer too

def test_tensorio_seek_clamps_to_the_tensor() -> None:
  # tinygrad's semantics: every seek lands in [0, len]
  f = TensorIO(Tensor(DATA))
  assert f.seek(1) == 1 and f.seek(-2, io.SEEK_END) == len(DATA) - 2 and f.seek(1, io.SEEK_CUR) == len(DATA) - 1
  assert f.seek(10, io.SEEK_CUR) == len(DATA) and f.seek(10, io.SEEK_END) == len(DATA)
  assert f.seek(-10, io.SEEK_SET) == 0 and f.tell() == 0
  with pytest.raises(ValueError, match="TensorIO.seek: bad whence 3"): f.seek(0, 3)

def test_tensorio_over_a_disk_tensor_reads_the_file(tmp_path) -> None:
  p = tmp_path / "f.bin"
  p.write_bytes(bytes(range(256)) * 4)
  f = TensorIO(disk_tensor(p))
  f.seek(1000)
  assert f.read() == (bytes(range(256)) * 4)[1000:]

def test_tensorio_empty_and_bad_input() -> None:
  assert TensorIO(Tensor(b"")).read() == b""
  with pytest.raises(ValueError, match=r"TensorIO: need a 1-D uint8 Tensor"): TensorIO(Tensor(DATA).reshape(1, -1))
  with pytest.raises(ValueError, match=r"TensorIO: need a 1-D uint8 Tensor"):
    TensorIO(Tensor([1, 2], dtype=dtypes.int64))
  with pytest.raises(ValueError, match=r"TensorIO: need a 1-D uint8 Tensor"): TensorIO(DATA)  # type: ignore[arg-type]
  f = TensorIO(Tensor(DATA))
  with pytest.raises(io.UnsupportedOperation, match="TensorIO.write: a TensorIO is read-only"): f.write(b"x")
  with pytest.raises(io.UnsupportedOperation, match="read-only"): f.writelines([b"x"])
  with TensorIO(Tensor(DATA)) as g: assert g.read(2) == b"He"
  with pytest.raises(ValueError, match="TensorIO.read: the TensorIO is closed"): g.read(1)
  with pytest.raises(ValueError, match="TensorIO.seek: the TensorIO is closed"): g.seek(0)

# ***** tar *****

FILES = {"a/file1.txt": b"Hello, World!", "a/b/file2.bin": bytes(range(5)), "empty.txt": b"", "512file": b"a" * 512,
         "long_file": b"some data" * 100, "very" * 15 + "/" + "very" * 15 + "_long_name.txt": b"Hello!!"}
LONG = {"very" * 200 + "_long_name.txt": b"a name longer than ustar's 256 characters"}

def make_tar(fmt: int, files: dict[str, bytes], compression: str = "") -> bytes:
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode=f"w:{compression}", format=fmt) as tar:
    for d in sorted({os.path.dirname(k) for k in files} - {""}):
      info = tarfile.TarInfo(d)
      info.type = tarfile.DIRTYPE
      tar.addfile(info)
    for name, content in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(content)
      tar.addfile(info, io.BytesIO(content))
      if len(name) < 100:  # links and fifos are not regular files: left out
        link = tarfile.TarInfo(name + ".lnk")
        link.type, link.linkname = tarfile.SYMTYPE, name
        tar.addfile(link)
        fifo = tarfile.TarInfo(name + ".fifo")
        fifo.type = tarfile.FIFOTYPE
        tar.addfile(fifo)
  return buf.getvalue()

def stdlib_tar(data: bytes) -> dict[str, bytes]:
  """What the tarfile module extracts: the reference."""
  with tarfile.open(fileobj=io.BytesIO(data)) as tar:
    return {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # type: ignore[union-attr]

FORMATS = [pytest.param(tarfile.USTAR_FORMAT, FILES, id="ustar"),
           pytest.param(tarfile.GNU_FORMAT, FILES | LONG, id="gnu"),
           pytest.param(tarfile.PAX_FORMAT, FILES | LONG, id="pax")]

@pytest.mark.parametrize("fmt, files", FORMATS)
def test_tar_extract_matches_tarfile_on_a_file(tmp_path, fmt: int, files: dict[str, bytes]) -> None:
  p = tmp_path / "a.tar"
  p.write_bytes(data := make_tar(fmt, files))
  got = tar_extract(p)
  assert set(got) == set(files) == set(stdlib_tar(data))
  for name, t in got.items():
    # views of the mapped file: DISK, uint8, nothing read until asked
    assert t.device == "DISK" and t.dtype is dtypes.uint8 and t.shape == (len(files[name]),)
    assert raw(t.to(Device.DEFAULT)) == files[name] == stdlib_tar(data)[name]
  assert tar_extract(str(p)).keys() == got.keys()  # a str path too

@pytest.mark.parametrize("fmt, files", FORMATS)
def test_tar_extract_from_a_tensor(device: str, fmt: int, files: dict[str, bytes]) -> None:
  t = Tensor(make_tar(fmt, files), device=device)
  got = tar_extract(t)
  assert set(got) == set(files)
  for name, v in got.items():
    assert v.device == device and len(v) == len(files[name])
    np.testing.assert_array_equal(v.numpy(), np.frombuffer(files[name], dtype=np.uint8))

@pytest.mark.parametrize("compression", ["gz", "bz2", "xz"])
def test_tar_extract_compressed(tmp_path, compression: str) -> None:
  p = tmp_path / f"a.tar.{compression}"
  p.write_bytes(data := make_tar(tarfile.PAX_FORMAT, FILES, compression))
  assert data[:2] != make_tar(tarfile.PAX_FORMAT, FILES)[:2]
  got = tar_extract(p)
  assert {k: raw(v.to(Device.DEFAULT)) for k, v in got.items()} == FILES == stdlib_tar(data)
  assert {k: raw(v) for k, v in tar_extract(Tensor(data)).items()} == FILES

def test_tar_extract_errors(tmp_path) -> None:
  with pytest.raises(FileNotFoundError): tar_extract(tmp_path / "missing.tar")
  for bad in (b"This is not a valid tar file", b"This is not a valid tar file" * 100, b""):
    with pytest.raises(tarfile.ReadError, match=r"tar_extract: <\d+-byte Tensor on \w+> is not a valid tar archive"):
      tar_extract(Tensor(bad))
  good = make_tar(tarfile.USTAR_FORMAT, {"x.bin": b"x" * 2000})
  # a header whose checksum doesn't match
  with pytest.raises(tarfile.ReadError, match="is not a valid tar archive"):
    tar_extract(Tensor(good[:100] + b"Z" + good[101:]))
  # the member's data cut short: tarfile itself doesn't notice, since it seeks past member data
  (p := tmp_path / "cut.tar").write_bytes(good[:1200])
  with pytest.raises(tarfile.ReadError, match=rf"tar_extract: {p}: member 'x.bin' \(2000 bytes at byte 512\) runs "
                                              r"past the end of the archive \(1200 bytes\); the archive is truncated"):
    tar_extract(p)
  with pytest.raises(tarfile.ReadError, match=r"can't decompress its gzip stream"):
    tar_extract(Tensor(b"\x1f\x8b" + b"x" * 40))
  with pytest.raises(TypeError, match=r"tar_extract: need a 1-D uint8 Tensor"): tar_extract(Tensor([1.0, 2.0]))
  with pytest.raises(TypeError, match=r"tar_extract: need a path or a 1-D uint8 Tensor, got int"):
    tar_extract(3)  # type: ignore[arg-type]

def test_tar_extract_refuses_sparse_members() -> None:
  # a GNU sparse member: its data holds only the non-hole parts, so a view would have the wrong bytes
  hdr = bytearray(tarfile.TarInfo("s.bin").tobuf(tarfile.GNU_FORMAT))
  hdr[156:157] = tarfile.GNUTYPE_SPARSE
  hdr[386:386 + 24] = b"%011o\0%011o\0" % (0, 0)  # one sparse map entry: (offset 0, 0 bytes)
  hdr[483:495] = b"%011o\0" % 10  # the file's real size
  hdr[148:156] = b"        "
  hdr[148:155] = b"%06o\0" % sum(hdr[:512])
  data = bytes(hdr) + b"\0" * 1024
  with pytest.raises(tarfile.ReadError, match="member 's.bin' is a sparse file"): tar_extract(Tensor(data))

# ***** zip *****

def make_zip(files: dict[str, tuple[bytes, int]], dirs: tuple[str, ...] = ("d/",)) -> bytes:
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as z:
    for d in dirs: z.writestr(zipfile.ZipInfo(d), b"")
    for name, (content, method) in files.items(): z.writestr(name, content, compress_type=method)
  return buf.getvalue()

ZFILES = {"d/stored.bin": (bytes(range(256)) * 3, zipfile.ZIP_STORED), "empty": (b"", zipfile.ZIP_STORED),
          "deflated.txt": (b"hello " * 300, zipfile.ZIP_DEFLATED), "b.bz2": (b"bz" * 500, zipfile.ZIP_BZIP2),
          "c.xz": (b"lzma!" * 100, zipfile.ZIP_LZMA)}

def test_zip_extract_matches_zipfile_on_a_file(tmp_path) -> None:
  p = tmp_path / "a.zip"
  p.write_bytes(data := make_zip(ZFILES))
  got = zip_extract(p)
  with zipfile.ZipFile(io.BytesIO(data)) as z: ref = {i.filename: z.read(i) for i in z.infolist() if not i.is_dir()}
  assert set(got) == set(ref) == set(ZFILES)  # the directory entry is left out
  for name, t in got.items():
    assert t.device == "DISK" and t.dtype is dtypes.uint8 and raw(t.to(Device.DEFAULT)) == ref[name]

def test_zip_extract_from_a_tensor(device: str) -> None:
  got = zip_extract(Tensor(make_zip(ZFILES), device=device))
  assert set(got) == set(ZFILES)
  for name, t in got.items(): assert t.device == device and raw(t) == ZFILES[name][0]

def test_zip_extract_local_extra_field() -> None:
  # the local header's extra field may be longer than the central directory's: the data starts after the local one
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as z:
    info = zipfile.ZipInfo("x.bin")
    info.extra = struct.pack("<HH", 0xCAFE, 4) + b"abcd"
    z.writestr(info, b"payload")
  data = bytearray(buf.getvalue())
  cd = data.index(b"PK\x01\x02")
  data[cd + 30:cd + 32] = b"\0\0"  # central extra length 0; its 8 extra bytes become part of the name area...
  data[cd + 28:cd + 30] = struct.pack("<H", 5)  # ...so the name length stays right only if we drop them
  del data[cd + 46 + 5:cd + 46 + 5 + 8]
  eocd = data.index(b"PK\x05\x06")
  data[eocd + 12:eocd + 16] = struct.pack("<I", struct.unpack("<I", data[eocd + 12:eocd + 16])[0] - 8)
  assert raw(zip_extract(Tensor(bytes(data)))["x.bin"]) == b"payload"

def test_zip_extract_errors(tmp_path) -> None:
  with pytest.raises(FileNotFoundError): zip_extract(tmp_path / "missing.zip")
  with pytest.raises(zipfile.BadZipFile, match=r"zip_extract: <\d+-byte Tensor on \w+>: not a valid zip archive"):
    zip_extract(Tensor(b"not a zip file at all" * 3))
  data = make_zip({"s.bin": (b"s" * 100, zipfile.ZIP_STORED), "z.txt": (b"z" * 1000, zipfile.ZIP_DEFLATED)}, ())
  # a broken local header signature
  with pytest.raises(zipfile.BadZipFile, match=r"member 's.bin' has no local header at byte 0"):
    zip_extract(Tensor(b"XX" + data[2:]))
  # corrupt deflate data: the CRC or the stream catches it
  z_at = data.index(b"z.txt") + 5
  with pytest.raises(zipfile.BadZipFile, match=r"can't read member 'z.txt'"):
    zip_extract(Tensor(data[:z_at + 3] + b"\xff\xff\xff" + data[z_at + 6:]))
  # an encrypted member (the flag bit in the central directory)
  cd = data.index(b"PK\x01\x02")
  enc = data[:cd + 8] + bytes([data[cd + 8] | 1]) + data[cd + 9:]
  with pytest.raises(zipfile.BadZipFile, match=r"member 's.bin' is encrypted"): zip_extract(Tensor(enc))
  # a stored member whose central directory claims more bytes than the archive holds
  big = data[:cd + 20] + struct.pack("<II", 10**6, 10**6) + data[cd + 28:]
  with pytest.raises(zipfile.BadZipFile, match=r"member 's.bin' \(1000000 bytes at byte 35\) runs past the end"):
    zip_extract(Tensor(big))
  # errors of the zip parser and the decompressors that aren't BadZipFile are reported as one (found by fuzzing)
  new_version = data[:cd + 6] + struct.pack("<H", 69) + data[cd + 8:]
  with pytest.raises(zipfile.BadZipFile, match=r"not a valid zip archive \(NotImplementedError: zip file version 6.9"):
    zip_extract(Tensor(new_version))
  lz = make_zip({"c.xz": (b"lzma!" * 100, zipfile.ZIP_LZMA)}, ())
  at = lz.index(b"c.xz") + 4 + 4  # the lc/lp/pb byte of lzma's properties header, after the name
  with pytest.raises(zipfile.BadZipFile, match=r"can't read member 'c.xz' \(LZMAError: Invalid or unsupported"):
    zip_extract(Tensor(lz[:at] + b"\xff" + lz[at + 1:]))
  # a local header offset past the end
  far = data[:cd + 42] + struct.pack("<I", 10**6) + data[cd + 46:]
  with pytest.raises(zipfile.BadZipFile, match=r"member 's.bin' has its local header at byte 1000000, outside"):
    zip_extract(Tensor(far))

# ***** torch_load over a Tensor (tinygrad takes the file's bytes as a Tensor) *****

def test_torch_load_from_a_tensor_and_from_a_tar_member(tmp_path) -> None:
  torch = pytest.importorskip("torch")
  sd = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor([1, -2], dtype=torch.int64)}
  torch.save(sd, p := tmp_path / "m.pt")
  torch.save(sd, legacy := tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
  want = {k: v.numpy() for k, v in sd.items()}
  def check(got: dict) -> None:
    assert got.keys() == want.keys()
    for k, v in got.items(): np.testing.assert_array_equal(v.to(Device.DEFAULT).numpy(), want[k])
  check(torch_load(Tensor(p.read_bytes())))
  check(torch_load(Tensor(legacy.read_bytes())))
  check(torch_load(disk_tensor(p)))
  # a .pt file inside a tar: its member view (a DISK view at an offset in the tar) loads as a file of its own
  with tarfile.open(tar := tmp_path / "a.tar", "w") as tf:
    tf.add(tmp_path / "legacy.pt", "x/legacy.pt")
    tf.add(p, "x/m.pt")
  members = tar_extract(tar)
  check(torch_load(members["x/m.pt"]))
  check(torch_load(members["x/legacy.pt"]))
  with pytest.raises(ValueError, match=r"torch_load: <0-byte Tensor on \w+> is not a torch.save file"):
    torch_load(Tensor(b""))
