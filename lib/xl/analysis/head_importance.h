// Head importance scores of Michel et al. (2019): I_h = E_batches |dL/d mask_h|, the gradient of
// the loss with respect to a gate on each head's output, taken with dropout off and the memory
// carried across segments as in evaluation. (Their code takes |.| per token before summing; we
// follow the paper's formula: the absolute value of each batch's mean-loss gradient.)
#pragma once
#include <torch/torch.h>

#include <vector>

#include "xl/analysis/eval_cache.h"
#include "xl/compute/precision.h"
#include "xl/model/transformer_xl.h"

namespace xl::analysis {

struct ImportanceSettings {
  int64_t tgt_len = 128;
  int64_t mem_len = 128;
  int64_t cmem_len = 0;          // compressed memory slots (a model with cmem_rate)
  int64_t batch_size = 10;
  int64_t max_tokens = 0;        // 0: the whole split
  bool normalize_layers = false; // divide each layer's scores by their L2 norm
  torch::Tensor head_mask;       // [n_layer, n_head] 0/1 mask in force (pruned heads), or undefined
  compute::Precision precision = compute::Precision::kFp32;  // of the matrix products
  // A stop signal caught by the process (signals::catch_stop) ends the pass after its batch, with
  // Importance::stopped_by set and no scores.
  bool stop_on_signal = false;
};

struct Importance {
  torch::Tensor scores;  // [n_layer, n_head] float; entries beyond a layer's head count are 0
  bool kept = false;     // taken from the cache
  int stopped_by = 0;    // the signal that ended the pass (stop_on_signal), or 0
};

// `cache`, when given, supplies the scores it holds for this model, tokens, settings and head mask,
// and keeps them when they are computed.
Importance head_importance(model::TransformerXL& model, const std::vector<int32_t>& ids,
                           const ImportanceSettings& settings, EvalCache* cache = nullptr);

}  // namespace xl::analysis
