#!/usr/bin/env bash
# Running out of memory, for real, under a limit on the address space (ulimit -v): a validation
# that needs more memory than training (a long --eval-mem-len) saves the trained step, ends with
# one line that says so, where the checkpoint is and what needs less, and the run resumes; with 2
# ranks the lowest rank that failed says it once; a training step that runs out names what needs
# less, and one process saves the run as its last whole step left it; a memory sweep keeps the
# rows it finished; no tool calls it an internal error; a limit too small to start in is one line,
# not a hang.
source "$(dirname "$0")/common.bash"

make_mixed_text corpus.txt 1000000
xl-tokenize --mode byte --split 0.5,0.45,0.05 corpus.txt -o tokens.h5 -q
MODEL="xl-train-phase1 --n-layer 2 --d-model 32 --n-head 2 --d-head 16 --d-inner 64 --batch-size 2 --threads 1 -q"
T="$MODEL --tgt-len 16 --mem-len 16"
# Validation's attention over 40,000 + 40,000 positions: 12.8 GB in one allocation.
LONG="--eval-interval 10 --eval-tgt-len 40000 --eval-mem-len 40000"

# limited CMD...: CMD in 4 GB of address space (LIMIT_KB; training here needs under 1 GB), with one
# BLAS and OpenMP thread and two malloc arenas, so that what start-up reserves does not grow with
# the machine's cores (OpenBLAS 0.3.21 retries a buffer it cannot map for ever: hence the timeout).
limited() {
  STATUS=0
  (ulimit -v "${LIMIT_KB:-4000000}"; OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MALLOC_ARENA_MAX=2 exec timeout 300 "$@") \
    >"$TMP/out" 2>"$TMP/err" || STATUS=$?
}
# status_is CODE: the last limited command exited with CODE.
status_is() {
  [ "$STATUS" -eq "$1" ] || fail "expected exit $1, got $STATUS: $(cat "$TMP/err")"
}
checkpoint_step() { xl-inspect --json "$1" | json /dev/stdin 'j["attributes"]["step"]'; }

# A CUDA LibTorch's libraries alone pass these address-space limits before main (the loader exits
# 127): host memory runs out the same way there, and cli.cuda covers the GPU's.
if ldd "$(command -v xl-eval-longctx)" | grep -q libtorch_cuda; then
  echo "skipped: the tools link a CUDA LibTorch, whose libraries need more address space than these limits"
  exit 77
fi

step "a limit too small for LibTorch to start: one line, not a hang in OpenBLAS's start-up"
STATUS=0
(ulimit -v 700000; exec timeout 60 xl-eval-longctx --version) >"$TMP/out" 2>"$TMP/err" || STATUS=$?
status_is 70
stderr_is_one_line "xl-eval-longctx: the address-space limit (ulimit -v, SGE's h_vmem) of 717 MB is too small to start LibTorch"

step "a validation out of memory at step 10 saves step 10 (the last save was step 5) and says so"
limited $T --max-steps 30 --save-every 5 $LONG --eval-batch-size 1 tokens.h5 -o run.h5 --metrics m.jsonl
status_is 70
stderr_is_one_line "xl-train-phase1: validation at step 10 failed: out of memory: could not allocate 12.8 GB of host memory" \
  "training stopped at step 10, resume with --resume -o run.h5" "--eval-mem-len needs less"
[ "$(checkpoint_step run.h5)" = 10 ] || fail "the checkpoint is of step $(checkpoint_step run.h5), not 10"
stopped_step_saved run.h5 m.jsonl || fail "the done event's step is not the checkpoint's"
grep -q '"reason":"validation failed"' m.jsonl || fail "the metrics do not say why the run ended"
no_temp_files .

step "it resumes with a shorter validation memory"
limited $T --resume --max-steps 20 --eval-interval 10 --eval-tgt-len 0 --eval-mem-len -1 tokens.h5 -o run.h5 --metrics m.jsonl
status_is 0
[ "$(checkpoint_step run.h5)" = 20 ] || fail "the resumed run did not reach step 20"
grep '"event":"valid"' m.jsonl | grep -q '"step":20' || fail "no validation at step 20"

step "2 ranks: the one that ran out says it (rank 1 holds the only stream), both save step 10"
limited $T --nproc-per-node 2 --max-steps 30 $LONG --eval-batch-size 1 tokens.h5 -o two.h5
status_is 70
stderr_is_one_line "xl-train-phase1 rank 1: validation at step 10 failed: out of memory" "resume with --resume -o two.h5"
[ "$(checkpoint_step two.h5)" = 10 ] || fail "the 2-rank checkpoint is of step $(checkpoint_step two.h5), not 10"

step "2 ranks that both run out: one line, from rank 0"
limited $T --nproc-per-node 2 --max-steps 30 $LONG --eval-batch-size 2 tokens.h5 -o both.h5
status_is 70
stderr_is_one_line "xl-train-phase1 rank 0: validation at step 10 failed: out of memory"
[ "$(checkpoint_step both.h5)" = 10 ] || fail "the checkpoint is of step $(checkpoint_step both.h5), not 10"

step "a training step that runs out says which and what needs less"
limited $MODEL --tgt-len 20000 --mem-len 20000 --attention-probs keep --max-steps 3 tokens.h5 -o big.h5
status_is 70
stderr_is_one_line "xl-train-phase1: step 1: out of memory: could not allocate" "a larger --batch-chunk" \
  "--attention-probs recompute needs less"
[ ! -e big.h5 ] || fail "a run that never finished a step wrote big.h5"

step "a training step that runs out after a step: the run is saved as that step left it and resumes to the bits"
# Step 1 attends over 6,000 keys, step 2 over its memory too (1.2 GB of probabilities at once): in
# 2.75 GB, step 1 runs (it ran in 2.3 on a Zen 4) and step 2 does not (it needed over 3.35).
MID="$MODEL --tgt-len 6000 --mem-len 6000 --attention-probs keep --max-steps 2 --eval-interval 0 --eval-tgt-len 16
     --eval-mem-len 16 --eval-max-tokens 1000"
LIMIT_KB=2750000 limited $MID tokens.h5 -o mid.h5 --metrics mid.jsonl
status_is 70
stderr_is_one_line "xl-train-phase1: step 2: out of memory: could not allocate" \
  "the run is saved at step 1, resume with --resume -o mid.h5" "a larger --batch-chunk"
[ "$(checkpoint_step mid.h5)" = 1 ] || fail "the checkpoint is of step $(checkpoint_step mid.h5), not 1"
stopped_step_saved mid.h5 mid.jsonl || fail "the done event's step is not the checkpoint's"
grep '"event":"done"' mid.jsonl | grep -q '"reason":"out of memory"' || fail "the done event does not say why: $(cat mid.jsonl)"
expect 0 $MID --resume tokens.h5 -o mid.h5
expect 0 $MID tokens.h5 -o whole.h5
same_checkpoint whole.h5 mid.h5 "resumed after a step that ran out of memory"

step "a sweep that runs out at its longest memory keeps the rows finished before it"
limited xl-eval-longctx --split valid --tgt-len 10000 --mem-len 0,100000 --batch-size 1 --max-tokens 60K -q \
  run.h5 tokens.h5 -o rows.jsonl
status_is 70
stderr_is_one_line "xl-eval-longctx: --mem-len 100000: out of memory: could not allocate" \
  "kept the 1 of 2 settings finished before it" "a smaller --batch-size, --tgt-len or --mem-len needs less"
[ "$(wc -l <rows.jsonl)" -eq 1 ] && grep -q '"mem_len":0,' rows.jsonl || fail "the finished row was not kept: $(cat rows.jsonl)"
no_temp_files .
