// The pieces of the attention's key/value projections [B, K, parts, H, dh] that the variants read
// (keys and values together, the keys alone, MGK's extra keys), as views whose gradients land in
// one buffer. Taken apart by narrow and select, each view's backward filled a zeroed copy of the
// whole projections and autograd summed the copies: a visible share of MGK's training step
// (measured: bench/HISTORY.md, "The projections' parts").
#pragma once
#include <torch/torch.h>

#include <vector>

namespace xl::kernels {

struct ProjectionParts {
  torch::Tensor kv;                       // [B, K, 2, H, dh]: parts 0 (keys) and 1 (values)
  torch::Tensor key0;                     // [B, K, H, dh]: part 0
  std::vector<torch::Tensor> extra_keys;  // [B, K, H, dh] each: parts 2, 3, ...
};

// proj [B, K, parts >= 2, H, dh], differentiable: its gradient is the sum of the parts'.
ProjectionParts projection_parts(const torch::Tensor& proj);

}  // namespace xl::kernels
