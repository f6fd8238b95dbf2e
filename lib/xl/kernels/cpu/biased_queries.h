// Transformer-XL's two biased copies of the queries, q + u (content) and q + v (positional), in
// one pass, and their backward in one pass: dq = dq_u + dq_v with du and dv summed over the
// tokens. As separate tensor ops the backward took an add and two reductions, each reading the
// queries' gradients again: passes that one kernel does not need.
#pragma once
#include <torch/torch.h>

#include <utility>

namespace xl::kernels {

// q [B, T, H, dh]; u, v [H, dh]. Returns {q + u, q + v} broadcast over B and T, differentiable.
std::pair<torch::Tensor, torch::Tensor> biased_queries(const torch::Tensor& q, const torch::Tensor& u,
                                                       const torch::Tensor& v);

}  // namespace xl::kernels
