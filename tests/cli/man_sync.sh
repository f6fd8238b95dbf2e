#!/usr/bin/env bash
# The man pages agree with the tools: every tool in XL_BIN has a committed page in man/man1 equal
# to what scripts/gen-man.sh makes from its current --help (so --help and man cannot drift apart),
# every page formats without warnings, and the code examples of the format pages (man 5) run.
# Skipped (77) without help2man.
source "$(dirname "$0")/common.bash"

command -v help2man >/dev/null || {
  echo "skipped: help2man is not installed"
  exit 77
}
MAN=$XL_SOURCE_DIR/man

step "man/man1 pages are up to date with --help"
bash "$XL_SOURCE_DIR/scripts/gen-man.sh" "$XL_BIN" "$TMP/man1" >/dev/null
checked=0
for exe in "$XL_BIN"/xl-*; do
  [ -f "$exe" ] && [ -x "$exe" ] || continue
  t=$(basename "$exe")
  [ -f "$MAN/man1/$t.1" ] || fail "$t has no man page: run scripts/gen-man.sh $XL_BIN and commit man/man1/$t.1"
  diff -u "$MAN/man1/$t.1" "$TMP/man1/$t.1" >"$TMP/man.diff" || {
    head -40 "$TMP/man.diff"
    fail "man/man1/$t.1 is out of date with '$t --help': run scripts/gen-man.sh $XL_BIN and commit it"
  }
  checked=$((checked + 1))
done
[ "$checked" -gt 0 ] || fail "no xl-* tools in $XL_BIN"
echo "$checked pages match"
for f in "$MAN/man5/xl-vocab.5" "$MAN/man5/xl-tokens.5"; do
  [ -f "$f" ] || fail "missing $f"
done

step "every page is stamped with this release (the version in CMakeLists.txt)"
for page in "$MAN"/man1/*.1 "$MAN"/man5/*.5; do
  [ -f "$page" ] || continue
  grep -q "^\.TH .*\"xl-toolkit $XL_VERSION\"" "$page" || fail "$page is not stamped xl-toolkit $XL_VERSION: $(grep '^\.TH' "$page")"
done

if command -v groff >/dev/null; then
  step "every page formats without warnings"
  for page in "$MAN"/man1/*.1 "$MAN"/man5/*.5; do
    [ -f "$page" ] || continue
    groff -man -Tutf8 -ww -z "$page" 2>"$TMP/groff.err" || fail "groff failed on $page"
    [ ! -s "$TMP/groff.err" ] || fail "groff warns about $page: $(head -3 "$TMP/groff.err")"
  done

  # example PAGE FIRST LAST: the code block of PAGE from the line starting with FIRST to the one
  # starting with LAST, as a reader sees it, unindented.
  example() {
    groff -man -Tascii -P -cbou "$1" 2>/dev/null | awk -v first="$2" -v last="$3" '
      !on && index($0, first) { on = 1; match($0, /^ */); indent = RLENGTH }
      on { print substr($0, indent + 1) }
      on && index($0, last) { exit }'
  }

  step "xl-vocab(5): the documented SHA-256 is the tools' vocab identity"
  make_mixed_text text.txt 30000
  example "$MAN/man5/xl-vocab.5" "import hashlib" "return h.hexdigest()" >vocab_sha.py
  grep -q "def vocab_sha256" vocab_sha.py || fail "no vocab_sha256 example in xl-vocab(5)"
  for m in byte char word; do
    expect 0 xl-build-vocab --mode "$m" text.txt -o "$m.tsv"
    logged=$(sed -n 's/.*sha256 \([0-9a-f]*\).*/\1/p' err)
    documented=$(python3 -c "exec(open('vocab_sha.py').read()); print(vocab_sha256('$m.tsv'))")
    [ "$documented" = "$logged" ] || fail "--mode $m: xl-vocab(5)'s example gives $documented, the tool $logged"
  done

  step "xl-tokens(5): the h5py example reads a tokens file"
  py=""
  for p in python3 /usr/bin/python3; do
    if "$p" -c "import h5py, numpy" 2>/dev/null; then
      py=$p
      break
    fi
  done
  if [ -n "$py" ]; then
    example "$MAN/man5/xl-tokens.5" "import h5py" "text = " >read_tokens.py
    grep -q "h5py.File" read_tokens.py || fail "no h5py example in xl-tokens(5)"
    expect 0 xl-tokenize --mode byte --split 0.5,0.5 text.txt -o enwik8.h5
    expect 0 xl-tokenize --decode valid enwik8.h5 -o valid.txt
    head -c 1000 valid.txt >valid-1000.txt
    {
      cat read_tokens.py
      echo 'assert text == open("valid-1000.txt", "rb").read(), "decoded text differs"'
      echo 'assert len(pieces) == 256 and sorted(splits) == ["train", "valid"]'
    } >check_tokens.py
    "$py" check_tokens.py >py.out || fail "the h5py example of xl-tokens(5) fails (see above)"
    grep -q "^valid [0-9]* tokens, 0 <unk>" py.out || fail "h5py example printed: $(cat py.out)"
  else
    echo "skipped: no python3 with h5py"
  fi
else
  echo "skipped: no groff to format the pages"
fi

echo "man_sync: all checks passed"
