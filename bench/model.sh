#!/usr/bin/env bash
# Model throughput (docs: ../shared/docs/bench-configs.md): forward+backward training steps (loss,
# backward, clip, Adam, gradients reset: the trainer's step) and forward-only evaluation (no grad,
# memory 2 x tgt_len) for tiny, small and base. Each measurement is the median of RUNS fresh
# processes; each process measures the GEMM peak itself (median of 5 products at 2048^3 and 4096^3,
# as bench-configs.md defines it) and reports MFU against it, peak RSS and
# CPU seconds per step. Prints one JSON object on stdout; progress on stderr.
#
#   bench/model.sh [BUILD_DIR]     BUILD_DIR: where bench/xl_bench_model is (default: build)
#
# Environment: RUNS (default 3), CONFIGS (default "tiny small base"), MODES (default "train eval").
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$(cd "${1:-${XL_BUILD:-$here/../build}}" && pwd)
BIN="$BUILD/bench/xl_bench_model"
if [ ! -x "$BIN" ]; then echo "{\"skipped\": \"$BIN is not built\"}"; exit 0; fi
RUNS=${RUNS:-3}
CONFIGS=${CONFIGS:-tiny small base}
MODES=${MODES:-train eval}
steps() {  # timed steps per process (after 2 warm-up steps): a few seconds each
  case "$1/$2" in
    tiny/train) echo 8 ;; small/train) echo 3 ;; base/train) echo 2 ;;
    tiny/eval) echo 12 ;; small/eval) echo 4 ;; base/eval) echo 3 ;;
  esac
}
out=$(mktemp); trap 'rm -f "$out"' EXIT
for c in $CONFIGS; do
  for m in $MODES; do
    for r in $(seq "$RUNS"); do
      echo "model.sh: $c $m run $r/$RUNS" >&2
      "$BIN" "$c" "$m" "$(steps "$c" "$m")" >>"$out"
    done
  done
done
python3 - "$out" "$RUNS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
res = {}
for r in rows:
    res.setdefault(r["config"], {}).setdefault(r["mode"], []).append(r)
def med(v): return statistics.median(v)
out = {"runs": int(sys.argv[2]), "results": {}}
for c, modes in res.items():
    for m, rs in modes.items():
        out["results"].setdefault(c, {})[m] = {
            "tokens_per_s": med([r["tokens_per_s"] for r in rs]),
            "mfu": med([r["mfu"] for r in rs]),
            "gemm_peak_gflops": med([r["gemm_peak_gflops"] for r in rs]),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            "cpu_s_per_step": med([r["cpu_s_per_step"] for r in rs]),
            "step_s": med([r["step_s"] for r in rs]),
            "tokens_per_s_runs": [round(r["tokens_per_s"], 1) for r in rs],
        }
print(json.dumps(out, indent=1))
PY
