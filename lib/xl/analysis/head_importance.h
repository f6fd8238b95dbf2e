// Head importance scores of Michel et al. (2019): I_h = E_batches |dL/d mask_h|, the gradient of
// the loss with respect to a gate on each head's output, taken with dropout off and the memory
// carried across segments as in evaluation. (Their code takes |.| per token before summing; we
// follow the paper's formula: the absolute value of each batch's mean-loss gradient.)
#pragma once
#include <torch/torch.h>

#include <vector>

#include "xl/model/precision.h"
#include "xl/model/transformer_xl.h"

namespace xl::analysis {

struct ImportanceSettings {
  int64_t tgt_len = 128;
  int64_t mem_len = 128;
  int64_t batch_size = 10;
  int64_t max_tokens = 0;        // 0: the whole split
  bool normalize_layers = false; // divide each layer's scores by their L2 norm
  torch::Tensor head_mask;       // [n_layer, n_head] 0/1 mask in force (pruned heads), or undefined
  model::Precision precision = model::Precision::kFp32;  // of the matrix products
};

// [n_layer, n_head] float scores; entries beyond a layer's head count are 0.
torch::Tensor head_importance(model::TransformerXL& model, const std::vector<int32_t>& ids,
                              const ImportanceSettings& settings);

}  // namespace xl::analysis
