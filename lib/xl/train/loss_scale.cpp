#include "xl/train/loss_scale.h"

namespace xl::train {

bool LossScaler::unscale(const std::vector<torch::Tensor>& params) const {
  torch::NoGradGuard no_grad;
  torch::Tensor finite;  // on the gradients' device: one synchronisation for all of them
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    torch::Tensor g = p.mutable_grad();
    g.mul_(1.0 / scale_);
    const torch::Tensor ok = torch::isfinite(g).all();
    finite = finite.defined() ? finite.logical_and(ok) : ok;
  }
  return !finite.defined() || finite.item<bool>();
}

void LossScaler::update(bool finite) {
  if (!finite) {
    scale_ = std::max(1.0, scale_ / 2);
    good_steps_ = 0;
  } else if (++good_steps_ >= growth_interval_) {
    scale_ *= 2;
    good_steps_ = 0;
  }
}

}  // namespace xl::train
