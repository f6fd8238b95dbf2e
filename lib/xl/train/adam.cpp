#include "xl/train/adam.h"

#include <cmath>
#include <map>

#include "xl/util/error.h"

namespace xl::train {

Adam::Adam(std::vector<std::pair<std::string, torch::Tensor>> params, AdamOptions opts) : opts_(opts) {
  for (auto& [name, p] : params) {
    if (!p.requires_grad()) continue;
    slots_.push_back({name, p, torch::zeros_like(p), torch::zeros_like(p), 0});
  }
}

int Adam::step(double lr) {
  torch::NoGradGuard no_grad;
  int updated = 0;
  for (auto& s : slots_) {
    const torch::Tensor& g = s.param.grad();
    if (!g.defined()) continue;
    ++s.steps;
    ++updated;
    // The same arithmetic as torch.optim.Adam.
    s.exp_avg.mul_(opts_.beta1).add_(g, 1 - opts_.beta1);
    s.exp_avg_sq.mul_(opts_.beta2).addcmul_(g, g, 1 - opts_.beta2);
    double bc1 = 1 - std::pow(opts_.beta1, static_cast<double>(s.steps));
    double bc2 = 1 - std::pow(opts_.beta2, static_cast<double>(s.steps));
    torch::Tensor denom = (s.exp_avg_sq.sqrt() / std::sqrt(bc2)).add_(opts_.eps);
    s.param.addcdiv_(s.exp_avg, denom, -lr / bc1);
  }
  return updated;
}

void Adam::clear_grads() {
  for (auto& s : slots_) s.param.mutable_grad() = torch::Tensor();
}

double Adam::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  double sq = 0;
  for (auto& s : slots_)
    if (s.param.grad().defined()) sq += s.param.grad().pow(2).sum().item<double>();
  double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    double coef = max_norm / (norm + 1e-6);
    for (auto& s : slots_)
      if (s.param.grad().defined()) s.param.mutable_grad().mul_(coef);
  }
  return norm;
}

h5::TensorList Adam::state() const {
  h5::TensorList out;
  for (const auto& s : slots_) {
    out.emplace_back("exp_avg." + s.name, s.exp_avg);
    out.emplace_back("exp_avg_sq." + s.name, s.exp_avg_sq);
    out.emplace_back("step." + s.name, torch::tensor(s.steps, torch::kLong));
  }
  return out;
}

void Adam::load_state(const h5::TensorList& state, const std::string& file) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  for (auto& s : slots_) {
    auto m = by_name.find("exp_avg." + s.name), v = by_name.find("exp_avg_sq." + s.name), k = by_name.find("step." + s.name);
    XL_CHECK(m != by_name.end() && v != by_name.end() && k != by_name.end(), kExitDataErr,
             file << ": optimizer state lacks parameter '" << s.name << "'");
    XL_CHECK(m->second.sizes() == s.param.sizes(), kExitDataErr, file << ": optimizer state of '" << s.name << "' has the wrong shape");
    s.exp_avg.copy_(m->second);
    s.exp_avg_sq.copy_(v->second);
    s.steps = k->second.item<int64_t>();
  }
}

}  // namespace xl::train
