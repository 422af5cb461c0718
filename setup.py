"""Build ringloader's C extension against the system's libjpeg-turbo,
libspng, libdeflate, libwebp, zlib, liburing and libcurl, found with pkg-config. No torch, CUDA or C++ is needed to build."""

import glob
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup

# What to install for each missing piece, by Debian/Ubuntu package name.
DEBIAN_PACKAGES = {
    "pkg-config": "pkg-config",
    "libjpeg": "libjpeg62-turbo-dev (Debian) or libjpeg-turbo8-dev (Ubuntu)",
    "spng": "libspng-dev",
    "libdeflate": "libdeflate-dev",
    "libwebp": "libwebp-dev",
    "libwebpdemux": "libwebp-dev",
    "zlib": "zlib1g-dev",
    "liburing": "liburing-dev",
    "libcurl": "libcurl4-openssl-dev",
}
APT_LINE = (
    "$(command -v sudo) apt-get install -y pkg-config libjpeg62-turbo-dev "
    "libspng-dev libdeflate-dev libwebp-dev zlib1g-dev liburing-dev libcurl4-openssl-dev"
    "   # Ubuntu: libjpeg-turbo8-dev"
)


# The image libraries, by pkg-config name: the native decoders link them.
IMAGE_LIBRARIES = (
    "libjpeg", "spng", "libdeflate", "libwebp", "libwebpdemux", "zlib"
)


def fail(message: str) -> None:
    sys.stderr.write(f"\nringloader build error: {message}\n\n")
    raise SystemExit(1)


def check_system_libraries() -> None:
    """Fails naming everything that is missing at once: pkg-config, or the
    libraries pkg-config cannot find, each with its package to install."""
    if shutil.which("pkg-config") is None:
        # Without pkg-config nothing can be looked up: ask for everything.
        missing = dict.fromkeys(
            DEBIAN_PACKAGES, "cannot be looked up without pkg-config"
        )
        missing["pkg-config"] = "not on PATH"
    else:
        missing = {}
        for package in [p for p in IMAGE_LIBRARIES + ("liburing", "libcurl") if p in DEBIAN_PACKAGES]:
            proc = subprocess.run(
                ["pkg-config", "--exists", "--print-errors", package],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                said = proc.stderr.strip().splitlines()
                missing[package] = "pkg-config: " + (said[0] if said else "not found")
        # The HTTP source's newest libcurl API is from 7.47 (HTTP/2 over TLS
        # only); 7.68 (2020, Ubuntu 20.04's) is the oldest supported.
        if "libcurl" in DEBIAN_PACKAGES and "libcurl" not in missing and subprocess.run(
            ["pkg-config", "--atleast-version=7.68.0", "libcurl"]
        ).returncode != 0:
            missing["libcurl"] = "version 7.68 or newer needed"
    if missing:
        lines = [f"  {name}: install {DEBIAN_PACKAGES[name]} ({why})"
                 for name, why in missing.items()]
        fail(
            "missing " + ", ".join(missing) + ":\n" + "\n".join(lines)
            + "\nOn Debian/Ubuntu, all at once (sudo where you are not root):\n  "
            + APT_LINE
        )


def pkg_config(package: str, *flags: str) -> list[str]:
    """Flags for `package`, or for several names separated by spaces
    (check_system_libraries() found them)."""
    proc = subprocess.run(
        ["pkg-config", *flags, *package.split()], capture_output=True, text=True
    )
    if proc.returncode != 0:
        fail(f"pkg-config {' '.join(flags)} {package} failed: {proc.stderr.strip()}")
    return proc.stdout.split()


def liburing_link_args() -> list[str]:
    """Link liburing statically when the archive exists, so the installed
    module has no run-time dependency on liburing.so (io_uring stays
    optional at run time: without kernel support we fall back to pread)."""
    libdir = pkg_config("liburing", "--variable=libdir")
    archive = os.path.join(libdir[0], "liburing.a") if libdir else ""
    if archive and os.path.exists(archive):
        return [archive]
    return pkg_config("liburing", "--libs")


def sources() -> list[str]:
    """Every C file of the core and the bindings; csrc/testing/ (the test
    hooks: I/O fault injection, CUDA breakage, the read benchmark) only in a
    test build (RINGLOADER_TEST_HOOKS=1, what `make test` installs)."""
    out = []
    for root, dirs, files in os.walk("csrc"):
        dirs.sort()
        if os.path.basename(root) == "testing" and not TEST_HOOKS:
            continue
        out += [os.path.join(root, f) for f in sorted(files) if f.endswith(".c")]
    return out


def headers() -> list[str]:
    return [os.path.join(root, f) for root, _, files in os.walk("csrc")
            for f in files if f.endswith(".h")]


TEST_HOOKS = os.environ.get("RINGLOADER_TEST_HOOKS", "") not in ("", "0")

# -fno-wrapv undoes the -fwrapv of Python's own CFLAGS, which come first on
# the command line: with it the resampler's int indices cannot be widened
# once per loop, which cost 6 % of the decode thread's instructions
# (benchmarks/PROFILE.md). Our code does not rely on signed overflow.
# -ffp-contract=off: a * b + c is two roundings, as the reference code
# (torch, Pillow) rounds it, unless the code asks for a fused one (fmaf, the
# FMA intrinsics): gcc contracts nothing in ISO C mode, but clang (zig's
# wheels, CC=clang) contracts within a statement wherever the target has an
# FMA (aarch64; x86 functions built for AVX2+FMA), and its bytes then
# differ (tests/c/test_same_bytes.c, make check-aarch64).
cflags = ["-std=c11", "-O3", "-fno-wrapv", "-ffp-contract=off", "-Wall",
          "-Wextra", "-pthread", "-fvisibility=hidden", "-DRL_HAVE_LIBURING",
          "-Icsrc"]
# Warnings are errors in our own builds (the Makefile's targets, hence CI:
# RINGLOADER_WERROR=1), never in a user's `pip install`, where a compiler
# newer than ours may warn about code it did not warn about before.
if os.environ.get("RINGLOADER_WERROR", "") not in ("", "0"):
    cflags.append("-Werror")
if TEST_HOOKS:
    cflags.append("-DRL_TEST_HOOKS")
ldflags = ["-pthread", "-lm", "-ldl"]

sanitize = os.environ.get("RINGLOADER_SANITIZE", "")
if sanitize:
    # A sanitizer build of the same code, not another code path.
    flags = {"address": "address,undefined", "thread": "thread"}.get(sanitize)
    if flags is None:
        fail("RINGLOADER_SANITIZE must be 'address' or 'thread'")
    cflags += [f"-fsanitize={flags}", "-fno-omit-frame-pointer", "-O1", "-g"]
    ldflags += [f"-fsanitize={flags}"]

# A wheel links libcurl, with OpenSSL and nghttp2, statically from a prefix
# built for an old glibc by packaging/wheels.py (RINGLOADER_STATIC_CURL=
# PREFIX): the wheel then needs no libcurl of the system. The module exports
# its init function alone (packaging/exports.map), so their symbols stay
# inside it, whatever OpenSSL the process has loaded besides.
STATIC_CURL = os.environ.get("RINGLOADER_STATIC_CURL", "")
if STATIC_CURL:
    DEBIAN_PACKAGES.pop("libcurl")
# Likewise libspng, libwebp and zlib (RINGLOADER_STATIC_IMAGE=PREFIX, the
# same prefix; its symbols kept inside the module the same way): Debian's
# own builds of them need a newer glibc than the wheel's.
STATIC_IMAGE = os.environ.get("RINGLOADER_STATIC_IMAGE", "")
STATIC_IMAGE_ARCHIVES = (
    "libspng.a", "libdeflate.a", "libwebpdemux.a", "libwebp.a", "libz.a"
)
if STATIC_IMAGE:
    for name in IMAGE_LIBRARIES[1:]:
        DEBIAN_PACKAGES.pop(name)

check_system_libraries()
if STATIC_IMAGE:
    image_cflags = pkg_config("libjpeg", "--cflags") + [f"-I{STATIC_IMAGE}/include"]
    image_libs = pkg_config("libjpeg", "--libs") + [
        os.path.join(STATIC_IMAGE, "lib", a) for a in STATIC_IMAGE_ARCHIVES
    ]
    if not STATIC_CURL:
        image_libs.append("-Wl,--version-script=" + os.path.join("packaging", "exports.map"))
else:
    image_cflags = pkg_config(" ".join(IMAGE_LIBRARIES), "--cflags")
    image_libs = pkg_config(" ".join(IMAGE_LIBRARIES), "--libs")
uring_cflags = pkg_config("liburing", "--cflags")
if STATIC_CURL:
    curl_cflags = [f"-I{STATIC_CURL}/include"]
    curl_libs = [
        os.path.join(STATIC_CURL, "lib", a)
        for a in ("libcurl.a", "libnghttp2.a", "libssl.a", "libcrypto.a")
    ] + ["-Wl,--version-script=" + os.path.join("packaging", "exports.map")]
else:
    curl_cflags = pkg_config("libcurl", "--cflags")
    curl_libs = pkg_config("libcurl", "--libs")

# The stable ABI of Python 3.11 (the limited API; its buffer protocol is
# 3.11's): one build, named _core.abi3.so, loads in every CPython from 3.11
# on, later ones included, so a wheel tagged cp311-abi3 serves them all. A
# free-threaded Python (3.13t) has no stable ABI yet: it gets a build of its
# own, from the same code, against its full API.
LIMITED_API = 0x030B0000
ABI3 = not sysconfig.get_config_var("Py_GIL_DISABLED")

ext = Extension(
    "ringloader._core",
    sources=sources(),
    extra_compile_args=cflags + image_cflags + uring_cflags + curl_cflags,
    extra_link_args=ldflags + image_libs + liburing_link_args() + curl_libs,
    depends=headers(),
    define_macros=[("Py_LIMITED_API", hex(LIMITED_API))] if ABI3 else [],
    py_limited_api=ABI3,
)

# Objects are compiled with different macros for a test or sanitizer build:
# keep each kind in a build folder of its own, so that none reuses another's.
flavour = "-".join(x for x in ("test" if TEST_HOOKS else "", sanitize) if x)
build_base = f"build/{flavour}" if flavour else "build"
options = {"build": {"build_base": build_base}} if flavour else {}
# A module built before under another name (_core.cpython-311-...so, before
# the stable ABI) would be packed beside this one from the build folder, and
# Python loads that name first: it goes.
suffix = ".abi3.so" if ABI3 else sysconfig.get_config_var("EXT_SUFFIX")
for old in glob.glob(os.path.join(build_base, "lib.*", "ringloader", "_core.*")):
    if not old.endswith(suffix):
        os.remove(old)
if ABI3:
    # The wheel's tag: cp311-abi3, installable on 3.11 and every later CPython.
    options["bdist_wheel"] = {"py_limited_api": f"cp3{(LIMITED_API >> 16) & 0xFF}"}
setup(ext_modules=[ext], options=options)
