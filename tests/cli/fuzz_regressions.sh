#!/usr/bin/env bash
# Inputs the fuzzers (fuzz/) once crashed on, kept as regressions: every tool that reads them
# refuses them with one line and exit 65 (a checkpoint, a torch.save file or pickle) or 78 (a
# settings file).
# tests/fuzz-regressions/TARGET-WHAT.EXT.gz.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz-regressions" && pwd)
xl-tokenize --mode byte --split 0.8,0.1,0.1 "$(training_corpus)" -o tokens.h5 -q
for f in "$dir"/checkpoint_h5-*.gz; do
  name=$(basename "$f" .gz)
  step "$name"
  gunzip -c "$f" >"$name"
  expect 65 xl-inspect "$name"
  stderr_is_one_line "$name"
  expect 65 xl-inspect --verify "$name"
  stderr_is_one_line "$name"
  expect 65 xl-eval-longctx --threads 1 --max-tokens 100 "$name" tokens.h5
  stderr_is_one_line "$name"
done
for f in "$dir"/config_ini-*.gz; do
  name=$(basename "$f" .gz)
  step "$name"
  gunzip -c "$f" >"$name"
  for t in xl-train-phase1 xl-eval-longctx xl-tokenize; do
    expect 78 $t -c "$name" --dump-config
    stderr_is_one_line "$name"
  done
done
for f in "$dir"/torch_pickle-*.gz; do
  name=$(basename "$f" .gz)
  step "$name"
  gunzip -c "$f" >"$name"
  expect 65 xl-import-torch --vocab "$name" "$name" -o x.h5
  stderr_is_one_line "$name"
  expect 65 xl-import-torch --corpus "$name" -o x.h5
  stderr_is_one_line "$name"
  expect 65 xl-import-torch --vocab tokens.h5 "$name" -o x.h5
  stderr_is_one_line "$name"
done
