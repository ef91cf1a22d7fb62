#!/usr/bin/env bash
# Builds llama.cpp's C++ `llama-server` from the llama.cpp source llama-cpp-python vendors (the same llama.cpp
# as specdec's llama_cpp engine), once, into a cache: a peer for benchmarks/peers.py (--llama-server), not a CI
# step. About 20-30 minutes on 2 cores; a second run finds the binary and prints its path.
#
#   bash benchmarks/build_llama_server.sh            # prints the path of llama-server
#   LLAMA_CPP_PYTHON_VERSION=0.3.36 SPECDEC_CACHE_DIR=~/.cache/specdec bash benchmarks/build_llama_server.sh
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${SPECDEC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/specdec}/llama-server-$VERSION"
BINARY="$CACHE/bin/llama-server"
if [ -x "$BINARY" ]; then
    echo "$BINARY"
    exit 0
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# The sdist, not a wheel: the wheel holds only the shared libraries, the sdist the whole vendored tree.
python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK" >&2
tar -xzf "$WORK/llama_cpp_python-$VERSION.tar.gz" -C "$WORK"
SOURCE="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
# CPU only, this machine's instruction set (as llama-cpp-python's own build), no downloads (the web UI is left
# out: the benchmark uses the OpenAI API), no HTTPS.
cmake -S "$SOURCE" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >&2
cmake --build "$WORK/build" --target llama-server -j "$(nproc)" >&2
mkdir -p "$CACHE/bin"
cp "$WORK/build/bin/llama-server" "$BINARY"
echo "$BINARY"
