#!/usr/bin/env bash
# Builds the whole CUDA configuration of xl on a machine with nvcc but no GPU, and runs that build's
# CPU tests: the LibTorch inside a CUDA build of PyTorch from PyPI (installed into
# build-cuda/venv), xl's own kernels compiled by nvcc for sm_80 and sm_90, every tool and test
# built, then `ctest -LE cuda` (the GPU tests need a GPU: scripts/gpu-run.sh runs them on one).
# Not in CI: it downloads ~4.6 GB of wheels once, and the build and the tests take about an hour
# on 2 cores; CI checks the kernels alone (tests/cli/cuda_compile.sh).
#
#   scripts/build-cuda.sh [CTEST ARGS...]
#
# Environment: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc); XL_CUDA_TORCH, the
# pip requirement (default torch==2.11.0: PyPI's wheel is built with CUDA 13.0, nvcc's release here,
# and its headers take C++17); XL_CUDA_ARCHITECTURES (default "80;90"); XL_CUDA_STEPS, the steps to
# run (default "venv,configure,build,test"); JOBS (default: the cores).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-cuda
torch_req=${XL_CUDA_TORCH:-torch==2.11.0}
archs=${XL_CUDA_ARCHITECTURES:-80;90}
steps=${XL_CUDA_STEPS:-venv,configure,build,test}
jobs=${JOBS:-$(nproc)}
wants() { [[ ",$steps," == *",$1,"* ]]; }
started=$SECONDS
step_start=$SECONDS
stage() {
  echo "== build-cuda: $1 ($((SECONDS - started)) s in)"
  step_start=$SECONDS
}
took() { echo "== build-cuda: $1 took $((SECONDS - step_start)) s"; }

nvcc=${NVCC:-$(command -v nvcc || true)}
[ -n "$nvcc" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ] || [ ! -x "$nvcc" ]; then
  echo "build-cuda: no nvcc (set NVCC, or put CUDA's bin/ on PATH)" >&2
  exit 1
fi
nvcc_release=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
mkdir -p "$dir"
python=$dir/venv/bin/python
# LibTorch's CMake takes its architectures from TORCH_CUDA_ARCH_LIST, else asks the GPU (there is
# none here) and falls back to a list nvcc 13 refuses: the same ones as xl's, as X.Y, for the
# configure step and for every re-configure a build runs (a new file, a changed CMakeLists.txt).
export TORCH_CUDA_ARCH_LIST=$(echo "$archs" | sed 's/\([0-9]\)\([0-9]\)/\1.\2/g')

if wants venv; then
  stage "Debian packages (scripts/setup-deps.sh)"
  scripts/setup-deps.sh
  stage "PyTorch ($torch_req) into $dir/venv"
  [ -x "$python" ] || python3 -m venv "$dir/venv"
  "$python" -m pip install -q --disable-pip-version-check "$torch_req"
  took "PyTorch"
fi
[ -x "$python" ] || { echo "build-cuda: no $python (run the venv step)" >&2; exit 1; }
# The wheel's CUDA against nvcc's: the kernels' objects link with the CUDA runtime LibTorch loads.
torch_info=$("$python" -W ignore -c 'import torch
print(torch.__version__, torch.version.cuda, int(torch._C._GLIBCXX_USE_CXX11_ABI))')
read -r torch_version torch_cuda torch_abi <<<"$torch_info"
echo "torch $torch_version, built with CUDA $torch_cuda (C++11 ABI: $torch_abi); nvcc $nvcc_release ($nvcc)"
[ "$torch_cuda" != None ] || { echo "build-cuda: $torch_req is a CPU build of PyTorch" >&2; exit 1; }
[ "${torch_cuda%%.*}" = "${nvcc_release%%.*}" ] ||
  { echo "build-cuda: PyTorch's CUDA $torch_cuda and nvcc's $nvcc_release differ in major release" >&2; exit 1; }
# Debian's Boost is built with the C++11 string ABI; wheels before PyTorch 2.7 use the old one.
[ "$torch_abi" = 1 ] || { echo "build-cuda: this LibTorch uses the pre-C++11 ABI; Debian's Boost cannot link with it" >&2; exit 1; }

if wants configure; then
  stage "configure ($dir, CUDA architectures $archs)"
  torch_prefix=$("$python" -W ignore -c 'import torch; print(torch.utils.cmake_prefix_path)')
  # LibTorch's CMake finds its libraries with find_library(... PATHS its lib/), which searches the
  # system's folders first: where Debian's CPU LibTorch is installed (scripts/setup-deps.sh), it
  # would link that one. Its root as a prefix puts its lib/ first.
  torch_root=$("$python" -W ignore -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$torch_root" -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="$archs" \
    >"$dir/cmake.log" 2>&1 || { tail -40 "$dir/cmake.log" >&2; echo "build-cuda: cmake failed: $dir/cmake.log" >&2; exit 1; }
  grep -E "^-- xl: CUDA" "$dir/cmake.log"
  grep "^TORCH_LIBRARY:" "$dir/CMakeCache.txt"
  grep -q "^TORCH_LIBRARY:FILEPATH=$torch_root/" "$dir/CMakeCache.txt" ||
    { echo "build-cuda: CMake found another LibTorch than $torch_root (see $dir/CMakeCache.txt)" >&2; exit 1; }
  grep -q "^-- xl: CUDA kernels: yes" "$dir/cmake.log" ||
    { echo "build-cuda: the configuration has no CUDA kernels (see $dir/cmake.log)" >&2; exit 1; }
  took "configure"
fi

if wants build; then
  stage "build ($jobs jobs)"
  cmake --build "$dir" -j "$jobs"
  took "build"
fi

if wants test; then
  stage "CPU tests (ctest -LE cuda)"
  (cd "$dir" && ctest --output-on-failure -j "$jobs" -LE cuda "$@")
  took "tests"
fi
echo "== build-cuda: done in $((SECONDS - started)) s"
