// A layer's attention inputs in one differentiable operation: the segment's queries and the keys
// and values of memory and segment together,
//   q = x W_q^T,   kv = [mem; x] W_kv^T (concatenated along time),   W = [W_q; W_kv],
// on the CPU in float32, or with bf16 products (product_operands.h): one GEMM for the segment's q
// and kv and one for the memory's kv, and in backward one GEMM each for dx and dW (the memory's
// share added into W_kv's rows). As separate linear maps over views of W, autograd cleared and added
// full-size copies of dW and added the two dx, passes that bought nothing. Elsewhere:
// those linear maps and a concatenation.
#pragma once
#include <torch/torch.h>

namespace xl::kernels {

struct AttentionInputs {
  torch::Tensor q;    // [B, T, q_width]: the queries, or q + u when the biases are given
  torch::Tensor q_v;  // [B, T, q_width]: q + v when the biases are given, else undefined
  torch::Tensor kv;   // [B, M + T, W's other rows]
};

// x [B, T, d]; weight [q_width + kv_width, d]. The memory's keys and values are projected here
// from `memory` [B, M, d] (no gradient taken: the memory is a constant of the step); undefined or
// empty: M = 0. u and v (Transformer-XL's content and positional biases, q_width elements each,
// e.g. [H, dh]), given together or not at all: the queries come back as q + u and q + v, written
// by the pass that splits the product's rows, and backward sums the biases' gradients in the pass
// that gathers the queries' (biased_queries' work without passes of its own, which made both the
// forward and the backward faster; measured: bench/HISTORY.md, "Three changes then took passes").
AttentionInputs attention_inputs(const torch::Tensor& x, const torch::Tensor& memory, const torch::Tensor& weight,
                                 int64_t q_width, const torch::Tensor& u = {}, const torch::Tensor& v = {});

// Evaluation's form, without autograd: the memory's keys and values are already the first M rows
// of `kv` [B, M + T, kv_width] (kept projections; rows contiguous, streams any distance apart), and
// the segment's are written into its last T rows. Returns the queries as attention_inputs does,
// and kv itself.
AttentionInputs attention_inputs_into(const torch::Tensor& x, const torch::Tensor& weight, int64_t q_width,
                                      const torch::Tensor& kv, const torch::Tensor& u = {},
                                      const torch::Tensor& v = {});

}  // namespace xl::kernels
