#include "xl/model/skip_retain.h"

#include "xl/util/error.h"

namespace xl::model {

SkipSchedule parse_skip_schedule(const std::string& name) {
  if (name == "none") return SkipSchedule::kNone;
  if (name == "linear") return SkipSchedule::kLinear;
  if (name == "uniform") return SkipSchedule::kUniform;
  if (name == "no-first") return SkipSchedule::kNoFirst;
  if (name == "no-last") return SkipSchedule::kNoLast;
  if (name == "no-first-last") return SkipSchedule::kNoFirstLast;
  XL_FAIL(kExitUsage, "unknown skip schedule '" << name << "' (use none, linear, uniform, no-first, no-last or no-first-last)");
}

std::string to_string(SkipSchedule s) {
  switch (s) {
    case SkipSchedule::kNone: return "none";
    case SkipSchedule::kLinear: return "linear";
    case SkipSchedule::kUniform: return "uniform";
    case SkipSchedule::kNoFirst: return "no-first";
    case SkipSchedule::kNoLast: return "no-last";
    case SkipSchedule::kNoFirstLast: return "no-first-last";
  }
  return "?";
}

std::vector<double> skip_probabilities(SkipSchedule s, int64_t n, double p) {
  std::vector<double> probs(static_cast<size_t>(n), 0.0);
  for (int64_t i = 1; i <= n; ++i) {
    double v = 0;
    switch (s) {
      case SkipSchedule::kNone: v = 0; break;
      case SkipSchedule::kLinear: v = i == n ? 0.0 : 0.5 * static_cast<double>(i - 1) / static_cast<double>(n); break;
      case SkipSchedule::kUniform: v = p; break;
      case SkipSchedule::kNoFirst: v = i == 1 ? 0.0 : p; break;
      case SkipSchedule::kNoLast: v = i == n ? 0.0 : p; break;
      case SkipSchedule::kNoFirstLast: v = (i == 1 || i == n) ? 0.0 : p; break;
    }
    probs[static_cast<size_t>(i - 1)] = v;
  }
  return probs;
}

double expected_context(const std::vector<double>& p_skip, int64_t mem_len) {
  double sum = 0;
  for (double p : p_skip) sum += p;
  return sum * 2.0 * static_cast<double>(mem_len);
}

std::vector<bool> draw_skips(Rng& rng, const std::vector<double>& p_skip) {
  std::vector<bool> skip(p_skip.size());
  for (size_t i = 0; i < p_skip.size(); ++i) skip[i] = rng.uniform() < p_skip[i];
  return skip;
}

}  // namespace xl::model
