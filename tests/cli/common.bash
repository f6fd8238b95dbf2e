# Shared helpers of the CLI tests (sourced, not a test itself: ctest registers only *.sh).
# Environment (set by tests/CMakeLists.txt): XL_BIN (built tools), XL_SOURCE_DIR, XL_SHARED_DATA.
set -euo pipefail
# A command that fails outside a check still says where the test stopped.
trap 'echo "FAIL: ${BASH_SOURCE[0]##*/}:$LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR

: "${XL_BIN:?XL_BIN must name the directory of the built xl tools}"
: "${XL_SOURCE_DIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${XL_SHARED_DATA:=$XL_SOURCE_DIR/../shared/data}"
XL_BIN=$(cd "$XL_BIN" && pwd)
export PATH="$XL_BIN:$PATH"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/xl-cli-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"

# The version the build was configured with (project(xl VERSION x.y.z) in CMakeLists.txt).
XL_VERSION=$(sed -n 's/^project(xl VERSION \([0-9][0-9.]*\).*/\1/p' "$XL_SOURCE_DIR/CMakeLists.txt")

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "--- $*"; }

# Waits (up to 20 s) until FILE has N lines containing PATTERN: a training run's metrics reaching
# a step before the test interrupts it.
wait_for_lines() {
  local file=$1 pattern=$2 want=$3 n
  for _ in $(seq 1 200); do
    n=$(grep -c "$pattern" "$file" 2>/dev/null) || n=0
    [ "$n" -ge "$want" ] && return 0
    sleep 0.1
  done
}

# signal_when FILE PATTERN N SIG PID: once FILE has N lines containing PATTERN, sends SIG to the
# background job PID and waits for it; its exit status in $STATUS.
signal_when() {
  wait_for_lines "$1" "$2" "$3"
  kill -"$4" "$5"
  STATUS=0
  wait "$5" || STATUS=$?
}

# same_checkpoint A B WHAT: the same parameters, optimizer state, memories and generators.
same_checkpoint() {
  for g in /model /optimizer /memory /rng; do
    h5diff -q "$1" "$2" "$g" "$g" >/dev/null || fail "$3: $g differs between $1 and $2"
  done
}

# stopped_step_saved CHECKPOINT METRICS: the checkpoint is of the step the run's done event gives.
stopped_step_saved() {
  [ "$(xl-inspect --json "$1" | json /dev/stdin 'j["attributes"]["step"]')" = \
    "$(grep '"event":"done"' "$2" | json /dev/stdin 'j["step"]')" ]
}

# run CMD...: runs CMD with stdout in $TMP/out and stderr in $TMP/err; its status in $STATUS.
run() {
  STATUS=0
  "$@" >"$TMP/out" 2>"$TMP/err" || STATUS=$?
}

# expect CODE CMD...: runs CMD and fails the test unless it exits with CODE.
expect() {
  local want=$1
  shift
  run "$@"
  if [ "$STATUS" -ne "$want" ]; then
    echo "stderr of the command:" >&2
    sed 's/^/  | /' "$TMP/err" >&2
    fail "expected exit $want, got $STATUS: $*"
  fi
}

# stderr_is_one_line [TEXT...]: the last command wrote exactly one line on stderr, containing every TEXT.
stderr_is_one_line() {
  local lines
  lines=$(wc -l <"$TMP/err")
  [ "$lines" -eq 1 ] || {
    sed 's/^/  | /' "$TMP/err" >&2
    fail "expected exactly one line on stderr, got $lines"
  }
  local t
  for t in "$@"; do
    grep -qF -- "$t" "$TMP/err" || fail "stderr does not mention '$t': $(cat "$TMP/err")"
  done
}

# json FILE EXPR: evaluates a Python expression over the JSON object `j` read from FILE.
json() {
  python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
v = eval(sys.argv[2])
print(v if not isinstance(v, (list, dict)) else json.dumps(v))' "$1" "$2"
}

# same_bytes A B WHAT: fails unless files A and B are byte-identical.
same_bytes() {
  cmp -s -- "$1" "$2" || fail "$3: $1 and $2 differ ($(cmp -- "$1" "$2" 2>&1 | head -1))"
}

# no_temp_files DIR: no PATH.tmp.PID file of an interrupted or failed output is left in DIR.
no_temp_files() {
  local left
  left=$(find "$1" -maxdepth 1 -name '*.tmp.*')
  [ -z "$left" ] || fail "temporary files left behind: $left"
}

# shared_data PATH: prints the path of a file under XL_SHARED_DATA, or nothing when it is absent.
shared_data() {
  local p="$XL_SHARED_DATA/$1"
  [ -f "$p" ] && echo "$p" || true
}

# make_mixed_text FILE BYTES: a deterministic text with every awkward byte a tokenizer meets:
# NUL, CR LF and lone CR, tabs, runs of spaces, Unicode's spaces, empty lines, multi-byte UTF-8
# and a last line without its newline. Every character occurs in the first 90%, so char mode
# round-trips too.
make_mixed_text() {
  python3 - "$1" "$2" <<'EOF'
import random, sys
path, size = sys.argv[1], int(sys.argv[2])
rng = random.Random(20240601)
words = ["the", "cat", "sat", "on", "a", "mat", "na\u00efve", "caf\u00e9", "\u20ac10", "\U0001F600",
         "x\x00y", "tab\tbed", "<unk>", "\u00c5ngstr\u00f6m", "end."]
seps = [" ", " ", " ", "  ", "\t", " \t ", "\u00a0", " \u3000", "\x1f", "\x85"]
ends = ["\n", "\n", "\n", "\r\n", "\r\n", "\n\n", "\r"]
out = bytearray()
while len(out) < size:
    line = "".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(0, 12)))
    out += (line.rstrip(" \t") + rng.choice(ends)).encode("utf-8")
out = out[:size]
# A cut can split a multi-byte character: end on ASCII instead.
while out and out[-1] >= 0x80:
    out.pop()
out += b"the cat sat on a mat"
open(path, "wb").write(bytes(out))
EOF
}

# training_corpus: the path of 150 KB of text to train on: the enwik8 head from ../shared/data
# when it is there, else a generated mixed text.
# small_model_ini FILE [SETTING...]: a model small enough for steps of a few milliseconds (3
# layers of 32, segments and memories of 16, 4 streams), then the test's own settings, a line each.
small_model_ini() {
  local file=$1
  shift
  printf '%s\n' "n-layer = 3" "d-model = 32" "n-head = 2" "d-head = 16" "d-inner = 64" "tgt-len = 16" \
    "mem-len = 16" "batch-size = 4" "lr = 0.002" "$@" >"$file"
}

training_corpus() {
  local p
  p=$(shared_data enwik8/enwik8.head-150000)
  if [ -z "$p" ]; then
    p=$TMP/corpus.txt
    [ -f "$p" ] || make_mixed_text "$p" 150000
  fi
  echo "$p"
}
