#include "xl/model/config.h"

#include "xl/util/error.h"
#include "xl/util/json_io.h"
#include "xl/util/parse.h"

namespace xl::model {

// Every field, once: JSON names are the field names.
#define XL_MODEL_FIELDS(X)                                                                                 \
  X(n_token) X(n_layer) X(d_model) X(n_head) X(d_head) X(d_inner) X(d_embed) X(dropout) X(dropatt)         \
  X(pre_lnorm) X(untie_r) X(clamp_len) X(same_length) X(cutoffs) X(div_val) X(tie_weight) X(tie_projs)     \
  X(init_std) X(proj_init_std) X(heads_per_layer) X(attention) X(mgk_keys) X(mgk_estep) X(persistent_mem) X(ff)     \
  X(adaptive_span) X(span_max) X(span_ramp) X(span_loss) X(cmem_rate) X(cmem_fn)

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j;
#define XL_PUT(f) j[#f] = f;
  XL_MODEL_FIELDS(XL_PUT)
#undef XL_PUT
  return j;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source) {
  return from_json(j, source, SettingOrigins(source));
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source, const SettingOrigins& origins) {
  XL_CHECK(j.is_object(), kExitConfig, source << ": model config is not a JSON object");
  ModelConfig c;
  const nlohmann::json known = c.to_json();
  for (const auto& item : j.items())
    XL_CHECK(known.contains(item.key()), kExitConfig, source << ": unknown model config key '" << item.key() << "'");
#define XL_GET(f)                                                                                             \
  if (j.contains(#f)) {                                                                                       \
    try {                                                                                                     \
      j.at(#f).get_to(c.f);                                                                                   \
    } catch (const std::exception&) {                                                                         \
      XL_FAIL(kExitConfig, source << ": model config key '" #f "' has a bad value " << json_line(j.at(#f)));  \
    }                                                                                                         \
  }
  XL_MODEL_FIELDS(XL_GET)
#undef XL_GET
  c.validate(origins);
  return c;
}

double ModelConfig::minimum_parameters() const {
  double n = static_cast<double>(n_token);
  for (int64_t l = 0; l < n_layer; ++l) {
    const double heads = static_cast<double>(heads_in_layer(l)), d = static_cast<double>(d_model);
    n += 5 * heads * static_cast<double>(d_head) * d;  // q, k, v, r, o
    if (ff) n += 2 * d * static_cast<double>(d_inner);
    n += 2 * heads * static_cast<double>(persistent_mem) * static_cast<double>(d_head);
  }
  return n;
}

std::vector<int64_t> ModelConfig::fit_to_vocab(int64_t vocab_size) {
  n_token = vocab_size;
  std::vector<int64_t> dropped;
  while (!cutoffs.empty() && cutoffs.back() >= n_token) {
    dropped.insert(dropped.begin(), cutoffs.back());
    cutoffs.pop_back();
    // tie_projs has one entry per cluster: the head, then one per cutoff.
    if (tie_projs.size() > cutoffs.size() + 1) tie_projs.pop_back();
  }
  return dropped;
}

void ModelConfig::validate(const SettingOrigins& origins) const {
  // A key typed as a flag or INI key is named so, as are the keys its reason names.
  auto bad = [&](const std::string& key, const std::string& why) {
    origins.fail(key, origins.typed(key) ? parse::kebab_case(why) : why);
  };
  if (n_token < 2) bad("n_token", "must be at least 2");
  if (n_layer < 1) bad("n_layer", "must be at least 1");
  if (d_model < 2 || d_model % 2) bad("d_model", "must be a positive even number (sinusoid halves)");
  if (n_head < 1) bad("n_head", "must be at least 1");
  if (d_head < 1) bad("d_head", "must be at least 1");
  if (d_inner < 1) bad("d_inner", "must be at least 1");
  if (d_embed < 0) bad("d_embed", "must not be negative");
  if (dropout < 0 || dropout >= 1) bad("dropout", "must be in [0, 1)");
  if (dropatt < 0 || dropatt >= 1) bad("dropatt", "must be in [0, 1)");
  if (clamp_len < 0) bad("clamp_len", "must not be negative");
  if (div_val < 1) bad("div_val", "must be at least 1");
  int64_t prev = 0;
  for (int64_t c : cutoffs) {
    if (c <= prev || c >= n_token) bad("cutoffs", "must rise strictly and stay below the vocab's size");
    prev = c;
  }
  if (div_val > 1) {
    for (size_t i = 0; i <= cutoffs.size(); ++i) {
      int64_t d = embed_dim();
      for (size_t k = 0; k < i; ++k) d /= div_val;
      if (d < 1) bad("div_val", "leaves a cluster with embedding width 0");
    }
  }
  if (!tie_projs.empty() && tie_projs.size() != cutoffs.size() + 1)
    bad("tie_projs", "has " + std::to_string(tie_projs.size()) + " entries, but needs one per cluster: " +
                         std::to_string(cutoffs.size() + 1) + " (the head and one per cutoff of " +
                         json_line(nlohmann::json(cutoffs)) + ")");
  if (!heads_per_layer.empty()) {
    if (static_cast<int64_t>(heads_per_layer.size()) != n_layer) bad("heads_per_layer", "needs one entry per layer");
    for (int64_t h : heads_per_layer)
      if (h < 0 || h > n_head) bad("heads_per_layer", "entries must be in [0, n_head]");
  }
  if (init_std <= 0 || proj_init_std <= 0) bad("init_std", "must be positive");
  if (attention != "rel" && attention != "mgk" && attention != "smgk") bad("attention", "must be rel, mgk or smgk");
  if (mgk_keys < 1 || mgk_keys > 16) bad("mgk_keys", "must be in [1, 16]");
  if (mgk_estep != "soft" && mgk_estep != "hard") bad("mgk_estep", "must be soft or hard");
  if (persistent_mem < 0) bad("persistent_mem", "must not be negative");
  if (!ff && persistent_mem == 0) bad("ff", "can be off only with persistent_mem > 0 (the persistent vectors replace it)");
  if (is_mgk() && persistent_mem > 0) bad("persistent_mem", "is not supported with MGK attention (its keys are not Gaussian mixtures)");
  if (span_max < 0) bad("span_max", "must not be negative");
  if (span_ramp < 1) bad("span_ramp", "must be at least 1");
  if (span_loss < 0) bad("span_loss", "must not be negative");
  if (cmem_rate < 0) bad("cmem_rate", "must not be negative (0: no compressed memory)");
  if (cmem_fn != "conv" && cmem_fn != "dilated" && cmem_fn != "max" && cmem_fn != "mean")
    bad("cmem_fn", "must be conv, dilated, max or mean");
  if (cmem_rate > 0 && adaptive_span)
    bad("cmem_rate", "cannot go with adaptive_span, which sizes each layer's memory as it learns (nothing would leave it in order)");
  if (cmem_rate > 0 && same_length)
    bad("cmem_rate", "cannot go with same_length, which gives every query mem_len keys (a compressed memory adds more)");
  if (cmem_rate > 64) bad("cmem_rate", "must be at most 64");
  // Sizes a file may claim: no dimension beyond what any model here could use.
  const int64_t limit = int64_t{1} << 24;
  for (auto [key, v] : {std::pair<const char*, int64_t>{"n_token", n_token}, {"n_layer", n_layer}, {"d_model", d_model},
                        {"n_head", n_head}, {"d_head", d_head}, {"d_inner", d_inner}, {"d_embed", d_embed},
                        {"persistent_mem", persistent_mem}, {"span_max", span_max}})
    if (v > limit) bad(key, "is larger than " + std::to_string(limit));
}

}  // namespace xl::model
