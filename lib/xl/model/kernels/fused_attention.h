// PyTorch's fused attention (scaled_dot_product_attention; on NVIDIA GPUs its memory-efficient
// kernel, which takes an additive bias and returns the bias's gradient) for relative attention:
// the shifted, masked positional scores are the bias, and the score-sized probabilities are
// neither written out nor kept for the backward. On an H200 at the enwik8 shape (batch 30,
// 8 heads of 64, 512 queries, 1,024 keys) one layer's attention core, forward and backward, took
// 4.3 ms and 0.55 GB in bf16 against the explicit path's 5.6 ms and 1.9 GB
// (bench/gpu_attention.py).
#pragma once
#include <torch/torch.h>

namespace xl::model {

// Whether fused_attention computes attention for these queries: GPU tensors, LibTorch 2.1 or
// later, products in float32, bfloat16 or float16 (float64 keeps the explicit path), no attention
// dropout to draw (its masks come from xl's own generator streams), and the generic path not
// forced (XL_KERNELS=generic).
bool fused_attention_applies(const torch::Tensor& q, bool attention_dropout);

// softmax(q k^T + bias) v for queries [N, B, T, dh], keys and values [N, B, K, dh] and a bias
// [N, B, T, K] (-inf where masked; the scale is already in q), in the dtype the products run in
// (autocast's when it is on); returns [N, B, T, dh] in that dtype.
torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& bias);

}  // namespace xl::model
