#!/usr/bin/env bash
# Failures end with a sysexits(3) status and one line on stderr naming the culprit, and leave no
# half-written output or temp file behind: 64 usage, 65 bad data, 66 no input, 73 cannot create.
source "$(dirname "$0")/common.bash"

make_mixed_text text.txt 20000
expect 0 xl-build-vocab --mode byte text.txt -o v.tsv
expect 0 xl-tokenize --vocab v.tsv text.txt -o good.h5
GOOD_SIZE=$(stat -c %s good.h5)

step "66: missing input"
expect 66 xl-build-vocab missing.txt
stderr_is_one_line missing.txt
expect 66 xl-tokenize --mode byte missing.txt -o out.h5
stderr_is_one_line missing.txt
[ ! -e out.h5 ] || fail "a failed xl-tokenize left out.h5"
expect 66 xl-tokenize --vocab missing.tsv text.txt -o out.h5
stderr_is_one_line missing.tsv
expect 66 xl-tokenize -q --mode byte --train text.txt --valid missing-valid.txt -o out.h5
stderr_is_one_line missing-valid.txt
expect 66 xl-inspect missing.h5
stderr_is_one_line missing.h5
expect 66 xl-tokenize --decode all missing.h5
stderr_is_one_line missing.h5
expect 66 xl-tokenize -c missing.ini --dump-config
stderr_is_one_line missing.ini
expect 66 xl-build-vocab .
stderr_is_one_line "directory"
expect 66 xl-inspect .
stderr_is_one_line "directory"
no_temp_files .

step "65: a text file where tokens are expected"
expect 65 xl-inspect text.txt
stderr_is_one_line text.txt "not an HDF5 file"
expect 65 xl-tokenize --decode all text.txt
stderr_is_one_line text.txt "not an HDF5 file"
[ ! -s out ] || fail "--decode of a text file wrote on stdout"
expect 65 xl-inspect - <text.txt
stderr_is_one_line "<stdin>" "not an HDF5 file"
expect 65 xl-tokenize --decode all - <text.txt
stderr_is_one_line "<stdin>"
expect 65 xl-inspect - </dev/null
stderr_is_one_line "<stdin>" "empty"
# A vocab given where a tokens file is expected, and text given as a vocab (a TSV, or a tokens
# file or checkpoint that embeds one).
expect 65 xl-tokenize --decode all v.tsv
stderr_is_one_line v.tsv
expect 65 xl-tokenize --vocab text.txt text.txt -o out.h5
stderr_is_one_line text.txt "not an xl vocab"
[ ! -e out.h5 ] || fail "a failed xl-tokenize left out.h5"

step "65: a truncated HDF5 file"
for n in 8 512 $((GOOD_SIZE / 2)) $((GOOD_SIZE - 1)); do
  head -c $n good.h5 >trunc.h5
  expect 65 xl-inspect trunc.h5
  stderr_is_one_line trunc.h5
  expect 65 xl-tokenize --decode all trunc.h5
  stderr_is_one_line trunc.h5
  [ ! -s out ] || fail "--decode of a truncated file ($n bytes) wrote on stdout"
  expect 65 xl-inspect - <trunc.h5
  stderr_is_one_line "<stdin>"
done
expect 65 xl-tokenize --decode nosuch good.h5
stderr_is_one_line good.h5 "nosuch" "train, valid, test"

step "65: invalid UTF-8 in char mode (0 with --allow-invalid-utf8)"
printf 'abc\xffdef\n' >bad-utf8.txt
expect 65 xl-tokenize -q --mode char bad-utf8.txt -o bad.h5
stderr_is_one_line bad-utf8.txt "invalid UTF-8" "byte 3"
[ ! -e bad.h5 ] || fail "a failed xl-tokenize left bad.h5"
expect 65 xl-tokenize -q --mode char --train text.txt --valid bad-utf8.txt -o bad.h5
stderr_is_one_line bad-utf8.txt "invalid UTF-8" "byte 3"
expect 65 xl-build-vocab --mode char text.txt bad-utf8.txt -o bad.tsv
stderr_is_one_line bad-utf8.txt "invalid UTF-8"
[ ! -e bad.tsv ] || fail "a failed xl-build-vocab left bad.tsv"
expect 0 xl-tokenize --mode char --allow-invalid-utf8 bad-utf8.txt -o bad.h5
expect 0 xl-build-vocab --mode char --allow-invalid-utf8 bad-utf8.txt -o bad.tsv
expect 0 xl-tokenize --mode byte bad-utf8.txt -o bad-byte.h5

step "64/65: --pretokenize moses makes words, from UTF-8"
expect 64 xl-tokenize -q --mode char --pretokenize moses text.txt -o moses.h5
stderr_is_one_line "--pretokenize moses" "word vocab, not a char one"
expect 64 xl-build-vocab --mode byte --pretokenize moses text.txt -o moses.tsv
stderr_is_one_line "--pretokenize moses" "word vocab, not a byte one"
expect 64 xl-tokenize -q --mode word --pretokenize sentencepiece text.txt -o moses.h5
stderr_is_one_line "--pretokenize" "'sentencepiece'" "none or moses"
expect 65 xl-tokenize -q --mode word --pretokenize moses bad-utf8.txt -o moses.h5
stderr_is_one_line bad-utf8.txt "invalid UTF-8 at byte 3"
printf '#xl-vocab 1 type=word pretokenize=bpe\n0\t<eos>\t1\n1\t<unk>\t0\n' >bpe.tsv
expect 65 xl-tokenize -q --vocab bpe.tsv text.txt -o moses.h5
stderr_is_one_line bpe.tsv "unknown pretokenize 'bpe'"
[ ! -e moses.h5 ] && [ ! -e moses.tsv ] || fail "a refused --pretokenize moses left an output"
no_temp_files .

step "73: output that cannot be created, or exists without -f"
expect 73 xl-tokenize --vocab v.tsv text.txt -o /nonexistent-dir/x.h5
stderr_is_one_line /nonexistent-dir/x.h5
expect 73 xl-build-vocab text.txt -o /nonexistent-dir/v.tsv
stderr_is_one_line /nonexistent-dir/v.tsv
expect 73 xl-tokenize --decode all good.h5 -o /nonexistent-dir/x.txt
stderr_is_one_line /nonexistent-dir/x.txt
cp good.h5 existing.h5
echo "keep me" >existing.tsv
expect 73 xl-tokenize --vocab v.tsv text.txt -o existing.h5
stderr_is_one_line existing.h5 "-f"
same_bytes existing.h5 good.h5 "existing output refused without -f must stay untouched"
expect 73 xl-build-vocab text.txt -o existing.tsv
stderr_is_one_line existing.tsv
[ "$(cat existing.tsv)" = "keep me" ] || fail "existing.tsv was changed without -f"
expect 0 xl-tokenize --vocab v.tsv text.txt -o existing.h5 -f
expect 0 xl-inspect existing.h5
expect 0 xl-build-vocab text.txt -o existing.tsv --force
head -1 existing.tsv | grep -q '^#xl-vocab 1 ' || fail "-f did not replace existing.tsv"
mkdir adir
expect 73 xl-build-vocab text.txt -o adir -f
stderr_is_one_line adir
no_temp_files .
# A device or FIFO is written through, without -f, and stays what it is (a rename would have put a
# file in /dev/null's place): HDF5 and text outputs alike, the FIFO's reader getting every byte.
expect 0 xl-tokenize --vocab v.tsv text.txt -o /dev/null
expect 0 xl-build-vocab text.txt -o /dev/null
[ -c /dev/null ] || fail "-o /dev/null replaced the device"
mkfifo fifo
cat fifo >from-fifo.h5 &
expect 0 xl-tokenize --vocab v.tsv text.txt -o fifo
wait
[ -p fifo ] || fail "-o fifo replaced the FIFO"
expect 0 xl-tokenize --decode all from-fifo.h5 -o from-fifo.txt
expect 0 xl-tokenize --decode all good.h5 -o from-file.txt
same_bytes from-fifo.txt from-file.txt "a tokens file written through a FIFO"
no_temp_files .

step "64: an output that is one of the inputs is refused even with -f (the input would be lost)"
cp text.txt own.txt
expect 64 xl-tokenize -q --vocab v.tsv own.txt -o ./own.txt -f
stderr_is_one_line "--output is ./own.txt, which is also INPUT"
same_bytes own.txt text.txt "the input refused as its own output"
cp good.h5 own.h5
expect 64 xl-train-phase1 --max-steps 1 own.h5 -o own.h5 -f
stderr_is_one_line "--output is own.h5, which is also TOKENS"
same_bytes own.h5 good.h5 "a tokens file refused as the checkpoint"
expect 64 xl-train-phase1 --max-steps 1 good.h5 -o ck.h5 --metrics ck.h5
stderr_is_one_line "--metrics is ck.h5, which --output writes too"
expect 64 xl-build-vocab text.txt own.txt -o own.txt -f
stderr_is_one_line "which is also INPUT"
ln -s own.txt link.txt
expect 64 xl-build-vocab link.txt -o own.txt -f
stderr_is_one_line "--output is own.txt, which is also INPUT"
same_bytes own.txt text.txt "an input reached through a link"
# A hard link is another name that replacing own.txt (by rename) leaves as it was: no conflict.
ln own.txt hard.txt
expect 0 xl-build-vocab -q hard.txt -o own.txt -f
same_bytes hard.txt text.txt "the input, a hard link of the output"

step "64: usage errors"
for t in xl-build-vocab xl-tokenize xl-inspect; do
  expect 64 "$t" --no-such-option
  stderr_is_one_line "no-such-option"
  [ ! -s out ] || fail "$t wrote on stdout after a usage error"
done
# A typo gets the flag it was probably meant to be; a name near nothing gets no guess.
expect 64 xl-tokenize --vocabb v.tsv text.txt -o out.h5
stderr_is_one_line "unrecognised option '--vocabb'; did you mean '--vocab'?"
expect 64 xl-inspect --jsn good.h5
stderr_is_one_line "did you mean '--json'?"
expect 64 xl-inspect --no-such-option good.h5
grep -q "did you mean" "$TMP/err" && fail "a guess for --no-such-option: $(cat "$TMP/err")"
# Only whole names: a shortened flag is refused (Boost would take an unambiguous prefix, whose
# meaning changes once another flag shares it), with the flag it starts.
expect 64 xl-tokenize --voc v.tsv text.txt -o out.h5
stderr_is_one_line "unrecognised option '--voc'; did you mean '--vocab'?"
[ ! -e out.h5 ] || fail "xl-tokenize wrote out.h5 with a shortened flag"
expect 64 xl-build-vocab --mode nonsense text.txt
stderr_is_one_line nonsense
expect 64 xl-tokenize --vocab v.tsv --mode byte text.txt -o out.h5
stderr_is_one_line "--vocab"
expect 64 xl-tokenize text.txt -o out.h5
stderr_is_one_line "--mode"
expect 64 xl-tokenize --mode byte --train text.txt text.txt -o out.h5
stderr_is_one_line "--train"
expect 64 xl-inspect a.h5 b.h5
stderr_is_one_line "'b.h5'" "one argument, FILE"
expect 64 xl-build-vocab --min-count notanumber text.txt
stderr_is_one_line min-count

step "64: bad --split"
for spec in abc 0.5,0.6 0.9,0.05 -0.1,1.1 0.9,,0.1 0.9,0.1, 5X,1,1 30000,1 0.7,0.1,0.1,0.1 ""; do
  expect 64 xl-tokenize -q --vocab v.tsv --split "$spec" text.txt -o out.h5
  stderr_is_one_line "split"
  [ ! -e out.h5 ] || fail "--split '$spec' left out.h5"
done
# Fractions may include a zero part; token counts are counts.
expect 0 xl-tokenize --vocab v.tsv --split 0.95,0.05,0 text.txt -o zero.h5
expect 0 xl-inspect --json zero.h5
[ "$(json out '[s["tokens"] for s in j["splits"]][2]')" -eq 0 ] || fail "--split 0.95,0.05,0: test is not empty"
[ "$(json out '[s["tokens"] for s in j["splits"]][0]')" -gt 1000 ] || fail "--split 0.95,0.05,0 was read as token counts"
expect 0 xl-tokenize --vocab v.tsv --split 10K,2K,1K text.txt -o counts.h5
expect 0 xl-inspect --json counts.h5
[ "$(json out '[s["tokens"] for s in j["splits"]]')" = "[10000, 2000, 1000]" ] || fail "--split 10K,2K,1K: $(json out '[s["tokens"] for s in j["splits"]]')"
no_temp_files .

step "64/65: a char or word vocab is built from train text, so there must be some"
expect 64 xl-tokenize -q --mode word --valid text.txt -o out.h5
stderr_is_one_line "--mode word builds its vocab from the train split" "--train" "--vocab"
: >empty.txt
expect 65 xl-tokenize -q --mode char --train empty.txt --valid text.txt -o out.h5
stderr_is_one_line "empty.txt: no text to build the vocab from"
expect 65 xl-tokenize -q --mode word empty.txt -o out.h5
stderr_is_one_line "empty.txt: no text to build the vocab from"
expect 64 xl-tokenize -q --mode char --split 0,1K,1K text.txt -o out.h5
stderr_is_one_line "--split 0,1K,1K leaves the train split empty"
[ ! -e out.h5 ] || fail "a tokens file without a vocab's text was written"
expect 65 xl-build-vocab --mode word empty.txt
stderr_is_one_line "empty.txt: no text to build the vocab from"
expect 0 xl-build-vocab --mode byte empty.txt
# Text without a word, or settings that keep none, would give a vocab of <eos> and <unk> alone.
printf '  \n\n \t \n' >blank.txt
expect 65 xl-tokenize -q --mode word blank.txt -o out.h5
stderr_is_one_line "blank.txt: no word to build the vocab from"
expect 65 xl-build-vocab --mode word blank.txt
stderr_is_one_line "blank.txt: no word to build the vocab from"
expect 65 xl-build-vocab --mode word --min-count 100000000 text.txt
stderr_is_one_line "text.txt: no word occurs 100000000 times (--min-count)"
expect 64 xl-tokenize -q --mode word --max-size 2 text.txt -o out.h5
stderr_is_one_line "--max-size of 2 leaves no room beside <eos> and <unk>"
# Set in a config file, they are named there (78 for a setting that cannot work).
printf 'mode = word\nmin-count = 100000000\n' >mc.ini
expect 65 xl-build-vocab -c mc.ini text.txt
stderr_is_one_line "text.txt: no word occurs 100000000 times (mc.ini: min-count)"
printf 'mode = word\nmax-size = 2\n' >ms.ini
expect 78 xl-tokenize -q -c ms.ini text.txt -o out.h5
stderr_is_one_line "ms.ini: max-size of 2 leaves no room beside <eos> and <unk>"
printf 'mode = words\n' >mode.ini
expect 78 xl-tokenize -q -c mode.ini text.txt -o out.h5
stderr_is_one_line "mode.ini: mode: unknown vocab mode 'words' (use byte, char or word)"
expect 64 xl-build-vocab --mode words text.txt
stderr_is_one_line "--mode: unknown vocab mode 'words'"
[ ! -e out.h5 ] || fail "a tokens file with a vocab of specials alone was written"
expect 0 xl-build-vocab --mode char blank.txt
expect 64 xl-build-vocab --mode word --min-count -1 text.txt
stderr_is_one_line "--min-count must not be negative"
expect 64 xl-tokenize -q --mode word --max-size -5 text.txt -o out.h5
stderr_is_one_line "--max-size must not be negative"
# With a vocab given (or bytes) evaluation-only files need no train text.
expect 0 xl-tokenize -q --vocab v.tsv --split 0,1K,1K text.txt -o evalonly.h5
expect 0 xl-tokenize -q --mode byte --valid text.txt -o evalonly2.h5
no_temp_files .

step "64: binary output to a terminal is refused; text is not"
if command -v script >/dev/null && script -qec true /dev/null >/dev/null 2>&1; then
  # `script` runs the command on a pseudo-terminal; -e returns the command's status.
  tty_status() {
    local s=0
    script -qec "$1" /dev/null >tty.out 2>&1 </dev/null || s=$?
    echo $s
  }
  [ "$(tty_status "$XL_BIN/xl-tokenize --vocab v.tsv text.txt")" -eq 64 ] || fail "xl-tokenize wrote HDF5 to a terminal: $(cat tty.out)"
  grep -q -- "-o" tty.out || fail "the refusal does not suggest -o: $(cat tty.out)"
  [ "$(tty_status "$XL_BIN/xl-tokenize --vocab v.tsv text.txt -o -")" -eq 64 ] || fail "-o - to a terminal was not refused"
  [ "$(tty_status "$XL_BIN/xl-tokenize --vocab v.tsv text.txt | cat >/dev/null")" -eq 0 ] || fail "a pipe was taken for a terminal"
  [ "$(tty_status "$XL_BIN/xl-build-vocab text.txt")" -eq 0 ] || fail "a text vocab to a terminal was refused: $(cat tty.out)"
  [ "$(tty_status "$XL_BIN/xl-inspect good.h5")" -eq 0 ] || fail "xl-inspect to a terminal was refused: $(cat tty.out)"
  [ "$(tty_status "$XL_BIN/xl-tokenize --decode valid good.h5")" -eq 0 ] || fail "--decode to a terminal was refused"
  # A checkpoint to a terminal: refused before training, not after it.
  [ "$(tty_status "$XL_BIN/xl-train-phase1 --n-layer 1 --d-model 16 --n-head 1 --d-head 16 --d-inner 16 --tgt-len 8 \
       --mem-len 8 --batch-size 1 --max-steps 20 --eval-interval 0 --threads 1 good.h5")" -eq 64 ] ||
    fail "a checkpoint was written to a terminal: $(cat tty.out)"
  ! grep -q "starting phase1" tty.out || fail "training started before its output to a terminal was refused: $(cat tty.out)"
else
  echo "skipped: no usable script(1) for the terminal checks"
fi

step "a signal removes the temp file of an unfinished output"
mkfifo slow-input
xl-tokenize --mode byte slow-input -o signalled.h5 2>sig.err &
pid=$!
for _ in $(seq 200); do
  compgen -G 'signalled.h5.tmp.*' >/dev/null && break
  sleep 0.05
done
compgen -G 'signalled.h5.tmp.*' >/dev/null || { kill $pid; fail "xl-tokenize did not create its temp output before reading"; }
kill -TERM $pid
s=0
wait $pid || s=$?
[ $s -eq 143 ] || fail "SIGTERM: exit status $s, expected 143"
[ ! -e signalled.h5 ] || fail "an interrupted xl-tokenize left signalled.h5"
no_temp_files .

step "config files the fuzzer found: binary bytes are escaped, % pairs refused (they hung Boost)"
printf 'n-layer = 4\x01\xff\n' >binary.ini
expect 78 xl-train-phase1 -c binary.ini --max-steps 1 tokens.h5 -o never.h5
stderr_is_one_line "binary.ini"
grep -q 'x01' "$TMP/err" && ! LC_ALL=C grep -q $'\x01' "$TMP/err" || fail "control bytes not escaped: $(cat -v "$TMP/err")"
printf 'm%%invalid_line%%mmaye{lmmm\n' >percent.ini
expect 78 timeout 20 xl-train-phase1 -c percent.ini --max-steps 1 tokens.h5 -o never.h5
stderr_is_one_line "percent.ini:1" "% pairs are not allowed"

echo "exit_codes: all checks passed"
