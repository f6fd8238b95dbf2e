#!/usr/bin/env bash
# fetch-corpus.sh NAME LOCAL URL ZIP_SHA256 FILE_SHA256 OUT
# Puts the canonical corpus NAME at OUT: a local copy (LOCAL) or a download of URL (a zip),
# checking both checksums. A local file with another checksum is "not the canonical NAME": the
# pipeline stops unless XL_ALLOW_NONCANONICAL=1, and then marks OUT.noncanonical.
set -euo pipefail
source "$(dirname "$0")/fetch-lib.bash"
name=$1 local=$2 url=$3 zip_sha=$4 file_sha=$5 out=$6
upper=$(echo "$name" | tr a-z A-Z)
if [ -n "$local" ]; then
  [ -f "$local" ] || { echo "$upper=$local: no such file" >&2; exit 66; }
  rm -f "$out.noncanonical"
  canonical "$local" "$file_sha" "$name" "splits become 90%/5%/5%" || touch "$out.noncanonical"
  ln -sf "$(cd "$(dirname "$local")" && pwd)/$(basename "$local")" "$out"
  exit 0
fi
zip=$out.zip
download "$url" "$zip" "$zip_sha" "give a local copy: make -f Makefile.pipeline $name $upper=/path/to/$name"
unzip -p "$zip" "$name" > "$out.part"
got=$(sha256sum "$out.part" | cut -d' ' -f1)
[ "$got" = "$file_sha" ] || { echo "$name in $zip: checksum $got, expected $file_sha" >&2; exit 65; }
mv "$out.part" "$out"
