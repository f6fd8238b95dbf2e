#!/usr/bin/env bash
# A head-pruning study from a script: train two tiny models on the same data, one with stochastic
# cross-head attention (beta 0.1) and one without, then compare what masking each single head does
# (the paper's Table 3) and how both degrade under iterative pruning.
#   examples/head-pruning-study.sh [CORPUS] [MINUTES]     (default: the KJV Bible, 5 minutes each)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${XL_BIN:-$here/build/bin}
corpus=${1:-}
minutes=${2:-5}
out=${OUT:-out/head-study}
mkdir -p "$out"
if [ -z "$corpus" ]; then
  corpus=$out/kjv.txt
  # through a temp file: a stop while it is written leaves no half corpus to be taken as whole
  [ -s "$corpus" ] || { bible -f Gen1:1-Rev22:21 | sed 's/^[^ ]* //' > "$corpus.tmp" && mv "$corpus.tmp" "$corpus"; }
fi
[ -s "$out/tokens.h5" ] || "$bin/xl-tokenize" --mode byte --split 0.9,0.05,0.05 "$corpus" -o "$out/tokens.h5"
# Run again after a stop, the script goes on: a stopped training resumes from its checkpoint (a
# finished one ends at once, its budget spent), and the head study from its kept evaluations.
for beta in 0 0.1; do
  "$bin/xl-train-phase1" -c "$here/share/xl/configs/tiny.ini" --skip-schedule none --sch-beta "$beta" \
    --time-budget "${minutes}m" --start-or-resume "$out/tokens.h5" -o "$out/beta-$beta.h5" --metrics "$out/beta-$beta.jsonl"
done
# Table 3: both models per layer, with the % change of each layer's standard deviation.
"$bin/xl-prune-heads" --mode ablate-one --split valid --max-tokens 20000 --jobs 2 --format md \
  --cache "$out/table3.cache.jsonl" --compare "$out/beta-0.1.h5" "$out/beta-0.h5" "$out/tokens.h5" | tee "$out/table3.md"
# Pruning curves: fraction of heads removed vs bpc, importance re-scored after each step.
for beta in 0 0.1; do
  "$bin/xl-prune-heads" --mode iterative --step 12.5 --rescore --max-tokens 20000 --cache "$out/curve-beta-$beta.cache.jsonl" \
    --plot "$out/curve-beta-$beta.png" "$out/beta-$beta.h5" "$out/tokens.h5" > "$out/curve-beta-$beta.jsonl"
done
echo "tables and curves are in $out"
