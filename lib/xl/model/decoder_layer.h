// One Transformer-XL layer: relative attention then a position-wise feed-forward, each with a
// residual and layer norm (after the sublayer, or before it with pre_lnorm).
#pragma once
#include <torch/torch.h>

#include "xl/model/rel_attention.h"

namespace xl::model {

class PositionwiseFFImpl : public torch::nn::Module {
 public:
  PositionwiseFFImpl(int64_t d_model, int64_t d_inner, double dropout, bool pre_lnorm);
  torch::Tensor forward(const torch::Tensor& x);
  // Names follow the PyTorch Transformer-XL: CoreNet.0 (in), CoreNet.3 (out).
  torch::nn::Sequential CoreNet{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};
  bool pre_lnorm;
  double dropout;
};
TORCH_MODULE(PositionwiseFF);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& cfg, int64_t n_head, bool own_biases);
  torch::Tensor forward(const torch::Tensor& w, const LayerMemory& mem, AttentionPass& pass,
                        const torch::Tensor& u, const torch::Tensor& v, const std::vector<int64_t>& perm,
                        const torch::Tensor& head_mask, RowWindow* kv_out = nullptr);
  RelMultiHeadAttn dec_attn{nullptr};
  PositionwiseFF pos_ff{nullptr};  // none with ff off
};
TORCH_MODULE(DecoderLayer);

}  // namespace xl::model
