#!/usr/bin/env python3
"""Build ringloader's manylinux wheel (``make wheel``).

One wheel for every CPython from 3.11 on, later releases included: the
extension keeps to Python's stable ABI (the limited API of 3.11, setup.py),
so it is built once, with the oldest Python found, tagged ``cp311-abi3``, and
installs with pip alone:

- the extension is compiled with ``zig cc`` for glibc 2.17, so the wheel
  runs on any x86-64 Linux with glibc 2.17 or newer (manylinux2014);
- libcurl, with OpenSSL and nghttp2 (HTTP/2), is built from Debian's
  sources (``apt-get source``: Debian's security patches included) for the
  same glibc and linked statically: HTTP(S) and S3 without a system libcurl.
  The module exports its init function alone (``exports.map``);
- libspng, libdeflate, libwebp (with libwebpdemux) and zlib, the native
  PNG and WebP decoders' libraries, are built from Debian's sources too,
  for the same glibc, and linked statically (Debian's own builds need
  glibc 2.29 and 2.34): the module's exports.map keeps their symbols
  inside it, whatever libpng, libwebp or zlib the process has loaded
  (Pillow's, torch's);
- libjpeg-turbo is the system's (Debian's build, with its SIMD code), copied
  into the wheel by ``auditwheel repair``, which also rewrites the tag;
- liburing is linked statically, as in every build.

``abi3audit`` then proves that the module uses the stable ABI alone, and
the wheel is installed into a fresh virtual environment of every CPython
found (no torch there): ``ringloader._core`` is loaded from it, says its
libraries, decodes a JPEG and a PNG, raises a DecodeError for bytes that are
no image, and a Pipeline makes a batch read through the buffer protocol.
(With torch, CI's packaging/check_wheel.py checks the wheel further.)

Prints the wheel's name, tag, size and bundled libraries, then each
interpreter's check. Built libraries are kept under ``build/wheel-deps``
(delete it to rebuild them).

  python packaging/wheels.py                      # built with the oldest found
  python packaging/wheels.py --pythons python3.11,python3.13 --out dist
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The tools of packaging/requirements.txt, next to this Python.
BIN = os.path.dirname(sys.executable)
CMAKE = shutil.which("cmake", path=BIN) or "cmake"
GLIBC = "2.17"
PLAT = "manylinux_2_17_x86_64"
# The oldest CPython the wheel serves (setup.py's Py_LIMITED_API), and so its
# tag, cp311-abi3.
OLDEST = (3, 11)
SOURCES = ("openssl", "nghttp2", "curl")
IMAGE_SOURCES = ("zlib", "libspng", "libdeflate", "libwebp")
# What setup.py links from the prefix (RINGLOADER_STATIC_IMAGE), in order.
IMAGE_ARCHIVES = (
    "libspng.a",
    "libdeflate.a",
    "libwebpdemux.a",
    "libwebp.a",
    "libz.a",
)
CURL_OFF = (
    "--disable-shared --enable-static --with-pic --without-libpsl "
    "--without-libidn2 --without-brotli --without-zstd --without-zlib "
    "--without-librtmp --without-libssh2 --without-libgsasl --disable-ldap "
    "--disable-ldaps --disable-rtsp --disable-dict --disable-telnet "
    "--disable-tftp --disable-pop3 --disable-imap --disable-smtp "
    "--disable-gopher --disable-mqtt --disable-smb --disable-manual "
    "--disable-ntlm --disable-alt-svc --disable-hsts "
    # a last resort only: the loader names the system's CA bundle itself
    "--with-ca-bundle=/etc/ssl/certs/ca-certificates.crt"
).split()


def log(msg: str) -> None:
    print(f"wheels: {msg}", flush=True)


def run(cmd: list[str], cwd: Path | None = None, env: dict | None = None, quiet=True):
    """Run cmd; on failure show its output's end and stop."""
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE if quiet else None,
        stderr=subprocess.STDOUT if quiet else None,
        text=True,
    )
    if proc.returncode != 0:
        if quiet:
            sys.stdout.write(proc.stdout[-6000:])
        sys.exit(f"wheels: failed ({proc.returncode}): {' '.join(cmd)}")
    return proc


def zig_cc(deps: Path) -> Path:
    """A compiler command for glibc GLIBC: zig cc (the ziglang package)."""
    try:
        import ziglang  # noqa: F401
    except ImportError:
        sys.exit("wheels: needs zig: pip install -r packaging/requirements.txt")
    cc = deps / "zcc"
    cc.write_text(
        "#!/bin/sh\n"
        f'exec "{sys.executable}" -m ziglang cc -target x86_64-linux-gnu.{GLIBC} "$@"\n'
    )
    cc.chmod(0o755)
    return cc


def fetch_sources(src: Path, names: tuple[str, ...] = SOURCES) -> dict[str, Path]:
    """Debian's sources of the libraries, patches applied (apt-get source;
    deb-src entries are needed)."""
    src.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in names:
        found = [p for p in src.glob(f"{name}-*") if p.is_dir()]
        if not found:
            log(f"apt-get source {name}")
            proc = subprocess.run(
                ["apt-get", "source", "-qq", name],
                cwd=src,
                capture_output=True,
                text=True,
            )
            found = [p for p in src.glob(f"{name}-*") if p.is_dir()]
            if proc.returncode != 0 or not found:
                sys.exit(
                    f"wheels: apt-get source {name} failed:\n{proc.stderr[-2000:]}\n"
                    "Add deb-src entries to apt's sources (as .ci/run does), then "
                    "apt-get update."
                )
        out[name] = found[0]
    return out


def build_deps(deps: Path, cc: Path) -> Path:
    """OpenSSL, nghttp2 and libcurl, static, for glibc GLIBC, in a prefix."""
    prefix = deps / "prefix"
    stamp = prefix / ".built"
    if stamp.exists():
        return prefix
    shutil.rmtree(prefix, ignore_errors=True)
    src = fetch_sources(deps / "src")
    env = dict(os.environ, CC=str(cc))
    jobs = str(os.cpu_count() or 2)
    log("building OpenSSL (static)")
    run(
        [
            "./Configure",
            "linux-x86_64",
            "no-shared",
            "no-tests",
            "no-engine",
            "no-module",
            "no-dso",
            "no-afalgeng",
            "-fPIC",
            f"--prefix={prefix}",
            "--libdir=lib",
        ],
        cwd=src["openssl"],
        env=env,
    )
    run(["make", f"-j{jobs}", "build_libs"], cwd=src["openssl"], env=env)
    run(["make", "install_dev"], cwd=src["openssl"], env=env)
    log("building nghttp2 (static, library only)")
    b = src["nghttp2"] / "build-wheel"
    shutil.rmtree(b, ignore_errors=True)
    run(
        [
            CMAKE,
            "-S",
            str(src["nghttp2"]),
            "-B",
            str(b),
            "-DCMAKE_POLICY_VERSION_MINIMUM=3.5",
            f"-DCMAKE_C_COMPILER={cc}",
            "-DENABLE_LIB_ONLY=ON",
            "-DENABLE_STATIC_LIB=ON",
            "-DENABLE_SHARED_LIB=OFF",
            "-DCMAKE_POSITION_INDEPENDENT_CODE=ON",
            f"-DCMAKE_INSTALL_PREFIX={prefix}",
            "-DCMAKE_INSTALL_LIBDIR=lib",
            "-DCMAKE_BUILD_TYPE=Release",
        ],
    )
    run([CMAKE, "--build", str(b), f"-j{jobs}"])
    run([CMAKE, "--install", str(b)])
    log("building libcurl (static: HTTP, HTTPS with OpenSSL, HTTP/2)")
    run(
        [
            "./configure",
            f"--prefix={prefix}",
            f"--with-openssl={prefix}",
            f"--with-nghttp2={prefix}",
            *CURL_OFF,
        ],
        cwd=src["curl"],
        env=dict(env, PKG_CONFIG_PATH=str(prefix / "lib/pkgconfig")),
    )
    run(["make", f"-j{jobs}", "-C", "lib"], cwd=src["curl"], env=env)
    run(["make", "-C", "lib", "install"], cwd=src["curl"], env=env)
    run(["make", "-C", "include", "install"], cwd=src["curl"], env=env)
    stamp.touch()
    return prefix


def build_image_deps(deps: Path, cc: Path, prefix: Path) -> None:
    """zlib, libspng, libdeflate and libwebp (with libwebpdemux; libwebp 1.2 holds
    sharpyuv), static
    and position-independent, for glibc GLIBC, into prefix."""
    stamp = prefix / ".built-image"
    if stamp.exists() and all((prefix / "lib" / a).exists() for a in IMAGE_ARCHIVES):
        return
    src = fetch_sources(deps / "src", IMAGE_SOURCES)
    env = dict(os.environ, CC=str(cc), CFLAGS="-O2 -fPIC")
    jobs = str(os.cpu_count() or 2)
    log("building zlib (static)")
    run(["./configure", "--static", f"--prefix={prefix}"], cwd=src["zlib"], env=env)
    run(["make", f"-j{jobs}", "libz.a"], cwd=src["zlib"], env=env)
    run(["make", "install"], cwd=src["zlib"], env=env)
    log("building libspng (static: its one source file)")
    spng = src["libspng"] / "spng"
    obj = deps / "spng.o"
    run(
        [str(cc), "-O2", "-fPIC", "-DSPNG_STATIC", f"-I{prefix}/include", "-c"]
        + [str(spng / "spng.c"), "-o", str(obj)]
    )
    (prefix / "lib").mkdir(parents=True, exist_ok=True)
    (prefix / "lib" / "libspng.a").unlink(missing_ok=True)
    run(["ar", "rcs", str(prefix / "lib" / "libspng.a"), str(obj)])
    shutil.copy(spng / "spng.h", prefix / "include" / "spng.h")
    log("building libdeflate (static: the library alone)")
    run(
        ["make", f"-j{jobs}", "libdeflate.a", f"CC={cc}", "CFLAGS=-O2 -fPIC"],
        cwd=src["libdeflate"],
    )
    shutil.copy(src["libdeflate"] / "libdeflate.a", prefix / "lib" / "libdeflate.a")
    shutil.copy(src["libdeflate"] / "libdeflate.h", prefix / "include" / "libdeflate.h")
    log("building libwebp (static: the decoder and demux)")
    b = src["libwebp"] / "build-wheel"
    shutil.rmtree(b, ignore_errors=True)
    off = ["CWEBP", "DWEBP", "GIF2WEBP", "IMG2WEBP", "VWEBP", "WEBPINFO", "WEBPMUX"]
    run(
        [
            CMAKE,
            "-S",
            str(src["libwebp"]),
            "-B",
            str(b),
            "-DCMAKE_POLICY_VERSION_MINIMUM=3.5",
            f"-DCMAKE_C_COMPILER={cc}",
            "-DBUILD_SHARED_LIBS=OFF",
            "-DCMAKE_POSITION_INDEPENDENT_CODE=ON",
            "-DWEBP_BUILD_ANIM_UTILS=OFF",
            "-DWEBP_BUILD_EXTRAS=OFF",
            "-DWEBP_BUILD_LIBWEBPMUX=OFF",
            *[f"-DWEBP_BUILD_{x}=OFF" for x in off],
            f"-DCMAKE_INSTALL_PREFIX={prefix}",
            "-DCMAKE_INSTALL_LIBDIR=lib",
            "-DCMAKE_BUILD_TYPE=Release",
        ],
    )
    run([CMAKE, "--build", str(b), f"-j{jobs}"])
    run([CMAKE, "--install", str(b)])
    for a in IMAGE_ARCHIVES:
        if not (prefix / "lib" / a).exists():
            sys.exit(f"wheels: {a} was not built into {prefix}/lib")
    stamp.touch()


def private_headers(deps: Path) -> Path:
    """pkg-config files for libjpeg and liburing whose headers sit in a
    folder of their own: zig must not see the system's glibc headers
    (-I/usr/include/x86_64-linux-gnu), only its own glibc GLIBC's."""
    inc, pc = deps / "include", deps / "pkgconfig"
    shutil.rmtree(inc, ignore_errors=True)
    inc.mkdir(parents=True)
    pc.mkdir(exist_ok=True)
    for name in ("libjpeg", "liburing"):
        cflags = run(["pkg-config", "--cflags-only-I", name]).stdout.split()
        dirs = [f[2:] for f in cflags] + ["/usr/include"]
        wanted = (
            ["jpeglib.h", "jmorecfg.h", "jerror.h", "jconfig.h"]
            if name == "libjpeg"
            else ["liburing.h", "liburing"]
        )
        for w in wanted:
            for d in dirs + ["/usr/include/x86_64-linux-gnu"]:
                if os.path.exists(os.path.join(d, w)):
                    (inc / w).symlink_to(os.path.join(d, w))
                    break
            else:
                sys.exit(
                    f"wheels: {w} not found (is the -dev package of {name} installed?)"
                )
        libdir = run(["pkg-config", "--variable=libdir", name]).stdout.strip()
        libs = run(["pkg-config", "--libs", name]).stdout.strip()
        version = run(["pkg-config", "--modversion", name]).stdout.strip()
        (pc / f"{name}.pc").write_text(
            f"libdir={libdir}\nName: {name}\nDescription: {name}\n"
            f"Version: {version}\nCflags: -I{inc}\nLibs: -L{libdir} {libs}\n"
        )
    return pc


# Exits 0 for a CPython with the stable ABI (not a free-threaded build).
HAS_ABI3 = (
    "import sys, sysconfig; "
    "sys.exit(sys.implementation.name != 'cpython' "
    "or bool(sysconfig.get_config_var('Py_GIL_DISABLED')))"
)


def find_pythons() -> list[str]:
    """The CPythons from 3.11 on on this machine, oldest first: python3.X
    on PATH that runs, else pyenv's."""
    out = []
    for minor in range(OLDEST[1], 40):
        name = f"python3.{minor}"
        candidates = [shutil.which(name) or ""] + sorted(
            glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/{name}"))
        )
        for c in filter(None, candidates):
            if subprocess.run([c, "-c", HAS_ABI3], capture_output=True).returncode == 0:
                out.append(c)
                break
    return out or [sys.executable]


def build_wheel(python: str, raw: Path, env: dict) -> Path:
    before = set(raw.glob("*.whl"))
    # A build folder of its own: no object of another build is reused.
    tmp = raw / "tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(
        ROOT,
        tmp,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.so", "benchmarks", "tests"
        ),
    )
    run(
        [python, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(raw), str(tmp)],
        env=env,
    )
    shutil.rmtree(tmp, ignore_errors=True)
    (new,) = set(raw.glob("*.whl")) - before
    return new


def report(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        libs = sorted(
            os.path.basename(n) for n in z.namelist() if ".libs/" in n and n[-1] != "/"
        )
    tag = wheel.name[:-4].split("-", 2)[2]
    size = wheel.stat().st_size / 2**20
    print(
        f"{wheel.name}\n  tag {tag}, {size:.1f} MiB, bundles {', '.join(libs)}"
        ", libcurl + OpenSSL + nghttp2, libspng + libdeflate + libwebp + zlib and "
        "liburing "
        "linked in",
        flush=True,
    )


# Run in each interpreter's fresh environment, where the wheel is installed
# without torch: ringloader/__init__ needs torch, so the module is loaded
# from its file. argv: the JPEG, the PNG, the PNG's RGB pixels, Pillow's
# decode of the JPEG.
ABI3_PROBE = r"""
import glob, importlib.util, os, sys, sysconfig
site = sysconfig.get_paths()["platlib"]
(path,) = glob.glob(os.path.join(site, "ringloader", "_core*.so"))
spec = importlib.util.spec_from_file_location("ringloader._core", path)
core = importlib.util.module_from_spec(spec)
spec.loader.exec_module(core)
print(f"  Python {sys.version.split()[0]}: {os.path.basename(path)} from {site}")
print(f"  libjpeg {core.libjpeg_version}; {core.http_library()}")
jpeg, png = (open(p, "rb").read() for p in sys.argv[1:3])
pixels, pillow = (open(p, "rb").read() for p in sys.argv[3:5])
rgb, h, w = core.decode(png)
assert (h, w) == (24, 32) and rgb == pixels, "PNG decode"
jrgb, jh, jw = core.decode(jpeg)
assert (jh, jw) == (24, 32), "JPEG decode"
diff = max(abs(a - b) for a, b in zip(jrgb, pillow))
print(f"  decode: PNG {w}x{h} exact; JPEG {jw}x{jh}, max diff {diff} to Pillow's")
assert diff <= 1, "JPEG decode"
try:
    core.decode(b"not an image")
except core.DecodeError as e:
    print(f"  DecodeError: {e} (kind {e.kind})")
else:
    raise AssertionError("no DecodeError")
crop = {"kind": "resize_crop", "resize_short": 0, "out_h": 24, "out_w": 32}
p = core.Pipeline(crop, paths=sys.argv[1:3], layout="NHWC")
p.submit([0, 1], [0, 0], 0)
batch = p.next()
view = memoryview(batch)
data = view.tobytes()
assert view.shape == (2, 24, 32, 3) and view.format == "B", (view.shape, view.format)
assert data[: len(jrgb)] == jrgb and data[len(jrgb) :] == pixels, "batch"
print(f"  Pipeline: a batch {tuple(view.shape)} {view.format}, ids {list(batch.ids)}, "
      "equal to the decodes")
view.release()
del batch
p.close()
"""


def probe_images(folder: Path) -> list[str]:
    """A 32x24 JPEG, the same image as a PNG, its RGB pixels and Pillow's
    decode of the JPEG (files)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    pixels = bytes(
        (x * 6 + c * 70 + y * 4) % 256
        for y in range(24)
        for x in range(32)
        for c in range(3)
    )
    img = Image.frombytes("RGB", (32, 24), pixels)
    paths = [folder / n for n in ("probe.jpg", "probe.png", "probe.rgb", "jpeg.rgb")]
    img.save(paths[0], quality=95)
    img.save(paths[1])
    paths[2].write_bytes(pixels)
    paths[3].write_bytes(Image.open(paths[0]).convert("RGB").tobytes())
    return [str(p) for p in paths]


def check_everywhere(wheel: Path, pythons: list[str], folder: Path) -> None:
    """Installs the wheel into a fresh venv of each interpreter (with pip
    alone, no index) and runs ABI3_PROBE there."""
    shutil.rmtree(folder, ignore_errors=True)
    images = probe_images(folder)
    for python in pythons:
        version = run([python, "-c", "import sys; print(sys.version.split()[0])"])
        venv = folder / f"venv-{version.stdout.strip()}"
        run([python, "-m", "venv", str(venv)])
        env = dict(os.environ)
        env.pop("PIP_CONSTRAINT", None)
        py = str(venv / "bin" / "python")
        run(
            [py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
            env=env,
        )
        log(f"check on {python}:")
        print(
            run([py, "-c", ABI3_PROBE, *images], cwd=folder).stdout, end="", flush=True
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pythons", help="comma-separated interpreters (default: found)")
    p.add_argument("--out", default=str(ROOT / "dist"))
    p.add_argument("--deps", default=str(ROOT / "build" / "wheel-deps"))
    args = p.parse_args(argv)
    deps, out = Path(args.deps), Path(args.out)
    deps.mkdir(parents=True, exist_ok=True)
    cc = zig_cc(deps)
    prefix = build_deps(deps, cc)
    build_image_deps(deps, cc, prefix)
    pc = private_headers(deps)
    pythons = args.pythons.split(",") if args.pythons else find_pythons()
    raw = deps / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir()
    env = dict(
        os.environ,
        CC=str(cc),
        LDSHARED=f"{cc} -shared",
        PKG_CONFIG_PATH=str(pc),
        PKG_CONFIG_LIBDIR=str(pc),
        PKG_CONFIG_ALLOW_SYSTEM_LIBS="1",
        RINGLOADER_STATIC_CURL=str(prefix),
        RINGLOADER_STATIC_IMAGE=str(prefix),
    )
    env.pop("RINGLOADER_TEST_HOOKS", None)
    # Each Python's isolated build gets the setuptools that supports it
    # (the pins of requirements-dev.txt are .venv's Python's).
    env.pop("PIP_CONSTRAINT", None)
    out.mkdir(parents=True, exist_ok=True)
    # One wheel now: those of an earlier build (one per Python) would be
    # picked up in its place.
    for old in out.glob("ringloader-*manylinux*.whl"):
        old.unlink()
    log(f"building with {pythons[0]} (the oldest: the wheel serves the later ones)")
    wheel = build_wheel(pythons[0], raw, env)
    tools = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"])
    run(
        [
            os.path.join(BIN, "auditwheel"),
            "repair",
            "--plat",
            PLAT,
            "--strip",
            "-w",
            str(out),
            str(wheel),
        ],
        env=tools,
    )
    (wheel,) = out.glob("ringloader-*manylinux*.whl")
    report(wheel)
    # Only the stable ABI's functions and data, none newer than 3.11's
    # (abi3audit exits non-zero otherwise).
    said = run(
        [os.path.join(BIN, "abi3audit"), "--strict", "--report", str(wheel)],
        env=tools,
    ).stdout
    for spec in json.loads(said[said.index("{") :])["specs"].values():
        for ext in spec["wheel"]:
            r = ext["result"]
            log(
                f"abi3audit: {ext['name']}: stable ABI of {r['baseline']} (needs "
                f"{r['computed']}), {len(r['non_abi3_symbols'])} symbols outside it"
            )
    check_everywhere(wheel, pythons, deps / "check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
