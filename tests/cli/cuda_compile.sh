#!/usr/bin/env bash
# xl's own CUDA kernels still compile: every .cu under lib/xl/kernels/cuda, with plain nvcc (they
# include no LibTorch header) and the flags the CMake build gives them (C++17, lib/ on the include
# path, Release), for sm_80 (Ampere) and sm_90 (Hopper). A move or a rename that breaks them fails
# here, on a machine without a GPU, in one line naming the file and the architecture.
# Skipped (77) without nvcc (NVCC names one; else PATH, else /usr/local/cuda/bin).
source "$(dirname "$0")/common.bash"

nvcc=${NVCC:-$(command -v nvcc || true)}
[ -n "$nvcc" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ] || [ ! -x "$nvcc" ]; then
  echo "skipped: no nvcc (set NVCC, or put CUDA's bin/ on PATH)"
  exit 77
fi
"$nvcc" --version | tail -1

sources=("$XL_SOURCE_DIR"/lib/xl/kernels/cuda/*.cu)
[ -e "${sources[0]}" ] || fail "no .cu files under $XL_SOURCE_DIR/lib/xl/kernels/cuda"
flags=(-std=c++17 -O3 -DNDEBUG -Xcompiler=-fPIC -I"$XL_SOURCE_DIR/lib")
archs=(80 90)
gencode() { for a in "$@"; do printf -- '-gencode arch=compute_%s,code=sm_%s ' "$a" "$a"; done; }
for src in "${sources[@]}"; do
  name=$(basename "$src" .cu)
  start=$SECONDS
  # Both architectures in one run (the host side compiles once); only a failure is run again per
  # architecture, to name the one that fails.
  # shellcheck disable=SC2046
  if ! "$nvcc" "${flags[@]}" $(gencode "${archs[@]}") -c "$src" -o "$TMP/$name.o" 2>"$TMP/$name.log"; then
    broken=()
    for arch in "${archs[@]}"; do
      # shellcheck disable=SC2046
      "$nvcc" "${flags[@]}" $(gencode "$arch") -c "$src" -o "$TMP/$name.sm_$arch.o" 2>"$TMP/$name.sm_$arch.log" ||
        broken+=("sm_$arch")
    done
    ((${#broken[@]})) || broken=("sm_80 and sm_90 together")
    sed 's/^/  | /' "$TMP/$name.log" | head -40 >&2
    fail "${src#"$XL_SOURCE_DIR"/} does not compile for ${broken[*]}"
  fi
  echo "$name.cu: $((SECONDS - start)) s"
done
echo "${#sources[@]} files compile for sm_80 and sm_90"
