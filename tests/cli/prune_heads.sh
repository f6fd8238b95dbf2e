#!/usr/bin/env bash
# xl-prune-heads end to end: ablation tables (jsonl, md, --compare), a stopped study resumed from
# its --cache, importance stored with -o, iterative pruning with a plot and a physically pruned
# checkpoint that evaluates alike, bad input.
source "$(dirname "$0")/common.bash"

corpus=$TMP/corpus.txt
make_mixed_text "$corpus" 60000
xl-tokenize --mode byte --split 0.8,0.1,0.1 "$corpus" -o tokens.h5 -q
T="xl-train-phase1 --n-layer 2 --d-model 32 --n-head 3 --d-head 8 --d-inner 32 --tgt-len 16 --mem-len 16
   --batch-size 4 --lr 0.003 --schedule-steps 100 --eval-interval 0 --eval-max-tokens 1000 --threads 1 -q"
$T --max-steps 30 --sch-beta 0 tokens.h5 -o base.h5
$T --max-steps 30 --sch-beta 0.5 tokens.h5 -o sch.h5
E="--tgt-len 16 --mem-len 32 --max-tokens 2000 --threads 1"

step "ablate-one: a row per head, a deviation per layer"
expect 0 xl-prune-heads --mode ablate-one $E sch.h5 tokens.h5
[ "$(grep -c '"event":"head"' out)" -eq 6 ] || fail "expected 6 head rows: $(cat out)"
[ "$(grep -c '"event":"layer"' out)" -eq 2 ] || fail "expected 2 layer rows"
expect 0 xl-prune-heads --mode ablate-one --jobs 2 --format md --compare base.h5 $E sch.h5 tokens.h5
grep -q '% stddev change' out || fail "no Table 3 shape: $(cat out)"
[ "$(grep -c '^| Layer' out)" -eq 2 ] || fail "expected two layers in the table"
$T --max-steps 30 --sch-beta 0 --seed 2 tokens.h5 -o base2.h5
$T --max-steps 30 --sch-beta 0.5 --seed 2 tokens.h5 -o sch2.h5
expect 0 xl-prune-heads --mode ablate-one --jobs 2 --compare base.h5,base2.h5 $E sch.h5,sch2.h5 tokens.h5
[ "$(grep -c '"event":"head"' out)" -eq 24 ] || fail "expected 6 head rows per checkpoint: $(cat out)"
[ "$(grep -c '"event":"layer_summary"' out)" -eq 4 ] || fail "expected a summary per side and layer: $(cat out)"
grep '"event":"layer_summary"' out | grep -q '"ci95"' || fail "no interval over the seeds"
expect 64 xl-prune-heads --mode importance $E sch.h5,sch2.h5 tokens.h5
stderr_is_one_line "one checkpoint"
# An output that is one of a list's checkpoints is refused, even with -f (the rows replaced it).
cp base2.h5 base2.before.h5
expect 64 xl-prune-heads --mode ablate-one --compare base.h5,base2.h5 $E sch.h5,sch2.h5 tokens.h5 -o base2.h5 -f
stderr_is_one_line "is base2.h5, which is also --compare"
same_bytes base2.h5 base2.before.h5 "the refused study"
expect 64 xl-prune-heads --mode ablate-one $E sch.h5,sch2.h5 tokens.h5 -o sch2.h5 -f
stderr_is_one_line "is sch2.h5, which is also CHECKPOINT"

step "a stopped study goes on from its --cache, to the rows of one run without a stop"
# The whole valid split in 2-token segments of 2 streams: each of the 7 evaluations takes about 0.4 s.
S="--tgt-len 2 --mem-len 32 --batch-size 2 --threads 1"
# run_through_then_stop CACHE ARGS...: the study of ARGS run through (its rows in whole.jsonl), then
# with --cache CACHE stopped by SIGINT once CACHE holds 2 passes (130; its lines in $TMP/err);
# $finished: the passes kept then.
run_through_then_stop() {
  local cache=$1
  shift
  expect 0 xl-prune-heads "$@" sch.h5 tokens.h5
  mv out whole.jsonl
  xl-prune-heads "$@" --cache "$cache" sch.h5 tokens.h5 >/dev/null 2>"$TMP/err" &
  signal_when "$cache" key 2 INT $!
  [ "$STATUS" -eq 130 ] || fail "expected exit 130 after SIGINT, got $STATUS: $(cat "$TMP/err")"
  finished=$(wc -l <"$cache")
}
run_through_then_stop kept.jsonl $S
grep -q "stopped by signal 2 after [2-6] of 7 evaluations of sch.h5; they are kept in kept.jsonl" "$TMP/err" ||
  fail "the stop does not say what is kept: $(cat "$TMP/err")"
# SIGKILL while a line was written: the cut line is dropped.
printf '{"key":"0123' >>kept.jsonl
expect 0 xl-prune-heads $S --cache kept.jsonl sch.h5 tokens.h5
grep -q "($finished of 7 evaluations kept in kept.jsonl)" "$TMP/err" || fail "the kept evaluations were not taken: $(cat "$TMP/err")"
[ "$(wc -l <kept.jsonl)" -eq 7 ] || fail "kept.jsonl should hold the 7 evaluations: $(cat kept.jsonl)"
/usr/bin/python3 - whole.jsonl out <<'PY' || fail "the resumed study's rows differ from the uninterrupted one's"
import json, sys
rows = [[{k: v for k, v in json.loads(l).items() if k != "seconds"} for l in open(f)] for f in sys.argv[1:]]
assert rows[0] == rows[1] and len(rows[0]) == 9, rows
PY
# xl-eval-longctx's evaluation (no mask) is the study's unpruned one (a mask of ones), both ways.
expect 0 xl-eval-longctx --split valid $S --cache shared.jsonl sch.h5 tokens.h5
expect 0 xl-prune-heads $S --cache shared.jsonl sch.h5 tokens.h5
grep -q "(1 of 7 evaluations kept in shared.jsonl)" "$TMP/err" || fail "the evaluation of xl-eval-longctx was not taken: $(cat "$TMP/err")"
expect 0 xl-eval-longctx --split valid $S --cache kept.jsonl sch.h5 tokens.h5
grep -q '"kept":true' out || fail "xl-eval-longctx did not take the study's unpruned evaluation: $(cat out)"
# Another study (other settings) in the same file evaluates anew.
expect 0 xl-prune-heads $E --cache kept.jsonl sch.h5 tokens.h5
grep -q "evaluations kept" "$TMP/err" && fail "other settings took kept evaluations: $(cat "$TMP/err")"
printf 'not json\n' >bad.jsonl
expect 65 xl-prune-heads $E --cache bad.jsonl sch.h5 tokens.h5
stderr_is_one_line "bad.jsonl:1: not an evaluation kept by --cache"
expect 64 xl-prune-heads $E --cache - sch.h5 tokens.h5
stderr_is_one_line "--cache must be a file"

step "a stopped iterative pruning goes on from its --cache, to the curve of one run without a stop"
# Importance passes and evaluations over the whole valid split in 2-token segments: 3 evaluations
# (0, 3 and 6 heads pruned) and 2 importance passes of about 0.5 s each.
I="--mode iterative --step 50 --rescore --importance-split valid --importance-max-tokens 0 $S"
run_through_then_stop iter.jsonl $I
grep -q "stopped by signal 2 after [1-3] evaluations\? and [1-2] importance pass\(es\)\? of sch.h5; they are kept in iter.jsonl" "$TMP/err" ||
  fail "the stop does not say what is kept: $(cat "$TMP/err")"
expect 0 xl-prune-heads $I --cache iter.jsonl sch.h5 tokens.h5
grep -q "sch.h5: $finished of its 5 passes (3 evaluations and 2 importance passes) kept in iter.jsonl" "$TMP/err" ||
  fail "the kept passes were not taken: $(cat "$TMP/err")"
[ "$(wc -l <iter.jsonl)" -eq 5 ] || fail "iter.jsonl should hold 3 evaluations and 2 importance passes: $(cat iter.jsonl)"
cmp -s whole.jsonl out || fail "the resumed curve differs from the uninterrupted one: $(cat whole.jsonl out)"
# Importance alone takes the first pass (the same mask, all heads) and writes the same scores.
expect 0 xl-prune-heads --mode importance --importance-split valid --importance-max-tokens 0 $S --cache iter.jsonl sch.h5 tokens.h5
mv out scores.jsonl
grep -q "importance scores kept in iter.jsonl" "$TMP/err" || fail "importance did not take its kept pass: $(cat "$TMP/err")"
expect 0 xl-prune-heads --mode importance --importance-split valid --importance-max-tokens 0 $S sch.h5 tokens.h5
cmp -s scores.jsonl out || fail "kept importance scores differ from computed ones: $(cat scores.jsonl out)"

step "importance, stored in the checkpoint with -o"
expect 0 xl-prune-heads --mode importance --importance-max-tokens 2000 $E sch.h5 tokens.h5 -o scored.h5
[ "$(grep -c '"event":"importance"' out)" -eq 6 ] || fail "expected 6 scores"
h5ls -r scored.h5 > ls.txt
grep -q 'analysis/head_importance' ls.txt || fail "scores not stored in /analysis"

step "iterative pruning: curve, plot, physically pruned checkpoint"
# Without gnuplot, --plot fails at once, not after the study (which it lost, -o and all).
expect 69 env PATH="$XL_BIN" xl-prune-heads --mode iterative --step 50 $E --plot curve.png sch.h5 tokens.h5 -o pruned.h5
stderr_is_one_line "--plot needs gnuplot, which is not installed"
[ ! -s out ] && [ ! -e pruned.h5 ] || fail "a study ran without gnuplot for its --plot: $(cat out)"
expect 64 xl-prune-heads --mode ablate-one $E --plot curve.png sch.h5 tokens.h5
stderr_is_one_line "--plot goes with --mode iterative"
expect 73 xl-prune-heads --mode iterative --step 50 $E --plot nowhere/curve.png sch.h5 tokens.h5
stderr_is_one_line "cannot create nowhere/curve.png"
[ ! -s out ] || fail "a study ran whose --plot cannot be written: $(cat out)"
# A plot replaces an earlier plot, not a checkpoint named by mistake.
cp sch.h5 other.h5
expect 73 xl-prune-heads --mode iterative --step 50 $E --plot other.h5 sch.h5 tokens.h5
stderr_is_one_line "other.h5: exists and is not a PNG"
same_bytes other.h5 sch.h5 "a checkpoint given as --plot"
# A PNG name with a quote in it (the shell that started gnuplot took it for the end of a string).
expect 0 xl-prune-heads --mode iterative --step 50 --rescore --importance-max-tokens 2000 $E --plot "it's curve.png" \
  sch.h5 tokens.h5 -o pruned.h5
[ "$(grep -c '"event":"prune"' out)" -eq 3 ] || fail "expected 3 points on the curve: $(cat out)"
[ "$(head -c 4 "it's curve.png" | tail -c 3)" = PNG ] || fail "it's curve.png is not a PNG"
grep '"event":"pruned"' out | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())
assert abs(r["loss_masked"] - r["loss_pruned"]) < 1e-5, r' || fail "pruned model does not match the masked one"
# The next run draws its curve over the last one.
expect 0 xl-prune-heads --mode iterative --step 50 --importance-max-tokens 2000 $E --plot "it's curve.png" sch.h5 tokens.h5
expect 0 xl-prune-heads --mode iterative --prune-heads 2 --importance-max-tokens 2000 $E sch.h5 tokens.h5 -o two.h5
expect 0 xl-eval-longctx --split valid --tgt-len 16 --mem-len 32 --max-tokens 2000 two.h5 tokens.h5
[ "$(xl-inspect --json two.h5 | json /dev/stdin 'j["attributes"]["phase"]')" = pruned ] || fail "phase is not pruned"
before=$(json out 'j["loss"]')

step "a pruned model trains on in phase 2, its heads still pruned"
expect 0 xl-train-phase2 --init two.h5 tokens.h5 -o tuned.h5 --max-steps 20 --threads 1
grep -q "fresh optimizer state (two.h5, a pruned model" err || fail "phase 2 does not say it starts a fresh optimizer: $(cat err)"
heads() { xl-inspect --json "$1" | json /dev/stdin 'j["checkpoint"]["model_config"]["heads_per_layer"]'; }
[ "$(heads tuned.h5)" = "$(heads two.h5)" ] || fail "the tuned model has heads $(heads tuned.h5), the pruned one $(heads two.h5)"
expect 0 xl-eval-longctx --split valid --tgt-len 16 --mem-len 32 --max-tokens 2000 tuned.h5 tokens.h5
python3 -c "import sys; sys.exit(0 if $(json out 'j["loss"]') < $before else 1)" ||
  fail "phase 2 did not lower the pruned model's validation loss ($before)"

step "bad input"
expect 64 xl-prune-heads --mode iterative --prune-heads 7 $E sch.h5 tokens.h5
stderr_is_one_line "only 6"
expect 65 xl-prune-heads --split nope $E sch.h5 tokens.h5
stderr_is_one_line nope
xl-tokenize --mode char --split 0.8,0.1,0.1 "$corpus" -o chars.h5 -q
expect 65 xl-prune-heads $E sch.h5 chars.h5
stderr_is_one_line vocab
expect 64 xl-prune-heads --mode everything $E sch.h5 tokens.h5
expect 64 xl-prune-heads --tgt-len 16 --mem-len 16,32 --threads 1 sch.h5 tokens.h5
stderr_is_one_line "--mem-len: xl-prune-heads evaluates at one memory length"
# --warmup with a memory the streams never fill: every evaluation would score nothing.
expect 64 xl-prune-heads --tgt-len 16 --max-tokens 2000 --threads 1 --warmup --mem-len 100000 sch.h5 tokens.h5
stderr_is_one_line "--warmup --mem-len 100000: no segment of the valid split starts with a full memory"
expect 0 xl-prune-heads $E --warmup sch.h5 tokens.h5
no_temp_files .
echo "all xl-prune-heads checks passed"
