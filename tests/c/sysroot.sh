#!/usr/bin/env bash
# sysroot.sh DEBARCH DIR - a sysroot for cross-building and running the C
# unit tests: Debian's -dev packages of the C core's libraries for DEBARCH
# (arm64), with everything they depend on (libc6 included), unpacked into
# DIR. Nothing is installed on the system: apt runs with its own state and
# cache under DIR.apt (an empty package status, so that it resolves the
# whole dependency closure for DEBARCH) and only downloads; each .deb is
# unpacked with dpkg -x. The package lists come from the system's apt
# sources (/etc/apt). DIR is made anew when the package set changes (the
# stamp holds the list); otherwise this does nothing.
set -euo pipefail
arch=$1
dir=$2
# setup.py's libraries (tests/c/Makefile's IMAGE_LIBS, liburing, libcurl)
# and the C library's headers.
pkgs="libc6-dev libjpeg62-turbo-dev libspng-dev libdeflate-dev libwebp-dev
zlib1g-dev liburing-dev libcurl4-openssl-dev"
want="$arch $(echo $pkgs)"
if [ "$(cat "$dir/.ringloader-sysroot" 2>/dev/null)" = "$want" ]; then
    exit 0
fi
# Made beside DIR and renamed into place, so that an interrupted run leaves
# no half sysroot behind a stamp.
work="$dir.apt.$$"
new="$dir.new.$$"
trap 'rm -rf "$work" "$new"' EXIT
mkdir -p "$work/state/lists/partial" "$work/cache/archives/partial" "$new"
: > "$work/state/status"
# APT::Sandbox::User: the private folders belong to whoever runs this, not
# to apt's _apt user. Architectures: DEBARCH only, whatever dpkg's list of
# foreign architectures says.
apt=(apt-get -q -o "Dir::State=$work/state"
    -o "Dir::State::status=$work/state/status" -o "Dir::Cache=$work/cache"
    -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
    -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch"
    -o "APT::Sandbox::User=$(id -un)" -o "Debug::NoLocking=1")
"${apt[@]}" update >/dev/null
# shellcheck disable=SC2086
"${apt[@]}" install -y --download-only --no-install-recommends $pkgs >/dev/null
for deb in "$work"/cache/archives/*.deb; do
    dpkg -x "$deb" "$new"
done
# The -dev packages' .so links that point at an absolute path (/lib/...)
# would leave the sysroot: they point within it instead, relatively, so
# that the sysroot may be moved.
find "$new" -type l -lname '/*' | while read -r link; do
    ln -sfnr "$new$(readlink "$link")" "$link"
done
echo "$want" > "$new/.ringloader-sysroot"
rm -rf "$dir"
mv "$new" "$dir"
echo "sysroot for $arch: $dir, $(ls "$work"/cache/archives/*.deb | wc -l) packages"
