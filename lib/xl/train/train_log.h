// What the trainer reports between validations: per-step figures gathered over a window of
// --log-interval steps, turned into a "train" metrics event and a human status line.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "xl/eval/metric.h"

namespace xl::train {

class TrainWindow {
 public:
  explicit TrainWindow(int64_t n_layer)
      : skips_(static_cast<size_t>(n_layer), 0), crossings_(static_cast<size_t>(n_layer), 0) {}
  // One step: its mean loss, wall seconds, tokens, gradient norm (before clipping), mean memory
  // age in tokens, which layers were skipped (empty in phase 2) and in which the heads read each
  // other's keys and values (cross-head attention fired).
  void add(double loss, double seconds, int64_t tokens, double grad_norm, double memory_age,
           const std::vector<bool>& skipped, const std::vector<bool>& crossed);
  // A Compressive Transformer's training losses of the step just added (NaN: not computed).
  void add_compression_losses(double attention_reconstruction, double auto_encoding);
  int64_t steps() const { return steps_; }
  double mean_loss() const { return loss_ / static_cast<double>(steps_); }
  double tokens_per_s() const { return static_cast<double>(tokens_) / seconds_; }
  double seconds_per_step() const { return seconds_ / static_cast<double>(steps_); }
  // loss, the metric, grad_norm, tok_per_s, ms_per_batch; with `skip_rates` also each layer's
  // skip rate and the mean memory age; with `sch_rates` each layer's cross-head rate; with a
  // compressed memory's losses their means (cmem_ar_loss, cmem_ae_loss).
  nlohmann::json event(const eval::Metric& metric, bool skip_rates, bool sch_rates) const;
  void clear();

 private:
  double loss_ = 0, seconds_ = 0, norm_ = 0, age_ = 0;
  double ar_ = 0, ae_ = 0;
  int64_t ar_steps_ = 0, ae_steps_ = 0;
  int64_t steps_ = 0, tokens_ = 0;
  std::vector<int64_t> skips_, crossings_;
};

// "step 120 | ep 0.03 | loss 2.345 | bpc 3.383 | lr 2.50e-04 | 11450 tok/s | 178 ms/batch | ETA 3m02s"
// (no ETA when `eta_seconds` < 0).
std::string status_line(int64_t step, double epoch, double loss, const eval::Metric& metric, double lr, double tok_s,
                        double seconds_per_step, double eta_seconds);

}  // namespace xl::train
