#include "xl/model/adaptive.h"

#include "xl/compute/precision.h"
#include "xl/kernels/cpu/blocked_nll.h"
#include "xl/kernels/cpu/linear.h"
#include "xl/kernels/cpu/target_log_softmax.h"

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

// The clusters' rows of one output layer over the whole vocabulary (div_val 1) as autograd sees
// them, the head's with the cluster rows appended. Through LibTorch's slice each cluster's gradient
// would be a whole weight of zeros of its own, then added up: at Transformer-XL's wt103 recipe
// (267,735 words x 410) four 439 MB tensors a step. The backward writes the clusters' gradients
// into one instead. Inputs: weight, bias, cluster_weight, cluster_bias, the clusters'
// ends; outputs: each cluster's weight and bias.
class OutputRows : public torch::autograd::Function<OutputRows> {
  // Rows [begin, end) of t: on t's storage, but not a view of t to autograd, so that this Function
  // alone is their backward. The weights do not change between a step's forward and backward.
  static torch::Tensor rows_of(const torch::Tensor& t, int64_t begin, int64_t end) {
    auto sizes = t.sizes().vec();
    sizes[0] = end - begin;
    return torch::empty({0}, t.options()).set_(t.storage(), t.storage_offset() + begin * t.stride(0), sizes, t.strides());
  }

 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& weight,
                                                const torch::Tensor& bias, const torch::Tensor& cluster_weight,
                                                const torch::Tensor& cluster_bias, std::vector<int64_t> ends) {
    ctx->set_materialize_grads(false);  // a cluster without targets in the batch gets no gradient
    ctx->saved_data["ends"] = ends;  // the last is the weight's row count
    torch::autograd::variable_list parts;
    for (size_t k = 0; k + 1 < ends.size(); ++k) {
      torch::Tensor w = rows_of(weight, ends[k], ends[k + 1]), b = rows_of(bias, ends[k], ends[k + 1]);
      parts.push_back(k == 0 ? torch::cat({w, cluster_weight}) : w);
      parts.push_back(k == 0 ? torch::cat({b, cluster_bias}) : b);
    }
    return parts;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto ends = ctx->saved_data["ends"].toIntVector();
    const int64_t head = ends[1] - ends[0];
    torch::autograd::variable_list out(5);
    for (int p = 0; p < 2; ++p) {  // the weights, then the biases
      if (grads[p].defined()) out[2 + p] = grads[p].slice(0, head).clone();  // the cluster rows
      for (size_t k = 0; k + 1 < ends.size() && !out[p].defined(); ++k)
        if (const torch::Tensor& g = grads[2 * k + p]; g.defined()) {
          auto sizes = g.sizes().vec();
          sizes[0] = ends.back();
          out[p] = torch::empty(sizes, g.options());
        }
      if (!out[p].defined()) continue;  // no cluster had a target
      for (size_t k = 0; k + 1 < ends.size(); ++k) {
        const torch::Tensor& g = grads[2 * k + p];
        torch::Tensor target = out[p].slice(0, ends[k], ends[k + 1]);
        if (g.defined()) target.copy_(g.slice(0, 0, ends[k + 1] - ends[k]));
        else target.zero_();
      }
    }
    return out;
  }
};

}  // namespace

AdaptiveEmbeddingImpl::AdaptiveEmbeddingImpl(const ModelConfig& cfg)
    : cutoff_ends(ends_of(cfg)),
      div_val(cfg.div_val),
      d_embed(cfg.embed_dim()),
      d_proj(cfg.d_model),
      sparse_gradient(cfg.tie_weight && cfg.div_val == 1 && !cfg.cutoffs.empty()) {
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
    // A dense gradient would be a whole vocabulary of zeros, then added to the output layer's into
    // a new tensor (Transformer-XL's wt103 recipe: 439 MB twice a step).
    const torch::Tensor& w = embeddings[0]->weight;
    torch::Tensor e = sparse_gradient && w.is_cpu() && torch::GradMode::is_enabled()
                          ? torch::embedding(w, input, -1, false, /*sparse=*/true)
                          : embeddings[0](input);
    if (projections[0].defined()) e = kernels::linear(e, projections[0]);
    return e * scale;
  }
  auto flat = input.reshape({-1});
  auto dtype = embeddings[0]->weight.options();
  torch::Tensor out = torch::zeros({flat.size(0), d_proj}, dtype);
  for (size_t i = 0; i < embeddings.size(); ++i) {
    auto in_cluster = (flat >= cutoff_ends[i]) & (flat < cutoff_ends[i + 1]);
    auto idx = in_cluster.nonzero().squeeze(1);
    if (idx.numel() == 0) continue;
    auto e = kernels::linear(embeddings[i](flat.index_select(0, idx) - cutoff_ends[i]), projections[i]);
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

std::vector<std::pair<torch::Tensor, torch::Tensor>> AdaptiveLogSoftmaxImpl::output_params() {
  if (n_clusters == 0) return {{layers[0]->weight, layers[0]->bias}};
  std::vector<std::pair<torch::Tensor, torch::Tensor>> params;
  if (div_val == 1 && torch::GradMode::is_enabled()) {
    const OutputLayer& layer = layers[0];
    const auto rows = OutputRows::apply(layer->weight, layer->bias, cluster_weight, cluster_bias, cutoff_ends);
    for (size_t k = 0; k + 1 < rows.size(); k += 2) params.emplace_back(rows[k], rows[k + 1]);
    return params;
  }
  const std::vector<torch::Tensor> from{layers[0]->weight, layers[0]->bias, cluster_weight, cluster_bias};
  for (int64_t i = 0; i <= n_clusters; ++i) {
    const OutputLayer& layer = layers[div_val == 1 ? 0 : i];
    torch::Tensor w = layer->weight, b = layer->bias;
    if (div_val == 1) {
      w = w.slice(0, cutoff_ends[i], cutoff_ends[i + 1]);
      b = b.slice(0, cutoff_ends[i], cutoff_ends[i + 1]);
    }
    if (i == 0 && torch::GradMode::is_enabled()) {
      w = torch::cat({w, cluster_weight}, 0);
      b = torch::cat({b, cluster_bias}, 0);
    } else if (i == 0) {
      if (!head_copy_.from.unchanged(from))
        head_copy_ = {TensorSnapshot(from), torch::cat({w, cluster_weight}, 0), torch::cat({b, cluster_bias}, 0)};
      w = head_copy_.weight;
      b = head_copy_.bias;
    }
    params.emplace_back(w, b);
  }
  return params;
}

torch::Tensor AdaptiveLogSoftmaxImpl::logits(const torch::Tensor& hidden, const torch::Tensor& weight,
                                             const torch::Tensor& bias, const torch::Tensor& proj) const {
  torch::Tensor h = proj.defined() ? torch::matmul(hidden, proj) : hidden;  // [N, d_proj] -> [N, d_i]
  return compute::upcast(kernels::linear(h, weight, bias));  // the log-softmax and the loss in fp32 at least
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
    return -kernels::target_log_softmax(logits(hidden, weight, bias, proj), target);
  return kernels::blocked_nll(proj.defined() ? torch::matmul(hidden, proj) : hidden, weight, bias, target, cols);
}

torch::Tensor AdaptiveLogSoftmaxImpl::forward(const torch::Tensor& hidden, const torch::Tensor& target) {
  const auto params = output_params();
  const auto& [hw, hb] = params[0];
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
    const auto& [w, b] = params[static_cast<size_t>(i)];
    loss = loss.index_add(0, idx, nll(hidden.index_select(0, idx), w, b, projections[i], target.index_select(0, idx) - cutoff_ends[i]));
  }
  return loss;
}

torch::Tensor AdaptiveLogSoftmaxImpl::log_probs(const torch::Tensor& hidden) {
  const auto params = output_params();
  const auto& [hw, hb] = params[0];
  auto head_lp = torch::log_softmax(logits(hidden, hw, hb, projections[0]), -1);
  if (n_clusters == 0) return head_lp;
  std::vector<torch::Tensor> parts{head_lp.slice(1, 0, shortlist)};
  for (int64_t i = 1; i <= n_clusters; ++i) {
    const auto& [w, b] = params[static_cast<size_t>(i)];
    auto tail = torch::log_softmax(logits(hidden, w, b, projections[i]), -1);
    parts.push_back(tail + head_lp.select(1, head_lp.size(1) - i).unsqueeze(1));
  }
  return torch::cat(parts, 1);
}

}  // namespace xl::model
