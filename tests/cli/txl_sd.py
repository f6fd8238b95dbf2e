# Writes and reads PyTorch Transformer-XL state_dicts, with torch or (--fake) without it.
#   make CONFIG.json OUT.pt [--drop NAME] [--extra NAME] [--reshape NAME] [--untie NAME]
#   module CONFIG.json SD.pt OUT.pt [--data-parallel] [--legacy (the format before PyTorch 1.6)]
#                               (torch) torch.save(model, f) of a model holding SD.pt, pickled as
#                               mem_transformer.py's MemTransformerLM (CONFIG adds tgt_len, mem_len,
#                               pre_lnorm, same_length, clamp_len, dropout, dropatt, attn_type)
#   corpus TEXT OUT.pt [ptb|enwik8|text8]
#                               (torch) a corpus cache of TEXT as pytorch/data_utils.py saves cache.pt,
#                               its splits written first as the reference's prep scripts write them
#   hf-vocab CACHE.pt OUT [--zip | --pickle]
#                               (torch) the cache's Vocab as Hugging Face's vocab.bin: its __dict__,
#                               each str the UTF-8 bytes of the symbol read as Latin-1 (as its
#                               converter read the Python 2 pickle), torch.save'd in the legacy format
#                               (--zip: the zip format; --pickle: pickle.dump of it among a
#                               TransfoXLTokenizer's other attributes, as save_vocabulary writes vocab.pkl)
#   hf-corpus CACHE.pt OUT [--zip] [--tensors]
#                               (torch, numpy) the cache's splits as Hugging Face's converter saves
#                               corpus.bin: the Corpus's __dict__ without its vocab, each split an
#                               int64 NumPy array (as the TensorFlow code's corpus pickle held them),
#                               torch.save'd in the legacy format (--zip: the zip format; --tensors:
#                               LongTensors, as transformers' own TransfoXLCorpus makes them)
#   legacy IN.pt OUT.pt         (torch) IN.pt's state_dict in the format of torch.save before PyTorch 1.6
#   safetensors IN.pt OUT       (torch) IN.pt's state_dict as transformers' save_pretrained writes
#                               model.safetensors (the format written out here): a tied tensor once,
#                               under its first name (TransfoXL's crit.out_layers/out_projs dropped)
#   compare A.pt B.pt           same names, shapes and values (exactly)
#   load-strict CONFIG.json F   (torch) MemTransformerLM-shaped modules take F with strict=True
#   loss CONFIG.json F.pt TOKENS.h5 SPLIT TGT_LEN MEM_LEN [--pre-lnorm] [--same-length] [--clamp-len N]
#                               (torch) the token-weighted NLL of SPLIT in one stream, computed with
#                               Transformer-XL's forward (mem_transformer.py) written out here
#   train CONFIG.json F.pt TOKENS.h5 SPLIT BATCH TGT_LEN MEM_LEN STEPS LR CLIP [the loss's flags]
#         [--batch-chunk N]
#                               (torch) each update's loss and gradient norm, trained from F.pt as
#                               train.py trains (its data streams, Adam, clipping, cosine schedule)
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


def torch_module(c, sd, data_parallel):
    """torch_model(c) holding `sd`, as mem_transformer.py's classes pickle it for torch.save(model, f)
    (train.py's model.pt): module mem_transformer, the reference's class names and the attributes
    its constructors set (same_length, clamp_len, pre_lnorm, the dropouts, cutoffs, ...)."""
    import torch
    from torch import nn
    m = torch_model(c)
    m.load_state_dict(sd)
    names = {"LM": "MemTransformerLM", "Attn": "RelPartialLearnableMultiHeadAttn", "FF": "PositionwiseFF",
             "Layer": "RelPartialLearnableDecoderLayer", "Emb": "AdaptiveEmbedding",
             "Crit": "ProjectedAdaptiveLogSoftmax", "Pos": "PositionalEmbedding"}
    fake = types.ModuleType("mem_transformer")
    for mod in m.modules():
        cls = type(mod)
        if cls.__name__ in names:
            cls.__name__ = cls.__qualname__ = names[cls.__name__]
            cls.__module__ = "mem_transformer"
            setattr(fake, cls.__name__, cls)
    sys.modules["mem_transformer"] = fake
    cut = c.get("cutoffs", [])
    for k in ("n_token", "d_model", "n_head", "d_head", "n_layer"):
        setattr(m, k, c[k])
    m.d_embed, m.tgt_len, m.mem_len, m.ext_len = c.get("d_embed") or c["d_model"], c["tgt_len"], c["mem_len"], 0
    m.attn_type, m.sample_softmax = c.get("attn_type", 0), c.get("sample_softmax", -1)
    m.same_length, m.clamp_len = c.get("same_length", False), c.get("clamp_len", -1)
    m.drop = nn.Dropout(c.get("dropout", 0.1))
    for layer in m.layers:
        layer.dec_attn.pre_lnorm = layer.pos_ff.pre_lnorm = c.get("pre_lnorm", False)
        layer.dec_attn.dropatt = nn.Dropout(c.get("dropatt", 0.0))
        layer.pos_ff.d_inner = c["d_inner"]
    m.word_emb.div_val = m.crit.div_val = c.get("div_val", 1)
    m.word_emb.cutoffs = m.crit.cutoffs = cut + [c["n_token"]]
    return nn.DataParallel(m) if data_parallel else m


def txl_corpus_cache(text_path, out_path, dataset="ptb"):
    """torch.save of a Corpus as pytorch/data_utils.py pickles its cache.pt. The text is cut
    80/10/10 (ptb: by lines; enwik8: by bytes; text8: by characters) and each part made into the
    lines data_utils.py reads: ptb's as they are, enwik8's as awd-lstm's prep_enwik8.py writes them
    (each byte as its decimal value, a newline byte as a line end), text8's as prep_text8.py does
    ('_' for the space, a symbol per character, one line). The Vocab (utils/vocabulary.py) counts
    the symbols of all splits and orders them by falling count after its specials ('<eos>' for
    ptb, none for the character sets); each split's ids are a LongTensor, with '<eos>' after each
    line for ptb only (encode_file(add_eos=False) for enwik8 and text8, so their newlines vanish)."""
    import collections
    import torch
    if dataset == "enwik8":
        data = open(text_path, "rb").read()
    else:
        data = open(text_path, encoding="utf-8").read()
    if dataset == "ptb":
        lines = data.splitlines()
        cut = [0, len(lines) * 8 // 10, len(lines) * 9 // 10, len(lines)]
        texts = ["\n".join(lines[cut[i]:cut[i + 1]]) for i in range(3)]
    else:
        cut = [0, len(data) * 8 // 10, len(data) * 9 // 10, len(data)]
        parts = [data[cut[i]:cut[i + 1]] for i in range(3)]
        if dataset == "enwik8":
            texts = [" ".join(str(c) if c != ord("\n") else "\n" for c in p) for p in parts]
        else:
            texts = [" ".join("_" if c == " " else c for c in p.strip()) for p in parts]
    eos = ["<eos>"] if dataset == "ptb" else []
    splits = [[l.strip().split() + eos for l in t.split("\n")] for t in texts]

    class Vocab(object):
        pass

    class Corpus(object):
        pass

    for cls, module in ((Vocab, "vocabulary"), (Corpus, "data_utils")):
        cls.__module__, cls.__qualname__ = module, cls.__name__
        sys.modules[module] = types.ModuleType(module)
        setattr(sys.modules[module], cls.__name__, cls)
    v = Vocab()
    v.counter = collections.Counter(w for part in splits for l in part for w in l)
    v.special, v.min_freq, v.max_size, v.lower_case, v.delimiter, v.vocab_file = eos, 0, None, True, None, None
    v.idx2sym, v.sym2idx = [], collections.OrderedDict()
    for sym in eos + [w for w, _ in v.counter.most_common()]:
        if sym not in v.sym2idx:
            v.sym2idx[sym] = len(v.idx2sym)
            v.idx2sym.append(sym)
    if eos:
        v.eos_idx = 0
    c = Corpus()
    c.dataset, c.vocab = dataset, v
    c.train, c.valid, c.test = (torch.LongTensor([v.sym2idx[w] for l in part for w in l]) for part in splits)
    torch.save(c, out_path)


def load_cache(path):
    """torch.load of a corpus cache, its Corpus and Vocab classes stood in for by empty ones."""
    import torch
    for module, name in (("data_utils", "Corpus"), ("vocabulary", "Vocab")):
        sys.modules[module] = types.ModuleType(module)
        setattr(sys.modules[module], name, type(name, (), {}))
    return torch.load(path, weights_only=False)


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


def load_weights(path):
    """torch.load as PyTorch 2.6 and later call it by default (weights_only): what users' scripts do
    with our exports."""
    import torch
    return torch.load(path, weights_only=True)


def load(path):
    if FAKE:
        return fake_load(path)
    import torch
    return collections.OrderedDict((n, (list(t.shape), t.flatten().tolist())) for n, t in load_weights(path).items())


class Txl:
    """mem_transformer.py's MemTransformerLM written out in torch ops, over tensors by their state_dict
    names (`sd`: values, or the Parameters of torch_model() to train them). Time-major as there:
    ids [T, B], hidden states [T, B, d], one memory [M, B, d] per layer (each layer's input)."""

    def __init__(self, c, sd, mem_len, pre_lnorm=False, same_length=False, clamp_len=0):
        self.c, self.sd, self.mem_len = c, sd, mem_len
        self.pre_lnorm, self.same_length, self.clamp_len = pre_lnorm, same_length, clamp_len

    def embed(self, x):  # AdaptiveEmbedding
        import torch
        import torch.nn.functional as F
        c, sd = self.c, self.sd
        d, de = c["d_model"], c.get("d_embed") or c["d_model"]
        div, ends = c.get("div_val", 1), [0] + c.get("cutoffs", []) + [c["n_token"]]
        if div == 1:
            e = F.embedding(x, sd["word_emb.emb_layers.0.weight"])
            if d != de:
                e = F.linear(e, sd["word_emb.emb_projs.0"])
        else:
            e = torch.zeros(x.shape + (d,), dtype=sd["word_emb.emb_projs.0"].dtype)
            for i in range(len(ends) - 1):
                m = (x >= ends[i]) & (x < ends[i + 1])
                idx = m.nonzero(as_tuple=True)
                part = F.linear(F.embedding(x[idx] - ends[i], sd["word_emb.emb_layers.%d.weight" % i]),
                                sd["word_emb.emb_projs.%d" % i])
                e = e.index_put(idx, part)
        return e * d ** 0.5

    def nll(self, h, y):  # ProjectedAdaptiveLogSoftmax.forward: h [N, d], y [N]
        import torch
        import torch.nn.functional as F
        c, sd = self.c, self.sd
        div, cut = c.get("div_val", 1), c.get("cutoffs", [])
        ends = [0] + cut + [c["n_token"]]

        def logit(h, w, b, proj):  # ProjectedAdaptiveLogSoftmax._compute_logit
            if proj is not None:
                h = F.linear(h, proj.t().contiguous())
            return F.linear(h, w, b)

        if not cut:
            return -F.log_softmax(logit(h, sd["crit.out_layers.0.weight"], sd["crit.out_layers.0.bias"],
                                        sd.get("crit.out_projs.0")), -1).gather(1, y[:, None])[:, 0]
        ws, bs = [], []
        for i in range(len(ends) - 1):
            if div == 1:
                w = sd["crit.out_layers.0.weight"][ends[i]:ends[i + 1]]
                b = sd["crit.out_layers.0.bias"][ends[i]:ends[i + 1]]
            else:
                w, b = sd["crit.out_layers.%d.weight" % i], sd["crit.out_layers.%d.bias" % i]
            if i == 0:
                w, b = torch.cat([w, sd["crit.cluster_weight"]]), torch.cat([b, sd["crit.cluster_bias"]])
            ws.append(w)
            bs.append(b)
        head = F.log_softmax(logit(h, ws[0], bs[0], sd.get("crit.out_projs.0")), -1)
        out = torch.zeros(len(y), dtype=h.dtype)
        for i in range(len(ends) - 1):
            m = (y >= ends[i]) & (y < ends[i + 1])
            if not m.any():
                continue
            idx = m.nonzero()[:, 0]
            if i == 0:
                part = -head[idx].gather(1, y[idx][:, None])[:, 0]
            else:
                tail = F.log_softmax(logit(h[idx], ws[i], bs[i], sd.get("crit.out_projs.%d" % i)), -1)
                part = -(head[idx][:, -i] + tail.gather(1, (y[idx] - ends[i])[:, None])[:, 0])
            out = out.index_put((idx,), part)
        return out

    def segment(self, inp, tgt, mems):
        """The NLL [T, B] of a segment and the new memories (detached, the last mem_len inputs)."""
        import torch
        import torch.nn.functional as F
        c, sd = self.c, self.sd
        d, H, dh, L = c["d_model"], c["n_head"], c["d_head"], c["n_layer"]

        def ln(x, p):
            return F.layer_norm(x, (d,), sd[p + ".weight"], sd[p + ".bias"])

        def rel_shift(x):  # [q, k, B, H]: the zero column, the reshape, the dropped row
            zero = torch.zeros((x.size(0), 1) + x.size()[2:], dtype=x.dtype)
            padded = torch.cat([zero, x], 1).view((x.size(1) + 1, x.size(0)) + x.size()[2:])
            return padded[1:].view_as(x)

        q_len, bsz, m_len = inp.size(0), inp.size(1), mems[0].size(0)
        k_len = q_len + m_len
        h = self.embed(inp)
        pos = torch.arange(k_len - 1, -1, -1.0, dtype=h.dtype)
        if self.clamp_len > 0:
            pos = pos.clamp(max=self.clamp_len)
        sinusoid = torch.outer(pos, sd["pos_emb.inv_freq"].to(h.dtype))
        r = torch.cat([sinusoid.sin(), sinusoid.cos()], -1)
        mask = torch.triu(torch.ones(q_len, k_len), diagonal=1 + m_len)
        if self.same_length:
            mask_len = k_len - self.mem_len
            shift = q_len - mask_len if mask_len > 0 else q_len
            mask = mask + torch.tril(torch.ones(q_len, k_len), -shift)
        mask = mask.bool()[:, :, None, None]
        hids = []
        for l in range(L):
            a, f = "layers.%d.dec_attn" % l, "layers.%d.pos_ff" % l
            hids.append(h)
            cat = torch.cat([mems[l], h], 0)
            heads = F.linear(ln(cat, a + ".layer_norm") if self.pre_lnorm else cat, sd[a + ".qkv_net.weight"])
            q, k, v = heads.view(k_len, bsz, 3, H, dh).unbind(2)
            q = q[-q_len:]
            rk = F.linear(r, sd[a + ".r_net.weight"]).view(k_len, H, dh)
            u = sd[a + ".r_w_bias"] if c.get("untie_r") else sd["r_w_bias"]
            vb = sd[a + ".r_r_bias"] if c.get("untie_r") else sd["r_r_bias"]
            ac = torch.einsum("ibnd,jbnd->ijbn", q + u, k)
            bd = rel_shift(torch.einsum("ibnd,jnd->ijbn", q + vb, rk))
            score = ((ac + bd) * (1 / dh ** 0.5)).masked_fill(mask, float("-inf"))
            vec = torch.einsum("ijbn,jbnd->ibnd", F.softmax(score, 1), v).reshape(q_len, bsz, H * dh)
            out = F.linear(vec, sd[a + ".o_net.weight"])
            h = h + out if self.pre_lnorm else ln(h + out, a + ".layer_norm")
            core_in = ln(h, f + ".layer_norm") if self.pre_lnorm else h
            core = F.linear(F.relu(F.linear(core_in, sd[f + ".CoreNet.0.weight"], sd[f + ".CoreNet.0.bias"])),
                            sd[f + ".CoreNet.3.weight"], sd[f + ".CoreNet.3.bias"])
            h = h + core if self.pre_lnorm else ln(h + core, f + ".layer_norm")
        new_mems = [torch.cat([m, hid], 0)[-self.mem_len:].detach() if self.mem_len > 0 else m[:0]
                    for m, hid in zip(mems, hids)]
        return self.nll(h.reshape(-1, d), tgt.reshape(-1)).view(q_len, bsz), new_mems

    def empty_mems(self, bsz, dtype):
        import torch
        return [torch.zeros(0, bsz, self.c["d_model"], dtype=dtype) for _ in range(self.c["n_layer"])]


def txl_loss(c, sd, ids, tgt_len, mem_len, pre_lnorm, same_length, clamp_len):
    """MemTransformerLM in evaluation, in float64: one stream, memory empty at the start and carried
    across segments, every token after the first scored. Returns the mean NLL in nats."""
    import torch
    model = Txl(c, {n: t.double() for n, t in sd.items()}, mem_len, pre_lnorm, same_length, clamp_len)
    mems = model.empty_mems(1, torch.float64)
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, tgt_len):
            x = torch.tensor(ids[start:start + tgt_len + 1])[:, None]
            losses, mems = model.segment(x[:-1], x[1:], mems)
            total += losses.sum().item()
            count += losses.numel()
    return total / count


def txl_train(c, sd, ids, bsz, tgt_len, mem_len, steps, lr, clip, pre_lnorm, same_length, clamp_len, chunks):
    """train.py's loop, in float64, without dropout: LMOrderedIterator's streams (the split cut into
    bsz rows, segments of tgt_len), the mean NLL of a segment (with batch_chunk, each chunk's mean
    over `chunks`, each chunk with its own memories), clip_grad_norm_, torch.optim.Adam, the cosine
    schedule to 0 over `steps` (scheduler.step(train_step) after each update). Yields each update's
    loss and gradient norm (before clipping)."""
    import math
    import torch
    m = torch_model(c)
    m.load_state_dict(sd)
    m.double()
    params = list(m.parameters())  # each tied tensor once
    model = Txl(c, m.state_dict(keep_vars=True), mem_len, pre_lnorm, same_length, clamp_len)
    opt = torch.optim.Adam(params, lr=lr)
    data = torch.tensor(ids)
    n = data.size(0) // bsz
    data = data[:n * bsz].view(bsz, -1).t().contiguous()
    mems = [model.empty_mems(bsz // chunks, torch.float64) for _ in range(chunks)]
    for step, i in enumerate(range(0, data.size(0) - 1, tgt_len)):
        if step == steps:
            break
        seq_len = min(tgt_len, data.size(0) - 1 - i)
        inputs = torch.chunk(data[i:i + seq_len], chunks, 1)
        targets = torch.chunk(data[i + 1:i + 1 + seq_len], chunks, 1)
        opt.zero_grad()
        total = 0.0
        for k in range(chunks):
            losses, mems[k] = model.segment(inputs[k].contiguous(), targets[k].contiguous(), mems[k])
            loss = losses.mean() / chunks
            loss.backward()
            total += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        for g in opt.param_groups:  # CosineAnnealingLR's closed form at train_step
            g["lr"] = lr * (1 + math.cos(math.pi * (step + 1) / steps)) / 2
        yield total, norm.item()


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
elif cmd in ("loss", "train"):
    import h5py, torch
    n = 7 if cmd == "loss" else 11
    flags = args[n:]
    clamp = int(flags[flags.index("--clamp-len") + 1]) if "--clamp-len" in flags else 0
    model_flags = ("--pre-lnorm" in flags, "--same-length" in flags, clamp)
    chunks = int(flags[flags.index("--batch-chunk") + 1]) if "--batch-chunk" in flags else 1
    c, sd = json.load(open(args[1])), load_weights(args[2])
    ids = [int(i) for i in h5py.File(args[3], "r")["splits"][args[4]][:]]
    if cmd == "loss":
        print("%.12f" % txl_loss(c, sd, ids, int(args[5]), int(args[6]), *model_flags))
    else:
        for loss, norm in txl_train(c, sd, ids, *[int(a) for a in args[5:9]], float(args[9]), float(args[10]),
                                    *model_flags, chunks):
            print("%.12f %.12f" % (loss, norm))
elif cmd == "module":
    import torch
    c = json.load(open(args[1]))
    torch.save(torch_module(c, load_weights(args[2]), "--data-parallel" in args), args[3],
               _use_new_zipfile_serialization="--legacy" not in args)
elif cmd == "legacy":
    import torch
    torch.save(load_weights(args[1]), args[2], _use_new_zipfile_serialization=False)
elif cmd == "safetensors":
    import re, torch
    codes = {torch.float32: ("F32", torch.float32), torch.float16: ("F16", torch.int16),
             torch.bfloat16: ("BF16", torch.int16), torch.int64: ("I64", torch.int64)}
    header, chunks, size = {"__metadata__": {"format": "pt"}}, [], 0
    sd = load_weights(args[1])
    prefix = "transformer." if any(n.startswith("transformer.") for n in sd) else ""
    for n, t in sd.items():
        # _tied_weights_keys: save_pretrained keeps a tied tensor under its other name only.
        twin = re.sub(r"^crit\.out_layers\.(\d+)\.weight$", prefix + r"word_emb.emb_layers.\1.weight", n)
        twin = re.sub(r"^crit\.out_projs\.(\d+)$", prefix + r"word_emb.emb_projs.\1", twin)
        if twin != n and twin in sd and torch.equal(sd[twin], t):
            continue
        code, as_type = codes[t.dtype]
        raw = t.detach().contiguous().view(as_type).numpy().tobytes()
        header[n] = {"dtype": code, "shape": list(t.shape), "data_offsets": [size, size + len(raw)]}
        chunks.append(raw)
        size += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(args[2], "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for raw in chunks:
            f.write(raw)
elif cmd == "corpus":
    txl_corpus_cache(args[1], args[2], *args[3:4])
elif cmd == "hf-vocab":
    import torch
    v = load_cache(args[1]).vocab.__dict__
    latin1 = lambda x: x.encode("utf-8").decode("latin-1") if isinstance(x, str) else x
    d = {k: latin1(x) for k, x in v.items()}
    d["lower_case"] = False  # as in Hugging Face's wt103 vocab.bin
    d["idx2sym"] = [latin1(x) for x in v["idx2sym"]]
    d["sym2idx"] = collections.OrderedDict((latin1(k), i) for k, i in v["sym2idx"].items())
    d["counter"] = collections.Counter({latin1(k): n for k, n in v["counter"].items()})
    d["special"] = [latin1(x) for x in v["special"]]
    if "--pickle" in args:
        import re

        class MosesTokenizer(object):  # stands for sacremoses' objects
            pass

        moses = MosesTokenizer()
        moses.lang, moses.prefixes, moses.pattern = "en", {"Mr", "Dr"}, re.compile(r"\s+")
        d.update(moses_tokenizer=moses, never_split=frozenset({"<unk>", "<eos>"}), verbose=False,
                 _added_tokens_decoder={0: "<eos>"}, init_kwargs={"special": ["<eos>"], "lower_case": False})
        pickle.dump(d, open(args[2], "wb"), protocol=4)
    else:
        torch.save(d, args[2], _use_new_zipfile_serialization="--zip" in args)
elif cmd == "hf-corpus":
    import numpy, torch
    d = dict(load_cache(args[1]).__dict__)
    d.pop("vocab", None)
    for split in ("train", "valid", "test"):
        d[split] = d[split] if "--tensors" in args else numpy.asarray(d[split].numpy(), dtype=numpy.int64)
    torch.save(d, args[2], _use_new_zipfile_serialization="--zip" in args)
elif cmd == "load-strict":
    import torch
    m = torch_model(json.load(open(args[1])))
    m.load_state_dict(load_weights(args[2]), strict=True)
    sd = load_weights(args[2])
    for n, t in m.state_dict().items():
        if not torch.equal(t, sd[n]):
            sys.exit("tensor %s differs after load_state_dict" % n)
