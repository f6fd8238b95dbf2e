#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test (unit and CLI) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
