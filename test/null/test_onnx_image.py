"""attograd.nn.onnx_image: the stdlib PNG, BMP and PNM decoders behind ONNX's ImageDecoder, on images this file encodes
(every PNG color type, bit depth, scanline filter and interlacing; BMP palettes, bitfields and both row orders; every
Netpbm kind), and corrupt streams refused with an ImageError naming the format."""
from __future__ import annotations
import struct, zlib
import pytest
from attograd.nn.onnx_image import ImageError, decode_image, sniff

np = pytest.importorskip("numpy")
_rng = np.random.default_rng(0)

def _rgb(data: tuple[int, int, bytes]) -> np.ndarray:
  H, W, raw = data
  return np.frombuffer(raw, np.uint8).reshape(H, W, 3)

# ***** PNG *****

def _chunk(kind: bytes, body: bytes) -> bytes:
  return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

def _pack(samples: np.ndarray, depth: int) -> bytes:
  if depth == 16: return samples.astype(">u2").tobytes()
  if depth == 8: return samples.astype(np.uint8).tobytes()
  per = 8 // depth
  padded = np.concatenate([samples, np.zeros((-len(samples)) % per, samples.dtype)]).reshape(-1, per)
  shifts = 8 - depth * (np.arange(per) + 1)
  return (padded << shifts).sum(1).astype(np.uint8).tobytes()

def _filter(line: bytes, prev: bytes, kind: int, bpp: int) -> bytes:
  out = bytearray([kind])
  for i, x in enumerate(line):
    a, b, c = (line[i - bpp] if i >= bpp else 0), prev[i], (prev[i - bpp] if i >= bpp else 0)
    p = a + b - c
    paeth = a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c
    out.append((x - (0, a, b, (a + b) // 2, paeth)[kind]) & 0xFF)
  return bytes(out)

_ADAM7 = ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1))

def _png(img: np.ndarray, color: int, depth: int, interlace: bool = False, palette: bytes | None = None) -> bytes:
  """img is (H, W, channels) of samples; every row gets the next of the five filters in turn."""
  H, W, ch = img.shape
  bpp, raw, kind = max(1, ch * depth // 8), bytearray(), 0
  for r0, c0, dr, dc in (_ADAM7 if interlace else ((0, 0, 1, 1),)):
    sub = img[r0::dr, c0::dc]
    if sub.size == 0: continue
    prev = bytes(len(_pack(sub[0].reshape(-1), depth)))
    for row in sub:
      line = _pack(row.reshape(-1), depth)
      raw += _filter(line, prev, kind % 5, bpp)
      prev, kind = line, kind + 1
  ihdr = struct.pack(">IIBBBBB", W, H, depth, color, 0, 0, int(interlace))
  return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + (_chunk(b"PLTE", palette) if palette else b"") + \
    _chunk(b"tEXt", b"comment\x00skipped") + _chunk(b"IDAT", zlib.compress(bytes(raw))) + _chunk(b"IEND", b"")

@pytest.mark.parametrize("interlace", [False, True])
@pytest.mark.parametrize("color,depth", [(0, 1), (0, 2), (0, 4), (0, 8), (0, 16), (2, 8), (2, 16), (3, 1), (3, 4),
                                         (3, 8), (4, 8), (4, 16), (6, 8), (6, 16)])
def test_png(color, depth, interlace):
  H, W = 11, 13  # not multiples of 8: every Adam7 pass is ragged
  ch = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
  img = _rng.integers(0, 1 << depth, (H, W, ch))
  palette = _rng.integers(0, 256, 3 << depth).astype(np.uint8).tobytes() if color == 3 else None
  got = _rgb(decode_image(_png(img, color, depth, interlace, palette)))
  if color == 3: want = np.frombuffer(palette, np.uint8).reshape(-1, 3)[img[..., 0]]
  else:
    to8 = (img >> 8) if depth == 16 else img * (255 // ((1 << depth) - 1))
    want = np.repeat(to8[..., :1], 3, axis=2) if color in (0, 4) else to8[..., :3]
  np.testing.assert_array_equal(got, want)

def test_png_corrupt_streams():
  good = _png(_rng.integers(0, 256, (4, 4, 3)), 2, 8)
  assert _rgb(decode_image(good)).shape == (4, 4, 3)
  bad_crc = bytearray(good)
  bad_crc[30] ^= 1  # inside IHDR
  cases = {"CRC": bytes(bad_crc), "ends before": good[:-12], "cut off": good[:55]}  # 55: inside the tEXt chunk
  for msg, data in cases.items():
    with pytest.raises(ImageError, match=f"PNG.*{msg}"): decode_image(data)
  ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 4, 2, 0, 0, 0))
  with pytest.raises(ImageError, match="PNG: color type 2 with bit depth 4"):
    decode_image(b"\x89PNG\r\n\x1a\n" + ihdr + _chunk(b"IEND", b""))
  short = _png(_rng.integers(0, 256, (4, 4, 3)), 2, 8)
  idat_at = short.index(b"IDAT") - 4
  (n,) = struct.unpack(">I", short[idat_at:idat_at + 4])
  junk = _chunk(b"IDAT", b"not zlib at all")
  with pytest.raises(ImageError, match="PNG: the image data doesn't inflate"):
    decode_image(short[:idat_at] + junk + short[idat_at + 12 + n:])
  little = _chunk(b"IDAT", zlib.compress(b"\x00" * 5))
  with pytest.raises(ImageError, match="PNG: the image data is shorter"):
    decode_image(short[:idat_at] + little + short[idat_at + 12 + n:])
  bad_filter = _chunk(b"IDAT", zlib.compress((b"\x09" + b"\x00" * 12) * 4))
  with pytest.raises(ImageError, match="PNG: unknown scanline filter 9"):
    decode_image(short[:idat_at] + bad_filter + short[idat_at + 12 + n:])

# ***** BMP *****

def _bmp(img: np.ndarray, bits: int, top_down: bool = False, bitfields: tuple[int, int, int] | None = None,
         core: bool = False) -> bytes:
  """img: (H, W, 3) RGB for 16/24/32 bits, (H, W) palette indices for 1/4/8 bits (the palette is _PAL)."""
  H, W = img.shape[:2]
  stride = (W * bits + 31) // 32 * 4
  rows = []
  for row in img:
    if bits <= 8: line = _pack(row, bits)
    elif bits == 24: line = row[:, ::-1].astype(np.uint8).tobytes()
    else:
      masks = bitfields or ((0x7C00, 0x03E0, 0x001F) if bits == 16 else (0xFF0000, 0xFF00, 0xFF))
      vals = np.zeros(W, np.int64)
      for c, m in enumerate(masks):
        shift, width = (m & -m).bit_length() - 1, bin(m).count("1")
        vals |= ((row[:, c].astype(np.int64) * ((1 << width) - 1) // 255) << shift)
      line = vals.astype("<u2" if bits == 16 else "<u4").tobytes()
    rows.append(line + bytes(stride - len(line)))
  pixels = b"".join(rows if top_down else rows[::-1])
  pal_entry = 3 if core else 4
  palette = b"".join(bytes((b, g, r) + (() if core else (0,))) for r, g, b in _PAL[:1 << bits]) if bits <= 8 else b""
  extra = struct.pack("<III", *bitfields) if bitfields else b""
  if core: header = struct.pack("<IHhHH", 12, W, -H if top_down else H, 1, bits)
  else:
    header = struct.pack("<IiiHHIIiiII", 40, W, -H if top_down else H, 1, bits, 3 if bitfields else 0, len(pixels),
                         2835, 2835, 0, 0)
  offset = 14 + len(header) + len(extra) + len(palette)
  del pal_entry
  return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + header + extra + palette + pixels

def _through_bits(v: np.ndarray, bits: int) -> np.ndarray:
  """8-bit values as they come back from a `bits`-wide bitfield (scaled down, then up to 0..255)."""
  top = (1 << bits) - 1
  return (v.astype(np.int64) * top // 255 * 255 // top).astype(np.uint8)

_PAL = [tuple(int(v) for v in c) for c in _rng.integers(0, 256, (256, 3))]

@pytest.mark.parametrize("bits", [1, 4, 8, 16, 24, 32])
@pytest.mark.parametrize("top_down", [False, True])
def test_bmp(bits, top_down):
  H, W = 5, 7
  if bits <= 8:
    idx = _rng.integers(0, 1 << bits, (H, W))
    img, want = idx, np.array(_PAL, np.uint8)[idx]
  else:
    img = _rng.integers(0, 256, (H, W, 3)).astype(np.uint8)
    want = _through_bits(img, 5) if bits == 16 else img
  np.testing.assert_array_equal(_rgb(decode_image(_bmp(img, bits, top_down))), want)

def test_bmp_bitfields_and_core_header():
  want = _rng.integers(0, 256, (3, 4, 3)).astype(np.uint8)
  np.testing.assert_array_equal(_rgb(decode_image(_bmp(want, 32, bitfields=(0xFF, 0xFF00, 0xFF0000)))), want)
  w565 = _through_bits(want, 5)
  w565[..., 1] = _through_bits(want[..., 1], 6)
  np.testing.assert_array_equal(_rgb(decode_image(_bmp(want, 16, bitfields=(0xF800, 0x07E0, 0x001F)))), w565)
  idx = _rng.integers(0, 256, (3, 4))
  np.testing.assert_array_equal(_rgb(decode_image(_bmp(idx, 8, core=True))), np.array(_PAL, np.uint8)[idx])

def test_bmp_corrupt_streams():
  good = _bmp(_rng.integers(0, 256, (3, 4, 3)), 24)
  with pytest.raises(ImageError, match="BMP: the pixel data is shorter"): decode_image(good[:-4])
  rle = good[:30] + struct.pack("<I", 1) + good[34:]
  with pytest.raises(ImageError, match="BMP: compression 1"): decode_image(rle)
  with pytest.raises(ImageError, match="BMP: unknown header size"): decode_image(good[:14] + b"\x07" + good[15:])
  with pytest.raises(ImageError, match="BMP: the stream is shorter"): decode_image(good[:20])

# ***** PNM *****

@pytest.mark.parametrize("kind", ["P1", "P2", "P3", "P4", "P5", "P6"])
def test_pnm(kind):
  H, W = 3, 10
  ch = 3 if kind in ("P3", "P6") else 1
  maxval = 1 if kind in ("P1", "P4") else 255
  img = _rng.integers(0, maxval + 1, (H, W, ch))
  head = f"{kind}\n# a comment\n{W} {H}\n" + ("" if maxval == 1 else f"{maxval}\n")
  if kind in ("P1", "P2", "P3"): body = " ".join(str(v) for v in img.reshape(-1)).encode()
  elif kind == "P4": body = b"".join(_pack(row[:, 0], 1) for row in img)
  else: body = img.astype(np.uint8).tobytes()
  got = _rgb(decode_image(head.encode() + body))
  want = (1 - img) * 255 if maxval == 1 else img
  np.testing.assert_array_equal(got, np.broadcast_to(want, (H, W, 3)).astype(np.uint8))

def test_pnm_other_maxvals():
  img = np.array([[0, 7, 15]])
  got = _rgb(decode_image(b"P2 3 1 15 " + " ".join(str(v) for v in img.reshape(-1)).encode()))
  assert got[0, :, 0].tolist() == [0, 119, 255]
  wide = np.array([[0, 1000, 65535]], ">u2")
  got = _rgb(decode_image(b"P5 3 1 65535\n" + wide.tobytes()))
  assert got[0, :, 0].tolist() == [0, 4, 255]
  with pytest.raises(ImageError, match="PNM: the pixel data is shorter"): decode_image(b"P5 3 1 255\n\x00")
  with pytest.raises(ImageError, match="PNM: a malformed header"): decode_image(b"P2 3 x")

# ***** formats *****

def test_sniff_and_formats_without_a_decoder():
  assert sniff(b"\xff\xd8\xff\xe0") == "JPEG" and sniff(b"II*\x00") == "TIFF" and sniff(b"RIFF....WEBP") == "WebP"
  with pytest.raises(ImageError, match="not a known image format"): decode_image(b"GIF89a")
  try: import PIL  # noqa: F401
  except ImportError:
    with pytest.raises(ImageError, match="TIFF images need Pillow"): decode_image(b"II*\x00" + b"\x00" * 10)

def test_damaged_streams_only_raise_image_error():
  # every byte flip and cut of valid images: the decoders refuse them with ImageError or decode something, no other
  # exception escapes
  import random
  rng = random.Random(0)
  seeds = [_png(_rng.integers(0, 256, (5, 6, 3)), 2, 8, interlace=True),
           _png(_rng.integers(0, 4, (5, 6, 1)), 3, 2, palette=bytes(range(12))),
           _bmp(_rng.integers(0, 16, (4, 5)), 4), _bmp(_rng.integers(0, 256, (4, 5, 3)), 16),
           b"P3 2 2 255 1 2 3 4 5 6 7 8 9 10 11 12", b"P5 2 2 255\n\x01\x02\x03\x04"]
  for seed in seeds:
    for _ in range(150):
      data = bytearray(seed)
      for _ in range(rng.randrange(1, 4)):
        data[rng.randrange(len(data))] = rng.randrange(256)
      if rng.random() < 0.3: data = data[:rng.randrange(len(data))]
      try: decode_image(bytes(data))
      except ImageError: pass

@pytest.mark.parametrize("W,H,depth,color", [(1 << 14, 1 << 14, 8, 6), (0, 5, 8, 2), (1 << 20, 1 << 20, 8, 2),
                                             (4, 4, 3, 0), (4, 4, 8, 5), (4, 4, 16, 3)])
def test_png_hostile_headers(W, H, depth, color):
  # a header with a valid CRC that claims a huge or impossible image: refused before anything is allocated
  ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, depth, color, 0, 0, 0))
  with pytest.raises(ImageError, match="PNG"):
    decode_image(b"\x89PNG\r\n\x1a\n" + ihdr + _chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + _chunk(b"IEND", b""))
