#!/usr/bin/env bash
# `make compose-test`: the real image and the real docker-compose.yml under a real Docker engine.
#
#  1. Installs Debian's docker.io, docker-compose and mmdebstrap when missing (apt-get).
#  2. Starts dockerd when none answers (and stops it again at the end).
#  3. Builds the stand-ins for the official base images the Dockerfile and the compose file name
#     (no image registry is reachable here; tests/compose/standins, cached by content hash).
#  4. Builds the project's image from the Dockerfile (`--network host`: pip reaches PyPI).
#  5. Brings the topology up with `docker-compose up --no-build -d` under a project name of its
#     own, on free loopback ports, and runs the checks through the balancer (tests/compose).
#  6. Tears the project down (containers, network, volume) whatever happened, printing the
#     containers' logs first when something failed.
#
# Needs root (apt-get, dockerd). Prints the time of each phase.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
export PATH="$PATH:/usr/sbin:/sbin"
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0
VENV_BIN=${VENV_BIN:-$repo/.venv/bin}
started_at=$SECONDS
phase() { echo "compose-test: [$((SECONDS - started_at))s] $*" >&2; }

# ---- 1. packages ------------------------------------------------------------------------------
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "compose-test: need root to apt-get install ${missing[*]}" >&2
    exit 1
  fi
  phase "apt-get install ${missing[*]}"
  log=$(mktemp)
  if ! { apt-get update -qq \
         && DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 \
              apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
  rm -f "$log"
fi
# Debian's client, matching its engine (a newer client elsewhere on PATH works too, but this is
# the pair the packages were built for).
docker=$(command -v /usr/bin/docker || command -v docker)
docker() { "$docker" "$@"; }

# ---- 2. the engine ----------------------------------------------------------------------------
dockerd_pid=
if ! docker info >/dev/null 2>&1; then
  phase "starting dockerd (log: /tmp/dockerd.log)"
  setsid dockerd </dev/null >/tmp/dockerd.log 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || { cat /tmp/dockerd.log >&2; exit 1; }
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || { echo "compose-test: dockerd did not answer" >&2; exit 1; }
fi

project="pas-compose-test-$$"
compose=(docker-compose --project-name "$project" --file "$repo/docker-compose.yml")
checks_passed=
cleanup() {
  status=$?
  set +e
  if [ -n "${compose_up:-}" ]; then
    if [ -z "$checks_passed" ]; then
      echo "compose-test: FAILED; the containers' logs:" >&2
      "${compose[@]}" ps -a >&2
      "${compose[@]}" logs --no-color --tail=80 >&2
    fi
    phase "tearing down $project"
    "${compose[@]}" down --volumes --remove-orphans --timeout 5 >/dev/null 2>&1
  fi
  if [ -n "$dockerd_pid" ]; then
    kill "$dockerd_pid" 2>/dev/null && wait "$dockerd_pid" 2>/dev/null
  fi
  phase "done (exit $status)"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 3. stand-in base images ------------------------------------------------------------------
python_image=$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile)
postgres_image=$(sed -n 's/^ *image: *\(postgres:.*\)$/\1/p' docker-compose.yml)
nginx_image=$(sed -n 's/^ *image: *\(nginx:.*\)$/\1/p' docker-compose.yml)
phase "stand-in base images: $python_image $postgres_image $nginx_image"
tests/compose/standins/build.sh "$python_image" "$postgres_image" "$nginx_image"

# ---- 4. the project's image -------------------------------------------------------------------
service_image=$(sed -n 's/^ *image: *\(prompt-admission-service:.*\)$/\1/p' docker-compose.yml)
phase "docker build $service_image"
docker build --quiet --network host --tag "$service_image" . >/dev/null

# ---- 5. up, and the checks --------------------------------------------------------------------
free_port() { "$VENV_BIN/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PAS_GRPC_PORT=$(free_port)
PAS_METRICS_PORT_A=$(free_port)
PAS_METRICS_PORT_B=$(free_port)
export PAS_GRPC_PORT PAS_METRICS_PORT_A PAS_METRICS_PORT_B
# The topology gets exactly what a user's `up` gets: none of this shell's service settings.
unset DATABASE_URL PAS_AUTH_TOKENS PAS_POSTGRES_PASSWORD PAS_DB_OWNER_PASSWORD PAS_DB_APP_PASSWORD
phase "docker-compose up --no-build -d (project $project, gRPC on 127.0.0.1:$PAS_GRPC_PORT)"
compose_up=1
"${compose[@]}" up --no-build -d

phase "checks through the balancer"
PAS_COMPOSE_PROJECT=$project PAS_COMPOSE_FILE=$repo/docker-compose.yml \
  PAS_COMPOSE_DOCKER=$docker \
  "$VENV_BIN/pytest" -q -p no:cacheprovider tests/compose
checks_passed=1
