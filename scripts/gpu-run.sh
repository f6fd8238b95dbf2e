#!/usr/bin/env bash
# Run on the GPU machine from the repository root (device tool, carry .gpu-debs made by
# scripts/gpu-debs.sh, and .gpu-ref for the reference): builds xl against the LibTorch inside the
# machine's pip PyTorch, with CUDA, then runs what is asked:
#   bash scripts/gpu-run.sh test     the CUDA tests (ctest -L cuda: GPU == CPU, the bf16 chain), and
#                                    cli.import_torch against the machine's PyTorch 2.x
#   bash scripts/gpu-run.sh cuda     the CUDA tests alone (cli.cuda among them: the tools built)
#   bash scripts/gpu-run.sh units    the CUDA unit tests alone (xl_cuda_tests: no tools built; the
#                                    quickest check, for a lease's last minutes)
#   bash scripts/gpu-run.sh interop  cli.import_torch alone (the tools built, no CUDA tests)
#   bash scripts/gpu-run.sh bench    bench/gpu.sh: tokens/s, peak memory and MFU on the GPU (JSON),
#                                    then xl's explicit attention in bf16 and the enwik8 model's
#                                    training in fp16 (loss scaling); with
#                                    REFERENCE=DIR (a transformer-xl checkout's pytorch/ folder,
#                                    carried), the standard PyTorch Transformer-XL beside it
#   bash scripts/gpu-run.sh kernels  the enwik8 model's evaluation (bf16; KERNEL_MODES="eval train")
#                                    through each attention kernel (XL_KERNELS=own: xl's flash
#                                    kernels; library: LibTorch's fused one; generic: the explicit
#                                    path; and the default choice) at segments of 512 and 128 beside
#                                    memories of 512 to 3,800 (KERNEL_SHAPES="TGT/MEM ..."), memory
#                                    full: tokens/s and peak memory; training with deterministic
#                                    algorithms off (XL_DETERMINISTIC=0), which xl's backward needs
#   bash scripts/gpu-run.sh attention  bench/gpu_attention.py: which formulation of the attention
#                                    core a GPU step should use (PyTorch alone; needs no build)
#   bash scripts/gpu-run.sh profile  where a training step's time goes (PROFILES, default: the
#                                    enwik8 model in bf16 and fp32, wt103 in bf16): one step each
#                                    under LibTorch's profiler, kernels made synchronous
#                                    (CUDA_LAUNCH_BLOCKING=1), summed by bench/profile_summary.py
#   bash scripts/gpu-run.sh all      test, bench and attention
# Several at once as a list: bash scripts/gpu-run.sh test,bench
# The machine has no Boost, HDF5 or network: their Debian packages are unpacked under /tmp/xl-deps;
# of their libraries, only those the machine lacks are put on LD_LIBRARY_PATH, so nothing of the
# machine's own (its Python's OpenSSL, say) is shadowed. Everything stops by XL_GPU_SECONDS
# (default 540) after the start, so that a lease's call always returns its logs: they go to $OUT
# (eight files at most come back from there).
set -uo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
wants() { { [ "$what" = all ] && [ "$1" != profile ]; } || [[ ",$what," == *",$1,"* ]]; }
out=${OUT:-/tmp/xl-gpu-out}
mkdir -p "$out"
deadline=$((SECONDS + ${XL_GPU_SECONDS:-540}))
left() { echo $((deadline - SECONDS)); }
stage() { echo "== $1 ($SECONDS s in, $(left) s left)"; }
deps=/tmp/xl-deps

stage "dependencies"
ls .gpu-debs/*.deb >/dev/null 2>&1 || { echo "gpu-run: no .gpu-debs/*.deb (run scripts/gpu-debs.sh here and carry .gpu-debs)" >&2; exit 66; }
for f in .gpu-debs/*.deb; do dpkg -x "$f" "$deps"; done
lib=$deps/usr/lib/x86_64-linux-gnu
mkdir -p "$deps/missing"
for so in "$lib"/lib*.so.* "$deps"/lib/x86_64-linux-gnu/lib*.so.*; do
  [ -e "$so" ] || continue
  name=$(basename "$so")
  ldconfig -p | grep -q "^[[:space:]]$name " || ln -sf "$so" "$deps/missing/$name"
done
export LD_LIBRARY_PATH=$deps/missing${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$PATH:$deps/usr/bin
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -2; g++ --version | head -1; cmake --version | head -1
  echo "from .gpu-debs: $(ls "$deps/missing" | tr '\n' ' ')"
} 2>&1 | tee "$out/gpu.txt"
# Debian's Boost is built with the C++11 string ABI; wheels before PyTorch 2.7 use the old one.
python3 -c 'import sys, torch; sys.exit(0 if torch._C._GLIBCXX_USE_CXX11_ABI else 1)' ||
  { echo "gpu-run: this PyTorch's LibTorch uses the pre-C++11 ABI; Debian's Boost cannot link with it (use PyTorch 2.7 or later)" >&2; exit 69; }

if wants attention; then
  stage "attention formulations"
  PYTHONUNBUFFERED=1 timeout 120 python3 bench/gpu_attention.py >"$out/attention.jsonl" 2>&1
  grep -v '^{' "$out/attention.jsonl" | tail -30
  [ "$what" = attention ] && exit 0
fi

stage "configure"
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_include=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
extra_include=$deps/usr/include
# Gloo's headers: the wheel's own when it has them, else Debian's.
[ -d "$torch_include/gloo" ] && extra_include=$torch_include:$extra_include
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr;$lib/cmake" -DOPENSSL_ROOT_DIR="$deps/usr" \
  -DHDF5_ROOT="$lib/hdf5/serial" -DHDF5_C_INCLUDE_DIR="$deps/usr/include/hdf5/serial" \
  -DCMAKE_CXX_FLAGS="-I${extra_include//:/ -I}" -DCMAKE_CUDA_ARCHITECTURES=90 >"$out/cmake.log" 2>&1 ||
  { tail -30 "$out/cmake.log"; exit 1; }
grep -E "xl: CUDA|HDF5|Boost|OpenSSL" "$out/cmake.log" | head -8

stage "build"
tools=$(ls tools/xl-*.cpp | xargs -n1 basename | sed 's/\.cpp$//')
wants test || wants cuda || wants units || wants interop || wants bench || wants kernels || wants profile || exit 0
targets="xl_bench_model"
wants interop && targets="$tools"
wants units && targets="xl_cuda_tests"
wants cuda && targets="$tools xl_cuda_tests xl_bench_model"
wants test && targets="$tools xl_cuda_tests xl_bench_model"
if ! timeout "$(left)" ninja -C build-gpu -k 0 $targets >"$out/build.log" 2>&1; then
  grep -E "error|Error|undefined reference" "$out/build.log" | sort | uniq | head -40
  exit 1
fi
probe=build-gpu/bench/xl_bench_model
[ -e "$probe" ] || probe=build-gpu/bin/xl-import-torch
[ -e "$probe" ] || probe=build-gpu/tests/xl_cuda_tests
missing=$(ldd "$probe" | grep "not found" || true)
[ -z "$missing" ] || { echo "gpu-run: libraries not found: $missing" >&2; exit 69; }

if wants test || wants cuda || wants units || wants interop; then
  stage "tests"
  # On the CPU cores: state_dicts written by this machine's PyTorch 2.x imported, and xl's exports
  # read back by its torch.load (weights_only, 2.6's default); beside the CUDA tests on the GPU.
  # -V: its steps reach the log as they run, so a deadline still shows how far it got.
  # At most 240 s when a benchmark follows, so that it keeps its time (on an H200 with PyTorch 2.11
  # the whole test took longer: 2026-11-27 and 2026-12-04 stopped in its Hugging Face steps).
  limit=$(left); wants bench && [ "$limit" -gt 240 ] && limit=240
  interop=
  if wants test || wants interop; then
    (cd build-gpu && timeout "$limit" ctest -V -R '^cli[.]import_torch$' >"$out/interop.log" 2>&1) &
    interop=$!
  fi
  if wants test || wants cuda; then
    (cd build-gpu && timeout "$(left)" ctest -L cuda --output-on-failure --timeout 300 >"$out/cuda-tests.log" 2>&1)
    status=$?
  elif wants units; then
    (cd build-gpu && timeout "$(left)" ctest -L cuda -E '^cli[.]' --output-on-failure --timeout 300 >"$out/cuda-tests.log" 2>&1)
    status=$?
  fi
  if [ -n "$interop" ]; then
    wait $interop
    case $? in
      0) ;;
      # Stopped by its own limit, not failed: said so, with how to run all of it.
      124) echo "cli.import_torch: stopped after ${limit} s, at \"$(grep -o -- '--- .*' "$out/interop.log" | tail -1 | cut -c5-)\"; scripts/gpu-run.sh interop (no benchmark after it) runs it to the deadline" ;;
      *) status=1 ;;
    esac
  fi
  grep -h -E "tests passed|Passed|Failed|FAIL|\*\*\*|Skipped" "$out"/cuda-tests.log "$out/interop.log" 2>/dev/null | tail -14
fi
# One more pass of bench/gpu.sh, its rows added to bench-rows.jsonl, while time is left.
extra() {
  [ "$(left)" -gt 60 ] || return 0
  XL_BENCH_ROWS=/tmp/xl-extra.jsonl timeout "$(($(left) - 5))" bash bench/gpu.sh build-gpu >/dev/null 2>>"$out/bench.log"
  cat /tmp/xl-extra.jsonl >>"$out/bench-rows.jsonl"
}
if wants bench; then
  stage "benchmark"
  [ -z "${REFERENCE:-}" ] && [ -f .gpu-ref/pytorch/mem_transformer.py ] && export REFERENCE=$PWD/.gpu-ref/pytorch
  XL_BENCH_ROWS=$out/bench-rows.jsonl timeout "$(($(left) - 5))" bash bench/gpu.sh build-gpu >"$out/bench.json" 2>"$out/bench.log"
  # xl's explicit attention beside its fused kernels (bf16), then the enwik8 model's training in
  # fp16 (dynamic loss scaling).
  XL_KERNELS=generic REFERENCE= CONFIGS="enwik8 wt103" MODES="train eval" PRECISIONS=bf16 extra
  CONFIGS=enwik8 MODES=train PRECISIONS=fp16 extra
fi
if wants kernels; then
  stage "attention kernels"
  for mode in ${KERNEL_MODES:-eval}; do
    for shape in ${KERNEL_SHAPES:-512/1024 128/512 128/1024 128/3800}; do
      for k in own library ""; do
        XL_DETERMINISTIC=$([ "$mode" = train ] && echo 0 || echo 1) XL_KERNELS=$k XL_BENCH_TGT_LEN=${shape%/*} XL_BENCH_MEM_LEN=${shape#*/} REFERENCE= CONFIGS=enwik8 MODES=$mode \
          PRECISIONS=bf16 extra
      done
    done
  done
  XL_KERNELS=generic XL_BENCH_TGT_LEN=128 XL_BENCH_MEM_LEN=3800 REFERENCE= CONFIGS=enwik8 MODES=eval PRECISIONS=bf16 extra
fi
if [ -s "$out/bench-rows.jsonl" ]; then
  python3 - "$out/bench-rows.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print("%-11s %-6s %-5s %-4s tgt %4s mem %4s %10s tok/s  mfu %5s  peak %6s MB" % (r.get("implementation"), r.get("config"),
          r.get("mode"), r.get("precision"), r.get("tgt_len", "-"), r.get("mem_len", "-"),
          "%.0f" % r["tokens_per_s"] if "tokens_per_s" in r else "failed",
          "%.3f" % r["mfu"] if "mfu" in r else "-", "%.0f" % r["peak_device_mb"] if "peak_device_mb" in r else "-"))
PY
fi
if wants profile; then
  stage "profiles"
  for p in ${PROFILES:-enwik8/train/bf16 enwik8/train/fp32 wt103/train/bf16}; do
    IFS=/ read -r c m prec <<<"$p"
    name=profile-$c-$m-$prec
    [ "$(left)" -gt 30 ] || break
    CUDA_LAUNCH_BLOCKING=1 XL_BENCH_DEVICE=cuda XL_BENCH_PRECISION=$prec XL_BENCH_PROFILE=/tmp/$name.json \
      timeout "$(($(left) - 10))" build-gpu/bench/xl_bench_model "$c" "$m" 1 >"/tmp/$name.row" 2>"/tmp/$name.err" || { tail -5 "/tmp/$name.err"; continue; }
    python3 bench/profile_summary.py "/tmp/$name.json" 18 >"$out/$name.txt"
    echo "-- $p (synchronous kernels: $(python3 -c 'import json,sys; print("%.1f ms a step" % (1e3 * json.load(open(sys.argv[1]))["step_s"]))' "/tmp/$name.row"))"
    cat "$out/$name.txt"
  done
  tar -czf "$out/profiles.tar.gz" -C /tmp $(cd /tmp && ls profile-*.json 2>/dev/null)
fi
stage "done"
exit "${status:-0}"
