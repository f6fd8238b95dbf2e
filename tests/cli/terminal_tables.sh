#!/usr/bin/env bash
# Results read by a person or a script: without --format, xl-eval-longctx and xl-prune-heads print
# Markdown tables when stdout is a terminal (run here through a pseudo-terminal) and JSON Lines,
# exactly as --format jsonl, when it is a pipe or a file; xl-ablate report prints its tables either
# way, as it always has (scripts ask it for --format jsonl).
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# tty CMD...: runs CMD with a pseudo-terminal as its stdin and stdout; its output in tty.out.
tty() {
  local status=0
  python3 -c 'import os, pty, sys; sys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))' "$@" </dev/null >tty.raw || status=$?
  tr -d '\r' <tty.raw >tty.out
  return $status
}

step "a tokens file and a tiny checkpoint"
make_mixed_text text.txt 40000
expect 0 xl-tokenize --mode char --split 0.8,0.1,0.1 text.txt -o tokens.h5
expect 0 xl-train-phase1 --n-layer 2 --d-model 32 --n-head 2 --d-head 16 --d-inner 64 --tgt-len 16 --mem-len 16 \
  --batch-size 4 --max-steps 2 --eval-interval 0 --eval-max-tokens 200 --threads 1 --progress never tokens.h5 -o ckpt.h5
EVAL="xl-eval-longctx --threads 1 --tgt-len 16 --mem-len 0,16 --batch-size 3 --max-tokens 400 -q ckpt.h5 tokens.h5"
PRUNE="xl-prune-heads --threads 1 --tgt-len 16 --mem-len 16 --batch-size 2 --max-tokens 200 -q ckpt.h5 tokens.h5"

step "xl-eval-longctx: a table on a terminal, JSON Lines in a pipe and a file"
tty $EVAL || fail "xl-eval-longctx under a pseudo-terminal failed: $(cat tty.out)"
head -1 tty.out | grep -q '^| ' || fail "no Markdown table on a terminal: $(head -3 tty.out)"
grep -q '^| -*:' tty.out || fail "the table has no header rule: $(cat tty.out)"
# same_rows A B: the same JSON Lines rows but for the timings and the memory a run took.
same_rows() {
  python3 - "$1" "$2" <<'PY' || fail "$1 and $2 differ"
import json, sys
def rows(p):
    out = []
    for line in open(p):
        r = json.loads(line)
        for k in ("tokens_per_s", "seconds", "peak_rss_mb"):
            r.pop(k, None)
        out.append(r)
    return out
sys.exit(0 if rows(sys.argv[1]) == rows(sys.argv[2]) and rows(sys.argv[1]) else 1)
PY
}
$EVAL | tee piped.out >/dev/null
$EVAL --format jsonl >asked.out
same_rows piped.out asked.out
$EVAL -o file.out
same_rows file.out asked.out
tty $EVAL --format jsonl || fail "--format jsonl under a pseudo-terminal failed"
head -1 tty.out | grep -q '^{' || fail "--format jsonl gave no JSON Lines on a terminal: $(head -2 tty.out)"

step "xl-prune-heads: the same"
tty $PRUNE || fail "xl-prune-heads under a pseudo-terminal failed: $(cat tty.out)"
grep -q '^| ' tty.out || fail "no Markdown table on a terminal: $(head -3 tty.out)"
$PRUNE >piped.out
head -1 piped.out | python3 -c 'import json,sys; json.loads(sys.stdin.readline())' || fail "piped rows are not JSON Lines: $(head -2 piped.out)"

step "a bad --format is one line naming the flag"
expect 64 $EVAL --format xml
stderr_is_one_line "--format must be jsonl, md or tsv"
echo "PASS"
