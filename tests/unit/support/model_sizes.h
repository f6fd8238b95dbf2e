// The small models the unit and GPU tests build, by their sizes, with dropout off (a test that
// wants dropout sets it).
#pragma once
#include <cstdint>

#include "xl/model/config.h"

namespace xl::test {

inline xl::model::ModelConfig model_of_sizes(int64_t n_token, int64_t n_layer, int64_t d_model, int64_t n_head,
                                             int64_t d_head, int64_t d_inner) {
  xl::model::ModelConfig c;
  c.n_token = n_token;
  c.n_layer = n_layer;
  c.d_model = d_model;
  c.n_head = n_head;
  c.d_head = d_head;
  c.d_inner = d_inner;
  c.dropout = 0;
  return c;
}

}  // namespace xl::test
