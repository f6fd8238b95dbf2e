#include "xl/model/decoder_layer.h"

#include <algorithm>

#include "xl/compute/kernel_choice.h"
#include "xl/compute/parallel.h"
#include "xl/kernels/cpu/dropout_add_layer_norm.h"
#include "xl/kernels/cpu/fused_dropout.h"
#include "xl/kernels/cpu/linear.h"
#include "xl/kernels/cpu/row_kernels.h"

namespace xl::model {
namespace {

// relu(h + bias) in place over h's rows [..., d]: evaluation's first feed-forward product, which is
// this call's own (no autograd, no dropout), takes its bias in the ReLU's pass instead of a copy
// of the bias that the product then adds to.
void add_bias_relu_(torch::Tensor& h, const torch::Tensor& bias) {
  const bool here = compute::cpu_kernel_allowed(h) && h.scalar_type() == torch::kFloat && h.is_contiguous() &&
                    bias.defined() && bias.scalar_type() == torch::kFloat && bias.is_contiguous() &&
                    bias.device().is_cpu() && bias.dim() == 1 && bias.size(0) == h.size(-1);
  if (!here) {
    if (bias.defined()) h.add_(bias);
    h.relu_();
    return;
  }
  const int64_t d = h.size(-1), n_rows = h.numel() / d;
  float* x = h.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  compute::parallel_for(0, n_rows, std::max<int64_t>(1, 16384 / d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) kernels::rows::bias_relu(x + r * d, b, d);
  });
}

}  // namespace

PositionwiseFFImpl::PositionwiseFFImpl(int64_t d_model, int64_t d_inner, double dropout, bool pre_ln)
    : pre_lnorm(pre_ln), dropout(dropout) {
  CoreNet = register_module("CoreNet", torch::nn::Sequential(
      Affine(d_model, d_inner), torch::nn::ReLU(), torch::nn::Dropout(dropout), Affine(d_inner, d_model),
      torch::nn::Dropout(dropout)));
  layer_norm = register_module("layer_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})));
}

torch::Tensor PositionwiseFFImpl::forward(const torch::Tensor& x) {
  // CoreNet's modules in turn (Linear, ReLU, Dropout, Linear, Dropout) with ReLU+dropout and the
  // last dropout+residual(+layer norm) fused.
  auto in = CoreNet[0]->as<Affine>();
  auto out = CoreNet[3]->as<Affine>();
  const bool train = is_training();
  const torch::Tensor x_in = pre_lnorm ? layer_norm(x) : x;
  torch::Tensor h;
  if (train || torch::GradMode::is_enabled()) {
    h = kernels::linear_relu_dropout(x_in, in->weight, in->bias, dropout, train);
  } else {
    // The product is this call's alone: bias and ReLU in place, in one pass, and no second buffer
    // (each saves a pass over the feed-forward's widest activation; measured: bench/HISTORY.md,
    // "Code comments' numbers").
    h = kernels::linear(x_in, in->weight);
    add_bias_relu_(h, in->bias);
  }
  torch::Tensor y = kernels::linear(h, out->weight, out->bias);
  if (pre_lnorm) return kernels::fused_dropout_add(y, x, dropout, train);
  return kernels::dropout_add_layer_norm(y, x, dropout, train, layer_norm->weight, layer_norm->bias, layer_norm->options.eps());
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& cfg, int64_t n_head, bool own_biases) {
  dec_attn = register_module("dec_attn", RelMultiHeadAttn(cfg, n_head, own_biases));
  // All-attention: persistent vectors may replace the feed-forward sublayer.
  if (cfg.ff) pos_ff = register_module("pos_ff", PositionwiseFF(cfg.d_model, cfg.d_inner, cfg.dropout, cfg.pre_lnorm));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& w, const LayerMemory& mem, AttentionPass& pass,
                                        const torch::Tensor& u, const torch::Tensor& v,
                                        const std::vector<int64_t>& perm, const torch::Tensor& head_mask,
                                        RowWindow* kv_out) {
  torch::Tensor out = dec_attn(w, mem, pass, u, v, perm, head_mask, kv_out);
  return pos_ff ? pos_ff(out) : out;
}

}  // namespace xl::model
