#!/usr/bin/env bash
# xl-eval-longctx and xl-generate as a user runs them: memory sweeps in every output format,
# per-token HDF5, vocab and split refusals (65, one line), reproducible sampling.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

[ -x "$XL_BIN/xl-train-phase1" ] || { echo "skip: xl-train-phase1 is not built"; exit 77; }
[ -x "$XL_BIN/xl-eval-longctx" ] || fail "xl-eval-longctx is not built"
[ -x "$XL_BIN/xl-generate" ] || fail "xl-generate is not built"

step "a tokens file and a tiny checkpoint"
src=$(shared_data tinyshakespeare/input.txt)
if [ -n "$src" ]; then
  head -c 60000 "$src" >text.txt
else
  make_mixed_text text.txt 60000
fi
expect 0 xl-tokenize --mode char --split 0.8,0.1,0.1 text.txt -o tokens.h5
expect 0 xl-train-phase1 --n-layer 2 --d-model 32 --n-head 2 --d-head 16 --d-inner 64 \
  --tgt-len 16 --mem-len 16 --batch-size 4 --max-steps 2 --eval-interval 0 --eval-max-tokens 200 \
  --threads 1 --progress never tokens.h5 -o ckpt.h5
[ -s ckpt.h5 ] || fail "no checkpoint written"

step "a memory sweep prints one JSONL row per value"
expect 0 xl-eval-longctx --threads 1 --tgt-len 16 --mem-len 0,16,32 --batch-size 3 --max-tokens 600 ckpt.h5 tokens.h5
[ "$(wc -l <out)" -eq 3 ] || fail "expected 3 rows, got: $(cat out)"
python3 - out <<'EOF' || fail "bad JSONL rows: $(cat out)"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["mem_len"] for r in rows] == [0, 16, 32], rows
for r in rows:
    for key in ("split", "tgt_len", "clamp_len", "same_length", "tokens", "loss", "bpc", "tokens_per_s", "seconds", "peak_rss_mb"):
        assert key in r, key
    assert "ppl" not in r, "a char vocab reports bpc"
    assert r["split"] == "test" and r["tgt_len"] == 16 and r["tokens"] >= 600
    assert abs(r["bpc"] - r["loss"] / 0.6931471805599453) < 1e-9
    assert 0 < r["loss"] < 20 and r["tokens_per_s"] > 0 and r["peak_rss_mb"] > 0
    # Within the default budget a memory keeps its key/value projections; no memory, nothing to keep.
    assert r["kv_cache"] is (r["mem_len"] > 0), r
EOF
expect 0 xl-eval-longctx --threads 1 --tgt-len 16 --mem-len 32 --batch-size 3 --max-tokens 600 --kv-cache-budget 0 ckpt.h5 tokens.h5
[ "$(json out 'j["kv_cache"]')" = False ] || fail "--kv-cache-budget 0 kept key/value projections: $(cat out)"

step "the whole split: N - B tokens scored"
expect 0 xl-inspect --json tokens.h5
n=$(json out '[s["tokens"] for s in j["splits"] if s["name"] == "valid"][0]')
expect 0 xl-eval-longctx --threads 1 --split valid --tgt-len 32 --mem-len 32 --batch-size 5 ckpt.h5 tokens.h5
[ "$(json out 'j["tokens"]')" -eq $((n - 5)) ] || fail "expected $((n - 5)) tokens: $(cat out)"
expect 0 xl-eval-longctx --threads 1 --split valid --tgt-len 32 --mem-len 32 --batch-size 1 ckpt.h5 tokens.h5
[ "$(json out 'j["tokens"]')" -eq $((n - 1)) ] || fail "expected $((n - 1)) tokens: $(cat out)"

step "--format md and tsv"
expect 0 xl-eval-longctx --threads 1 --tgt-len 16 --mem-len 8,16 --max-tokens 200 --format md ckpt.h5 tokens.h5
[ "$(wc -l <out)" -eq 4 ] || fail "table: expected a header, a rule and 2 rows: $(cat out)"
sed -n 2p out | grep -q '^| *-*: |' || fail "no Markdown rule under the header: $(sed -n 2p out)"
head -1 out | grep -q 'mem_len' || fail "table header lacks mem_len: $(head -1 out)"
head -1 out | grep -q 'bpc' || fail "table header lacks bpc: $(head -1 out)"
expect 0 xl-eval-longctx --threads 1 --tgt-len 16 --mem-len 8 --max-tokens 200 --format tsv ckpt.h5 tokens.h5
[ "$(head -1 out | awk -F'\t' '{print NF}')" -eq "$(tail -1 out | awk -F'\t' '{print NF}')" ] || fail "tsv columns differ"
expect 64 xl-eval-longctx --format xml ckpt.h5 tokens.h5
stderr_is_one_line "xml"

step "tokens through a pipe, rows to a file, --warmup scores fewer tokens"
expect 0 bash -c "xl-eval-longctx --threads 1 --tgt-len 16 --mem-len 32 --max-tokens 300 ckpt.h5 - <tokens.h5 -o rows.jsonl"
all=$(json rows.jsonl 'j["tokens"]')
expect 0 xl-eval-longctx --threads 1 --split valid --tgt-len 16 --mem-len 32 ckpt.h5 tokens.h5
cold=$(json out 'j["tokens"]')
expect 0 xl-eval-longctx --threads 1 --split valid --tgt-len 16 --mem-len 32 --warmup ckpt.h5 tokens.h5
warm=$(json out 'j["tokens"]')
[ "$warm" -lt "$cold" ] || fail "--warmup scored $warm tokens, without it $cold"
[ "$(json out 'j["warmup"]')" = "True" ] || fail "row does not say warmup: $(cat out)"
[ "$all" -ge 300 ] || fail "rows.jsonl: $all tokens"
! grep -q "nothing was scored" err || fail "a --warmup that scored tokens warned: $(cat err)"
# A memory the streams cannot fill: an empty row, and a warning that says why.
expect 0 xl-eval-longctx --threads 1 --split valid --tgt-len 16 --mem-len 1000000 --warmup ckpt.h5 tokens.h5
[ "$(json out 'j["tokens"]')" = 0 ] || fail "a memory longer than the streams filled: $(cat out)"
# ... known before a segment runs: nothing is computed for it.
[ "$(json out 'j["seconds"]')" = 0.0 ] || fail "the segments of a memory that cannot fill were run: $(cat out)"
grep -q -- "--warmup --mem-len 1000000: no segment had a full memory" err || fail "no warning for an empty --warmup row: $(cat err)"

step "--per-token writes one group per setting"
expect 0 xl-eval-longctx --threads 1 --split valid --tgt-len 16 --mem-len 0,16 --per-token nll.h5 ckpt.h5 tokens.h5
cp out rows
[ -s nll.h5 ] || fail "no per-token file"
expect 0 xl-inspect --json nll.h5
python3 - out <<'EOF2' || fail "bad per-token datasets: $(cat out)"
import json, sys
j = json.load(open(sys.argv[1]))
ds = {d["path"]: d for d in j["datasets"]}
for m in (0, 16):
    nll, idx = ds["/mem_len_%d/nll" % m], ds["/mem_len_%d/index" % m]
    assert nll["dtype"] == "float32" and idx["dtype"] == "int64", (nll, idx)
    assert nll["shape"] == idx["shape"], (nll, idx)
EOF2
if command -v h5dump >/dev/null; then
  # The losses in the file average to the row's loss, and the indices ascend.
  for m in 0 16; do
    h5dump -y -w 0 -d /mem_len_$m/nll nll.h5 >nll.txt
    h5dump -y -w 0 -d /mem_len_$m/index nll.h5 >index.txt
    python3 - nll.txt index.txt rows $m <<'EOF2' || fail "per-token values of mem_len $m"
import json, re, sys
def values(path):
    text = open(path).read()
    body = text[text.index("DATA {") + 6:text.rindex("}")]
    body = body[:body.rindex("}")]
    return [float(x) for x in re.findall(r"-?[0-9][0-9.e+-]*", body)]
nll, idx = values(sys.argv[1]), values(sys.argv[2])
row = [r for r in map(json.loads, open(sys.argv[3])) if r["mem_len"] == int(sys.argv[4])][0]
assert len(nll) == len(idx) == row["tokens"], (len(nll), len(idx), row["tokens"])
assert all(idx[i] < idx[i + 1] for i in range(len(idx) - 1))
assert abs(sum(nll) / len(nll) - row["loss"]) < 1e-4, (sum(nll) / len(nll), row["loss"])
EOF2
  done
fi

step "a stopped sweep keeps the settings it finished (a signal lost them all)"
sweep=$(seq -s, 0 40)  # 41 settings of about a second each, one segment a token
xl-eval-longctx --threads 1 --split valid --tgt-len 1 --batch-size 1 --mem-len "$sweep" --per-token stopped.h5 \
  ckpt.h5 tokens.h5 >stopped.jsonl 2>stopped.err &
signal_when stopped.jsonl '"event":"eval"' 1 TERM $!
[ "$STATUS" -eq 143 ] || fail "a stopped sweep exited $STATUS, not 143: $(cat stopped.err)"
kept=$(grep -c '"event":"eval"' stopped.jsonl)
[ "$kept" -ge 1 ] && [ "$kept" -lt 41 ] || fail "$kept rows from a sweep stopped early"
grep -q "stopping after this segment" stopped.err || fail "no word of the stop as it came: $(cat stopped.err)"
grep -q "stopped by signal 15 during --mem-len $kept: kept the $kept of 41 settings finished before it" stopped.err ||
  fail "no word of what was kept: $(cat stopped.err)"
/usr/bin/python3 - stopped.h5 "$kept" <<'PY' || fail "the per-token file does not hold the finished settings"
import h5py, sys
groups = sorted(h5py.File(sys.argv[1], "r"), key=lambda g: int(g.split("_")[-1]))
assert groups == ["mem_len_%d" % m for m in range(int(sys.argv[2]))], groups
PY
no_temp_files .

step "a sweep killed by SIGKILL goes on from its --cache, to the rows of one run without a stop"
K="--threads 1 --split valid --tgt-len 1 --batch-size 1 --mem-len 0,1,2,3"
expect 0 xl-eval-longctx $K ckpt.h5 tokens.h5
mv out whole.jsonl
xl-eval-longctx $K --cache sweep.cache ckpt.h5 tokens.h5 >/dev/null 2>&1 &
signal_when sweep.cache key 1 KILL $!
finished=$(wc -l <sweep.cache)
expect 0 xl-eval-longctx $K --cache sweep.cache ckpt.h5 tokens.h5
grep -q "$finished of 4 settings kept in sweep.cache" err || fail "the kept settings were not taken: $(cat err)"
[ "$(wc -l <sweep.cache)" -eq 4 ] || fail "sweep.cache should hold the 4 settings: $(cat sweep.cache)"
/usr/bin/python3 - whole.jsonl out "$finished" <<'PY' || fail "the resumed sweep's rows differ from the uninterrupted one's"
import json, sys
timing = {"seconds", "tokens_per_s", "peak_rss_mb", "kept"}
rows = [[{k: v for k, v in json.loads(l).items() if k not in timing} for l in open(f)] for f in sys.argv[1:3]]
assert rows[0] == rows[1] and len(rows[0]) == 4, rows
kept = [json.loads(l).get("kept", False) for l in open(sys.argv[2])]
assert kept.count(True) == int(sys.argv[3]) and kept[:kept.count(True)] == [True] * kept.count(True), kept
PY
# In a table too, the kept settings say so.
expect 0 xl-eval-longctx $K --cache sweep.cache --format tsv ckpt.h5 tokens.h5
[ "$(head -1 out | awk -F'\t' '{print $NF}')" = kept ] && [ "$(tail -n +2 out | awk -F'\t' '$NF == 1' | wc -l)" -eq 4 ] ||
  fail "the table does not mark the 4 kept settings: $(cat out)"
# --cache naming a checkpoint by mistake: refused, the checkpoint as it was (its bytes after the
# last newline were cut off as a killed run's unfinished line).
cp ckpt.h5 victim.h5
expect 65 xl-eval-longctx $K --cache victim.h5 ckpt.h5 tokens.h5
stderr_is_one_line "victim.h5:1: not an evaluation kept by --cache"
same_bytes victim.h5 ckpt.h5 "a checkpoint given as --cache"
# Kept lines then a tail that no run of xl wrote: refused, nothing cut.
head -n 1 sweep.cache >tail.cache
printf 'not json' >>tail.cache
cp tail.cache tail.before
expect 65 xl-eval-longctx $K --cache tail.cache ckpt.h5 tokens.h5
stderr_is_one_line "tail.cache:2: not an evaluation kept by --cache"
same_bytes tail.cache tail.before "a cache whose last line no run wrote"
# Kept lines then NUL bytes (a machine that stopped while the file grew): cut off as an unfinished
# line, the kept settings taken.
head -n 2 sweep.cache >zeros.cache
head -c 300 /dev/zero >>zeros.cache
expect 0 xl-eval-longctx $K --cache zeros.cache ckpt.h5 tokens.h5
grep -q "2 of 4 settings kept in zeros.cache" err || fail "the kept settings before the NUL bytes were not taken: $(cat err)"
[ "$(wc -l <zeros.cache)" -eq 4 ] && [ "$(tr -d '\000' <zeros.cache | wc -c)" -eq "$(wc -c <zeros.cache)" ] ||
  fail "zeros.cache should hold the 4 settings and no NUL byte: $(od -c zeros.cache | tail -n 3)"
# Another process writing to the same file (an array job's task) is waited for, not cut short:
# a writer that holds the file's lock with half of a line written finishes it once this one waits
# for the lock (/proc/locks shows the waiter; without the lock the half line was cut off as a
# killed run's), and the line it wrote is taken.
expect 0 xl-eval-longctx ${K%,1,2,3} --cache one.cache ckpt.h5 tokens.h5
rm -f shared.cache ready
/usr/bin/python3 - shared.cache one.cache <<'PY' &
import fcntl, os, sys, time
line = open(sys.argv[2]).read()
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
f.write(line[:len(line) // 2]); f.flush()
inode = ":%d " % os.fstat(f.fileno()).st_ino
open("ready", "w").close()
deadline = time.time() + 60
while not any("->" in l and inode in l for l in open("/proc/locks")):
    if time.time() > deadline: sys.exit("no one waited for the lock of " + sys.argv[1])
    time.sleep(0.02)
f.write(line[len(line) // 2:]); f.flush()
PY
writer=$!
while [ ! -e ready ]; do sleep 0.05; done
expect 0 xl-eval-longctx $K --cache shared.cache ckpt.h5 tokens.h5
wait $writer || fail "xl-eval-longctx did not wait for the other writer's lock"
grep -q "1 of 4 settings kept in shared.cache" err || fail "the other writer's line was not taken: $(cat err)"
grep -q "shared.cache: waiting for another process that writes it" err || fail "the wait was not said: $(cat err)"
/usr/bin/python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' shared.cache || fail "shared.cache: $(cat shared.cache)"
[ "$(wc -l <shared.cache)" -eq 4 ] || fail "shared.cache should hold 4 settings: $(cat shared.cache)"
# A kept row is the row its run wrote, speed included: with --warmup over the scored segments only.
W="--threads 1 --split valid --tgt-len 16 --mem-len 32,48 --warmup"
expect 0 xl-eval-longctx $W --cache warm.cache ckpt.h5 tokens.h5
mv out warm.jsonl
expect 0 xl-eval-longctx $W --cache warm.cache ckpt.h5 tokens.h5
/usr/bin/python3 - warm.jsonl out <<'PY' || fail "kept --warmup rows differ from the rows that kept them: $(cat warm.jsonl out)"
import json, sys
rows = [[json.loads(l) for l in open(f)] for f in sys.argv[1:3]]
assert len(rows[0]) == 2 and all(r.pop("kept") for r in rows[1]), rows
for a, b in zip(*rows):
    del a["peak_rss_mb"], b["peak_rss_mb"]
    assert a == b, (a, b)
    assert a["tokens_per_s"] >= a["tokens"] / a["seconds"], a  # the memory-filling segments left out
PY
# Other settings evaluate anew; per-token losses are not kept.
expect 0 xl-eval-longctx --threads 1 --tgt-len 16 --mem-len 16 --max-tokens 200 --cache sweep.cache ckpt.h5 tokens.h5
grep -q "kept in" err && fail "other settings took kept evaluations: $(cat err)"
expect 64 xl-eval-longctx $K --cache sweep.cache --per-token p.h5 ckpt.h5 tokens.h5
stderr_is_one_line "--cache keeps each setting's loss, not its per-token losses"
# A cache that cannot grow (a full disk: files limited to 2 KB, SIGXFSZ ignored so that write()
# fails): one warning, and every row all the same.
/usr/bin/python3 -c 'import json; print(json.dumps({"key": "x" * 1950, "loss_sum": 0, "tokens": 1, "seconds": 0}))' >full.cache
STATUS=0
(trap '' XFSZ; ulimit -f 2; exec xl-eval-longctx $K --cache full.cache ckpt.h5 tokens.h5) >out 2>err || STATUS=$?
[ "$STATUS" -eq 0 ] || fail "a cache that cannot be written failed the sweep ($STATUS): $(cat err)"
stderr_is_one_line "full.cache: cannot keep evaluations (File too large; disk full?)"
[ "$(wc -l <out)" -eq 4 ] || fail "expected the 4 rows: $(cat out)"

step "refusals: another vocab, a missing split, bad values"
expect 0 xl-tokenize --mode byte --split 0.8,0.1,0.1 text.txt -o bytes.h5
expect 65 xl-eval-longctx ckpt.h5 bytes.h5
stderr_is_one_line "ckpt.h5: vocab mismatch" "but bytes.h5 holds vocab" "xl-tokenize --vocab ckpt.h5"
# What the line advises works.
expect 0 xl-tokenize --vocab ckpt.h5 --test text.txt -o retokenized.h5
expect 0 xl-eval-longctx --threads 1 --tgt-len 16 --mem-len 16 --max-tokens 200 ckpt.h5 retokenized.h5
# An empty split is refused before any work, by evaluation and by training's validation.
expect 0 xl-tokenize -q --vocab ckpt.h5 --split 0.9,0.1,0 text.txt -o notest.h5
expect 65 xl-eval-longctx ckpt.h5 notest.h5
stderr_is_one_line "notest.h5: split 'test' holds 0 tokens, fewer than the 2 it needs here; --split picks another"
expect 65 xl-train-phase1 --n-layer 1 --max-steps 1 --valid-split test notest.h5 -o empty-valid.h5
stderr_is_one_line "notest.h5: split 'test' holds 0 tokens" "--valid-split picks another"
[ ! -e empty-valid.h5 ] || fail "training with an empty validation split wrote a checkpoint"
expect 65 xl-eval-longctx --split dev ckpt.h5 tokens.h5
stderr_is_one_line "no split 'dev' (it has: train, valid, test); --split picks another"
expect 64 xl-eval-longctx --tgt-len 0 ckpt.h5 tokens.h5
stderr_is_one_line
expect 64 xl-eval-longctx --mem-len 16,16 ckpt.h5 tokens.h5
stderr_is_one_line
expect 64 xl-eval-longctx
stderr_is_one_line "CHECKPOINT"
expect 64 xl-eval-longctx ckpt.h5 tokens.h5 extra.h5
stderr_is_one_line "'extra.h5'" "2 arguments, CHECKPOINT and TOKENS"
expect 65 xl-eval-longctx ckpt.h5 </dev/null
stderr_is_one_line "stdin"
expect 66 xl-eval-longctx ckpt.h5 missing.h5
stderr_is_one_line
expect 65 xl-eval-longctx tokens.h5 ckpt.h5
stderr_is_one_line "ckpt.h5: is an 'xl-checkpoint' file, not an xl tokens file" "the checkpoint comes first"
expect 65 xl-generate tokens.h5
stderr_is_one_line "tokens.h5: is an 'xl-tokens' file, not an xl checkpoint" "the checkpoint comes first"

step "xl-generate: reproducible with a seed, top-k 1 is greedy"
gen() { xl-generate --threads 1 --prompt 'the ' --length 40 --mem-len 32 "$@" ckpt.h5; }
expect 0 gen --seed 5
cp out g1
expect 0 gen --seed 5
same_bytes out g1 "same seed"
[ "$(wc -c <g1)" -gt 10 ] || fail "too little text: $(cat g1)"
expect 0 gen --seed 6
cmp -s out g1 && fail "seeds 5 and 6 gave the same text"
expect 0 gen --seed 5 --top-k 1
cp out k1
expect 0 gen --seed 99 --top-k 1
same_bytes out k1 "greedy with different seeds"
expect 0 gen --seed 5 --temperature 0
same_bytes out k1 "temperature 0 and top-k 1"
expect 0 gen --seed 5 --echo
[ "$(head -c 4 out)" = "the " ] || fail "--echo does not start with the prompt: $(head -c 40 out | od -c | head -3)"
printf 'the ' >prompt.txt
expect 0 xl-generate --threads 1 --prompt-file prompt.txt --length 40 --mem-len 32 --seed 5 ckpt.h5
same_bytes out g1 "--prompt-file and --prompt"
expect 0 xl-generate --threads 1 --length 10 ckpt.h5
# bf16 products (CPU autocast) with the memory's projections kept (an fp32 buffer met bf16 scores).
expect 0 gen --precision bf16
expect 0 xl-eval-longctx --threads 1 --precision bf16 --max-tokens 500 ckpt.h5 tokens.h5
expect 64 gen --top-p 0
stderr_is_one_line
expect 64 xl-generate --prompt a --prompt-file prompt.txt ckpt.h5
stderr_is_one_line
expect 64 xl-generate --pretokenize moses --prompt a ckpt.h5
stderr_is_one_line "--pretokenize moses" "word vocab"

step "xl-generate: a raw prompt in a Moses-tokenized word model's words, text out"
printf 'Hello, world. "Mr. Smith'"'"'s cats"\nare 1,000!\n' >words.txt
for _ in 1 2 3 4 5 6 7 8; do cat words.txt; done >words8.txt
expect 0 xl-tokenize --mode word --pretokenize moses --split 0.8,0.1,0.1 words8.txt -o words.h5
expect 0 xl-train-phase1 --n-layer 1 --d-model 16 --n-head 2 --d-head 8 --d-inner 32 \
  --tgt-len 8 --mem-len 8 --batch-size 2 --max-steps 1 --eval-interval 0 --eval-max-tokens 20 \
  --threads 1 --progress never words.h5 -o words-ckpt.h5
# The tokens file, and the checkpoint trained on it, record --pretokenize moses: no flag needed.
expect 0 xl-generate --threads 1 --prompt "Smith's cats, world." --echo --length 6 words-ckpt.h5
# The words Smith 's cats , world . detokenized, the line continued by what follows.
case "$(head -1 out)" in "Smith's cats, world. "*) ;; *) fail "the prompt was not Moses-tokenized and detokenized: $(head -1 out)" ;; esac
grep -q -- "--pretokenize moses, as the vocab records" err || fail "xl-generate does not say it Moses-tokenizes as the vocab records"
! grep -q "not in the checkpoint's vocab" err || fail "a prompt of known words was warned of: $(cat err)"
expect 0 xl-generate --threads 1 --pretokenize none --prompt "Smith's cats, world." --echo --length 2 words-ckpt.h5
case "$(head -1 out)" in "<unk> <unk> <unk> "*) ;; *) fail "with --pretokenize none the glued words are not <unk>: $(head -1 out)" ;; esac
grep -q -- "--prompt: 3 of its 4 pieces are not in the checkpoint's vocab" err || fail "unknown prompt words were not warned of: $(cat err)"

step "xl-generate --no-unk: a word model never writes <unk>"
# Trained one step, the model draws nearly uniformly from its 15 pieces: seed 3 draws <unk>s.
expect 0 xl-generate --threads 1 --length 300 --seed 3 words-ckpt.h5
grep -q '<unk>' out || fail "no <unk> in 300 words without --no-unk (the check below would show nothing): $(head -c 300 out)"
expect 0 xl-generate --threads 1 --length 300 --seed 3 --no-unk words-ckpt.h5
[ "$(wc -c <out)" -gt 300 ] || fail "--no-unk: too little text: $(head -c 300 out)"
grep -q '<unk>' out && fail "--no-unk wrote <unk>: $(head -c 300 out)"
# A byte vocab has no <unk>: one line says so.
expect 0 xl-train-phase1 --n-layer 1 --d-model 16 --n-head 2 --d-head 8 --d-inner 32 \
  --tgt-len 8 --mem-len 8 --batch-size 2 --max-steps 1 --eval-interval 0 --eval-max-tokens 20 \
  --threads 1 --progress never bytes.h5 -o bytes-ckpt.h5
expect 0 xl-generate --threads 1 --prompt 'the ' --length 5 --no-unk bytes-ckpt.h5
stderr_is_one_line "--no-unk: bytes-ckpt.h5's vocab has no <unk>: nothing to leave out"
# An empty value is a value (not the vocab's record): refused.
expect 64 xl-generate --threads 1 --pretokenize "" --prompt "Smith" words-ckpt.h5
stderr_is_one_line "--pretokenize: unknown ''"

echo "eval_tools: ok"
