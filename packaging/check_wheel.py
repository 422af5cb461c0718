#!/usr/bin/env python3
"""Checks an installed ringloader wheel, as CI runs it in a fresh virtual
environment holding the wheel, torch, numpy and Pillow:

- ringloader is imported from that environment, not from a checkout;
- the libjpeg the process maps after a decode is the wheel's own copy
  (``ringloader.libs/``), it is libjpeg-turbo, with its SIMD code (the
  SIMD dispatch is compiled in, and turning it off slows a decode down);
- libcurl is linked into the module (no libcurl.so is mapped), with OpenSSL
  and nghttp2; so are libspng, libdeflate, libwebp and zlib: a PNG and a
  WebP (lossy with alpha) decode natively, as Pillow decodes them, with no
  libspng, libdeflate or libwebp mapped but Pillow's own and none needed
  (ldd);
- a smoke test: a folder of JPEGs through the Loader, decoded as Pillow
  decodes them, and tar shards over HTTP from nginx (when nginx is
  installed) equal to the same shards read from disk.

Prints where every library was loaded from. Exits non-zero on any failure.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

# In a process of its own (this one has Pillow's libjpeg mapped too): the
# best of 7 decodes, and the libjpeg files the process maps.
SIMD_PROBE = r"""
import os, sys, time
from ringloader import _core
data = open(sys.argv[1], "rb").read()
best = 1e9
for _ in range(7):
    t = time.perf_counter()
    _core.decode(data)
    best = min(best, time.perf_counter() - t)
with open("/proc/self/maps") as f:
    jpegs = sorted({l.split()[-1] for l in f if "libjpeg" in l})
print(best, *jpegs)
"""


def mapped(part: str) -> list[str]:
    """Paths of this process's mapped files whose name contains part."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "/" in line}
    return sorted(p for p in paths if part in os.path.basename(p))


def jpeg(w: int, h: int, seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    img = Image.fromarray(base).resize((w, h), Image.BICUBIC)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def main() -> int:
    import numpy as np
    import torch

    import ringloader
    from ringloader import _core

    where = os.path.dirname(ringloader.__file__)
    print(f"ringloader {ringloader.__version__} from {where}")
    assert "site-packages" in where, "ringloader is not the installed wheel"
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}")

    tmp = tempfile.mkdtemp(prefix="ringloader-wheel-check-")
    try:
        # ---- a folder through the Loader, against Pillow ----
        from PIL import Image

        folder = os.path.join(tmp, "folder", "class_0")
        os.makedirs(folder)
        blobs = [jpeg(160 + 16 * i, 120 + 8 * i, i) for i in range(8)]
        for i, b in enumerate(blobs):
            with open(os.path.join(folder, f"{i}.jpg"), "wb") as f:
                f.write(b)
        ds = ringloader.ImageFolder(os.path.dirname(folder))
        from ringloader import transforms as T

        loader = ringloader.Loader(
            ds, batch_size=8, transform=T.Compose([T.Resize((64, 64))])
        )
        images, labels = next(iter(loader))
        assert images.shape == (8, 3, 64, 64) and labels.tolist() == [0] * 8
        rgb, h, w = _core.decode(blobs[0])
        ref = np.asarray(Image.open(io.BytesIO(blobs[0])).convert("RGB"))
        got = np.frombuffer(rgb, np.uint8).reshape(h, w, 3)
        diff = int(np.abs(got.astype(int) - ref.astype(int)).max())
        print(
            f"decode: 8 JPEGs through the Loader; full decode vs Pillow: max diff {diff}"
        )
        assert diff <= 1, diff
        loader.close()

        # ---- PNG and WebP, decoded by the libraries linked in ----
        for fmt, opts in (("PNG", {}), ("WEBP", {"quality": 80})):
            buf = io.BytesIO()
            Image.open(io.BytesIO(blobs[3])).convert("RGBA").save(buf, fmt, **opts)
            rgb, h, w = _core.decode(buf.getvalue())
            ref = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
            same = np.array_equal(np.frombuffer(rgb, np.uint8).reshape(h, w, 3), ref)
            print(f"decode: a {fmt} {w}x{h}, natively, equal to Pillow's: {same}")
            assert same, fmt
        # Pillow maps its own libwebp (pillow.libs/); no other may be.
        for lib in ("libspng", "libdeflate", "libwebp", "libsharpyuv"):
            others = [p for p in mapped(lib) if "pillow.libs" not in p]
            assert others == [], others

        # ---- which libjpeg, which libcurl ----
        big = os.path.join(tmp, "big.jpg")
        with open(big, "wb") as f:
            f.write(jpeg(2048, 1536, 99))
        times = {}
        for name, extra in (("SIMD", {}), ("no SIMD", {"JSIMD_FORCENONE": "1"})):
            out = subprocess.run(
                [sys.executable, "-c", SIMD_PROBE, big],
                env=dict(os.environ, **extra),
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            times[name], jpegs = float(out[0]), out[1:]
        print(f"libjpeg mapped by a process that decodes with ringloader: {jpegs}")
        libs = os.path.join(os.path.dirname(where), "ringloader.libs")
        assert len(jpegs) == 1 and jpegs[0].startswith(libs), "not the wheel's libjpeg"
        blob = open(jpegs[0], "rb").read()
        assert b"libjpeg-turbo" in blob, "the bundled libjpeg is not libjpeg-turbo"
        assert b"JSIMD_FORCENONE" in blob, "the bundled libjpeg-turbo has no SIMD code"
        ratio = times["no SIMD"] / times["SIMD"]
        print(
            "libjpeg-turbo SIMD: 3 Mpx decode "
            f"{1e3 * times['SIMD']:.1f} ms, with JSIMD_FORCENONE=1 "
            f"{1e3 * times['no SIMD']:.1f} ms ({ratio:.1f}x)"
        )
        assert ratio > 1.3, "the SIMD code of the bundled libjpeg-turbo does not run"
        curl = _core.http_library()
        print(f"libcurl: {curl}, linked into {_core.__file__}")
        assert mapped("libcurl") == [], mapped("libcurl")
        assert "OpenSSL" in curl and "nghttp2" in curl, curl
        # S3 GETs are signed by this libcurl (CURLOPT_AWS_SIGV4, 7.75+);
        # without it every S3 object would be presigned again and again.
        assert _core.http_sigv4(), f"{curl}: cannot sign S3 requests (SigV4)"
        print("libcurl signs S3 requests (SigV4): yes")
        ldd = shutil.which("ldd")
        if ldd:  # what the module needs, and where each was found
            out = subprocess.run([ldd, _core.__file__], capture_output=True, text=True)
            print(
                "the module's libraries (ldd):\n  "
                + out.stdout.strip().replace("\n", "\n  ")
            )
            needed = out.stdout
            assert "libcurl" not in needed and "libssl" not in needed, needed
            assert "libspng" not in needed and "libwebp" not in needed, needed
            assert "libdeflate" not in needed, needed
            assert "ringloader.libs/libjpeg" in needed, needed

        # ---- tar shards over HTTP ----
        nginx = shutil.which("nginx") or (
            "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None
        )
        if nginx is None:
            print("HTTP: skipped, nginx is not installed")
            return 0
        # The checkout's launcher (benchmarks/rlbench, not installed).
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
        from rlbench.servers import Nginx

        www = os.path.join(tmp, "www")
        os.makedirs(www)
        with tarfile.open(os.path.join(www, "s.tar"), "w") as tf:
            for i, b in enumerate(blobs):
                for name, data in ((f"{i}.jpg", b), (f"{i}.cls", str(i).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
        tf_ = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip()])
        with Nginx(www) as server:
            out = []
            for src in (os.path.join(www, "s.tar"), server.url + "/s.tar"):
                ds = ringloader.TarShards(src, cache_dir=os.path.join(tmp, "cache"))
                ld = ringloader.Loader(ds, batch_size=8, transform=tf_, seed=1)
                start = time.perf_counter()
                out.append(next(iter(ld)))
                print(
                    f"shards from {src}: io={ld.io_backend}, "
                    f"{1e3 * (time.perf_counter() - start):.0f} ms"
                )
                ld.close()
        assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
        print("HTTP: the same batch as from disk")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("wheel check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
