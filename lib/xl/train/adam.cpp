#include "xl/train/adam.h"

#include <immintrin.h>

#include <cmath>
#include <map>

#include "xl/model/kernels/blas.h"
#include "xl/model/kernels/kernel_choice.h"
#include "xl/model/kernels/parallel.h"
#include "xl/util/error.h"

namespace xl::train {
namespace {

// One fused pass of clipping and torch.optim.Adam's update over a float parameter: reads p, g, m, v
// once and writes p, m, v once, where the tensor ops take eleven passes and two temporaries. Same
// arithmetic and operation order: g *= clip (a float product, as mul_ makes it);
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
struct AdamScalars {
  float b1, one_minus_b1, b2, one_minus_b2, sqrt_bc2, eps, step_size, clip;
};

void adam_range_scalar(const AdamScalars& a, float* p, const float* grad, float* m, float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * a.clip;
    m[i] = a.b1 * m[i] + a.one_minus_b1 * g;
    v[i] = a.b2 * v[i] + a.one_minus_b2 * g * g;
    p[i] -= a.step_size * (m[i] / (std::sqrt(v[i]) / a.sqrt_bc2 + a.eps));
  }
}

__attribute__((target("avx2,fma"))) void adam_range_avx2(const AdamScalars& a, float* p, const float* g, float* m,
                                                         float* v, int64_t n) {
  const __m256 b1 = _mm256_set1_ps(a.b1), c1 = _mm256_set1_ps(a.one_minus_b1), b2 = _mm256_set1_ps(a.b2),
               c2 = _mm256_set1_ps(a.one_minus_b2), s2 = _mm256_set1_ps(a.sqrt_bc2), eps = _mm256_set1_ps(a.eps),
               step = _mm256_set1_ps(a.step_size), clip = _mm256_set1_ps(a.clip);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + i), clip);
    __m256 mi = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(c1, gi));
    __m256 vi = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(v + i)), _mm256_mul_ps(_mm256_mul_ps(c2, gi), gi));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), s2), eps);
    __m256 pi = _mm256_sub_ps(_mm256_loadu_ps(p + i), _mm256_mul_ps(step, _mm256_div_ps(mi, denom)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(p + i, pi);
  }
  adam_range_scalar(a, p + i, g + i, m + i, v + i, n - i);
}

const bool kHaveAvx2 = model::kernel_vector_units().avx2_fma;

bool fusable(const torch::Tensor& p, const torch::Tensor& g) {
  return p.scalar_type() == torch::kFloat && g.scalar_type() == torch::kFloat && model::cpu_kernel_allowed(p) &&
         p.is_contiguous() && g.is_contiguous();
}

}  // namespace

Adam::Adam(std::vector<std::pair<std::string, torch::Tensor>> params, AdamOptions opts) : opts_(opts) {
  for (auto& [name, p] : params) {
    if (!p.requires_grad()) continue;
    slots_.push_back({name, p, torch::zeros_like(p), torch::zeros_like(p), 0});
  }
}

int Adam::step(double lr, double grad_scale) {
  torch::NoGradGuard no_grad;
  int updated = 0;
  for (auto& s : slots_) {
    torch::Tensor g = s.param.grad();
    if (!g.defined()) {
      if (!opts_.zero_missing_grads || s.steps == 0) continue;
      g = torch::zeros_like(s.param);
    }
    ++s.steps;
    ++updated;
    const double bc1 = 1 - std::pow(opts_.beta1, static_cast<double>(s.steps));
    const double bc2 = 1 - std::pow(opts_.beta2, static_cast<double>(s.steps));
    if (fusable(s.param, g)) {
      const AdamScalars a{float(opts_.beta1), float(1 - opts_.beta1), float(opts_.beta2), float(1 - opts_.beta2),
                          float(std::sqrt(bc2)), float(opts_.eps), float(lr / bc1), float(grad_scale)};
      float *p = s.param.data_ptr<float>(), *m = s.exp_avg.data_ptr<float>(), *v = s.exp_avg_sq.data_ptr<float>();
      const float* gp = g.data_ptr<float>();
      xl::model::parallel_for(0, s.param.numel(), 1 << 15, [&](int64_t b, int64_t e) {
        if (kHaveAvx2) adam_range_avx2(a, p + b, gp + b, m + b, v + b, e - b);
        else adam_range_scalar(a, p + b, gp + b, m + b, v + b, e - b);
      });
      // Written through its pointer: the version tells what keeps results of the weights (the
      // attention's positional keys) that they changed, as an in-place op would.
      s.param.unsafeGetTensorImpl()->bump_version();
      continue;
    }
    // Other dtypes and layouts: the same arithmetic with tensor ops.
    if (grad_scale != 1) g = g * grad_scale;
    s.exp_avg.mul_(opts_.beta1).add_(g, 1 - opts_.beta1);
    s.exp_avg_sq.mul_(opts_.beta2).addcmul_(g, g, 1 - opts_.beta2);
    torch::Tensor denom = (s.exp_avg_sq.sqrt() / std::sqrt(bc2)).add_(opts_.eps);
    s.param.addcdiv_(s.exp_avg, denom, -lr / bc1);
  }
  return updated;
}

void Adam::clear_grads() {
  for (auto& s : slots_) s.param.mutable_grad() = torch::Tensor();
}

double Adam::grad_norm() const {
  torch::NoGradGuard no_grad;
  // Squared norms summed on the gradients' device: one synchronisation, not one per parameter. A
  // dot product reads a gradient once; pow(2).sum() writes a temporary first.
  torch::Tensor sq;
  for (const auto& s : slots_)
    if (s.param.grad().defined()) {
      const torch::Tensor flat = s.param.grad().reshape(-1).to(torch::kFloat);
      const torch::Tensor d = torch::dot(flat, flat).to(torch::kDouble);
      sq = sq.defined() ? sq + d : d;
    }
  return sq.defined() ? std::sqrt(sq.item<double>()) : 0.0;
}

double clip_factor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

checkpoint::TensorList Adam::state() const {
  checkpoint::TensorList out;
  for (const auto& s : slots_) {
    out.emplace_back("exp_avg." + s.name, s.exp_avg);
    out.emplace_back("exp_avg_sq." + s.name, s.exp_avg_sq);
    out.emplace_back("step." + s.name, torch::tensor(s.steps, torch::kLong));
  }
  return out;
}

void Adam::load_state(const checkpoint::TensorList& state, const std::string& file) {
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
