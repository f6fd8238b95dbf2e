// The Transformer-XL language model (Dai et al. 2019; conventions in doc/conventions.md), with the
// training-time options of the Skip Cross-head Transformer-XL: skipped layers (Skip-Retain), head
// permutations (SCH) and a head mask. Parameter names follow the PyTorch Transformer-XL.
#pragma once
#include <torch/torch.h>

#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "xl/model/adaptive.h"
#include "xl/model/compression.h"
#include "xl/model/config.h"
#include "xl/model/decoder_layer.h"
#include "xl/model/memory.h"
#include "xl/model/positional.h"

namespace xl::model {

// The Compressive Transformer's training losses of one forward pass, summed over the layers that
// compressed something (0-d, with their graph into the compression networks); undefined: none.
struct CompressionLosses {
  torch::Tensor attention_reconstruction, auto_encoding;
};

struct ForwardOptions {
  int64_t mem_len = 0;                        // memory kept for the next segment
  int64_t cmem_len = 0;                       // compressed memory kept (a model with cmem_rate; 0: none)
  // In training with a learned compression: where the training losses go (null: not computed).
  CompressionLosses* losses = nullptr;
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
  // weights about to be loaded: drawing weights the checkpoint then overwrites was a large part of a
  // short tool's start-up (measured: bench/HISTORY.md, "Building a model draws nothing").
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
  torch::nn::ModuleList compress{nullptr};  // one Compression per layer (cmem_rate > 0)
  std::vector<Compression> compress_list;

 private:
  // Layer l's training losses for the compression of `old` (its memory's dropped inputs) into
  // `compressed`, added to `losses`; w is the layer's input.
  void add_compression_losses(int64_t l, const torch::Tensor& w, const torch::Tensor& old, const torch::Tensor& compressed,
                              CompressionLosses* losses);
  SinusoidTable sinusoid_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, torch::Tensor> mask_cache_;
};
TORCH_MODULE(TransformerXL);

}  // namespace xl::model
