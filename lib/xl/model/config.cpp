#include "xl/model/config.h"

#include "xl/util/error.h"

namespace xl::model {

nlohmann::json ModelConfig::to_json() const {
  return {
      {"n_token", n_token},     {"n_layer", n_layer},       {"d_model", d_model},
      {"n_head", n_head},       {"d_head", d_head},         {"d_inner", d_inner},
      {"d_embed", d_embed},     {"dropout", dropout},       {"dropatt", dropatt},
      {"pre_lnorm", pre_lnorm}, {"untie_r", untie_r},       {"clamp_len", clamp_len},
      {"same_length", same_length}, {"cutoffs", cutoffs},   {"div_val", div_val},
      {"tie_weight", tie_weight},   {"tie_projs", tie_projs}, {"init_std", init_std},
      {"proj_init_std", proj_init_std}, {"heads_per_layer", heads_per_layer},
  };
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source) {
  XL_CHECK(j.is_object(), kExitConfig, source << ": model config is not a JSON object");
  ModelConfig c;
  auto take = [&](const char* key, auto& field) {
    if (!j.contains(key)) return;
    try {
      j.at(key).get_to(field);
    } catch (const std::exception&) {
      XL_FAIL(kExitConfig, source << ": model config key '" << key << "' has a bad value " << j.at(key).dump());
    }
  };
  static const char* known[] = {"n_token", "n_layer", "d_model", "n_head", "d_head", "d_inner", "d_embed",
                                "dropout", "dropatt", "pre_lnorm", "untie_r", "clamp_len", "same_length",
                                "cutoffs", "div_val", "tie_weight", "tie_projs", "init_std", "proj_init_std",
                                "heads_per_layer"};
  for (const auto& item : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || item.key() == k;
    XL_CHECK(ok, kExitConfig, source << ": unknown model config key '" << item.key() << "'");
  }
  take("n_token", c.n_token);
  take("n_layer", c.n_layer);
  take("d_model", c.d_model);
  take("n_head", c.n_head);
  take("d_head", c.d_head);
  take("d_inner", c.d_inner);
  take("d_embed", c.d_embed);
  take("dropout", c.dropout);
  take("dropatt", c.dropatt);
  take("pre_lnorm", c.pre_lnorm);
  take("untie_r", c.untie_r);
  take("clamp_len", c.clamp_len);
  take("same_length", c.same_length);
  take("cutoffs", c.cutoffs);
  take("div_val", c.div_val);
  take("tie_weight", c.tie_weight);
  take("tie_projs", c.tie_projs);
  take("init_std", c.init_std);
  take("proj_init_std", c.proj_init_std);
  take("heads_per_layer", c.heads_per_layer);
  c.validate(source);
  return c;
}

void ModelConfig::validate(const std::string& source) const {
  auto bad = [&](const std::string& key, const std::string& why) {
    XL_FAIL(kExitConfig, source << ": " << key << " " << why);
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
    if (c <= prev || c >= n_token) bad("cutoffs", "must rise strictly and stay below n_token");
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
    bad("tie_projs", "needs one entry per cluster (" + std::to_string(cutoffs.size() + 1) + ")");
  if (!heads_per_layer.empty()) {
    if (static_cast<int64_t>(heads_per_layer.size()) != n_layer) bad("heads_per_layer", "needs one entry per layer");
    for (int64_t h : heads_per_layer)
      if (h < 0 || h > n_head) bad("heads_per_layer", "entries must be in [0, n_head]");
  }
  if (init_std <= 0 || proj_init_std <= 0) bad("init_std", "must be positive");
}

}  // namespace xl::model
