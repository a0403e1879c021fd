#!/usr/bin/env bash
# The system programs the deployment tests run (tests/deploy/): nginx (the gRPC load balancer of
# docker-compose.yml) and pgbouncer (the transaction-mode pooler); and the browser the inspector's
# tests drive (tests/api/test_inspector.py): chromium and chromedriver. Installs the Debian packages
# when a program is missing; quiet and idempotent. Where there is no apt-get it only says so,
# and the tests that need the programs skip with that reason.
set -euo pipefail

export PATH="$PATH:/usr/sbin:/usr/local/sbin:/sbin"
missing=()
command -v nginx >/dev/null || missing+=(nginx)
command -v pgbouncer >/dev/null || missing+=(pgbouncer)
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null; then
  echo "install-system-deps: no apt-get here; install ${missing[*]} yourself (tests/deploy skips without them)" >&2
  exit 0
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  else
    echo "install-system-deps: need root (or passwordless sudo) to apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
echo "install-system-deps: apt-get install ${missing[*]}" >&2
log=$(mktemp)
# RUNLEVEL=1: the packages' init scripts do not start a system nginx or pgbouncer.
if ! { "${sudo[@]}" apt-get update -qq \
       && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
            apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  exit 1
fi
rm -f "$log"
