#include "xl/train/loss_scale.h"

namespace xl::train {

bool LossScaler::unscale(const std::vector<torch::Tensor>& params) const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  bool all_cuda = true;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    grads.push_back(p.mutable_grad());
    all_cuda = all_cuda && grads.back().is_cuda();
  }
  if (grads.empty()) return true;
  if (all_cuda) {  // GradScaler's own kernel: every gradient scaled and checked in a few launches
    const auto opts = grads[0].options().dtype(torch::kFloat);
    torch::Tensor found_inf = torch::zeros({1}, opts), inv_scale = torch::full({1}, 1.0 / scale_, opts);
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
    return found_inf.item<float>() == 0;
  }
  torch::Tensor finite;  // on the gradients' device: one synchronisation for all of them
  for (auto& g : grads) {
    g.mul_(1.0 / scale_);
    const torch::Tensor ok = torch::isfinite(g).all();
    finite = finite.defined() ? finite.logical_and(ok) : ok;
  }
  return finite.item<bool>();
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
