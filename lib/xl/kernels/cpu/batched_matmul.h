// Batched matrix product for the attention (scores, positional scores, weighted values) that keeps
// both cores busy on small per-head matrices. LibTorch 1.13's bmm on CPU runs the batch one GEMM
// at a time, each split over the BLAS threads, which for the per-head shapes of Transformer-XL
// (K or N = d_head) spends much of its time synchronising when the matrices are small; then the
// batch is split over the threads and each GEMM runs single-threaded. Differentiable; falls back to torch::bmm for other
// dtypes, devices or BLAS libraries.
#pragma once
#include <torch/torch.h>

namespace xl::kernels {

// [N, M, K] x [N, K, P] -> [N, M, P]; operands may be transposed views (no copy is made then).
torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace xl::kernels
