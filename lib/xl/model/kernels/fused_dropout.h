// Dropout with the counter-based mask of dropout_mask.h, fused with its neighbours: generated in
// parallel, never stored (backward recomputes it from the call's key), the same after a resume
// from a checkpoint that saved the generator's state. Kept elements are scaled by 1/(1-p), as
// torch::dropout does. Float and double CPU tensors; elsewhere torch::dropout with the device's
// generator.
#pragma once
#include <torch/torch.h>

namespace xl::model {

// dropout(x); identity when !train or p == 0.
torch::Tensor fused_dropout(const torch::Tensor& x, double p, bool train);
// dropout(relu(x)).
torch::Tensor fused_relu_dropout(const torch::Tensor& x, double p, bool train);
// residual + dropout(x).
torch::Tensor fused_dropout_add(const torch::Tensor& x, const torch::Tensor& residual, double p, bool train);

}  // namespace xl::model
