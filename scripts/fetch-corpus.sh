#!/usr/bin/env bash
# fetch-corpus.sh NAME LOCAL URL ZIP_SHA256 FILE_SHA256 OUT
# Puts the canonical corpus NAME at OUT: a local copy (LOCAL) or a download of URL (a zip),
# checking both checksums. A local file with another checksum is "not the canonical NAME": the
# pipeline stops unless XL_ALLOW_NONCANONICAL=1, and then marks OUT.noncanonical.
set -euo pipefail
name=$1 local=$2 url=$3 zip_sha=$4 file_sha=$5 out=$6
upper=$(echo "$name" | tr a-z A-Z)
if [ -n "$local" ]; then
  [ -f "$local" ] || { echo "$upper=$local: no such file" >&2; exit 66; }
  got=$(sha256sum "$local" | cut -d' ' -f1)
  rm -f "$out.noncanonical"
  if [ "$got" != "$file_sha" ]; then
    if [ "${XL_ALLOW_NONCANONICAL:-0}" != 1 ]; then
      echo "$local is not the canonical $name (sha256 $got, expected $file_sha);" \
           "set XL_ALLOW_NONCANONICAL=1 to continue with it (splits become 90%/5%/5%)" >&2
      exit 65
    fi
    echo "warning: $local is not the canonical $name; continuing (XL_ALLOW_NONCANONICAL=1)" >&2
    touch "$out.noncanonical"
  fi
  ln -sf "$(cd "$(dirname "$local")" && pwd)/$(basename "$local")" "$out"
  exit 0
fi
zip=$out.zip
fetch() {
  if command -v curl >/dev/null; then curl -fsSL --retry 2 -o "$2" "$1"
  elif command -v wget >/dev/null; then wget -q -O "$2" "$1"
  else return 1; fi
}
if ! fetch "$url" "$zip.part"; then
  rm -f "$zip.part"
  echo "cannot download $url (offline?); give a local copy: make -f Makefile.pipeline $name $upper=/path/to/$name" >&2
  exit 69
fi
got=$(sha256sum "$zip.part" | cut -d' ' -f1)
[ "$got" = "$zip_sha" ] || { echo "$url: checksum $got, expected $zip_sha" >&2; rm -f "$zip.part"; exit 65; }
mv "$zip.part" "$zip"
unzip -p "$zip" "$name" > "$out.part"
got=$(sha256sum "$out.part" | cut -d' ' -f1)
[ "$got" = "$file_sha" ] || { echo "$name in $zip: checksum $got, expected $file_sha" >&2; exit 65; }
mv "$out.part" "$out"
