#!/usr/bin/env bash
# fetch-wikitext.sh LOCAL_DIR URL OUT_DIR: WikiText-103's wiki.{train,valid,test}.tokens in OUT_DIR,
# linked from LOCAL_DIR or downloaded (the md5 torchtext publishes is checked).
set -euo pipefail
source "$(dirname "$0")/fetch-lib.bash"
local=$1 url=$2 out=$3
md5=9ddaacaf6af0710eda8c456decff7832
if [ -n "$local" ]; then
  for s in train valid test; do
    [ -f "$local/wiki.$s.tokens" ] || { echo "WT103_DIR=$local: no wiki.$s.tokens" >&2; exit 66; }
    ln -sf "$(cd "$local" && pwd)/wiki.$s.tokens" "$out/wiki.$s.tokens"
  done
  exit 0
fi
zip=$out/wikitext-103-v1.zip
fetch "$url" "$zip.part" "give a local copy: make -f Makefile.pipeline wikitext-103 WT103_DIR=/path/to/wikitext-103"
[ "$(md5sum "$zip.part" | cut -d' ' -f1)" = "$md5" ] || { echo "$url: md5 mismatch" >&2; exit 65; }
mv "$zip.part" "$zip"
for s in train valid test; do unzip -p "$zip" "wikitext-103/wiki.$s.tokens" > "$out/wiki.$s.tokens"; done
