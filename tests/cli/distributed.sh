#!/usr/bin/env bash
# Data-parallel training over processes (Gloo on loopback): 2 and 3 ranks train what one process
# trains at the same global batch (within float32 reduction-order noise: parameters within 1e-4
# after 50 steps, losses within 1e-5 relative), a resumed 2-rank run ends bit-identical to an
# uninterrupted one, a killed rank stops the job with one line naming it and leaves a resumable
# checkpoint, a rank that fails before it joins stops the others at once, and bad rendezvous
# settings give one line and a sysexits code.
source "$(dirname "$0")/common.bash"

corpus=$(training_corpus)
xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -o tokens.h5 -q

# Tiny and without dropout (dropout masks differ per rank by design).
cat > dp.ini <<'INI'
n-layer = 3
d-model = 32
n-head = 2
d-head = 16
d-inner = 64
dropout = 0
tgt-len = 16
mem-len = 16
batch-size = 6
lr = 0.002
schedule-steps = 400
skip-schedule = linear
sch-beta = 0.3
eval-interval = 25
eval-max-tokens = 2000
log-interval = 5
INI
T="xl-train-phase1 -c dp.ini --threads 1 -q"

# close A B: every parameter within 1e-4 and every logged loss within 1e-5 relative.
close() {
  /usr/bin/python3 - "$@" <<'PY' || fail "$1 and $2 differ by more than float32 reduction-order noise"
import h5py, json, sys, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
worst = max(float(np.abs(a["model"][k][()] - b["model"][k][()]).max()) for k in a["model"])
print("  max parameter difference %.2e" % worst)
assert worst < 1e-4, worst
la = [e["loss"] for e in map(json.loads, open(sys.argv[3])) if e["event"] in ("train", "valid")]
lb = [e["loss"] for e in map(json.loads, open(sys.argv[4])) if e["event"] in ("train", "valid")]
assert len(la) == len(lb) and la, (len(la), len(lb))
rel = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
print("  max relative loss difference %.2e over %d losses" % (rel, len(la)))
assert rel < 1e-5, rel
PY
}

step "2 ranks (--nproc-per-node) train what one process trains, phase 1 and phase 2"
expect 0 $T --max-steps 50 tokens.h5 -o one1.h5 --metrics one1.jsonl
expect 0 $T --nproc-per-node 2 --max-steps 50 tokens.h5 -o two1.h5 --metrics two1.jsonl
close one1.h5 two1.h5 one1.jsonl two1.jsonl
grep -q '"ranks":2' two1.jsonl || fail "the metrics do not say 2 ranks"
expect 0 xl-train-phase2 --threads 1 -q --init one1.h5 --max-steps 20 tokens.h5 -o one2.h5 --metrics one2.jsonl
expect 0 xl-train-phase2 --threads 1 -q --nproc-per-node 2 --init two1.h5 --max-steps 20 tokens.h5 -o two2.h5 --metrics two2.jsonl
close one2.h5 two2.h5 one2.jsonl two2.jsonl
# Phase 2 from a phase-1 checkpoint made by another number of ranks: the streams re-shard exactly.
expect 0 xl-train-phase2 --threads 1 -q --nproc-per-node 2 --init one1.h5 --max-steps 20 tokens.h5 -o mixed2.h5 --metrics mixed2.jsonl
close one2.h5 mixed2.h5 one2.jsonl mixed2.jsonl

step "--nproc-per-node hands piped inputs to every rank, and rank 0 writes the checkpoint to a pipe"
xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -q -o - | $T --nproc-per-node 2 --max-steps 50 - -o - >piped1.h5 ||
  fail "2 ranks could not train from a pipe into a pipe"
h5diff -q two1.h5 piped1.h5 /model /model >/dev/null || fail "2 ranks trained another model from a pipe than from the file"
xl-train-phase2 --threads 1 -q --nproc-per-node 2 --init - --max-steps 20 tokens.h5 -o piped2.h5 <two1.h5 ||
  fail "phase 2's ranks could not start from a piped --init"
h5diff -q two2.h5 piped2.h5 /model /model >/dev/null || fail "phase 2 from a piped --init trained another model"
# A pipe by name is read by one rank alone: refused with the way round it (it failed as a corrupt file).
expect 64 $T --nproc-per-node 2 --max-steps 5 <(cat tokens.h5) -o bad.h5
stderr_is_one_line "is a pipe, which several ranks cannot each read" "pipe it to - (stdin)"

step "torchrun starts the same 2 ranks"
# Debian's torchrun (PyTorch 1.13 on Python 3.11) cannot parse its default --redirects/--tee
# values ("0"); "1" (stdout) works around it.
# torchrun's store must speak the tools' LibTorch's protocol: a Python whose torch is of the same
# release (XL_TORCH_PYTHON names one; Debian's /usr/bin/python3 matches Debian's LibTorch).
libtorch=$(xl-train-phase1 --version | sed -n 's/.*LibTorch \([0-9]*\.[0-9]*\).*/\1/p')
TORCHRUN_PY=
for py in ${XL_TORCH_PYTHON:-} /usr/bin/python3; do
  v=$("$py" -c 'import torch.distributed.run, torch; print(".".join(torch.__version__.split(".")[:2]))' 2>/dev/null) || continue
  [ "$v" = "$libtorch" ] && TORCHRUN_PY=$py && break
done
[ -n "$TORCHRUN_PY" ] || echo "  (no Python with torch $libtorch for torchrun: XL_TORCH_PYTHON names one; step skipped)"
if [ -n "$TORCHRUN_PY" ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$TORCHRUN_PY" -m torch.distributed.run --nproc_per_node 2 --master_port "$port" --redirects 1 --tee 1 \
    --no_python "$(command -v xl-train-phase1)" -c dp.ini --threads 1 -q --max-steps 50 tokens.h5 -o torchrun1.h5 \
    >torchrun.out 2>&1 || fail "torchrun failed: $(tail -5 torchrun.out)"
  h5diff -q two1.h5 torchrun1.h5 /model /model >/dev/null || fail "torchrun's ranks trained another model than --nproc-per-node's"
  # torchrun --max_restarts starts the ranks again when one dies; its agent keeps the store, and
  # the new ranks read the dead ones' Gloo addresses from it and waited on them for good.
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$TORCHRUN_PY" -m torch.distributed.run --nproc_per_node 2 --max_restarts 1 --master_port "$port" --redirects 1 \
    --tee 1 --no_python "$(command -v xl-train-phase1)" -c dp.ini --threads 1 -q --max-steps 3000 --schedule-steps 3000 \
    --save-every 20 --eval-interval 0 --metrics restarted.jsonl --start-or-resume tokens.h5 -o restarted.h5 >restarted.out 2>&1 &
  job=$!
  wait_for_lines restarted.jsonl '"event":"checkpoint"' 1
  for p in $(pgrep -P "$job"); do ! tr '\0' '\n' <"/proc/$p/environ" | grep -qx RANK=1 || kill -9 "$p"; done
  for _ in $(seq 1 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$job" 2>/dev/null && {
    pkill -P "$job" || true
    kill "$job" || true
    fail "the ranks torchrun restarted still run a minute later: $(tail -3 restarted.out)"
  }
  wait "$job" || fail "torchrun's restarted ranks failed: $(tail -5 restarted.out)"
  [ "$(grep -c '"event":"start"' restarted.jsonl)" = 2 ] || fail "expected a start and a resumed start: $(tail -5 restarted.out)"
  grep '"event":"start"' restarted.jsonl | tail -1 | grep -q '"resumed":true' || fail "the restarted ranks did not resume"
  grep -q '"event":"done".*"step":3000' restarted.jsonl || fail "the restarted ranks did not finish: $(tail -3 restarted.out)"
else
  echo "  (no PyTorch for /usr/bin/python3: torchrun not tried)"
fi

step "3 ranks started through the environment (as torchrun, srun or mpirun start them)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for r in 0 1 2; do
  RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    $T --max-steps 50 tokens.h5 -o three.h5 --metrics three.jsonl 2>"rank$r.err" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a rank of the 3-rank job failed: $(cat rank*.err)"; done
close one1.h5 three.h5 one1.jsonl three.jsonl

step "a resumed 2-rank run ends bit-identical to an uninterrupted one"
expect 0 $T --nproc-per-node 2 --max-steps 40 tokens.h5 -o whole.h5
expect 0 $T --nproc-per-node 2 --max-steps 17 tokens.h5 -o split.h5
expect 0 $T --nproc-per-node 2 --max-steps 40 --resume tokens.h5 -o split.h5
for g in /model /optimizer /memory /rng; do
  h5diff -q whole.h5 split.h5 "$g" "$g" >/dev/null || fail "resumed 2-rank run differs in $g"
done

step "a killed rank stops the job with one line naming it; the last checkpoint resumes"
STATUS=0
start=$(date +%s)
$T --nproc-per-node 2 --max-steps 100000 --schedule-steps 100000 --save-every 10 --log-interval 1 --metrics killed.jsonl tokens.h5 -o killed.h5 \
  2>killed.err &
job=$!
wait_for_lines killed.jsonl '"event":"checkpoint"' 2
ranks=$(pgrep -P "$job" | sort -n)
[ "$(echo "$ranks" | wc -l)" -eq 2 ] || fail "the launcher runs $(echo "$ranks" | wc -l) ranks, not 2"
rank1=$(echo "$ranks" | tail -1)
# A rank ignores SIGPIPE: Gloo's write to the dead rank's socket killed rank 0 at times, and the
# launcher named rank 0 (signal 13) instead of rank 1.
rank0=$(echo "$ranks" | head -1)
ignored=$(awk '/^SigIgn:/ {print $2}' "/proc/$rank0/status")
(( (0x$ignored >> 12) & 1 )) || fail "rank 0 does not ignore SIGPIPE (SigIgn $ignored)"
kill -9 "$rank1"
wait "$job" || STATUS=$?
elapsed=$(($(date +%s) - start))
[ "$STATUS" -ne 0 ] || fail "the job ended well after a rank was killed"
[ "$elapsed" -lt 60 ] || fail "the job took ${elapsed}s to stop after a rank died"
[ "$STATUS" -eq 137 ] || fail "the job exited $STATUS, not 137 (128 + SIGKILL): $(cat killed.err)"
# The launcher's line alone: rank 0's "rank 1 is gone" (and with it a stop notice) buried it.
[ "$(cat killed.err)" = "xl-train-phase1: rank 1 died of signal 9 (Killed); stopping the other ranks" ] ||
  fail "not one line naming the dead rank: $(cat killed.err)"
# These ranks by pid: other tests that ctest runs beside this one train with the same flags.
for r in $ranks; do ! kill -0 "$r" 2>/dev/null || fail "rank pid $r is left running"; done
stopped=$(xl-inspect --json killed.h5 | json /dev/stdin 'j["attributes"]["step"]')
expect 0 $T --nproc-per-node 2 --max-steps $((stopped + 5)) --resume tokens.h5 -o killed.h5
no_temp_files .

step "a stalled rank: the others time out naming it by its heartbeat, and the launcher names the one it had to kill"
# (--dist-timeout 8s: long enough for a loaded machine's slowest step.)
$T --nproc-per-node 2 --dist-timeout 8s --max-steps 100000 --schedule-steps 100000 --log-interval 1 --metrics stalled.jsonl \
  tokens.h5 -o stalled.h5 2>stalled.err &
job=$!
wait_for_lines stalled.jsonl '"event":"train"' 2
ranks=$(pgrep -P "$job" | sort -n)
kill -STOP "$(echo "$ranks" | tail -1)"
STATUS=0
wait "$job" || STATUS=$?
[ "$STATUS" -eq 69 ] || fail "the job exited $STATUS, not rank 0's 69: $(cat stalled.err)"
grep -q "^xl-train-phase1 rank 0: .* failed: rank 1 (pid [0-9]*) has stopped answering: its heartbeat stood still for 3 s" stalled.err &&
  grep -q "^xl-train-phase1: rank 1 did not end within 20 s of SIGTERM: killed$" stalled.err ||
  fail "no line names the stalled rank: $(cat stalled.err)"
for r in $ranks; do ! kill -0 "$r" 2>/dev/null || fail "rank pid $r is left running"; done

step "SIGUSR1 to the launcher: every rank takes part in one checkpoint, and they train on"
# Validating at every step as well: the request then falls on a step rank 0 has saved already,
# which rank 1 did not know, so it alone saved and waited for rank 0 until --dist-timeout.
for every in 0 1; do
  rm -f asked.h5 asked.jsonl
  $T --nproc-per-node 2 --max-steps 100000 --schedule-steps 100000 --eval-interval $every --eval-max-tokens 200 \
    --log-interval 1 --metrics asked.jsonl --dist-timeout 20s tokens.h5 -o asked.h5 2>asked.err &
  job=$!
  wait_for_lines asked.jsonl '"event":"train"' 3
  kill -USR1 "$job"
  if [ "$every" = 0 ]; then  # a checkpoint can only come from SIGUSR1
    wait_for_lines asked.jsonl '"event":"checkpoint"' 1
    grep -q '"event":"checkpoint"' asked.jsonl || fail "no checkpoint after SIGUSR1: $(tail -3 asked.err)"
  else
    sleep 1
  fi
  asked=$(xl-inspect --json asked.h5 | json /dev/stdin 'j["attributes"]["step"]')
  wait_for_lines asked.jsonl '"event":"train"' $((asked + 3))
  kill -TERM "$job"
  STATUS=0
  wait "$job" || STATUS=$?
  [ "$STATUS" -eq 143 ] || fail "the ranks stopped with $STATUS, not 143 on SIGTERM, after SIGUSR1: $(tail -3 asked.err)"
  grep -q '"event":"done"' asked.jsonl || fail "the ranks did not stop together after SIGUSR1: $(tail -3 asked.err)"
  [ "$(grep '"event":"done"' asked.jsonl | json /dev/stdin 'j["step"]')" -gt "$asked" ] ||
    fail "the ranks did not train on after the checkpoint SIGUSR1 asked for"
done

step "Ctrl-C at a terminal (SIGINT to the launcher and its ranks at once): the ranks save the step they stop at"
# Each rank gets the terminal's signal and then the launcher's copy of it, which killed them
# unsaved. Steps long enough (about 0.1 s) for the copy to land inside one.
setsid $T --nproc-per-node 2 --d-model 256 --d-inner 512 --n-head 4 --d-head 64 --tgt-len 128 --mem-len 128 \
  --max-steps 100000 --schedule-steps 100000 --log-interval 1 --metrics ctrlc.jsonl tokens.h5 -o ctrlc.h5 2>ctrlc.err &
job=$!
[ "$(ps -o pgid= -p "$job" | tr -d ' ')" = "$job" ] || fail "setsid did not give the launcher a process group of its own"
wait_for_lines ctrlc.jsonl '"event":"train"' 2
kill -INT -- -"$job"
STATUS=0
wait "$job" || STATUS=$?
[ "$STATUS" -eq 130 ] || fail "the ranks stopped with $STATUS, not 130 on SIGINT: $(tail -3 ctrlc.err)"
[ -f ctrlc.h5 ] || fail "Ctrl-C left no checkpoint: $(tail -3 ctrlc.err)"
stopped_step_saved ctrlc.h5 ctrlc.jsonl || fail "the checkpoint is not of the step the ranks stopped at"

step "a launcher killed with SIGKILL: its ranks save and stop rather than train on orphaned"
$T --nproc-per-node 2 --max-steps 100000 --schedule-steps 100000 --save-every 10 --log-interval 1 --metrics orphaned.jsonl \
  tokens.h5 -o orphaned.h5 2>orphaned.err &
job=$!
wait_for_lines orphaned.jsonl '"event":"checkpoint"' 1
ranks=$(pgrep -P "$job" | sort -n)
kill -9 "$job"
wait "$job" 2>/dev/null || true
for _ in $(seq 1 100); do
  alive=0
  for r in $ranks; do ! kill -0 "$r" 2>/dev/null || alive=1; done
  [ "$alive" = 0 ] && break
  sleep 0.1
done
[ "$alive" = 0 ] || {
  kill -9 $ranks 2>/dev/null || true
  fail "the ranks of a killed launcher still run 10 s later"
}
grep -q '"reason":"signal 15"' orphaned.jsonl || fail "the ranks did not stop as on SIGTERM: $(tail -3 orphaned.err)"
stopped=$(xl-inspect --json orphaned.h5 | json /dev/stdin 'j["attributes"]["step"]')
[ "$stopped" = "$(grep '"event":"done"' orphaned.jsonl | json /dev/stdin 'j["step"]')" ] ||
  fail "the checkpoint is not of the step the ranks stopped at"
expect 0 $T --nproc-per-node 2 --max-steps $((stopped + 3)) --schedule-steps 100000 --resume tokens.h5 -o orphaned.h5

# Without a launcher (ranks started as torchrun starts them), rank 0 itself notices: the launcher
# above may stop it before it does.
step "ranks started by hand: rank 0 names a dead rank 1 and stops"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $T --max-steps 100000 --schedule-steps 100000 --save-every 10 \
  --log-interval 1 --metrics hand.jsonl tokens.h5 -o hand.h5 2>hand0.err &
rank0=$!
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $T --max-steps 100000 --schedule-steps 100000 --save-every 10 \
  --log-interval 1 tokens.h5 -o hand.h5 2>hand1.err &
rank1=$!
wait_for_lines hand.jsonl '"event":"checkpoint"' 1
start=$(date +%s)
kill -9 "$rank1"
STATUS=0
wait "$rank0" || STATUS=$?
elapsed=$(($(date +%s) - start))
[ "$STATUS" -ne 0 ] || fail "rank 0 ended well after rank 1 was killed"
[ "$elapsed" -lt 60 ] || fail "rank 0 took ${elapsed}s to stop after rank 1 died"
grep -q "rank 0: .*failed: rank 1 (pid $rank1) is gone" hand0.err || fail "rank 0 did not name rank 1: $(cat hand0.err)"

# srun and mpirun do not stop the others when a rank fails before it connects: it tells them
# (they waited out --dist-timeout in the process group's set-up).
step "a rank that fails before it joins (a missing -c file): the others stop at once, naming it"
for failing in 1 0; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  bad=(-c missing.ini)
  start=$(date +%s)
  # shellcheck disable=SC2046
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $T --dist-timeout 60s --max-steps 5 \
    $([ $failing = 0 ] && echo "${bad[@]}") tokens.h5 -o early.h5 2>early0.err &
  pids=($!)
  # shellcheck disable=SC2046
  RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $T --dist-timeout 60s --max-steps 5 \
    $([ $failing = 1 ] && echo "${bad[@]}") tokens.h5 -o early.h5 2>early1.err &
  pids+=($!)
  codes=()
  for p in "${pids[@]}"; do
    STATUS=0
    wait "$p" || STATUS=$?
    codes+=("$STATUS")
  done
  elapsed=$(($(date +%s) - start))
  other=$((1 - failing))
  [ "${codes[$failing]}" -eq 66 ] && [ "${codes[$other]}" -eq 69 ] ||
    fail "rank $failing failing: the ranks exited ${codes[*]}: $(cat early0.err early1.err)"
  [ "$elapsed" -lt 20 ] || fail "rank $other took ${elapsed}s to stop after rank $failing failed (--dist-timeout 60s)"
  grep -q "rank $failing: missing.ini" "early$failing.err" || fail "rank $failing did not say why, as rank $failing: $(cat "early$failing.err")"
  grep -q "rank $other: setting up the run failed: rank $failing (pid ${pids[$failing]}) failed before it joined the others (exit 66" \
    "early$other.err" || fail "rank $other did not name rank $failing: $(cat "early$other.err")"
done
[ ! -e early.h5 ] || fail "a failed job left early.h5"

step "bad rendezvous settings: one line and a sysexits code"
closed=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$closed
expect 69 $T --dist-timeout 3s --max-steps 5 tokens.h5 -o bad.h5
stderr_is_one_line "rank 1" "no rendezvous" "127.0.0.1:$closed"
# A port that another program holds.
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)' >busy.port &
holder=$!
for _ in $(seq 1 50); do [ -s busy.port ] && break; sleep 0.1; done
export RANK=0 MASTER_PORT=$(cat busy.port)
expect 69 $T --dist-timeout 3s --max-steps 5 tokens.h5 -o bad.h5
stderr_is_one_line "rank 0" "port"
kill "$holder"
expect 64 $T --nproc-per-node 2 --max-steps 5 tokens.h5 -o bad.h5
stderr_is_one_line "already is rank 0 of 2"
# Ranks that a launcher of its own started cannot share one pipe.
expect 64 $T --max-steps 5 - -o bad.h5 <tokens.h5
stderr_is_one_line "rank 0" "not pipes" "--nproc-per-node"
export RANK=x
expect 64 $T --max-steps 5 tokens.h5 -o bad.h5
stderr_is_one_line "RANK=x"
unset RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
# A refusal that every rank finds is said once, by rank 0: it was a line from each rank and the
# launcher's "rank N exited".
expect 64 $T --nproc-per-node 2 --d-model 7 --max-steps 5 tokens.h5 -o bad.h5
stderr_is_one_line "xl-train-phase1 rank 0: --d-model must be"
expect 65 $T --nproc-per-node 2 --valid-split nosuch --max-steps 5 tokens.h5 -o bad.h5
stderr_is_one_line "xl-train-phase1 rank 0: tokens.h5: no split 'nosuch'"
# A rank that fails alone, mid-run: its line, its status; the others leave it at that (they said
# "rank 0 is gone", and the launcher "rank 0 exited").
expect 74 $T --nproc-per-node 2 --metrics /dev/full --max-steps 5 tokens.h5 -o bad.h5
stderr_is_one_line "xl-train-phase1 rank 0: /dev/full: write error"
# An output the job may not write is the launcher's one line, before it starts a rank: it was rank
# 0's refusal, every other rank's "rank 0 is gone" and the launcher's "rank 0 exited".
echo taken >taken.h5
expect 73 $T --nproc-per-node 2 --max-steps 5 tokens.h5 -o taken.h5
stderr_is_one_line "xl-train-phase1: taken.h5: already exists"
expect 66 $T --nproc-per-node 2 --max-steps 5 --resume tokens.h5 -o missing.h5
stderr_is_one_line "xl-train-phase1: missing.h5: no checkpoint to resume from"
expect 66 $T --nproc-per-node 2 --max-steps 5 missing-tokens.h5 -o fresh.h5
stderr_is_one_line "xl-train-phase1: missing-tokens.h5: No such file or directory"
expect 65 xl-train-phase2 --nproc-per-node 2 --init dp.ini --max-steps 5 tokens.h5 -o fresh.h5
stderr_is_one_line "xl-train-phase2: dp.ini: not an HDF5 file"
[ ! -e fresh.h5 ] || fail "a refused job left fresh.h5"
# Two ranks started as torchrun starts them, rank 0 with flags $1 and rank 1 with $2: both must
# exit $3, rank 0 with one line that holds $4, rank 1 without a word.
by_hand_refused() {
  local port r0 R0=0 STATUS=0
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # shellcheck disable=SC2086
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $T --max-steps 5 $1 2>r0.err &
  r0=$!
  # shellcheck disable=SC2086
  RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $T --max-steps 5 $2 2>r1.err || STATUS=$?
  wait $r0 || R0=$?
  [ "$STATUS" -eq "$3" ] && [ "$R0" -eq "$3" ] || fail "the ranks exited $R0 and $STATUS, expected $3: $(cat r0.err r1.err)"
  [ "$(wc -l <r0.err)" -eq 1 ] && grep -qF -- "$4" r0.err || fail "rank 0 did not say '$4' in one line: $(cat r0.err)"
  [ ! -s r1.err ] || fail "rank 1 spoke too (its own copy, or 'rank 0 is gone'): $(cat r1.err)"
}
# Ranks that disagree on their settings or data: both stop, rank 0 naming rank 1 and what differs
# (another vocab before the tokens it changes).
by_hand_refused "tokens.h5 -o bad.h5" "--lr 0.01 tokens.h5 -o bad.h5" 78 \
  "rank 1's settings differ from rank 0's: train.lr = 0.01 against rank 0's 0.002"
xl-tokenize --mode char --split 0.9,0.05,0.05 "$corpus" -o chars.h5 -q
by_hand_refused "tokens.h5 -o bad.h5" "chars.h5 -o bad.h5" 78 "rank 1's tokens differ from rank 0's: vocab_sha256 ="
[ ! -e bad.h5 ] || fail "a failed job left bad.h5"
# An output that rank 0 refuses: rank 1 took it for rank 0 gone.
by_hand_refused "tokens.h5 -o taken.h5" "tokens.h5 -o taken.h5" 73 "taken.h5: already exists"
echo "all data-parallel checks passed"
