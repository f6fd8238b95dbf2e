#!/usr/bin/env bash
# GPU throughput (issue 14): training and evaluation tokens/s, peak device memory and MFU of the
# paper's two models at its per-GPU batch (enwik8: 12 x 512, tgt/mem 512, batch 30; wt103:
# 15 x 624, adaptive softmax, batch 16) in bf16 and fp32, each against the GEMM peak measured in
# the same process in the same precision; with REFERENCE, the standard PyTorch Transformer-XL at
# the same shapes, batch and precision (torch.autocast) in the same run, and the ratios.
# Prints one JSON object on stdout; progress on stderr.
#
#   bench/gpu.sh [BUILD_DIR]      BUILD_DIR: a CUDA build with bench/xl_bench_model (default: build-gpu)
#
# Environment: REFERENCE (a kimiyoung/transformer-xl checkout's pytorch/ folder; not part of xl),
# CONFIGS (default "enwik8 wt103"), PRECISIONS (default "bf16 fp32"), MODES (default "train eval"),
# STEPS (timed steps after 2 warm-up steps; default 10), DEVICE (default cuda), PYTHON (the
# Python with PyTorch that runs the reference; default python3), XL_BENCH_ROWS (a file that keeps
# each run's row as it ends, for runs cut short), XL_KERNELS=generic (xl's explicit attention
# instead of the fused kernel; its rows say "xl-generic").
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$(cd "${1:-${XL_BUILD:-$here/../build-gpu}}" && pwd)
BIN="$BUILD/bench/xl_bench_model"
if [ ! -x "$BIN" ]; then echo "{\"skipped\": \"$BIN is not built\"}"; exit 0; fi
CONFIGS=${CONFIGS:-enwik8 wt103}
PRECISIONS=${PRECISIONS:-bf16 fp32}
MODES=${MODES:-train eval}
STEPS=${STEPS:-10}
DEVICE=${DEVICE:-cuda}
if [ -n "${XL_BENCH_ROWS:-}" ]; then
  out=$XL_BENCH_ROWS; : >"$out"
else
  out=$(mktemp); trap 'rm -f "$out"' EXIT
fi
xl=xl${XL_KERNELS:+-$XL_KERNELS}
for c in $CONFIGS; do
  for m in $MODES; do
    for p in $PRECISIONS; do
      echo "gpu.sh: $xl $c $m $p" >&2
      XL_BENCH_DEVICE=$DEVICE XL_BENCH_PRECISION=$p "$BIN" "$c" "$m" "$STEPS" | sed "s/^{/{\"implementation\":\"$xl\",/" >>"$out" ||
        echo "{\"implementation\":\"$xl\",\"config\":\"$c\",\"mode\":\"$m\",\"precision\":\"$p\",\"failed\":true}" >>"$out"
      if [ -n "${REFERENCE:-}" ]; then
        echo "gpu.sh: reference $c $m $p" >&2
        "${PYTHON:-python3}" "$here/reference_txl.py" "$REFERENCE" "$c" "$m" "$STEPS" "$DEVICE" "$p" >>"$out" ||
          echo "{\"implementation\":\"reference\",\"config\":\"$c\",\"mode\":\"$m\",\"precision\":\"$p\",\"failed\":true}" >>"$out"
      fi
    done
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
res = {}
for r in rows:
    res.setdefault("%s/%s/%s" % (r["config"], r["mode"], r["precision"]), {})[r["implementation"]] = r
for key, e in res.items():
    xl, ref = e.get("xl", {}), e.get("reference", {})
    if "tokens_per_s" in xl and "tokens_per_s" in ref:
        e["speedup"] = xl["tokens_per_s"] / ref["tokens_per_s"]
        if "peak_device_mb" in xl and "peak_device_mb" in ref:
            e["memory_ratio"] = xl["peak_device_mb"] / ref["peak_device_mb"]
gpu = next((r["gpu"] for r in rows if "gpu" in r), None)
print(json.dumps({"gpu": gpu, "results": res}, indent=1))
PY
