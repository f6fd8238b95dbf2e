// Adaptive input embedding and projected adaptive log-softmax (Baevski & Auli; Grave et al.), with
// the tying options of the PyTorch Transformer-XL. With no cutoffs and div_val 1 they reduce to a
// plain embedding and a softmax tied to it (the char-level model).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "xl/model/config.h"
#include "xl/model/tensor_snapshot.h"

namespace xl::model {

// A module whose parameters are named "0", "1", ...; an index may be absent (tied or not needed).
class IndexedParamsImpl : public torch::nn::Module {
 public:
  void set(int64_t index, const torch::Tensor& value) { register_parameter(std::to_string(index), value); }
};
TORCH_MODULE(IndexedParams);

class AdaptiveEmbeddingImpl : public torch::nn::Module {
 public:
  explicit AdaptiveEmbeddingImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& input);  // [B, T] -> [B, T, d_model], scaled by sqrt(d_model)

  std::vector<int64_t> cutoff_ends;  // 0, cutoffs..., n_token
  int64_t div_val, d_embed, d_proj;
  // One word embedding tied to the adaptive softmax's one output layer (div_val 1): on the CPU its
  // gradient is the rows the input used, which autograd adds into the output layer's in place.
  bool sparse_gradient;
  torch::nn::ModuleList emb_layers{nullptr};  // Embedding per cluster
  IndexedParams emb_projs{nullptr};           // [d_proj, d_i] per cluster, when needed
  std::vector<torch::Tensor> projections;     // per cluster (undefined: none)
  std::vector<torch::nn::Embedding> embeddings;
};
TORCH_MODULE(AdaptiveEmbedding);

class OutputLayerImpl : public torch::nn::Module {
 public:
  torch::Tensor weight, bias;  // weight registered only when not tied to the embedding
};
TORCH_MODULE(OutputLayer);

class AdaptiveLogSoftmaxImpl : public torch::nn::Module {
 public:
  AdaptiveLogSoftmaxImpl(const ModelConfig& cfg, AdaptiveEmbedding& embedding);
  // hidden [N, d_model], target [N] -> negative log-likelihood [N] in input order.
  torch::Tensor forward(const torch::Tensor& hidden, const torch::Tensor& target);
  // An output layer whose logits for all rows would pass this many bytes goes through its
  // vocabulary in blocks of columns (blocked_nll.h): without autograd, and with it on the CPU, where
  // the backward computes the logits again (one more product).
  int64_t eval_logit_bytes = int64_t{512} << 20;
  int64_t train_logit_bytes = int64_t{1} << 30;
  // Full log-distribution over the vocab, [N, n_token] (for sampling).
  torch::Tensor log_probs(const torch::Tensor& hidden);

  std::vector<int64_t> cutoff_ends;
  int64_t div_val, n_clusters, shortlist;
  torch::nn::ModuleList out_layers{nullptr};
  IndexedParams out_projs{nullptr};
  std::vector<torch::Tensor> projections;  // per cluster (undefined: none)
  std::vector<OutputLayer> layers;
  torch::Tensor cluster_weight, cluster_bias;

 private:
  // Weight and bias of each cluster's output rows (the head's with the cluster rows at its end).
  std::vector<std::pair<torch::Tensor, torch::Tensor>> output_params();
  // The head's rows with the cluster rows appended are a copy (20,003 x 624 floats at wt103): without
  // autograd it is kept while what it was made of is unchanged, or evaluation and generation would
  // make it again for every segment or token.
  struct HeadCopy {
    TensorSnapshot from;
    torch::Tensor weight, bias;
  };
  HeadCopy head_copy_;
  torch::Tensor logits(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& bias,
                       const torch::Tensor& proj) const;
  // -log softmax(logits)[n, target[n]] for each row of one output layer.
  torch::Tensor nll(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& bias,
                    const torch::Tensor& proj, const torch::Tensor& target) const;
};
TORCH_MODULE(AdaptiveLogSoftmax);

}  // namespace xl::model
