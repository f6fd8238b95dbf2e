#include "xl/train/lr_schedule.h"

#include <cmath>

namespace xl::train {

double learning_rate(const std::string& schedule, double lr, double eta_min, int64_t warmup, int64_t period,
                     int64_t step) {
  const double pi = 3.14159265358979323846;
  const int64_t n = step + 1;  // Transformer-XL counts the update being made from 1
  if (warmup > 0 && n < warmup) return lr * static_cast<double>(n) / static_cast<double>(warmup);
  if (schedule == "constant") return lr;
  if (schedule == "cyclic-cosine") {
    double w = static_cast<double>(std::max<int64_t>(warmup, 1));
    return eta_min + (lr - eta_min) * (1 + std::cos(pi * static_cast<double>(n) / w)) / 2;
  }
  double s = static_cast<double>(std::min(n, period));
  return eta_min + (lr - eta_min) * (1 + std::cos(pi * s / static_cast<double>(std::max<int64_t>(period, 1)))) / 2;
}

}  // namespace xl::train
