"""Which formulation of relative attention a GPU step should use (issue 14): one layer's attention
core, forward and backward, at the paper's per-GPU shapes, timed with CUDA events on random data:

  explicit  what xl's generic path does: scores AC = (q+u)k^T and BD = (q+v)r^T as two batched
            products, Transformer-XL's relative shift of BD as a strided view of a padded copy,
            the causal mask, softmax in float32, probabilities back in the products' dtype, times V;
  sdpa:X    PyTorch's fused scaled_dot_product_attention with backend X, the shifted and masked BD
            passed as its additive bias (its gradient flows back to BD): the score-sized softmax
            probabilities are never stored.

For each it prints the median time of forward and of forward + backward, the peak device memory
above the inputs, the largest difference from a float64 computation of the output and of the
gradients, and whether two backward passes gave the same bits; all with PyTorch's deterministic
algorithms on (strict), as xl trains on a GPU.
Prints one JSON object per line and a table last. Not part of a build: run with PyTorch 2.x.

    python3 bench/gpu_attention.py [DEVICE]
"""
import json
import os
import statistics
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, for the check
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# name: batch, heads, head width, tgt_len, mem_len (bench/model_bench.cpp's enwik8 and wt103).
SHAPES = {"enwik8": (30, 8, 64, 512, 512), "wt103": (16, 16, 39, 512, 512)}
REPEATS = 10


def rel_shift(x):
    """Transformer-XL's shift over the last two dims: out[..., i, j] = x[..., i, j + T - 1 - i]
    where j <= i + M (the rest is masked)."""
    *lead, t, k = x.shape
    padded = torch.cat([x.new_zeros(*lead, t, 1), x], dim=-1)
    return padded.view(*lead, k + 1, t)[..., 1:, :].reshape(*lead, t, k)


def positional_bias(q_v, r, mask):
    """shift(q_v r^T) with the masked entries at -inf: [B, H, T, K]."""
    bd = rel_shift(torch.matmul(q_v, r.transpose(-1, -2)))
    return bd.masked_fill(mask, float("-inf"))


def explicit(q_u, q_v, k, v, r, mask):
    scores = torch.matmul(q_u, k.transpose(-1, -2)) + positional_bias(q_v, r, mask)
    probs = torch.softmax(scores.float(), dim=-1).to(q_u.dtype)
    return torch.matmul(probs, v)


def sdpa(backend):
    def run(q_u, q_v, k, v, r, mask):
        # The scale is already in the queries (as in xl), so SDPA's own is 1. Head widths padded
        # to a multiple of 8 with zeros, as xl does (the memory-efficient kernel's alignment).
        d = q_u.shape[-1]
        pad = (8 - d % 8) % 8
        q, kk, vv = (F.pad(x, (0, pad)) if pad else x for x in (q_u, k, v))
        with torch.nn.attention.sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(q, kk, vv, attn_mask=positional_bias(q_v, r, mask), scale=1.0)
        return out[..., :d] if pad else out
    return run


def inputs(shape, dtype, device, seed):
    b, h, d, t, m = shape
    k_len = t + m
    gen = torch.Generator(device=device).manual_seed(seed)
    def rand(*size):
        return (torch.randn(*size, generator=gen, device=device, dtype=torch.float64) * 0.5).to(dtype).requires_grad_()
    # r has one row per distance, descending from k_len - 1 to 0, shared by the batch.
    tensors = [rand(b, h, t, d), rand(b, h, t, d), rand(b, h, k_len, d), rand(b, h, k_len, d), rand(1, h, k_len, d)]
    grad = torch.randn(b, h, t, d, generator=gen, device=device, dtype=torch.float64).to(dtype)
    i = torch.arange(t, device=device).unsqueeze(1)
    j = torch.arange(k_len, device=device).unsqueeze(0)
    mask = (j > i + m).view(1, 1, t, k_len)
    return tensors, grad, mask


def grads(fn, tensors, grad, mask):
    for x in tensors:
        x.grad = None
    out = fn(*tensors, mask)
    out.backward(grad)
    return out.detach(), [x.grad.detach().clone() for x in tensors]


def timed(call):
    times = []
    for _ in range(REPEATS + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times[2:])


def exact_answer(shape, dtype, device):
    """The float64 output and gradients of the explicit formulation on the same rounded inputs."""
    tensors, grad, mask = inputs(SHAPES[shape], dtype, device, seed=1)
    wide = [x.detach().double().requires_grad_() for x in tensors]
    return grads(explicit, wide, grad.double(), mask)


def measure(name, fn, shape, dtype, device, exact):
    row = {"shape": shape, "formulation": name, "dtype": str(dtype).replace("torch.", "")}
    try:
        tensors, grad, mask = inputs(SHAPES[shape], dtype, device, seed=1)
        with torch.no_grad():
            row["forward_ms"] = timed(lambda: fn(*tensors, mask))
        row["forward_backward_ms"] = timed(lambda: grads(fn, tensors, grad, mask))
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out, gs = grads(fn, tensors, grad, mask)
        torch.cuda.synchronize()
        row["peak_above_inputs_mb"] = (torch.cuda.max_memory_allocated() - base) / 1048576
        ref_out, ref_gs = exact
        row["max_abs_err_out"] = (out.double() - ref_out).abs().max().item()
        row["max_abs_err_grads"] = max((g.double() - rg).abs().max().item() for g, rg in zip(gs, ref_gs))
        try:
            _, again = grads(fn, tensors, grad, mask)
            _, again2 = grads(fn, tensors, grad, mask)
            row["deterministic_backward"] = all(torch.equal(a, b) for a, b in zip(again, again2))
        except RuntimeError as e:
            row["deterministic_backward"] = "refused: " + str(e).splitlines()[0][:160]
    except Exception as e:  # a backend that refuses these shapes or this bias: say so, go on
        row["error"] = type(e).__name__ + ": " + str(e).splitlines()[0][:200]
    torch.cuda.empty_cache()
    print(json.dumps(row), flush=True)
    return row


def main():
    device = torch.device(sys.argv[1] if len(sys.argv) > 1 else "cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True)  # strict, as xl trains on a GPU: timed that way too
    formulations = [("explicit", explicit)]
    backends = torch.nn.attention.SDPBackend
    for b in ("EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "FLASH_ATTENTION", "MATH"):
        if hasattr(backends, b):
            formulations.append(("sdpa:" + b.lower(), sdpa(getattr(backends, b))))
    rows = []
    for shape in SHAPES:
        for dtype in (torch.bfloat16, torch.float32):
            exact = exact_answer(shape, dtype, device)
            for name, fn in formulations:
                rows.append(measure(name, fn, shape, dtype, device, exact))
            del exact
            torch.cuda.empty_cache()
    print("%-7s %-5s %-28s %9s %9s %9s %9s %9s  %s" % ("shape", "dtype", "formulation", "fwd ms", "fwd+bwd",
                                                    "peak MB", "err out", "err grad", "deterministic"))
    for r in rows:
        if "error" in r:
            print("%-7s %-5s %-28s %s" % (r["shape"], r["dtype"][:5], r["formulation"], r["error"][:90]))
        else:
            print("%-7s %-5s %-28s %9.2f %9.2f %9.0f %9.1e %9.1e  %s" % (
                r["shape"], r["dtype"][:5], r["formulation"], r["forward_ms"], r["forward_backward_ms"],
                r["peak_above_inputs_mb"], r["max_abs_err_out"], r["max_abs_err_grads"],
                str(r["deterministic_backward"])[:40]))


if __name__ == "__main__":
    main()
