// Iterative head pruning (Michel et al. 2019): remove the least important x% of all heads at a
// time, evaluating after each step, optionally re-scoring the remaining heads each time.
#pragma once
#include <functional>
#include <vector>

#include "xl/analysis/head_importance.h"
#include "xl/eval/evaluator.h"

namespace xl::analysis {

struct PruningPoint {
  double fraction = 0;   // of all heads pruned
  int64_t pruned = 0;
  double loss = 0;       // evaluation loss with them masked
};

struct PruningSchedule {
  double step_percent = 10;   // prune this share of all heads per step
  double max_fraction = 1.0;  // stop once this share is pruned
  int64_t exact_heads = -1;   // or prune exactly this many heads (one step)
  bool rescore = false;       // recompute importance after each step
};

struct IterativePruning {
  std::vector<PruningPoint> curve;
  torch::Tensor keep;        // [n_layer, n_head] bool after the last step
  torch::Tensor importance;  // the first scores
  int64_t evaluations = 0, scorings = 0;  // passes finished (kept ones included)
  int64_t kept = 0;                       // of them, taken from the cache
  // A stop signal (the settings' stop_on_signal) ended it: the curve so far; the passes finished
  // before it are in the cache.
  int stopped_by = 0;
};

using PruningProgress = std::function<void(const PruningPoint&)>;

// `cache`, when given, supplies the evaluations and importance passes it holds and keeps each new
// one as it finishes.
IterativePruning prune_iteratively(model::TransformerXL& model, const std::vector<int32_t>& eval_ids,
                                   const eval::EvalSettings& eval_settings, const std::vector<int32_t>& score_ids,
                                   const ImportanceSettings& score_settings, const PruningSchedule& schedule,
                                   const PruningProgress& progress = nullptr, EvalCache* cache = nullptr);

}  // namespace xl::analysis
