#!/usr/bin/env bash
# Model throughput (docs: ../shared/docs/bench-configs.md): forward+backward training steps (loss,
# backward, clip, Adam, gradients reset: the trainer's step) and forward-only evaluation (no grad,
# memory 2 x tgt_len, its key/value projections kept as the evaluator keeps them) for tiny, small,
# base and the word-level wt103 shape. Each measurement is the median of RUNS fresh
# processes; each process measures the GEMM peak itself (median of 5 products at 2048^3 and 4096^3,
# as bench-configs.md defines it) and reports MFU against it, peak RSS and
# CPU seconds per step. Prints one JSON object on stdout; progress on stderr.
#
#   bench/model.sh [BUILD_DIR]     BUILD_DIR: where bench/xl_bench_model is (default: build)
#
# Environment: RUNS (default 3), CONFIGS (default "tiny small base wt103"; txl-wt103, Transformer-XL's
# own WikiText-103 recipe, on request), MODES (default "train eval"),
# REFERENCE (a kimiyoung/transformer-xl checkout's pytorch/ folder, not part of xl: its model runs
# beside ours at the same shapes, alternating run by run, with the same 2 threads, waiting policy
# (passive after a short spin, as the tools set it) and BLAS kernels; "speedup" is xl's median over
# its median), PRECISION (fp32, the default, or bf16: xl's products and the reference's through
# torch.autocast; MFU against the peak in that precision), PYTHON (with torch; default python3).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$(cd "${1:-${XL_BUILD:-$here/../build}}" && pwd)
BIN="$BUILD/bench/xl_bench_model"
if [ ! -x "$BIN" ]; then echo "{\"skipped\": \"$BIN is not built\"}"; exit 0; fi
export XL_BENCH_PEAK=on  # its summary reports MFU, whatever the caller set
if [ -n "${REFERENCE:-}" ]; then  # fail now, not after the first of xl's runs
  [ -f "$REFERENCE/mem_transformer.py" ] || { echo "model.sh: REFERENCE=$REFERENCE holds no mem_transformer.py (give a transformer-xl checkout's pytorch/ folder)" >&2; exit 66; }
  "${PYTHON:-python3}" -c 'import torch' 2>/dev/null || { echo "model.sh: ${PYTHON:-python3} cannot import torch, which the reference needs (set PYTHON, e.g. PYTHON=/usr/bin/python3 with Debian's python3-torch)" >&2; exit 69; }
fi
RUNS=${RUNS:-3}
PRECISION=${PRECISION:-fp32}
case "$PRECISION" in fp32|bf16) ;; *) echo "model.sh: PRECISION=$PRECISION is not fp32 or bf16" >&2; exit 64 ;; esac
export XL_BENCH_PRECISION=$PRECISION
CONFIGS=${CONFIGS:-tiny small base wt103}
# The word-level shapes (WikiText-103's adaptive softmax over 267,735 words) at 512 and 600 tokens
# a step: their per-GPU batches of 16 and 60 would take minutes per step on a small machine.
export XL_BENCH_BATCH=${XL_BENCH_BATCH:-}
batch_for() {
  if [ -n "$XL_BENCH_BATCH" ]; then echo "$XL_BENCH_BATCH"
  elif [ "$1" = wt103 ]; then echo 1
  elif [ "$1" = txl-wt103 ]; then echo 4
  fi
}
MODES=${MODES:-train eval}
steps() {  # timed steps per process (after 2 warm-up steps): about 3 s of xl's (the reference's take
  # 3-8x as long), so that a few noisy moments on a shared machine do not decide a process's figure
  case "$1/$2" in
    tiny/train) echo 24 ;; small/train) echo 4 ;; base/train) echo 2 ;;
    tiny/eval) echo 60 ;; small/eval) echo 10 ;; base/eval) echo 4 ;;
    wt103/train|txl-wt103/train) echo 2 ;; wt103/eval|txl-wt103/eval) echo 4 ;;
  esac
}
out=$(mktemp); trap 'rm -f "$out"' EXIT
for c in $CONFIGS; do
  for m in $MODES; do
    for r in $(seq "$RUNS"); do
      echo "model.sh: $c $m run $r/$RUNS" >&2
      XL_BENCH_BATCH=$(batch_for "$c") "$BIN" "$c" "$m" "$(steps "$c" "$m")" >>"$out"
      if [ -n "${REFERENCE:-}" ]; then
        core=$(tail -n 1 "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["blas_core"])')
        echo "model.sh: $c $m reference run $r/$RUNS ($core kernels)" >&2
        XL_BENCH_BATCH=$(batch_for "$c") OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=20000 \
          OPENBLAS_THREAD_TIMEOUT=4 OPENBLAS_CORETYPE="$core" \
          "${PYTHON:-python3}" "$here/reference_txl.py" "$REFERENCE" "$c" "$m" "$(steps "$c" "$m")" cpu "$PRECISION" >>"$out"
      fi
    done
  done
done
python3 - "$out" "$RUNS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
res, ref = {}, {}
for r in rows:
    (ref if r.get("implementation") == "reference" else res).setdefault(r["config"], {}).setdefault(r["mode"], []).append(r)
def med(v): return statistics.median(v)
first = rows[0]
out = {"runs": int(sys.argv[2]), "precision": first["precision"], "cpu": first["cpu"], "blas": first["blas"],
       "gemm_choice": first.get("gemm_choice", ""), "results": {}}
for c, modes in res.items():
    for m, rs in modes.items():
        row = out["results"].setdefault(c, {})[m] = {
            "tokens_per_s": med([r["tokens_per_s"] for r in rs]),
            "mfu": med([r["mfu"] for r in rs]),
            "gemm_peak_gflops": med([r["gemm_peak_gflops"] for r in rs]),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
            "cpu_s_per_step": med([r["cpu_s_per_step"] for r in rs]),
            "step_s": med([r["step_s"] for r in rs]),
            "tokens_per_s_runs": [round(r["tokens_per_s"], 1) for r in rs],
        }
        theirs = ref.get(c, {}).get(m)
        if theirs:
            row["reference"] = {"tokens_per_s": med([r["tokens_per_s"] for r in theirs]),
                                "peak_rss_mb": max(r["peak_rss_mb"] for r in theirs),
                                "tokens_per_s_runs": [round(r["tokens_per_s"], 1) for r in theirs]}
            row["speedup"] = row["tokens_per_s"] / row["reference"]["tokens_per_s"]
print(json.dumps(out, indent=1))
PY
