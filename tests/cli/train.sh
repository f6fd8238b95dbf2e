#!/usr/bin/env bash
# xl-train-phase1 / xl-train-phase2 as a user runs them: loss falls, phase 1 -> phase 2 through
# files and pipes, bit-exact resume (after a stop and after SIGTERM), seeds, the attention's
# probabilities kept or computed again, skip rates, bad input.
source "$(dirname "$0")/common.bash"

corpus=$(training_corpus)
xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -o tokens.h5 -q

small_model_ini small.ini "schedule-steps = 400" "eval-interval = 0" "eval-max-tokens = 2000" \
  "log-interval = 10"
T="xl-train-phase1 -c small.ini --threads 1"

step "the loss falls"
expect 0 $T --max-steps 120 tokens.h5 -o p1.h5 --metrics p1.jsonl
first=$(grep -m1 '"event":"train"' p1.jsonl | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["loss"])')
last=$(grep '"event":"train"' p1.jsonl | tail -1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["loss"])')
python3 -c "import sys; sys.exit(0 if $last < $first - 1.0 else 1)" || fail "loss did not fall: $first -> $last"
grep -q '"event":"valid"' p1.jsonl || fail "no validation event"
# xl-inspect counts the parameters from the file's tensors as the trainer counted them in the model.
trained=$(grep -m1 '"event":"start"' p1.jsonl | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["parameters"])')
stored=$(xl-inspect --json p1.h5 | json /dev/stdin 'j["checkpoint"]["parameters"]')
[ "$trained" = "$stored" ] || fail "xl-inspect counts $stored parameters in p1.h5, the trainer $trained"
grep -q '"event":"done"' p1.jsonl || fail "no done event"
[ -f p1.best.h5 ] || fail "no best checkpoint beside the latest"
best_step=$(grep '"event":"valid"' p1.jsonl | tail -1 | json /dev/stdin 'j["best_step"]')
[ "$(xl-inspect --json p1.best.h5 | json /dev/stdin 'j["attributes"]["step"]')" = "$best_step" ] ||
  fail "p1.best.h5 is not of the best validation's step $best_step"
# The best checkpoint is a second name of the file saved with it, not a second copy (0.5 GB
# written again for base at each better validation; Io.LinkAs... checks that replacing the latest
# leaves it as it was).
expect 0 $T --max-steps 1 --eval-interval 1 tokens.h5 -o linked.h5
[ "$(stat -c %i linked.h5)" = "$(stat -c %i linked.best.h5)" ] || fail "linked.best.h5 is a copy of linked.h5, not the same file"
# Two names of one file are still two outputs: the same run again with -f is not "one file twice".
expect 0 $T --max-steps 1 --eval-interval 1 tokens.h5 -o linked.h5 -f
no_temp_files .

step "a large word vocab without --cutoffs is pointed to the adaptive softmax"
# 3,000 words at d 32: one softmax's products are 4x the small model's layers'.
python3 -c 'import random; r = random.Random(1); print("\n".join(" ".join("w%d" % r.randrange(3000) for _ in range(20)) for _ in range(3000)))' > many-words.txt
xl-tokenize --mode word many-words.txt -o many-words.h5 -q
expect 0 $T --max-steps 1 many-words.h5 -o many-words1.h5
grep -q "one softmax over all .* (no --cutoffs below its size) takes 3.*x the layers' products per token: an adaptive softmax" "$TMP/err" ||
  fail "no word about the adaptive softmax: $(cat "$TMP/err")"
expect 0 $T --max-steps 1 --cutoffs 1000 many-words.h5 -o many-words2.h5
grep -q "no --cutoffs" "$TMP/err" && fail "the adaptive softmax is suggested to a run that has it"
expect 0 $T --max-steps 1 tokens.h5 -o bytes1.h5
grep -q "no --cutoffs" "$TMP/err" && fail "the adaptive softmax is suggested for a byte vocab of 256"

step "file names that are not UTF-8"
# Linux names are bytes (a Latin-1 é here). They go into the JSON that xl writes (the command
# line in the metrics, xl-inspect's file) as U+FFFD; the run itself never failed on them.
latin=$(printf 'caf\xe9')
cp tokens.h5 "$latin.tokens.h5"
expect 0 $T --max-steps 2 --eval-interval 2 "$latin.tokens.h5" -o "$latin.h5" --metrics "$latin.jsonl"
python3 - "$latin.jsonl" <<'PY' || fail "the metrics of a run with a Latin-1 file name are not JSON Lines"
import json, sys
events = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
assert "caf\ufffd.tokens.h5" in events[0]["command_line"], events[0]["command_line"]
assert events[-1]["event"] == "done", events[-1]
PY
[ "$(xl-inspect --json "$latin.h5" | json /dev/stdin 'j["file"]')" = "caf�.h5" ] || fail "xl-inspect --json does not name caf\\xe9.h5"

step "phase 1 -> phase 2 through files"
expect 0 xl-train-phase2 --init p1.h5 --max-steps 20 tokens.h5 -o p2.h5 --metrics p2.jsonl
[ "$(xl-inspect --json p2.h5 | json /dev/stdin 'j["attributes"]["step"]')" = 140 ] || fail "phase 2 did not continue the step counter"
grep -q '"skip_rate"' p2.jsonl && fail "phase 2 reports skipping"

step "phase 1 -> phase 2 through pipes"
xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -q | $T --max-steps 20 -o pipe1.h5 -q
STATUS=0
xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -q | xl-train-phase2 --init pipe1.h5 --max-steps 10 -o - -q > pipe2.h5 || STATUS=$?
[ "$STATUS" -eq 0 ] || fail "phase 2 in a pipe exited $STATUS"
[ "$(xl-inspect --json pipe2.h5 | json /dev/stdin 'j["attributes"]["step"]')" = 30 ] || fail "piped phase 2 checkpoint is wrong"

step "phase 2 is phase 1 continued: with its schedule, cursor, memories and generators, 20 + 15 steps == 35"
B="xl-train-phase1 -c small.ini --threads 1 --skip-schedule none --sch-beta 0"
expect 0 $B --max-steps 20 tokens.h5 -o cont1.h5
expect 0 xl-train-phase2 -c small.ini --threads 1 --init cont1.h5 --schedule-from run --max-steps 15 tokens.h5 -o cont2.h5
grep -q "final memories" err || fail "phase 2 did not say that it continues phase 1's memories: $(cat err)"
expect 0 $B --max-steps 35 tokens.h5 -o cont.h5
for g in /model /optimizer /memory; do
  h5diff -q cont.h5 cont2.h5 "$g" "$g" >/dev/null || fail "phase 1 + phase 2 differs from one run in $g"
done
expect 0 xl-train-phase2 --threads 1 --init cont1.h5 --batch-size 2 --max-steps 2 tokens.h5 -o other.h5
grep -q "other streams" err || fail "phase 2 with another batch size did not say it starts afresh: $(cat err)"

step "phase budgets and schedules: the traps are refused with the flag to pass"
expect 64 xl-train-phase2 --init p1.h5 --budget-from run --max-steps 100 tokens.h5 -o bad.h5
stderr_is_one_line "--max-steps 100" "--budget-from phase"
expect 0 $T --max-steps 30 --schedule-steps 30 tokens.h5 -o annealed.h5
expect 64 xl-train-phase2 --init annealed.h5 --max-steps 5 tokens.h5 -o bad.h5
stderr_is_one_line "eta-min" "--lr"
expect 64 xl-train-phase2 --init annealed.h5 --schedule-from run --max-steps 5 tokens.h5 -o bad.h5
stderr_is_one_line "eta-min" "--schedule-from phase"
expect 0 xl-train-phase2 --init annealed.h5 --lr 0.001 --max-steps 5 --metrics annealed2.jsonl tokens.h5 -o ok.h5
python3 - annealed2.jsonl <<'PY' || fail "phase 2's own schedule did not start at --lr and anneal over its 5 steps"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
start = [e for e in ev if e["event"] == "start"][0]
assert start["schedule"]["lr"] == 0.001 and start["schedule"]["steps"] == 5 and start["phase_start_step"] == 30, start["schedule"]
done = [e for e in ev if e["event"] == "done"][0]
assert done["phase_steps"] == 5 and done["step"] == 35, done
PY

step "one config file for both phases"
expect 0 xl-train-phase2 -c small.ini --init p1.h5 --max-steps 3 tokens.h5 -o shared.h5
expect 64 xl-train-phase2 -c small.ini --n-layer 4 --init p1.h5 --max-steps 3 tokens.h5 -o bad.h5
stderr_is_one_line "--n-layer = 4" "n-layer = 3"
printf 'n-layer = 4\n' >four.ini
expect 78 xl-train-phase2 -c small.ini -c four.ini --init p1.h5 --max-steps 3 tokens.h5 -o bad.h5
stderr_is_one_line "four.ini: n-layer = 4" "n-layer = 3"

step "paired randomness: two betas skip the same layers at the same steps"
for beta in 0 0.5; do
  expect 0 $T --skip-schedule uniform --skip-p 0.5 --sch-beta $beta --max-steps 24 --log-interval 1 tokens.h5 \
    -o beta$beta.h5 --metrics beta$beta.jsonl
done
expect 0 $T --skip-schedule uniform --skip-p 0.5 --seed 9 --max-steps 24 --log-interval 1 tokens.h5 -o seed9.h5 --metrics seed9.jsonl
skips() { grep '"event":"train"' "$1" | python3 -c 'import json,sys; print([json.loads(l)["skip_rate"] for l in sys.stdin])'; }
[ "$(skips beta0.jsonl)" = "$(skips beta0.5.jsonl)" ] || fail "beta changed the skip pattern"
[ "$(skips beta0.jsonl)" != "$(skips seed9.jsonl)" ] || fail "another seed gave the same skip pattern"
h5diff -q beta0.h5 beta0.5.h5 /model /model >/dev/null && fail "beta 0.5 trained the same model as beta 0"

step "the tiny word config trains on a small word corpus as it is (cutoffs above the vocab dropped)"
python3 - <<'EOF'
import random
r = random.Random(3)
with open("words.txt", "w") as f:
    for _ in range(2000):
        f.write(" ".join("w%d" % int(r.expovariate(0.01)) for _ in range(10)) + "\n")
EOF
xl-tokenize --mode word --split 0.9,0.05,0.05 words.txt -o words.h5 -q
expect 0 xl-train-phase1 -c "$XL_SOURCE_DIR/share/xl/configs/tiny-word.ini" --threads 1 --max-steps 3 --batch-size 2 \
  --tgt-len 8 --mem-len 8 --eval-interval 0 --eval-max-tokens 200 words.h5 -o word1.h5
grep -q "cutoffs \[20000,40000,200000\] dropped" err || fail "no line about the dropped cutoffs: $(cat err)"
expect 0 xl-train-phase2 -c "$XL_SOURCE_DIR/share/xl/configs/tiny-word.ini" --threads 1 --init word1.h5 --max-steps 2 \
  --batch-size 2 --tgt-len 8 --mem-len 8 --eval-interval 0 --eval-max-tokens 200 words.h5 -o word2.h5

step "a cosine down to eta-min 0 ends the phase with it, and --max-steps past its end is refused; above 0 training goes on"
# 64 tokens a step: --max-tokens alone would allow 20 steps.
expect 0 $T --schedule-steps 12 --max-tokens 1280 tokens.h5 -o sched.h5 --metrics sched.jsonl
grep '"event":"done"' sched.jsonl | grep -q '"step":12,' || fail "did not stop at the schedule's end: $(grep done sched.jsonl)"
grep -q "the cosine schedule ended at step 12 at eta-min 0" "$TMP/err" || fail "no line names the schedule's end: $(cat "$TMP/err")"
expect 0 $T --schedule-steps 12 --max-tokens 1280 --resume tokens.h5 -o sched.h5
[ "$(xl-inspect --json sched.h5 | json /dev/stdin 'j["attributes"]["step"]')" = 12 ] || fail "a resumed run stepped past the schedule's end"
expect 64 $T --schedule-steps 12 --max-steps 20 --resume tokens.h5 -o sched.h5
stderr_is_one_line "--max-steps 20 runs to step 20, past the end of its cosine at step 12" "--schedule-steps" "--eta-min"
expect 64 $T --schedule-steps 12 --max-steps 20 tokens.h5 -o bad.h5
expect 0 $T --schedule-steps 12 --eta-min 1e-5 --max-steps 15 tokens.h5 -o sched2.h5
grep -q "schedule ended at step 12 (schedule-steps 12): training goes on at eta-min 1e-05" "$TMP/err" ||
  fail "no warning at the end of a cosine above 0: $(cat "$TMP/err")"

step "Transformer-XL's wt103 recipe (one output layer sliced per cluster, tied: sparse embedding gradients) resumes exactly"
W="xl-train-phase1 -c $XL_SOURCE_DIR/share/xl/configs/tiny-word.ini --threads 2 --cutoffs 50,200,500 --div-val 1
   --tie-projs false,false,false,false --batch-size 4 --tgt-len 8 --mem-len 8 --eval-interval 6 --eval-max-tokens 200"
expect 0 $W --max-steps 12 words.h5 -o wwhole.h5
expect 0 $W --max-steps 7 words.h5 -o wsplit.h5
expect 0 $W --max-steps 12 --resume words.h5 -o wsplit.h5
same_checkpoint wwhole.h5 wsplit.h5 "word model with div_val 1 clusters, resumed"

step "stopped and resumed == uninterrupted, bit for bit"
expect 0 $T --max-steps 40 --eval-interval 15 tokens.h5 -o whole.h5
expect 0 $T --max-steps 17 --eval-interval 15 tokens.h5 -o split.h5
expect 0 $T --max-steps 40 --resume tokens.h5 -o split.h5
same_checkpoint whole.h5 split.h5 "resume after --max-steps"

step "a resumed run refuses another architecture or data stream, and takes a new dropout with a note"
expect 64 $T --max-steps 41 --resume --n-layer 2 tokens.h5 -o split.h5
stderr_is_one_line "--n-layer = 2 is set for this run, but split.h5 holds a model with n-layer = 3"
printf 'mem-len = 32\n' >longer-memory.ini
expect 78 $T -c longer-memory.ini --max-steps 41 --resume tokens.h5 -o split.h5
stderr_is_one_line "longer-memory.ini: mem-len = 32 is set for this run, but split.h5 was trained with mem-len = 16"
expect 64 xl-train-phase2 -c small.ini --threads 1 --max-steps 41 --resume tokens.h5 -o split.h5
stderr_is_one_line "split.h5 is a phase1 run: resume it with xl-train-phase1 --resume, or start phase 2 from it with xl-train-phase2 --init split.h5"
# A script may pass --init always and --resume once the output exists: the run goes on, and says so.
expect 0 xl-train-phase2 -c small.ini --threads 1 --init split.h5 --max-steps 2 tokens.h5 -o p2-again.h5
expect 0 xl-train-phase2 -c small.ini --threads 1 --init split.h5 --max-steps 3 --resume tokens.h5 -o p2-again.h5
grep -q -- "--resume continues p2-again.h5; --init split.h5 is not read" "$TMP/err" || fail "no note of the unread --init: $(cat "$TMP/err")"
cp split.h5 dropout.h5
expect 0 $T --max-steps 41 --resume --dropout 0.3 tokens.h5 -o dropout.h5
grep -q "resuming with dropout = 0.3 (dropout.h5 has 0.1)" "$TMP/err" || fail "no note of the new dropout: $(cat "$TMP/err")"
[ "$(xl-inspect --json dropout.h5 | json /dev/stdin 'j["checkpoint"]["model_config"]["dropout"]')" = 0.3 ] ||
  fail "the resumed run did not take --dropout 0.3"

step "a run resumes on the training split it read; phase 2 on other data starts its cursor afresh"
head -c 100000 "$corpus" | xl-tokenize -q --mode byte --split 0.9,0.05,0.05 - -o other-text.h5
expect 65 $T --max-steps 50 --resume other-text.h5 -o split.h5
stderr_is_one_line "other-text.h5: its train split (text sha256" "is not the one split.h5 was trained on"
expect 0 xl-train-phase2 -c small.ini --threads 1 --init split.h5 --max-steps 2 other-text.h5 -o other-p2.h5
grep -q "other training data than phase 1's" "$TMP/err" || fail "phase 2 on other data does not say it starts afresh: $(cat "$TMP/err")"
! grep -q "continues phase 1's data cursor" "$TMP/err" || fail "phase 2 continued phase 1's cursor in other data"

step "SIGTERM saves a checkpoint, exits 143, and the run resumes exactly"
STATUS=0
$T --max-steps 100000 --schedule-steps 100000 --log-interval 1 tokens.h5 -o killed.h5 --metrics killed.jsonl -q &
pid=$!
wait_for_lines killed.jsonl '"event":"train"' 25
# SIGUSR1 asks for a checkpoint (Slurm's --signal=USR1@T before a time limit); the run trains on.
kill -USR1 $pid
wait_for_lines killed.jsonl '"event":"checkpoint"' 1
grep -q '"event":"checkpoint"' killed.jsonl || fail "no checkpoint after SIGUSR1"
kill -0 $pid 2>/dev/null || fail "SIGUSR1 stopped the training"
# pkill, killall and top find a training by its name (it re-executes itself, and was "exe").
pgrep -x xl-train-phase1 | grep -qx "$pid" || fail "the training's process name is '$(cat /proc/$pid/comm)'"
asked=$(xl-inspect --json killed.h5 | json /dev/stdin 'j["attributes"]["step"]')
# A second training on the same -o (a job started twice) is refused, naming the first: each
# replaced the other's checkpoints.
expect 73 $T --max-steps 5 --start-or-resume tokens.h5 -o killed.h5
stderr_is_one_line "killed.h5: another training writes it (pid $pid on "
grep -q "is down" "$TMP/err" && fail "a lock held on this machine is said to be another's: $(cat "$TMP/err")"
# A lock that a machine now down still holds on a network file system: the message names the way out.
printf 'pid 4242 on node-that-died\n' >remote.h5.lock
exec 9>>remote.h5.lock
flock 9
expect 73 $T --max-steps 1 --start-or-resume tokens.h5 -o remote.h5
stderr_is_one_line "another training writes it (pid 4242 on node-that-died)" "if node-that-died is down, remove it"
rm remote.h5.lock
expect 0 $T --max-steps 1 --start-or-resume tokens.h5 -o remote.h5
exec 9>&-
# Phase 2 from a phase 1 that still trains starts from a checkpoint on the way: it says so.
expect 0 xl-train-phase2 -c small.ini --threads 1 --progress never --init killed.h5 --max-steps 1 --eval-max-tokens 500 tokens.h5 -o early-p2.h5
grep -q "warning: --init killed.h5 is still being trained (pid $pid on " "$TMP/err" ||
  fail "no warning that --init is still being trained: $(cat "$TMP/err")"
wait_for_lines killed.jsonl '"event":"train"' $((asked + 5))
kill -TERM $pid
wait $pid || STATUS=$?
[ "$STATUS" -eq 143 ] || fail "expected exit 143 after SIGTERM, got $STATUS"
[ ! -e killed.h5.lock ] || fail "a stopped training left its lock"
stopped=$(xl-inspect --json killed.h5 | json /dev/stdin 'j["attributes"]["step"]')
[ "$stopped" -ge 25 ] || fail "checkpoint after SIGTERM is at step $stopped"
target=$((stopped + 7))
expect 0 $T --max-steps $target --schedule-steps 100000 --resume --log-interval 1 tokens.h5 -o killed.h5
expect 0 $T --max-steps $target --schedule-steps 100000 --log-interval 1 tokens.h5 -o straight.h5
same_checkpoint straight.h5 killed.h5 "resume after SIGTERM"
no_temp_files .
# --resume appends to the run's log: a line a kill left unfinished is cut off; a checkpoint named
# by mistake is refused as it is.
printf '{"event":"tra' >>killed.jsonl
expect 0 $T --max-steps $((target + 1)) --schedule-steps 100000 --resume tokens.h5 -o killed.h5 --metrics killed.jsonl
python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' killed.jsonl || fail "killed.jsonl: $(tail -n 3 killed.jsonl)"
# ... and so are NUL bytes that a machine which stopped while the log grew left at its end.
head -c 100 /dev/zero >>killed.jsonl
expect 0 $T --max-steps $((target + 2)) --schedule-steps 100000 --resume tokens.h5 -o killed.h5 --metrics killed.jsonl
python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' killed.jsonl || fail "killed.jsonl after NUL bytes: $(tail -n 3 killed.jsonl | od -c | tail -n 3)"
cp straight.h5 notlog.h5
expect 65 $T --max-steps $((target + 3)) --schedule-steps 100000 --resume -q tokens.h5 -o killed.h5 --metrics notlog.h5
stderr_is_one_line "notlog.h5: not a metrics log (JSON Lines) to append to"
same_bytes notlog.h5 straight.h5 "a checkpoint given as --metrics"

step "SIGKILL: resumed, the run's metrics read as an uninterrupted run's (doc/metrics.md's jq recipe)"
# Validations (each with its checkpoint) every 5 steps: the kill loses the steps logged since the
# last one, and the resumed run logs them again.
K="$T --schedule-steps 100000 --eval-interval 5 --log-interval 1"
$K --max-steps 100000 tokens.h5 -o kill9.h5 --metrics kill9.jsonl -q &
pid=$!
wait_for_lines kill9.jsonl '"event":"train"' 23
kill -KILL $pid
wait $pid 2>/dev/null || true
target=$(($(grep -c '"event":"train"' kill9.jsonl) + 5))
# A kill during a save leaves its temp file (up to a checkpoint's size): the next writer of -o
# removes what earlier ones left, and no one else's.
head -c 1000 kill9.h5 >kill9.h5.tmp.999999
ln -f kill9.h5 kill9.best.h5.tmp.999998
touch other.h5.tmp.999997
expect 0 $K --max-steps $target --resume tokens.h5 -o kill9.h5 --metrics kill9.jsonl
grep -q "removed kill9.h5.tmp.999999, left unfinished by a training that was killed" "$TMP/err" ||
  fail "no word of the temp file removed: $(cat "$TMP/err")"
[ -e other.h5.tmp.999997 ] || fail "another output's temp file was removed"
rm other.h5.tmp.999997
no_temp_files .
expect 0 $K --max-steps $target tokens.h5 -o straight9.h5 --metrics straight9.jsonl
# doc/metrics.md's curve of a resumed run, for the training loss too.
curve='reduce .[] as $e ([]; if $e.event == "start" then map(select(.step <= $e.step)) + [$e] else . + [$e] end)
  | .[] | select(.event == "valid" or .event == "train") | [.event, .step, .loss] | @tsv'
[ "$(jq -rs "$curve" kill9.jsonl)" = "$(jq -rs "$curve" straight9.jsonl)" ] ||
  fail "the resumed run's curve differs from the uninterrupted one's: $(diff <(jq -rs "$curve" kill9.jsonl) <(jq -rs "$curve" straight9.jsonl) | head -5)"
echo "  steps the kill lost, logged twice: $(jq -r 'select(.event == "train") | .step' kill9.jsonl | sort -n | uniq -d | tr '\n' ' ')"

step "same seed, same run; another seed, another run"
expect 0 $T --max-steps 8 --seed 7 tokens.h5 -o s7a.h5
expect 0 $T --max-steps 8 --seed 7 tokens.h5 -o s7b.h5
same_checkpoint s7a.h5 s7b.h5 "same seed"
expect 0 $T --max-steps 8 --seed 8 tokens.h5 -o s8.h5
h5diff -q s7a.h5 s8.h5 /model /model >/dev/null && fail "another seed gave the same model"

step "--attention-probs recompute (less memory) trains the same run, bit for bit"
expect 0 $T --max-steps 8 --seed 7 --attention-probs recompute tokens.h5 -o s7r.h5
same_checkpoint s7a.h5 s7r.h5 "probabilities computed again in backward"
step "--attention-probs auto (the default) keeps them within --attention-probs-budget, recomputes beyond"
expect 0 $T --max-steps 8 --seed 7 -v --metrics s7k.jsonl tokens.h5 -o s7k.h5
grep -q "attention probabilities: kept (--attention-probs auto" "$TMP/err" || fail "auto did not keep the probabilities"
grep -q '"attention_probs":"keep"' s7k.jsonl || fail "the start event does not say keep"
expect 0 $T --max-steps 8 --seed 7 -v --attention-probs-budget 1K --metrics s7b.jsonl tokens.h5 -o s7rb.h5
grep -q "attention probabilities: computed again in backward (--attention-probs auto" "$TMP/err" ||
  fail "auto kept the probabilities past its budget"
grep -q '"attention_probs":"recompute"' s7b.jsonl || fail "the start event does not say recompute"
same_checkpoint s7a.h5 s7rb.h5 "auto past its budget"
expect 64 $T --max-steps 1 --attention-probs drop tokens.h5 -o bad.h5
stderr_is_one_line "--attention-probs must be auto, keep or recompute, not 'drop'"
expect 64 $T --max-steps 1 --attention-probs-budget lots tokens.h5 -o bad.h5
stderr_is_one_line "--attention-probs-budget: not a number: 'lots'"

step "the budgets' auto is a quarter of the memory the process may use: a cgroup's limit (Slurm's --mem)"
# They were 4 GB on any machine: a 2 GB allocation kept 4 GB of attention probabilities.
cg=""
if memory=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup) && [ -n "$memory" ] &&
  mkdir "/sys/fs/cgroup/memory$memory/xl-test-$$" 2>/dev/null; then
  cg="/sys/fs/cgroup/memory$memory/xl-test-$$"
  limit_file=memory.limit_in_bytes
elif unified=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup) && [ -n "$unified" ] &&
  grep -qw memory "/sys/fs/cgroup$unified/cgroup.subtree_control" 2>/dev/null &&
  mkdir "/sys/fs/cgroup$unified/xl-test-$$" 2>/dev/null; then
  cg="/sys/fs/cgroup$unified/xl-test-$$"
  limit_file=memory.max
fi
if [ -n "$cg" ] && echo 2000000000 >"$cg/$limit_file" 2>/dev/null; then
  want=$(($(cat "$cg/$limit_file") / 4 / 1000000))
  bash -c "echo \$\$ > '$cg/cgroup.procs' && exec $T --max-steps 1 -v tokens.h5 -o /dev/null" >/dev/null 2>cg.err || true
  rmdir "$cg" 2>/dev/null || true
  grep -q "the budget is $want MB)" cg.err || fail "under a 2 GB cgroup the budget is not $want MB: $(grep budget cg.err)"
else
  [ -z "$cg" ] || rmdir "$cg" 2>/dev/null || true
  echo "no memory cgroup can be made here: the cgroup check is skipped"
fi

step "empirical skip and cross-head rates follow the schedule and beta"
expect 0 xl-train-phase1 -c small.ini --threads 1 --n-layer 4 --d-model 16 --d-head 8 --d-inner 16 --tgt-len 2 --mem-len 2 \
  --skip-schedule no-first-last --skip-p 0.5 --sch-beta 0.3 --max-steps 400 --log-interval 400 tokens.h5 -o skip.h5 --metrics skip.jsonl
rates() { grep '"event":"train"' skip.jsonl | tail -1 | python3 -c "import json,sys; print(' '.join(map(str, json.loads(sys.stdin.readline())['$1'])))"; }
python3 - $(rates skip_rate) <<'PY' || fail "skip rates $(rates skip_rate) do not follow no-first-last with p 0.5"
import sys
r = [float(x) for x in sys.argv[1:]]
want = [0, 0.5, 0.5, 0]
sys.exit(0 if len(r) == 4 and all(abs(a - b) < 0.1 for a, b in zip(r, want)) else 1)
PY
# Each layer draws its own: about 0.3 each over 400 steps (standard deviation 0.023).
python3 - $(rates sch_rate) <<'PY' || fail "cross-head rates $(rates sch_rate) are not about --sch-beta 0.3"
import sys
r = [float(x) for x in sys.argv[1:]]
sys.exit(0 if len(r) == 4 and all(abs(a - 0.3) < 0.1 for a in r) and len(set(r)) > 1 else 1)
PY

step "same-length without memory trains (it masked every key: NaN) and says it is off"
expect 0 $T --mem-len 0 --same-length true --max-steps 3 tokens.h5 -o nomem.h5
grep -q "same-length is off" "$TMP/err" || fail "no note that same-length is off: $(cat "$TMP/err")"

step "bad input: one line and the right exit code"
printf 'just text\n' > text.txt
expect 65 $T --max-steps 1 text.txt -o bad.h5
stderr_is_one_line text.txt
xl-tokenize --mode char --split 0.9,0.05,0.05 "$corpus" -o chars.h5 -q --allow-invalid-utf8
expect 65 xl-train-phase2 --init p1.h5 --max-steps 200 chars.h5 -o bad.h5
stderr_is_one_line "vocab"
expect 65 $T --max-steps 1 --valid-split nope --eval-interval 1 tokens.h5 -o bad.h5
stderr_is_one_line "no split 'nope'" "--valid-split picks another, --eval-interval 0 trains without validation"
expect 65 $T --max-steps 1 --train-split nope tokens.h5 -o bad.h5
stderr_is_one_line "no split 'nope'" "--train-split picks another"
# Settings are named as they are typed (--tie-projs, not the checkpoint's tie_projs), and where:
# a flag (64) or a config file (78).
expect 64 $T --cutoffs 100 --tie-projs false,true,true --max-steps 1 tokens.h5 -o bad.h5
stderr_is_one_line "--tie-projs has 3 entries, but needs one per cluster: 2 (the head and one per cutoff of [100])"
expect 64 $T --d-model 7 --max-steps 1 tokens.h5 -o bad.h5
stderr_is_one_line "--d-model must be"
printf 'd-model = 7\n' > odd.ini
expect 78 $T -c odd.ini --max-steps 1 tokens.h5 -o bad.h5
stderr_is_one_line "odd.ini: d-model must be"
expect 64 $T -c odd.ini --lr -1 --d-model 8 --max-steps 1 tokens.h5 -o bad.h5
stderr_is_one_line "--lr must be positive"
printf 'lr = -1\n' > lr.ini
expect 78 xl-train-phase2 -c lr.ini --init p1.h5 --max-steps 2 tokens.h5 -o bad.h5
stderr_is_one_line "lr.ini: lr must be positive"
expect 64 xl-train-phase2 --init p1.h5 --dropout 1.5 --max-steps 2 tokens.h5 -o bad.h5
stderr_is_one_line "--dropout must be in [0, 1)"
printf 'n-layers = 3\n' > typo.ini
expect 78 $T -c typo.ini --max-steps 1 tokens.h5 -o bad.h5
stderr_is_one_line typo.ini "'n-layers'; did you mean 'n-layer'?"
printf '[model]\nd-model = 64\n' > sections.ini
expect 78 $T -c sections.ini --max-steps 1 tokens.h5 -o bad.h5
stderr_is_one_line sections.ini "'d-model' is under a section [model]: settings files have no sections"
expect 64 $T --skip-schedule sometimes --max-steps 1 tokens.h5 -o bad.h5
stderr_is_one_line skip-schedule
expect 73 $T --max-steps 1 tokens.h5 -o p1.h5
stderr_is_one_line "already exists"
# --start-or-resume, for jobs a scheduler requeues: the same command starts the run, then continues
# it; a metrics file left by a run killed before its first checkpoint is appended to.
echo '{"event":"start","step":0}' > sor.jsonl
expect 0 $T --max-steps 4 --eval-interval 0 --start-or-resume tokens.h5 -o sor.h5 --metrics sor.jsonl
expect 0 $T --max-steps 8 --eval-interval 0 --start-or-resume tokens.h5 -o sor.h5 --metrics sor.jsonl
python3 - sor.jsonl <<'PY' || fail "--start-or-resume did not start, then resume: $(cat sor.jsonl)"
import json, sys
ev = list(map(json.loads, open(sys.argv[1])))
starts = [(e["step"], e.get("resumed")) for e in ev if e["event"] == "start"]
assert starts == [(0, None), (0, False), (4, True)], starts
assert [e["step"] for e in ev if e["event"] == "done"] == [4, 8]
PY
for bad in --resume -f; do
  expect 64 $T --max-steps 1 --start-or-resume $bad tokens.h5 -o sor.h5
  stderr_is_one_line "--start-or-resume" "drop $bad"
done
expect 64 $T --max-steps 1 --start-or-resume tokens.h5 -o -
stderr_is_one_line "--start-or-resume needs -o FILE"

# The best checkpoint beside -o is an output too: phase 2 from p1.best.h5 with -o p1.h5 -f would
# replace the model it starts from; a best one left by an earlier run needs -f.
cp p1.best.h5 best-before.h5
expect 64 xl-train-phase2 --init p1.best.h5 --max-steps 2 tokens.h5 -o p1.h5 -f
stderr_is_one_line "--output writes the best checkpoint to p1.best.h5, which is also --init"
same_bytes p1.best.h5 best-before.h5 "the refused phase 2"
cp p1.best.h5 stale.best.h5
expect 73 $T --max-steps 1 tokens.h5 -o stale.h5
stderr_is_one_line "stale.best.h5: already exists" "-f"
same_bytes stale.best.h5 best-before.h5 "the refused fresh run"
# The lock a SIGKILLed training leaves is held by no one: the next run takes it, and removes it.
echo "pid 1 on elsewhere" >left.h5.lock
expect 0 $T --max-steps 1 tokens.h5 -o left.h5
[ ! -e left.h5.lock ] || fail "a lock left by a killed run stays"
# A run whose checkpoints and metrics go nowhere: /dev/null needs no -f, stays the device, and
# gets no best checkpoint beside it (it made /dev/null.best as root, and failed without).
touch before-null
expect 0 $T --max-steps 2 --eval-interval 1 tokens.h5 -o /dev/null --metrics /dev/null
[ -c /dev/null ] || fail "training to -o /dev/null replaced the device"
[ ! /dev/null.best -nt before-null ] || fail "training to -o /dev/null wrote /dev/null.best"
# A FIFO gets one checkpoint, the last: a reader sees one whole file (each validation opened it
# again, and the second open waited for a reader that had gone).
mkfifo ck.fifo
cat ck.fifo > from-fifo.h5 &
reader=$!
expect 0 timeout 60 $T --max-steps 3 --eval-interval 1 tokens.h5 -o ck.fifo
wait $reader
expect 0 xl-inspect --verify from-fifo.h5
[ "$(xl-inspect --json from-fifo.h5 | json /dev/stdin 'j["attributes"]["step"]')" = 3 ] || fail "the FIFO's checkpoint is not step 3's"
[ ! -e ck.fifo.best ] || fail "a best checkpoint was written beside the FIFO"
rm ck.fifo
# /dev/stdout redirected to a file is a stream too: it was "already exists", and with -f the
# rename replaced the /dev/stdout link itself, leaving the file empty.
$T --max-steps 3 --eval-interval 1 tokens.h5 -o /dev/stdout --metrics /dev/stderr >via-stdout.h5 2>via-stderr.jsonl ||
  fail "training to -o /dev/stdout > FILE failed: $(tail -2 via-stderr.jsonl)"
[ -L /dev/stdout ] || fail "/dev/stdout is no longer a link"
expect 0 xl-inspect --verify via-stdout.h5
grep -q '"event":"done"' via-stderr.jsonl || fail "--metrics /dev/stderr wrote no done event"
# SIGHUP (the terminal of an ssh session that dropped) saves and stops as SIGTERM does: it killed
# the run, which lost the steps since its last checkpoint.
$T --max-steps 100000 --schedule-steps 100000 --log-interval 1 --metrics hup.jsonl tokens.h5 -o hup.h5 2>hup.err &
signal_when hup.jsonl '"event":"train"' 2 HUP $!
[ "$STATUS" -eq 129 ] || fail "SIGHUP stopped the run with $STATUS, not 129: $(tail -2 hup.err)"
stopped_step_saved hup.h5 hup.jsonl || fail "no checkpoint of the step SIGHUP stopped at"
# Said at once: a base step and its save take seconds, and a user who hears nothing stops it again.
grep -q "stopping after this step and its checkpoint" hup.err || fail "no word of the stop as it came: $(cat hup.err)"
# SIGUSR1 on a step whose validation saved it is answered too (it was silent: xl-ablate's test
# waited for the answer in vain whenever the request fell on a validation step).
$T --max-steps 100000 --schedule-steps 100000 --eval-interval 1 --eval-max-tokens 100 --metrics asked.jsonl tokens.h5 \
  -o asked.h5 2>asked.err &
job=$!
wait_for_lines asked.jsonl '"event":"checkpoint"' 2
kill -USR1 "$job"
signal_when asked.err "as SIGUSR1 asked" 1 TERM "$job"
grep -q "checkpoint of step [0-9]* written, as SIGUSR1 asked" asked.err || fail "SIGUSR1 went unanswered: $(tail -2 asked.err)"
# Validating at every step, the stop falls on a step its validation saved: it is not written again.
$T --max-steps 100000 --schedule-steps 100000 --eval-interval 1 --eval-max-tokens 100 --metrics once.jsonl tokens.h5 \
  -o once.h5 2>once.err &
signal_when once.jsonl '"event":"checkpoint"' 2 TERM $!
[ "$STATUS" -eq 143 ] || fail "the run stopped with $STATUS, not 143: $(tail -2 once.err)"
stopped_step_saved once.h5 once.jsonl || fail "no checkpoint of the step the run stopped at"
/usr/bin/python3 - once.jsonl <<'PY' || fail "a checkpoint was written twice at one step"
import collections, json, sys
steps = collections.Counter(e["step"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "checkpoint")
assert max(steps.values()) == 1, steps
PY
# Stopped by a signal, a run to a stream still writes its last checkpoint there (it wrote nothing).
$T --max-steps 100000 --schedule-steps 100000 --log-interval 1 --metrics stopped-stream.jsonl tokens.h5 -o - \
  >stopped-stream.h5 2>stopped-stream.err &
signal_when stopped-stream.jsonl '"event":"train"' 2 TERM $!
[ "$STATUS" -eq 143 ] || fail "a run to stdout stopped with $STATUS on SIGTERM: $(tail -2 stopped-stream.err)"
expect 0 xl-inspect --verify stopped-stream.h5
stopped_step_saved stopped-stream.h5 stopped-stream.jsonl || fail "stdout's checkpoint is not of the step the run stopped at"
grep -q "its checkpoint went to <stdout>" stopped-stream.err || fail "no word of where the checkpoint went: $(tail -1 stopped-stream.err)"
# A full disk (/dev/full) is named as one: "write error" alone left the reason out.
expect 74 $T --max-steps 2 -q tokens.h5 -o /dev/full
stderr_is_one_line "/dev/full: write error: No space left on device"
expect 74 $T --max-steps 2 -q --metrics /dev/full tokens.h5 -o full.h5
stderr_is_one_line "/dev/full: write error: No space left on device"
expect 65 xl-train-phase2 --init p2.h5 --max-steps 1 tokens.h5 -o bad.h5
stderr_is_one_line "phase-1"
expect 64 xl-train-phase2 --max-steps 1 tokens.h5 -o bad.h5
stderr_is_one_line "--init"
[ ! -e bad.h5 ] || fail "a failed run left bad.h5"
no_temp_files .
echo "all training CLI checks passed"
