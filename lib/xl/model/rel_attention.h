// Transformer-XL relative multi-head attention over [memory; segment], with Skip-Retain aware
// distances (memory runs of any age), stochastic cross-head attention (a head permutation of keys,
// values and positional keys) and a head mask applied to head outputs before the output projection.
#pragma once
#include <torch/torch.h>

#include <array>
#include <map>
#include <utility>
#include <vector>

#include "xl/kernels/cpu/rel_softmax.h"
#include "xl/model/affine.h"
#include "xl/model/attention_variants.h"
#include "xl/model/config.h"
#include "xl/model/memory.h"
#include "xl/model/positional.h"
#include "xl/model/tensor_snapshot.h"

namespace xl::model {

// What every layer of one forward pass shares.
struct AttentionPass {
  int64_t position = 0;    // stream position of the segment's first token
  int64_t mem_len = 0;     // memory length in force (same_length sees this many keys)
  bool same_length = false;
  int64_t clamp_len = 0;
  double dropout = 0;      // on positional embeddings (once per pass, as in Transformer-XL)
  double dropatt = 0;
  bool training = false;
  SinusoidTable* sinusoid = nullptr;
  std::map<std::pair<int64_t, int64_t>, torch::Tensor> pos_emb;  // (d_max, count) -> dropped table
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, torch::Tensor>* mask_cache = nullptr;

  torch::Tensor positional(int64_t d_max, int64_t count, const torch::TensorOptions& opts);
  // [T, K] bool, true where query i may not see key j; undefined when nothing is masked.
  torch::Tensor mask(int64_t t, int64_t m, const torch::Device& device);
};

class RelMultiHeadAttnImpl : public torch::nn::Module {
 public:
  RelMultiHeadAttnImpl(const ModelConfig& cfg, int64_t n_head, bool own_biases);

  // w: [B, T, D]; returns the sublayer's output (residual and layer norm included).
  // u, v: [H, d_head] (the layer's own when it owns them). perm: SCH permutation (empty: none).
  // head_mask: [H] or undefined. kv_out (evaluation, no autograd): when given, the memory's kept
  // projections (mem.kv; projected from mem.hidden when it keeps none) grow by the segment's, and
  // kv_out receives them all, [B, M + T, 2, H, dh].
  torch::Tensor forward(const torch::Tensor& w, const LayerMemory& mem, AttentionPass& pass,
                        const torch::Tensor& u, const torch::Tensor& v, const std::vector<int64_t>& perm,
                        const torch::Tensor& head_mask, RowWindow* kv_out = nullptr);

  // Blocks of keys sharing one distance table, for a memory of `mem` at `position` and T queries.
  static std::vector<kernels::KeyBlock> key_blocks(const LayerMemory& mem, int64_t position, int64_t t);

  // The adaptive-span loss term of this layer: span_loss * S * mean(z) (0-d; zero without one).
  torch::Tensor span_loss() const;
  // How many memory slots this layer can use: mem_len, or with adaptive span only those some head
  // reaches (m_h(d) > 0 for d < z_h S + R; the newest slot is at distance 1 from the first query):
  // keys beyond are hidden, so keeping them changes nothing but the cost.
  // z_max: the largest z_h (TransformerXL::memory_lengths reads every layer's in one transfer).
  int64_t memory_needed(int64_t mem_len, double z_max) const;

  int64_t n_head, d_head, d_model;
  bool pre_lnorm;
  double dropout;
  ModelConfig variants;  // the attention variant settings (model/attention_variants.h)
  Affine qkv_net{nullptr}, r_net{nullptr}, o_net{nullptr};
  torch::nn::LayerNorm layer_norm{nullptr};
  torch::Tensor r_w_bias, r_r_bias;  // registered only when the layer owns its biases
  // Registered only for the variants that use them (shapes in VariantParams).
  Affine mgk_k_net{nullptr};  // mgk: keys 1..M-1, [(M-1) H dh, d_model]
  torch::Tensor mgk_mu, mgk_pi, pers_key, pers_val, span_z;

 private:
  // Positional keys [P, H, dh] of one distance table for T queries: r_net of the (dropped) sinusoids.
  torch::Tensor positional_keys(const kernels::KeyBlock& blk, int64_t t, AttentionPass& pass, const torch::TensorOptions& opts);
  // Those of every distance, kept without dropout or autograd while r_net's weight is unchanged
  // (TensorSnapshot): generation would
  // project up to mem_len + 1 distances for every token, evaluation T + M every segment, a share of
  // a long-memory evaluation worth keeping (measured: bench/HISTORY.md, long-memory evaluation).
  struct PositionalKeys {
    std::array<int64_t, 4> what;  // top distance, clamp_len, dtype, autocast dtype
    TensorSnapshot weight;        // r_net's
    torch::Tensor keys;           // [top + 1, H, dh]: distances top down to 0
  };
  std::vector<PositionalKeys> positional_keys_;
};
TORCH_MODULE(RelMultiHeadAttn);

}  // namespace xl::model
