// The learning rate per update: linear warm-up, then
//   cosine         Transformer-XL: eta_min + (lr - eta_min)(1 + cos(pi s / S)) / 2, s counted from
//                  step 0 (warm-up included), eta_min after S
//   constant       lr
//   cyclic-cosine  the paper's code: after warm-up a cosine with period 2 x warmup (LR 0 at the
//                  end of warm-up, cyclic afterwards); kept for reproducing its runs
// How updates are counted (`count`):
//   txl    update k uses the schedule at k - 1: Transformer-XL's train.py steps its scheduler
//          after each update, so its first update uses the base lr even during warm-up
//   ahead  update k uses the schedule at k (xl 0.1's convention)
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace xl::train {

struct LrSchedule {
  std::string kind = "cosine";
  double lr = 2.5e-4;
  double eta_min = 0;
  int64_t warmup = 0;
  int64_t steps = 0;          // the cosine's length S
  std::string count = "txl";

  // The learning rate of the update made after `done` updates of this schedule.
  double at(int64_t done) const;
  // The first update count at which the schedule stays at eta_min for good (cosine), or -1.
  int64_t end() const { return kind == "cosine" ? (count == "txl" ? steps : steps - 1) : -1; }
  // Whether a cosine down to eta_min 0 is over after `done` updates: every later update is at a
  // learning rate of 0, which leaves the weights as they are.
  bool over(int64_t done) const { return kind == "cosine" && eta_min == 0 && done >= steps; }
  nlohmann::json to_json() const;
};

}  // namespace xl::train
