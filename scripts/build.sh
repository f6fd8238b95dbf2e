#!/usr/bin/env bash
# Installs the dependencies (Debian packages) and builds xl into build/ (tools in build/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
[ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
cmake --build build -j "$(nproc)"
