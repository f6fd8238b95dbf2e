#include "xl/model/positional.h"

namespace xl::model {

SinusoidTable::SinusoidTable(int64_t d_model) {
  inv_freq_ = 1.0 / torch::pow(10000.0, torch::arange(0, d_model, 2, torch::kFloat64) / static_cast<double>(d_model));
}

torch::Tensor SinusoidTable::descending(int64_t d_max, int64_t count, int64_t clamp_len,
                                        const torch::TensorOptions& opts) {
  auto device = opts.device();
  auto key = std::make_tuple(d_max, count, clamp_len, static_cast<int>(opts.dtype().toScalarType()),
                             static_cast<int>(device.type()) * 64 + device.index());
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  torch::NoGradGuard no_grad;
  // Computed in double, then cast, so the table is identical whatever the model dtype.
  auto pos = torch::arange(d_max, d_max - count, -1, torch::kFloat64);
  if (clamp_len > 0) pos = pos.clamp_max(static_cast<double>(clamp_len));
  auto sinusoid = torch::outer(pos, inv_freq_);
  auto table = torch::cat({sinusoid.sin(), sinusoid.cos()}, -1).to(opts);
  if (cache_.size() > 64) cache_.clear();  // shapes repeat; bound the cache anyway
  cache_.emplace(key, table);
  return table;
}

}  // namespace xl::model
