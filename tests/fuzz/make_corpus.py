"""Writes the fuzzers' seed corpora: for fuzz_decode.c (the default),
valid and odd JPEGs made with Pillow; for fuzz_png and fuzz_webp (the
same harness, "png" and "webp"), PNGs of every colour type, bit depth and
interlacing (tests/pngmake.py) with PngSuite (tests/data), and WebPs
lossy, lossless, with alpha and animated, whole and cut; for fuzz_http.c
("http"), HTTP response header blocks; for fuzz_tar.py ("tar"), tar
shards; for fuzz_fields.py ("fields"), captions, JSON documents (in
UTF-8, -16 and -32) and integers, good and bad; for fuzz_masks.c
("masks"), COCO strings, counts and polygons (see mask_seeds); for
fuzz_mask_png.c ("mask_png"), segmentation PNGs (see mask_png_seeds).

Each file is an 8-byte header that fuzz_decode.c reads as the transform
choice (kind, output size, resize, flip, layout, sample index), followed by
a JPEG. The JPEGs cover every subsampling, progressive, grayscale, CMYK,
restart markers, tiny and odd sizes, EXIF and ICC segments, and truncated
or header-only files, so the fuzzer starts from every decoder path.

A fuzz_http.c seed is 8 bytes (the range asked for and how the body
arrives, see fuzz_http.c) and a header block as a server sends it: range
answers right and wrong, whole objects, errors with S3 bodies, redirects
and 100 Continue before the answer, HTTP/2 status lines, odd spacing and
numbers past 64 bits. A fuzz_tar.py seed is a whole tar shard as
tarindex.py reads them: WebDataset members, directories and links, long
names (GNU and pax), no end-of-archive block, cut short, and compressed.

Usage: python3 make_corpus.py OUT_DIR
       [decode|png|webp|http|tar|fields|masks|mask_png]
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import struct
import sys
import tarfile

import numpy as np
from PIL import Image


def image(h: int, w: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = (x * 255 // max(w - 1, 1) + y * 127 // max(h - 1, 1)) % 256
    noise = rng.integers(0, 40, (h, w, 3))
    rgb = np.clip(base[..., None] + noise - 20, 0, 255).astype(np.uint8)
    return Image.fromarray(rgb)


def jpeg(img: Image.Image, **opts) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", **opts)
    return buf.getvalue()


def icc_profile() -> bytes:
    try:
        from PIL import ImageCms

        return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    except ImportError:  # Pillow built without littleCMS
        return b"\0" * 600


def exif() -> bytes:
    e = Image.Exif()
    e[0x0112] = 6  # orientation
    e[0x010F] = "ringloader"
    return e.tobytes()


def cjpeg_411(img: Image.Image) -> list[bytes]:
    """4:1:1 (4x1 luma sampling), which Pillow cannot write; made with
    libjpeg-turbo's cjpeg when it is installed, else left out."""
    if shutil.which("cjpeg") is None:
        return []
    ppm = io.BytesIO()
    img.save(ppm, "PPM")
    out = []
    for args in (["-sample", "4x1"], ["-sample", "4x1", "-progressive"]):
        proc = subprocess.run(
            ["cjpeg", *args], input=ppm.getvalue(), capture_output=True, check=True
        )
        out.append(proc.stdout)
    return out


def seeds() -> list[bytes]:
    out = []
    sizes = [(1, 1), (8, 8), (16, 16), (17, 23), (31, 7), (64, 48), (130, 97)]
    for i, (h, w) in enumerate(sizes):
        img = image(h, w, i)
        for sub in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
            out.append(jpeg(img, quality=90, subsampling=sub))
        out.append(jpeg(img, quality=75, progressive=True))
        out.append(jpeg(img.convert("L"), quality=90))
        out.append(jpeg(img.convert("CMYK"), quality=90))
    img = image(100, 140, 99)
    out.append(jpeg(img, quality=80, restart_marker_blocks=2))
    out.append(jpeg(img, quality=80, restart_marker_rows=1))
    out.append(jpeg(img, quality=85, progressive=True, subsampling=2))
    out.append(jpeg(img.convert("L"), quality=85, progressive=True))
    out.append(jpeg(img.convert("CMYK"), quality=85, progressive=True))
    out.append(jpeg(img, quality=95, exif=exif(), icc_profile=icc_profile()))
    out.append(jpeg(img, quality=1))
    out.append(jpeg(img, quality=100, optimize=True))
    out.append(jpeg(image(33, 65, 5), quality=90, subsampling=2))
    out.extend(cjpeg_411(image(40, 72, 6)))
    # Odd files: truncated at several points, header only, and EOI only.
    whole = jpeg(img, quality=85)
    prog = jpeg(img, quality=85, progressive=True)
    for frac in (0.1, 0.5, 0.9):
        out.append(whole[: int(len(whole) * frac)])
        out.append(prog[: int(len(prog) * frac)])
    sos = whole.find(b"\xff\xda")
    out.append(whole[:sos])
    out.append(whole[: sos + 14])
    out.append(b"\xff\xd8\xff\xd9")
    return out


HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")


def archive(name: str) -> list[bytes]:
    """The image files of one of tests/data's archives."""
    with tarfile.open(os.path.join(DATA, name)) as t:
        return [
            t.extractfile(m).read()
            for m in t.getmembers()
            if m.isfile() and m.name.endswith((".png", ".webp"))
        ]


def cuts(data: bytes) -> list[bytes]:
    return [data[: int(len(data) * f)] for f in (0.05, 0.5, 0.95)]


def png_seeds() -> list[bytes]:
    sys.path.insert(0, os.path.join(HERE, ".."))
    try:
        from pngmake import DEPTHS, png_bytes, random_samples
    finally:
        sys.path.pop(0)
    rng = np.random.default_rng(1)
    out = archive("pngsuite.tar.xz")
    for ct, depths in DEPTHS.items():
        for depth in depths:
            for interlace in (False, True):
                h, w = (1, 1) if depth == 1 else (19, 23)
                s = random_samples(rng, h, w, ct, depth, palette_len=1 << depth)
                pal = rng.integers(0, 256, (1 << depth, 3)) if ct == 3 else None
                out.append(
                    png_bytes(s, ct, depth, interlace, palette=pal, idat_pieces=2)
                )
    whole = png_bytes(random_samples(rng, 70, 90, 6, 8), 6, 8, idat_pieces=4)
    out.extend(cuts(whole))
    # Photo-like RGB and RGBA as Pillow writes them (adaptive filters:
    # runs of Paeth rows, the decoder's SIMD loops).
    for mode in ("RGB", "RGBA"):
        buf = io.BytesIO()
        image(21, 34, 5).convert(mode).save(buf, "PNG")
        out.append(buf.getvalue())
    frames = [image(24, 32, k) for k in range(2)]
    buf = io.BytesIO()
    frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:])
    out.append(buf.getvalue())  # an APNG
    return out


def webp_seeds() -> list[bytes]:
    out = archive("webp.tar.xz")
    for h, w in ((1, 1), (17, 33), (64, 48)):
        img = image(h, w, h)
        rgba = img.copy()
        rgba.putalpha(image(h, w, w).convert("L"))
        for im in (img, rgba):
            for opts in ({"quality": 60}, {"lossless": True}):
                buf = io.BytesIO()
                im.save(buf, "WEBP", **opts)
                out.append(buf.getvalue())
    frames = [image(40, 56, k) for k in range(3)]
    for opts in ({"quality": 70}, {"lossless": True}):
        buf = io.BytesIO()
        frames[0].save(buf, "WEBP", save_all=True, append_images=frames[1:], **opts)
        out.append(buf.getvalue())  # animated
    out.extend(cuts(out[-3]))
    return out


def http_seed(off: int, want: int, head: bytes, step: int = 0, extra: int = 0) -> bytes:
    """A fuzz_http.c input: the range [off, off + want) asked for (off below
    2^24, or a multiple of 2^31), body writes of 1 + 37 * step bytes, extra
    bytes past the range, then the header block."""
    big = off >= 1 << 31
    o = off >> 31 if big else off
    assert o < 1 << 24 and (o << 31 if big else o) == off
    head8 = struct.pack("<I", o)[:3] + bytes([big, *struct.pack("<H", want - 1)])
    return head8 + bytes([step, extra]) + head


def http_seeds() -> list[bytes]:
    def h(*lines: str) -> bytes:
        return "".join(line + "\r\n" for line in lines).encode() + b"\r\n"

    def cr(a: int, b: int, total: str = "*") -> str:
        return f"Content-Range: bytes {a}-{b}/{total}"

    out = []
    for off, want in ((0, 1), (512, 100), (1000, 4096), (3 << 31, 700)):
        last = off + want - 1
        cl = f"Content-Length: {want}"
        out += [
            http_seed(
                off,
                want,
                h("HTTP/1.1 206 Partial Content", cr(off, last, str(last + 9)), cl),
            ),
            http_seed(off, want, h("HTTP/2 206", cr(off, last), cl), step=3),
            http_seed(
                off, want, h("HTTP/1.1 206 Partial Content", cr(off + 1, last + 1), cl)
            ),
            http_seed(off, want, h("HTTP/1.1 206 OK", cr(off, last - 1), cl), extra=5),
            http_seed(off, want, h("HTTP/1.1 200 OK", f"Content-Length: {want + 10}")),
            http_seed(off, want, h("HTTP/1.1 200 OK", cl, cr(off, last, "*"))),
            http_seed(
                off,
                want,
                h("HTTP/1.1 100 Continue")
                + h("HTTP/1.1 206 Partial Content", cr(off, last), cl),
            ),
            http_seed(
                off,
                want,
                h("HTTP/1.1 302 Found", "Location: /x", "Content-Length: 0")
                + h("HTTP/1.1 206 Partial Content", cr(off, last), cl),
            ),
        ]
    s3 = "<?xml version='1.0'?><Error><Code>SlowDown</Code><Message>Reduce</Message></Error>"
    out += [
        http_seed(
            0, 10, h("HTTP/1.1 503 Service Unavailable", "Retry-After: 3") + s3.encode()
        ),
        http_seed(
            0, 10, h("HTTP/1.1 429 Too Many", "Retry-After: 0.5", "retry-after:  7 ")
        ),
        http_seed(0, 10, h("HTTP/1.1 404 Not Found") + b"<Code>NoSuchKey</Code>"),
        http_seed(
            0, 10, h("HTTP/1.1 403 Forbidden") + b"<Code>" + b"A" * 60 + b"</Code>"
        ),
        http_seed(
            0, 10, h("HTTP/1.1 416 Range Not Satisfiable", "Content-Range: bytes */5")
        ),
        http_seed(
            0,
            10,
            h("HTTP/1.1 206 x", "content-range:bytes\t0-9/10", "CONTENT-LENGTH:\t10"),
        ),
        http_seed(
            0,
            10,
            h(
                "HTTP/1.1 206 x",
                "Content-Range: bytes 0-99999999999999999999/*",
                "Content-Length: -1",
            ),
        ),
        http_seed(
            0,
            10,
            h(
                "HTTP/1.1 206 x",
                "Content-Range: bytes -5--1/10",
                "Retry-After: Wed, 21 Oct 2015 07:28:00 GMT",
            ),
        ),
        http_seed(0, 10, b"HTTP/1.1 206\nContent-Range: bytes 0-9\n\n"),
        http_seed(0, 10, b"HTTP/ 99999999999999999999999 x\r\nRetry-After: 1e999\r\n"),
    ]
    return out


def tar_seeds() -> list[bytes]:
    def shard(
        members: list[tuple[str, bytes]], fmt: int = tarfile.USTAR_FORMAT, extra=None
    ) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            for info in extra or []:
                tf.addfile(info)
        return buf.getvalue()

    pixels = b"\xff\xd8\xff\xe0" + bytes(range(200)) + b"\xff\xd9"
    members = []
    for i in range(4):
        members += [
            (f"d/k{i:03d}.jpg", pixels),
            (f"d/k{i:03d}.cls", f" {i - 1}\n".encode()),
        ]
    plain = shard(members)
    folder = tarfile.TarInfo("d")
    folder.type = tarfile.DIRTYPE
    link = tarfile.TarInfo("d/l.jpg")
    link.type = tarfile.SYMTYPE
    link.linkname = "d/k000.jpg"
    long_name = "x" * 120 + "/sample.with.dots.JPG"
    out = [
        plain,
        shard(members, extra=[folder, link]),
        shard(
            [(long_name, pixels), (long_name[:-3] + "cls", b"7")],
            fmt=tarfile.GNU_FORMAT,
        ),
        shard([(long_name, pixels), ("n\u00e9.cls", b"+3")], fmt=tarfile.PAX_FORMAT),
        shard([(".hidden", b"x"), ("nodot", b"y"), ("a.b.c", b"9" * 70)]),
        shard([]),
        plain[: len(plain) - 1024],  # no end-of-archive block
        plain[:700],  # cut inside a member
        plain[:100],  # cut inside a header
        b"\x1f\x8b\x08\x00" + plain[:200],  # gzip magic
    ]
    return out


def field_seeds() -> list[bytes]:
    """fuzz_fields.py inputs: a kind byte (0 text, 1 JSON, 2 int), then
    the member."""
    doc = '{"k": [1, -2.5e-3, null, true, "\\u00e9\\ud800"], "x": {}, "n": NaN}'
    docs = [doc.encode(), b"[1,]", b'{"i": 6,', b"01", b'"a\tb"', b"-Infinity"]
    docs += [doc.encode(enc) for enc in ("utf-8-sig", "utf-16", "utf-16-be", "utf-32")]
    docs += [b"[" * 600 + b"]" * 600, b"1" * 4301, b'"\xed\xa0\x80"']
    texts = ["a photo – «é»".encode(), b"caf\xe9", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"]
    ints = [
        b" 42\n",
        b"1_000",
        b"1__0",
        b"-9223372036854775808",
        b"9223372036854775808",
    ]
    return (
        [b"\x00" + t for t in texts]
        + [b"\x01" + d for d in docs]
        + [b"\x02" + i for i in ints]
    )


def mask_seeds() -> list[bytes]:
    """fuzz_masks.c inputs: 6 header bytes (what follows: 0 a COCO string,
    1 counts, 2 polygons; height; width; sampled height and width; how
    many polygons), then the payload. Strings pycocotools wrote, counts that
    fit and miss, and polygons inside, across and far outside the image,
    with NaN and infinite coordinates."""

    def head(what: int, h: int, w: int, parts: int = 0) -> bytes:
        return bytes([what, h, w, 17, 23, parts])

    def poly(*xy: float) -> bytes:
        out = b""
        for v in xy:
            if isinstance(v, float) and (v != v or abs(v) > 4000):
                out += b"\xff" + struct.pack("<d", v)
            else:
                out += struct.pack("<h", int(v * 8))
        return out

    strings = [
        b"733000;",
        b"8252N00O1O>",
        b"2420O11O000000",
        b"",
        b"1P",
        b"@",
        b"02017",
    ]
    return (
        [head(0, 6, 6) + s for s in strings[:1]]
        + [head(0, 7, 8) + strings[1], head(0, 6, 7) + strings[2]]
        + [head(0, 3, 4) + s for s in strings[3:]]
        + [head(1, 3, 4) + bytes([0, 2, 0, 3, 7]), head(1, 5, 5) + bytes([25])]
        + [head(1, 4, 4) + bytes([3, 20]), head(1, 0, 4) + b"\x04"]
        + [
            head(2, 6, 6) + poly(1, 1, 4, 1, 4, 4, 1, 4),
            head(2, 7, 8) + poly(0.5, 0.5, 6.5, 1.5, 2.5, 5.5),
            head(2, 6, 7, 1) + poly(-3, 2, 9, 2, 4, 12, 1, 1, 3, 1, 3, 3),
            head(2, 40, 30) + poly(-4000, -100, 3000, 20.125, 15.5, 2000),
            head(2, 9, 9, 2) + poly(1, 1, 3, 3, 2, 7, 8, 1, 2, 1, 8, 8),
            head(2, 9, 9) + poly(1, 1, 3, float("nan"), 2, 7),
            head(2, 9, 9) + poly(1, 1, float("inf"), 3, 2, 7),
            head(2, 9, 9) + poly(1, 1, 1e300, 3, 2, 7),
            head(2, 9, 9) + poly(1, 1, 5, 5),
        ]
    )


def mask_png_seeds() -> list[bytes]:
    """fuzz_mask_png.c inputs: 4 header bytes (sampled height and width,
    fill, the maps' seed), then a PNG: palettes of every depth and grey,
    interlaced or not, as Pillow and tests/pngmake.py write them; colour
    types and depths it refuses; PngSuite; one cut short three ways."""
    sys.path.insert(0, os.path.join(HERE, ".."))
    try:
        from pngmake import png_bytes, random_samples
    finally:
        sys.path.pop(0)
    rng = np.random.default_rng(2)
    files = []
    for depth in (1, 2, 4, 8):
        for interlace in (False, True):
            s = random_samples(rng, 13, 21, 3, depth, palette_len=1 << depth)
            pal = rng.integers(0, 256, (1 << depth, 3))
            files.append(png_bytes(s, 3, depth, interlace, palette=pal))
    for interlace in (False, True):
        files.append(png_bytes(random_samples(rng, 9, 40, 0, 8), 0, 8, interlace))
    for ct, depth in ((2, 8), (0, 16), (4, 8), (6, 16), (0, 2)):
        files.append(png_bytes(random_samples(rng, 5, 6, ct, depth), ct, depth))
    for mode in ("P", "L"):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (31, 17), dtype=np.uint8), mode).save(
            buf, "PNG"
        )
        files.append(buf.getvalue())
    files.extend(cuts(files[0]))
    files.extend(archive("pngsuite.tar.xz"))
    heads = rng.integers(0, 256, (len(files), 4), dtype=np.uint8)
    heads[::3, 3] &= 0x7F  # most maps in range
    heads[1::3, 3] &= 0x7F
    return [bytes(h) + f for h, f in zip(heads.tolist(), files)]


def write(root: str, blobs: list[bytes]) -> int:
    os.makedirs(root, exist_ok=True)
    for blob in blobs:
        name = hashlib.sha1(blob).hexdigest()
        with open(os.path.join(root, name), "wb") as f:
            f.write(blob)
    return len(blobs)


def main() -> None:
    root = sys.argv[1] if len(sys.argv) > 1 else "seeds"
    kind = sys.argv[2] if len(sys.argv) > 2 else "decode"
    if kind in ("http", "tar", "fields", "masks", "mask_png"):
        makers = {
            "http": http_seeds,
            "tar": tar_seeds,
            "fields": field_seeds,
            "masks": mask_seeds,
            "mask_png": mask_png_seeds,
        }
        n = write(root, makers[kind]())
        print(f"{n} {kind} seeds in {root}")
        return
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    n = 0
    files = {"png": png_seeds, "webp": webp_seeds}.get(kind, seeds)()
    for data in files:
        # Two headers per file: one resize/crop, one random crop.
        for kind in (0, 1):
            head = bytearray(rng.integers(0, 256, 8, dtype=np.uint8).tobytes())
            head[0] = (head[0] & ~1) | kind
            blob = bytes(head) + data
            name = hashlib.sha1(blob).hexdigest()
            with open(os.path.join(root, name), "wb") as f:
                f.write(blob)
            n += 1
    print(f"{n} seeds in {root}")


if __name__ == "__main__":
    main()
