"""PNG files of every colour type, bit depth and interlacing, written here
byte by byte (zlib and struct), so that the tests can make exactly the file
they need: Pillow writes neither 16-bit colour nor 2-bit grey nor Adam7.

``png_bytes(samples, colour_type, depth, ...)`` takes the samples as an
integer array of shape (h, w, channels) (channels: 1 grey, 2 grey+alpha,
3 RGB, 4 RGBA, 1 palette index) and returns the file's bytes.
"""

from __future__ import annotations

import struct
import zlib
from typing import Optional, Sequence

import numpy as np

CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
# Adam7: (first row, first column, row step, column step) of each pass.
ADAM7 = [
    (0, 0, 8, 8),
    (0, 4, 8, 8),
    (4, 0, 8, 4),
    (0, 2, 4, 4),
    (2, 0, 4, 2),
    (0, 1, 2, 2),
    (1, 0, 2, 1),
]


def chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


def _pack_rows(samples: np.ndarray, depth: int) -> list[bytes]:
    """Each row's bytes: samples of `depth` bits, big-endian, packed."""
    h, w, c = samples.shape
    rows = []
    for y in range(h):
        flat = samples[y].reshape(-1).astype(np.uint32)
        if depth == 16:
            rows.append(flat.astype(">u2").tobytes())
        elif depth == 8:
            rows.append(flat.astype(np.uint8).tobytes())
        else:
            per = 8 // depth
            n = (len(flat) + per - 1) // per
            out = bytearray(n)
            for i, v in enumerate(flat):
                out[i // per] |= int(v) << (8 - depth * (i % per + 1))
            rows.append(bytes(out))
    return rows


def _filtered(rows: Sequence[bytes], bpp: int, filters: Sequence[int]) -> bytes:
    """The scanlines with filter type filters[y % len(filters)] each."""
    out = bytearray()
    prev = bytes(len(rows[0])) if rows else b""
    for y, row in enumerate(rows):
        f = filters[y % len(filters)]
        r = np.frombuffer(row, np.uint8).astype(np.int32)
        p = np.frombuffer(prev, np.uint8).astype(np.int32)
        a = np.concatenate([np.zeros(bpp, np.int32), r[:-bpp]]) if len(r) else r
        c = np.concatenate([np.zeros(bpp, np.int32), p[:-bpp]]) if len(r) else r
        if f == 0:
            d = r
        elif f == 1:
            d = r - a
        elif f == 2:
            d = r - p
        elif f == 3:
            d = r - (a + p) // 2
        else:
            pa, pb, pc = np.abs(p - c), np.abs(a - c), np.abs(a + p - 2 * c)
            pred = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, p, c))
            d = r - pred
        out.append(f)
        out += (d & 0xFF).astype(np.uint8).tobytes()
        prev = row
    return bytes(out)


def raw_data(
    samples: np.ndarray,
    depth: int,
    interlace: bool,
    filters: Sequence[int] = (0, 1, 2, 3, 4),
) -> bytes:
    """The uncompressed image data (filtered scanlines, by pass)."""
    c = samples.shape[2]
    bpp = max(1, c * depth // 8)
    if not interlace:
        return _filtered(_pack_rows(samples, depth), bpp, filters)
    out = b""
    for y0, x0, dy, dx in ADAM7:
        sub = samples[y0::dy, x0::dx]
        if sub.shape[0] and sub.shape[1]:
            out += _filtered(_pack_rows(sub, depth), bpp, filters)
    return out


def scanline_starts(h: int, w: int, channels: int, depth: int, interlace: bool):
    """Where each scanline's filter byte is in raw_data()'s bytes, in the
    order the file holds them (Adam7: pass by pass)."""
    boxes = [(h, w)]
    if interlace:
        boxes = [
            (len(range(y0, h, dy)), len(range(x0, w, dx))) for y0, x0, dy, dx in ADAM7
        ]
    out, at = [], 0
    for rows, cols in boxes:
        if rows == 0 or cols == 0:
            continue  # an empty pass has no scanlines
        rowbytes = -(-cols * channels * depth // 8)
        for _ in range(rows):
            out.append(at)
            at += 1 + rowbytes
    return out


def png_bytes(
    samples: np.ndarray,
    colour_type: int,
    depth: int,
    interlace: bool = False,
    palette: Optional[np.ndarray] = None,
    trns: Optional[bytes] = None,
    idat_pieces: int = 1,
    extra: Sequence[bytes] = (),
    level: int = 6,
    raw: Optional[bytes] = None,
) -> bytes:
    """A PNG of `samples` (h, w, channels), in the given colour type and
    bit depth; `palette` (n, 3) for colour type 3; `trns` the tRNS
    chunk's data; the data split into `idat_pieces` IDAT chunks; `extra`
    chunks (whole, from chunk()) before the first IDAT; `raw` the
    uncompressed image data instead of raw_data()'s (bytes changed on
    purpose, or more of them than the image holds)."""
    h, w = samples.shape[:2]
    assert samples.shape[2] == CHANNELS[colour_type]
    ihdr = struct.pack(">IIBBBBB", w, h, depth, colour_type, 0, 0, int(interlace))
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    out += b"".join(extra)
    if palette is not None:
        out += chunk(b"PLTE", np.asarray(palette, np.uint8).tobytes())
    if trns is not None:
        out += chunk(b"tRNS", trns)
    if raw is None:
        raw = raw_data(samples, depth, interlace)
    z = zlib.compress(raw, level)
    step = max(1, -(-len(z) // idat_pieces))
    for i in range(0, len(z), step):
        out += chunk(b"IDAT", z[i : i + step])
    return out + chunk(b"IEND", b"")


def random_samples(
    rng: np.random.Generator,
    h: int,
    w: int,
    colour_type: int,
    depth: int,
    palette_len: int = 0,
) -> np.ndarray:
    """Random samples for a file of that type and depth (palette indexes
    below palette_len)."""
    top = min(palette_len, 1 << depth) if colour_type == 3 else 1 << depth
    return rng.integers(0, top, size=(h, w, CHANNELS[colour_type]), dtype=np.int64)
