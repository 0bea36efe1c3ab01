#!/usr/bin/env bash
# Build (once) a CPython the machine lacks, for `make test-pythons`, and print its interpreter's
# path. python.org is not reachable from the machines this project is built on, Debian's
# packages are: the source is Debian's copy of the upstream release (`*.orig.tar.xz`, the
# unmodified python.org tarball), pinned by version and sha256 below; python.org is tried when
# Debian's mirror does not answer. Built into ~/.cache/solaris/python-<version> (a few minutes
# on 2 cores, no PGO: it runs tests, not production), reused afterwards.
# Usage: bash infra/python.sh 3.13   -> prints the interpreter's path
set -euo pipefail

CACHE=${SOLARIS_CACHE_DIR:-$HOME/.cache/solaris}
want=${1:?usage: infra/python.sh MAJOR.MINOR}
case "$want" in
  3.12) version=; sha=; debian= ;;  # only when installed (below): in no current Debian suite
  # version, sha256 of Python-<version>.tar.xz (= Debian trixie's python3.13_3.13.5.orig.tar.xz)
  3.13) version=3.13.5 sha=93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640
        debian=http://deb.debian.org/debian/pool/main/p/python3.13/python3.13_3.13.5.orig.tar.xz ;;
  *) echo "[python] unsupported Python $want (pyproject: >=3.11,<3.14)" >&2; exit 1 ;;
esac

# Already on the machine: a working python3.X on PATH (a pyenv shim for a version that is not
# selected fails to run, so it is run, not just found), or one of pyenv's installed versions.
works() { "$1" -c 'import ssl, sqlite3, lzma, ctypes' >/dev/null 2>&1; }
if command -v "python$want" >/dev/null 2>&1 && works "python$want"; then
  command -v "python$want"; exit 0
fi
for found in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/"python$want"; do
  if [ -x "$found" ] && works "$found"; then echo "$found"; exit 0; fi
done
if [ -z "$version" ]; then
  echo "[python] Python $want is not installed and there is no source this script may fetch" \
       "(Debian dropped python3.12; python.org is unreachable here): install it, e.g. pyenv" >&2
  exit 1
fi
prefix="$CACHE/python-$version"
bin="$prefix/bin/python$want"
if [ -x "$bin" ] && [ -f "$prefix/.complete" ]; then echo "$bin"; exit 0; fi

# Build dependencies of the stdlib modules the project uses (ssl, sqlite3, lzma, ctypes, ...).
need=(build-essential libssl-dev zlib1g-dev libffi-dev libsqlite3-dev libbz2-dev liblzma-dev
      libreadline-dev uuid-dev)
missing=()
for pkg in "${need[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "[python] installing build dependencies: ${missing[*]}" >&2
  sudo=(); [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >&2
fi

src="$CACHE/python-src"
tarball="$src/Python-$version.tar.xz"
mkdir -p "$src"
if ! echo "$sha  $tarball" | sha256sum -c --status 2>/dev/null; then
  echo "[python] fetching Python $version source" >&2
  curl -fsSL --retry 3 -o "$tarball.part" "$debian" \
    || curl -fsSL --retry 3 -o "$tarball.part" \
         "https://www.python.org/ftp/python/$version/Python-$version.tar.xz"
  echo "$sha  $tarball.part" | sha256sum -c --status \
    || { echo "[python] sha256 mismatch for $tarball.part: refusing it" >&2; exit 1; }
  mv "$tarball.part" "$tarball"
fi

build=$(mktemp -d "$src/build-XXXX")
trap 'rm -rf "$build"' EXIT
tar -xJf "$tarball" -C "$build"
log="$src/build-$version.log"
echo "[python] building Python $version into $prefix (log: $log)" >&2
(
  cd "$build/Python-$version"
  ./configure --prefix="$prefix" --with-ensurepip=install >"$log" 2>&1
  make -j"$(nproc)" >>"$log" 2>&1
  rm -rf "$prefix"
  make install >>"$log" 2>&1
) || { echo "[python] build failed: see $log" >&2; exit 1; }
"$bin" -c 'import ssl, sqlite3, lzma, bz2, ctypes, zlib, readline' \
  || { echo "[python] $bin lacks a stdlib module (see $log)" >&2; exit 1; }
touch "$prefix/.complete"
echo "$bin"
