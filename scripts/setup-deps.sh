#!/usr/bin/env bash
# Installs every build and run dependency of xl from Debian 12 packages. Idempotent: packages
# already present are left alone, so a second run costs a few seconds.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config ccache
  libtorch-dev            # LibTorch 1.13 (CPU)
  libgloo-dev             # the headers of the Gloo collectives LibTorch was built with (data parallel)
  libopenblas0-pthread    # optimized BLAS: without it matmul falls back to reference BLAS (~35x slower)
  libhdf5-dev hdf5-tools  # token files and checkpoints
  libboost-program-options-dev libboost-iostreams-dev
  libgtest-dev libssl-dev nlohmann-json3-dev zlib1g-dev libbz2-dev
  help2man man-db         # man pages from --help
  gnuplot-nox             # plots of pruning curves and ablations
  curl unzip              # Makefile.pipeline downloads full corpora for real users
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
# LibTorch must link the optimized BLAS, not the reference one.
if ! update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | grep -q '^Value: .*openblas'; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo update-alternatives --set libblas.so.3-x86_64-linux-gnu \
    /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 >&2 || true
fi
