#!/usr/bin/env bash
# The whole chain on a GPU, as a user runs it: phase 1 -> phase 2 -> evaluation -> head pruning with
# --device cuda --precision bf16; the GPU's checkpoint evaluates on the CPU to the same loss within
# bf16's tolerance; a run stopped and resumed on the GPU ends bit-identical to an uninterrupted one.
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
echo "all GPU checks passed"
