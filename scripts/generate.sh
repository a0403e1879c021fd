#!/usr/bin/env bash
# Regenerate the Python gRPC code for proto/promptadmission/v1 into
# clients/python/src/promptadmission/v1 (or into OUT_DIR/promptadmission/v1 when an output
# root is given, which is how tests/test_generated_code.py checks for staleness).
#
# Usage: scripts/generate.sh [OUT_DIR]      (default OUT_DIR: clients/python/src)
# PYTHON selects the interpreter; it needs grpcio-tools and mypy-protobuf (make install).
#
# Everything runs locally through `python -m grpc_tools.protoc`: no remote buf plugins.
# The output is deterministic for pinned tool versions: the proto files are passed in sorted
# order, the v1 directory is rebuilt from scratch (stale files vanish), and the package's
# __init__.py is written here.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
out_root=${1:-clients/python/src}
package_dir=promptadmission/v1

# Plugins live next to the interpreter's console scripts (protoc-gen-mypy, protoc-gen-mypy_grpc).
scripts_dir=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mapfile -t protos < <(cd proto && find "$package_dir" -name '*.proto' | LC_ALL=C sort)

"$PYTHON" -m grpc_tools.protoc \
  --proto_path=proto \
  --plugin=protoc-gen-mypy="$scripts_dir/protoc-gen-mypy" \
  --plugin=protoc-gen-mypy_grpc="$scripts_dir/protoc-gen-mypy_grpc" \
  --python_out="$work" \
  --grpc_python_out="$work" \
  --mypy_out="$work" \
  --mypy_grpc_out="$work" \
  "${protos[@]}"

printf '"""Generated code for promptadmission.v1. Do not edit: run `make generate`."""\n' \
  >"$work/$package_dir/__init__.py"

# promptadmission.v1.error_reasons.Reason: the ErrorInfo.reason strings as a typed StrEnum,
# derived from the generated ErrorReason enum (no hand-written list can drift from the proto).
"$PYTHON" - "$work/$package_dir" <<'PY'
import importlib.util, pathlib, sys
package = pathlib.Path(sys.argv[1])
spec = importlib.util.spec_from_file_location("error_reason_pb2", package / "error_reason_pb2.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
enum = module.ErrorReason.DESCRIPTOR
lines = [
    '"""The ErrorInfo.reason values, generated from promptadmission.v1.ErrorReason (see',
    "error_reason.proto for each one's meaning and status code). Do not edit: run `make generate`.",
    '"""',
    "",
    "from enum import StrEnum",
    "",
    "",
    "class Reason(StrEnum):",
    '    """An ErrorInfo.reason string; a newer server may send one that is not listed."""',
    "",
]
lines += [f'    {v.name} = "{v.name}"' for v in enum.values if v.number != 0]
(package / "error_reasons.py").write_text("\n".join(lines) + "\n")
PY

mkdir -p "$out_root/$package_dir"
rm -rf "${out_root:?}/$package_dir"
mkdir -p "$out_root/$package_dir"
cp "$work/$package_dir"/* "$out_root/$package_dir/"
