#!/usr/bin/env python3
"""Build ringloader's manylinux wheels (``make wheel``).

One wheel per CPython found (3.9 to 3.13), each installable with pip alone:

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

Prints each wheel's name, tag, size and bundled libraries. Built libraries
are kept under ``build/wheel-deps`` (delete it to rebuild them).

  python packaging/wheels.py                      # every CPython found
  python packaging/wheels.py --pythons python3.11 --out dist
"""

from __future__ import annotations

import argparse
import glob
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


def find_pythons() -> list[str]:
    """The CPythons 3.9 to 3.13 on this machine: python3.X on PATH that
    runs, else pyenv's."""
    out = []
    for minor in range(9, 14):
        name = f"python3.{minor}"
        candidates = [shutil.which(name) or ""] + sorted(
            glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/{name}"))
        )
        for c in candidates:
            if c and subprocess.run([c, "-c", ""], capture_output=True).returncode == 0:
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
    for python in pythons:
        log(f"building for {python}")
        wheel = build_wheel(python, raw, env)
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
            env=dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"]),
        )
    for wheel in sorted(out.glob("ringloader-*manylinux*.whl")):
        report(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
