#include "xl/model/kernels/dropout_add_layer_norm.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "xl/model/kernels/blas.h"
#include "xl/model/kernels/dropout_mask.h"
#include "xl/model/kernels/fused_dropout.h"
#include "xl/model/kernels/kernel_choice.h"
#include "xl/model/kernels/parallel.h"
#include "xl/model/precision.h"

// The element loops below are written to vectorize; -O2 alone does not if-convert them.
#ifndef __clang__
#pragma GCC optimize("O3")
#endif

namespace xl::model {
namespace {

const bool kHaveAvx2 = this_cpu_vector_units().avx2_fma;

// Rows per task of backward: each task's weight and bias gradients are summed in order over its
// rows, and the tasks' sums in order after, so the thread count never changes the bits.
constexpr int64_t kTaskRows = 32;
// Forward's rows per block: the block's sums stay in L1 between the add and the normalisation.
constexpr int64_t kBlockFloats = 4096;

__attribute__((target("avx2,fma"))) float horizontal_sum(__m256 s) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

// Mean and 1/sqrt(variance + eps) of a row: the mean first, then the centred squares (no
// cancellation when the mean is large against the spread).
template <typename T>
void stats_plain(const T* s, int64_t d, double eps, T* mean, T* rstd) {
  T sum = 0;
  for (int64_t j = 0; j < d; ++j) sum += s[j];
  const T m = sum / static_cast<T>(d);
  T sq = 0;
  for (int64_t j = 0; j < d; ++j) sq += (s[j] - m) * (s[j] - m);
  *mean = m;
  *rstd = static_cast<T>(1.0 / std::sqrt(static_cast<double>(sq / static_cast<T>(d)) + eps));
}

__attribute__((target("avx2,fma"))) void stats_avx2(const float* s, int64_t d, double eps, float* mean, float* rstd) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= d; j += 16) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(s + j));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(s + j + 8));
  }
  for (; j + 8 <= d; j += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(s + j));
  float sum = horizontal_sum(_mm256_add_ps(a0, a1));
  for (; j < d; ++j) sum += s[j];
  const float m = sum / static_cast<float>(d);
  const __m256 vm = _mm256_set1_ps(m);
  a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (j = 0; j + 16 <= d; j += 16) {
    const __m256 c0 = _mm256_sub_ps(_mm256_loadu_ps(s + j), vm), c1 = _mm256_sub_ps(_mm256_loadu_ps(s + j + 8), vm);
    a0 = _mm256_fmadd_ps(c0, c0, a0);
    a1 = _mm256_fmadd_ps(c1, c1, a1);
  }
  for (; j + 8 <= d; j += 8) {
    const __m256 c = _mm256_sub_ps(_mm256_loadu_ps(s + j), vm);
    a0 = _mm256_fmadd_ps(c, c, a0);
  }
  float sq = horizontal_sum(_mm256_add_ps(a0, a1));
  for (; j < d; ++j) sq += (s[j] - m) * (s[j] - m);
  *mean = m;
  *rstd = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sq / static_cast<float>(d)) + eps));
}

void stats(const float* s, int64_t d, double eps, float* mean, float* rstd) {
  if (kHaveAvx2) stats_avx2(s, d, eps, mean, rstd);
  else stats_plain(s, d, eps, mean, rstd);
}
void stats(const double* s, int64_t d, double eps, double* mean, double* rstd) { stats_plain(s, d, eps, mean, rstd); }

// y = (s - mean) * rstd * w + b
template <typename T>
__attribute__((always_inline)) inline void normalize_plain(const T* __restrict__ s, const T* __restrict__ w,
                                                           const T* __restrict__ b, T* __restrict__ y, int64_t d,
                                                           T mean, T rstd) {
  for (int64_t j = 0; j < d; ++j) y[j] = (s[j] - mean) * rstd * w[j] + b[j];
}
__attribute__((target_clones("avx2", "default"))) void normalize(const float* s, const float* w, const float* b,
                                                                 float* y, int64_t d, float mean, float rstd) {
  normalize_plain(s, w, b, y, d, mean, rstd);
}
void normalize(const double* s, const double* w, const double* b, double* y, int64_t d, double mean, double rstd) {
  normalize_plain(s, w, b, y, d, mean, rstd);
}

template <typename T>
__attribute__((always_inline)) inline void add_plain(const T* x, const T* r, T* s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) s[j] = r[j] + x[j];
}
__attribute__((target_clones("avx2", "default"))) void add(const float* x, const float* r, float* s, int64_t n) {
  add_plain(x, r, s, n);
}
void add(const double* x, const double* r, double* s, int64_t n) { add_plain(x, r, s, n); }

// Backward's row sums: sum_j g_j and sum_j g_j (s_j - mean), g = dy * w.
template <typename T>
void grad_sums_plain(const T* dy, const T* w, const T* s, int64_t d, T mean, T* g_sum, T* gc_sum) {
  T a = 0, c = 0;
  for (int64_t j = 0; j < d; ++j) {
    const T g = dy[j] * w[j];
    a += g;
    c += g * (s[j] - mean);
  }
  *g_sum = a, *gc_sum = c;
}

__attribute__((target("avx2,fma"))) void grad_sums_avx2(const float* dy, const float* w, const float* s, int64_t d,
                                                        float mean, float* g_sum, float* gc_sum) {
  const __m256 vm = _mm256_set1_ps(mean);
  __m256 a = _mm256_setzero_ps(), c = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) {
    const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(dy + j), _mm256_loadu_ps(w + j));
    a = _mm256_add_ps(a, g);
    c = _mm256_fmadd_ps(g, _mm256_sub_ps(_mm256_loadu_ps(s + j), vm), c);
  }
  float sa = horizontal_sum(a), sc = horizontal_sum(c);
  for (; j < d; ++j) {
    const float g = dy[j] * w[j];
    sa += g;
    sc += g * (s[j] - mean);
  }
  *g_sum = sa, *gc_sum = sc;
}

void grad_sums(const float* dy, const float* w, const float* s, int64_t d, float mean, float* g_sum, float* gc_sum) {
  if (kHaveAvx2) grad_sums_avx2(dy, w, s, d, mean, g_sum, gc_sum);
  else grad_sums_plain(dy, w, s, d, mean, g_sum, gc_sum);
}
void grad_sums(const double* dy, const double* w, const double* s, int64_t d, double mean, double* g_sum,
               double* gc_sum) {
  grad_sums_plain(dy, w, s, d, mean, g_sum, gc_sum);
}

// ds = rstd (g - mean(g) - xhat mean(g xhat)) with xhat = (s - mean) rstd; dw += dy xhat, db += dy.
// (restrict: with six pointers the compiler's alias checks would exceed its limit and it would not vectorize.)
template <typename T>
__attribute__((always_inline)) inline void grad_row_plain(const T* __restrict__ dy, const T* __restrict__ w,
                                                          const T* __restrict__ s, T* __restrict__ ds,
                                                          T* __restrict__ dw, T* __restrict__ db, int64_t d, T mean,
                                                          T rstd, T g_mean, T gx_mean) {
  for (int64_t j = 0; j < d; ++j) {
    const T xhat = (s[j] - mean) * rstd;
    ds[j] = rstd * (dy[j] * w[j] - g_mean - xhat * gx_mean);
    dw[j] += dy[j] * xhat;
    db[j] += dy[j];
  }
}
__attribute__((target_clones("avx2", "default"))) void grad_row(const float* dy, const float* w, const float* s,
                                                                float* ds, float* dw, float* db, int64_t d, float mean,
                                                                float rstd, float g_mean, float gx_mean) {
  grad_row_plain(dy, w, s, ds, dw, db, d, mean, rstd, g_mean, gx_mean);
}
void grad_row(const double* dy, const double* w, const double* s, double* ds, double* dw, double* db, int64_t d,
              double mean, double rstd, double g_mean, double gx_mean) {
  grad_row_plain(dy, w, s, ds, dw, db, d, mean, rstd, g_mean, gx_mean);
}

// y (and, when `sum` is given, the sum and each row's mean and rstd) from x and the residual, the
// mask's key when p > 0.
void forward_rows(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                  const torch::Tensor& bias, double p, const dropout_mask::Key& key, double eps, torch::Tensor& y,
                  torch::Tensor* sum, torch::Tensor* mean, torch::Tensor* rstd) {
  const int64_t d = x.size(-1), rows = x.numel() / d, block = std::max<int64_t>(1, kBlockFloats / d);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "dropout_add_layer_norm", [&] {
    using T = scalar_t;
    const T *xp = x.data_ptr<T>(), *rp = residual.data_ptr<T>(), *w = weight.data_ptr<T>(), *b = bias.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    T* sp = sum ? sum->data_ptr<T>() : nullptr;
    T* mp = mean ? mean->data_ptr<T>() : nullptr;
    T* rsp = rstd ? rstd->data_ptr<T>() : nullptr;
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    parallel_for(0, rows, block, [&](int64_t r0, int64_t r1) {
      std::vector<T> scratch(sp ? 0 : static_cast<size_t>(block * d));
      for (int64_t i0 = r0; i0 < r1; i0 += block) {
        const int64_t n = std::min(block, r1 - i0) * d, e0 = i0 * d;
        T* s = sp ? sp + e0 : scratch.data();
        if (p > 0) dropout_mask::apply(xp + e0, rp + e0, s, n, e0, key, scale, dropout_mask::Op::add);
        else add(xp + e0, rp + e0, s, n);
        for (int64_t i = i0; i < i0 + n / d; ++i) {
          T m, r;
          stats(s + (i - i0) * d, d, eps, &m, &r);
          normalize(s + (i - i0) * d, w, b, yp + i * d, d, m, r);
          if (mp) mp[i] = m, rsp[i] = r;
        }
      }
    });
  });
}

class DropoutAddLayerNorm : public torch::autograd::Function<DropoutAddLayerNorm> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& residual, const torch::Tensor& weight, const torch::Tensor& bias,
                               double p, double eps) {
    dropout_mask::Key key;
    if (p > 0) key = dropout_mask::draw(p);
    const int64_t rows = x.numel() / x.size(-1);
    torch::Tensor y = torch::empty_like(x), sum = torch::empty_like(x);
    torch::Tensor mean = torch::empty({rows}, x.options()), rstd = torch::empty({rows}, x.options());
    forward_rows(x, residual, weight, bias, p, key, eps, y, &sum, &mean, &rstd);
    if (p > 0) dropout_mask::save(ctx, key, p);
    else ctx->saved_data["p"] = 0.0;
    ctx->save_for_backward({sum, mean, rstd, weight});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &sum = saved[0], &mean = saved[1], &rstd = saved[2], &weight = saved[3];
    const double p = ctx->saved_data["p"].toDouble();
    const dropout_mask::Key key = p > 0 ? dropout_mask::saved(ctx) : dropout_mask::Key{};
    const torch::Tensor dy = grads[0].contiguous();
    const int64_t d = sum.size(-1), rows = sum.numel() / d, tasks = (rows + kTaskRows - 1) / kTaskRows;
    torch::Tensor d_res = torch::empty_like(sum), d_x = p > 0 ? torch::empty_like(sum) : d_res;
    torch::Tensor partial = torch::empty({2, tasks, d}, sum.options());  // weight's, then bias's
    torch::Tensor d_w = torch::empty({d}, sum.options()), d_b = torch::empty({d}, sum.options());
    AT_DISPATCH_FLOATING_TYPES(sum.scalar_type(), "dropout_add_layer_norm_backward", [&] {
      using T = scalar_t;
      const T *g = dy.data_ptr<T>(), *s = sum.data_ptr<T>(), *mp = mean.data_ptr<T>(), *rp = rstd.data_ptr<T>();
      const T* w = weight.data_ptr<T>();
      T *dr = d_res.data_ptr<T>(), *dx = d_x.data_ptr<T>(), *pw = partial.data_ptr<T>(), *pb = pw + tasks * d;
      const T scale = static_cast<T>(1.0 / (1.0 - p));
      parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t task = t0; task < t1; ++task) {
          T *tw = pw + task * d, *tb = pb + task * d;
          std::fill_n(tw, d, T(0));
          std::fill_n(tb, d, T(0));
          const int64_t i0 = task * kTaskRows, i1 = std::min(rows, i0 + kTaskRows);
          for (int64_t i = i0; i < i1; ++i) {
            T g_sum, gc_sum;
            grad_sums(g + i * d, w, s + i * d, d, mp[i], &g_sum, &gc_sum);
            const T inv_d = T(1) / static_cast<T>(d);
            grad_row(g + i * d, w, s + i * d, dr + i * d, tw, tb, d, mp[i], rp[i], g_sum * inv_d,
                     gc_sum * rp[i] * inv_d);
          }
          if (p > 0)
            dropout_mask::apply(dr + i0 * d, nullptr, dx + i0 * d, (i1 - i0) * d, i0 * d, key, scale,
                                dropout_mask::Op::scale);
        }
      });
      T *dwp = d_w.data_ptr<T>(), *dbp = d_b.data_ptr<T>();
      parallel_for(0, d, 256, [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) {
          double sw = 0, sb = 0;
          for (int64_t task = 0; task < tasks; ++task) sw += pw[task * d + j], sb += pb[task * d + j];
          dwp[j] = static_cast<T>(sw), dbp[j] = static_cast<T>(sb);
        }
      });
    });
    return {d_x, d_res, d_w, d_b, torch::Tensor(), torch::Tensor()};
  }
};

bool runs_here(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
               const torch::Tensor& bias) {
  const auto dtype = x.scalar_type();
  auto same = [&](const torch::Tensor& t) { return t.defined() && t.scalar_type() == dtype && t.device().is_cpu(); };
  return cpu_kernel_allowed(x) && !cpu_autocast_enabled() && (dtype == torch::kFloat || dtype == torch::kDouble) &&
         x.dim() >= 1 && x.numel() > 0 && same(residual) && residual.sizes() == x.sizes() && same(weight) &&
         same(bias) && weight.dim() == 1 && bias.dim() == 1 && weight.size(0) == x.size(-1) &&
         bias.size(0) == x.size(-1);
}

}  // namespace

torch::Tensor dropout_add_layer_norm(const torch::Tensor& x, const torch::Tensor& residual, double p, bool train,
                                     const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
  const bool drop = train && p > 0;
  if (!runs_here(x, residual, weight, bias) || (drop && p >= 1))
    return torch::layer_norm(fused_dropout_add(x, residual, p, train), {x.size(-1)}, weight, bias, eps);
  const double p_used = drop ? p : 0.0;
  const torch::Tensor xc = x.contiguous(), rc = residual.contiguous();
  const bool grad = torch::GradMode::is_enabled() &&
                    (x.requires_grad() || residual.requires_grad() || weight.requires_grad() || bias.requires_grad());
  if (grad) return DropoutAddLayerNorm::apply(xc, rc, weight.contiguous(), bias.contiguous(), p_used, eps);
  torch::Tensor y = torch::empty_like(xc);
  forward_rows(xc, rc, weight.contiguous(), bias.contiguous(), p_used,
               drop ? dropout_mask::draw(p) : dropout_mask::Key{}, eps, y, nullptr, nullptr, nullptr);
  return y;
}

}  // namespace xl::model
