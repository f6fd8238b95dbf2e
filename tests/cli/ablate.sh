#!/usr/bin/env bash
# xl-ablate end to end on a two-run grid (phase 1 only, and phase 1 + 2, with the same 8-step
# budget) of a very small model: the emitted Makefile runs under make -j2, a second make does
# nothing, a run whose phase lost its stamp resumes from its checkpoint, the tables (md, tsv,
# jsonl, plot), runs named by two axes, and bad grids.
source "$(dirname "$0")/common.bash"

command -v make >/dev/null || {
  echo "skipped: make is not installed"
  exit 77
}

make_mixed_text corpus.txt 40000
xl-tokenize --mode byte --split 0.8,0.1,0.1 corpus.txt -o tokens.h5 -q

cat >grid.ini <<EOF
# Two runs, 8 training steps each.
[grid]
name = cli-test
base-config = $XL_SOURCE_DIR/share/xl/configs/tiny.ini
p1-steps = 5
p2-steps = 3
eval-tgt-len = 16
eval-mem-len = 16
eval-max-tokens = 400
eval-batch-size = 2

[common]
n-layer = 2
d-model = 32
n-head = 2
d-head = 16
d-inner = 32
tgt-len = 16
mem-len = 16
batch-size = 4
schedule-steps = 8
eval-interval = 4
eval-tgt-len = 16
eval-mem-len = 16
eval-max-tokens = 400
log-interval = 2

[axes]
phases = p1, p1+p2
EOF
A="runs/phases=p1"
B="runs/phases=p1+p2"

# last_done FILE: the step of the last "done" event of a metrics file.
last_done() {
  python3 -c 'import json, sys
print([e for e in map(json.loads, open(sys.argv[1])) if e["event"] == "done"][-1]["step"])' "$1"
}

step "--emit-makefile | make -f - -j2 trains, evaluates and finishes both runs"
expect 0 xl-ablate grid.ini --tokens tokens.h5 --out runs --threads 1 --emit-makefile
cp out Makefile.emitted
grep -qx "BIN := $XL_BIN" Makefile.emitted || fail "the Makefile does not call the tools in $XL_BIN"
grep -qx "SHELL := bash" Makefile.emitted || fail "no SHELL := bash"
[ -f runs/grid.json ] || fail "--emit-makefile did not write runs/grid.json"
make -f - -j2 <Makefile.emitted >make1.log 2>&1 || {
  sed 's/^/  | /' make1.log >&2
  fail "make failed"
}
for r in "$A" "$B"; do
  for f in run.json p1.h5 p1.jsonl dev.jsonl test.jsonl done.stamp; do
    [ -f "$r/$f" ] || fail "$r/$f is missing"
  done
done
[ -f "$B/p2.h5" ] && [ -f "$B/p2.jsonl" ] || fail "the two-phase run has no phase 2"
[ ! -e "$A/p2.h5" ] || fail "the phase-1 run has a phase 2"
# Equal budgets: 8 steps in phase 1, or 5 in phase 1 and 3 more in phase 2.
[ "$(last_done "$A/p1.jsonl")" = 8 ] || fail "phase-1-only run did not train 8 steps"
[ "$(last_done "$B/p1.jsonl")" = 5 ] || fail "two-phase run did not train 5 steps in phase 1"
[ "$(last_done "$B/p2.jsonl")" = 8 ] || fail "two-phase run did not reach step 8 in phase 2"
[ "$(json "$A/dev.jsonl" 'j["bpc"] > 0')" = True ] || fail "no dev bpc: $(cat "$A/dev.jsonl")"
no_temp_files "$A"
no_temp_files "$B"

# --threads 0 shares the cores this process may use (its affinity: a Slurm or taskset allotment).
if command -v taskset >/dev/null && [ "$(nproc --all)" -gt 1 ]; then
  taskset -c 0 xl-ablate grid.ini --tokens tokens.h5 --out runs-one-core --emit-makefile >one-core.mk 2>/dev/null ||
    fail "--emit-makefile failed under taskset"
  grep -qx "THREADS ?= 1" one-core.mk || fail "one allotted core, but: $(grep '^THREADS' one-core.mk)"
fi

step "a second make does nothing"
sum1=$(cat "$A"/*.jsonl "$B"/*.jsonl | md5sum)
make -f - -j2 <Makefile.emitted >make2.log 2>&1 || fail "second make failed: $(cat make2.log)"
grep -q "Nothing to be done" make2.log || fail "second make did something: $(cat make2.log)"
[ "$(cat "$A"/*.jsonl "$B"/*.jsonl | md5sum)" = "$sum1" ] || fail "second make changed the results"

step "a phase without its stamp resumes from its checkpoint"
rm "$B/p2.stamp"
make -f - -j2 <Makefile.emitted >make3.log 2>&1 || fail "make failed: $(cat make3.log)"
grep -q "phase 2 (resuming)" make3.log || fail "phase 2 did not resume: $(cat make3.log)"
! grep -q "phases=p1: phase" make3.log || fail "the finished run was trained again: $(cat make3.log)"
grep -c '"event":"start"' "$B/p2.jsonl" | grep -qx 2 || fail "no resumed start in p2.jsonl"
[ "$(last_done "$B/p2.jsonl")" = 8 ] || fail "the resumed phase went past its budget"

step "xl-ablate GRID runs make itself and prints the table (nothing left to train)"
expect 0 xl-ablate grid.ini --tokens tokens.h5 --out runs --jobs 2 --threads 1
grep -q "^| phases=p1 | p1 | [0-9.]* | [0-9.]* | [0-9]* | [0-9]* | " out || fail "no finished phases=p1 row: $(cat out)"
grep -q "^| phases=p1+p2 | p1+p2 | [0-9.]* | [0-9.]* | [0-9]* | [0-9]*, [0-9]* | " out ||
  fail "no finished phases=p1+p2 row with two times per batch: $(cat out)"
grep -q "2 of 2 runs finished" out || fail "$(cat out)"
cmp -s runs/Makefile Makefile.emitted || fail "runs/Makefile differs from what --emit-makefile printed"

step "SIGTERM to xl-ablate alone (kill, timeout, a batch system) stops the trainings; the next run resumes them"
sed -e 's/^p1-steps = 5/p1-steps = 100000/' -e 's/^schedule-steps = 8/schedule-steps = 200000/' grid.ini >long.ini
xl-ablate long.ini --tokens tokens.h5 --out long --jobs 2 --threads 1 >long.out 2>long.err &
job=$!
wait_for_lines "long/phases=p1/p1.jsonl" '"event":"checkpoint"' 1
wait_for_lines "long/phases=p1+p2/p1.jsonl" '"event":"checkpoint"' 1
# SIGUSR1 reaches the trainings alone (make and the recipes' shells would die of it): each writes
# a checkpoint and trains on. It was ignored.
kill -USR1 "$job"
for r in "long/phases=p1" "long/phases=p1+p2"; do
  wait_for_lines "$r/p1.log" "as SIGUSR1 asked" 1
  grep -q "as SIGUSR1 asked" "$r/p1.log" || fail "$r's training wrote no checkpoint on SIGUSR1 to xl-ablate: $(tail -2 "$r/p1.log")"
done
kill -0 "$job" 2>/dev/null || fail "xl-ablate stopped on SIGUSR1: $(tail -3 long.err)"
# A second xl-ablate on the same --out is refused: its trainings were refused by the first's
# output locks (73), and it marked those runs failed while they trained.
expect 73 xl-ablate long.ini --tokens tokens.h5 --out long --jobs 2 --threads 1
stderr_is_one_line "another xl-ablate runs this grid (pid $job on "
[ ! -e "long/phases=p1/failed" ] || fail "the refused xl-ablate marked a run failed"
STATUS=0
kill -TERM "$job"
for _ in $(seq 1 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
kill -0 "$job" 2>/dev/null && {
  pkill -f "long/phases=p1" || true
  fail "xl-ablate still runs 30 s after SIGTERM"
}
wait "$job" || STATUS=$?
[ "$STATUS" -eq 143 ] || fail "xl-ablate exited $STATUS after SIGTERM, not 143: $(cat long.err)"
for r in "long/phases=p1" "long/phases=p1+p2"; do
  grep -q '"reason":"signal 15"' "$r/p1.jsonl" || fail "$r's training was not stopped by the signal: $(tail -3 "$r/p1.log")"
done
! pgrep -f "long/phases=p1" >/dev/null || fail "trainings are left running: $(pgrep -fa "long/phases=p1")"
timeout -s TERM 8 xl-ablate long.ini --tokens tokens.h5 --out long --jobs 2 --threads 1 >long2.out 2>long2.err || true
grep -q "phases=p1: phase 1 (resuming)" long2.err || fail "the stopped training did not resume: $(cat long2.err)"
! pgrep -f "long/phases=p1" >/dev/null || fail "trainings are left running after timeout(1): $(pgrep -fa "long/phases=p1")"

step "SIGKILL to xl-ablate: the trainings it started save and stop, and make starts nothing more"
# Nothing can pass SIGKILL on: make and the trainings trained the grid to its end unwatched.
starts=$(grep -c '"event":"start"' "long/phases=p1/p1.jsonl")
starts2=$(grep -c '"event":"start"' "long/phases=p1+p2/p1.jsonl")
stops=$(cat long/phases=p1*/p1.jsonl | grep -c '"reason":"signal 15"')
xl-ablate long.ini --tokens tokens.h5 --out long --jobs 2 --threads 1 >long3.out 2>long3.err &
job=$!
wait_for_lines "long/phases=p1/p1.jsonl" '"event":"start"' $((starts + 1))
wait_for_lines "long/phases=p1+p2/p1.jsonl" '"event":"start"' $((starts2 + 1))
sleep 1
kill -KILL "$job"
for _ in $(seq 1 150); do pgrep -f "long/phases=p1" >/dev/null || break; sleep 0.1; done
! pgrep -f "long/phases=p1" >/dev/null || {
  pkill -f "long/phases=p1" || true
  fail "trainings still run 15 s after xl-ablate was killed"
}
[ "$(cat long/phases=p1*/p1.jsonl | grep -c '"reason":"signal 15"')" -eq $((stops + 2)) ] ||
  fail "the trainings did not save and stop as on SIGTERM: $(tail -2 long/phases=p1*/p1.log)"

step "report: md, tsv, jsonl and a plot"
expect 0 xl-ablate report runs
grep -q "^| run | phases | dev bpc | test bpc | parameters | ms/batch | wall time | peak RSS MB | status |" out ||
  fail "no table header: $(cat out)"
[ "$(grep -c ' | done |$' out)" -eq 2 ] || fail "expected two finished runs: $(cat out)"
expect 0 xl-ablate report runs --format tsv
[ "$(wc -l <out)" -eq 3 ] || fail "expected a header and two rows: $(cat out)"
expect 0 xl-ablate report runs --format jsonl
python3 - out <<'EOF' || fail "bad jsonl report: $(cat out)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["run"] for r in rows] == ["phases=p1", "phases=p1+p2"], rows
assert all(r["finished"] and r["dev"] > 0 and r["test"] > 0 and r["parameters"] > 0 for r in rows), rows
assert len(rows[1]["ms_per_batch"]) == 2 and rows[1]["steps"] == [5, 8], rows
EOF
if command -v gnuplot >/dev/null; then
  expect 0 xl-ablate report runs --plot valid.png
  [ "$(head -c 4 valid.png | tail -c 3)" = PNG ] || fail "valid.png is not a PNG"
fi
# An unfinished run is listed as such.
mkdir runs2
cp -r "$A" runs2/
rm runs2/phases=p1/test.jsonl
expect 0 xl-ablate report runs2
grep -q "evaluating" out || fail "unfinished run not listed as such: $(cat out)"

step "runs named by two axes (commas in their names) log where they should, with and without TensorBoard"
{ cat grid.ini; echo "sch-beta = 0, 0.1"; } >two-axes.ini
expect 0 xl-ablate two-axes.ini --tokens tokens.h5 --out runs4 --threads 1 --emit-makefile
cp out two-axes.mk
make -n -f two-axes.mk >dry.txt 2>&1 || fail "make -n failed: $(tail -3 dry.txt)"
grep -F -- "--metrics $PWD/runs4/phases=p1,sch-beta=0/p1.jsonl -o $PWD/runs4/phases=p1,sch-beta=0/p1.h5" dry.txt >/dev/null ||
  fail "the metrics path is not the run's p1.jsonl: $(grep -m1 -o -- '--metrics [^ ]*' dry.txt)"
make -n -f two-axes.mk TENSORBOARD=tb >dry.txt 2>&1 || fail "make -n TENSORBOARD=tb failed"
grep -F -- "--metrics $PWD/runs4/phases=p1,sch-beta=0.1/p1.jsonl --tensorboard tb/phases=p1,sch-beta=0.1 -o" dry.txt >/dev/null ||
  fail "--tensorboard does not name the run's directory: $(grep -m1 -o -- '--tensorboard [^ ]*' dry.txt)"

step "bad grids and arguments"
sed 's/^n-head = 2/n-heads = 2/' grid.ini >bad.ini
expect 78 xl-ablate bad.ini --tokens tokens.h5 --out runs3
stderr_is_one_line "bad.ini:" "'n-heads' is not an xl-train-phase1 option; did you mean 'n-head'?"
[ ! -e runs3 ] || fail "a bad grid created its output directory"
printf '[grid]\nbase-config = %s\nbudget = 5\n[axes]\nsch-beta = 0\n' "$XL_SOURCE_DIR/share/xl/configs/tiny.ini" >bad2.ini
expect 78 xl-ablate bad2.ini --tokens tokens.h5 --out runs3
stderr_is_one_line "bad2.ini:3" "budget"
# A bad value in the grid is named where the grid gives it, as a config key, not as a flag.
printf '[grid]\nbase-config = %s\np1-steps = 2\n[axes]\nlr = 0.001, -1\n' "$XL_SOURCE_DIR/share/xl/configs/tiny.ini" >bad3.ini
expect 78 xl-ablate bad3.ini --tokens tokens.h5 --out runs3
stderr_is_one_line "bad3.ini: [axes] (lr=-1): lr must be positive"
! grep -q -- "--lr" "$TMP/err" || fail "a grid's setting named as a flag: $(cat "$TMP/err")"
sed 's/^d-inner = 32/d-inner = 48/' grid.ini >changed.ini
expect 78 xl-ablate changed.ini --tokens tokens.h5 --out runs --emit-makefile
stderr_is_one_line "run.json" "remove"
expect 66 xl-ablate grid.ini --tokens missing.h5 --out runs3
stderr_is_one_line "missing.h5"
expect 64 xl-ablate grid.ini --tokens tokens.h5
stderr_is_one_line "--out"
# The plot is an output: given the grid's or the tokens' name, it would replace them.
cp grid.ini grid-before.ini
expect 64 xl-ablate grid.ini --tokens tokens.h5 --out runs4 --plot grid.ini
stderr_is_one_line "--plot is grid.ini, which is also"
same_bytes grid.ini grid-before.ini "the grid after a refused --plot"
# A plot that cannot be drawn fails before the grid trains, not after.
expect 73 xl-ablate grid.ini --tokens tokens.h5 --out runs5 --plot nowhere/valid.png
stderr_is_one_line "cannot create nowhere/valid.png"
[ ! -e runs5 ] || fail "the grid was set up for a --plot that cannot be written"
expect 66 xl-ablate report nowhere
stderr_is_one_line "nowhere"
# --out a directory of the user's (--out . in a project): its Makefile or grid.json is not
# replaced, and nothing is written there.
mkdir project
printf 'all:\n\techo mine\n' >project/Makefile
cp project/Makefile mine.mk
expect 73 xl-ablate grid.ini --tokens tokens.h5 --out project --emit-makefile
stderr_is_one_line "project/Makefile: a Makefile that xl-ablate did not write"
same_bytes project/Makefile mine.mk "a user's Makefile in --out"
[ "$(ls project)" = Makefile ] || fail "xl-ablate wrote into a refused --out: $(ls project)"
rm project/Makefile
echo '{"notes": 1}' >project/grid.json
expect 73 xl-ablate grid.ini --tokens tokens.h5 --out project
stderr_is_one_line "project/grid.json: a file that xl-ablate did not write"
grep -qx '{"notes": 1}' project/grid.json || fail "a user's grid.json was replaced"

echo "ablate: all checks passed"
