#!/usr/bin/env bash
# Round trips on real corpora from ../shared/data: enwik8 (byte mode, the paper's 90M/5M/5M split
# scaled down) and tinyshakespeare (char and word modes). Skipped (77) when the data is absent;
# data_tools.sh covers the same paths on generated text.
source "$(dirname "$0")/common.bash"

ENWIK8=$(shared_data enwik8/enwik8.head-150000)
SHAKESPEARE=$(shared_data tinyshakespeare/input.txt)
if [ -z "$ENWIK8" ] && [ -z "$SHAKESPEARE" ]; then
  echo "skipped: no enwik8.head-150000 or tinyshakespeare under $XL_SHARED_DATA"
  exit 77
fi

# --pretokenize moses makes the words Hugging Face's TransfoXL tokenizer makes, and decodes them
# as its decode does: the sha256 of its moses_pipeline's words (sacremoses 0.1.1, transformers'
# tokenize_numbers) joined by spaces, one line per input line, and of its decode of each line.
# The vocab records the flag: xl-tokenize applies it without being told, and so does --decode.
moses_gives_hf_words() {
  local file=$1 words=$2 text=$3
  expect 0 xl-build-vocab --mode word --pretokenize moses "$file" -f -o moses.tsv
  expect 0 xl-tokenize --vocab moses.tsv "$file" -f -o moses.h5
  [ "$(xl-tokenize --pretokenize none --decode all moses.h5 | sha256sum | cut -d' ' -f1)" = "$words" ] ||
    fail "$file: the Moses words differ from Hugging Face's tokenizer's"
  [ "$(xl-tokenize --decode all moses.h5 | sha256sum | cut -d' ' -f1)" = "$text" ] ||
    fail "$file: the detokenized text differs from Hugging Face's decode"
}

if [ -n "$ENWIK8" ]; then
  step "enwik8: byte vocab, --split by counts, byte-exact --decode all"
  size=$(stat -c %s "$ENWIK8")
  expect 0 xl-build-vocab --mode byte "$ENWIK8" -o enwik8.tsv
  [ "$(head -1 enwik8.tsv)" = "#xl-vocab 1 type=byte size=256 specials=0" ] || fail "enwik8 vocab header: $(head -1 enwik8.tsv)"
  # 135K,7.5K,7.5K is 90%/5%/5% of 150000 bytes, written the way 90M,5M,5M is for enwik8.
  expect 0 xl-tokenize --vocab enwik8.tsv --split 135K,7.5K,7.5K "$ENWIK8" -o enwik8.h5
  expect 0 xl-inspect --json enwik8.h5
  [ "$(json out '[s["tokens"] for s in j["splits"]]')" = "[135000, 7500, 7500]" ] ||
    fail "enwik8 splits: $(json out '[s["tokens"] for s in j["splits"]]') for $size bytes"
  [ "$(json out 'j["attributes"]["source_sha256"]')" = "$(sha256sum "$ENWIK8" | cut -d' ' -f1)" ] || fail "enwik8: source_sha256"
  expect 0 xl-tokenize --decode all enwik8.h5 -o enwik8.back
  same_bytes enwik8.back "$ENWIK8" "enwik8 --decode all"
  # The same through pipes, compressed on the way in.
  gzip -c "$ENWIK8" | xl-tokenize -q --mode byte - | xl-tokenize --decode all - >enwik8.pipe ||
    fail "gzip | xl-tokenize | xl-tokenize --decode failed"
  same_bytes enwik8.pipe "$ENWIK8" "enwik8 through pipes"
  step "enwik8: Moses words as Hugging Face's tokenizer makes them (XML, links, other scripts)"
  moses_gives_hf_words "$ENWIK8" ddecd39e38c0b8e7161739e5cf9a496aacd9c19d85cd0b8d433aa64de0f5924d \
    f5c2ee1426d32de1c54c52dcd120d41d765b3ed15303e4524eac8b10a7c0eca7
else
  echo "skipped: enwik8.head-150000 is absent"
fi

if [ -n "$SHAKESPEARE" ]; then
  step "tinyshakespeare: char mode round trip, word mode <eos> per line"
  expect 0 xl-tokenize --mode char "$SHAKESPEARE" -o shakespeare-char.h5
  expect 0 xl-inspect --json shakespeare-char.h5
  [ "$(json out 'j["vocab"]["type"]')" = char ] || fail "not a char vocab"
  nchars=$(python3 -c "import sys; print(len(open(sys.argv[1], encoding='utf-8', newline='').read()))" "$SHAKESPEARE")
  [ "$(json out 'j["total_tokens"]')" -eq "$nchars" ] || fail "char mode: $(json out 'j["total_tokens"]') tokens for $nchars characters"
  unknown=$(json out 'sum(s["attributes"]["unknown"] for s in j["splits"])')
  expect 0 xl-tokenize --decode all shakespeare-char.h5 -o shakespeare.back
  if [ "$unknown" -eq 0 ]; then
    same_bytes shakespeare.back "$SHAKESPEARE" "tinyshakespeare char --decode all"
  else
    echo "note: $unknown characters of valid/test are not in train; round trip not byte-exact"
  fi
  expect 0 xl-tokenize --mode word "$SHAKESPEARE" -o shakespeare-word.h5
  expect 0 xl-inspect --json shakespeare-word.h5
  [ "$(json out 'j["vocab"]["type"]')" = word ] || fail "not a word vocab"
  lines=$(wc -l <"$SHAKESPEARE")
  [ "$(xl-tokenize --decode all shakespeare-word.h5 | wc -l)" -eq "$lines" ] || fail "word mode: not one <eos> per line"
  [ "$(json out '[s["attributes"]["unknown"] for s in j["splits"]][0]')" -eq 0 ] || fail "word mode: <unk> in train"
  [ "$(json out '[s["attributes"]["unknown"] for s in j["splits"]][1]')" -gt 0 ] ||
    fail "word mode: no valid word is unseen in train (a vocab built from all splits?)"
  step "tinyshakespeare: Moses words as Hugging Face's tokenizer makes them"
  moses_gives_hf_words "$SHAKESPEARE" ea16b9ad95820bdad3b712b7f9cf9d12e7010c605bc839b8e7d927184ac09708 \
    e9f6d8cb792ae1ea0f4800d189ab41c642b567acd2059fa2d8930f43267420e6
else
  echo "skipped: tinyshakespeare is absent"
fi

echo "data_shared: all checks passed"
