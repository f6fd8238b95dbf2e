#!/usr/bin/env bash
# Installs every build and run dependency of xl from Debian 12 packages. Idempotent: packages
# already present are left alone, so a second run costs a few seconds.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config ccache
  libtorch-dev            # LibTorch 1.13 (CPU)
  libgloo-dev             # the headers of the Gloo collectives LibTorch was built with (data parallel)
  libopenblas0-openmp     # optimized BLAS (without it ~35x slower), on OpenMP's threads (below)
  libhdf5-dev hdf5-tools  # token files and checkpoints
  libboost-program-options-dev libboost-iostreams-dev
  libgtest-dev libssl-dev nlohmann-json3-dev zlib1g-dev libbz2-dev
  help2man man-db         # man pages from --help
  gnuplot-nox             # plots of pruning curves and ablations
  curl unzip              # Makefile.pipeline downloads full corpora for real users
  xz-utils zstd           # the tests' compressed corpora
  strace                  # the tests check that outputs are synced to disk before their rename
  jq                      # doc/metrics.md's recipes, which the tests run
  bible-kjv               # the public-domain King James Bible: the offline demo corpus
  python3-h5py            # checks that our HDF5 files read from Python
  python3-torch           # checks that exported state_dicts load in PyTorch
  clang libclang-rt-14-dev  # libFuzzer and the sanitizers (scripts/fuzz.sh)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup-deps: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
# LibTorch must link the optimized BLAS, not the reference one, and OpenBLAS's OpenMP build: it
# runs on LibTorch's OpenMP threads, where the pthreads build keeps a pool of its own that contends
# with them for the cores (2 cores, 2026-11-25, base training: +3% on an Intel Xeon, +6% on a Zen 4).
multiarch=$(gcc -dumpmachine)
for lib in libblas.so.3 liblapack.so.3 libopenblas.so.0; do
  want=/usr/lib/$multiarch/openblas-openmp/$lib
  name=$lib-$multiarch
  [ -e "$want" ] || continue
  update-alternatives --query "$name" 2>/dev/null | grep -qx "Value: $want" && continue
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup-deps: $lib -> $want (update-alternatives)" >&2
  $sudo update-alternatives --set "$name" "$want" >&2
done
