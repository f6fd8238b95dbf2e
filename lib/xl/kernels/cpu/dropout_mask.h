// The counter-based dropout mask of the CPU kernels (fused_dropout, residual_layer_norm): element e
// of a call is kept when a hash of (the call's key, e) clears the drop threshold, where the key is
// one 64-bit draw from LibTorch's default CPU generator per call. Any span of a call's elements is
// computed alone, in any order and on any thread, and backward recomputes it from the saved key:
// the mask is never stored, and checkpoints that save the generator's state resume exactly.
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace xl::kernels::dropout_mask {

struct Key {  // P(keep) = 1 - threshold / 2^32
  uint32_t k0 = 0, k1 = 0, threshold = 0;
};

Key draw(double p);
void save(torch::autograd::AutogradContext* ctx, const Key& k, double p);  // and p as saved_data["p"]
Key saved(const torch::autograd::AutogradContext* ctx);

enum class Op {
  scale,       // y = x * m
  relu_scale,       // y = relu(x) * m
  bias_relu_scale,  // y = relu(x + r) * m
  add,              // y = r + x * m
};

// Elements [e0, e0 + n) of a call: y[i] = Op(x[i], r[i], m(e0 + i)), m = scale where kept, else 0.
// r is read only by Op::bias_relu_scale and Op::add.
void apply(const float* x, const float* r, float* y, int64_t n, int64_t e0, const Key& k, float scale, Op op);
void apply(const double* x, const double* r, double* y, int64_t n, int64_t e0, const Key& k, double scale, Op op);

}  // namespace xl::kernels::dropout_mask
