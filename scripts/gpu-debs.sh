#!/usr/bin/env bash
# Run here (Debian 12): downloads into .gpu-debs/ (git-ignored) the Debian packages that the GPU
# machine lacks and scripts/gpu-run.sh unpacks there: Boost's program_options and iostreams, HDF5
# with its runtime libraries, nlohmann-json, GoogleTest, Gloo's headers. Carry .gpu-debs with the call.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  libboost1.74-dev libboost-program-options1.74-dev libboost-program-options1.74.0
  libboost-iostreams1.74-dev libboost-iostreams1.74.0
  libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libsz2 libaec0 libcurl4
  nlohmann-json3-dev libgtest-dev libgloo-dev
)
mkdir -p .gpu-debs
(cd .gpu-debs && apt-get download "${packages[@]}")
du -sh .gpu-debs
