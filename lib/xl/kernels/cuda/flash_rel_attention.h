// xl's own fused relative attention for NVIDIA GPUs (flash_rel_attention_kernel.cu): content and
// positional scores, the relative shift, the mask, the softmax and the weighted sum of values in
// on-chip memory, one pass over the keys; neither a score-sized matrix nor the positional scores
// reach device memory. With autograd on, its backward (flash_rel_attention_backward_kernel.cu)
// recomputes the probabilities from the forward's log-sum-exp, keeping nothing score-sized
// between the passes either.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "xl/kernels/cpu/rel_softmax.h"

namespace xl::kernels {

// Whether flash_rel_attention runs for queries q [B, T, H, dh]: a build with the kernel, a GPU of
// compute capability 8.0 or more with the shared memory it needs, products in bfloat16 or float16
// (autocast's or q's), no attention dropout, dh <= 128, H <= 64, at most 8 key blocks; with
// autograd on, dh <= 64, the backward's shared memory, and deterministic algorithms off (its sums
// are atomic; xl's GPU training turns them on unless XL_DETERMINISTIC=0). By default it runs in
// evaluation (autograd off) on segments of at most kFlashMaxQueries, where it was measured as fast
// as LibTorch's kernel with the positional bias or faster, in less memory; on longer segments
// LibTorch's is faster (scripts/gpu-run.sh kernels). Training it runs only when asked for, as it
// measured slower there, though in less memory (measured: bench/HISTORY.md, "GPU runs", the flash
// kernel). XL_KERNELS=own: wherever it can
// run, training included; library or generic: never.
constexpr int64_t kFlashMaxQueries = 128;
bool flash_rel_attention_applies(const torch::Tensor& q, size_t key_blocks, bool attention_dropout);

// chunked_relative_attention's operation on a GPU (chunked_attention.h says what each operand
// is), with the biases given apart: q [B, T, H, dh] without them, u and v [H, dh]. Operands may be
// strided views (the projections' layouts); those not in the product dtype are converted. Returns
// [B, T, H, dh] in the product dtype; differentiable (in q, u, v, kv and the tables) when autograd
// is on.
torch::Tensor flash_rel_attention(const torch::Tensor& q, const torch::Tensor& u, const torch::Tensor& v,
                                  const torch::Tensor& kv, const std::vector<torch::Tensor>& tables,
                                  const std::vector<KeyBlock>& blocks, const std::vector<int64_t>& heads,
                                  const torch::Tensor& mask, double scale);

}  // namespace xl::kernels
