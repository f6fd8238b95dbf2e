// The tiny models the model tests build: a char-level one of 3 layers, and one with an adaptive
// softmax of three clusters; random token batches.
#pragma once
#include <torch/torch.h>

#include <cstdint>

#include "support/model_sizes.h"
#include "xl/model/transformer_xl.h"

namespace xl::test {

inline model::ModelConfig tiny_config() {
  return xl::test::model_of_sizes(11, 3, 8, 2, 3, 10);  // tokens, layers, d_model, heads, d_head, d_inner
}

// 40 words in a shortlist of 10 and tails of 15 (projected to 4) and 15 (to 2), d_model 8.
inline model::ModelConfig small_adaptive_config() {
  model::ModelConfig c = tiny_config();
  c.n_token = 40;
  c.cutoffs = {10, 25};
  c.div_val = 2;
  c.tie_projs = {false, true, true};
  return c;
}

inline model::TransformerXL make_model(const model::ModelConfig& c, torch::Dtype dtype = torch::kFloat64) {
  model::TransformerXL m(c);
  m->reset_parameters(5);
  m->to(dtype);
  m->eval();
  return m;
}

inline torch::Tensor tokens(int64_t b, int64_t t, int64_t v, int seed) {
  torch::manual_seed(seed);
  return torch::randint(0, v, {b, t}, torch::kLong);
}

}  // namespace xl::test
