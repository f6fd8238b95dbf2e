#include "xl/analysis/iterative_pruning.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "xl/model/head_pruning.h"
#include "xl/util/error.h"

namespace xl::analysis {

IterativePruning prune_iteratively(model::TransformerXL& model, const std::vector<int32_t>& eval_ids,
                                   const eval::EvalSettings& eval_settings, const std::vector<int32_t>& score_ids,
                                   const ImportanceSettings& score_settings, const PruningSchedule& sched,
                                   const PruningProgress& progress, EvalCache* cache) {
  const auto& cfg = model->config;
  torch::Tensor keep = model::all_heads_mask(cfg);
  const int64_t total = keep.sum().item<int64_t>();
  XL_CHECK(sched.exact_heads <= total, kExitUsage,
           "cannot prune " << sched.exact_heads << " heads: the model has only " << total);
  XL_CHECK(sched.step_percent > 0 && sched.max_fraction > 0 && sched.max_fraction <= 1, kExitUsage,
           "--step must be positive and --max-fraction in (0, 1]");
  auto dtype = model->parameters().front().scalar_type();
  IterativePruning out;
  // The masks change, the weights do not: the study's key is taken once.
  const std::string study = cache && cache->enabled() ? EvalCache::study_key(model, eval_ids, eval_settings) : "";
  auto evaluate = [&](int64_t pruned) {
    eval::EvalSettings s = eval_settings;
    s.head_mask = model::keep_to_head_mask(cfg, keep, dtype);
    const std::string key = study.empty() ? "" : EvalCache::key(study, cfg, s.head_mask);
    std::optional<eval::EvalResult> r = study.empty() ? std::nullopt : cache->find(key);
    if (r) {
      ++out.kept;
    } else {
      r = eval::evaluate(model, eval_ids, s);
      if ((out.stopped_by = r->stopped_by)) return false;
      if (cache) cache->add(key, *r);
    }
    ++out.evaluations;
    out.curve.push_back({static_cast<double>(pruned) / static_cast<double>(total), pruned, r->loss()});
    if (progress) progress(out.curve.back());
    return true;
  };
  torch::Tensor importance;
  auto score = [&]() {
    ImportanceSettings s = score_settings;
    s.head_mask = model::keep_to_head_mask(cfg, keep, dtype);
    Importance r = head_importance(model, score_ids, s, cache);
    if ((out.stopped_by = r.stopped_by)) return false;
    out.kept += r.kept;
    ++out.scorings;
    importance = r.scores;
    return true;
  };
  if (!score()) return out;
  out.importance = importance.clone();
  if (!evaluate(0)) return out;
  int64_t pruned = 0;
  const int64_t most = static_cast<int64_t>(std::floor(sched.max_fraction * total + 1e-9));
  for (int step = 1;; ++step) {
    // At least one head a step: a step of under half a head (4% of 16) rounded to none, and ended
    // the curve there.
    int64_t target = sched.exact_heads >= 0
                         ? sched.exact_heads
                         : std::max<int64_t>(pruned + 1, std::llround(step * sched.step_percent / 100.0 * total));
    target = std::min({target, total, most});
    if (target <= pruned) break;
    // The least important kept heads go first (ties: lower layer, then lower head).
    std::vector<std::tuple<float, int64_t, int64_t>> order;
    for (int64_t l = 0; l < cfg.n_layer; ++l)
      for (int64_t h = 0; h < cfg.heads_in_layer(l); ++h)
        if (keep[l][h].item<bool>()) order.emplace_back(importance[l][h].item<float>(), l, h);
    std::sort(order.begin(), order.end());
    for (int64_t k = 0; k < target - pruned && k < static_cast<int64_t>(order.size()); ++k)
      keep[std::get<1>(order[k])][std::get<2>(order[k])] = false;
    pruned = target;
    if (!evaluate(pruned)) return out;
    if (sched.exact_heads >= 0 || pruned >= total) break;
    if (sched.rescore && !score()) return out;
  }
  out.keep = keep;
  return out;
}

}  // namespace xl::analysis
