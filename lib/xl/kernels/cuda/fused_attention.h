// PyTorch's fused attention (scaled_dot_product_attention; on NVIDIA GPUs its memory-efficient
// kernel, which takes an additive bias and returns the bias's gradient) for relative attention:
// the shifted, masked positional scores are the bias, and the score-sized probabilities are
// neither written out nor kept for the backward. In bf16 it is faster than the explicit path and
// takes a fraction of its memory; in fp32 it is no faster, so fp32 keeps the explicit path
// (measured with bench/gpu_attention.py: bench/HISTORY.md, "GPU runs", the fused attention).
#pragma once
#include <torch/torch.h>

namespace xl::kernels {

// Whether fused_attention computes attention for these queries: GPU tensors, LibTorch 2.1 or
// later, products in bfloat16 or float16 (autocast's), no attention dropout to draw (its masks
// come from xl's own generator streams), and the generic path not forced (XL_KERNELS=generic).
bool fused_attention_applies(const torch::Tensor& q, bool attention_dropout);

// softmax(q k^T + bias) v for queries [N, B, T, dh], keys and values [N, B, K, dh] and a bias
// [N, B, T, K] (-inf where masked; the scale is already in q), in the dtype the products run in
// (autocast's when it is on); returns [N, B, T, dh] in that dtype.
torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& bias);

}  // namespace xl::kernels
