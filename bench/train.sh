#!/usr/bin/env bash
# Training throughput and peak memory of phase 1 (Skip-Retain with the linear skip schedule and
# SCH beta 0.1) against phase 2 (no skips, beta 0) on tiny, small and base (issue 4). Each step is
# the trainer's: skip and head-permutation draws, forward, backward, clip, Adam, gradients reset.
# Medians of RUNS fresh processes; checks that phase 1 peaks at no more memory than phase 2.
# Prints one JSON object on stdout; progress on stderr.
#
#   bench/train.sh [BUILD_DIR]     BUILD_DIR: where bench/xl_bench_model is (default: build)
#
# Environment: RUNS (default 3), CONFIGS (default "tiny small base").
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$(cd "${1:-${XL_BUILD:-$here/../build}}" && pwd)
BIN="$BUILD/bench/xl_bench_model"
if [ ! -x "$BIN" ]; then echo "{\"skipped\": \"$BIN is not built\"}"; exit 0; fi
export XL_BENCH_PEAK=on  # its summary reports MFU, whatever the caller set
RUNS=${RUNS:-3}
CONFIGS=${CONFIGS:-tiny small base}
steps() { case "$1" in tiny) echo 8 ;; small) echo 3 ;; base) echo 2 ;; esac; }
out=$(mktemp); trap 'rm -f "$out"' EXIT
for c in $CONFIGS; do
  for r in $(seq "$RUNS"); do
    echo "train.sh: $c phase 1 run $r/$RUNS" >&2
    "$BIN" "$c" train "$(steps "$c")" linear 0.1 | sed 's/^{/{"phase":1,/' >>"$out"
    echo "train.sh: $c phase 2 run $r/$RUNS" >&2
    "$BIN" "$c" train "$(steps "$c")" none 0 | sed 's/^{/{"phase":2,/' >>"$out"
  done
done
python3 - "$out" "$RUNS" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
res = {}
for r in rows:
    res.setdefault(r["config"], {}).setdefault(r["phase"], []).append(r)
out = {"runs": int(sys.argv[2]), "results": {}, "phase1_rss_ok": True}
for c, ph in res.items():
    e = {}
    for p, rs in sorted(ph.items()):
        e["phase%d" % p] = {
            "skip": rs[0]["skip"], "beta": rs[0]["beta"],
            "tokens_per_s": statistics.median([r["tokens_per_s"] for r in rs]),
            "peak_rss_mb": statistics.median([r["peak_rss_mb"] for r in rs]),
            "mfu": statistics.median([r["mfu"] for r in rs]),
        }
    if "phase1" in e and "phase2" in e:
        # Allow 2% for allocator noise between processes.
        e["phase1_rss_le_phase2"] = e["phase1"]["peak_rss_mb"] <= 1.02 * e["phase2"]["peak_rss_mb"]
        out["phase1_rss_ok"] &= e["phase1_rss_le_phase2"]
    out["results"][c] = e
print(json.dumps(out, indent=1))
PY
