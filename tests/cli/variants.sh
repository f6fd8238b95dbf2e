#!/usr/bin/env bash
# The attention variants as a user runs them: sMGK with 4 heads, persistent memory without the
# feed-forward sublayer, adaptive span; each trains phase 1 -> phase 2, evaluates, studies and
# prunes its heads; the loss falls; the checkpoint records the variant (xl-inspect); the spans are
# learned, and the span loss shortens them; combinations the model cannot make are refused with one
# line (78), export to PyTorch with one line (65). Runs on the enwik8 head from ../shared/data, or
# on the generated fallback text without it (XL_SHARED_DATA=/nonexistent).
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

corpus=$(training_corpus)
xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -o tokens.h5 -q
small="--n-layer 2 --d-model 32 --d-head 8 --d-inner 64 --tgt-len 16 --mem-len 16 --batch-size 4 --dropout 0 --eval-interval 0 --threads 1 -q"

run_variant() {
  local name=$1
  shift
  step "$name: phase 1 -> phase 2 -> eval -> prune"
  expect 0 xl-train-phase1 $small "$@" --lr 3e-3 --max-steps 40 --log-interval 10 --skip-schedule linear --skip-p 0.3 \
    --sch-beta 0.2 --metrics $name-p1.jsonl tokens.h5 -o $name-p1.h5
  python3 - $name-p1.jsonl <<'PY' || fail "$name: phase-1 loss did not fall: $(cat $name-p1.jsonl)"
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"event":"train"' in l.replace(" ", "")]
assert len(losses) >= 3 and losses[-1] < losses[0] - 0.3, losses
PY
  expect 0 xl-train-phase2 --init $name-p1.h5 --lr 1e-3 --max-steps 10 --threads 1 -q tokens.h5 -o $name-p2.h5
  expect 0 xl-eval-longctx --threads 1 --tgt-len 16 --mem-len 16,48 --max-tokens 400 $name-p2.h5 tokens.h5
  [ "$(wc -l <"$TMP/out")" -eq 2 ] || fail "$name: expected 2 eval rows: $(head -c 300 "$TMP/out")"
  expect 0 xl-prune-heads --threads 1 --tgt-len 16 --batch-size 2 --max-tokens 200 $name-p2.h5 tokens.h5
  expect 0 xl-prune-heads --threads 1 --tgt-len 16 --batch-size 2 --max-tokens 200 --importance-max-tokens 200 \
    --mode iterative --prune-heads 1 $name-p2.h5 tokens.h5 -o $name-pruned.h5
  expect 0 xl-eval-longctx --threads 1 --tgt-len 16 --max-tokens 200 $name-pruned.h5 tokens.h5
  expect 0 xl-inspect --json $name-p2.h5
}

run_variant smgk --attention smgk --n-head 4
json "$TMP/out" 'j["checkpoint"]["model_config"]["attention"]' | grep -qx smgk || fail "the checkpoint does not record smgk: $(head -c 300 "$TMP/out")"
run_variant persistent --persistent-mem 8 --ff off --n-head 2
# Spans start at 0 and grow where longer context lowers the loss; a span loss of 1e-5 lets them,
# on enwik8 and on the fallback text alike (at 1e-3 the penalty keeps the fallback's at 0).
run_variant span --adaptive-span on --span-ramp 4 --span-loss 1e-5 --n-head 2
[ "$(json "$TMP/out" 'j["checkpoint"]["model_config"]["span_max"]')" = 32 ] || fail "span-max is not mem-len + tgt-len: $(head -c 300 "$TMP/out")"

step "xl-prune-heads compares a variant with another, paths with commas included (xl-ablate's seeded runs)"
cp smgk-p2.h5 "smgk,seed=1.h5"
cp persistent-p2.h5 "pers,seed=1.h5"
cp persistent-p2.h5 "pers,seed=2.h5"
expect 0 xl-prune-heads --threads 1 --tgt-len 16 --batch-size 2 --max-tokens 200 --format md "smgk,seed=1.h5" tokens.h5 \
  --compare "pers,seed=1.h5,pers,seed=2.h5"
grep -q "smgk,seed=1.h5" "$TMP/out" || fail "the comparison does not name the checkpoint: $(head -c 300 "$TMP/out")"

step "what cannot be combined is refused with one line"
expect 64 xl-train-phase1 $small --attention mgk --persistent-mem 4 --max-steps 1 tokens.h5 -o x.h5
stderr_is_one_line "persistent-mem is not supported with MGK attention"
expect 64 xl-train-phase1 $small --ff off --max-steps 1 tokens.h5 -o x.h5
stderr_is_one_line "ff can be off only with persistent-mem > 0"
expect 64 xl-train-phase1 $small --attention gauss --max-steps 1 tokens.h5 -o x.h5
stderr_is_one_line "attention"
expect 65 xl-import-torch --export smgk-p2.h5 -o smgk.pt
stderr_is_one_line "smgk-p2.h5" "PyTorch"

step "xl-inspect shows the learned spans"
expect 0 xl-inspect --json span-p2.h5
python3 - "$TMP/out" <<'PY' || fail "no spans per head in [0, 32]: $(head -c 300 "$TMP/out")"
import json, sys
spans = json.load(open(sys.argv[1]))["checkpoint"]["spans"]
assert len(spans) == 2 and all(len(r) == 2 for r in spans), spans
assert all(0 <= s <= 32 for r in spans for s in r) and any(s > 0 for r in spans for s in r), spans
PY
expect 0 xl-inspect span-p2.h5
grep -q "adaptive spans" "$TMP/out" || fail "the text summary has no spans"

step "the span loss shortens the spans: phase 1 again with --span-loss 1e-3, the same seed and steps"
expect 0 xl-train-phase1 $small --adaptive-span on --span-ramp 4 --span-loss 1e-3 --n-head 2 --lr 3e-3 --max-steps 40 \
  --log-interval 10 --skip-schedule linear --skip-p 0.3 --sch-beta 0.2 tokens.h5 -o span-penalized.h5
xl-inspect --json span-p1.h5 >spans-free.json
xl-inspect --json span-penalized.h5 >spans-penalized.json
python3 - spans-free.json spans-penalized.json <<'PY' || fail "the span loss did not shorten the spans"
import json, sys
free, penalized = (json.load(open(p))["checkpoint"]["spans"] for p in sys.argv[1:])
print("spans at --span-loss 1e-5:", free, "at 1e-3:", penalized)
assert all(0 <= s <= 32 for r in penalized for s in r), penalized
assert sum(map(sum, penalized)) < sum(map(sum, free)), (free, penalized)
PY
