// Stochastic cross-head attention (SCH): in training, for each attention layer and step, with
// probability beta every head h reads the keys, values and positional keys of head pi(h) for a
// random permutation pi (identity allowed), keeping its own query and u, v biases and its output
// slot. The permutation itself is applied in RelMultiHeadAttn; here it is drawn.
#pragma once
#include <vector>

#include "xl/util/rng.h"

namespace xl::model {

// One draw per layer: an empty vector means "no permutation". Always draws one uniform per
// layer, and a permutation only when it fires.
std::vector<std::vector<int64_t>> draw_cross_head(Rng& rng, double beta, const std::vector<int64_t>& heads_per_layer);

}  // namespace xl::model
