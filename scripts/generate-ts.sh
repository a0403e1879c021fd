#!/usr/bin/env bash
# Regenerate the TypeScript code (protobuf-es v2, target=ts) for proto/promptadmission/v1 and
# google/rpc/error_details.proto (ErrorInfo, BadRequest, …) into clients/typescript/src/gen
# (or into OUT_DIR when one is given, which is how tests/test_generated_code.py checks for
# staleness).
#
# Usage: scripts/generate-ts.sh [OUT_DIR]     (default OUT_DIR: clients/typescript/src/gen)
# PYTHON selects the interpreter; it needs grpcio-tools (protoc) and googleapis-common-protos
# (the google/rpc .proto files), both pinned in pyproject.toml (make install). The plugin is
# clients/typescript/node_modules/.bin/protoc-gen-es, pinned in clients/typescript/package-lock.json
# (make ts-install).
#
# Everything runs locally (protoc from grpcio-tools, the plugin from npm): no remote plugins.
# The output directory is rebuilt from scratch, so stale files vanish.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
out_dir=${1:-clients/typescript/src/gen}
plugin=$root/clients/typescript/node_modules/.bin/protoc-gen-es
if [[ ! -x "$plugin" ]]; then
  echo "generate-ts.sh: $plugin is missing; run \`make ts-install\`" >&2
  exit 1
fi

# The directory holding google/rpc/*.proto (shipped by googleapis-common-protos).
googleapis=$("$PYTHON" -c '
import pathlib, google.rpc.status_pb2 as m
print(pathlib.Path(m.__file__).resolve().parents[2])')

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mapfile -t protos < <(cd proto && find promptadmission/v1 -name '*.proto' | LC_ALL=C sort)

"$PYTHON" -m grpc_tools.protoc \
  --proto_path=proto \
  --proto_path="$googleapis" \
  --plugin=protoc-gen-es="$plugin" \
  --es_out="$work" \
  --es_opt=target=ts,import_extension=js \
  "${protos[@]}" google/rpc/error_details.proto

mkdir -p "$out_dir"
rm -rf "${out_dir:?}"
mkdir -p "$out_dir"
cp -R "$work"/. "$out_dir"/
