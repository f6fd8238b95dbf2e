#!/usr/bin/env bash
# The data tools as a user runs them: --help/--version, determinism, the pipe path, byte-exact
# round trips, compressed inputs, char and word modes, separate split inputs, config files, and
# <unk> accounting. Needs no shared data (data_shared.sh covers enwik8 and tinyshakespeare).
source "$(dirname "$0")/common.bash"

TOOLS=(xl-build-vocab xl-tokenize xl-inspect)

step "--help and --version on stdout, exit 0"
for t in "${TOOLS[@]}"; do
  expect 0 "$t" --help
  head -1 out | grep -q "^Usage: $t " || fail "$t --help: first line is not 'Usage: $t ...': $(head -1 out)"
  grep -q -- "--version" out || fail "$t --help does not list --version"
  [ ! -s err ] || fail "$t --help wrote on stderr: $(cat err)"
  cp out help.txt
  expect 0 "$t" -h
  same_bytes out help.txt "$t: -h and --help"
  expect 0 "$t" --version
  [ "$(head -1 out)" = "$t (xl-toolkit) $XL_VERSION" ] ||
    fail "$t --version: first line is '$(head -1 out)', expected '$t (xl-toolkit) $XL_VERSION'"
  [ ! -s err ] || fail "$t --version wrote on stderr: $(cat err)"
  expect 0 "$t" -V
  [ "$(head -1 out)" = "$t (xl-toolkit) $XL_VERSION" ] || fail "$t -V differs from --version"
done
# --help is answered before required inputs are looked at.
expect 0 xl-tokenize --help --vocab /nonexistent/v.tsv /nonexistent/input.txt
expect 0 xl-inspect --help /nonexistent.h5

make_mixed_text mixed.txt 200000
SIZE=$(stat -c %s mixed.txt)
SHA=$(sha256sum mixed.txt | cut -d' ' -f1)
grep -q $'\r$' mixed.txt || fail "generated text has no CRLF"
[ "$(tr -cd '\0' <mixed.txt | wc -c)" -gt 0 ] || fail "generated text has no NUL byte"

step "xl-build-vocab is deterministic (and the same from stdin)"
for m in byte char word; do
  expect 0 xl-build-vocab --mode "$m" mixed.txt -o "v1.$m.tsv"
  expect 0 xl-build-vocab --mode "$m" mixed.txt -o "v2.$m.tsv"
  same_bytes "v1.$m.tsv" "v2.$m.tsv" "--mode $m twice"
  xl-build-vocab -q --mode "$m" <mixed.txt >"v3.$m.tsv" || fail "xl-build-vocab --mode $m from stdin failed"
  same_bytes "v1.$m.tsv" "v3.$m.tsv" "--mode $m from a file and from stdin"
  entries=$(($(wc -l <"v1.$m.tsv") - 1))
  head -1 "v1.$m.tsv" | grep -qx "#xl-vocab 1 type=$m size=$entries specials=[0-9]*" ||
    fail "vocab header is '$(head -1 "v1.$m.tsv")' for $entries entries"
done
[ "$(head -1 v1.byte.tsv)" = "#xl-vocab 1 type=byte size=256 specials=0" ] || fail "byte vocab header: $(head -1 v1.byte.tsv)"
[ "$(sed -n 2p v1.char.tsv | cut -f2)" = "<unk>" ] || fail "char vocab does not start with <unk>"
[ "$(sed -n 2,3p v1.word.tsv | cut -f2 | tr '\n' ' ')" = "<eos> <unk> " ] || fail "word vocab does not start with <eos> <unk>"
# Every line is id<TAB>piece<TAB>count with consecutive ids and printable pieces.
awk -F'\t' 'FNR > 1 && (NF != 3 || $1 != FNR - 2 || $2 ~ /[ \001-\037]/) { print FILENAME ":" FNR ": " $0; bad = 1 } END { exit bad }' \
  v1.byte.tsv v1.char.tsv v1.word.tsv || fail "malformed vocab lines (above)"

step "the vocab sha256 is the one man 5 xl-vocab defines"
# SHA-256 of "xl-vocab 1\n<type>\n<specials>\n" then, per entry, its length as 8 little-endian bytes
# and its raw bytes. Counts are not part of it.
vocab_sha() {
  python3 - "$1" <<'EOF'
import hashlib, re, struct, sys
lines = open(sys.argv[1], "rb").read().split(b"\n")
head = dict(f.split(b"=", 1) for f in lines[0].split()[2:])
h = hashlib.sha256(b"xl-vocab 1\n" + head[b"type"] + b"\n" + head[b"specials"] + b"\n")
esc = {b"\\\\": b"\\", b"\\t": b"\t", b"\\n": b"\n", b"\\r": b"\r"}
for line in lines[1:]:
    if not line:
        continue
    piece = re.sub(rb"\\x[0-9a-fA-F]{2}|\\[\\tnr]",
                   lambda m: esc.get(m.group(0)) or bytes([int(m.group(0)[2:], 16)]), line.split(b"\t")[1])
    h.update(struct.pack("<Q", len(piece)) + piece)
print(h.hexdigest())
EOF
}
for m in byte char word; do
  expect 0 xl-build-vocab --mode "$m" mixed.txt -o "v.$m.tsv" -f
  logged=$(sed -n 's/.*sha256 \([0-9a-f]*\).*/\1/p' err)
  [ "$logged" = "$(vocab_sha "v.$m.tsv")" ] || fail "--mode $m: logged sha256 '$logged' is not the documented hash"
  expect 0 xl-tokenize --vocab "v.$m.tsv" mixed.txt -o "t.$m.h5" --allow-invalid-utf8
  expect 0 xl-inspect --json "t.$m.h5"
  [ "$(json out 'j["vocab"]["sha256"]')" = "$logged" ] || fail "--mode $m: the embedded vocab has another sha256"
  [ "$(json out 'j["attributes"]["vocab_sha256"]')" = "$logged" ] || fail "--mode $m: root vocab_sha256 differs"
done

step "pipe: xl-tokenize --vocab ... --split 0.9,0.05,0.05 FILE | xl-inspect -"
set +e
xl-tokenize --vocab v1.byte.tsv --split 0.9,0.05,0.05 mixed.txt 2>tok.err | xl-inspect --json - >pipe.json 2>inspect.err
codes=("${PIPESTATUS[@]}")
set -e
[ "${codes[*]}" = "0 0" ] || fail "pipe exited ${codes[*]}: $(cat tok.err inspect.err)"
[ "$(json pipe.json 'j["format"]')" = xl-tokens ] || fail "inspect does not see an xl tokens file"
[ "$(json pipe.json '[s["name"] for s in j["splits"]]')" = '["train", "valid", "test"]' ] ||
  fail "splits are $(json pipe.json '[s["name"] for s in j["splits"]]')"
lengths=$(json pipe.json '" ".join(str(s["tokens"]) for s in j["splits"])')
read -r ntrain nvalid ntest <<<"$lengths"
[ $((ntrain + nvalid + ntest)) -eq "$SIZE" ] || fail "split lengths $lengths do not add up to $SIZE bytes"
expected=$(python3 -c "n=$SIZE; a=round(0.9*n); b=round(0.05*n); print(a, b, n-a-b)")
[ "$lengths" = "$expected" ] || fail "split lengths $lengths, expected $expected"
[ "$(json pipe.json 'j["total_tokens"]')" -eq "$SIZE" ] || fail "total_tokens is not $SIZE"
[ "$(json pipe.json 'j["attributes"]["source_bytes"]')" -eq "$SIZE" ] || fail "source_bytes is not $SIZE"
[ "$(json pipe.json 'j["attributes"]["source_sha256"]')" = "$SHA" ] || fail "source_sha256 is not the sha256 of the input"
[ "$(json pipe.json 'j["vocab"]["type"]')" = byte ] || fail "vocab type is not byte"
# The text form names the splits too.
xl-tokenize --vocab v1.byte.tsv mixed.txt | xl-inspect - >pipe.txt || fail "pipe (text form) failed"
for s in train valid test; do grep -q "^  $s: [0-9]* tokens" pipe.txt || fail "text inspect lacks split $s"; done

step "byte mode round-trips NUL, CR LF and tabs byte for byte"
expect 0 xl-tokenize --mode byte mixed.txt -o b.h5
expect 0 xl-tokenize --decode all b.h5 -o back.txt
same_bytes back.txt mixed.txt "--decode all of a byte tokens file"
: >concat.txt
for s in train valid test; do xl-tokenize --decode "$s" b.h5 >>concat.txt || fail "--decode $s failed"; done
same_bytes concat.txt mixed.txt "train+valid+test decoded one by one"
xl-tokenize --mode byte - <mixed.txt | xl-tokenize --decode all - >back-pipe.txt || fail "tokenize | decode pipe failed"
same_bytes back-pipe.txt mixed.txt "tokenize | decode through a pipe"
xl-tokenize -q --mode byte mixed.txt -o /dev/stdout >via-stdout.h5 || fail "xl-tokenize -o /dev/stdout > FILE failed"
cmp -s <(xl-tokenize --decode all via-stdout.h5) mixed.txt || fail "-o /dev/stdout > FILE wrote another tokens file"
[ -L /dev/stdout ] || fail "/dev/stdout is no longer a link"
# HDF5 inputs through a pipe by name (/dev/stdin, bash's <(...)), as "-" is read: they failed as
# "truncated or corrupt HDF5 file".
xl-inspect /dev/stdin <b.h5 >/dev/null || fail "xl-inspect /dev/stdin < FILE failed"
cat b.h5 | xl-inspect --verify /dev/stdin >/dev/null || fail "cat | xl-inspect --verify /dev/stdin failed"
cmp -s <(xl-tokenize --decode all <(cat b.h5)) mixed.txt || fail "xl-tokenize --decode all <(cat b.h5) differs"
# A byte-order mark is kept, as Transformer-XL keeps it, with a warning that says how to drop it.
printf '\xef\xbb\xbfthe cat\nthe dog\n' >bom.txt
expect 0 xl-build-vocab --mode word bom.txt -o bom.tsv
grep -q "bom.txt: starts with a UTF-8 byte-order mark (U+FEFF)" "$TMP/err" || fail "no byte-order mark warning: $(cat "$TMP/err")"
grep -q "$(printf '\t\xef\xbb\xbfthe\t')" bom.tsv || fail "the marked first word is not kept as Transformer-XL keeps it"
sed_line=$(grep -o "sed -i '1s/[^']*//'" "$TMP/err")
expect 0 xl-tokenize --mode byte --split 1,0,0 bom.txt -o /dev/null
! grep -q "byte-order mark" "$TMP/err" || fail "byte mode warned of a byte-order mark"
eval "$sed_line bom.txt"
expect 0 xl-build-vocab --mode word bom.txt -o bom2.tsv
! grep -q "byte-order mark" "$TMP/err" || fail "the warning's sed did not drop the mark"
# `--decode FILE` reads as "decode FILE": it took the file as a split name and waited on stdin.
expect 64 xl-tokenize --decode b.h5 </dev/null
stderr_is_one_line "--decode takes the split to write" "xl-tokenize --decode all b.h5"
# Deterministic content: two runs give the same ids (files differ only in created_utc).
expect 0 xl-tokenize --mode byte mixed.txt -o b2.h5
for s in train valid test; do
  cmp -s <(xl-tokenize --decode "$s" b.h5) <(xl-tokenize --decode "$s" b2.h5) || fail "split $s differs between two runs"
done

step "gzip, bzip2 and xz inputs (found by their magic bytes) give the same splits"
gzip -9 -c mixed.txt >mixed.gzdata
bzip2 -9 -c mixed.txt >mixed.bzdata
xz -c mixed.txt >mixed.xzdata
expect 0 xl-tokenize --vocab v1.byte.tsv mixed.txt -o plain.h5
expect 0 xl-tokenize --vocab v1.byte.tsv mixed.gzdata -o gz.h5
expect 0 xl-tokenize --vocab v1.byte.tsv - -o bz.h5 <mixed.bzdata
xl-tokenize -q --vocab v1.byte.tsv - -o xz.h5 <mixed.xzdata || fail "xz through a pipe"
for f in gz bz xz; do
  expect 0 xl-inspect --json $f.h5
  [ "$(json out 'j["attributes"]["source_sha256"]')" = "$SHA" ] || fail "$f: source_sha256 is not that of the decompressed text"
  [ "$(json out '" ".join(str(s["tokens"]) for s in j["splits"])')" = "$lengths" ] || fail "$f: other split lengths"
  for s in train valid test; do
    cmp -s <(xl-tokenize --decode $s plain.h5) <(xl-tokenize --decode $s $f.h5) || fail "$f: split $s differs from plain input"
  done
done
head -c 1000 mixed.gzdata >broken.gzdata
expect 65 xl-tokenize --vocab v1.byte.tsv broken.gzdata -o broken.h5
stderr_is_one_line broken.gzdata gzip
head -c 1000 mixed.xzdata >broken.xzdata
expect 65 xl-tokenize --vocab v1.byte.tsv broken.xzdata -o broken.h5
stderr_is_one_line "broken.xzdata: corrupt xz data"
# Boost's zstd filter ends a truncated stream silently (0 tokens, exit 0): zstd is refused, with
# the command that decompresses it; a zip archive holds files, not a text.
zstd -q -c mixed.txt >mixed.zstdata
expect 65 xl-tokenize --vocab v1.byte.tsv mixed.zstdata -o zst.h5
stderr_is_one_line "mixed.zstdata: zstd data; give it decompressed (zstd -dc mixed.zstdata | ...)"
printf 'PK\003\004rest of an archive' >corpus.zip
expect 65 xl-tokenize --vocab v1.byte.tsv - -o zip.h5 <corpus.zip
stderr_is_one_line "<stdin>: a zip archive; give its text (unzip -p FILE | ...)"

step "char mode: vocab from train only, byte-exact round trip"
expect 0 xl-tokenize --mode char mixed.txt -o c.h5
grep -q "valid: [0-9]* tokens" err || fail "char mode does not report the valid split: $(cat err)"
expect 0 xl-inspect --json c.h5
[ "$(json out 'j["vocab"]["type"]')" = char ] || fail "char mode wrote a $(json out 'j["vocab"]["type"]') vocab"
[ "$(json out 'sum(s["attributes"]["unknown"] for s in j["splits"])')" -eq 0 ] || fail "char mode: unexpected <unk>"
nchars=$(python3 -c "print(len(open('mixed.txt', encoding='utf-8', newline='').read()))")
[ "$(json out 'j["total_tokens"]')" -eq "$nchars" ] || fail "char mode: $(json out 'j["total_tokens"]') tokens for $nchars characters"
expect 0 xl-tokenize --decode all c.h5 -o back-char.txt
same_bytes back-char.txt mixed.txt "--decode all of a char tokens file"
# The embedded vocab is the one xl-build-vocab makes from the train split alone.
expect 0 xl-tokenize --decode train c.h5 -o c-train.txt
expect 0 xl-build-vocab --mode char c-train.txt -o c-train.tsv
xl-inspect --json c.h5 >c.json || fail "xl-inspect c.h5 failed"
[ "$(vocab_sha c-train.tsv)" = "$(json c.json 'j["vocab"]["sha256"]')" ] ||
  fail "char mode: embedded vocab is not the vocab of the train split"

step "word mode: the words and lines of Transformer-XL's vocab, <eos> per line, round trip of the words"
expect 0 xl-tokenize --mode word mixed.txt -o w.h5
expect 0 xl-build-vocab --mode word mixed.txt -o all-words.tsv  # every word, so none becomes <unk>
expect 0 xl-tokenize --vocab all-words.tsv mixed.txt -o w-all.h5
expect 0 xl-tokenize --decode all w-all.h5 -o back-word.txt
# Its vocab reads with Python's universal newlines (a lone CR ends a line) and splits with
# str.split() (Unicode's spaces too).
python3 - mixed.txt expected-word.txt <<'EOF'
import sys
with open(sys.argv[1], encoding="utf-8") as f:
    out = "".join(" ".join(line.split()) + "\n" for line in f)
open(sys.argv[2], "w", encoding="utf-8", newline="\n").write(out)
EOF
same_bytes back-word.txt expected-word.txt "word mode decode vs Python's lines and words"
expect 0 xl-inspect --json w.h5
[ "$(json out 'j["vocab"]["type"]')" = word ] || fail "word mode wrote a $(json out 'j["vocab"]["type"]') vocab"

step "separate --train/--valid/--test inputs"
head -c 150000 mixed.txt >part-train.txt
tail -c +180001 mixed.txt >part-test.txt
tail -c +150001 mixed.txt >rest.txt
head -c 30000 rest.txt >part-valid.txt
gzip -c part-test.txt >part-test.txt.gz
expect 0 xl-tokenize --mode byte --train part-train.txt --valid part-valid.txt --test part-test.txt.gz -o sep.h5
expect 0 xl-inspect --json sep.h5
for s in train valid test; do
  f=part-$s.txt
  [ $s = test ] && src=part-test.txt.gz || src=$f
  got=$(json out "[s for s in j['splits'] if s['name'] == '$s'][0]")
  python3 - "$got" "$src" "$(stat -c %s $f)" "$(sha256sum $f | cut -d' ' -f1)" <<'EOF' || fail "split $s: wrong length or provenance: $got"
import json, sys
s = json.loads(sys.argv[1])
n, sha = int(sys.argv[3]), sys.argv[4]
assert s["tokens"] == n, s
a = s["attributes"]
assert a["source"] == sys.argv[2] and a["source_bytes"] == n and a["source_sha256"] == sha and a["unknown"] == 0, a
EOF
  cmp -s <(xl-tokenize --decode $s sep.h5) $f || fail "split $s does not decode to $f"
done
[ "$(json out '"source_sha256" in j["attributes"]')" = False ] || fail "separate inputs: root source_sha256 should be absent"
expect 0 xl-tokenize --mode byte --train part-train.txt --valid part-valid.txt -o two.h5
expect 0 xl-inspect --json two.h5
[ "$(json out '[s["name"] for s in j["splits"]]')" = '["train", "valid"]' ] || fail "two inputs gave splits $(json out '[s["name"] for s in j["splits"]]')"

step "-c config files: later files win, the command line wins over all; --dump-config"
printf 'mode = word\nsplit = 0.8,0.1,0.1\nmin-count = 2\n' >one.ini
printf '# a comment\nmin-count = 3\n' >two.ini
expect 0 xl-tokenize -c one.ini --dump-config
grep -qx 'mode = word' out && grep -qx 'split = 0.8,0.1,0.1' out && grep -qx 'min-count = 2' out ||
  fail "--dump-config does not show one.ini's settings: $(cat out)"
[ ! -s err ] || fail "--dump-config wrote on stderr"
expect 0 xl-tokenize -c one.ini -c two.ini --dump-config
grep -qx 'min-count = 3' out || fail "a later config file does not win: $(grep min-count out)"
expect 0 xl-tokenize -c one.ini -c two.ini --mode char --min-count 5 --dump-config
grep -qx 'mode = char' out && grep -qx 'min-count = 5' out && grep -qx 'split = 0.8,0.1,0.1' out ||
  fail "the command line does not win over config files: $(cat out)"
# The dump is itself a config file that gives the same settings.
cp out dumped.ini
expect 0 xl-tokenize -c dumped.ini --dump-config
same_bytes out dumped.ini "--dump-config of its own output"
expect 0 xl-tokenize -c one.ini --mode byte mixed.txt -o cfg.h5
expect 0 xl-inspect --json cfg.h5
[ "$(json out 'j["vocab"]["type"]')" = byte ] || fail "--mode byte did not override the config's word mode"
[ "$(json out 'j["splits"][0]["tokens"]')" -eq "$(python3 -c "print(round(0.8*$SIZE))")" ] || fail "the config's split was not used"
printf 'mode = char\n' >bv.ini
expect 0 xl-build-vocab -c bv.ini mixed.txt
head -1 out | grep -q "type=char" || fail "xl-build-vocab ignored its config file"
expect 78 xl-tokenize -c <(printf 'no-such-setting = 1\n') --dump-config

step "word mode: pieces only in valid become <unk>, counted and reported"
printf 'the cat sat on the mat\nthe dog sat\n' >w-train.txt
printf 'the zebra sat on the sofa\n' >w-valid.txt
expect 0 xl-tokenize --mode word --train w-train.txt --valid w-valid.txt -o wu.h5
grep -q "valid: 7 tokens, 2 mapped to <unk>" err || fail "the <unk> count of valid is not reported: $(cat err)"
expect 0 xl-inspect --json wu.h5
[ "$(json out '[s["attributes"]["unknown"] for s in j["splits"]]')" = "[0, 2]" ] ||
  fail "unknown counts are $(json out '[s["attributes"]["unknown"] for s in j["splits"]]')"
wu_sha=$(json out 'j["vocab"]["sha256"]')
expect 0 xl-inspect wu.h5
grep -q "valid: 7 tokens, 2 <unk>" out || fail "xl-inspect does not show the <unk> count: $(cat out)"
[ "$(xl-tokenize --decode valid wu.h5)" = "the <unk> sat on the <unk>" ] || fail "valid decodes to '$(xl-tokenize --decode valid wu.h5)'"
expect 0 xl-build-vocab --mode word w-train.txt -o w-train.tsv
[ "$(vocab_sha w-train.tsv)" = "$wu_sha" ] || fail "the vocab built by xl-tokenize is not the vocab of the train file"
expect 0 xl-tokenize --vocab w-train.tsv --train w-train.txt --valid w-valid.txt -o wv.h5
grep -q "valid: 7 tokens, 2 mapped to <unk>" err || fail "with --vocab: <unk> not reported: $(cat err)"
cmp -s <(xl-tokenize --decode valid wu.h5) <(xl-tokenize --decode valid wv.h5) || fail "--vocab and --mode disagree"
# One input cut by token counts: train is the first 11 tokens (two lines), valid the next 7.
cat w-train.txt w-valid.txt >w-all.txt
expect 0 xl-tokenize --mode word --split 11,7 w-all.txt -o wa.h5
expect 0 xl-inspect --json wa.h5
[ "$(json out '[(s["tokens"], s["attributes"]["unknown"]) for s in j["splits"]]')" = "[[11, 0], [7, 2]]" ] ||
  fail "--split 11,7: $(json out '[(s["tokens"], s["attributes"]["unknown"]) for s in j["splits"]]')"
[ "$(json out 'j["vocab"]["sha256"]')" = "$wu_sha" ] || fail "--split 11,7: vocab not built from the train part"
# --min-count folds rare train words into <unk> too.
expect 0 xl-tokenize --mode word --min-count 2 --train w-train.txt --valid w-valid.txt -o wm.h5
[ "$(xl-tokenize --decode train wm.h5 | sed -n 1p)" = "the <unk> sat <unk> the <unk>" ] ||
  fail "--min-count 2: train decodes to '$(xl-tokenize --decode train wm.h5 | sed -n 1p)'"

step "invalid UTF-8 allowed in char mode is counted as <unk>"
printf 'abc\xffabc\nabc\xfe\n' >bad.txt
expect 0 xl-tokenize --mode char --split 1.0 --allow-invalid-utf8 bad.txt -o bad.h5
expect 0 xl-inspect --json bad.h5
[ "$(json out 'j["splits"][0]["attributes"]["unknown"]')" -eq 2 ] || fail "invalid bytes: unknown is $(json out 'j["splits"][0]["attributes"]["unknown"]')"

step "a file another program holds open for writing (an HDF5 lock) still reads"
# xl never changes a file in place, so it takes no HDF5 file locks: without them a held lock (and
# file systems without locks, NFS on clusters) failed every open as 'truncated or corrupt'.
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  cp bad.h5 held.h5
  /usr/bin/python3 -c 'import h5py, sys, time
f = h5py.File("held.h5", "r+")
open("held.ready", "w").close()
time.sleep(30)' &
  holder=$!
  for _ in $(seq 1 100); do [ -f held.ready ] && break; sleep 0.1; done
  [ -f held.ready ] || fail "h5py did not open held.h5"
  run xl-inspect --verify held.h5
  kill "$holder"
  [ "$STATUS" -eq 0 ] || fail "a file held open by h5py does not read: $(cat "$TMP/err")"
else
  echo "  (no h5py for /usr/bin/python3: not tried)"
fi

echo "data_tools: all checks passed"
