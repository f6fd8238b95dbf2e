#!/usr/bin/env bash
# Regenerates the section-1 man page of every xl-* tool in BIN_DIR from its --help and --version
# with help2man; commit the result. tests/cli/man_sync.sh fails when a page is out of date.
#
#   scripts/gen-man.sh [BIN_DIR [OUT_DIR]]      defaults: build/bin and man/man1
#
# Each page also takes the sections of man/include/common.h2m (exit status, config files) and,
# when it exists, man/include/<tool>.h2m (notes, files, see also); the trainers also take
# man/include/training.h2m (data parallel, devices and precision).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:-$root/build/bin}" && pwd)
out=${2:-$root/man/man1}

command -v help2man >/dev/null || {
  echo "gen-man: help2man not found (Debian: apt-get install help2man)" >&2
  exit 1
}
# The same input gives the same page: the release's date (XL_RELEASE_DATE in CMakeLists.txt, moved
# with the version) and a fixed locale.
release=$(sed -n 's/^set(XL_RELEASE_DATE "\([0-9-]*\)")/\1/p' "$root/CMakeLists.txt")
[ -n "$release" ] || { echo "gen-man: no XL_RELEASE_DATE in CMakeLists.txt" >&2; exit 1; }
SOURCE_DATE_EPOCH=$(date -u -d "$release" +%s)
export SOURCE_DATE_EPOCH
export LC_ALL=C

tools=()
for exe in "$bin"/xl-*; do
  [ -f "$exe" ] && [ -x "$exe" ] && tools+=("$(basename "$exe")")
done
((${#tools[@]})) || {
  echo "gen-man: no xl-* tools in $bin" >&2
  exit 1
}

mkdir -p "$out"
wrap=$(mktemp -d)
trap 'rm -rf "$wrap"' EXIT

for t in "${tools[@]}"; do
  # help2man names the page after the program it runs, so it runs a wrapper of the same name that
  # puts each example line in a paragraph of its own (else they run together) and leaves out the
  # one-paragraph exit status summary (common.h2m has the full EXIT STATUS section).
  cat >"$wrap/$t" <<EOF
#!/bin/sh
"$bin/$t" "\$@" | awk '
  /^Examples:\$/ { examples = 1; print; next }
  examples && /^  / { print; print ""; next }
  /^Exit status:/ { skip = 1; next }
  skip && /^\$/ { skip = 0; next }
  skip { next }
  { examples = 0; print }'
EOF
  chmod +x "$wrap/$t"
  # NAME: the summary line of --help, as a man page writes it ("turn text into ...").
  summary=$("$bin/$t" --help | sed -n 2p)
  summary=${summary%.}
  summary=${summary,}
  includes=(-i "$root/man/include/common.h2m")
  [ -f "$root/man/include/$t.h2m" ] && includes+=(-i "$root/man/include/$t.h2m")
  [[ $t == xl-train-* ]] && includes+=(-i "$root/man/include/training.h2m")
  # Only --version's first line: the library versions after it depend on the build machine.
  help2man --no-info --section=1 --name="$summary" \
    --version-string="$("$bin/$t" --version | head -n 1)" \
    "${includes[@]}" --output="$out/$t.1" "$wrap/$t"
  echo "gen-man: $out/$t.1"
done
