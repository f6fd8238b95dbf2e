#!/usr/bin/env bash
# xl-import-torch end to end: PyTorch Transformer-XL state_dicts (names, shapes and tying as
# kimiyoung/transformer-xl's MemTransformerLM.state_dict() has them) -> xl checkpoints -> back, exit
# codes and one-line errors. State dicts come from real PyTorch when a python3 with torch is found
# (python3, then /usr/bin/python3: Debian's python3-torch), and otherwise from a pure-Python writer of
# the same zip/pickle layout, so the import path is always exercised; the PyTorch-only checks
# (torch.load of our exports, load_state_dict(strict=True) into the module tree) are then skipped.
source "$(dirname "$0")/common.bash"

TORCH_PY=""
for py in ${XL_TORCH_PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import torch' 2>/dev/null; then
    TORCH_PY=$py
    break
  fi
done

cp "$XL_SOURCE_DIR/tests/cli/txl_sd.py" .
# xl's losses and updates are compared with PyTorch's in float32 on the CPU: on a GPU machine
# --device auto would compute them in bf16.
F32="--device cpu"

# Configs: char level (tied softmax, 256 byte ids), word level as wt103 (div_val 2, tied weights,
# projections tied but the first), and div_val 1 with a projection, untied weights and untie_r.
cat >char.json <<'EOF'
{"n_token": 256, "n_layer": 2, "d_model": 16, "n_head": 2, "d_head": 8, "d_inner": 24}
EOF
cat >word.json <<'EOF'
{"n_token": 60, "n_layer": 3, "d_model": 16, "n_head": 4, "d_head": 3, "d_inner": 20, "d_embed": 12,
 "cutoffs": [10, 30], "div_val": 2, "tie_projs": [false, true, true]}
EOF
cat >div1.json <<'EOF'
{"n_token": 60, "n_layer": 2, "d_model": 16, "n_head": 2, "d_head": 4, "d_inner": 20, "d_embed": 10,
 "cutoffs": [8, 20], "div_val": 1, "tie_weight": false, "tie_projs": [true, false, true], "untie_r": true}
EOF

make_mixed_text text.txt 4000
expect 0 xl-build-vocab --mode byte text.txt -o byte.tsv
N_BYTE=$(sed -n '1s/.*size=\([0-9]*\).*/\1/p' byte.tsv)
[ "$N_BYTE" = 256 ] || fail "a byte vocab has $N_BYTE entries, expected 256"
expect 0 xl-tokenize --vocab byte.tsv text.txt -o tokens.h5
python3 - <<'EOF'
with open("word.tsv", "w") as f:
    f.write("#xl-vocab 1 type=word size=60 specials=0\n")
    for i in range(60):
        f.write("%d\tw%d\t%d\n" % (i, i, 100 - i))
EOF

# Word tokens for the loss checks: the word vocab with <eos> (the line ends) as id 0.
python3 - <<'EOF'
import random
with open("word_eos.tsv", "w") as f:
    f.write("#xl-vocab 1 type=word size=60 specials=1\n0\t<eos>\t0\n")
    for i in range(1, 60):
        f.write("%d\tw%d\t%d\n" % (i, i, 100 - i))
r = random.Random(5)
with open("words.txt", "w") as f:
    for _ in range(300):
        f.write(" ".join("w%d" % min(59, 1 + int(r.expovariate(0.08))) for _ in range(12)) + "\n")
EOF
expect 0 xl-tokenize --vocab word_eos.tsv words.txt -o words.h5

modes=(--fake)
[ -n "$TORCH_PY" ] && modes+=(real)
for mode in "${modes[@]}"; do
  if [ "$mode" = real ]; then
    PY=$TORCH_PY
    FAKE=()
  else
    PY=python3
    FAKE=(--fake)
  fi
  step "[$mode] state_dicts"
  "$PY" txl_sd.py make char.json char.pt "${FAKE[@]}"
  "$PY" txl_sd.py make word.json word.pt "${FAKE[@]}"
  "$PY" txl_sd.py make div1.json div1.pt "${FAKE[@]}"
  rm -f char.h5 word.h5 div1.h5 char2.h5 back-*.pt again-*.pt again-*.h5 stdout.pt

  step "[$mode] import with every flag read off the shapes"
  expect 0 xl-import-torch --vocab byte.tsv char.pt -o char.h5
  expect 0 xl-inspect --json char.h5
  grep -q imported out || fail "xl-inspect does not show phase imported: $(head -c 300 out)"
  expect 0 xl-inspect char.h5
  grep -q "imported from char.pt" out || fail "xl-inspect does not say where char.h5 came from: $(head -c 300 out)"
  expect 0 xl-import-torch --vocab tokens.h5 char.pt -o char2.h5
  expect 0 xl-import-torch --vocab word.tsv word.pt -o word.h5
  expect 0 xl-import-torch --vocab word.tsv --cutoffs 8,20 div1.pt -o div1.h5

  if [ "$mode" = real ]; then
    step "[$mode] an imported model's loss is the PyTorch Transformer-XL's, computed by torch"
    # xl-eval-longctx (one stream, float32) against mem_transformer.py's forward written out in
    # torch ops in the test (txl_sd.py loss, float64), over segments whose memory fills and slides.
    expect 0 xl-import-torch -f --vocab word_eos.tsv word.pt -o word_eos.h5
    expect 0 xl-import-torch -f --vocab word_eos.tsv --cutoffs 8,20 --pre-lnorm true --same-length true --clamp-len 5 \
      div1.pt -o div1c.h5
    while read -r json pt h5 tokens flags; do
      expect 0 xl-eval-longctx $F32 --split valid --tgt-len 16 --mem-len 24 --batch-size 1 $h5 $tokens
      ours=$(json out 'j["loss"]')
      theirs=$("$PY" txl_sd.py loss $json $pt $tokens valid 16 24 $flags)
      python3 -c "import sys; a, b = $ours, $theirs; sys.exit(0 if abs(a - b) <= 1e-5 * abs(b) else 1)" ||
        fail "$h5: xl's loss $ours, PyTorch's $theirs"
      echo "  $h5: xl $ours, PyTorch $theirs"
    done <<'LIST'
char.json char.pt char.h5 tokens.h5
word.json word.pt word_eos.h5 words.h5
div1.json div1.pt div1c.h5 words.h5 --pre-lnorm --same-length --clamp-len 5
LIST

    step "[$mode] an imported model trains on in phase 2 as train.py trains it"
    # Each update's loss and gradient norm (before clipping) against train.py's loop written out in
    # torch (txl_sd.py train, float64, dropout off): its streams, each chunk's memories across
    # segments, clip_grad_norm_, Adam, the cosine schedule. xl with dropout off (and SCH off, as it
    # is by default for a model trained elsewhere), float32.
    cat >compare_updates.py <<'EOF'
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if '"event":"train"' in l]
theirs = [[float(x) for x in l.split()] for l in open(sys.argv[2])]
if not ours or len(ours) != len(theirs):
    sys.exit("%d updates logged by xl, %d by PyTorch" % (len(ours), len(theirs)))
worst = max(max(abs(o["loss"] - t[0]) / t[0], abs(o["grad_norm"] - t[1]) / t[1]) for o, t in zip(ours, theirs))
print("  %d updates, loss %.6f -> %.6f, largest relative difference %.1e" % (len(ours), theirs[0][0], theirs[-1][0], worst))
sys.exit(0 if worst <= 1e-5 else 1)
EOF
    while read -r json pt h5 tokens chunks flags; do
      expect 0 xl-train-phase2 $F32 -f --init $h5 $tokens -o tuned.h5 --dropout 0 --batch-size 4 --batch-chunk $chunks \
        --tgt-len 8 --mem-len 12 --max-steps 12 --lr 0.002 --clip 0.25 --log-interval 1 --eval-interval 0 --metrics tuned.jsonl
      grep -q "fresh optimizer state ($h5, an imported model" err || fail "phase 2 does not say that $h5 starts a fresh optimizer: $(cat err)"
      expect 0 xl-inspect tuned.h5
      grep -q "imported from $pt" out || fail "the tuned model does not say where it came from: $(head -c 300 out)"
      "$PY" txl_sd.py train $json $pt $tokens train 4 8 12 12 0.002 0.25 --batch-chunk $chunks $flags >theirs.txt
      python3 compare_updates.py tuned.jsonl theirs.txt || fail "$h5: xl's updates are not train.py's"
    done <<'LIST'
char.json char.pt char.h5 tokens.h5 1
word.json word.pt word_eos.h5 words.h5 2
div1.json div1.pt div1c.h5 words.h5 1 --pre-lnorm --same-length --clamp-len 5
LIST

    step "[$mode] a whole pickled model (train.py's model.pt) says what its tensors cannot"
    # torch.save(model, f) of div1.pt's model as mem_transformer.py pickles it: pre_lnorm, same_length,
    # clamp_len, the cutoffs of its div_val 1 softmax and the dropouts come from its attributes,
    # so it imports without flags as the state_dict did with them; also inside DataParallel.
    python3 -c 'import json; c = json.load(open("div1.json")); c.update(tgt_len=16, mem_len=24, pre_lnorm=True,
same_length=True, clamp_len=5, dropout=0.2, dropatt=0.05); json.dump(c, open("div1m.json", "w"))'
    "$PY" txl_sd.py module div1m.json div1.pt model.pt
    "$PY" txl_sd.py module div1m.json div1.pt dp.pt --data-parallel
    expect 0 xl-import-torch -f --vocab word_eos.tsv model.pt -o model.h5
    grep -q "trained with tgt_len 16 and mem_len 24" err || fail "xl-import-torch does not report the training shape: $(cat err)"
    expect 0 xl-import-torch -f --vocab word_eos.tsv dp.pt -o dp.h5
    config() { xl-inspect --json "$1" | json /dev/stdin 'j["checkpoint"]["model_config"]'; }
    python3 -c 'import json, sys
m, dp, sd = (json.loads(a) for a in sys.argv[1:])
assert m == dp, (m, dp)
assert (m["dropout"], m["dropatt"]) == (0.2, 0.05), m
m.update(dropout=sd["dropout"], dropatt=sd["dropatt"])
assert m == sd, (m, sd)' "$(config model.h5)" "$(config dp.h5)" "$(config div1c.h5)" ||
      fail "the pickled model imports otherwise than its state_dict with the flags"
    expect 0 xl-import-torch -f --export --untie-r true model.h5 -o model-back.pt
    expect 0 xl-import-torch -f --export --untie-r true div1c.h5 -o div1c-back.pt
    "$PY" txl_sd.py compare model-back.pt div1c-back.pt || fail "the pickled model's tensors differ from its state_dict's"
    expect 65 xl-import-torch -f --vocab word_eos.tsv --pre-lnorm false model.pt -o x.h5
    stderr_is_one_line model.pt "--pre-lnorm false" "pre_lnorm = true"
    # Behaviour may change, as eval.py sets same_length and clamp_len on the model it loads.
    expect 0 xl-import-torch -f --vocab word_eos.tsv --same-length false --clamp-len 7 model.pt -o override.h5
    [ "$(config override.h5 | json /dev/stdin '[j["same_length"], j["clamp_len"]]')" = "[false, 7]" ] ||
      fail "--same-length and --clamp-len do not override the pickled model's: $(config override.h5)"
    python3 -c 'import json; c = json.load(open("div1m.json")); c.update(attn_type=2); json.dump(c, open("abs.json", "w"))'
    "$PY" txl_sd.py module abs.json div1.pt abs.pt
    expect 65 xl-import-torch -f --vocab word_eos.tsv abs.pt -o x.h5
    stderr_is_one_line abs.pt "attn_type 2"
    "$PY" -c 'import torch; torch.save(torch.nn.Linear(2, 2), "linear.pt")'
    expect 65 xl-import-torch -f --vocab word_eos.tsv linear.pt -o x.h5
    stderr_is_one_line linear.pt "torch.nn.modules.linear.Linear" MemTransformerLM

    step "[$mode] the legacy format (torch.save before PyTorch 1.6) imports as the zip format does"
    "$PY" txl_sd.py module div1m.json div1.pt legacy-model.pt --legacy
    "$PY" txl_sd.py legacy div1.pt legacy-sd.pt
    expect 0 xl-import-torch -f --vocab word_eos.tsv legacy-model.pt -o legacy-model.h5
    expect 0 xl-import-torch -f --vocab word_eos.tsv --cutoffs 8,20 --pre-lnorm true --same-length true --clamp-len 5 \
      legacy-sd.pt -o legacy-sd.h5
    [ "$(config legacy-model.h5)" = "$(config model.h5)" ] || fail "the legacy model's config differs: $(config legacy-model.h5)"
    for h5 in legacy-model legacy-sd; do
      expect 0 xl-import-torch -f --export --untie-r true $h5.h5 -o $h5-back.pt
      "$PY" txl_sd.py compare $h5-back.pt div1c-back.pt || fail "$h5.pt imports otherwise than the zip format"
    done

    step "[$mode] Hugging Face's names (transformer.<name> beside crit.<name>) import as they are"
    "$PY" -c 'import collections, torch
sd = torch.load("div1.pt")
torch.save(collections.OrderedDict((n if n.startswith("crit.") else "transformer." + n, t) for n, t in sd.items()), "hf.pt")'
    expect 0 xl-import-torch -f --vocab word_eos.tsv --cutoffs 8,20 --pre-lnorm true --same-length true --clamp-len 5 hf.pt -o hf.h5
    expect 0 xl-import-torch -f --export --untie-r true hf.h5 -o hf-back.pt
    "$PY" txl_sd.py compare hf-back.pt div1c-back.pt || fail "Hugging Face's names import otherwise than the reference's"

    step "[$mode] a corpus cache (data_utils.py's cache.pt) becomes a tokens file with its vocab and ids"
    "$PY" txl_sd.py corpus words.txt cache.pt
    expect 0 xl-import-torch --corpus cache.pt -o corpus.h5
    grep -q "lowercases text before looking words up (lower_case)" err || fail "a lowercasing vocab is not named: $(cat err)"
    "$PY" - <<'EOF' || fail "the tokens file does not hold the cache's vocab and ids"
import h5py, sys, torch, types
for module, name in (("data_utils", "Corpus"), ("vocabulary", "Vocab")):  # the cache's classes
    sys.modules[module] = types.ModuleType(module)
    setattr(sys.modules[module], name, type(name, (), {}))
c, f = torch.load("cache.pt", weights_only=False), h5py.File("corpus.h5", "r")  # an object, not tensors only
for s in ("train", "valid", "test"):
    assert f["splits"][s][:].astype("int64").tolist() == getattr(c, s).tolist(), s
# xl-tokenize --decode ends a line at each <eos>.
open("valid.txt", "w").write(" ".join(c.vocab.idx2sym[i] for i in c.valid.tolist() if c.vocab.idx2sym[i] != "<eos>"))
EOF
    expect 0 xl-tokenize --decode valid corpus.h5
    [ "$(tr '\n' ' ' <out | sed 's/ *$//')" = "$(cat valid.txt)" ] || fail "the decoded split is not the cache's symbols"
    expect 0 xl-import-torch -f --vocab corpus.h5 word.pt -o word-corpus.h5
    expect 65 xl-import-torch --vocab corpus.h5 cache.pt -o x.h5
    stderr_is_one_line cache.pt "--corpus"
    # The cache itself serves xl-import-torch --vocab; xl-tokenize (no LibTorch) names the way.
    expect 0 xl-import-torch -f --vocab cache.pt word.pt -o word-cache.h5
    vocab_sha() { xl-inspect --json "$1" | json /dev/stdin 'j["attributes"]["vocab_sha256"]'; }
    [ "$(vocab_sha word-cache.h5)" = "$(vocab_sha corpus.h5)" ] || fail "--vocab cache.pt embeds another vocab than --corpus makes"
    expect 65 xl-tokenize --vocab cache.pt words.txt -o x.h5
    stderr_is_one_line cache.pt "a torch.save file, not a vocab" "xl-import-torch"
    expect 65 xl-import-torch --corpus word.pt -o x.h5
    stderr_is_one_line word.pt "corpus cache"
    expect 64 xl-import-torch --corpus --vocab word.tsv cache.pt -o x.h5
    stderr_is_one_line "--vocab"

    step "[$mode] Hugging Face's vocab.bin (a Vocab's __dict__, its UTF-8 read as Latin-1) and model directory"
    # transformers' converter read the Python 2 corpus pickle as Latin-1 and torch.save'd the Vocab's
    # __dict__ (transformers#271: "EnquÃªtes"): xl takes it with the symbols decoded, and the
    # model's loss on text tokenized with that vocab is the PyTorch forward's.
    python3 - <<'EOF'
import random
r = random.Random(11)
words = ["w%d" % i for i in range(40)] + ["café", "Enquêtes", "東京", "naïve", "<unk>"]
with open("hf.txt", "w", encoding="utf-8") as f:
    for _ in range(200):
        f.write(" ".join(r.choice(words) for _ in range(10)) + "\n")
EOF
    "$PY" txl_sd.py corpus hf.txt hfcache.pt
    "$PY" txl_sd.py hf-vocab hfcache.pt vocab.bin
    "$PY" txl_sd.py hf-vocab hfcache.pt vocab-zip.bin --zip
    "$PY" txl_sd.py hf-vocab hfcache.pt vocab.pkl --pickle
    grep -q 'EnquÃªtes' vocab.bin || fail "the test's vocab.bin does not hold its symbols as Hugging Face's does"
    expect 0 xl-import-torch --corpus hfcache.pt -o hfcorpus.h5
    n_hf=$(xl-inspect --json hfcorpus.h5 | json /dev/stdin 'j["attributes"]["vocab_size"]')
    python3 -c 'import json, sys; c = json.load(open("word.json")); c["n_token"] = int(sys.argv[1]); json.dump(c, open("hf.json", "w"))' "$n_hf"
    "$PY" txl_sd.py make hf.json hfm.pt
    "$PY" -c 'import collections, torch
sd = torch.load("hfm.pt")
torch.save(collections.OrderedDict((n if n.startswith("crit.") else "transformer." + n, t) for n, t in sd.items()), "hfm-hf.pt")'
    for v in vocab.bin vocab-zip.bin vocab.pkl; do
      expect 0 xl-import-torch -f --vocab $v hfm-hf.pt -o hfm.h5
      grep -q "4 symbols were UTF-8 read as Latin-1" err || fail "$v: the Latin-1-read symbols are not reported: $(cat err)"
      ! grep -q "lower_case" err || fail "$v: a vocab that keeps the case is said to lowercase"
      [ "$(vocab_sha hfm.h5)" = "$(vocab_sha hfcorpus.h5)" ] || fail "$v: the vocab is not the cache's, decoded"
    done
    expect 0 xl-tokenize --vocab hfm.h5 --valid hf.txt -o hfwords.h5
    # xl's loss of CKPT on hfwords.h5's valid split equals PyTorch's of the state_dict PT (1e-5).
    hf_loss_matches() {
      local label=$1 ckpt=$2 pt=$3
      shift 3
      expect 0 xl-eval-longctx $F32 --split valid --tgt-len 16 --mem-len 24 --batch-size 1 "$ckpt" hfwords.h5
      ours=$(json out 'j["loss"]')
      theirs=$("$PY" txl_sd.py loss hf.json "$pt" hfwords.h5 valid 16 24 "$@")
      python3 -c "import sys; a, b = $ours, $theirs; sys.exit(0 if abs(a - b) <= 1e-5 * abs(b) else 1)" ||
        fail "$label: xl's loss $ours, PyTorch's $theirs"
      echo "  $label: xl $ours, PyTorch $theirs"
    }
    hf_loss_matches "the Hugging Face vocab's model" hfm.h5 hfm.pt
    hf_vocab_loss=$ours
    # A word outside the vocab becomes the vocab's <unk>, as Hugging Face's tokenizer makes it.
    printf 'café zebra\n' >oov.txt
    expect 0 xl-tokenize --vocab hfm.h5 --test oov.txt -o oov.h5
    grep -q "1 mapped to <unk>" err || fail "a word outside the vocab is not <unk>: $(cat err)"
    expect 0 xl-tokenize --decode test oov.h5
    [ "$(cat out)" = "café <unk>" ] || fail "oov.txt decodes to '$(cat out)'"
    # The directory as save_pretrained writes it: the state_dict with Hugging Face's names (the legacy
    # format, as the hub's 2019 files), config.json with TransfoXLConfig's keys, and vocab.pkl.
    mkdir -p hfdir
    "$PY" txl_sd.py legacy hfm-hf.pt hfdir/pytorch_model.bin
    cp vocab.pkl hfdir/vocab.pkl
    python3 - "$n_hf" <<'EOF'
import json, sys
c = json.load(open("hf.json"))
json.dump({"model_type": "transfo-xl", "vocab_size": int(sys.argv[1]), "cutoffs": c["cutoffs"], "d_model": c["d_model"],
           "d_embed": c["d_embed"], "n_head": c["n_head"], "d_head": c["d_head"], "d_inner": c["d_inner"],
           "div_val": c["div_val"], "pre_lnorm": False, "n_layer": c["n_layer"], "mem_len": 24, "clamp_len": 5,
           "same_length": True, "tie_projs": c["tie_projs"], "attn_type": 0, "sample_softmax": -1, "adaptive": True,
           "dropout": 0.1, "dropatt": 0.0, "untie_r": False, "layer_norm_epsilon": 1e-5, "eos_token_id": 0},
          open("hfdir/config.json", "w"), indent=2)
EOF
    expect 0 xl-import-torch hfdir -o hfdir.h5
    [ "$(vocab_sha hfdir.h5)" = "$(vocab_sha hfcorpus.h5)" ] || fail "the directory's vocab.pkl is not taken as the vocab"
    [ "$(config hfdir.h5 | json /dev/stdin '[j["same_length"], j["clamp_len"], j["dropout"]]')" = "[true, 5, 0.1]" ] ||
      fail "config.json's same_length, clamp_len and dropout are not the model's: $(config hfdir.h5)"
    hf_loss_matches "the directory's model (same_length, clamp_len 5 from config.json)" hfdir.h5 hfm.pt --same-length --clamp-len 5
    hf_dir_loss=$ours
    # The directory as it now is imports to the model of its pytorch_model.bin above.
    dir_gives_its_loss() {
      local what=$1 h5=$2
      expect 0 xl-import-torch hfdir -o "$h5"
      grep -q -- "--pretokenize moses" err || fail "importing a Hugging Face word model does not point to --pretokenize moses"
      expect 0 xl-eval-longctx $F32 --split valid --tgt-len 16 --mem-len 24 --batch-size 1 "$h5" hfwords.h5
      [ "$(json out 'j["loss"]')" = "$hf_dir_loss" ] ||
        fail "the directory's $what gives loss $(json out 'j["loss"]'), its pytorch_model.bin $hf_dir_loss"
    }
    expect 65 xl-import-torch --pre-lnorm true hfdir -o x.h5
    stderr_is_one_line "config.json" "--pre-lnorm true is given, but config.json has pre_lnorm = false"
    # save_pretrained's default since transformers 4.35: model.safetensors, a tied tensor listed once
    # (the file written out by the test, as the format specifies). The same model, alone or in the
    # directory, where transformers takes it before pytorch_model.bin.
    "$PY" txl_sd.py safetensors hfm-hf.pt hfm.safetensors
    python3 - <<'EOF'
import json, struct
f = open("hfm.safetensors", "rb")
names = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
tied = [n for n in names if n.startswith("crit.out_layers.") and n.endswith(".weight")]
assert "transformer.word_emb.emb_layers.0.weight" in names and not tied, "the tied weights are not listed once: %s" % tied
EOF
    expect 0 xl-import-torch --vocab vocab.bin hfm.safetensors -o hfst.h5
    expect 0 xl-eval-longctx $F32 --split valid --tgt-len 16 --mem-len 24 --batch-size 1 hfst.h5 hfwords.h5
    [ "$(json out 'j["loss"]')" = "$hf_vocab_loss" ] ||
      fail "the model read from safetensors has loss $(json out 'j["loss"]'), from torch.save $hf_vocab_loss"
    # Models are often saved in half precision (model.half() rounds the buffers too, inv_freq
    # among them): their loss is that of the rounded weights in float32.
    "$PY" -c 'import collections, torch
torch.save(collections.OrderedDict((n, t.half()) for n, t in torch.load("hfm-hf.pt").items()), "hfm16-hf.pt")
torch.save(collections.OrderedDict((n, t.half().float()) for n, t in torch.load("hfm.pt").items()), "hfm16.pt")'
    "$PY" txl_sd.py safetensors hfm16-hf.pt hfm16.safetensors
    expect 0 xl-import-torch --vocab vocab.bin hfm16.safetensors -o hfm16.h5
    hf_loss_matches "the model saved in float16 (safetensors)" hfm16.h5 hfm16.pt
    cp hfm.safetensors hfdir/model.safetensors
    printf 'not a state_dict' >hfdir/pytorch_model.bin
    dir_gives_its_loss "model.safetensors" hfdir-st.h5
    expect 64 xl-import-torch --key model_state hfdir -o x.h5
    stderr_is_one_line "model.safetensors" "--key does not apply"
    head -c -4 hfm.safetensors >hfdir/model.safetensors
    expect 65 xl-import-torch hfdir -o x.h5
    stderr_is_one_line "model.safetensors" "truncated?"
    # config.json says what is tied (tie_projs false,true,true): a file that lacks the head's
    # untied projection is refused, not read as if it were tied.
    "$PY" -c 'import torch; sd = torch.load("hfm-hf.pt"); del sd["crit.out_projs.0"]; torch.save(sd, "noproj-hf.pt")'
    "$PY" txl_sd.py safetensors noproj-hf.pt hfdir/model.safetensors
    expect 65 xl-import-torch -q hfdir -o x.h5
    stderr_is_one_line "model.safetensors" "lacks tensor 'crit.out_projs.0'"
    rm hfdir/model.safetensors
    sed 's/"transfo-xl"/"gpt2"/' hfdir/config.json >config.gpt2 && mv config.gpt2 hfdir/config.json
    expect 65 xl-import-torch hfdir -o x.h5
    stderr_is_one_line "config.json" "not Hugging Face's TransfoXL"
    rm hfdir/pytorch_model.bin
    expect 66 xl-import-torch hfdir -o x.h5
    stderr_is_one_line "hfdir: no model.safetensors or pytorch_model.bin"
    # Shards, as save_pretrained writes a model above its max_shard_size: the index names each
    # tensor's file. The one file's model, in either format.
    sed 's/"gpt2"/"transfo-xl"/' hfdir/config.json >config.txl && mv config.txl hfdir/config.json
    python3 - <<'EOF'
import json, struct
# hfm.safetensors cut in two: every other tensor to the second shard, offsets from each shard's start.
f = open("hfm.safetensors", "rb")
n = struct.unpack("<Q", f.read(8))[0]
header, data = json.loads(f.read(n)), f.read()
names = [k for k in header if k != "__metadata__"]
weight_map = {}
for s, part in enumerate((names[0::2], names[1::2])):
    file = "model-%05d-of-00002.safetensors" % (s + 1)
    h, chunks, size = {"__metadata__": {"format": "pt"}}, [], 0
    for k in part:
        a, b = header[k]["data_offsets"]
        h[k] = dict(header[k], data_offsets=[size, size + b - a])
        chunks.append(data[a:b])
        size += b - a
        weight_map[k] = file
    raw = json.dumps(h).encode()
    raw += b" " * (-len(raw) % 8)
    open("hfdir/" + file, "wb").write(struct.pack("<Q", len(raw)) + raw + b"".join(chunks))
json.dump({"metadata": {"total_size": len(data)}, "weight_map": weight_map}, open("hfdir/model.safetensors.index.json", "w"))
EOF
    dir_gives_its_loss "safetensors shards" hfdir-shards.h5
    expect 64 xl-import-torch --key model_state hfdir -o x.h5
    stderr_is_one_line "model.safetensors.index.json" "--key does not apply"
    cp hfdir/model.safetensors.index.json index.json
    index_edit() {  # the index with one change to its weight_map, in python
      python3 -c "import json; j = json.load(open('index.json')); m = j['weight_map']; $1; json.dump(j, open('hfdir/model.safetensors.index.json', 'w'))"
    }
    index_edit "k = sorted(m)[0]; m[k] = m[k].replace('00001-of', '00003-of').replace('00002-of', '00001-of').replace('00003-of', '00002-of')"
    expect 65 xl-import-torch -q hfdir -o x.h5
    stderr_is_one_line "holds tensor '" "which hfdir/model.safetensors.index.json puts in hfdir/model-0000"
    index_edit "m['crit.out_projs.9'] = 'model-00001-of-00002.safetensors'"
    expect 65 xl-import-torch -q hfdir -o x.h5
    stderr_is_one_line "model-00001-of-00002.safetensors: lacks tensor 'crit.out_projs.9', which hfdir/model.safetensors.index.json puts there"
    index_edit "del m[sorted(m)[0]]"
    expect 65 xl-import-torch -q hfdir -o x.h5
    stderr_is_one_line "holds tensor '" "which hfdir/model.safetensors.index.json does not list"
    index_edit "m[sorted(m)[0]] = '../model-00001-of-00002.safetensors'"
    expect 65 xl-import-torch -q hfdir -o x.h5
    stderr_is_one_line "model.safetensors.index.json: weight_map puts" "not a file name in the directory"
    echo '{"metadata": {}}' >hfdir/model.safetensors.index.json
    expect 65 xl-import-torch -q hfdir -o x.h5
    stderr_is_one_line "model.safetensors.index.json: no weight_map"
    rm hfdir/model*
    # torch.save shards (pytorch_model-0000N-of-00002.bin), every name of a tied tensor listed.
    "$PY" - <<'EOF'
import collections, json, torch
sd = torch.load("hfm-hf.pt")
names, weight_map = list(sd), {}
for s, part in enumerate((names[: len(names) // 2], names[len(names) // 2 :])):
    file = "pytorch_model-%05d-of-00002.bin" % (s + 1)
    torch.save(collections.OrderedDict((k, sd[k]) for k in part), "hfdir/" + file)
    weight_map.update((k, file) for k in part)
json.dump({"metadata": {}, "weight_map": weight_map}, open("hfdir/pytorch_model.bin.index.json", "w"))
EOF
    dir_gives_its_loss "torch.save shards" hfdir-binshards.h5
    rm hfdir/pytorch_model*
    expect 65 xl-tokenize --vocab vocab.pkl --test oov.txt -o x.h5
    stderr_is_one_line vocab.pkl "a pickle, not a vocab" "xl-import-torch"
    expect 65 xl-import-torch --corpus vocab.bin -o x.h5
    stderr_is_one_line vocab.bin "--vocab"
    expect 65 xl-import-torch --vocab word.tsv vocab.bin -o x.h5
    stderr_is_one_line vocab.bin "give it as --vocab"

    step "[$mode] Hugging Face's corpus.bin (a Corpus's __dict__ without its vocab, the splits NumPy arrays) and its directory"
    # transformers' converter saved the TensorFlow code's corpus pickle without its vocab, the splits
    # int64 NumPy arrays (torch.save, in the legacy format in 2019); its own TransfoXLCorpus holds
    # LongTensors. Each imports to corpus.bin's ids, as torch.load reads them, with vocab.bin's vocab.
    "$PY" txl_sd.py hf-corpus hfcache.pt corpus-np.bin
    "$PY" txl_sd.py hf-corpus hfcache.pt corpus-np-zip.bin --zip
    "$PY" txl_sd.py hf-corpus hfcache.pt corpus-t.bin --zip --tensors
    for c in corpus-np.bin corpus-np-zip.bin corpus-t.bin; do
      expect 0 xl-import-torch -f --corpus --vocab vocab.bin $c -o hfc.h5
      [ "$(vocab_sha hfc.h5)" = "$(vocab_sha hfcorpus.h5)" ] || fail "$c: the vocab is not vocab.bin's"
      "$PY" - $c <<'EOF' || fail "$c: the tokens file does not hold corpus.bin's ids"
import h5py, numpy, sys, torch
c, f = torch.load(sys.argv[1], weights_only=False), h5py.File("hfc.h5", "r")
for s in ("train", "valid", "test"):
    assert isinstance(c[s], numpy.ndarray if "-np" in sys.argv[1] else torch.Tensor), (s, type(c[s]))
    assert f["splits"][s][:].astype("int64").tolist() == numpy.asarray(c[s]).tolist(), s
EOF
    done
    # The hub's directory holds corpus.bin beside vocab.bin or vocab.pkl: found by themselves.
    cp corpus-np.bin hfdir/corpus.bin
    expect 0 xl-import-torch --corpus hfdir -o hfc-dir.h5
    [ "$(vocab_sha hfc-dir.h5)" = "$(vocab_sha hfcorpus.h5)" ] || fail "the directory's vocab.pkl is not corpus.bin's vocab"
    "$PY" -c 'import h5py, sys; a, b = (h5py.File(f, "r")["splits"] for f in sys.argv[1:])
sys.exit(any((a[s][:] != b[s][:]).any() for s in ("train", "valid", "test")))' hfc.h5 hfc-dir.h5 ||
      fail "the directory's corpus.bin gives other ids than the file"
    ! grep -q "lower_case" err || fail "a tokenizer that keeps the case is said to lowercase: $(cat err)"
    # transformers' tokenizer keeps the lower_case it was made with (tokenizer_config.json's, else
    # false) over the vocab file's: the reference's Vocab default (true) in vocab.bin is not its.
    "$PY" -c 'import torch; v = torch.load("vocab.bin"); v["lower_case"] = True; torch.save(v, "hfdir/vocab.bin")'
    expect 0 xl-import-torch -f --corpus hfdir -o hfc-dir.h5
    ! grep -q "lower_case" err || fail "vocab.bin's lower_case is taken over transformers' default: $(cat err)"
    echo '{"lower_case": true, "special": ["<eos>"]}' >hfdir/tokenizer_config.json
    expect 0 xl-import-torch -f --corpus hfdir -o hfc-dir.h5
    grep -q "its tokenizer (tokenizer_config.json) lowercases text" err || fail "tokenizer_config.json's lower_case is not named: $(cat err)"
    echo '{"lower_case": "yes"}' >hfdir/tokenizer_config.json
    expect 65 xl-import-torch -f --corpus hfdir -o hfc-dir.h5
    stderr_is_one_line tokenizer_config.json "lower_case"
    rm hfdir/tokenizer_config.json hfdir/vocab.bin
    mkdir -p lone
    cp corpus-np.bin lone/corpus.bin
    expect 66 xl-import-torch --corpus lone/corpus.bin -o x.h5
    stderr_is_one_line corpus.bin "no vocab" "--vocab"
    rm lone/corpus.bin
    expect 66 xl-import-torch --corpus lone -o x.h5
    stderr_is_one_line lone "no corpus.bin"
    expect 64 xl-import-torch --corpus --vocab vocab.bin hfcache.pt -o x.h5
    stderr_is_one_line "--vocab does not apply to hfcache.pt"
    expect 65 xl-import-torch --vocab corpus-np.bin hfm-hf.pt -o x.h5
    stderr_is_one_line corpus-np.bin "a corpus without its vocab"

    step "[$mode] enwik8's and text8's caches become byte and char vocabs in the same id order, and report bpc"
    # Their symbols are one character each (prep_enwik8.py: a byte as its decimal value; prep_text8.py:
    # '_' for the space), and the reference reports bpc for them. On the real enwik8 and text8
    # prefixes where ../shared has them, else on generated text.
    e8_text=$(shared_data enwik8/enwik8.head-150000)
    [ -n "$e8_text" ] || e8_text=text.txt
    t8_real=$(shared_data text8/text8.head-3010294)
    if [ -n "$t8_real" ]; then
      head -c 200000 "$t8_real" >t8.txt
    else
      python3 -c 'import random; r = random.Random(8); w = ["the", "cat", "sat", "on", "a", "mat", "zebra", "quixotic"]
open("t8.txt", "w").write(" " + " ".join(r.choice(w) for _ in range(3000)))'
    fi
    cp "$e8_text" e8.txt
    echo "  enwik8 from $e8_text, text8 from ${t8_real:-generated text}"
    "$PY" txl_sd.py corpus e8.txt e8.pt enwik8
    "$PY" txl_sd.py corpus t8.txt t8.pt text8
    expect 0 xl-import-torch --corpus e8.pt -o e8.h5
    grep -q "enwik8 corpus, byte vocab of" err || fail "the enwik8 cache is not a byte vocab: $(cat err)"
    # Both keep Vocab's default lower_case: a no-op on enwik8's decimal symbols, not on text8's letters.
    ! grep -q "lower_case" err || fail "the enwik8 vocab is said to lowercase bytes: $(cat err)"
    expect 0 xl-import-torch --corpus t8.pt -o t8.h5
    grep -q "lowercases text before looking words up (lower_case)" err || fail "the text8 vocab's lowercasing is not named: $(cat err)"
    n_chars=$(python3 -c 'import sys; print(len(set(open("t8.txt").read().strip())))')
    grep -q "text8 corpus, char vocab of $n_chars (0 special)" err || fail "the text8 cache is not a char vocab of $n_chars: $(cat err)"
    # What each split is as text: the prep scripts' input less what they and data_utils.py drop
    # (enwik8: the newline bytes; text8: the spaces around each part).
    "$PY" - <<'PY' || fail "the tokens files do not hold the caches' ids"
import h5py, sys, torch, types
for module, name in (("data_utils", "Corpus"), ("vocabulary", "Vocab")):
    sys.modules[module] = types.ModuleType(module)
    setattr(sys.modules[module], name, type(name, (), {}))
e8, t8 = open("e8.txt", "rb").read(), open("t8.txt").read()
for ds, data in (("e8", e8), ("t8", t8)):
    c, f = torch.load(ds + ".pt", weights_only=False), h5py.File(ds + ".h5", "r")
    cut = [0, len(data) * 8 // 10, len(data) * 9 // 10, len(data)]
    for i, s in enumerate(("train", "valid", "test")):
        assert f["splits"][s][:].astype("int64").tolist() == getattr(c, s).tolist(), (ds, s)
        part = data[cut[i]:cut[i + 1]]
        if ds == "e8":
            open("e8-%s.txt" % s, "wb").write(part.replace(b"\n", b""))
        else:
            open("t8-%s.txt" % s, "w").write(part.strip())
PY
    for ds in e8 t8; do
      for s in train valid test; do
        expect 0 xl-tokenize --decode $s $ds.h5
        cmp -s out $ds-$s.txt || fail "$ds.h5's $s split does not decode to its text"
      done
      # The vocab tokenizes that text to the very ids of the cache.
      expect 0 xl-tokenize --vocab $ds.h5 --train $ds-train.txt --valid $ds-valid.txt --test $ds-test.txt -o $ds-again.h5
      "$PY" -c 'import h5py, sys; a, b = (h5py.File(f, "r")["splits"] for f in sys.argv[1:])
sys.exit(any((a[s][:] != b[s][:]).any() for s in ("train", "valid", "test")))' $ds.h5 $ds-again.h5 ||
        fail "xl-tokenize --vocab $ds.h5 gives other ids than the cache"
    done
    # Hugging Face's form of the enwik8 cache: corpus.bin's dataset makes vocab.bin's a byte vocab.
    "$PY" txl_sd.py hf-vocab e8.pt e8-vocab.bin
    "$PY" txl_sd.py hf-corpus e8.pt e8-corpus.bin
    expect 0 xl-import-torch --corpus --vocab e8-vocab.bin e8-corpus.bin -o e8-hf.h5
    grep -q "enwik8 corpus, byte vocab" err || fail "Hugging Face's enwik8 corpus.bin is not a byte vocab: $(cat err)"
    [ "$(vocab_sha e8-hf.h5)" = "$(vocab_sha e8.h5)" ] || fail "Hugging Face's enwik8 corpus.bin has another vocab than the cache"
    expect 65 xl-tokenize -q --vocab e8.h5 --test e8.txt -o x.h5
    stderr_is_one_line e8.txt "'\\n' is not in the vocab" "drops line ends" "tr -d"
    # A model of the enwik8 vocab: its loss is the reference's, reported in bits per byte.
    python3 -c 'import json, sys; c = json.load(open("char.json")); c["n_token"] = int(sys.argv[1]); json.dump(c, open("e8.json", "w"))' \
      "$(xl-inspect --json e8.h5 | json /dev/stdin 'j["vocab"]["size"]')"
    "$PY" txl_sd.py make e8.json e8m.pt
    expect 0 xl-import-torch --vocab e8.h5 e8m.pt -o e8m.h5
    expect 0 xl-eval-longctx $F32 --split valid --tgt-len 16 --mem-len 24 --batch-size 1 e8m.h5 e8.h5
    ours=$(json out '[j["loss"], j["bpc"]]')
    theirs=$("$PY" txl_sd.py loss e8.json e8m.pt e8.h5 valid 16 24)
    python3 -c "import math, sys; (a, bpc), b = $ours, $theirs
sys.exit(0 if abs(a - b) <= 1e-5 * abs(b) and abs(bpc - a / math.log(2)) < 1e-9 else 1)" ||
      fail "the enwik8 model: xl's loss and bpc $ours, PyTorch's loss $theirs"
    echo "  enwik8 model: xl loss and bpc $ours, PyTorch loss $theirs"

    step "[$mode] examples/migrate-pytorch-checkpoint.sh takes a cache and a model.pt as they are"
    python3 -c 'import json; c = json.load(open("e8.json")); c.update(tgt_len=16, mem_len=16); json.dump(c, open("e8m.json", "w"))'
    "$PY" txl_sd.py module e8m.json e8m.pt e8-model.pt
    mkdir -p example
    (cd example && bash "$XL_SOURCE_DIR/examples/migrate-pytorch-checkpoint.sh" ../e8.pt ../e8-model.pt) >example.out 2>&1 ||
      { sed 's/^/  | /' example.out >&2; fail "the migration example failed"; }
    grep -q '"bpc"' example.out && [ -s example/tuned_state.pt ] || fail "the migration example evaluated or exported nothing"
  fi

  if [ "$mode" = --fake ]; then
    step "[$mode] import with the flags given"
    expect 0 xl-import-torch -f --vocab byte.tsv --n-layer 2 --d-model 16 --n-head 2 --d-head 8 --d-inner 24 \
      --n-token 256 --tie-weight true --div-val 1 char.pt -o char2.h5
    expect 0 xl-import-torch -f --vocab word.tsv --n-layer 3 --d-model 16 --n-head 4 --d-head 3 --d-inner 20 \
      --d-embed 12 --cutoffs 10,30 --div-val 2 --tie-weight true --tie-projs false,true,true word.pt -o word2.h5
    printf 'n-layer = 3\nd-model = 16\ncutoffs = 10,30\ntie-projs = 0,1,1\npre-lnorm = false\n' >word.ini
    expect 0 xl-import-torch -f -c word.ini --vocab word.tsv word.pt -o word2.h5
    expect 0 xl-import-torch -f --vocab word.tsv --cutoffs 8,20 --untie-r true --tie-weight false --pre-lnorm true \
      --same-length true --clamp-len 40 div1.pt -o div1b.h5
    expect 0 xl-inspect --json div1b.h5
    for kv in '\"same_length\":true' '\"pre_lnorm\":true' '\"clamp_len\":40' '\"tie_weight\":false' '\"untie_r\":true'; do
      grep -qF "$kv" out || fail "the imported config lacks $kv: $(head -c 600 out)"
    done

    step "[$mode] flags that contradict the file: 65, one line naming the flag"
    expect 65 xl-import-torch -f --vocab byte.tsv --n-layer 3 char.pt -o bad.h5
    stderr_is_one_line "--n-layer 3" "2"
    expect 65 xl-import-torch -f --vocab byte.tsv --n-head 4 char.pt -o bad.h5
    stderr_is_one_line "--n-head 4" "r_w_bias"
    expect 65 xl-import-torch -f --vocab byte.tsv --d-model 32 char.pt -o bad.h5
    stderr_is_one_line "--d-model 32"
    expect 65 xl-import-torch -f --vocab word.tsv --cutoffs 10,31 word.pt -o bad.h5
    stderr_is_one_line "--cutoffs"
    expect 65 xl-import-torch -f --vocab word.tsv --tie-projs 1,1,1 word.pt -o bad.h5
    stderr_is_one_line "--tie-projs" "crit.out_projs.0"
    expect 65 xl-import-torch -f --vocab word.tsv --untie-r true word.pt -o bad.h5
    stderr_is_one_line "--untie-r"
    expect 64 xl-import-torch -f --vocab word.tsv --tie-weight perhaps word.pt -o bad.h5
    stderr_is_one_line "--tie-weight" "perhaps"
    expect 64 xl-import-torch -f --vocab word.tsv div1.pt -o bad.h5
    stderr_is_one_line "--cutoffs"
    expect 65 xl-import-torch -f --vocab byte.tsv word.pt -o bad.h5
    stderr_is_one_line "vocab" "256" "60"
    [ ! -e bad.h5 ] || fail "a failed import left bad.h5"

  fi

  step "[$mode] broken state_dicts: 65, one line naming the tensor"
  "$PY" txl_sd.py make word.json drop.pt --drop layers.1.pos_ff.CoreNet.3.bias "${FAKE[@]}"
  expect 65 xl-import-torch --vocab word.tsv drop.pt -o bad.h5
  stderr_is_one_line "layers.1.pos_ff.CoreNet.3.bias" "lacks"
  if [ "$mode" = --fake ]; then
    "$PY" txl_sd.py make word.json extra.pt --extra layers.0.dec_attn.qkv_net.bias "${FAKE[@]}"
    expect 65 xl-import-torch --vocab word.tsv extra.pt -o bad.h5
    stderr_is_one_line "unknown tensor 'layers.0.dec_attn.qkv_net.bias'"
    "$PY" txl_sd.py make word.json shape.pt --reshape layers.2.dec_attn.r_net.weight "${FAKE[@]}"
    expect 65 xl-import-torch --vocab word.tsv shape.pt -o bad.h5
    stderr_is_one_line "layers.2.dec_attn.r_net.weight" "shape"
  fi
  "$PY" txl_sd.py make word.json untied.pt --untie crit.out_layers.1.weight "${FAKE[@]}"
  expect 65 xl-import-torch --vocab word.tsv --tie-weight true untied.pt -o bad.h5
  stderr_is_one_line "--tie-weight" "crit.out_layers.1.weight"
  [ ! -e bad.h5 ] || fail "a failed import left bad.h5"
  no_temp_files .

  step "[$mode] export: the same tensors under the same names, and the flags to import them again"
  for m in char word div1; do
    untie=()
    [ $m = div1 ] && untie=(--untie-r true)
    expect 0 xl-import-torch --export "${untie[@]}" $m.h5 -o back-$m.pt
    grep -q '^--n-token' out || fail "--export printed no flags: $(cat out)"
    grep -q '^MemTransformerLM(' out || fail "--export printed no constructor call: $(cat out)"
    "$PY" txl_sd.py compare $m.pt back-$m.pt "${FAKE[@]}" || fail "$m: the exported state_dict differs from the original"
    python3 txl_sd.py compare $m.pt back-$m.pt --fake || fail "$m: the exported state_dict differs (pure-Python reader)"
    if [ "$mode" = real ]; then
      "$PY" txl_sd.py load-strict $m.json back-$m.pt || fail "$m: load_state_dict(strict=True) refused the export"
    fi
    # Importing the export with the printed flags and exporting again gives the same bytes.
    [ "$mode" = --fake ] || continue
    read -r -a flags < <(sed -n 2p out)
    vocab=word.tsv
    [ $m = char ] && vocab=byte.tsv
    expect 0 xl-import-torch --vocab $vocab "${flags[@]}" back-$m.pt -o again-$m.h5
    expect 0 xl-import-torch --export "${untie[@]}" again-$m.h5 -o again-$m.pt
    same_bytes back-$m.pt again-$m.pt "$m: export(import(export))"
  done
  expect 65 xl-import-torch --export div1.h5 -o bad.pt
  stderr_is_one_line "--untie-r" "per layer"
  [ ! -e bad.pt ] || fail "a failed export left bad.pt"

  if [ "$mode" = --fake ]; then
    step "[$mode] pipes"
    expect 0 xl-import-torch --vocab byte.tsv - -o pipe.h5 <char.pt
    rm -f pipe.h5
    run bash -c 'xl-import-torch --export char.h5 -o - >stdout.pt'
    [ "$STATUS" -eq 0 ] || fail "--export to stdout failed: $(cat "$TMP/err")"
    same_bytes stdout.pt back-char.pt "--export to stdout"
    grep -q '^--n-token' "$TMP/err" || fail "--export to stdout did not print the flags on stderr"
  fi
done

step "usage and input errors"
expect 66 xl-import-torch --vocab byte.tsv missing.pt -o x.h5
stderr_is_one_line missing.pt
expect 65 xl-import-torch --vocab byte.tsv text.txt -o x.h5
stderr_is_one_line text.txt "not a PyTorch file"
expect 65 xl-import-torch --vocab byte.tsv tokens.h5 -o x.h5
stderr_is_one_line tokens.h5
printf '\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19' >legacy.pt
expect 65 xl-import-torch --vocab byte.tsv legacy.pt -o x.h5
stderr_is_one_line legacy.pt "legacy"
expect 64 xl-import-torch char.pt -o x.h5
stderr_is_one_line "--vocab"
expect 64 xl-import-torch --export --vocab byte.tsv char.h5 -o x.pt
stderr_is_one_line "--vocab"
expect 64 xl-import-torch --vocab byte.tsv --tie-projs 1,maybe word.pt -o x.h5
stderr_is_one_line "--tie-projs"
expect 65 xl-import-torch --export char.pt -o x.pt
stderr_is_one_line char.pt
expect 73 xl-import-torch --vocab byte.tsv char.pt -o char.h5
stderr_is_one_line char.h5
[ ! -e x.h5 ] && [ ! -e x.pt ] || fail "a failed run left an output"
no_temp_files .
expect 0 xl-import-torch --help
grep -q -- '--export' out || fail "--help does not mention --export"
expect 0 xl-import-torch --version

if [ -z "$TORCH_PY" ]; then
  echo "note: no python3 with torch (install python3-torch): real-PyTorch checks skipped"
fi
echo "ok"
