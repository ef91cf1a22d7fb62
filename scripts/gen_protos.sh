#!/usr/bin/env bash
# Regenerate the Python gRPC stubs from protos/ into specdec/v1/ (never edit those by hand).
# Usage: scripts/gen_protos.sh [OUTPUT_ROOT]   (default: the repository root)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root}"
python="${PYTHON:-python}"
mkdir -p "$out/specdec/v1"
"$python" -m grpc_tools.protoc -I "$root/protos" \
    --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
    "$root"/protos/specdec/v1/*.proto
touch "$out/specdec/v1/__init__.py"
