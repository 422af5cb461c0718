"""Hostile and broken files: every case gives a tensor or the documented
error (DecodeError naming the file, or OSError with its filename), never a
crash or a hang.

Each group of cases is decoded in a child interpreter (subproc.run_python),
both by ``_core.decode`` (full image, strict and tolerant) and by a Loader
(fused crop decode, pread and io_uring), one epoch per file; the child
reports one outcome per case and this side checks them.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from images import jpeg_bytes
from PIL import Image
from ringloader import _core
from subproc import run_python

# The child: argv = [json list of paths]; prints one JSON line per path.
CHECK_FILES = r"""
import json, os, sys
import ringloader
from ringloader import _core, transforms as T

paths = json.loads(sys.argv[1])
samples = [(p, 0) for p in paths]

class DS:
    samples = samples

def outcome(fn):
    try:
        return "ok:" + fn()
    except ringloader.DecodeError as e:
        return f"DecodeError:{e.kind}:{e.path}"
    except OSError as e:
        return f"OSError:{e.errno}:{e.filename}"
    except Exception as e:
        return f"unexpected:{type(e).__name__}:{e}"

def decode(path, tolerant):
    with open(path, "rb") as f:
        data = f.read()
    rgb, h, w = _core.decode(data, allow_truncated=tolerant)
    assert len(rgb) == h * w * 3
    return f"{h}x{w}"

batches = [[0]]
loaders = [
    ringloader.Loader(DS, batch_sampler=batches, num_threads=2, io=io,
                      transform=t)
    for io in ("pread", "io_uring")
    for t in (T.Compose([T.Resize(40), T.CenterCrop(32)]),
              T.Compose([T.RandomResizedCrop(24), T.RandomHorizontalFlip()]))
]

def through(loader):
    (images, _), = list(loader)
    assert images.shape[0] == 1 and images.shape[1] == 3
    return "x".join(map(str, images.shape))

for i, path in enumerate(paths):
    print("START", path, file=sys.stderr, flush=True)
    batches[:] = [[i]]
    res = {"path": path}
    if os.path.isfile(path):
        res["strict"] = outcome(lambda: decode(path, False))
        res["tolerant"] = outcome(lambda: decode(path, True))
    for k, loader in enumerate(loaders):
        res[f"loader{k}"] = outcome(lambda: through(loader))
    print(json.dumps(res), flush=True)
"""

KINDS = ("corrupt", "truncated", "too_big", "not_jpeg")


def check_outcomes(paths: list[str], timeout: float = 240) -> list[dict]:
    """Runs CHECK_FILES on paths; asserts every outcome is documented."""
    proc = run_python(CHECK_FILES, json.dumps(paths), timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["path"] for r in results] == paths
    for r in results:
        for key, out in r.items():
            if key == "path":
                continue
            kind, _, rest = out.partition(":")
            if kind == "ok":
                continue
            if kind == "DecodeError":
                k, _, path = rest.partition(":")
                assert k in KINDS, (r, key)
                # _core.decode() gets bytes, so only the Loader knows paths.
                want = "None" if key in ("strict", "tolerant") else r["path"]
                assert path == want, (r, key)
                continue
            if kind == "OSError":
                _, _, filename = rest.partition(":")
                assert filename == r["path"], (r, key)
                continue
            pytest.fail(f"{r['path']} {key}: undocumented outcome {out}")
    return results


def write(tmp_path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def marker_offsets(data: bytes) -> list[int]:
    """Offsets of every marker (0xFF followed by a marker code), in the
    headers and in the entropy-coded data (RSTn), SOI and EOI included."""
    return [
        i
        for i in range(len(data) - 1)
        if data[i] == 0xFF and data[i + 1] not in (0x00, 0xFF)
    ]


def segment(data: bytes, code: int) -> int:
    """Offset of the first marker segment 0xFF `code`."""
    i = data.find(bytes([0xFF, code]))
    assert i > 0, hex(code)
    return i


# ---- the cases ----

SOURCES = {
    "baseline": lambda: jpeg_bytes("baseline", 67, 91, seed=1),
    "progressive": lambda: jpeg_bytes("progressive", 67, 91, seed=2),
    "s420": lambda: jpeg_bytes("s420", 70, 50, seed=3),
    "restart": lambda: jpeg_bytes("restart", 64, 80, seed=4),
    "cmyk": lambda: jpeg_bytes("cmyk", 40, 40, seed=5),
}


def truncations(data: bytes) -> list[int]:
    """Cut points: at, one past and three past every marker."""
    cuts = {c for i in marker_offsets(data) for c in (i, i + 1, i + 3)}
    return sorted(c for c in cuts if 0 < c < len(data))


def bit_flips(data: bytes, n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        flipped = bytearray(data)
        flipped[int(rng.integers(2, len(data)))] ^= 1 << int(rng.integers(0, 8))
        out.append(bytes(flipped))
    return out


def bomb_header(side: int = 65535) -> bytes:
    """A valid small JPEG whose SOF says side x side pixels: 65535 is over
    libjpeg's own limit (65500), 65000 only over the pixel limit."""
    data = bytearray(jpeg_bytes("baseline", 16, 16))
    sof = segment(data, 0xC0)
    data[sof + 5 : sof + 9] = side.to_bytes(2, "big") * 2
    return bytes(data)


def bad_tables() -> dict[str, bytes]:
    data = jpeg_bytes("baseline", 32, 32)
    out = {}
    dqt = segment(data, 0xDB)
    b = bytearray(data)
    b[dqt + 4] = 0x0F  # quantisation table 15 (only 0..3 exist)
    out["dqt_index"] = bytes(b)
    b = bytearray(data)
    b[dqt + 4] = 0x20  # precision 2 (only 0 and 1 exist)
    out["dqt_precision"] = bytes(b)
    b = bytearray(data)
    b[dqt + 5 : dqt + 5 + 64] = bytes(64)  # all-zero divisors
    out["dqt_zeros"] = bytes(b)
    dht = segment(data, 0xC4)
    b = bytearray(data)
    b[dht + 5 : dht + 21] = b"\xff" * 16  # code counts summing past 256
    out["dht_counts"] = bytes(b)
    b = bytearray(data)
    b[dht + 5 : dht + 21] = bytes([0] * 15 + [1])  # one 16-bit code only
    out["dht_sparse"] = bytes(b)
    b = bytearray(data)
    b[dht + 4] = 0x03  # defines DC table 3 in place of the one used
    out["dht_missing"] = bytes(b)
    b = bytearray(data)
    b[dht + 4] = 0x25  # table class 2
    out["dht_class"] = bytes(b)
    sos = segment(data, 0xDA)
    b = bytearray(data)
    b[sos + 6] = 0x77  # the first component's tables: 7 and 7
    out["sos_tables"] = bytes(b)
    return out


def special_files(d) -> list[str]:
    base = jpeg_bytes("baseline", 48, 64)
    sos = segment(base, 0xDA)
    png = io.BytesIO()
    Image.new("RGB", (20, 10), "red").save(png, "PNG")
    cases = {
        "empty.jpg": b"",
        "soi.jpg": b"\xff\xd8",
        "soi_eoi.jpg": b"\xff\xd8\xff\xd9",
        "header_only.jpg": base[:sos],
        "no_sof.jpg": base[:2] + base[sos:],
        "bomb.jpg": bomb_header(),
        "bomb_65000.jpg": bomb_header(65000),
        "png.jpg": png.getvalue(),
        "text.jpg": b"hello, world\n" * 10,
        "zeros.jpg": bytes(4096),
        "evil_scans.jpg": repeated_scans(),
    }
    cases.update({f"table_{k}.jpg": v for k, v in bad_tables().items()})
    paths = [write(d, k, v) for k, v in cases.items()]
    (d / "dir.jpg").mkdir()
    os.mkfifo(d / "fifo.jpg")  # open() must not wait for a writer
    return [*paths, *(str(d / n) for n in ("dir.jpg", "fifo.jpg", "missing.jpg"))]


def repeated_scans() -> bytes:
    """A progressive file whose first scan is repeated 1,100 times: a bogus
    progression that libjpeg only warns about."""
    data = jpeg_bytes("progressive", 32, 32)
    sos = segment(data, 0xDA)
    end = next(i for i in marker_offsets(data) if i > sos and data[i + 1] != 0xD0)
    return data[:end] + data[sos:end] * 1100 + b"\xff\xd9"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, many_scans) -> dict[str, dict[str, dict]]:
    """{group: {case: outcomes}} for every case, all decoded by one child
    (importing torch once). Groups: trunc_<source>, flip_<source>,
    special, scans."""
    root = tmp_path_factory.mktemp("malformed")
    groups: dict[str, list[str]] = {}
    for name, make in SOURCES.items():
        data = make()
        d = root / f"trunc_{name}"
        d.mkdir()
        groups[d.name] = [write(d, f"{c:06d}.jpg", data[:c]) for c in truncations(data)]
    for k, name in enumerate(("baseline", "progressive", "restart")):
        d = root / f"flip_{name}"
        d.mkdir()
        flips = bit_flips(SOURCES[name](), 100, seed=k)
        groups[d.name] = [write(d, f"{i:03d}.jpg", b) for i, b in enumerate(flips)]
    d = root / "special"
    d.mkdir()
    groups["special"] = special_files(d)
    groups["scans"] = [many_scans[380], many_scans[2090]]
    paths = [p for g in groups.values() for p in g]
    results = dict(zip(paths, check_outcomes(paths)))
    return {
        g: {os.path.basename(p): results[p] for p in ps} for g, ps in groups.items()
    }


def loaders(result: dict) -> list[str]:
    return [v for k, v in result.items() if k.startswith("loader")]


@pytest.mark.parametrize("source", list(SOURCES))
def test_truncation_at_every_marker(corpus, source):
    data = SOURCES[source]()
    cases = corpus[f"trunc_{source}"]
    assert len(cases) > 10
    sos = segment(data, 0xDA)
    inside = [r for name, r in cases.items() if int(name[:6]) > sos + 10]
    for name, r in cases.items():
        # Strict decoding never passes a cut file off as an image.
        assert not r["strict"].startswith("ok"), r
        if int(name[:6]) <= sos:  # cut before the image data
            assert not any(o.startswith("ok") for o in loaders(r)), r
    # Tolerant mode decodes files cut inside the image data.
    assert any(r["tolerant"].startswith("ok") for r in inside)


@pytest.mark.parametrize("source", ["baseline", "progressive", "restart"])
def test_bit_flips(corpus, source):
    cases = corpus[f"flip_{source}"]
    assert len(cases) == 100
    # Most flips in the entropy-coded data still decode (to other pixels).
    assert sum(r["loader0"].startswith("ok") for r in cases.values()) > 20


def test_special_files(corpus):
    results = corpus["special"]
    for name in ("bomb.jpg", "bomb_65000.jpg", "evil_scans.jpg"):
        assert results[name]["strict"].startswith("DecodeError:too_big"), name
        assert all(
            o.startswith("DecodeError:too_big") for o in loaders(results[name])
        ), name
    for name in ("empty.jpg", "text.jpg", "zeros.jpg", "soi.jpg"):
        assert all(
            o.startswith(("DecodeError:not_jpeg", "DecodeError:corrupt"))
            for o in loaders(results[name])
        ), name
    # A PNG named .jpg is decoded by the fallback (Pillow), not rejected.
    for o in loaders(results["png.jpg"]):
        assert o.startswith("ok"), o
    for name in (
        "header_only.jpg",
        "no_sof.jpg",
        "table_dqt_index.jpg",
        "table_dht_counts.jpg",
        "table_dht_class.jpg",
    ):
        assert all(o.startswith("DecodeError") for o in loaders(results[name])), name
    for name, errno_ in (("dir.jpg", 21), ("fifo.jpg", 22), ("missing.jpg", 2)):
        assert all(
            o.startswith(f"OSError:{errno_}:") for o in loaders(results[name])
        ), name


# ---- the bomb: refused fast, with no big allocation ----

MEASURE_BOMB = r"""
import sys, time
import ringloader
from ringloader import _core, transforms as T

path = sys.argv[1]
data = open(path, "rb").read()

def rss_kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])

class DS:
    samples = [(path, 0)]

loader = ringloader.Loader(DS, batch_size=1, num_threads=1,
                           transform=T.Compose([T.Resize(64), T.CenterCrop(64)]))
for attempt in range(2):  # the first round warms up threads and caches
    worst_ms, worst_kb = 0.0, 0
    for fn in (lambda: _core.decode(data), lambda: list(loader)):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM, the peak RSS, to the current RSS
        base = rss_kb("VmHWM")
        t0 = time.perf_counter()
        try:
            fn()
            print("decoded: not refused")
            sys.exit(1)
        except ringloader.DecodeError as e:
            assert e.kind == "too_big", e.kind
        worst_ms = max(worst_ms, (time.perf_counter() - t0) * 1000)
        worst_kb = max(worst_kb, rss_kb("VmHWM") - base)
print(worst_ms, worst_kb)
"""


@pytest.mark.parametrize("side", [65535, 65000])
def test_bomb_refused_fast_and_small(tmp_path, side):
    path = write(tmp_path, "bomb.jpg", bomb_header(side))
    proc = run_python(MEASURE_BOMB, path, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ms, kb = map(float, proc.stdout.split())
    assert ms < 100, f"bomb refused in {ms:.1f} ms"
    assert kb < 16 * 1024, f"RSS grew by {kb / 1024:.1f} MB"


# ---- progressive files with very many scans ----

SCANS_WRITER = r"""
/* Writes a valid progressive JPEG whose successive approximation goes from
 * bit al_max down to 0 for the DC and for every AC coefficient separately:
 * (al_max + 1) * (1 + 3 * 63) scans. */
#include <stdio.h>
#include <stdlib.h>
#include <jpeglib.h>

int main(int argc, char **argv)
{
    int al_max = atoi(argv[2]);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    FILE *f = fopen(argv[1], "wb");
    jpeg_stdio_dest(&c, f);
    c.image_width = 48;
    c.image_height = 40;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_scan_info *s = calloc(4000, sizeof(*s));
    int n = 0;
    for (int al = al_max; al >= 0; al--) {
        s[n].comps_in_scan = 3;
        for (int k = 0; k < 3; k++) {
            s[n].component_index[k] = k;
        }
        s[n].Ah = al == al_max ? 0 : al + 1;
        s[n++].Al = al;
    }
    for (int ci = 0; ci < 3; ci++) {
        for (int k = 1; k < 64; k++) {
            for (int al = al_max; al >= 0; al--) {
                s[n].comps_in_scan = 1;
                s[n].component_index[0] = ci;
                s[n].Ss = s[n].Se = k;
                s[n].Ah = al == al_max ? 0 : al + 1;
                s[n++].Al = al;
            }
        }
    }
    c.scan_info = s;
    c.num_scans = n;
    jpeg_start_compress(&c, TRUE);
    unsigned char row[48 * 3];
    while (c.next_scanline < c.image_height) {
        for (int x = 0; x < 48 * 3; x++) {
            row[x] = (unsigned char)(x * 5 + c.next_scanline * 7);
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    fclose(f);
    printf("%d\n", n);
    return 0;
}
"""


@pytest.fixture(scope="module")
def many_scans(tmp_path_factory):
    """{scan count: path} of valid progressive JPEGs with 380 and 2090
    scans, written by a small libjpeg program compiled here."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or shutil.which("pkg-config") is None:
        pytest.fail("cc and pkg-config are needed (they build the package)")
    d = tmp_path_factory.mktemp("scans")
    (d / "w.c").write_text(SCANS_WRITER)
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "libjpeg"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    subprocess.run([cc, "-o", str(d / "w"), str(d / "w.c"), *flags.split()], check=True)
    out = {}
    for al_max in (1, 10):
        path = d / f"scans{al_max}.jpg"
        n = subprocess.run(
            [str(d / "w"), str(path), str(al_max)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        out[int(n)] = str(path)
    assert sorted(out) == [380, 2090]
    return out


def test_over_500_scans_refused(corpus, many_scans):
    with open(many_scans[2090], "rb") as f:
        data = f.read()
    assert Image.open(io.BytesIO(data)).info.get("progressive")
    r = corpus["scans"][os.path.basename(many_scans[2090])]
    assert r["strict"].startswith("DecodeError:too_big"), r
    assert all(o.startswith("DecodeError:too_big") for o in loaders(r)), r
    # The limit is a parameter of the decoder, not a failure of the file.
    _, h, w = _core.decode(data, max_scans=3000)
    assert (h, w) == (40, 48)


def test_under_500_scans_decodes_like_pillow(corpus, many_scans):
    r = corpus["scans"][os.path.basename(many_scans[380])]
    assert all(o.startswith("ok") for o in loaders(r)), r
    with open(many_scans[380], "rb") as f:
        data = f.read()
    rgb, h, w = _core.decode(data)
    ours = np.frombuffer(rgb, np.uint8).reshape(h, w, 3).astype(int)
    ref = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)
    assert np.abs(ours - ref).max() <= 1


# ---- an unreadable file, also when the tests run as root ----

READ_WITHOUT_DAC = r"""
import ctypes, errno, json, os, sys
# Root reads a mode-000 file through CAP_DAC_OVERRIDE; drop it (and
# CAP_DAC_READ_SEARCH) from this thread, whose later threads inherit it.
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]
libc = ctypes.CDLL(None, use_errno=True)
hdr, data = Header(0x20080522, 0), (Data * 2)()
assert libc.capget(ctypes.byref(hdr), data) == 0
for d in data:
    d.effective &= ~0b110
    d.permitted &= ~0b110
assert libc.capset(ctypes.byref(hdr), data) == 0, ctypes.get_errno()
path = sys.argv[1]
try:
    open(path, "rb").close()
    print("SKIP: the file is still readable (another privilege?)")
    sys.exit(0)
except PermissionError:
    pass
import ringloader
from ringloader import transforms as T
class DS:
    samples = [(path, 0)]
for io in ("pread", "io_uring"):
    loader = ringloader.Loader(DS, batch_size=1, io=io,
                               transform=T.Compose([T.Resize(8), T.CenterCrop(8)]))
    try:
        list(loader)
        print("read an unreadable file")
        sys.exit(1)
    except PermissionError as e:
        assert e.filename == path and e.errno == errno.EACCES, e
print("OK")
"""


def test_unreadable_file(tmp_path):
    p = tmp_path / "secret.jpg"
    p.write_bytes(jpeg_bytes("baseline", 16, 16))
    p.chmod(0)
    try:
        proc = run_python(READ_WITHOUT_DAC, str(p), timeout=60)
    finally:
        p.chmod(0o600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if proc.stdout.startswith("SKIP"):
        pytest.skip(proc.stdout.strip())
    assert proc.stdout.strip() == "OK"
