// Dropout with the counter-based mask of dropout_mask.h, fused with its neighbours: generated in
// parallel, never stored (backward recomputes it from the call's key), the same after a resume
// from a checkpoint that saved the generator's state. Kept elements are scaled by 1/(1-p), as
// torch::dropout does. Float and double CPU tensors; elsewhere torch::dropout with the device's
// generator.
#pragma once
#include <torch/torch.h>

namespace xl::kernels {

// dropout(x); identity when !train or p == 0.
torch::Tensor fused_dropout(const torch::Tensor& x, double p, bool train);
// dropout(relu(x W^T + bias)): the feed-forward's first product and what follows it. With the
// CPU kernels in training the mask's pass adds the bias (the product writes no copy of it to add
// to) and backward's pass sums its gradient; elsewhere the product takes the bias.
torch::Tensor linear_relu_dropout(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                  double p, bool train);
// residual + dropout(x).
torch::Tensor fused_dropout_add(const torch::Tensor& x, const torch::Tensor& residual, double p, bool train);

}  // namespace xl::kernels
