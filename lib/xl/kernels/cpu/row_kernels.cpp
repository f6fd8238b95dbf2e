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

__attribute__((target("avx2,fma"))) float masked_scores_avx2(const float* a, const float* b, const bool* hidden,
                                                              float* s, int64_t n, float scale) {
  const __m256 vscale = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(kNegInf);
  __m256 vmax = ninf;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 x = _mm256_mul_ps(_mm256_add_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j)), vscale);
    __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(hidden + j)));
    x = _mm256_blendv_ps(x, ninf, _mm256_castsi256_ps(_mm256_cmpgt_epi32(h, _mm256_setzero_si256())));
    _mm256_storeu_ps(s + j, x);
    vmax = _mm256_max_ps(vmax, x);
  }
  float m = horizontal_max(vmax);
  for (; j < n; ++j) {
    s[j] = hidden[j] ? kNegInf : (a[j] + b[j]) * scale;
    m = std::max(m, s[j]);
  }
  return m;
}

// exp(x - max) in place, times w when w is given (weighted_softmax), returns the sum.
template <bool kWeighted>
__attribute__((target("avx2,fma"))) float exp_sum_avx2(float* x, const float* w, int64_t n, float max) {
  const __m256 vmax = _mm256_set1_ps(max);
  __m256 sum = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 y = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + j), vmax));
    if constexpr (kWeighted) y = _mm256_mul_ps(y, _mm256_loadu_ps(w + j));
    _mm256_storeu_ps(x + j, y);
    sum = _mm256_add_ps(sum, y);
  }
  float s = horizontal_sum(sum);
  for (; j < n; ++j) s += (x[j] = kWeighted ? w[j] * std::exp(x[j] - max) : std::exp(x[j] - max));
  return s;
}

XL_AVX512_BEGIN

XL_AVX512 float masked_scores_avx512(const float* a, const float* b, const bool* hidden, float* s, int64_t n,
                                     float scale) {
  const __m512 vscale = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(kNegInf);
  __m512 vmax = ninf;
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 lanes = n - j >= 16 ? static_cast<__mmask16>(0xffff) : first_lanes(n - j);
    const __m128i h = _mm_maskz_loadu_epi8(lanes, hidden + j);
    const __mmask16 shown = _mm_testn_epi8_mask(h, h) & lanes;
    const __m512 x = _mm512_mul_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(lanes, a + j), _mm512_maskz_loadu_ps(lanes, b + j)),
                                   vscale);
    const __m512 masked = _mm512_mask_mov_ps(ninf, shown, x);
    _mm512_mask_storeu_ps(s + j, lanes, masked);
    vmax = _mm512_max_ps(vmax, masked);  // unused lanes hold -inf
  }
  return _mm512_reduce_max_ps(vmax);
}

template <bool kWeighted>
XL_AVX512 float exp_sum_avx512(float* x, const float* w, int64_t n, float max) {
  const __m512 vmax = _mm512_set1_ps(max);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 lanes = n - j >= 16 ? static_cast<__mmask16>(0xffff) : first_lanes(n - j);
    __m512 y = _mm512_maskz_mov_ps(lanes, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, x + j), vmax)));
    if constexpr (kWeighted) y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(lanes, w + j));
    _mm512_mask_storeu_ps(x + j, lanes, y);
    sum = _mm512_add_ps(sum, y);
  }
  return _mm512_reduce_add_ps(sum);
}

XL_AVX512 void squared_lengths_avx512(const float* x, int64_t ld, int64_t count, float* s, int64_t n) {
  for (int64_t r = 0; r < count; ++r) {
    const float* v = x + r * ld;
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
      const __m512 v0 = _mm512_loadu_ps(v + j), v1 = _mm512_loadu_ps(v + j + 16);
      a = _mm512_fmadd_ps(v0, v0, a);
      b = _mm512_fmadd_ps(v1, v1, b);
    }
    for (; j < n; j += 16) {
      const __m512 v0 = _mm512_maskz_loadu_ps(n - j >= 16 ? static_cast<__mmask16>(0xffff) : first_lanes(n - j), v + j);
      a = _mm512_fmadd_ps(v0, v0, a);
    }
    s[r] = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
  }
}

XL_AVX512 float mixture_logits_avx512(const float* const* x, const float* coef, const float* row,
                                      const float* const* col, int64_t m_count, const float* bd, const bool* hidden,
                                      float* u, float* w, float* const* resp, int64_t n, bool hard, float scale) {
  const __m512 ninf = _mm512_set1_ps(kNegInf), vscale = _mm512_set1_ps(scale), one = _mm512_set1_ps(1.0f);
  __m512 vmax = ninf;
  __m512 y[16];
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 lanes = n - j >= 16 ? static_cast<__mmask16>(0xffff) : first_lanes(n - j);
    __m512 best = ninf;
    for (int64_t m = 0; m < m_count; ++m) {
      y[m] = _mm512_fmadd_ps(_mm512_set1_ps(coef[m]), _mm512_maskz_loadu_ps(lanes, x[m] + j),
                             _mm512_add_ps(_mm512_set1_ps(row[m]), _mm512_maskz_loadu_ps(lanes, col[m] + j)));
      best = _mm512_max_ps(best, y[m]);
    }
    const __m128i h = _mm_maskz_loadu_epi8(lanes, hidden + j);
    const __mmask16 shown = _mm_testn_epi8_mask(h, h) & lanes;
    const __m512 logit =
        _mm512_mask_mov_ps(ninf, shown, _mm512_fmadd_ps(vscale, _mm512_maskz_loadu_ps(lanes, bd + j), best));
    _mm512_mask_storeu_ps(u + j, lanes, logit);
    vmax = _mm512_max_ps(vmax, logit);  // unused lanes hold -inf
    if (hard) {
      __mmask16 taken = 0;  // the first component at the maximum takes it all
      for (int64_t m = 0; m + 1 < m_count; ++m) {
        const __mmask16 is = _mm512_cmp_ps_mask(y[m], best, _CMP_EQ_OQ) & ~taken;
        taken |= is;
        if (resp) _mm512_mask_storeu_ps(resp[m] + j, lanes, _mm512_maskz_mov_ps(is, one));
      }
      _mm512_mask_storeu_ps(w + j, lanes, one);
      continue;
    }
    __m512 z = _mm512_setzero_ps();
    for (int64_t m = 0; m < m_count; ++m) z = _mm512_add_ps(z, y[m] = exp512(_mm512_sub_ps(y[m], best)));
    if (resp) {
      const __m512 inv_z = _mm512_div_ps(one, z);
      for (int64_t m = 0; m + 1 < m_count; ++m) _mm512_mask_storeu_ps(resp[m] + j, lanes, _mm512_mul_ps(y[m], inv_z));
    }
    _mm512_mask_storeu_ps(w + j, lanes, z);
  }
  return _mm512_reduce_max_ps(vmax);
}

XL_AVX512 float mixture_grad_avx512(const float* g, const float* resp, int64_t plane, int64_t m, int64_t m_count,
                                    float g_scale, float coef, float* dx, float* d_col, int64_t n) {
  const __m512 vs = _mm512_set1_ps(g_scale), vc = _mm512_set1_ps(coef);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 lanes = n - j >= 16 ? static_cast<__mmask16>(0xffff) : first_lanes(n - j);
    const __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, g + j), vs);
    __m512 d;
    if (m + 1 < m_count) {
      d = _mm512_mul_ps(t, _mm512_maskz_loadu_ps(lanes, resp + m * plane + j));
    } else {
      d = t;
      for (int64_t o = 0; o + 1 < m_count; ++o)
        d = _mm512_fnmadd_ps(t, _mm512_maskz_loadu_ps(lanes, resp + o * plane + j), d);
    }
    sum = _mm512_add_ps(sum, d);
    _mm512_mask_storeu_ps(d_col + j, lanes, _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, d_col + j), d));
    _mm512_mask_storeu_ps(dx + j, lanes, _mm512_mul_ps(d, vc));
  }
  return _mm512_reduce_add_ps(sum);
}

XL_AVX512_END

// The first w (<= 8) floats at p; functions, not lambdas: clang gives lambdas no target attribute.
__attribute__((target("avx2,fma"))) inline __m256 load_upto8(const float* p, int64_t w) {
  if (w == 8) return _mm256_loadu_ps(p);
  float tmp[8];
  std::fill(tmp, tmp + 8, 0.0f);
  std::copy(p, p + w, tmp);
  return _mm256_loadu_ps(tmp);
}

__attribute__((target("avx2,fma"))) inline void store_upto8(float* p, int64_t w, __m256 v) {
  if (w == 8) return _mm256_storeu_ps(p, v);
  float tmp[8];
  _mm256_storeu_ps(tmp, v);
  std::copy(tmp, tmp + w, p);
}

// Lanes [0, w) of 8 (w clamped to [0, 8]) for maskload and maskstore.
__attribute__((target("avx2,fma"))) inline __m256i lanes_upto8(int64_t w) {
  const int lanes = static_cast<int>(std::clamp<int64_t>(w, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// dots and weighted_rows (see row_kernels.h), AVX2, over blocks of up to 64 floats of each row:
// F full lanes of 8 held in registers (F fixed per instance, so they stay there) and a masked tail.
// Masked loads only where the row ends: single-query scores over rows from memory ran markedly
// slower with every lane masked (measured: bench/HISTORY.md, "A single query's attention on row kernels").
template <int F>
__attribute__((target("avx2,fma"))) void dots_block(const float* q, const float* x, int64_t ld, int64_t count, float* s,
                                                    int64_t tail, bool first) {
  const __m256i m = lanes_upto8(tail);
  __m256 qr[F > 0 ? F : 1];
#pragma GCC unroll 8
  for (int r = 0; r < F; ++r) qr[r] = _mm256_loadu_ps(q + 8 * r);
  const __m256 qt = tail > 0 ? _mm256_maskload_ps(q + 8 * F, m) : _mm256_setzero_ps();
  for (int64_t j = 0; j < count; ++j) {
    const float* row = x + j * ld;
    __m256 a = tail > 0 ? _mm256_mul_ps(qt, _mm256_maskload_ps(row + 8 * F, m)) : _mm256_setzero_ps();
    __m256 b = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < F; ++r) {
      if (r % 2 == 0) a = _mm256_fmadd_ps(qr[r], _mm256_loadu_ps(row + 8 * r), a);
      else b = _mm256_fmadd_ps(qr[r], _mm256_loadu_ps(row + 8 * r), b);
    }
    const float v = horizontal_sum(_mm256_add_ps(a, b));
    s[j] = first ? v : s[j] + v;
  }
}

template <int F>
__attribute__((target("avx2,fma"))) void weighted_block(const float* p, const float* x, int64_t ld, int64_t count,
                                                        float* y, int64_t tail) {
  const __m256i m = lanes_upto8(tail);
  __m256 acc[F > 0 ? F : 1];
#pragma GCC unroll 8
  for (int r = 0; r < F; ++r) acc[r] = _mm256_setzero_ps();
  __m256 at = _mm256_setzero_ps();
  for (int64_t j = 0; j < count; ++j) {
    const float* row = x + j * ld;
    const __m256 pj = _mm256_set1_ps(p[j]);
#pragma GCC unroll 8
    for (int r = 0; r < F; ++r) acc[r] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(row + 8 * r), acc[r]);
    if (tail > 0) at = _mm256_fmadd_ps(pj, _mm256_maskload_ps(row + 8 * F, m), at);
  }
#pragma GCC unroll 8
  for (int r = 0; r < F; ++r) _mm256_storeu_ps(y + 8 * r, acc[r]);
  if (tail > 0) _mm256_maskstore_ps(y + 8 * F, m, at);
}

// Calls block<F> for F = w / 8 (w <= 64) with the tail w % 8.
template <template <int> class Block, typename... Args>
__attribute__((target("avx2,fma"))) void by_full_lanes(int64_t w, Args... args) {
  const int64_t tail = w % 8;
  switch (w / 8) {
    case 0: return Block<0>::run(args..., tail);
    case 1: return Block<1>::run(args..., tail);
    case 2: return Block<2>::run(args..., tail);
    case 3: return Block<3>::run(args..., tail);
    case 4: return Block<4>::run(args..., tail);
    case 5: return Block<5>::run(args..., tail);
    case 6: return Block<6>::run(args..., tail);
    case 7: return Block<7>::run(args..., tail);
    default: return Block<8>::run(args..., tail);
  }
}
template <int F>
struct Dots {
  __attribute__((target("avx2,fma"))) static void run(const float* q, const float* x, int64_t ld, int64_t count,
                                                      float* s, bool first, int64_t tail) {
    dots_block<F>(q, x, ld, count, s, tail, first);
  }
};
template <int F>
struct Weighted {
  __attribute__((target("avx2,fma"))) static void run(const float* p, const float* x, int64_t ld, int64_t count,
                                                      float* y, int64_t tail) {
    weighted_block<F>(p, x, ld, count, y, tail);
  }
};

__attribute__((target("avx2,fma"))) void dots_avx2(const float* q, const float* x, int64_t ld, int64_t count, float* s,
                                                   int64_t n) {
  for (int64_t d0 = 0; d0 < n; d0 += 64)
    by_full_lanes<Dots>(std::min<int64_t>(64, n - d0), q + d0, x + d0, ld, count, s, d0 == 0);
}

__attribute__((target("avx2,fma"))) void weighted_rows_avx2(const float* p, const float* x, int64_t ld, int64_t count,
                                                            float* y, int64_t n) {
  for (int64_t d0 = 0; d0 < n; d0 += 64) by_full_lanes<Weighted>(std::min<int64_t>(64, n - d0), p, x + d0, ld, count, y + d0);
}

template <typename T>
void dots_plain(const T* q, const T* x, int64_t ld, int64_t count, T* s, int64_t n) {
  for (int64_t j = 0; j < count; ++j) s[j] = dot_plain(q, x + j * ld, n);
}

template <typename T>
void weighted_rows_plain(const T* p, const T* x, int64_t ld, int64_t count, T* y, int64_t n) {
  std::fill_n(y, n, T(0));
  for (int64_t j = 0; j < count; ++j)
    for (int64_t d = 0; d < n; ++d) y[d] += p[j] * x[j * ld + d];
}

// Mixture logits (see row_kernels.h) over keys [j0, n): one key at a time, for the plain path and
// the vector loops' last keys; returns the largest logit (or `max`).
float mixture_logits_from(const float* const* x, const float* coef, const float* row, const float* const* col,
                          int64_t m_count, const float* bd, const bool* hidden, float* u, float* w, float* const* resp,
                          int64_t j0, int64_t n, bool hard, float scale, float max) {
  float y[16];
  for (int64_t j = j0; j < n; ++j) {
    float best = kNegInf;
    int64_t arg = 0;
    for (int64_t m = 0; m < m_count; ++m) {
      y[m] = coef[m] * x[m][j] + (row[m] + col[m][j]);
      if (y[m] > best) best = y[m], arg = m;
    }
    u[j] = hidden[j] ? kNegInf : best + scale * bd[j];
    max = std::max(max, u[j]);
    if (hard) {
      if (resp)
        for (int64_t m = 0; m + 1 < m_count; ++m) resp[m][j] = m == arg ? 1.0f : 0.0f;
      w[j] = 1.0f;
      continue;
    }
    float z = 0;
    for (int64_t m = 0; m < m_count; ++m) z += (y[m] = std::exp(y[m] - best));
    if (resp)
      for (int64_t m = 0; m + 1 < m_count; ++m) resp[m][j] = y[m] / z;
    w[j] = z;
  }
  return max;
}

// Mixture logits, AVX2: 8 keys a vector, the last ones one at a time.
__attribute__((target("avx2,fma"))) float mixture_logits_avx2(const float* const* x, const float* coef,
                                                              const float* row, const float* const* col,
                                                              int64_t m_count, const float* bd, const bool* hidden,
                                                              float* u, float* w, float* const* resp, int64_t n,
                                                              bool hard, float scale) {
  const __m256 ninf = _mm256_set1_ps(kNegInf), vscale = _mm256_set1_ps(scale), one = _mm256_set1_ps(1.0f);
  __m256 vmax = ninf;
  __m256 y[16];
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 best = ninf;
    for (int64_t m = 0; m < m_count; ++m) {
      y[m] = _mm256_fmadd_ps(_mm256_set1_ps(coef[m]), _mm256_loadu_ps(x[m] + j),
                             _mm256_add_ps(_mm256_set1_ps(row[m]), _mm256_loadu_ps(col[m] + j)));
      best = _mm256_max_ps(best, y[m]);
    }
    const __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(hidden + j)));
    const __m256 logit = _mm256_blendv_ps(_mm256_fmadd_ps(vscale, _mm256_loadu_ps(bd + j), best), ninf,
                                          _mm256_castsi256_ps(_mm256_cmpgt_epi32(h, _mm256_setzero_si256())));
    _mm256_storeu_ps(u + j, logit);
    vmax = _mm256_max_ps(vmax, logit);
    if (hard) {
      __m256 taken = _mm256_setzero_ps();  // the first component at the maximum takes it all
      for (int64_t m = 0; m + 1 < m_count; ++m) {
        const __m256 is = _mm256_andnot_ps(taken, _mm256_cmp_ps(y[m], best, _CMP_EQ_OQ));
        taken = _mm256_or_ps(taken, is);
        if (resp) _mm256_storeu_ps(resp[m] + j, _mm256_and_ps(is, one));
      }
      _mm256_storeu_ps(w + j, one);
      continue;
    }
    __m256 z = _mm256_setzero_ps();
    for (int64_t m = 0; m < m_count; ++m) z = _mm256_add_ps(z, y[m] = exp256(_mm256_sub_ps(y[m], best)));
    if (resp) {
      const __m256 inv_z = _mm256_div_ps(one, z);
      for (int64_t m = 0; m + 1 < m_count; ++m) _mm256_storeu_ps(resp[m] + j, _mm256_mul_ps(y[m], inv_z));
    }
    _mm256_storeu_ps(w + j, z);
  }
  return mixture_logits_from(x, coef, row, col, m_count, bd, hidden, u, w, resp, j, n, hard, scale,
                             horizontal_max(vmax));
}

__attribute__((target("avx2,fma"))) float mixture_grad_avx2(const float* g, const float* resp, int64_t plane,
                                                            int64_t m, int64_t m_count, float g_scale, float coef,
                                                            float* dx, float* d_col, int64_t n) {
  const __m256 vs = _mm256_set1_ps(g_scale), vc = _mm256_set1_ps(coef);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; j += 8) {
    const int64_t w = std::min<int64_t>(8, n - j);
    const __m256 t = _mm256_mul_ps(load_upto8(g + j, w), vs);
    __m256 d;
    if (m + 1 < m_count) {
      d = _mm256_mul_ps(t, load_upto8(resp + m * plane + j, w));
    } else {
      d = t;
      for (int64_t o = 0; o + 1 < m_count; ++o) d = _mm256_fnmadd_ps(t, load_upto8(resp + o * plane + j, w), d);
    }
    sum = _mm256_add_ps(sum, d);
    store_upto8(d_col + j, w, _mm256_add_ps(load_upto8(d_col + j, w), d));
    store_upto8(dx + j, w, _mm256_mul_ps(d, vc));
  }
  return horizontal_sum(sum);
}

template <typename T>
__attribute__((always_inline)) inline void add_scale_plain(const T* a, const T* b, T* s, int64_t n, T scale) {
  for (int64_t j = 0; j < n; ++j) s[j] = (a[j] + b[j]) * scale;
}
__attribute__((target_clones("avx2", "default"))) void add_scale_f(const float* a, const float* b, float* s, int64_t n,
                                                                   float scale) {
  add_scale_plain(a, b, s, n, scale);
}

template <typename T>
__attribute__((always_inline)) inline void softmax_grad_plain(const T* p, const T* g, T* gs, int64_t n, T d, T scale) {
  for (int64_t j = 0; j < n; ++j) gs[j] = p[j] * (g[j] - d) * scale;
}
__attribute__((target_clones("avx2", "default"))) void softmax_grad_f(const float* p, const float* g, float* gs,
                                                                      int64_t n, float d, float scale) {
  softmax_grad_plain(p, g, gs, n, d, scale);
}

__attribute__((target_clones("avx2", "default"))) void bias_relu_f(float* x, const float* b, int64_t n) {
  for (int64_t j = 0; j < n; ++j) x[j] = std::max(x[j] + b[j], 0.0f);
}

__attribute__((target_clones("avx2", "default"))) void scale_f(float* x, int64_t n, float f) {
  for (int64_t j = 0; j < n; ++j) x[j] *= f;
}

}  // namespace

float dot(const float* a, const float* b, int64_t n) { return compute::vec::dot(a, b, n); }
double dot(const double* a, const double* b, int64_t n) { return dot_plain(a, b, n); }

void add_scale(const float* a, const float* b, float* s, int64_t n, float scale) { add_scale_f(a, b, s, n, scale); }
void add_scale(const double* a, const double* b, double* s, int64_t n, double scale) {
  add_scale_plain(a, b, s, n, scale);
}

void bias_relu(float* x, const float* b, int64_t n) { bias_relu_f(x, b, n); }

void softmax_grad(const float* p, const float* g, float* gs, int64_t n, float d, float scale) {
  softmax_grad_f(p, g, gs, n, d, scale);
}
void softmax_grad(const double* p, const double* g, double* gs, int64_t n, double d, double scale) {
  softmax_grad_plain(p, g, gs, n, d, scale);
}

float masked_scores(const float* a, const float* b, const bool* hidden, float* s, int64_t n, float scale) {
  if (kHaveAvx512) return masked_scores_avx512(a, b, hidden, s, n, scale);
  if (kHaveAvx2) return masked_scores_avx2(a, b, hidden, s, n, scale);
  float m = kNegInf;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = hidden[j] ? kNegInf : (a[j] + b[j]) * scale;
    m = std::max(m, s[j]);
  }
  return m;
}

float mixture_logits(const float* const* x, const float* coef, const float* row, const float* const* col,
                     int64_t m_count, const float* bd, const bool* hidden, float* u, float* w, float* const* resp,
                     int64_t n, bool hard, float scale) {
  if (kHaveAvx512) return mixture_logits_avx512(x, coef, row, col, m_count, bd, hidden, u, w, resp, n, hard, scale);
  if (kHaveAvx2) return mixture_logits_avx2(x, coef, row, col, m_count, bd, hidden, u, w, resp, n, hard, scale);
  return mixture_logits_from(x, coef, row, col, m_count, bd, hidden, u, w, resp, 0, n, hard, scale, kNegInf);
}

float mixture_grad(const float* g, const float* resp, int64_t plane, int64_t m, int64_t m_count, float g_scale,
                   float coef, float* dx, float* d_col, int64_t n) {
  if (kHaveAvx512) return mixture_grad_avx512(g, resp, plane, m, m_count, g_scale, coef, dx, d_col, n);
  if (kHaveAvx2) return mixture_grad_avx2(g, resp, plane, m, m_count, g_scale, coef, dx, d_col, n);
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float t = g[j] * g_scale;
    float d = t;
    if (m + 1 < m_count) {
      d = t * resp[m * plane + j];
    } else {
      for (int64_t o = 0; o + 1 < m_count; ++o) d -= t * resp[o * plane + j];
    }
    sum += d;
    d_col[j] += d;
    dx[j] = coef * d;
  }
  return sum;
}

namespace {

// exp(x - max) in place on the widest units here, times w when kWeighted; returns the sum.
template <bool kWeighted>
float exp_sum(float* x, const float* w, int64_t n, float max) {
  if (kHaveAvx512) return exp_sum_avx512<kWeighted>(x, w, n, max);
  if (kHaveAvx2) return exp_sum_avx2<kWeighted>(x, w, n, max);
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += (x[j] = kWeighted ? w[j] * std::exp(x[j] - max) : std::exp(x[j] - max));
  return sum;
}

}  // namespace

void softmax(float* x, int64_t n, float max) { scale_f(x, n, 1.0f / exp_sum<false>(x, nullptr, n, max)); }

void weighted_softmax(float* x, const float* w, int64_t n, float max) {
  scale_f(x, n, 1.0f / exp_sum<true>(x, w, n, max));
}

void squared_lengths(const float* x, int64_t ld, int64_t count, float* s, int64_t n) {
  if (kHaveAvx512) return squared_lengths_avx512(x, ld, count, s, n);
  for (int64_t r = 0; r < count; ++r) s[r] = dot(x + r * ld, x + r * ld, n);
}

void dots(const float* q, const float* x, int64_t ld, int64_t count, float* s, int64_t n) {
  if (kHaveAvx2) dots_avx2(q, x, ld, count, s, n);
  else dots_plain(q, x, ld, count, s, n);
}
void weighted_rows(const float* p, const float* x, int64_t ld, int64_t count, float* y, int64_t n) {
  if (kHaveAvx2) weighted_rows_avx2(p, x, ld, count, y, n);
  else weighted_rows_plain(p, x, ld, count, y, n);
}

}  // namespace xl::kernels::rows
