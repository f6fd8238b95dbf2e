#include "xl/train/train_log.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "xl/util/parse.h"

namespace xl::train {

void TrainWindow::add(double loss, double seconds, int64_t tokens, double grad_norm, double memory_age,
                      const std::vector<bool>& skipped, const std::vector<bool>& crossed) {
  loss_ += loss;
  seconds_ += seconds;
  tokens_ += tokens;
  norm_ += grad_norm;
  age_ += memory_age;
  ++steps_;
  for (size_t l = 0; l < skipped.size() && l < skips_.size(); ++l) skips_[l] += skipped[l];
  for (size_t l = 0; l < crossed.size() && l < crossings_.size(); ++l) crossings_[l] += crossed[l];
}

void TrainWindow::add_compression_losses(double attention_reconstruction, double auto_encoding) {
  if (!std::isnan(attention_reconstruction)) ar_ += attention_reconstruction, ++ar_steps_;
  if (!std::isnan(auto_encoding)) ae_ += auto_encoding, ++ae_steps_;
}

nlohmann::json TrainWindow::event(const eval::Metric& metric, bool skip_rates, bool sch_rates) const {
  const double n = static_cast<double>(steps_);
  auto rates = [&](const std::vector<int64_t>& counts) {
    std::vector<double> out;
    for (auto c : counts) out.push_back(static_cast<double>(c) / n);
    return out;
  };
  nlohmann::json ev = {{"loss", mean_loss()}, {metric.name(), metric.of(mean_loss())}, {"grad_norm", norm_ / n},
                       {"tok_per_s", tokens_per_s()}, {"ms_per_batch", 1000.0 * seconds_per_step()}};
  if (skip_rates) {
    ev["skip_rate"] = rates(skips_);
    ev["mean_memory_age"] = age_ / n;
  }
  if (sch_rates) ev["sch_rate"] = rates(crossings_);
  if (ar_steps_ > 0) ev["cmem_ar_loss"] = ar_ / static_cast<double>(ar_steps_);
  if (ae_steps_ > 0) ev["cmem_ae_loss"] = ae_ / static_cast<double>(ae_steps_);
  return ev;
}

void TrainWindow::clear() {
  loss_ = seconds_ = norm_ = age_ = ar_ = ae_ = 0;
  steps_ = tokens_ = ar_steps_ = ae_steps_ = 0;
  std::fill(skips_.begin(), skips_.end(), 0);
  std::fill(crossings_.begin(), crossings_.end(), 0);
}

std::string status_line(int64_t step, double epoch, double loss, const eval::Metric& metric, double lr, double tok_s,
                        double seconds_per_step, double eta_seconds) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %lld | ep %.2f | loss %.3f | %s %.3f | lr %.2e | %.0f tok/s | %.0f ms/batch",
                static_cast<long long>(step), epoch, loss, metric.name().c_str(), metric.of(loss), lr, tok_s,
                1000 * seconds_per_step);
  std::string line = buf;
  if (eta_seconds >= 0) line += " | ETA " + parse::format_duration(eta_seconds);
  return line;
}

}  // namespace xl::train
