#include "xl/model/adaptive.h"

#include "xl/model/kernels/blocked_nll.h"
#include "xl/model/kernels/linear.h"
#include "xl/model/kernels/target_log_softmax.h"
#include "xl/model/precision.h"

#include <algorithm>
#include <cmath>

namespace xl::model {
namespace {

std::vector<int64_t> ends_of(const ModelConfig& cfg) {
  std::vector<int64_t> ends{0};
  ends.insert(ends.end(), cfg.cutoffs.begin(), cfg.cutoffs.end());
  ends.push_back(cfg.n_token);
  return ends;
}

int64_t width(const ModelConfig& cfg, size_t cluster) {
  int64_t d = cfg.embed_dim();
  for (size_t k = 0; k < cluster; ++k) d /= cfg.div_val;
  return d;
}

}  // namespace

AdaptiveEmbeddingImpl::AdaptiveEmbeddingImpl(const ModelConfig& cfg)
    : cutoff_ends(ends_of(cfg)), div_val(cfg.div_val), d_embed(cfg.embed_dim()), d_proj(cfg.d_model) {
  emb_layers = register_module("emb_layers", torch::nn::ModuleList());
  emb_projs = register_module("emb_projs", IndexedParams());
  const size_t clusters = div_val == 1 ? 1 : cutoff_ends.size() - 1;
  for (size_t i = 0; i < clusters; ++i) {
    int64_t rows = div_val == 1 ? cfg.n_token : cutoff_ends[i + 1] - cutoff_ends[i];
    int64_t d = div_val == 1 ? d_embed : width(cfg, i);
    // Given its weight, LibTorch's Embedding draws none (affine.h: tensors are filled later).
    auto emb = torch::nn::Embedding(torch::nn::EmbeddingOptions(rows, d)._weight(torch::empty({rows, d})));
    emb_layers->push_back(emb);
    embeddings.push_back(emb);
    torch::Tensor proj;
    if (div_val != 1 || d_proj != d_embed) {
      proj = torch::empty({d_proj, d});
      emb_projs->set(static_cast<int64_t>(i), proj);
    }
    projections.push_back(proj);
  }
}

torch::Tensor AdaptiveEmbeddingImpl::forward(const torch::Tensor& input) {
  const double scale = std::sqrt(static_cast<double>(d_proj));
  if (div_val == 1) {
    torch::Tensor e = embeddings[0](input);
    if (projections[0].defined()) e = xl::model::linear(e, projections[0]);
    return e * scale;
  }
  auto flat = input.reshape({-1});
  auto dtype = embeddings[0]->weight.options();
  torch::Tensor out = torch::zeros({flat.size(0), d_proj}, dtype);
  for (size_t i = 0; i < embeddings.size(); ++i) {
    auto in_cluster = (flat >= cutoff_ends[i]) & (flat < cutoff_ends[i + 1]);
    auto idx = in_cluster.nonzero().squeeze(1);
    if (idx.numel() == 0) continue;
    auto e = xl::model::linear(embeddings[i](flat.index_select(0, idx) - cutoff_ends[i]), projections[i]);
    // Under autocast the projection comes back in bf16/fp16; the residual stream it starts is fp32.
    out = out.index_copy(0, idx, e.to(out.scalar_type()));
  }
  auto sizes = input.sizes().vec();
  sizes.push_back(d_proj);
  return out.view(sizes) * scale;
}

AdaptiveLogSoftmaxImpl::AdaptiveLogSoftmaxImpl(const ModelConfig& cfg, AdaptiveEmbedding& embedding)
    : cutoff_ends(ends_of(cfg)), div_val(cfg.div_val) {
  n_clusters = static_cast<int64_t>(cutoff_ends.size()) - 2;
  shortlist = cutoff_ends[1];
  out_layers = register_module("out_layers", torch::nn::ModuleList());
  out_projs = register_module("out_projs", IndexedParams());
  const int64_t d_proj = cfg.d_model, d_embed = cfg.embed_dim();
  if (n_clusters > 0) {
    cluster_weight = register_parameter("cluster_weight", torch::empty({n_clusters, d_embed}));
    cluster_bias = register_parameter("cluster_bias", torch::empty({n_clusters}));
  }
  const size_t clusters = cutoff_ends.size() - 1;
  auto tie_proj = [&](size_t i) { return i < cfg.tie_projs.size() ? cfg.tie_projs[i] : false; };
  for (size_t i = 0; i < clusters; ++i) {
    // div_val 1: one output layer over the whole vocab, sliced per cluster; else one per cluster.
    int64_t d = div_val == 1 ? d_embed : width(cfg, i);
    torch::Tensor proj;
    if (div_val == 1) {
      if (d_proj != d_embed) {
        proj = tie_proj(i) ? embedding->projections[0] : torch::empty({d_proj, d_embed});
        if (!tie_proj(i)) out_projs->set(static_cast<int64_t>(i), proj);
      }
    } else {
      proj = tie_proj(i) ? embedding->projections[i] : torch::empty({d_proj, d});
      if (!tie_proj(i)) out_projs->set(static_cast<int64_t>(i), proj);
    }
    projections.push_back(proj);
    if (div_val == 1 && i > 0) continue;
    int64_t rows = div_val == 1 ? cfg.n_token : cutoff_ends[i + 1] - cutoff_ends[i];
    auto layer = OutputLayer();
    layer->bias = layer->register_parameter("bias", torch::empty({rows}));
    if (cfg.tie_weight) layer->weight = embedding->embeddings[i]->weight;
    else layer->weight = layer->register_parameter("weight", torch::empty({rows, d}));
    out_layers->push_back(layer);
    layers.push_back(layer);
  }
}

std::pair<torch::Tensor, torch::Tensor> AdaptiveLogSoftmaxImpl::cluster_params(int64_t i) {
  const OutputLayer& layer = layers[div_val == 1 ? 0 : i];
  torch::Tensor w = layer->weight, b = layer->bias;
  if (div_val == 1) {
    int64_t l = cutoff_ends[i], r = cutoff_ends[i + 1];
    w = w.slice(0, l, r);
    b = b.slice(0, l, r);
  }
  if (i > 0 || n_clusters == 0) return {w, b};
  if (torch::GradMode::is_enabled()) return {torch::cat({w, cluster_weight}, 0), torch::cat({b, cluster_bias}, 0)};
  const std::vector<torch::Tensor> from{layer->weight, layer->bias, cluster_weight, cluster_bias};
  if (!head_copy_.from.unchanged(from))
    head_copy_ = {TensorSnapshot(from), torch::cat({w, cluster_weight}, 0), torch::cat({b, cluster_bias}, 0)};
  return {head_copy_.weight, head_copy_.bias};
}

torch::Tensor AdaptiveLogSoftmaxImpl::logits(const torch::Tensor& hidden, const torch::Tensor& weight,
                                             const torch::Tensor& bias, const torch::Tensor& proj) const {
  torch::Tensor h = proj.defined() ? torch::matmul(hidden, proj) : hidden;  // [N, d_proj] -> [N, d_i]
  return upcast(xl::model::linear(h, weight, bias));  // the log-softmax and the loss in fp32 at least
}

torch::Tensor AdaptiveLogSoftmaxImpl::nll(const torch::Tensor& hidden, const torch::Tensor& weight,
                                          const torch::Tensor& bias, const torch::Tensor& proj,
                                          const torch::Tensor& target) const {
  // A large layer's logits are never held whole (blocked_nll.h): in evaluation above
  // eval_logit_bytes; in training on the CPU, where the backward computes them again (one more
  // product), above train_logit_bytes. A GPU's training keeps them (autocast's products).
  const bool grad = torch::GradMode::is_enabled();
  const int64_t rows = std::max<int64_t>(hidden.size(0), 1), vocab = weight.size(0);
  const int64_t budget = grad ? train_logit_bytes : eval_logit_bytes;
  const int64_t cols = std::max<int64_t>(1, budget / (4 * rows));
  if (vocab <= cols || (grad && !hidden.device().is_cpu()))
    return -target_log_softmax(logits(hidden, weight, bias, proj), target);
  return blocked_nll(proj.defined() ? torch::matmul(hidden, proj) : hidden, weight, bias, target, cols);
}

torch::Tensor AdaptiveLogSoftmaxImpl::forward(const torch::Tensor& hidden, const torch::Tensor& target) {
  auto [hw, hb] = cluster_params(0);
  if (n_clusters == 0) return nll(hidden, hw, hb, projections[0], target);
  // Each row needs one head log-probability: its word's in the shortlist, or its cluster's (cluster
  // i's is the i-th head column from the end), to which a tail word adds its log-probability
  // within the cluster.
  const int64_t head_size = hw.size(0);
  torch::Tensor cluster = torch::zeros_like(target);
  for (int64_t i = 1; i <= n_clusters; ++i) cluster += (target >= cutoff_ends[i]).to(target.scalar_type());
  torch::Tensor head_col = torch::where(cluster == 0, target, head_size - cluster);
  torch::Tensor loss = nll(hidden, hw, hb, projections[0], head_col);
  for (int64_t i = 1; i <= n_clusters; ++i) {
    auto idx = (cluster == i).nonzero().squeeze(1);
    if (idx.numel() == 0) continue;
    auto [w, b] = cluster_params(i);
    loss = loss.index_add(0, idx, nll(hidden.index_select(0, idx), w, b, projections[i], target.index_select(0, idx) - cutoff_ends[i]));
  }
  return loss;
}

torch::Tensor AdaptiveLogSoftmaxImpl::log_probs(const torch::Tensor& hidden) {
  auto [hw, hb] = cluster_params(0);
  auto head_lp = torch::log_softmax(logits(hidden, hw, hb, projections[0]), -1);
  if (n_clusters == 0) return head_lp;
  std::vector<torch::Tensor> parts{head_lp.slice(1, 0, shortlist)};
  for (int64_t i = 1; i <= n_clusters; ++i) {
    auto [w, b] = cluster_params(i);
    auto tail = torch::log_softmax(logits(hidden, w, b, projections[i]), -1);
    parts.push_back(tail + head_lp.select(1, head_lp.size(1) - i).unsqueeze(1));
  }
  return torch::cat(parts, 1);
}

}  // namespace xl::model
