#!/usr/bin/env bash
# Run on the GPU machine from the repository root (device tool, carry .gpu-debs made by
# scripts/gpu-debs.sh): builds xl against the LibTorch inside the machine's pip PyTorch, with
# CUDA, then runs what is asked:
#   bash scripts/gpu-run.sh test     the CUDA tests (ctest -L cuda) and the CPU suite's model tests
#   bash scripts/gpu-run.sh bench    bench/gpu.sh: tokens/s, peak memory and MFU on the GPU (JSON);
#                                    with REFERENCE=DIR (a carried transformer-xl checkout's pytorch/
#                                    folder), the standard PyTorch Transformer-XL beside it
#   bash scripts/gpu-run.sh all      both
# The machine has no Boost, HDF5 or network: their Debian packages are unpacked under
# /tmp/xl-deps and found through CMAKE_PREFIX_PATH and LD_LIBRARY_PATH. Logs go to $OUT when set.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
out=${OUT:-/tmp/xl-gpu-out}
mkdir -p "$out"
deps=/tmp/xl-deps
ls .gpu-debs/*.deb >/dev/null 2>&1 || { echo "gpu-run: no .gpu-debs/*.deb (run scripts/gpu-debs.sh here and carry .gpu-debs)" >&2; exit 66; }
for f in .gpu-debs/*.deb; do dpkg -x "$f" "$deps"; done
lib=$deps/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$lib:$lib/hdf5/serial${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi -L | tee "$out/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/gpu.txt"
# Debian's Boost is built with the C++11 string ABI; wheels before PyTorch 2.7 use the old one.
python3 -c 'import sys, torch; sys.exit(0 if torch._C._GLIBCXX_USE_CXX11_ABI else 1)' ||
  { echo "gpu-run: this PyTorch's LibTorch uses the pre-C++11 ABI; Debian's Boost cannot link with it (use PyTorch 2.7 or later)" >&2; exit 69; }
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_include=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
extra_include=$deps/usr/include
# Gloo's headers: the wheel's own when it has them, else Debian's.
[ -d "$torch_include/gloo" ] && extra_include=$torch_include:$extra_include
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr;$lib/cmake" \
  -DHDF5_ROOT="$lib/hdf5/serial" -DHDF5_C_INCLUDE_DIR="$deps/usr/include/hdf5/serial" \
  -DCMAKE_CXX_FLAGS="-I${extra_include//:/ -I}" -DCMAKE_CUDA_ARCHITECTURES=90 2>&1 | tee "$out/cmake.log" | tail -5
cmake --build build-gpu -j "$(nproc)" 2>&1 | tee "$out/build.log" | grep -E "error|warning: |Linking CXX executable bin" | tail -20
missing=$(ldd build-gpu/bin/xl-train-phase1 | grep "not found" || true)
[ -z "$missing" ] || { echo "gpu-run: libraries not found: $missing" >&2; exit 69; }
if [ "$what" = test ] || [ "$what" = all ]; then
  (cd build-gpu && ctest -L cuda --output-on-failure 2>&1 | tee "$out/cuda-tests.log" | tail -15)
  (cd build-gpu && ctest -R 'RelAttention|Model\.|ChunkedAttention|Adam|cli.train$' 2>&1 | tee "$out/cpu-tests.log" | tail -5)
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  XL_BUILD=build-gpu bash bench/gpu.sh | tee "$out/bench.json"
fi
