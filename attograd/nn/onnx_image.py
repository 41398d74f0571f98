"""Image decoding for ONNX's ImageDecoder: PNG, BMP and PNM with the standard library alone (zlib), other formats
(JPEG, TIFF, WebP, ...) through Pillow when it is installed. Each decoder gives (height, width, RGB bytes)."""
from __future__ import annotations
import struct, zlib
from typing import Callable

class ImageError(ValueError):
  """An encoded image attograd can't decode: a corrupt stream or a format without a decoder here."""

Decoded = tuple[int, int, bytes]  # (height, width, height * width * 3 bytes of RGB)

# ***** PNG (www.w3.org/TR/png) *****

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # color type -> samples per pixel (gray, RGB, palette, gray+A, RGBA)
# Adam7 passes: (first row, first column, row step, column step)
_ADAM7 = ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1))

def _paeth(a: int, b: int, c: int) -> int:
  p = a + b - c
  pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
  return a if pa <= pb and pa <= pc else b if pb <= pc else c

def _unfilter(data: bytes, pos: int, rows: int, stride: int, bpp: int) -> tuple[list[bytearray], int]:
  """Undo each scanline's filter (None, Sub, Up, Average, Paeth); returns the raw rows and the position after them."""
  out, prev = [], bytearray(stride)
  for _ in range(rows):
    if pos + 1 + stride > len(data): raise ImageError("PNG: the image data is shorter than its size says")
    kind, line = data[pos], bytearray(data[pos + 1:pos + 1 + stride])
    pos += 1 + stride
    if kind == 1:
      for i in range(bpp, stride): line[i] = (line[i] + line[i - bpp]) & 0xFF
    elif kind == 2:
      for i in range(stride): line[i] = (line[i] + prev[i]) & 0xFF
    elif kind == 3:
      for i in range(stride): line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 0xFF
    elif kind == 4:
      for i in range(stride):
        left, upleft = (line[i - bpp], prev[i - bpp]) if i >= bpp else (0, 0)
        line[i] = (line[i] + _paeth(left, prev[i], upleft)) & 0xFF
    elif kind != 0: raise ImageError(f"PNG: unknown scanline filter {kind}")
    out.append(line)
    prev = line
  return out, pos

def _samples(line: bytearray, n: int, depth: int) -> list[int]:
  """The first n samples of a raw scanline at a bit depth of 1, 2, 4, 8 or 16 (16-bit keeps its high byte)."""
  if depth == 8: return list(line[:n])
  if depth == 16: return list(line[0:2 * n:2])
  per, mask = 8 // depth, (1 << depth) - 1
  return [(line[i // per] >> (8 - depth * (i % per + 1))) & mask for i in range(n)]

def decode_png(data: bytes) -> Decoded:
  pos, idat, header, palette = 8, bytearray(), None, None
  while True:
    if pos + 12 > len(data): raise ImageError("PNG: the stream ends before its IEND chunk")
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if len(body) != length or pos + 12 + length > len(data): raise ImageError(f"PNG: chunk {kind!r} is cut off")
    (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
    if zlib.crc32(kind + body) != crc: raise ImageError(f"PNG: chunk {kind!r} fails its CRC check")
    pos += 12 + length
    if kind == b"IHDR": header = struct.unpack(">IIBBBBB", body)
    elif kind == b"PLTE": palette = body
    elif kind == b"IDAT": idat += body
    elif kind == b"IEND": break
    # other chunks (tRNS among them: transparency goes with the alpha channel, the output is RGB) are skipped
  if header is None: raise ImageError("PNG: no IHDR chunk")
  W, H, depth, color, _, _, interlace = header
  if color not in _PNG_CHANNELS or depth not in (1, 2, 4, 8, 16) or (color == 3 and depth == 16) or \
     (color in (2, 4, 6) and depth < 8):
    raise ImageError(f"PNG: color type {color} with bit depth {depth} is not a valid PNG")
  if W == 0 or H == 0 or W * H > 1 << 28: raise ImageError(f"PNG: image size {W}x{H} is refused")
  if color == 3 and palette is None: raise ImageError("PNG: a palette image without a PLTE chunk")
  ch = _PNG_CHANNELS[color]
  bpp = max(1, ch * depth // 8)
  passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
  size = sum(len(range(r0, H, dr)) * (1 + (len(range(c0, W, dc)) * ch * depth + 7) // 8)
             for r0, c0, dr, dc in passes if len(range(c0, W, dc)))
  try: raw = zlib.decompressobj().decompress(bytes(idat), size)  # inflating no further than the image needs
  except zlib.error as e: raise ImageError(f"PNG: the image data doesn't inflate ({e})") from None
  if len(raw) < size: raise ImageError("PNG: the image data is shorter than its size says")  # before allocating
  pixels: list[list[int]] = [[0] * (W * ch) for _ in range(H)]  # samples per row, before color conversion
  pos = 0
  for r0, c0, dr, dc in passes:
    rows, cols = len(range(r0, H, dr)), len(range(c0, W, dc))
    if rows == 0 or cols == 0: continue
    lines, pos = _unfilter(raw, pos, rows, (cols * ch * depth + 7) // 8, bpp)
    for r, line in zip(range(r0, H, dr), lines):
      vals, dst = _samples(line, cols * ch, depth), pixels[r]
      for j, c in enumerate(range(c0, W, dc)): dst[c * ch:(c + 1) * ch] = vals[j * ch:(j + 1) * ch]
  return H, W, _to_rgb(pixels, W, color, depth, palette)

def _to_rgb(pixels: list[list[int]], W: int, color: int, depth: int, palette: bytes | None) -> bytes:
  out = bytearray()
  if color == 3:
    assert palette is not None
    pal = palette + bytes(768 - len(palette)) if len(palette) < 768 else palette
    for row in pixels:
      for i in row: out += pal[3 * i:3 * i + 3]
    return bytes(out)
  # gray samples below 8 bits are scaled to 0..255 (1 -> 255 at depth 1), as decoders show them
  scale = 255 // ((1 << depth) - 1) if depth < 8 else 1
  for row in pixels:
    if color in (0, 4):
      step = 1 if color == 0 else 2
      for g in row[::step]: out += bytes((g * scale,) * 3)
    else:
      step = 3 if color == 2 else 4
      for i in range(0, len(row), step): out += bytes(row[i:i + 3])
  return bytes(out)

# ***** BMP (Windows bitmap: BITMAPCOREHEADER / BITMAPINFOHEADER and its V4, V5 extensions) *****

def _mask_shift(mask: int) -> tuple[int, int]:
  """A bitfield mask's shift and width, to scale its value to 8 bits."""
  if mask == 0: return 0, 0
  shift = (mask & -mask).bit_length() - 1
  return shift, (mask >> shift).bit_length()

def decode_bmp(data: bytes) -> Decoded:
  if len(data) < 26: raise ImageError("BMP: the stream is shorter than its headers")
  (offset,) = struct.unpack("<I", data[10:14])
  (hsize,) = struct.unpack("<I", data[14:18])
  if hsize == 12:
    W, H, _, bits = struct.unpack("<HhHH", data[18:26])
    compression, ncolors, pal_entry = 0, 0, 3
  elif hsize >= 40 and len(data) >= 54:
    W, H, _, bits, compression, _, _, _, ncolors, _ = struct.unpack("<iiHHIIiiII", data[18:54])
    pal_entry = 4
  else: raise ImageError(f"BMP: unknown header size {hsize}")
  top_down, H = H < 0, abs(H)
  if W <= 0 or H == 0 or W * H > 1 << 28: raise ImageError(f"BMP: image size {W}x{H} is refused")
  if compression not in (0, 3, 6):
    raise ImageError(f"BMP: compression {compression} (RLE, JPEG or PNG inside a BMP) is not supported")
  if bits not in (1, 4, 8, 16, 24, 32): raise ImageError(f"BMP: {bits} bits per pixel is not supported")
  masks: tuple[int, int, int] | None = None
  if bits in (16, 32):
    if compression in (3, 6):
      # the masks follow a 40-byte header, or sit inside a V4/V5 header
      masks = struct.unpack("<III", data[54:66]) if len(data) >= 66 else None
      if masks is None: raise ImageError("BMP: the bitfield masks are cut off")
    else: masks = (0x7C00, 0x03E0, 0x001F) if bits == 16 else (0xFF0000, 0xFF00, 0xFF)
  palette = b""
  if bits <= 8:
    n = ncolors or (1 << bits)
    start = 14 + hsize + (12 if hsize == 40 and compression == 3 else 0)
    palette = data[start:start + n * pal_entry]
    if len(palette) != n * pal_entry: raise ImageError("BMP: the palette is cut off")
  stride = (W * bits + 31) // 32 * 4
  if offset + stride * H > len(data): raise ImageError("BMP: the pixel data is shorter than its size says")
  fields = [_mask_shift(m) for m in masks] if masks else []
  out = bytearray()
  for r in range(H):
    src = r if top_down else H - 1 - r
    line = data[offset + src * stride:offset + (src + 1) * stride]
    if bits == 24:
      for c in range(W): out += bytes((line[3 * c + 2], line[3 * c + 1], line[3 * c]))
    elif masks:
      size = bits // 8
      for c in range(W):
        v = int.from_bytes(line[size * c:size * (c + 1)], "little")
        for m, (shift, width) in zip(masks, fields):
          out.append(((v & m) >> shift) * 255 // ((1 << width) - 1) if width else 0)
    else:
      for i in _samples(bytearray(line), W, bits):
        if i * pal_entry + 3 > len(palette): raise ImageError(f"BMP: pixel index {i} is past the palette")
        out += bytes((palette[i * pal_entry + 2], palette[i * pal_entry + 1], palette[i * pal_entry]))
  return H, W, bytes(out)

# ***** PNM (Netpbm: P1-P6) *****

def _pnm_tokens(data: bytes, count: int, pos: int) -> tuple[list[int], int]:
  """The next `count` whitespace-separated integers of a Netpbm header (# starts a comment to the line's end)."""
  vals: list[int] = []
  while len(vals) < count:
    while pos < len(data) and (data[pos:pos + 1].isspace() or data[pos] == ord("#")):
      if data[pos] == ord("#"):
        while pos < len(data) and data[pos] not in b"\r\n": pos += 1
      else: pos += 1
    end = pos
    while end < len(data) and data[end:end + 1].isdigit(): end += 1
    if end == pos: raise ImageError("PNM: a malformed header or sample")
    vals.append(int(data[pos:end]))
    pos = end
  return vals, pos

def decode_pnm(data: bytes) -> Decoded:
  kind = data[1:2]
  bitmap = kind in (b"1", b"4")
  (W, H), pos = _pnm_tokens(data, 2, 2)
  maxval = 1
  if not bitmap: (maxval,), pos = _pnm_tokens(data, 1, pos)
  if W <= 0 or H <= 0 or W * H > 1 << 28 or not 0 < maxval < 65536:
    raise ImageError(f"PNM: image size {W}x{H} or maxval {maxval} is refused")
  ch = 3 if kind in (b"3", b"6") else 1
  n = W * H * ch
  if kind in (b"1", b"2", b"3"): vals, _ = _pnm_tokens(data, n, pos)
  else:
    pos += 1  # the single whitespace after the header
    if kind == b"4":
      stride = (W + 7) // 8
      body = data[pos:pos + stride * H]
      if len(body) != stride * H: raise ImageError("PNM: the pixel data is shorter than its size says")
      vals = [v for r in range(H) for v in _samples(bytearray(body[r * stride:(r + 1) * stride]), W, 1)]
    else:
      size = 2 if maxval > 255 else 1
      body = data[pos:pos + n * size]
      if len(body) != n * size: raise ImageError("PNM: the pixel data is shorter than its size says")
      vals = list(body) if size == 1 else list(struct.unpack(f">{n}H", body))
  if any(v > maxval for v in vals): raise ImageError(f"PNM: a sample is above the maxval {maxval}")
  if bitmap: gray = [0 if v else 255 for v in vals]  # a bitmap's 1 is black
  else: gray = vals if maxval == 255 else [(v * 255 + maxval // 2) // maxval for v in vals]
  if ch == 3: return H, W, bytes(gray)
  return H, W, bytes(g for g in gray for _ in range(3))

# ***** the dispatcher *****

def _pillow(data: bytes, fmt: str) -> Decoded:
  try: from PIL import Image
  except ImportError:
    raise ImageError(f"{fmt} images need Pillow to decode (pip install 'attograd[images]'); attograd decodes PNG, "
                     "BMP and PNM itself") from None
  import io
  try: img = Image.open(io.BytesIO(data)).convert("RGB")
  except Exception as e: raise ImageError(f"{fmt}: Pillow can't decode the stream ({e})") from None
  return img.height, img.width, img.tobytes()

def sniff(data: bytes) -> str:
  """The image format by the stream's magic bytes."""
  if data.startswith(PNG_SIGNATURE): return "PNG"
  if data.startswith(b"BM"): return "BMP"
  if len(data) > 2 and data[0:1] == b"P" and data[1:2] in b"123456" and data[2:3].isspace(): return "PNM"
  if data.startswith(b"\xff\xd8\xff"): return "JPEG"
  if data.startswith((b"\x00\x00\x00\x0cjP  ", b"\xff\x4f\xff\x51")): return "JPEG 2000"
  if data.startswith((b"II*\x00", b"MM\x00*")): return "TIFF"
  if data[:4] == b"RIFF" and data[8:12] == b"WEBP": return "WebP"
  return "unknown"

DECODERS: dict[str, Callable[[bytes], Decoded]] = {"PNG": decode_png, "BMP": decode_bmp, "PNM": decode_pnm}

def decode_image(data: bytes) -> Decoded:
  """Decode an encoded image to (height, width, RGB bytes); raises ImageError naming the format on failure."""
  fmt = sniff(data)
  if fmt == "unknown": raise ImageError(f"not a known image format (the stream starts {data[:8]!r})")
  if fmt in DECODERS:
    try: return DECODERS[fmt](data)
    except (struct.error, IndexError) as e: raise ImageError(f"{fmt}: the stream is corrupt ({e})") from None
  return _pillow(data, fmt)
