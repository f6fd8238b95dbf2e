#!/usr/bin/env bash
# An ablation study: the paper's Table 5 (baseline, SCH, phase 1, phase 1 + 2, phase 1 + 2 + SCH)
# at tiny scale on a corpus (default: the 4 MB enwik8 prefix in ../shared, or the KJV Bible).
#   examples/ablation-study.sh [CORPUS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${XL_BIN:-$here/build/bin}
corpus=${1:-$here/../shared/data/enwik8/enwik8.head-4154064}
out=${OUT:-out/table5-tiny}
if [ ! -f "$corpus" ]; then
  mkdir -p "$out"
  corpus=$out/kjv.txt
  bible -f Gen1:1-Rev22:21 | sed 's/^[^ ]* //' > "$corpus"
fi
# Runs every point of the grid two at a time (finished runs are kept; an interrupted one resumes),
# then prints the table; `xl-ablate report $out` prints it again later.
"$bin/xl-ablate" "$here/share/xl/grids/table5-tiny.ini" --tokens-text "$corpus" --out "$out" --jobs 2
"$bin/xl-ablate" report "$out" --plot "$out/valid-curves.png"
