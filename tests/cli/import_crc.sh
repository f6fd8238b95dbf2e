#!/usr/bin/env bash
# xl-import-torch checks the zip archives it reads (torch.save files, Hugging Face's .bin shards):
# each entry's data against its CRC-32 and its local header against the central directory, before
# a tensor is used. A flipped byte inside a weight is refused (65, one line naming the entry);
# --no-verify-crc reads it anyway. Python's zipfile, which checks CRCs itself, confirms the
# damage independently.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

step "a tiny checkpoint exported as a state_dict (xl's torch.save zip), and PyTorch's own"
make_mixed_text text.txt 30000
expect 0 xl-tokenize --mode char --split 0.8,0.1,0.1 text.txt -o tokens.h5
expect 0 xl-train-phase1 --n-layer 2 --d-model 32 --n-head 2 --d-head 16 --d-inner 64 --tgt-len 16 --mem-len 16 \
  --batch-size 4 --max-steps 2 --eval-interval 0 --eval-max-tokens 200 --threads 1 --progress never tokens.h5 -o ckpt.h5
xl-import-torch --export ckpt.h5 -o sd.pt >flags.txt 2>/dev/null || fail "--export failed"
flags=$(sed -n 2p flags.txt)
files=(sd.pt)
if python3 -c 'import torch' 2>/dev/null; then
  python3 -c 'import sys, torch; torch.save(torch.load(sys.argv[1]), sys.argv[2])' sd.pt torch.pt
  files+=(torch.pt)
else
  echo "  (no PyTorch for python3: xl's own archive only)"
fi

for f in "${files[@]}"; do
  step "$f: whole, it imports; a byte flipped inside a weight, it is refused naming the entry"
  expect 0 xl-import-torch --vocab ckpt.h5 $flags "$f" -o whole.h5 -f
  # The largest entry is a weight; one byte in its middle flipped, headers untouched.
  entry=$(python3 - "$f" bad.pt <<'PY'
import struct, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
data = bytearray(open(src, "rb").read())
info = max(zipfile.ZipFile(src).infolist(), key=lambda i: i.file_size)
name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
start = info.header_offset + 30 + name_len + extra_len
data[start + info.compress_size // 2] ^= 0x10
open(dst, "wb").write(data)
print(info.filename)
PY
)
  python3 -c 'import sys, zipfile; sys.exit(0 if zipfile.ZipFile(sys.argv[1]).testzip() == sys.argv[2] else 1)' bad.pt "$entry" ||
    fail "Python's zipfile does not find $entry damaged"
  expect 65 xl-import-torch --vocab ckpt.h5 $flags bad.pt -o bad.h5
  stderr_is_one_line "bad.pt: entry $entry fails its CRC-32 check" "--no-verify-crc"
  [ -e bad.h5 ] && fail "a checkpoint was written from the damaged file"
  expect 0 xl-import-torch --no-verify-crc --vocab ckpt.h5 $flags bad.pt -o bad.h5
  h5diff -q whole.h5 bad.h5 /model /model >/dev/null && fail "--no-verify-crc imported other weights than the damaged ones"

  step "$f: a local header that disagrees with the central directory is refused"
  python3 - "$f" renamed.pt <<'PY'
import sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
data = bytearray(open(src, "rb").read())
info = zipfile.ZipFile(src).infolist()[-1]
data[info.header_offset + 30] ^= 0x01   # the first byte of the local header's copy of the name
open(dst, "wb").write(data)
PY
  expect 65 xl-import-torch --vocab ckpt.h5 $flags renamed.pt -o renamed.h5
  stderr_is_one_line "its local header disagrees with the zip's central directory"
done

step "a corpus cache is read through the same check: before it is taken for one"
expect 65 xl-import-torch --corpus bad.pt -o corpus.h5
stderr_is_one_line "bad.pt: entry" "fails its CRC-32 check"
echo "PASS"
