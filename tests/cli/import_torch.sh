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

cat >txl_sd.py <<'EOF'
# Writes and reads PyTorch Transformer-XL state_dicts, with torch or (--fake) without it.
#   make CONFIG.json OUT.pt [--drop NAME] [--extra NAME] [--reshape NAME] [--untie NAME]
#   compare A.pt B.pt           same names, shapes and values (exactly)
#   load-strict CONFIG.json F   (torch) MemTransformerLM-shaped modules take F with strict=True
import array, collections, json, math, pickle, random, struct, sys, types, zipfile

FAKE = "--fake" in sys.argv
args = [a for a in sys.argv[1:] if a != "--fake"]


def layout(c):
    """(name, shape) in state_dict order and {alias: canonical} for tied tensors."""
    d, dh, H, L = c["d_model"], c["d_head"], c["n_head"], c["n_layer"]
    de = c.get("d_embed") or d
    div, cut = c.get("div_val", 1), c.get("cutoffs", [])
    ends = [0] + cut + [c["n_token"]]
    tie_w, tie_p = c.get("tie_weight", True), c.get("tie_projs", [False] * (len(cut) + 1))
    names, ties = [], {}
    if not c.get("untie_r"):
        names += [("r_w_bias", [H, dh]), ("r_r_bias", [H, dh])]
    widths = []
    if div == 1:
        names.append(("word_emb.emb_layers.0.weight", [c["n_token"], de]))
        if d != de:
            names.append(("word_emb.emb_projs.0", [d, de]))
    else:
        for i in range(len(ends) - 1):
            w = de // div ** i
            widths.append(w)
            names.append(("word_emb.emb_layers.%d.weight" % i, [ends[i + 1] - ends[i], w]))
        for i, w in enumerate(widths):
            names.append(("word_emb.emb_projs.%d" % i, [d, w]))
    for l in range(L):
        p = "layers.%d." % l
        if c.get("untie_r"):
            names += [(p + "dec_attn.r_w_bias", [H, dh]), (p + "dec_attn.r_r_bias", [H, dh])]
        names += [(p + "dec_attn.qkv_net.weight", [3 * H * dh, d]), (p + "dec_attn.o_net.weight", [d, H * dh]),
                  (p + "dec_attn.layer_norm.weight", [d]), (p + "dec_attn.layer_norm.bias", [d]),
                  (p + "dec_attn.r_net.weight", [H * dh, d]),
                  (p + "pos_ff.CoreNet.0.weight", [c["d_inner"], d]), (p + "pos_ff.CoreNet.0.bias", [c["d_inner"]]),
                  (p + "pos_ff.CoreNet.3.weight", [d, c["d_inner"]]), (p + "pos_ff.CoreNet.3.bias", [d]),
                  (p + "pos_ff.layer_norm.weight", [d]), (p + "pos_ff.layer_norm.bias", [d])]
    if cut:
        names += [("crit.cluster_weight", [len(cut), de]), ("crit.cluster_bias", [len(cut)])]
    if div == 1:
        names += [("crit.out_layers.0.weight", [c["n_token"], de]), ("crit.out_layers.0.bias", [c["n_token"]])]
        if tie_w:
            ties["crit.out_layers.0.weight"] = "word_emb.emb_layers.0.weight"
        if d != de:
            for i in range(len(cut) + 1):
                names.append(("crit.out_projs.%d" % i, [d, de]))
                if tie_p[i]:
                    ties["crit.out_projs.%d" % i] = "word_emb.emb_projs.0"
    else:
        for i, w in enumerate(widths):
            names += [("crit.out_layers.%d.weight" % i, [ends[i + 1] - ends[i], w]),
                      ("crit.out_layers.%d.bias" % i, [ends[i + 1] - ends[i]])]
            if tie_w:
                ties["crit.out_layers.%d.weight" % i] = "word_emb.emb_layers.%d.weight" % i
        for i, w in enumerate(widths):
            names.append(("crit.out_projs.%d" % i, [d, w]))
            if tie_p[i]:
                ties["crit.out_projs.%d" % i] = "word_emb.emb_projs.%d" % i
    names.append(("pos_emb.inv_freq", [d // 2]))
    return names, ties


def values(c, names, ties):
    rng = random.Random(1234)
    vals = {}
    for n, shape in names:
        if n in ties:
            vals[n] = ties[n]  # the canonical name: the very same tensor
        elif n == "pos_emb.inv_freq":
            vals[n] = [1 / (10000 ** (i / c["d_model"])) for i in range(0, c["d_model"], 2)]
        else:
            vals[n] = [rng.gauss(0, 0.3) for _ in range(math.prod(shape))]
    return vals


def edit(names, opts):
    if "--drop" in opts:
        names = [(n, s) for n, s in names if n != opts["--drop"]]
    if "--extra" in opts:
        names.append((opts["--extra"], [3]))
    if "--reshape" in opts:
        names = [(n, [s[0] + 1] + s[1:] if n == opts["--reshape"] else s) for n, s in names]
    return names


# ---- without torch: the zip/pickle layout of torch.save, written by hand ----
def fake_save(names, vals, ties, untie, path):
    torch_mod, utils_mod = types.ModuleType("torch"), types.ModuleType("torch._utils")
    torch_mod._utils = utils_mod
    sys.modules["torch"], sys.modules["torch._utils"] = torch_mod, utils_mod

    class FloatStorage:
        pass
    FloatStorage.__module__, FloatStorage.__qualname__ = "torch", "FloatStorage"
    torch_mod.FloatStorage = FloatStorage

    def _rebuild_tensor_v2(*a):
        raise RuntimeError("not for loading")
    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    utils_mod._rebuild_tensor_v2 = _rebuild_tensor_v2

    class Storage:
        def __init__(self, key, data):
            self.key, self.data = key, data

    class Tensor:
        def __init__(self, storage, shape):
            self.storage, self.shape = storage, shape

        def __reduce_ex__(self, proto):
            stride, acc = [], 1
            for s in reversed(self.shape):
                stride.insert(0, acc)
                acc *= s
            return (_rebuild_tensor_v2, (self.storage, 0, tuple(self.shape), tuple(stride), False,
                                         collections.OrderedDict()))

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, Storage):
                return ("storage", FloatStorage, obj.key, "cpu", len(obj.data))
            return None

    sd, tensors, storages = collections.OrderedDict(), {}, []
    for n, shape in names:
        if n in ties and n != untie:
            sd[n] = tensors[ties[n]]
            continue
        data = vals[n] if n in vals and not isinstance(vals[n], str) else vals.get(ties.get(n, ""), [0.0])
        if n == untie:
            data = [x + 1 for x in data]
        if math.prod(shape) != len(data):
            data = [0.5] * math.prod(shape)
        st = Storage(str(len(storages)), data)
        storages.append(st)
        tensors[n] = sd[n] = Tensor(st, shape)
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    import io
    buf = io.BytesIO()
    P(buf, protocol=2).dump(sd)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        for st in storages:
            z.writestr("archive/data/" + st.key, array.array("f", st.data).tobytes())
        z.writestr("archive/version", "3\n")


def fake_load(path):
    z = zipfile.ZipFile(path)
    pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
    prefix = pkl[: -len("data.pkl")]
    codes = {"FloatStorage": "f", "DoubleStorage": "d", "LongStorage": "q", "HalfStorage": "e"}

    class U(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) == ("collections", "OrderedDict"):
                return collections.OrderedDict
            if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                return lambda st, off, size, stride, *rest: ("T", st, off, tuple(size), tuple(stride))
            if (module, name) == ("torch.jit._pickle", "restore_type_tag"):
                return lambda value, tag: value
            if module == "torch" and name in codes:
                return codes[name]
            raise pickle.UnpicklingError("unexpected %s.%s" % (module, name))

        def persistent_load(self, pid):
            _, code, key, _, numel = pid
            raw = z.read(prefix + "data/" + key)
            return struct.unpack("<%d%s" % (numel, code), raw)

    out = collections.OrderedDict()
    for n, (_, st, off, size, stride) in U(z.open(pkl)).load().items():
        idx = [off]
        for s, t in zip(size, stride):
            idx = [i + k * t for i in idx for k in range(s)]
        out[n] = (list(size), [st[i] for i in idx])
    return out


# ---- with torch: modules named as MemTransformerLM's, so state_dict() is the real thing ----
def torch_model(c):
    import torch
    from torch import nn
    names, ties = layout(c)
    d, dh, H = c["d_model"], c["d_head"], c["n_head"]
    de = c.get("d_embed") or d
    div, cut = c.get("div_val", 1), c.get("cutoffs", [])
    ends = [0] + cut + [c["n_token"]]

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv_net = nn.Linear(d, 3 * H * dh, bias=False)
            self.drop, self.dropatt = nn.Dropout(0.1), nn.Dropout(0.0)
            self.o_net = nn.Linear(H * dh, d, bias=False)
            self.layer_norm = nn.LayerNorm(d)
            self.r_net = nn.Linear(d, H * dh, bias=False)
            if c.get("untie_r"):
                self.r_w_bias, self.r_r_bias = nn.Parameter(torch.randn(H, dh)), nn.Parameter(torch.randn(H, dh))

    class FF(nn.Module):
        def __init__(self):
            super().__init__()
            self.CoreNet = nn.Sequential(nn.Linear(d, c["d_inner"]), nn.ReLU(inplace=True), nn.Dropout(0.1),
                                         nn.Linear(c["d_inner"], d), nn.Dropout(0.1))
            self.layer_norm = nn.LayerNorm(d)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.dec_attn, self.pos_ff = Attn(), FF()

    class Emb(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb_layers, self.emb_projs = nn.ModuleList(), nn.ParameterList()
            if div == 1:
                self.emb_layers.append(nn.Embedding(c["n_token"], de))
                if d != de:
                    self.emb_projs.append(nn.Parameter(torch.randn(d, de)))
            else:
                for i in range(len(ends) - 1):
                    self.emb_layers.append(nn.Embedding(ends[i + 1] - ends[i], de // div ** i))
                    self.emb_projs.append(nn.Parameter(torch.randn(d, de // div ** i)))

    class Crit(nn.Module):
        def __init__(self):
            super().__init__()
            if cut:
                self.cluster_weight = nn.Parameter(torch.randn(len(cut), de))
                self.cluster_bias = nn.Parameter(torch.randn(len(cut)))
            self.out_layers, self.out_projs = nn.ModuleList(), nn.ParameterList()
            if div == 1:
                self.out_layers.append(nn.Linear(de, c["n_token"]))
                if d != de:
                    for i in range(len(cut) + 1):
                        self.out_projs.append(nn.Parameter(torch.randn(d, de)))
            else:
                for i in range(len(ends) - 1):
                    self.out_layers.append(nn.Linear(de // div ** i, ends[i + 1] - ends[i]))
                    self.out_projs.append(nn.Parameter(torch.randn(d, de // div ** i)))

    class Pos(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("inv_freq", 1 / (10000 ** (torch.arange(0.0, d, 2.0) / d)))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_emb = Emb()
            self.layers = nn.ModuleList([Layer() for _ in range(c["n_layer"])])
            self.crit = Crit()
            if c.get("tie_weight", True):
                for i in range(len(self.crit.out_layers)):
                    self.crit.out_layers[i].weight = self.word_emb.emb_layers[i].weight
            for i, tie in enumerate(c.get("tie_projs", [])):
                if tie and div == 1 and d != de:
                    self.crit.out_projs[i] = self.word_emb.emb_projs[0]
                elif tie and div != 1:
                    self.crit.out_projs[i] = self.word_emb.emb_projs[i]
            self.pos_emb = Pos()
            if not c.get("untie_r"):
                self.r_w_bias, self.r_r_bias = nn.Parameter(torch.randn(H, dh)), nn.Parameter(torch.randn(H, dh))

    torch.manual_seed(1234)
    m = LM()
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.normal_(0, 0.3)
    return m


def torch_save(c, opts, path):
    import torch
    sd = torch_model(c).state_dict()
    if "--drop" in opts:
        del sd[opts["--drop"]]
    if "--extra" in opts:
        sd[opts["--extra"]] = torch.zeros(3)
    if "--reshape" in opts:
        t = sd[opts["--reshape"]]
        sd[opts["--reshape"]] = torch.zeros([t.shape[0] + 1] + list(t.shape[1:]))
    if "--untie" in opts:
        sd[opts["--untie"]] = sd[opts["--untie"]] + 1
    torch.save(sd, path)


def load(path):
    if FAKE:
        return fake_load(path)
    import torch
    return collections.OrderedDict((n, (list(t.shape), t.flatten().tolist())) for n, t in torch.load(path).items())


cmd = args[0]
if cmd == "make":
    c = json.load(open(args[1]))
    opts = dict(zip(args[3::2], args[4::2]))
    if FAKE:
        names, ties = layout(c)
        vals = values(c, names, ties)
        fake_save(edit(names, opts), vals, ties, opts.get("--untie"), args[2])
    else:
        torch_save(c, opts, args[2])
elif cmd == "compare":
    a, b = load(args[1]), load(args[2])
    if set(a) != set(b):
        sys.exit("names differ: only in %s: %s; only in %s: %s" % (args[1], sorted(set(a) - set(b)), args[2], sorted(set(b) - set(a))))
    for n in a:
        if a[n] != b[n]:
            sys.exit("tensor %s differs" % n)
elif cmd == "load-strict":
    import torch
    m = torch_model(json.load(open(args[1])))
    m.load_state_dict(torch.load(args[2]), strict=True)
    sd = torch.load(args[2])
    for n, t in m.state_dict().items():
        if not torch.equal(t, sd[n]):
            sys.exit("tensor %s differs after load_state_dict" % n)
EOF

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
  expect 0 xl-import-torch --tokens tokens.h5 char.pt -o char2.h5
  expect 0 xl-import-torch --vocab word.tsv word.pt -o word.h5
  expect 0 xl-import-torch --vocab word.tsv --cutoffs 8,20 div1.pt -o div1.h5

  if [ "$mode" = --fake ]; then
    step "[$mode] import with the flags given"
    expect 0 xl-import-torch -f --vocab byte.tsv --n-layer 2 --d-model 16 --n-head 2 --d-head 8 --d-inner 24 \
      --n-token 256 --tie-weight --div-val 1 char.pt -o char2.h5
    expect 0 xl-import-torch -f --vocab word.tsv --n-layer 3 --d-model 16 --n-head 4 --d-head 3 --d-inner 20 \
      --d-embed 12 --cutoffs 10,30 --div-val 2 --tie-weight --tie-projs F,T,T word.pt -o word2.h5
    printf 'n-layer = 3\nd-model = 16\ncutoffs = 10,30\ntie-projs = 0,1,1\n' >word.ini
    expect 0 xl-import-torch -f -c word.ini --vocab word.tsv word.pt -o word2.h5
    expect 0 xl-import-torch -f --vocab word.tsv --cutoffs 8,20 --untie-r --not-tied --pre-lnorm \
      --same-length --clamp-len 40 div1.pt -o div1b.h5
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
    expect 65 xl-import-torch -f --vocab word.tsv --untie-r word.pt -o bad.h5
    stderr_is_one_line "--untie-r"
    expect 64 xl-import-torch -f --vocab word.tsv --tie-weight --not-tied word.pt -o bad.h5
    stderr_is_one_line "--not-tied"
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
  expect 65 xl-import-torch --vocab word.tsv --tie-weight untied.pt -o bad.h5
  stderr_is_one_line "--tie-weight" "crit.out_layers.1.weight"
  [ ! -e bad.h5 ] || fail "a failed import left bad.h5"
  no_temp_files .

  step "[$mode] export: the same tensors under the same names, and the flags to import them again"
  for m in char word div1; do
    untie=()
    [ $m = div1 ] && untie=(--untie-r)
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
expect 64 xl-import-torch --vocab byte.tsv --tokens tokens.h5 char.pt -o x.h5
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
