// The Transformer-XL language model (Dai et al. 2019; conventions in the README), with the
// training-time options of the Skip Cross-head Transformer-XL: skipped layers (Skip-Retain), head
// permutations (SCH) and a head mask. Parameter names follow the PyTorch Transformer-XL.
#pragma once
#include <torch/torch.h>

#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "xl/model/adaptive.h"
#include "xl/model/config.h"
#include "xl/model/decoder_layer.h"
#include "xl/model/memory.h"
#include "xl/model/positional.h"

namespace xl::model {

struct ForwardOptions {
  int64_t mem_len = 0;                        // memory kept for the next segment
  std::vector<bool> skip;                     // per layer; empty: none skipped
  std::vector<std::vector<int64_t>> perms;    // per layer SCH permutation; empty: none
  torch::Tensor head_mask;                    // [n_layer, n_head] (1 keeps a head) or undefined
  // Keep each layer's key/value projections of its memory in place of its inputs (LayerMemory::kv),
  // so that a segment projects and copies only its own tokens: without autograd only (evaluation,
  // generation).
  bool cache_kv = false;
};

class TransformerXLImpl : public torch::nn::Module {
 public:
  // Its weights from reset_parameters(seed), or (no seed) left as LibTorch's modules make them, for
  // weights about to be loaded: the draws took 2.2 s at the wt103 shape, and `xl-generate -n 1` of a
  // base checkpoint 2.2 s with them, 1.5 s without (Zen 4, 2026-11-27).
  explicit TransformerXLImpl(const ModelConfig& cfg, std::optional<uint64_t> seed = 1);

  // input, target: [B, T] token ids. Returns the negative log-likelihood of each target [B, T] and
  // advances `memory` (the inputs of each non-skipped layer are appended, detached).
  torch::Tensor forward(const torch::Tensor& input, const torch::Tensor& target, Memory& memory,
                        const ForwardOptions& opts);
  // The final hidden states [B, T, d_model] (dropout applied in training), advancing `memory`.
  torch::Tensor hidden(const torch::Tensor& input, Memory& memory, const ForwardOptions& opts);
  // Log-probabilities over the vocab for hidden states [N, d_model] -> [N, n_token].
  torch::Tensor log_probs(const torch::Tensor& hidden) { return crit->log_probs(hidden); }

  // N(0, init_std) weights, zero biases, N(1, init_std) layer-norm weights, as Transformer-XL.
  void reset_parameters(uint64_t seed);
  // Parameters and buffers by dotted name; tied tensors appear once.
  std::vector<std::pair<std::string, torch::Tensor>> named_tensors() const;
  int64_t parameter_count(bool non_embedding_only = false) const;
  Memory new_memory() const { return Memory::empty(config.n_layer); }
  std::vector<int64_t> heads_per_layer() const;

  // Adaptive span's loss term over the layers not skipped (0-d; zero without adaptive span).
  torch::Tensor span_loss(const std::vector<bool>& skip = {}) const;

  // Puts each adaptive-span z back into [0, 1] after an optimizer step (as adaptive-span does):
  // a z below 0 would get no gradient from the mask again.
  void clamp_spans();
  // Each layer's memory length for `mem_len` (RelMultiHeadAttnImpl::memory_needed), the spans read
  // in one transfer (one synchronisation on a GPU, not one per layer).
  std::vector<int64_t> memory_lengths(int64_t mem_len) const;

  // u, v of layer `l`.
  std::pair<torch::Tensor, torch::Tensor> biases(int64_t l) const;

  ModelConfig config;
  AdaptiveEmbedding word_emb{nullptr};
  torch::nn::ModuleList layers{nullptr};
  std::vector<DecoderLayer> layer_list;
  AdaptiveLogSoftmax crit{nullptr};
  torch::Tensor r_w_bias, r_r_bias;  // shared [n_head, d_head] unless per-layer

 private:
  SinusoidTable sinusoid_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, torch::Tensor> mask_cache_;
};
TORCH_MODULE(TransformerXL);

}  // namespace xl::model
