// Learning rate per step: linear warm-up, then
//   cosine         Transformer-XL: eta_min + (lr - eta_min)(1 + cos(pi s / S)) / 2, s from step 0
//   constant       lr
//   cyclic-cosine  the paper's code: after warm-up a cosine with period 2 x warmup (LR 0 at the
//                  end of warm-up, cyclic afterwards); kept for reproducing its runs
#pragma once
#include <cstdint>
#include <string>

namespace xl::train {

double learning_rate(const std::string& schedule, double lr, double eta_min, int64_t warmup, int64_t period,
                     int64_t step);

}  // namespace xl::train
