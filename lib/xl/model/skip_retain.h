// Skip-Retain (phase 1 of the paper): per training step each layer is skipped with its schedule's
// probability. A skipped layer is an exact identity and keeps its old memory (see
// TransformerXL::forward), so later segments attend to an older, longer context.
#pragma once
#include <string>
#include <vector>

#include "xl/util/rng.h"

namespace xl::model {

enum class SkipSchedule { kNone, kLinear, kUniform, kNoFirst, kNoLast, kNoFirstLast };

SkipSchedule parse_skip_schedule(const std::string& name);  // throws 64
std::string to_string(SkipSchedule schedule);

// p_skip(i) for layers i = 1..N (returned 0-indexed), the paper's eqs. 1-5:
// linear 0.5(i-1)/N with p_N = 0; uniform p; no-first; no-last; no-first-last.
std::vector<double> skip_probabilities(SkipSchedule schedule, int64_t n_layer, double p);

// Expected context of eq. (6): sum_i p_skip(i) * 2M.
double expected_context(const std::vector<double>& p_skip, int64_t mem_len);

// One Bernoulli draw per layer, shared by the whole batch. Always draws n_layer numbers so the
// stream of decisions does not depend on the probabilities.
std::vector<bool> draw_skips(Rng& rng, const std::vector<double>& p_skip);

}  // namespace xl::model
