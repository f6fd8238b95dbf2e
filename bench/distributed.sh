#!/usr/bin/env bash
# Data-parallel scaling on one machine (issue 17): the same phase-1 training of the small config
# (bench-configs.md; global batch 8) as 1 process x T threads and as T processes (Gloo over
# loopback) x 1 thread each, T = the cores available. Reports training tokens/s (median of the
# logged windows after the first), the scaling efficiency of the ranks against the one process
# using the same cores, and the all-reduce's exposed share of a step (time spent waiting for
# gradient sums after the backward pass, which the bucketed all-reduce otherwise overlaps).
# The two layouts alternate RUNS times so that the machine's drift hits both; medians.
# Prints one JSON object on stdout; progress on stderr.
#
#   bench/distributed.sh [BUILD_DIR]     BUILD_DIR: where bin/xl-train-phase1 is (default: build)
#
# Environment: RUNS (default 3), STEPS (default 14), CONFIG (default small), CORES (default: nproc).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$(cd "${1:-${XL_BUILD:-$here/../build}}" && pwd)
BIN="$BUILD/bin"
if [ ! -x "$BIN/xl-train-phase1" ]; then echo "{\"skipped\": \"$BIN/xl-train-phase1 is not built\"}"; exit 0; fi
RUNS=${RUNS:-3}
STEPS=${STEPS:-14}
CONFIG=${CONFIG:-small}
CORES=${CORES:-$(nproc)}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
corpus="$here/../../shared/data/enwik8/enwik8.head-150000"
if [ ! -f "$corpus" ]; then  # any text will do for timing
  corpus=$work/corpus.txt
  for _ in $(seq 1 400); do cat "$here/../README.md"; done | head -c 400000 >"$corpus"
fi
"$BIN/xl-tokenize" --mode byte --split 0.9,0.05,0.05 "$corpus" -o "$work/tokens.h5" -q
run() {  # LAYOUT RANKS THREADS RUN
  "$BIN/xl-train-phase1" -c "$here/../share/xl/configs/$CONFIG.ini" -q --max-steps "$STEPS" --log-interval 2 \
    --eval-interval 0 --eval-max-tokens 1000 --threads "$3" --nproc-per-node "$2" \
    "$work/tokens.h5" -o "$work/$1-$4.h5" --metrics "$work/$1-$4.jsonl"
}
for r in $(seq "$RUNS"); do
  echo "distributed.sh: run $r/$RUNS: 1 process x $CORES threads" >&2
  run one 1 "$CORES" "$r"
  echo "distributed.sh: run $r/$RUNS: $CORES processes x 1 thread" >&2
  run ranks "$CORES" 1 "$r"
done
python3 - "$work" "$RUNS" "$CORES" "$CONFIG" <<'PY'
import glob, json, os, platform, statistics, sys
work, runs, cores, config = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def summary(layout):
    rates, shares = [], []
    for f in sorted(glob.glob(os.path.join(work, layout + "-*.jsonl"))):
        ev = [json.loads(l) for l in open(f)]
        train = [e for e in ev if e["event"] == "train"][1:]  # the first window warms up
        done = [e for e in ev if e["event"] == "done"][-1]
        rates.append(statistics.median(e["tok_per_s"] for e in train))
        step_s = statistics.median(e["ms_per_batch"] for e in train) / 1000
        shares.append(done["all_reduce_wait_s"] / (done["phase_steps"] * step_s))
    return {"tokens_per_s": statistics.median(rates), "tokens_per_s_runs": [round(x) for x in rates],
            "all_reduce_share": statistics.median(shares), "peak_rss_mb_rank0": done["peak_rss_mb"]}
info = dict(l.split(":", 1) for l in open("/proc/cpuinfo").read().split("\n\n")[0].splitlines() if ":" in l)
info = {k.strip(): v.strip() for k, v in info.items()}
cpu = "%s (family %s, model %s)" % (info.get("model name", platform.machine()), info.get("cpu family", "?"), info.get("model", "?"))
one, ranks = summary("one"), summary("ranks")
print(json.dumps({"config": config, "cpu": cpu, "cores": cores, "runs": runs,
                  "one_process": dict(one, processes=1, threads=cores),
                  "ranks": dict(ranks, processes=cores, threads=1),
                  "scaling_efficiency": ranks["tokens_per_s"] / one["tokens_per_s"]}, indent=1))
PY
