// The small model the evaluation and generation tests score and sample from, and random token ids.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "support/model_sizes.h"
#include "xl/model/transformer_xl.h"
#include "xl/util/rng.h"

namespace xl::test {

inline model::ModelConfig eval_config() {
  model::ModelConfig c = xl::test::model_of_sizes(13, 2, 16, 2, 8, 24);  // tokens, layers, d_model, heads, d_head, d_inner
  c.dropout = 0.1;  // evaluation must switch it off
  return c;
}

inline model::TransformerXL eval_model(const model::ModelConfig& c, torch::Dtype dtype) {
  model::TransformerXL m(c);
  m->reset_parameters(7);
  m->to(dtype);
  m->train();  // evaluation puts it in eval mode and back
  return m;
}

inline std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  xl::Rng rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  return ids;
}

}  // namespace xl::test
