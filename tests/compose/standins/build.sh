#!/usr/bin/env bash
# Builds local stand-ins for the official base images that the Dockerfile and docker-compose.yml
# name (python:*-slim, postgres:*, nginx:*), because no image registry is reachable here. Each is
# built on a Debian bookworm root filesystem made by mmdebstrap from Debian's packages, and
# tagged with the official name, so the real Dockerfile and the real compose file run unchanged.
#
#   tests/compose/standins/build.sh PYTHON_TAG POSTGRES_TAG NGINX_TAG
#
# An image is rebuilt only when its build files change: each carries the content hash of its
# build files (and of the base's) in the label org.pas.standin-hash, compared before building.
# The stand-ins provide Debian's versions (Python 3.11, PostgreSQL 15, nginx 1.22) whatever the
# tag says; each entrypoint reproduces only the documented behaviour of the official image that
# the compose file relies on (see the entrypoint scripts).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export DOCKER_BUILDKIT=0

python_tag=${1:?python image tag}
postgres_tag=${2:?postgres image tag}
nginx_tag=${3:?nginx image tag}

base_tag=pas-standin/debian:bookworm
label=org.pas.standin-hash
# The host's CA bundle joins the base's: package registries are reached through it (pip, which
# carries its own bundle, is pointed at the system one).
host_ca=/etc/ssl/certs/ca-certificates.crt
mirror="deb http://deb.debian.org/debian bookworm main"

log() { echo "standins: $*" >&2; }

current_hash() { # image -> its label, empty when the image is missing
  docker image inspect --format "{{ index .Config.Labels \"$label\" }}" "$1" 2>/dev/null || true
}

hash_of() { # files and strings -> one sha256
  { for item in "$@"; do
      if [ -f "$item" ]; then sha256sum <"$item"; else printf '%s\n' "$item" | sha256sum; fi
    done; } | sha256sum | cut -c1-16
}

build_base() {
  # The recipe is this function's own text (its mmdebstrap command) and the host's CA bundle.
  base_hash=$(hash_of "$(declare -f build_base)" "$mirror" "$host_ca")
  if [ "$(current_hash "$base_tag")" = "$base_hash" ]; then
    log "$base_tag is current"
    return
  fi
  log "building $base_tag with mmdebstrap (about a minute)"
  # shellcheck disable=SC2086 # the recipe is words on purpose
  mmdebstrap --quiet --variant=minbase --include=ca-certificates \
      --customize-hook="upload $host_ca /usr/local/share/ca-certificates/host-bundle.crt" \
      --customize-hook='chroot "$1" update-ca-certificates --fresh >/dev/null 2>&1' \
      bookworm - "$mirror" \
    | docker import \
        --change "LABEL $label=$base_hash" \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
        --change 'CMD ["bash"]' \
        - "$base_tag" >/dev/null
}

build_standin() { # directory tag
  local dir=$here/$1 tag=$2 files want
  files=$(find "$dir" -type f | sort)
  # shellcheck disable=SC2086 # one word per file
  want=$(hash_of "$base_hash" $files)
  if [ "$(current_hash "$tag")" = "$want" ]; then
    log "$tag is current"
    return
  fi
  log "building $tag from $dir"
  docker build --quiet --network host --label "$label=$want" \
    --build-arg "BASE=$base_tag" --tag "$tag" "$dir" >/dev/null
}

build_base
build_standin python "$python_tag"
build_standin postgres "$postgres_tag"
build_standin nginx "$nginx_tag"
