// The CPU's vector units as xl's hand-written loops use them: which units this process may run
// (kernel_vector_units: AVX2 with FMA, AVX-512; XL_VECTOR_UNITS narrows them), horizontal sums and
// maxima, the exponential on 8 and 16 lanes, and the dot product that the BLAS layer's
// matrix-vector path and the row kernels share. Each function carries its units' target
// attribute: callers choose by the flags.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "xl/compute/blas.h"

// GCC 12 takes the AVX-512 headers' deliberately undefined vectors for uninitialised ones (its bug
// 105593, fixed in 13): code that uses them sits between XL_AVX512_BEGIN and XL_AVX512_END.
#if defined(__GNUC__) && !defined(__clang__)
#define XL_AVX512_BEGIN                                     \
  _Pragma("GCC diagnostic push")                            \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
          _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define XL_AVX512_END _Pragma("GCC diagnostic pop")
#else
#define XL_AVX512_BEGIN
#define XL_AVX512_END
#endif
#define XL_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

namespace xl::compute::vec {

inline const bool kHaveAvx2 = kernel_vector_units().avx2_fma;
inline const bool kHaveAvx512 = kernel_vector_units().avx512;
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <typename T>
inline T dot_plain(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t j = 0; j < n; ++j) s += a[j] * b[j];
  return s;
}

__attribute__((target("avx2,fma"))) inline float horizontal_sum(__m256 s) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

__attribute__((target("avx2,fma"))) inline float horizontal_max(__m256 s) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  return _mm_cvtss_f32(h);
}

__attribute__((target("avx2,fma"))) inline float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 8), _mm256_loadu_ps(b + j + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 16), _mm256_loadu_ps(b + j + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 24), _mm256_loadu_ps(b + j + 24), s3);
  }
  for (; j + 8 <= n; j += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), s0);
  float r = horizontal_sum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; j < n; ++j) r += a[j] * b[j];
  return r;
}

// a . b on the widest units here.
inline float dot(const float* a, const float* b, int64_t n) { return kHaveAvx2 ? dot_avx2(a, b, n) : dot_plain(a, b, n); }

// exp's range reduction and its Cephes polynomial, for every vector width.
inline constexpr float kExpLow = -87.3f, kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 = kLn2Hi + kLn2Lo
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                               4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// exp(v) by range reduction to r = v - k ln2, |r| <= ln2/2, and the Cephes polynomial for exp(r)
// (relative error ~1e-7, as LibTorch's vectorized exp); below -87.3 (float's smallest normal) the
// result is 0, which makes masked -inf entries exact zeros.
__attribute__((target("avx2,fma"))) inline __m256 exp256(__m256 v) {
  const __m256 keep = _mm256_cmp_ps(v, _mm256_set1_ps(kExpLow), _CMP_GE_OQ);
  v = _mm256_max_ps(v, _mm256_set1_ps(kExpLow));
  const __m256 k =
      _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  v = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Hi), v);
  v = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Lo), v);
  __m256 y = _mm256_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) y = _mm256_fmadd_ps(y, v, _mm256_set1_ps(kExpPoly[i]));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(v, v), v), _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(e)), keep);
}

// AVX-512 versions of the exponential's loops: exp512 gives exp256's bits lane for lane (scalef
// multiplies by the same exact power of two), and rows end in masked lanes instead of scalar
// loops. Even where the AVX-512 units are 256 bits wide, exp_sum ran clearly faster than the AVX2
// loop, and CPUs with full-width units gain more (measured: bench/HISTORY.md, "Vector loops").
// GCC 12 takes the AVX-512 headers' deliberately undefined vectors for uninitialised ones (its bug
// 105593, fixed in 13).
XL_AVX512_BEGIN

XL_AVX512 inline __m512 exp512(__m512 v) {
  const __mmask16 keep = _mm512_cmp_ps_mask(v, _mm512_set1_ps(kExpLow), _CMP_GE_OQ);
  v = _mm512_max_ps(v, _mm512_set1_ps(kExpLow));
  const __m512 k =
      _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  v = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), v);
  v = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), v);
  __m512 y = _mm512_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 6; ++i) y = _mm512_fmadd_ps(y, v, _mm512_set1_ps(kExpPoly[i]));
  y = _mm512_add_ps(_mm512_fmadd_ps(y, _mm512_mul_ps(v, v), v), _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, y, k);
}

// The lanes [0, n) of a row's last (partial) vector.
inline __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

XL_AVX512_END

}  // namespace xl::compute::vec
