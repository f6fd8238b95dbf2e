// The layer norm's row kernels (row_kernels.h): statistics, normalization and gradients.
#include "xl/kernels/cpu/row_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

// The element loops below are written to vectorize; -O2 alone does not if-convert them.
#ifndef __clang__  // clang has no per-file optimize pragma (and vectorizes these at -O2)
#pragma GCC optimize("O3")
#endif

#include "xl/compute/vector_math.h"

namespace xl::kernels::rows {
namespace {

using namespace compute::vec;

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

void ln_stats(const float* s, int64_t d, double eps, float* mean, float* rstd) {
  if (kHaveAvx2) stats_avx2(s, d, eps, mean, rstd);
  else stats_plain(s, d, eps, mean, rstd);
}
void ln_stats(const double* s, int64_t d, double eps, double* mean, double* rstd) { stats_plain(s, d, eps, mean, rstd); }

// y = (s - mean) * rstd * w + b
template <typename T>
__attribute__((always_inline)) inline void normalize_plain(const T* __restrict__ s, const T* __restrict__ w,
                                                           const T* __restrict__ b, T* __restrict__ y, int64_t d,
                                                           T mean, T rstd) {
  for (int64_t j = 0; j < d; ++j) y[j] = (s[j] - mean) * rstd * w[j] + b[j];
}
__attribute__((target_clones("avx2", "default"))) void ln_normalize(const float* s, const float* w, const float* b,
                                                                 float* y, int64_t d, float mean, float rstd) {
  normalize_plain(s, w, b, y, d, mean, rstd);
}
void ln_normalize(const double* s, const double* w, const double* b, double* y, int64_t d, double mean, double rstd) {
  normalize_plain(s, w, b, y, d, mean, rstd);
}

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

void ln_grad_sums(const float* dy, const float* w, const float* s, int64_t d, float mean, float* g_sum, float* gc_sum) {
  if (kHaveAvx2) grad_sums_avx2(dy, w, s, d, mean, g_sum, gc_sum);
  else grad_sums_plain(dy, w, s, d, mean, g_sum, gc_sum);
}
void ln_grad_sums(const double* dy, const double* w, const double* s, int64_t d, double mean, double* g_sum,
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
__attribute__((target_clones("avx2", "default"))) void ln_grad_row(const float* dy, const float* w, const float* s,
                                                                float* ds, float* dw, float* db, int64_t d, float mean,
                                                                float rstd, float g_mean, float gx_mean) {
  grad_row_plain(dy, w, s, ds, dw, db, d, mean, rstd, g_mean, gx_mean);
}
void ln_grad_row(const double* dy, const double* w, const double* s, double* ds, double* dw, double* db, int64_t d,
              double mean, double rstd, double g_mean, double gx_mean) {
  grad_row_plain(dy, w, s, ds, dw, db, d, mean, rstd, g_mean, gx_mean);
}

}  // namespace

void layer_norm(const float* s, const float* w, const float* b, float* y, int64_t n, double eps, float* mean,
                float* rstd) {
  ln_stats(s, n, eps, mean, rstd);
  ln_normalize(s, w, b, y, n, *mean, *rstd);
}
void layer_norm(const double* s, const double* w, const double* b, double* y, int64_t n, double eps, double* mean,
                double* rstd) {
  ln_stats(s, n, eps, mean, rstd);
  ln_normalize(s, w, b, y, n, *mean, *rstd);
}

template <typename T>
void layer_norm_grad_of(const T* dy, const T* w, const T* s, T mean, T rstd, T* ds, T* dw, T* db, int64_t n) {
  T g_sum, gc_sum;
  ln_grad_sums(dy, w, s, n, mean, &g_sum, &gc_sum);
  const T inv_n = T(1) / static_cast<T>(n);
  ln_grad_row(dy, w, s, ds, dw, db, n, mean, rstd, g_sum * inv_n, gc_sum * rstd * inv_n);
}
void layer_norm_grad(const float* dy, const float* w, const float* s, float mean, float rstd, float* ds, float* dw,
                     float* db, int64_t n) {
  layer_norm_grad_of(dy, w, s, mean, rstd, ds, dw, db, n);
}
void layer_norm_grad(const double* dy, const double* w, const double* s, double mean, double rstd, double* ds,
                     double* dw, double* db, int64_t n) {
  layer_norm_grad_of(dy, w, s, mean, rstd, ds, dw, db, n);
}

}  // namespace xl::kernels::rows
