// Ablation of single heads (the paper's Table 3, Michel et al.'s "prune one head"): every
// (layer, head) is masked in turn and the model evaluated; the change of the loss against the
// unpruned model is reported with each layer's standard deviation.
#pragma once
#include <functional>
#include <string>
#include <vector>

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
};

// A model factory gives each worker its own model (models hold caches that threads must not
// share). `jobs` workers run with one LibTorch thread each.
using ModelFactory = std::function<model::TransformerXL()>;
using AblationProgress = std::function<void(int64_t done, int64_t total)>;

HeadAblation ablate_each_head(const ModelFactory& make_model, const std::vector<int32_t>& ids,
                              const eval::EvalSettings& settings, int jobs, const AblationProgress& progress = nullptr);


}  // namespace xl::analysis
