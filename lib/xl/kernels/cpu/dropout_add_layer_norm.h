// How a post-LN sublayer ends, y = layer_norm(residual + dropout(x)) over the last dimension, in one
// pass over each block of rows while they are in cache (the sum's statistics, then y), and in
// backward one pass that writes the residual's and x's gradients (the mask recomputed, as
// fused_dropout does) and fixed-size partial sums of the weight and bias gradients, added in a
// fixed order: the same bits on any thread count. Evaluation (no gradient) never writes the sum.
// Float and double CPU tensors; elsewhere layer_norm(fused_dropout_add(...)).
#pragma once
#include <torch/torch.h>

namespace xl::kernels {

// x, residual [..., d]; weight, bias [d]; the mask is fused_dropout_add's for the same key.
torch::Tensor dropout_add_layer_norm(const torch::Tensor& x, const torch::Tensor& residual, double p, bool train,
                                     const torch::Tensor& weight, const torch::Tensor& bias, double eps);

}  // namespace xl::kernels
