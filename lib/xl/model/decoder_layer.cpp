#include "xl/model/decoder_layer.h"

#include "xl/model/kernels/dropout_add_layer_norm.h"
#include "xl/model/kernels/fused_dropout.h"
#include "xl/model/kernels/linear.h"

namespace xl::model {

PositionwiseFFImpl::PositionwiseFFImpl(int64_t d_model, int64_t d_inner, double dropout, bool pre_ln)
    : pre_lnorm(pre_ln), dropout(dropout) {
  CoreNet = register_module("CoreNet", torch::nn::Sequential(
      torch::nn::Linear(d_model, d_inner), torch::nn::ReLU(), torch::nn::Dropout(dropout),
      torch::nn::Linear(d_inner, d_model), torch::nn::Dropout(dropout)));
  layer_norm = register_module("layer_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})));
}

torch::Tensor PositionwiseFFImpl::forward(const torch::Tensor& x) {
  // CoreNet's modules in turn (Linear, ReLU, Dropout, Linear, Dropout) with ReLU+dropout and the
  // last dropout+residual(+layer norm) fused.
  auto in = CoreNet[0]->as<torch::nn::Linear>();
  auto out = CoreNet[3]->as<torch::nn::Linear>();
  const bool train = is_training();
  torch::Tensor h = xl::model::linear(pre_lnorm ? layer_norm(x) : x, in->weight, in->bias);
  // Without autograd or dropout the product is this call's alone: ReLU in place, no second buffer
  // (the tiny model's feed-forward in evaluation: 3.2 -> 3.0 ms).
  h = train || torch::GradMode::is_enabled() ? fused_relu_dropout(h, dropout, train) : h.relu_();
  torch::Tensor y = xl::model::linear(h, out->weight, out->bias);
  if (pre_lnorm) return fused_dropout_add(y, x, dropout, train);
  return dropout_add_layer_norm(y, x, dropout, train, layer_norm->weight, layer_norm->bias, layer_norm->options.eps());
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
