#!/usr/bin/env bash
# Run here (Debian 12): downloads into .gpu-debs/ (git-ignored) the Debian packages that the GPU
# machine lacks and scripts/gpu-run.sh unpacks there: Boost's program_options and iostreams, HDF5
# with its runtime libraries (and theirs: libcurl's) and h5diff (the CUDA CLI test compares
# checkpoints), OpenSSL's headers, nlohmann-json, GoogleTest, Gloo's headers. Carry .gpu-debs.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  libboost1.74-dev libboost-program-options1.74-dev libboost-program-options1.74.0
  libboost-iostreams1.74-dev libboost-iostreams1.74.0
  libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libsz2 libaec0 libcurl4 hdf5-tools
  libssl-dev libssl3
  # what Debian's libcurl4 (which HDF5 links) needs in turn; gpu-run.sh uses only those the machine lacks
  libbrotli1 libbz2-1.0 libcom-err2 libffi8 libgmp10 libgnutls30 libgssapi-krb5-2 libhogweed6 libidn2-0
  libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0 libldap-2.5-0 liblzma5 libnettle8 libnghttp2-14
  libp11-kit0 libpsl5 librtmp1 libsasl2-2 libssh2-1 libtasn1-6 libunistring2 libzstd1 zlib1g
  nlohmann-json3-dev libgtest-dev libgloo-dev
)
mkdir -p .gpu-debs
(cd .gpu-debs && apt-get download "${packages[@]}")
du -sh .gpu-debs
