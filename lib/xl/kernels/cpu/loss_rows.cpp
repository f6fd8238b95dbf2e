// The loss's row kernels (row_kernels.h): a row's log-sum-exp and its shifted exponentials.
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

__attribute__((target("avx2,fma"))) float log_sum_exp_avx2(const float* x, int64_t n) {
  __m256 vmax = _mm256_set1_ps(kNegInf);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + j));
  float m = horizontal_max(vmax);
  for (; j < n; ++j) m = std::max(m, x[j]);
  if (!std::isfinite(m)) return m;  // all -inf (or an inf/nan): exp would give nan
  const __m256 shift = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8) sum = _mm256_add_ps(sum, exp256(_mm256_sub_ps(_mm256_loadu_ps(x + j), shift)));
  float s = horizontal_sum(sum);
  for (; j < n; ++j) s += std::exp(x[j] - m);
  return m + std::log(s);
}

__attribute__((target("avx2,fma"))) void exp_shifted_avx2(const float* x, float* y, int64_t n, float shift,
                                                           float scale) {
  const __m256 vshift = _mm256_set1_ps(shift), vscale = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(y + j, _mm256_mul_ps(vscale, exp256(_mm256_sub_ps(_mm256_loadu_ps(x + j), vshift))));
  for (; j < n; ++j) y[j] = scale * std::exp(x[j] - shift);
}

XL_AVX512_BEGIN

XL_AVX512 float log_sum_exp_avx512(const float* x, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(kNegInf);
  __m512 vmax = ninf;
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 lanes = n - j >= 16 ? static_cast<__mmask16>(0xffff) : first_lanes(n - j);
    vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(ninf, lanes, x + j));
  }
  const float m = _mm512_reduce_max_ps(vmax);
  if (!std::isfinite(m)) return m;  // all -inf (or an inf/nan): exp would give nan
  const __m512 shift = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 lanes = n - j >= 16 ? static_cast<__mmask16>(0xffff) : first_lanes(n - j);
    sum = _mm512_add_ps(sum, exp512(_mm512_sub_ps(_mm512_mask_loadu_ps(ninf, lanes, x + j), shift)));
  }
  return m + std::log(_mm512_reduce_add_ps(sum));
}

XL_AVX512 void exp_shifted_avx512(const float* x, float* y, int64_t n, float shift, float scale) {
  const __m512 vshift = _mm512_set1_ps(shift), vscale = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 lanes = n - j >= 16 ? static_cast<__mmask16>(0xffff) : first_lanes(n - j);
    const __m512 v = _mm512_maskz_loadu_ps(lanes, x + j);
    _mm512_mask_storeu_ps(y + j, lanes, _mm512_mul_ps(vscale, exp512(_mm512_sub_ps(v, vshift))));
  }
}

// Mixture logits (see row_kernels.h), 16 keys a vector.

XL_AVX512_END

template <typename T>
T log_sum_exp_plain(const T* x, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, x[j]);
  if (!std::isfinite(m)) return m;
  // One running float sum over a word-level row (hundreds of thousands of terms) drifted several
  // times as far from double as LibTorch's log-softmax; the vector loops' 8 or 16 partial sums do not.
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - m);
  return m + static_cast<T>(std::log(s));
}

template <typename T>
void exp_shifted_plain(const T* x, T* y, int64_t n, T shift, T scale) {
  for (int64_t j = 0; j < n; ++j) y[j] = scale * std::exp(x[j] - shift);
}

}  // namespace

float log_sum_exp(const float* x, int64_t n) {
  if (kHaveAvx512) return log_sum_exp_avx512(x, n);
  return kHaveAvx2 ? log_sum_exp_avx2(x, n) : log_sum_exp_plain(x, n);
}
double log_sum_exp(const double* x, int64_t n) { return log_sum_exp_plain(x, n); }

void exp_shifted(const float* x, float* y, int64_t n, float shift, float scale) {
  if (kHaveAvx512) exp_shifted_avx512(x, y, n, shift, scale);
  else if (kHaveAvx2) exp_shifted_avx2(x, y, n, shift, scale);
  else exp_shifted_plain(x, y, n, shift, scale);
}
void exp_shifted(const double* x, double* y, int64_t n, double shift, double scale) {
  exp_shifted_plain(x, y, n, shift, scale);
}

}  // namespace xl::kernels::rows
