#!/usr/bin/env bash
# Step times of the attention variants (README "Attention variants") beside Transformer-XL's own
# attention, at one shape (default tiny), training and evaluation, medians of RUNS fresh processes
# alternating variant by variant. Prints one JSON object: per variant and mode, tokens/s (median
# and range), step seconds, peak RSS, and the ratio to Transformer-XL's tokens/s (each round's
# ratio, then their median).
#
#   bench/variants.sh [BUILD_DIR]     Environment: RUNS (default 3), CONFIG (default tiny),
#                                     MODES (default "train eval"), PERSISTENT (default 512)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$(cd "${1:-${XL_BUILD:-$here/../build}}" && pwd)
BIN="$BUILD/bench/xl_bench_model"
if [ ! -x "$BIN" ]; then echo "{\"skipped\": \"$BIN is not built\"}"; exit 0; fi
RUNS=${RUNS:-3} CONFIG=${CONFIG:-tiny} MODES=${MODES:-train eval} PERSISTENT=${PERSISTENT:-512}
variants=("rel:0:off" "mgk:0:off" "smgk:0:off" "rel:$PERSISTENT:off" "rel:0:on" "rel:$PERSISTENT:on")
out=$(mktemp); trap 'rm -f "$out"' EXIT
for m in $MODES; do
  for r in $(seq "$RUNS"); do
    for v in "${variants[@]}"; do
      IFS=: read -r attention persistent span <<<"$v"
      echo "variants.sh: $CONFIG $m $v run $r/$RUNS" >&2
      printf '%s\t' "$r" >>"$out"  # the round: its variants ran minutes apart at most
      XL_BENCH_ATTENTION=$attention XL_BENCH_PERSISTENT=$persistent XL_BENCH_SPAN=$span \
        "$BIN" "$CONFIG" "$m" "$([ "$m" = train ] && echo 6 || echo 10)" >>"$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = []
for line in open(sys.argv[1]):
    run, text = line.split("\t", 1)
    rows.append(dict(json.loads(text), round=int(run)))
def name(r):
    parts = [r["attention"]]
    if r["persistent_mem"]: parts.append("persistent %d, no ff" % r["persistent_mem"])
    if r["adaptive_span"]: parts.append("adaptive span")
    return " + ".join(parts)
groups = {}
for r in rows:
    groups.setdefault((r["mode"], name(r)), []).append(r)
out = {"config": rows[0]["config"], "cpu": rows[0]["cpu"], "blas_core": rows[0]["blas_core"], "variants": []}
for (mode, n), rs in groups.items():
    out["variants"].append({"mode": mode, "variant": n, "runs": len(rs),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
        "tokens_per_s_range": [min(r["tokens_per_s"] for r in rs), max(r["tokens_per_s"] for r in rs)],
        "step_s": statistics.median(r["step_s"] for r in rs),
        "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs)})
# The ratio to Transformer-XL's attention within each round (next to each other in time, so a
# host that slows for a minute moves both), then the median over the rounds.
rel = {(r["mode"], r["round"]): r["tokens_per_s"] for r in rows if name(r) == "rel"}
for v in out["variants"]:
    v["vs_transformer_xl"] = statistics.median(
        r["tokens_per_s"] / rel[(r["mode"], r["round"])] for r in rows if (r["mode"], name(r)) == (v["mode"], v["variant"]))
print(json.dumps(out, indent=1))
PY
