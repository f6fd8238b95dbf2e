#!/usr/bin/env bash
# Failing writes (a full disk): a checkpoint that cannot be written leaves the previous one intact
# and no temp file, and the run stops with exit 74 and one line, never a crash; with
# --on-save-error continue training goes on and only a failed last save stops it. Writes fail for
# real: through a file-size limit (ulimit -f, with SIGXFSZ ignored so that write() returns EFBIG),
# and on a full tmpfs where the machine lets the test mount one.
source "$(dirname "$0")/common.bash"

corpus=$(training_corpus)
xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -o tokens.h5 -q
T="xl-train-phase1 --n-layer 2 --d-model 64 --n-head 2 --d-head 32 --d-inner 128 --tgt-len 16 --mem-len 16
   --batch-size 2 --eval-interval 0 --threads 1 -q"

# limited KB CMD...: runs CMD with files limited to KB kilobytes (see `run`).
limited() {
  local kb=$1
  shift
  STATUS=0
  (trap '' XFSZ; ulimit -f "$kb"; exec "$@") >"$TMP/out" 2>"$TMP/err" || STATUS=$?
}

step "a good checkpoint at step 10"
expect 0 $T --max-steps 10 --schedule-steps 20 tokens.h5 -o p1.h5
cp p1.h5 good.h5
limit=$(($(stat -c %s p1.h5) / 1024 / 2))

step "a failed save stops the run with 74, the last good checkpoint intact"
limited "$limit" $T --resume --max-steps 20 --save-every 5 tokens.h5 -o p1.h5
[ "$STATUS" -eq 74 ] || fail "expected exit 74, got $STATUS: $(cat "$TMP/err")"
stderr_is_one_line "p1.h5" "(disk full?)"
same_bytes p1.h5 good.h5 "the last good checkpoint"
no_temp_files .

step "--on-save-error continue trains on and fails only at the last save"
limited "$limit" $T --resume --max-steps 20 --save-every 5 --on-save-error continue --metrics cont.jsonl tokens.h5 -o p1.h5
[ "$STATUS" -eq 74 ] || fail "expected exit 74, got $STATUS: $(cat "$TMP/err")"
tail -n 1 "$TMP/err" | grep -q "checkpoint of step 20 could not be written; the last good one is from step 10" ||
  fail "no closing line naming the last good checkpoint: $(cat "$TMP/err")"
failed=$(grep '"event":"save_failed"' cont.jsonl | python3 -c 'import json, sys; print(sorted({json.loads(l)["step"] for l in sys.stdin}))')
[ "$failed" = "[15, 20]" ] || fail "expected failed saves at steps 15 and 20, got $failed"
grep -q '"event":"train".*"step":20' cont.jsonl || fail "training did not go on to step 20"
same_bytes p1.h5 good.h5 "the last good checkpoint"
no_temp_files .
expect 0 $T --resume --max-steps 12 tokens.h5 -o p1.h5  # and it resumes

step "a checkpoint streamed to a reader that quits: 74, and the checkpoint is kept in a file it names"
# It died of SIGPIPE (141, no word) on stdout, and on a FIFO ended 0 with the file cut.
mkfifo reader.fifo
for out in - reader.fifo; do
  rm -f xl-train-phase1.step4.*.h5
  STATUS=0
  if [ "$out" = - ]; then
    $T --max-steps 4 --schedule-steps 20 tokens.h5 -o - 2>"$TMP/err" | head -c 1 >/dev/null || STATUS=${PIPESTATUS[0]}
  else
    head -c 1 reader.fifo >/dev/null &
    $T --max-steps 4 --schedule-steps 20 tokens.h5 -o reader.fifo 2>"$TMP/err" || STATUS=$?
  fi
  [ "$STATUS" -eq 74 ] || fail "-o $out: expected exit 74, got $STATUS: $(cat "$TMP/err")"
  stderr_is_one_line "write error: Broken pipe; the checkpoint of step 4 is kept in ./xl-train-phase1.step4."
  kept=$(ls xl-train-phase1.step4.*.h5)
  expect 0 xl-inspect --verify "$kept"
  [ "$(xl-inspect --json "$kept" | json /dev/stdin 'j["attributes"]["step"]')" = 4 ] || fail "$kept is not of step 4"
  expect 0 $T --resume --max-steps 6 tokens.h5 -o "$kept"  # it continues the run
done
rm -f xl-train-phase1.step4.*.h5

step "metrics whose reader quits: the run stops with its step saved (74), and resumes"
# It died of SIGPIPE (141, no word), losing every step since its last checkpoint.
mkfifo metrics.fifo
head -n 12 metrics.fifo >/dev/null &
run $T --max-steps 100000 --schedule-steps 100000 --log-interval 1 tokens.h5 -o piped.h5 --metrics metrics.fifo
[ "$STATUS" -eq 74 ] || fail "expected exit 74, got $STATUS: $(cat "$TMP/err")"
stderr_is_one_line "metrics.fifo: write error: Broken pipe; training stopped at step" "resume with --resume -o piped.h5"
stopped=$(sed -n 's/.*training stopped at step \([0-9]*\),.*/\1/p' "$TMP/err")
[ "$(xl-inspect --json piped.h5 | json /dev/stdin 'j["attributes"]["step"]')" = "$stopped" ] ||
  fail "piped.h5 is not of step $stopped, where the run stopped"
expect 0 $T --resume --max-steps $((stopped + 2)) tokens.h5 -o piped.h5

step "a tokens file that cannot be written: 74, no temp file"
limited 64 xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -o big.h5 -q
[ "$STATUS" -eq 74 ] || fail "expected exit 74, got $STATUS: $(cat "$TMP/err")"
stderr_is_one_line "big.h5"
[ ! -e big.h5 ] || fail "a partial tokens file was left"
no_temp_files .

step "evaluation outputs that cannot be written: 74, nothing left behind"
limited 1 xl-eval-longctx --threads 1 --max-tokens 3000 --per-token losses.h5 good.h5 tokens.h5 -o rows.jsonl
[ "$STATUS" -eq 74 ] || fail "expected exit 74, got $STATUS: $(cat "$TMP/err")"
stderr_is_one_line
[ ! -e losses.h5 ] && [ ! -e rows.jsonl ] || fail "a partial evaluation output was left"
no_temp_files .

step "an export that cannot be written: 74, one line, nothing left behind"
limited 64 xl-import-torch --export good.h5 -o sd.pt
[ "$STATUS" -eq 74 ] || fail "expected exit 74, got $STATUS: $(cat "$TMP/err")"
stderr_is_one_line "sd.pt" "write error"
[ ! -e sd.pt ] || fail "a failed export left sd.pt"
no_temp_files .

step "a checkpoint reaches the disk before its name: fsync, rename, then its directory"
# A machine that goes down after the rename must not leave an empty file where the last good
# checkpoint was. strace shows the order of the calls (each fd with its path: -y).
if strace -f -o /dev/null true 2>/dev/null; then
  expect 0 strace -f -y -e trace=fsync,fdatasync,rename,renameat,renameat2 -o trace.txt $T --max-steps 2 tokens.h5 -o synced.h5
  python3 - trace.txt "$PWD" <<'PY' || fail "synced.h5 was not synced before and after its rename: $(cat trace.txt)"
import re, sys
calls = [re.sub(r"^\d+ +", "", line) for line in open(sys.argv[1])]
at = next(i for i, c in enumerate(calls) if re.match(r'rename(at2?)?\(.*"synced\.h5\.tmp\.\d+", .*"synced\.h5"', c))
assert any(re.match(r"f(data)?sync\(\d+<.*/synced\.h5\.tmp\.\d+>\) = 0", c) for c in calls[:at]), "no sync of the temp file before the rename"
assert any(c.startswith("fsync(") and ("<%s>" % sys.argv[2]) in c for c in calls[at + 1:]), "no sync of the directory after it"
PY
else
  echo "strace cannot trace here: the order of sync and rename is not checked"
fi

step "a full disk (tmpfs)"
mnt=$TMP/small-disk
mkdir -p "$mnt"
if ! mount -t tmpfs -o size=$((3 * $(stat -c %s good.h5) / 2 / 1024))k tmpfs "$mnt" 2>/dev/null; then
  echo "SKIP: cannot mount a tmpfs here (not root, or no permission)"
  exit 0
fi
trap 'umount "$mnt" 2>/dev/null; rm -rf "$TMP"' EXIT
# Room for one checkpoint and a half: the save at step 10 fits, the one at step 20 does not.
expect 74 $T --max-steps 40 --save-every 10 tokens.h5 -o "$mnt/p1.h5"
stderr_is_one_line "$mnt/p1.h5"
no_temp_files "$mnt"
expect 0 xl-inspect --json "$mnt/p1.h5"
[ "$(json "$TMP/out" 'j["attributes"]["step"]')" = 10 ] || fail "the step-10 checkpoint did not survive: $(cat "$TMP/out")"
