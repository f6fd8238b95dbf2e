#!/usr/bin/env bash
# The whole chain on a GPU, as a user runs it: phase 1 -> phase 2 -> evaluation -> head pruning with
# --device cuda --precision bf16; the GPU's checkpoint evaluates on the CPU to the same loss within
# bf16's tolerance; a run stopped and resumed on the GPU ends bit-identical to an uninterrupted one;
# running out of GPU memory, in a training step or in a validation, is said as such in one line,
# and a validation that runs out saves the trained step, which resumes on the GPU.
# Skipped (77) without a GPU; ctest label "cuda".
source "$(dirname "$0")/common.bash"

run xl-eval-longctx --device cuda missing.h5 missing.h5
if grep -q -e "no usable GPU" -e "has no CUDA" "$TMP/err"; then
  echo "skipped: $(cat "$TMP/err")"
  exit 77
fi

corpus=$(training_corpus)
xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -o tokens.h5 -q
C="-c $XL_SOURCE_DIR/share/xl/configs/tiny.ini --device cuda --precision bf16 --eval-interval 50 --eval-max-tokens 5000 -q"

step "phase 1 -> phase 2 -> evaluation -> head pruning on the GPU in bf16"
expect 0 xl-train-phase1 $C --max-steps 100 tokens.h5 -o p1.h5 --metrics p1.jsonl
grep -q '"device":"cuda:0"' p1.jsonl || fail "phase 1 did not run on the GPU: $(head -c 300 p1.jsonl)"
grep -q '"precision":"bf16"' p1.jsonl || fail "phase 1 did not run in bf16"
expect 0 xl-train-phase2 $C --init p1.h5 --max-steps 50 tokens.h5 -o p2.h5
expect 0 xl-eval-longctx --device cuda --precision bf16 --split valid --max-tokens 20000 p2.h5 tokens.h5
gpu=$(json out 'j["loss"]')
[ "$(json out 'j["kv_cache"]')" = True ] || fail "the default budget kept no key/value projections: $(cat out)"
# The memories' key/value projections kept in bf16 (the default budget) against projecting them again.
expect 0 xl-eval-longctx --device cuda --precision bf16 --split valid --max-tokens 20000 --kv-cache-budget 0 p2.h5 tokens.h5
again=$(json out 'j["loss"]')
[ "$(json out 'j["kv_cache"]')" = False ] || fail "--kv-cache-budget 0 kept key/value projections: $(cat out)"
python3 -c "import sys; sys.exit(0 if abs($gpu - $again) <= 1e-3 * $again else 1)" ||
  fail "bf16 evaluation with kept projections $gpu, projecting again $again"
expect 0 xl-prune-heads --device cuda --precision bf16 --mode ablate-one --max-tokens 5000 p2.h5 tokens.h5
[ "$(grep -c '"event":"head"' out)" -eq 16 ] || fail "expected 16 heads in the ablation table"

step "the GPU's checkpoint evaluates on the CPU alike (within bf16's tolerance)"
expect 0 xl-eval-longctx --device cpu --split valid --max-tokens 20000 p2.h5 tokens.h5
cpu=$(json out 'j["loss"]')
python3 -c "import sys; sys.exit(0 if abs($gpu - $cpu) <= 0.02 * $cpu else 1)" || fail "GPU bf16 loss $gpu, CPU fp32 loss $cpu"

step "stopped and resumed on the GPU == uninterrupted, bit for bit (deterministic kernels)"
expect 0 xl-train-phase1 $C --max-steps 40 tokens.h5 -o whole.h5
expect 0 xl-train-phase1 $C --max-steps 17 tokens.h5 -o split.h5
expect 0 xl-train-phase1 $C --max-steps 40 --resume tokens.h5 -o split.h5
for g in /model /optimizer /memory; do
  h5diff -q whole.h5 split.h5 "$g" "$g" >/dev/null || fail "resume on the GPU differs in $g"
done
# In float32 the GPU's attention keeps its [batch, heads, queries, keys] scores: at 100,000 queries
# and keys, 4 heads take 160 GB in one tensor, more than any GPU of today has.
F="-c $XL_SOURCE_DIR/share/xl/configs/tiny.ini --device cuda --precision fp32 -q"
step "a training step that runs out of GPU memory: one line naming the step, the size and the GPU"
run xl-train-phase1 $F --tgt-len 100000 --mem-len 0 --batch-size 1 --max-steps 1 tokens.h5 -o big.h5
[ "$STATUS" -eq 70 ] || fail "expected exit 70, got $STATUS: $(cat "$TMP/err")"
stderr_is_one_line "xl-train-phase1: step 1: out of memory: could not allocate" "on GPU 0" "a larger --batch-chunk"
sed 's/^/  said: /' "$TMP/err"  # in the log of a passing run too
[ ! -e big.h5 ] || fail "a run that never finished a step wrote big.h5"

step "a validation that runs out of GPU memory at step 10 saves step 10 and resumes"
xl-tokenize --mode byte --split 0.3,0.69,0.01 "$corpus" -o long.h5 -q
run xl-train-phase1 $F --max-steps 20 --save-every 5 --eval-interval 10 --eval-tgt-len 100000 --eval-mem-len 0 \
  --eval-batch-size 1 --eval-max-tokens 0 long.h5 -o oom.h5 --metrics oom.jsonl
[ "$STATUS" -eq 70 ] || fail "expected exit 70, got $STATUS: $(cat "$TMP/err")"
stderr_is_one_line "xl-train-phase1: validation at step 10 failed: out of memory: could not allocate" "on GPU 0" \
  "training stopped at step 10, resume with --resume -o oom.h5"
sed 's/^/  said: /' "$TMP/err"
stopped_step_saved oom.h5 oom.jsonl || fail "the done event's step is not the checkpoint's"
expect 0 xl-train-phase1 $F --resume --max-steps 20 --eval-interval 10 long.h5 -o oom.h5 --metrics oom.jsonl
grep '"event":"valid"' oom.jsonl | grep -q '"step":20' || fail "the resumed run did not validate at step 20"
echo "all GPU checks passed"
