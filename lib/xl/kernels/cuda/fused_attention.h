// PyTorch's fused attention (scaled_dot_product_attention; on NVIDIA GPUs its memory-efficient
// kernel, which takes an additive bias and returns the bias's gradient) for relative attention:
// the shifted, masked positional scores are the bias, and the score-sized probabilities are
// neither written out nor kept for the backward. Measured on an H200 (bench/gpu_attention.py, one
// layer's attention core, forward and backward, at the enwik8 shape: batch 30, 8 heads of 64,
// 512 queries, 1,024 keys): in bf16 4.3-4.7 ms and 0.55 GB against the explicit path's 5.6-6.1 ms
// and 1.9 GB; in fp32 no faster (7.8-8.6 ms against 7.7-8.2), so fp32 keeps the explicit path.
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
