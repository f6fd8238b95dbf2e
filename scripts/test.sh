#!/usr/bin/env bash
# Installs the dependencies, builds, and runs every test (unit and CLI) with ctest, then a short
# run of every fuzz target (scripts/fuzz.sh; FUZZ_SECONDS each, default 5; 0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)" "$@")
if [ "${FUZZ_SECONDS:-5}" != 0 ]; then scripts/fuzz.sh "${FUZZ_SECONDS:-5}"; fi
