"""Times the standard PyTorch Transformer-XL (kimiyoung/transformer-xl, pytorch/mem_transformer.py)
at one of xl_bench_model's shapes, the same way: training steps (loss, backward, global-norm clip
0.25, Adam, gradients reset) and forward-only evaluation with a 2 x tgt_len memory, after 2 warm-up
steps, memories carried; mixed precision through torch.autocast. Prints one JSON object like
xl_bench_model's. Its code is not part of xl: give the path of a checkout's pytorch/ folder.

    python3 bench/reference_txl.py REFERENCE_PYTORCH_DIR CONFIG MODE STEPS [DEVICE [PRECISION]]

CONFIG: tiny | small | base | enwik8 | wt103 | txl-wt103; MODE: train | eval; PRECISION: fp32 | bf16 | fp16.
Environment: XL_BENCH_BATCH overrides the config's batch.
"""
import json
import os
import sys
import time

import torch

# The shapes of bench/model_bench.cpp: layers, width, heads, head width, inner width, tgt_len,
# mem_len, batch, vocab, cutoffs, div_val.
CONFIGS = {
    "tiny": (4, 128, 4, 32, 512, 128, 128, 16, 256, [], 1),
    "small": (8, 256, 8, 32, 1024, 256, 256, 8, 256, [], 1),
    "base": (12, 512, 8, 64, 2048, 512, 512, 2, 256, [], 1),
    "enwik8": (12, 512, 8, 64, 2048, 512, 512, 30, 256, [], 1),
    "wt103": (15, 624, 16, 39, 2496, 512, 512, 16, 267735, [20000, 40000, 200000], 4),
    "txl-wt103": (16, 410, 10, 41, 2100, 150, 150, 60, 267735, [20000, 40000, 200000], 1),
}


def main():
    ref, config, mode, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    device = torch.device(sys.argv[5] if len(sys.argv) > 5 else "cuda")
    precision = sys.argv[6] if len(sys.argv) > 6 else "bf16"
    sys.path[:0] = [ref, os.path.join(ref, "utils")]  # mem_transformer imports from both
    if torch.version.cuda is None:  # its adaptive softmax parses the CUDA version at import (unused)
        torch.version.cuda = "0.0"
    # Its attention masks are uint8, which PyTorch 2 no longer accepts in masked_fill: load the
    # module with .byte() read as .bool() (the same masks). Its adaptive embedding copies each
    # cluster's projection into a float32 buffer, which autocast's bf16 output may not enter: the
    # copy converts (the same values in fp32).
    import importlib.util
    path = os.path.join(ref, "mem_transformer.py")
    spec = importlib.util.spec_from_loader("mem_transformer", loader=None, origin=path)
    module = importlib.util.module_from_spec(spec)
    source = open(path).read().replace(".byte()", ".bool()")
    source = source.replace("emb_flat.index_copy_(0, indices_i, emb_i)", "emb_flat.index_copy_(0, indices_i, emb_i.to(emb_flat.dtype))")
    exec(compile(source, path, "exec"), module.__dict__)
    MemTransformerLM = module.MemTransformerLM

    L, d, H, dh, di, tgt, mem, batch, vocab, cutoffs, div_val = CONFIGS[config]
    batch = int(os.environ.get("XL_BENCH_BATCH") or batch)
    train = mode == "train"
    mem_len = mem if train else 2 * tgt
    torch.manual_seed(1)
    model = MemTransformerLM(vocab, L, H, d, dh, di, 0.1, 0.0, tie_weight=True, d_embed=d, div_val=div_val,
                             tie_projs=[False] * (len(cutoffs) + 1), pre_lnorm=False, tgt_len=tgt, ext_len=0,
                             mem_len=mem_len, cutoffs=cutoffs, same_length=False, attn_type=0,
                             clamp_len=-1).to(device)
    model.train(train)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    opt = torch.optim.Adam(model.parameters(), lr=2.5e-4) if train else None
    # torch.amp.GradScaler from PyTorch 2.3 (torch.cuda.amp's is deprecated there), else the old one.
    grad_scaler = getattr(torch.amp, "GradScaler", None)
    scaler = None if precision != "fp16" else grad_scaler("cuda") if grad_scaler else torch.cuda.amp.GradScaler()
    # Time-major, as theirs; a word vocab's tokens drawn by Zipf's law, as xl_bench_model draws them.
    shape = ((steps + 3) * tgt + 1, batch)
    if cutoffs:
        ranks = torch.arange(1, vocab + 1, dtype=torch.float64)
        data = torch.multinomial(1.0 / ranks, shape[0] * shape[1], replacement=True).view(shape).to(device)
    else:
        data = torch.randint(0, vocab, shape, device=device)
    mems = tuple()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elapsed, timed = 0.0, 0
    for s in range(steps + 2):
        inp, tg = data[s * tgt:(s + 1) * tgt], data[s * tgt + 1:(s + 1) * tgt + 1]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            if train:
                ret = model(inp, tg, *mems)
            else:
                with torch.no_grad():
                    ret = model(inp, tg, *mems)
        loss, mems = ret[0].float().mean(), ret[1:]
        if train:
            if scaler:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
            else:
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
        loss.item()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if s >= 2:
            elapsed += time.perf_counter() - t
            timed += 1
    row = {"implementation": "reference", "config": config, "mode": mode, "precision": precision,
           "device": str(device), "batch": batch, "steps": timed,
           "tokens_per_s": timed * batch * tgt / elapsed, "step_s": elapsed / timed, "torch": torch.__version__}
    if device.type == "cpu":
        import resource
        row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if device.type == "cuda":
        row["peak_device_mb"] = torch.cuda.max_memory_allocated(device) / 1048576
        row["gpu"] = torch.cuda.get_device_name(device)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
