#include "xl/train/adam.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "xl/compute/blas.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/parallel.h"
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

const bool kHaveAvx2 = compute::kernel_vector_units().avx2_fma;

// The squares of n floats summed in double in eight running sums (element i into sum i % 8, the
// tail into sum 0), added pairwise at the end: the same bits on every CPU and thread count. A
// float's square is exact in double, so a fused multiply-add rounds once, as the product and sum
// do. The scalar loop's sums lived on the stack and its SSE2 code waited on them, which made the
// norm of a large model slow (measured: bench/HISTORY.md, "The gradient norm and the column split").
double sum_squares_scalar(const float* g, int64_t n) {
  double lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] += static_cast<double>(g[i + j]) * g[i + j];
  for (; i < n; ++i) lane[0] += static_cast<double>(g[i]) * g[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

__attribute__((target("avx2,fma"))) double sum_squares_avx2(const float* g, int64_t n) {
  __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();  // sums 0-3 and 4-7
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(g + i)), b = _mm256_cvtps_pd(_mm_loadu_ps(g + i + 4));
    low = _mm256_fmadd_pd(a, a, low);
    high = _mm256_fmadd_pd(b, b, high);
  }
  double lane[8];
  _mm256_storeu_pd(lane, low);
  _mm256_storeu_pd(lane + 4, high);
  for (; i < n; ++i) lane[0] += static_cast<double>(g[i]) * g[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

bool fusable(const torch::Tensor& p, const torch::Tensor& g) {
  return p.scalar_type() == torch::kFloat && g.scalar_type() == torch::kFloat && compute::cpu_kernel_allowed(p) &&
         compute::cpu_kernel_allowed(g) && p.is_contiguous() && g.is_contiguous();
}

// The fused passes run over all parameters at once, cut into chunks of at most kChunk floats: one
// parallel loop a step instead of one per parameter (the tiny model has 52, most of them small).
constexpr int64_t kChunk = 1 << 15;

struct Chunk {
  size_t slot;
  int64_t begin, end;
};

template <typename Slots, typename Take>
std::vector<Chunk> chunks_of(const Slots& slots, Take take) {
  std::vector<Chunk> out;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!take(i)) continue;
    const int64_t n = slots[i].param.numel();
    for (int64_t b = 0; b < n; b += kChunk) out.push_back({i, b, std::min(n, b + kChunk)});
  }
  return out;
}

}  // namespace

Adam::Adam(std::vector<std::pair<std::string, torch::Tensor>> params, AdamOptions opts,
           const checkpoint::TensorList* state, const std::string& file)
    : opts_(opts) {
  std::map<std::string, torch::Tensor> saved;
  if (state) saved.insert(state->begin(), state->end());
  // A saved moment as this parameter's own: the same tensor where it already is one.
  auto moment = [&](const std::string& key, const std::string& name, const torch::Tensor& p) {
    auto it = saved.find(key);
    XL_CHECK(it != saved.end(), kExitDataErr, file << ": optimizer state lacks parameter '" << name << "'");
    XL_CHECK(it->second.sizes() == p.sizes(), kExitDataErr, file << ": optimizer state of '" << name << "' has the wrong shape");
    return it->second.to(p.device(), p.scalar_type()).contiguous();
  };
  for (auto& [name, p] : params) {
    if (!p.requires_grad()) continue;
    if (!state) {
      slots_.push_back({name, p, torch::zeros_like(p), torch::zeros_like(p), 0});
      continue;
    }
    torch::Tensor m = moment("exp_avg." + name, name, p), v = moment("exp_avg_sq." + name, name, p);
    auto k = saved.find("step." + name);
    XL_CHECK(k != saved.end(), kExitDataErr, file << ": optimizer state lacks parameter '" << name << "'");
    slots_.push_back({name, p, m, v, k->second.item<int64_t>()});
  }
}

void Adam::scale_lr(const std::function<bool(const std::string&)>& which, double factor) {
  for (Slot& s : slots_)
    if (which(s.name)) s.lr_scale = factor;
}

int Adam::step(double lr, double grad_scale) {
  torch::NoGradGuard no_grad;
  int updated = 0;
  std::vector<torch::Tensor> grads(slots_.size());
  std::vector<AdamScalars> scalars(slots_.size());
  std::vector<char> fused(slots_.size(), 0);
  // The rest (a GPU's parameters, other dtypes and layouts): torch.optim.Adam's tensor ops, each
  // one multi-tensor op over all of them (_foreach_*: on a GPU a few kernels a step where one
  // op per parameter launched nine for each of hundreds of parameters).
  std::vector<torch::Tensor> rest_p, rest_g, rest_m, rest_v;
  std::vector<at::Scalar> rest_sqrt_bc2, rest_step;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
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
      scalars[i] = {float(opts_.beta1), float(1 - opts_.beta1), float(opts_.beta2), float(1 - opts_.beta2),
                    float(std::sqrt(bc2)), float(opts_.eps), float(lr * s.lr_scale / bc1), float(grad_scale)};
      grads[i] = g;
      fused[i] = 1;
      continue;
    }
    rest_p.push_back(s.param);
    rest_g.push_back(g);
    rest_m.push_back(s.exp_avg);
    rest_v.push_back(s.exp_avg_sq);
    rest_sqrt_bc2.emplace_back(std::sqrt(bc2));
    rest_step.emplace_back(-lr * s.lr_scale / bc1);
  }
  if (!rest_p.empty()) {
    if (grad_scale != 1) rest_g = at::_foreach_mul(rest_g, grad_scale);
    at::_foreach_mul_(rest_m, opts_.beta1);
    at::_foreach_add_(rest_m, rest_g, 1 - opts_.beta1);
    at::_foreach_mul_(rest_v, opts_.beta2);
    at::_foreach_addcmul_(rest_v, rest_g, rest_g, 1 - opts_.beta2);
    std::vector<torch::Tensor> denom = at::_foreach_sqrt(rest_v);
    at::_foreach_div_(denom, rest_sqrt_bc2);
    at::_foreach_add_(denom, opts_.eps);
    at::_foreach_addcdiv_(rest_p, rest_m, denom, rest_step);
  }
  const std::vector<Chunk> chunks = chunks_of(slots_, [&](size_t i) { return fused[i] != 0; });
  compute::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const Chunk& k = chunks[static_cast<size_t>(c)];
      const Slot& s = slots_[k.slot];
      float *p = s.param.data_ptr<float>() + k.begin, *m = s.exp_avg.data_ptr<float>() + k.begin,
            *v = s.exp_avg_sq.data_ptr<float>() + k.begin;
      const float* gp = grads[k.slot].data_ptr<float>() + k.begin;
      if (kHaveAvx2) adam_range_avx2(scalars[k.slot], p, gp, m, v, k.end - k.begin);
      else adam_range_scalar(scalars[k.slot], p, gp, m, v, k.end - k.begin);
    }
  });
  // Written through their pointers: the version tells what keeps results of the weights (the
  // attention's positional keys) that they changed, as an in-place op would.
  for (size_t i = 0; i < slots_.size(); ++i)
    if (fused[i]) slots_[i].param.unsafeGetTensorImpl()->bump_version();
  return updated;
}

void Adam::clear_grads() {
  for (auto& s : slots_) s.param.mutable_grad() = torch::Tensor();
}

double Adam::grad_norm() const {
  torch::NoGradGuard no_grad;
  // CPU float32 gradients in one parallel pass: each chunk's squares summed in double, the chunks'
  // sums added in their order, so the thread count never changes the bits.
  auto on_cpu = [&](size_t i) {
    const torch::Tensor& g = slots_[i].param.grad();
    return g.defined() && g.scalar_type() == torch::kFloat && compute::cpu_kernel_allowed(g) && g.is_contiguous();
  };
  const std::vector<Chunk> chunks = chunks_of(slots_, on_cpu);
  std::vector<double> sums(chunks.size());
  compute::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const Chunk& k = chunks[static_cast<size_t>(c)];
      const float* g = slots_[k.slot].param.grad().data_ptr<float>() + k.begin;
      const int64_t n = k.end - k.begin;
      sums[static_cast<size_t>(c)] = kHaveAvx2 ? sum_squares_avx2(g, n) : sum_squares_scalar(g, n);
    }
  });
  double total = 0;
  for (double v : sums) total += v;
  // Elsewhere, each gradient's norm by one multi-tensor op per dtype, squared and summed on the
  // gradients' device: a few kernels and one synchronisation, not several of each per parameter.
  // (bf16 and fp16 taken in float; double kept.)
  std::map<at::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const torch::Tensor& grad = slots_[i].param.grad();
    if (!grad.defined() || on_cpu(i)) continue;
    const at::ScalarType dtype = torch::promote_types(grad.scalar_type(), torch::kFloat);
    by_dtype[dtype].push_back(grad.to(dtype));
  }
  torch::Tensor sq;
  for (const auto& [dtype, grads] : by_dtype) {
    const torch::Tensor s = at::stack(at::_foreach_norm(grads, 2)).to(torch::kDouble).pow(2).sum();
    sq = sq.defined() ? sq + s : s;
  }
  if (sq.defined()) total += sq.item<double>();
  return std::sqrt(total);
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

}  // namespace xl::train
