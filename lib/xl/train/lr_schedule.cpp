#include "xl/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace xl::train {

double LrSchedule::at(int64_t done) const {
  const double pi = 3.14159265358979323846;
  if (count == "txl" && done == 0) return lr;  // before Transformer-XL's scheduler first steps
  const int64_t n = count == "txl" ? done : done + 1;
  if (warmup > 0 && n < warmup) return lr * static_cast<double>(n) / static_cast<double>(warmup);
  if (kind == "constant") return lr;
  if (kind == "cyclic-cosine") {
    const double w = static_cast<double>(std::max<int64_t>(warmup, 1));
    return eta_min + (lr - eta_min) * (1 + std::cos(pi * static_cast<double>(n) / w)) / 2;
  }
  const double s = static_cast<double>(std::min(n, steps));
  return eta_min + (lr - eta_min) * (1 + std::cos(pi * s / static_cast<double>(std::max<int64_t>(steps, 1)))) / 2;
}

nlohmann::json LrSchedule::to_json() const {
  return {{"kind", kind}, {"lr", lr}, {"eta_min", eta_min}, {"warmup", warmup}, {"steps", steps}, {"count", count}};
}

}  // namespace xl::train
