// Ablation of single heads (the paper's Table 3, Michel et al.'s "prune one head"): every
// (layer, head) is masked in turn and the model evaluated; the change of the loss against the
// unpruned model is reported with each layer's standard deviation.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "xl/analysis/eval_cache.h"
#include "xl/eval/evaluator.h"
#include "xl/model/transformer_xl.h"

namespace xl::analysis {

struct HeadScore {
  int64_t layer = 0, head = 0;
  double loss = 0;        // with this head masked (nats per token)
  double delta_loss = 0;  // loss - base loss
};

struct HeadAblation {
  double base_loss = 0;
  int64_t tokens = 0;
  std::vector<HeadScore> heads;       // layer-major
  double seconds = 0;
  int64_t evaluations = 0;  // the unpruned model's and one per head
  int64_t kept = 0;         // of them, taken from the cache
  // A stop signal (settings.stop_on_signal) ended the study: `heads` is empty, and the evaluations
  // finished before it are in the cache.
  int stopped_by = 0;
  int64_t finished = 0;  // evaluations finished (kept ones included) when it stopped
};

// A model factory gives each worker its own model (models hold caches that threads must not
// share). `jobs` workers run with one LibTorch thread each.
using ModelFactory = std::function<model::TransformerXL()>;
using AblationProgress = std::function<void(int64_t done, int64_t total)>;

// `cache`, when given, supplies the evaluations it holds and keeps each new one as it finishes.
HeadAblation ablate_each_head(const ModelFactory& make_model, const std::vector<int32_t>& ids,
                              const eval::EvalSettings& settings, int jobs, const AblationProgress& progress = nullptr,
                              EvalCache* cache = nullptr);


}  // namespace xl::analysis
