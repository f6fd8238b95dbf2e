// torch_config (txl_state_dict.h): a PyTorch Transformer-XL's hyper-parameters read off its
// state_dict's tensor shapes, and checked against what was given.
#include <algorithm>
#include <map>
#include <optional>
#include <regex>

#include "xl/interop/shape_text.h"
#include "xl/interop/txl_state_dict.h"
#include "xl/util/error.h"
#include "xl/util/setting_origins.h"

namespace xl::interop {

using model::ModelConfig;

namespace {

// A state_dict's tensors by name, and the checks torch_config makes of them (65 with one line).
class StateDictShapes {
 public:
  StateDictShapes(const checkpoint::TensorList& sd, const std::string& file) : sd_(sd), t_(sd.begin(), sd.end()), file_(file) {}
  const checkpoint::TensorList& tensors() const { return sd_; }
  const std::string& file() const { return file_; }
  bool has(const std::string& n) const { return t_.count(n) > 0; }
  const torch::Tensor& at(const std::string& n) const { return t_.at(n); }
  torch::Tensor need(const std::string& n, int64_t dims) const {
    auto it = t_.find(n);
    XL_CHECK(it != t_.end(), kExitDataErr, file_ << ": lacks tensor '" << n << "' (not a PyTorch Transformer-XL state_dict?)");
    XL_CHECK(it->second.dim() == dims, kExitDataErr,
             file_ << ": tensor '" << n << "' has shape " << shape_str(it->second) << ", expected " << dims << " dimensions");
    return it->second;
  }
  // A flag given must say what the tensors show.
  void check(const char* flag, const std::optional<int64_t>& want, int64_t found, const std::string& evidence) const {
    XL_CHECK(!want || *want == found, kExitDataErr,
             file_ << ": --" << flag << " " << *want << " does not match the state_dict, which has " << found << " ("
                   << evidence << ")");
  }

 private:
  const checkpoint::TensorList& sd_;
  std::map<std::string, torch::Tensor> t_;
  std::string file_;
};

// n_layer, d_model, the u and v biases (shared or per layer), n_head, d_head and d_inner.
void read_layers(const StateDictShapes& s, const TorchHyperParams& given, ModelConfig& c) {
  static const std::regex layer_re(R"(layers\.(\d{1,6})\..*)");  // (more layers than any model has: not a layer)
  int64_t n_layer = 0;
  for (const auto& [name, x] : s.tensors()) {
    std::smatch m;
    if (std::regex_match(name, m, layer_re)) n_layer = std::max<int64_t>(n_layer, std::stoll(m[1].str()) + 1);
  }
  XL_CHECK(n_layer > 0, kExitDataErr, s.file() << ": has no layers.N.* tensors (not a PyTorch Transformer-XL state_dict?)");
  s.check("n-layer", given.n_layer, n_layer, "layers.0 to layers." + std::to_string(n_layer - 1));
  c.n_layer = n_layer;

  torch::Tensor o = s.need("layers.0.dec_attn.o_net.weight", 2);
  c.d_model = o.size(0);
  s.check("d-model", given.d_model, c.d_model, "layers.0.dec_attn.o_net.weight " + shape_str(o));

  // u, v: shared, or per layer (untie_r).
  const bool shared = s.has("r_w_bias"), per_layer = s.has("layers.0.dec_attn.r_w_bias");
  c.untie_r = given.untie_r.value_or(!shared && per_layer);
  XL_CHECK(!c.untie_r || per_layer, kExitDataErr,
           s.file() << ": --untie-r but the state_dict has no per-layer layers.0.dec_attn.r_w_bias"
                << (shared ? " (it has shared r_w_bias)" : ""));
  XL_CHECK(c.untie_r || shared, kExitDataErr,
           s.file() << ": lacks tensor 'r_w_bias'" << (per_layer ? " (its u, v biases are per layer: give --untie-r)" : ""));
  const std::string u_name = c.untie_r ? "layers.0.dec_attn.r_w_bias" : "r_w_bias";
  torch::Tensor u = s.need(u_name, 2);
  c.n_head = u.size(0);
  c.d_head = u.size(1);
  s.check("n-head", given.n_head, c.n_head, u_name + " " + shape_str(u));
  s.check("d-head", given.d_head, c.d_head, u_name + " " + shape_str(u));
  XL_CHECK(o.size(1) == c.n_head * c.d_head, kExitDataErr,
           s.file() << ": layers.0.dec_attn.o_net.weight has shape " << shape_str(o) << " but " << u_name << " "
                << shape_str(u) << " means n_head*d_head = " << c.n_head * c.d_head);

  torch::Tensor ff = s.need("layers.0.pos_ff.CoreNet.0.weight", 2);
  c.d_inner = ff.size(0);
  s.check("d-inner", given.d_inner, c.d_inner, "layers.0.pos_ff.CoreNet.0.weight " + shape_str(ff));
}

// With several embedding clusters: the cutoffs from their rows, div_val from their widths.
void read_clusters(const StateDictShapes& s, const TorchHyperParams& given, ModelConfig& c,
                   const std::vector<int64_t>& rows, const std::vector<int64_t>& widths) {
  const int64_t d_embed = widths[0];
  const size_t k = rows.size();
  std::vector<int64_t> cutoffs;
  int64_t sum = 0;
  for (size_t i = 0; i + 1 < k; ++i) cutoffs.push_back(sum += rows[i]);
  XL_CHECK(!given.cutoffs || *given.cutoffs == cutoffs, kExitDataErr,
           s.file() << ": --cutoffs " << list_str(*given.cutoffs) << " does not match the state_dict, whose "
                << k << " embedding clusters give cutoffs " << list_str(cutoffs));
  auto fits = [&](int64_t dv) {
    int64_t d = d_embed;
    for (size_t i = 0; i < k; ++i, d /= dv)
      if (widths[i] != d) return false;
    return true;
  };
  std::string evidence = "embedding widths " + list_str(widths);
  if (given.div_val) {
    XL_CHECK(*given.div_val > 1 && fits(*given.div_val), kExitDataErr,
             s.file() << ": --div-val " << *given.div_val << " does not match the state_dict (" << evidence
                  << ", which need d_embed // div_val^i)");
    c.div_val = *given.div_val;
  } else {
    c.div_val = 0;
    for (int64_t dv = 2; dv <= std::max<int64_t>(2, d_embed) && !c.div_val; ++dv)
      if (fits(dv)) c.div_val = dv;
    XL_CHECK(c.div_val, kExitDataErr, s.file() << ": " << evidence << " do not follow d_embed // div_val^i for any div_val");
  }
  c.cutoffs = cutoffs;
}

// One embedding: div_val as given (1 by default), the cutoffs of its tail clusters as given.
void read_one_cluster(const StateDictShapes& s, const TorchHyperParams& given, ModelConfig& c, int64_t clusters) {
  c.div_val = given.div_val.value_or(1);
  XL_CHECK(c.div_val >= 1, kExitDataErr, s.file() << ": --div-val must be at least 1");
  if (c.div_val > 1) {
    XL_CHECK(!given.cutoffs || given.cutoffs->empty(), kExitDataErr,
             s.file() << ": --cutoffs " << list_str(*given.cutoffs) << " with --div-val " << c.div_val
                  << " needs one embedding per cluster, but the state_dict has only word_emb.emb_layers.0");
  } else {
    if (clusters > 0) {
      XL_CHECK(given.cutoffs, kExitUsage,
               s.file() << ": give --cutoffs: the state_dict has " << clusters
                    << " tail clusters (crit.cluster_weight) over one embedding, which does not show where they start");
    }
    c.cutoffs = given.cutoffs.value_or(std::vector<int64_t>{});
    XL_CHECK(static_cast<int64_t>(c.cutoffs.size()) == clusters, kExitDataErr,
             s.file() << ": --cutoffs " << list_str(c.cutoffs) << " makes " << c.cutoffs.size()
                  << " tail clusters but the state_dict has " << clusters
                  << (clusters ? " (crit.cluster_weight " + shape_str(s.at("crit.cluster_weight")) + ")" : " (no crit.cluster_weight)"));
  }
}

// n_token, d_embed, and the clusters' cutoffs and div_val; returns the number of embeddings.
size_t read_embeddings(const StateDictShapes& s, const TorchHyperParams& given, ModelConfig& c) {
  std::vector<int64_t> rows, widths;
  for (size_t i = 0;; ++i) {
    std::string n = "word_emb.emb_layers." + std::to_string(i) + ".weight";
    if (!s.has(n)) break;
    torch::Tensor e = s.need(n, 2);
    rows.push_back(e.size(0));
    widths.push_back(e.size(1));
  }
  XL_CHECK(!rows.empty(), kExitDataErr, s.file() << ": lacks tensor 'word_emb.emb_layers.0.weight' (not a PyTorch Transformer-XL state_dict?)");
  const int64_t d_embed = widths[0];
  const size_t k = rows.size();
  const int64_t clusters = s.has("crit.cluster_weight") ? s.need("crit.cluster_weight", 2).size(0) : 0;
  int64_t n_token = 0;
  for (int64_t r : rows) n_token += r;
  s.check("n-token", given.n_token, n_token, "rows of word_emb.emb_layers.*.weight");
  s.check("d-embed", given.d_embed, d_embed, "word_emb.emb_layers.0.weight " + shape_str(s.at("word_emb.emb_layers.0.weight")));
  c.n_token = n_token;
  c.d_embed = d_embed == c.d_model ? 0 : d_embed;

  if (k > 1) read_clusters(s, given, c, rows, widths);
  else read_one_cluster(s, given, c, clusters);
  return k;
}

// tie_weight and tie_projs, read off equal twins and checked against what was given.
void read_tying(const StateDictShapes& s, const TorchHyperParams& given, ModelConfig& c, size_t k) {
  const size_t out_layers = c.div_val == 1 ? 1 : k;
  bool tied = true;
  std::string untied_evidence;
  for (size_t i = 0; i < out_layers; ++i) {
    std::string w = "crit.out_layers." + std::to_string(i) + ".weight", e = "word_emb.emb_layers." + std::to_string(i) + ".weight";
    if (s.has(w) && !same_values(s.at(w), s.at(e))) {
      if (tied) untied_evidence = w + " differs from " + e;
      tied = false;
    }
  }
  XL_CHECK(!given.tie_weight || !*given.tie_weight || tied, kExitDataErr,
           s.file() << ": " << given.tie_weight_from << " says the output layers are tied, but " << untied_evidence);
  c.tie_weight = given.tie_weight.value_or(tied);

  const size_t n_clusters = c.cutoffs.size() + 1;
  std::vector<bool> tie_projs(n_clusters, false);
  bool any_proj = false;
  for (size_t i = 0; i < n_clusters; ++i) {
    std::string out = "crit.out_projs." + std::to_string(i);
    std::string emb = "word_emb.emb_projs." + std::to_string(c.div_val == 1 ? 0 : i);
    if (!s.has(emb)) continue;
    any_proj = true;
    tie_projs[i] = !s.has(out) || same_values(s.at(out), s.at(emb));
  }
  if (!any_proj) tie_projs.clear();  // no projections (char level): nothing to tie
  if (given.tie_projs) {
    XL_CHECK(given.tie_projs->size() == n_clusters, kExitDataErr,
             s.file() << ": " << given.tie_projs_from << " " << bools_str(*given.tie_projs) << " needs " << n_clusters
                  << " entries, one per cluster");
    for (size_t i = 0; i < n_clusters; ++i) {
      std::string out = "crit.out_projs." + std::to_string(i);
      std::string emb = "word_emb.emb_projs." + std::to_string(c.div_val == 1 ? 0 : i);
      XL_CHECK(!(*given.tie_projs)[i] || !s.has(out) || !s.has(emb) || tie_projs[i], kExitDataErr,
               s.file() << ": " << given.tie_projs_from << " says cluster " << i << " is tied, but " << out << " differs from " << emb);
    }
    if (any_proj) c.tie_projs = *given.tie_projs;
  } else {
    c.tie_projs = tie_projs;
  }
}

}  // namespace

ModelConfig torch_config(const checkpoint::TensorList& sd, const TorchHyperParams& given, const std::string& file) {
  const StateDictShapes shapes(sd, file);
  ModelConfig c;
  read_layers(shapes, given, c);
  const size_t k = read_embeddings(shapes, given, c);
  read_tying(shapes, given, c, k);
  c.pre_lnorm = given.pre_lnorm.value_or(false);
  c.same_length = given.same_length.value_or(false);
  c.clamp_len = std::max<int64_t>(0, given.clamp_len.value_or(0));  // PyTorch's -1 means off
  if (given.dropout) c.dropout = *given.dropout;
  if (given.dropatt) c.dropatt = *given.dropatt;
  c.validate(SettingOrigins(file + " (hyper-parameters)"));
  return c;
}

}  // namespace xl::interop
