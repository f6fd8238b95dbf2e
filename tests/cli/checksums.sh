#!/usr/bin/env bash
# File integrity: every dataset xl writes (a checkpoint's tensors, a tokens file's splits, the
# embedded vocab) carries a checksum of its bytes; one flipped bit inside a dataset is caught by
# xl-inspect --verify, by evaluation, by training and by tokenizing against it (65 naming the
# dataset), never trained on; an intact file verifies, and old files without checksums still load.
source "$(dirname "$0")/common.bash"
PY=/usr/bin/python3
$PY -c 'import h5py' 2>/dev/null || { echo "SKIP: no python3-h5py"; exit 0; }

corpus=$(training_corpus)
xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -o tokens.h5 -q
expect 0 xl-train-phase1 --n-layer 2 --d-model 32 --n-head 2 --d-head 16 --d-inner 64 --tgt-len 16 --mem-len 16 \
  --batch-size 2 --eval-interval 0 --max-steps 3 --threads 1 -q tokens.h5 -o p1.h5

step "an intact checkpoint verifies"
expect 0 xl-inspect --verify --json p1.h5
# Every tensor (model, optimizer, generators, memories) has one, and so do the embedded vocab's
# three datasets.
datasets=$($PY -c 'import h5py, sys
f = h5py.File(sys.argv[1])
print(sum(len(f[g]) for g in ("model", "optimizer", "rng", "memory", "vocab") if g in f))' p1.h5)
[ "$(json "$TMP/out" 'j["verified"]')" = "$datasets" ] || fail "not every dataset checked ($datasets): $(cat "$TMP/out")"
[ "$(json "$TMP/out" 'j["without_checksum"]')" = 0 ] || fail "datasets without checksum: $(cat "$TMP/out")"

# flip FILE DATASET: flips one bit in the middle of DATASET's bytes (of its first chunk when it
# is chunked), in place.
flip() {
  $PY - "$1" "$2" <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    ds = f[sys.argv[2]]
    if ds.chunks:
        chunk = ds.id.get_chunk_info(0)
        off = chunk.byte_offset + min(chunk.size, ds.size * ds.dtype.itemsize) // 2
    else:
        off = ds.id.get_offset() + ds.id.get_storage_size() // 2
with open(sys.argv[1], "r+b") as raw:
    raw.seek(off)
    b = raw.read(1)[0]
    raw.seek(off)
    raw.write(bytes([b ^ 0x10]))
PY
}

step "one flipped bit in a weight is caught everywhere"
cp p1.h5 bad.h5
flip bad.h5 /model/layers.1.pos_ff.CoreNet.0.weight
expect 65 xl-inspect --verify bad.h5
stderr_is_one_line "bad.h5" "corrupt dataset /model/layers.1.pos_ff.CoreNet.0.weight"
expect 65 xl-eval-longctx --threads 1 --max-tokens 200 bad.h5 tokens.h5
stderr_is_one_line "bad.h5" "corrupt dataset /model/layers.1.pos_ff.CoreNet.0.weight"
expect 65 xl-train-phase2 --init bad.h5 --max-steps 1 --threads 1 tokens.h5 -o p2.h5
stderr_is_one_line "bad.h5" "corrupt dataset"
[ ! -e p2.h5 ] || fail "phase 2 wrote a checkpoint from a corrupt one"

step "and in the optimizer's state"
cp p1.h5 bad2.h5
flip bad2.h5 "$($PY -c 'import h5py,sys; print("/optimizer/" + sorted(h5py.File(sys.argv[1])["optimizer"])[-1])' p1.h5)"
expect 65 xl-train-phase1 --resume --max-steps 4 --threads 1 tokens.h5 -o bad2.h5
stderr_is_one_line "bad2.h5" "corrupt dataset /optimizer/"

step "a tokens file's splits and vocab carry checksums too"
expect 0 xl-inspect --verify --json tokens.h5
[ "$(json "$TMP/out" 'j["verified"]')" = 6 ] || fail "not 3 splits and 3 vocab datasets checked: $(cat "$TMP/out")"
[ "$(json "$TMP/out" 'j["without_checksum"]')" = 0 ] || fail "datasets without checksum: $(cat "$TMP/out")"
cp tokens.h5 bad_tokens.h5
flip bad_tokens.h5 /splits/train
expect 65 xl-inspect --verify bad_tokens.h5
stderr_is_one_line "bad_tokens.h5" "corrupt dataset /splits/train"
expect 65 xl-train-phase1 --n-layer 2 --d-model 32 --n-head 2 --d-head 16 --d-inner 64 --tgt-len 16 --mem-len 16 \
  --batch-size 2 --eval-interval 0 --max-steps 1 --threads 1 bad_tokens.h5 -o never.h5
stderr_is_one_line "bad_tokens.h5" "corrupt dataset /splits/train"
[ ! -e never.h5 ] || fail "phase 1 trained on a corrupt split"
expect 0 xl-eval-longctx --threads 1 --max-tokens 200 p1.h5 bad_tokens.h5  # the test split is intact
cp tokens.h5 bad_vocab.h5
flip bad_vocab.h5 /vocab/counts
expect 65 xl-eval-longctx --threads 1 --max-tokens 200 p1.h5 bad_vocab.h5
stderr_is_one_line "bad_vocab.h5" "corrupt dataset /vocab/counts"
printf 'some text\n' >text.txt
expect 65 xl-tokenize --vocab bad_vocab.h5 --split 1,0,0 text.txt -o never.h5
stderr_is_one_line "bad_vocab.h5" "corrupt dataset /vocab/counts"

step "a checkpoint without checksums (an older xl's) still loads"
cp p1.h5 old.h5
$PY - old.h5 <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    f.visititems(lambda name, obj: obj.attrs.__delitem__("sha256") if isinstance(obj, h5py.Dataset) and "sha256" in obj.attrs else None)
PY
expect 0 xl-inspect --verify old.h5
grep -q "have none" "$TMP/out" || fail "unchecked datasets not reported: $(cat "$TMP/out")"
expect 0 xl-eval-longctx --threads 1 --max-tokens 200 old.h5 tokens.h5
step "and so does a tokens file without them"
cp tokens.h5 old_tokens.h5
$PY - old_tokens.h5 <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    f.visititems(lambda name, obj: obj.attrs.__delitem__("sha256") if isinstance(obj, h5py.Dataset) and "sha256" in obj.attrs else None)
PY
expect 0 xl-inspect --verify --json old_tokens.h5
[ "$(json "$TMP/out" 'j["without_checksum"]')" = 6 ] || fail "checksums left: $(cat "$TMP/out")"
expect 0 xl-eval-longctx --threads 1 --max-tokens 200 --format tsv old.h5 old_tokens.h5

step "variable-length string attributes (xl 0.2, h5py) are refused until the trusted file is upgraded"
cp p1.h5 vl.h5
$PY - vl.h5 <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    for key in ("phase", "model_config", "state"):
        value = f.attrs[key]
        value = value.decode() if isinstance(value, bytes) else str(value)
        del f.attrs[key]
        f.attrs[key] = value  # h5py writes a str as a variable-length string
    assert h5py.check_string_dtype(f.attrs.get_id("state").dtype).length is None
PY
expect 65 xl-eval-longctx --threads 1 --max-tokens 200 vl.h5 tokens.h5
stderr_is_one_line "vl.h5" "variable-length string"
grep -q -- "--upgrade" "$TMP/err" || fail "the refusal does not name the fix: $(cat "$TMP/err")"
expect 65 xl-inspect vl.h5
expect 0 xl-inspect --upgrade --json vl.h5
[ "$(json "$TMP/out" 'j["upgraded_attributes"]')" = 3 ] || fail "not 3 attributes upgraded: $(cat "$TMP/out")"
ls vl.h5.tmp.* 2>/dev/null && fail "upgrade left a temp file"
expect 0 xl-eval-longctx --threads 1 --max-tokens 200 --format tsv vl.h5 tokens.h5
cut -f1-4 "$TMP/out" >vl.tsv
expect 0 xl-eval-longctx --threads 1 --max-tokens 200 --format tsv p1.h5 tokens.h5
cut -f1-4 "$TMP/out" | cmp -s - vl.tsv || fail "the upgraded checkpoint evaluates differently"
expect 0 xl-inspect --upgrade vl.h5
grep -q "nothing to upgrade" "$TMP/out" || fail "a second upgrade changed something: $(cat "$TMP/out")"
# Another program's HDF5 file with variable-length strings: refused, its bytes as they were.
$PY - other.h5 <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["title"] = "not xl's"
    f["x"] = [1, 2, 3]
PY
cp other.h5 other.before
expect 65 xl-inspect --upgrade other.h5
stderr_is_one_line "other.h5" "not a file of xl"
same_bytes other.h5 other.before "another program's HDF5 file given to --upgrade"
# Today's files hold fixed-length strings only, long ones included.
$PY - p1.h5 <<'PY'
import h5py, sys
with h5py.File(sys.argv[1]) as f:
    for k in f.attrs:
        t = h5py.check_string_dtype(f.attrs.get_id(k).dtype)
        assert t is None or t.length is not None, k
PY
