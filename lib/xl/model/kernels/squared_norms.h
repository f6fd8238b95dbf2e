// The squared length of every d-vector of a [B, N, H, d] tensor (MGK's row and column terms,
// |q|^2 and |k|^2), in one pass over rows read in place. As x.pow(2).sum(3) the keys, a strided
// view of the projections, took 0.26 ms an MGK layer of the tiny model in pow alone, and the
// column terms a transposed copy.
#pragma once
#include <torch/torch.h>

namespace xl::model {

// x [B, N, H, d] with unit stride in d (any other strides). Returns [B, N, H], or [B, H, N] with
// heads_first, contiguous: out = sum_d x^2, differentiable (dx = 2 x dout). Float CPU tensors run
// here; others (and the generic path forced) as tensor ops.
torch::Tensor squared_norms(const torch::Tensor& x, bool heads_first = false);

}  // namespace xl::model
