// Dropout with a counter-based mask: element e of a call is kept when a hash of (seed, e) clears
// the drop threshold, where the seed is one 64-bit draw from LibTorch's default CPU generator per
// call. The mask is generated in parallel, never stored (backward recomputes it from the seed),
// and depends only on the generator's state, so checkpoints that save that state resume exactly.
// Kept elements are scaled by 1/(1-p), as torch::dropout does. Float and double CPU tensors;
// elsewhere torch::dropout with the device's generator.
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
