# Sourced by the fetch-*.sh scripts: a download, and the check of a local copy against the
# canonical file's sha256.

# fetch URL FILE HINT: URL downloaded to FILE (curl or wget); when it cannot be (offline, a dead
# link), one line with the reason and HINT, how to give a local copy instead, and exit 69.
fetch() {
  local why=""
  if command -v curl >/dev/null; then
    why=$(curl -fsSL --retry 2 -o "$2" "$1" 2>&1) && return 0
    why=$(printf '%s\n' "$why" | tail -n 1)
    why=${why#curl: }
    why=${why#(*) }
  elif command -v wget >/dev/null; then
    wget -q -O "$2" "$1" && return 0
    why="wget exited $?"
  else
    why="neither curl nor wget is installed"
  fi
  rm -f "$2"
  echo "cannot download $1 (${why:-offline?}); $3" >&2
  exit 69
}

# canonical FILE SHA256 NAME [NOTE]: true when FILE is the canonical NAME. Another copy stops the
# pipeline (65) unless XL_ALLOW_NONCANONICAL=1, which warns and returns false (NOTE says what
# changes then).
canonical() {
  local got
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$got" != "$2" ] || return 0
  if [ "${XL_ALLOW_NONCANONICAL:-0}" != 1 ]; then
    echo "$1 is not the canonical $3 (sha256 $got, expected $2);" \
         "set XL_ALLOW_NONCANONICAL=1 to continue with it${4:+ ($4)}" >&2
    exit 65
  fi
  echo "warning: $1 is not the canonical $3; continuing (XL_ALLOW_NONCANONICAL=1)" >&2
  return 1
}

# download URL FILE SHA256 HINT: URL to FILE (through FILE.part), checked against SHA256 (65);
# offline, one line ending in HINT, how to give a local copy instead (69).
download() {
  fetch "$1" "$2.part" "$4"
  local got
  got=$(sha256sum "$2.part" | cut -d' ' -f1)
  [ "$got" = "$3" ] || { echo "$1: checksum $got, expected $3" >&2; rm -f "$2.part"; exit 65; }
  mv "$2.part" "$2"
}
