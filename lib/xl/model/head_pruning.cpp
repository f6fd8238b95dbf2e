#include "xl/model/head_pruning.h"

#include <map>
#include <string>

#include "xl/util/error.h"

namespace xl::model {

torch::Tensor heads_kept_mask(const ModelConfig& cfg, const torch::Tensor& keep) {
  XL_CHECK(keep.defined(), kExitDataErr, "head keep pattern is missing");
  XL_CHECK(keep.dim() == 2 && keep.size(0) == cfg.n_layer && keep.size(1) == cfg.n_head, kExitDataErr,
           "head keep pattern has shape " << keep.sizes() << ", the model needs [" << cfg.n_layer << ", "
                                          << cfg.n_head << "]");
  torch::Tensor k = keep.detach().to(torch::kCPU);
  if (k.scalar_type() != torch::kBool) {
    torch::Tensor d = k.to(torch::kFloat64);
    XL_CHECK(((d == 0) | (d == 1)).all().item<bool>(), kExitDataErr, "head keep pattern has values other than 0 and 1");
    k = d != 0;
  }
  k = k.clone();
  for (int64_t l = 0; l < cfg.n_layer; ++l) k[l].slice(0, cfg.heads_in_layer(l)).fill_(false);
  return k;
}

torch::Tensor all_heads_mask(const ModelConfig& cfg) {
  return heads_kept_mask(cfg, torch::ones({cfg.n_layer, cfg.n_head}, torch::kBool));
}

torch::Tensor keep_to_head_mask(const ModelConfig& cfg, const torch::Tensor& keep, torch::Dtype dtype) {
  return heads_kept_mask(cfg, keep).to(dtype);
}

std::vector<int64_t> kept_heads(const ModelConfig& cfg, const torch::Tensor& keep, int64_t l) {
  torch::Tensor k = heads_kept_mask(cfg, keep);
  std::vector<int64_t> out;
  torch::Tensor row_t = k[l];
  auto row = row_t.accessor<bool, 1>();
  for (int64_t h = 0; h < cfg.heads_in_layer(l); ++h)
    if (row[h]) out.push_back(h);
  return out;
}

std::vector<int64_t> kept_head_counts(const ModelConfig& cfg, const torch::Tensor& keep) {
  torch::Tensor k = heads_kept_mask(cfg, keep).sum(1).to(torch::kLong);
  return std::vector<int64_t>(k.data_ptr<int64_t>(), k.data_ptr<int64_t>() + k.numel());
}

ModelConfig pruned_config(const ModelConfig& cfg, const torch::Tensor& keep) {
  ModelConfig out = cfg;
  out.heads_per_layer = kept_head_counts(cfg, keep);
  return out;
}

namespace {

// `t` with dimension `dim` (groups * heads * d_head entries, group-major then head-major) cut down
// to the heads in `idx`.
torch::Tensor select_heads(const torch::Tensor& t, int64_t dim, int64_t groups, int64_t heads, int64_t d_head,
                           const torch::Tensor& idx) {
  auto sizes = t.sizes().vec();
  XL_CHECK(sizes[dim] == groups * heads * d_head, kExitSoftware,
           "remove_heads: a tensor of shape " << t.sizes() << " does not hold " << heads << " heads");
  std::vector<int64_t> split(sizes.begin(), sizes.begin() + dim);
  split.insert(split.end(), {groups, heads, d_head});
  split.insert(split.end(), sizes.begin() + dim + 1, sizes.end());
  torch::Tensor picked = t.reshape(split).index_select(dim + 1, idx.to(t.device()));
  auto out = sizes;
  out[dim] = groups * idx.numel() * d_head;
  return picked.reshape(out);
}

}  // namespace

TransformerXL remove_heads(const TransformerXL& model, const torch::Tensor& keep) {
  const ModelConfig& cfg = model->config;
  ModelConfig pcfg = pruned_config(cfg, keep);
  torch::NoGradGuard no_grad;

  // The source's dtype and device, from any parameter.
  auto src_tensors = model->named_tensors();
  std::map<std::string, torch::Tensor> src(src_tensors.begin(), src_tensors.end());
  const torch::Tensor& any = src.at("word_emb.emb_layers.0.weight");

  TransformerXL pruned(pcfg, std::nullopt);  // every tensor filled below
  pruned->to(any.device(), any.scalar_type());
  pruned->train(model->is_training());

  std::map<std::string, torch::Tensor> dst;
  for (auto& [name, t] : pruned->named_tensors()) dst.emplace(name, t);

  std::map<std::string, bool> filled;
  auto put = [&](const std::string& name, const torch::Tensor& value) {
    torch::Tensor& target = dst.at(name);
    XL_CHECK(target.sizes() == value.sizes(), kExitSoftware,
             "remove_heads: " << name << " has shape " << value.sizes() << ", expected " << target.sizes());
    target.copy_(value);
    filled[name] = true;
  };

  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    const int64_t heads = cfg.heads_in_layer(l), dh = cfg.d_head;
    auto kept = kept_heads(cfg, keep, l);
    torch::Tensor idx = torch::tensor(kept, torch::kLong);
    const std::string p = "layers." + std::to_string(l) + ".dec_attn.";
    // qkv_net.weight [3*H*dh, d]: q, k, v blocks, each head-major.
    put(p + "qkv_net.weight", select_heads(src.at(p + "qkv_net.weight"), 0, 3, heads, dh, idx));
    put(p + "r_net.weight", select_heads(src.at(p + "r_net.weight"), 0, 1, heads, dh, idx));
    // o_net.weight [d, H*dh]: columns by head.
    put(p + "o_net.weight", select_heads(src.at(p + "o_net.weight"), 1, 1, heads, dh, idx));
    if (cfg.attention == "mgk" && cfg.mgk_keys > 1)
      put(p + "mgk_k_net.weight", select_heads(src.at(p + "mgk_k_net.weight"), 0, cfg.mgk_keys - 1, heads, dh, idx));
    // The variants' per-head tensors: [H, ...].
    for (const char* name : {"mgk_mu", "mgk_pi", "pers_key", "pers_val", "span_z"}) {
      auto it = src.find(p + name);
      if (it != src.end()) put(p + name, it->second.index_select(0, idx.to(it->second.device())));
    }
    auto [u, v] = model->biases(l);
    put(p + "r_w_bias", u.index_select(0, idx.to(u.device())));
    put(p + "r_r_bias", v.index_select(0, idx.to(v.device())));
  }
  for (auto& [name, target] : dst) {
    if (filled.count(name)) continue;
    auto it = src.find(name);
    XL_CHECK(it != src.end(), kExitSoftware, "remove_heads: the source model lacks " << name);
    put(name, it->second);
  }
  return pruned;
}

}  // namespace xl::model
