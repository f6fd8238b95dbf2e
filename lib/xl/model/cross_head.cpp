#include "xl/model/cross_head.h"

namespace xl::model {

std::vector<std::vector<int64_t>> draw_cross_head(Rng& rng, double beta, const std::vector<int64_t>& heads_per_layer) {
  std::vector<std::vector<int64_t>> perms(heads_per_layer.size());
  for (size_t l = 0; l < heads_per_layer.size(); ++l)
    if (rng.uniform() < beta) perms[l] = rng.permutation(heads_per_layer[l]);
  return perms;
}

}  // namespace xl::model
