#!/usr/bin/env bash
# --tensorboard: the trainers' event files read back by an independent reader (tb_events.py, and
# TensorBoard's own EventAccumulator where the tensorboard package is installed) hold every number
# of the metrics JSONL's train and valid events, through a SIGKILL and --resume (no step lost or
# twice) and on into phase 2; a new run refuses a directory with another run's curves.
source "$(dirname "$0")/common.bash"
READER="python3 $XL_SOURCE_DIR/tests/cli/tb_events.py"

step "the reader's CRC-32C gives its published check value"
$READER self-test >/dev/null || fail "tb_events.py's CRC-32C is wrong"

corpus=$(training_corpus)
xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -o tokens.h5 -q
small_model_ini small.ini "schedule-steps = 100000" "eval-interval = 5" "eval-max-tokens = 2000" \
  "log-interval = 1" "skip-schedule = linear" "sch-beta = 0.3"
T="xl-train-phase1 -c small.ini --threads 1"

step "phase 1, killed (SIGKILL) and resumed, then phase 2, into one directory"
$T --max-steps 100000 tokens.h5 -o p1.h5 --metrics p1.jsonl --tensorboard tb -q &
pid=$!
wait_for_lines p1.jsonl '"event":"train"' 23
kill -KILL $pid
wait $pid 2>/dev/null || true
target=$(($(grep -c '"event":"train"' p1.jsonl) + 5))
expect 0 $T --max-steps $target --resume tokens.h5 -o p1.h5 --metrics p1.jsonl --tensorboard tb
expect 0 xl-train-phase2 --threads 1 --max-steps 8 --eval-interval 4 --log-interval 1 --init p1.h5 tokens.h5 -o p2.h5 \
  --metrics p2.jsonl --tensorboard tb
[ "$(ls tb | grep -c '^events.out.tfevents.')" -eq 3 ] || fail "expected three event files in tb: $(ls tb)"
lost=$(jq -r 'select(.event == "train") | .step' p1.jsonl | sort -n | uniq -d | wc -l)
echo "  steps the kill lost, to be superseded in the event files: $lost"

step "every train and valid number of the metrics is a scalar at its step, once"
$READER scalars tb >events.json || fail "tb_events.py could not read tb"
# The metrics as a reader of the JSONL takes them (a start event supersedes later steps), as tags.
python3 - p1.jsonl p2.jsonl events.json <<'PY' || fail "the event files and the metrics differ"
import json, struct, sys
def resolved(path):
    kept = []
    for line in open(path):
        e = json.loads(line)
        if e["event"] == "start":
            kept = [k for k in kept if k["step"] <= e["step"]]
        kept.append(e)
    return kept
want = {}
for path in sys.argv[1:3]:
    for e in resolved(path):
        if e["event"] not in ("train", "valid"):
            continue
        for name, value in e.items():
            if name == "step" or isinstance(value, bool):
                continue
            items = [(name, value)] if isinstance(value, (int, float)) else \
                [(name + "/" + str(i), v) for i, v in enumerate(value)] if isinstance(value, list) else []
            for tag, v in items:
                f32 = struct.unpack("<f", struct.pack("<f", float(v)))[0]
                want.setdefault(e["event"] + "/" + tag, []).append([e["step"], f32])
got = json.load(open(sys.argv[3]))
if got != want:
    missing = sorted(set(want) - set(got)); extra = sorted(set(got) - set(want))
    diff = [t for t in want if t in got and got[t] != want[t]][:3]
    print("missing tags %s, extra tags %s, differing %s" % (missing[:5], extra[:5],
          [(t, want[t][:3], got[t][:3]) for t in diff]), file=sys.stderr)
    sys.exit(1)
steps = [s for s, _ in got["train/loss"]]
assert steps == sorted(set(steps)), "train/loss has a step twice or out of order"
assert any(t.startswith("train/skip_rate/") for t in got) and any(t.startswith("train/sch_rate/") for t in got)
print("  %d tags, %d train/loss points over steps %d..%d" % (len(got), len(steps), steps[0], steps[-1]))
PY

step "TensorBoard's own reader, where the tensorboard package is installed, reads the same"
TB_PYTHON=${XL_TENSORBOARD_PYTHON:-python3}
if $TB_PYTHON -c 'import tensorboard' 2>/dev/null; then
  $TB_PYTHON - tb events.json <<'PY' || fail "TensorBoard's EventAccumulator reads other scalars"
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0}, purge_orphaned_data=True)
acc.Reload()
theirs = {tag: [[s.step, s.value] for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
ours = json.load(open(sys.argv[2]))
if theirs != ours:
    print("tags only ours %s, only theirs %s" % (sorted(set(ours) - set(theirs))[:5], sorted(set(theirs) - set(ours))[:5]), file=sys.stderr)
    for tag in ours:
        if ours[tag] != theirs.get(tag):
            a, b = ours[tag], theirs.get(tag) or []
            k = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            print("%s: from point %d on, ours %s, theirs %s" % (tag, k, a[k:k + 4], b[k:k + 4]), file=sys.stderr)
            break
    sys.exit(1)
print("  EventAccumulator: %d tags alike" % len(theirs))
PY
else
  echo "  (no tensorboard package for $TB_PYTHON: XL_TENSORBOARD_PYTHON names a Python that has one)"
fi

step "a corrupt record is found by its CRC"
first=$(ls tb/events.out.tfevents.* | head -1)
cp -r tb tb-bad
python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-10]^=1; open(p,'wb').write(b)" "tb-bad/${first##*/}"
$READER scalars tb-bad >/dev/null 2>err.txt && fail "a flipped bit was not found"
grep -q "fails its CRC-32C" err.txt || fail "not said as a CRC failure: $(cat err.txt)"

step "a new run does not mix its curves into another run's directory (without -f)"
expect 73 $T --max-steps 2 -q tokens.h5 -o other.h5 --tensorboard tb
stderr_is_one_line "tb: holds the TensorBoard events of another run (use -f to start its curves again, or --resume to continue that run)"
expect 0 $T --max-steps 3 -f tokens.h5 -o other.h5 --tensorboard tb2
expect 0 $T --max-steps 2 -f tokens.h5 -o other.h5 --tensorboard tb2
$READER scalars tb2 | python3 -c 'import json,sys; s=[p[0] for p in json.load(sys.stdin)["train/loss"]]; sys.exit(0 if s == [1, 2] else 1)' ||
  fail "-f did not start tb2's curves again: $($READER scalars tb2 | head -c 300)"
echo "PASS"
