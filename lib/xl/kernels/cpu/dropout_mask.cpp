#include "xl/kernels/cpu/dropout_mask.h"

#include "xl/compute/blas.h"

#include <ATen/CPUGeneratorImpl.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <mutex>

namespace xl::kernels::dropout_mask {
namespace {

// "lowbias32"'s multipliers, for every vector width.
constexpr uint32_t kMix1 = 0x7feb352dU, kMix2 = 0x846ca68bU;

__attribute__((always_inline)) inline uint32_t mix32(uint32_t x) {  // "lowbias32" (C. Wellons): a strong 32-bit integer hash
  x ^= x >> 16;
  x *= kMix1;
  x ^= x >> 15;
  x *= kMix2;
  x ^= x >> 16;
  return x;
}

constexpr int64_t kBlock = 4096;  // within a block starting at a multiple of kBlock the high word is constant

// The hash of element e0 + i of a block (e0 a multiple of kBlock, so the low word is e0's xor i).
struct BlockKey {
  uint32_t lo, hi, th;
  BlockKey(uint64_t e0, const Key& k)
      : lo(static_cast<uint32_t>(e0) ^ k.k0), hi(k.k1 ^ (static_cast<uint32_t>(e0 >> 32) * 0x9E3779B9U)),
        th(k.threshold) {}
  bool keep(uint32_t i) const { return mix32(mix32(lo ^ i) ^ hi) >= th; }
};

// Elements first + i of a block for i < n (first + n <= kBlock); x, r, y point at element first.
template <typename T>
void mask_scalar(const T* x, const T* r, T* y, uint32_t from, uint32_t n, uint32_t first, const BlockKey& k, T scale,
                 Op op) {
  for (uint32_t i = from; i < n; ++i) {
    const T m = k.keep(first + i) ? scale : T(0);
    if (op == Op::scale) y[i] = x[i] * m;
    else if (op == Op::relu_scale) y[i] = (x[i] > T(0) ? x[i] : T(0)) * m;
    else if (op == Op::bias_relu_scale) y[i] = (x[i] + r[i] > T(0) ? x[i] + r[i] : T(0)) * m;
    else y[i] = r[i] + x[i] * m;
  }
}

__attribute__((target("avx2"))) inline __m256i mix32x8(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(kMix1)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(kMix2)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

__attribute__((target("avx2"))) void mask_avx2(const float* x, const float* r, float* y, uint32_t n, uint32_t first,
                                               const BlockKey& k, float scale, Op op) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lo = _mm256_set1_epi32(static_cast<int>(k.lo)), hi = _mm256_set1_epi32(static_cast<int>(k.hi));
  const __m256i th = _mm256_set1_epi32(static_cast<int>(k.th));
  const __m256 sc = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first + i)), lane);
    __m256i h = mix32x8(_mm256_xor_si256(mix32x8(_mm256_xor_si256(lo, idx)), hi));
    __m256i keep = _mm256_cmpeq_epi32(_mm256_max_epu32(h, th), h);  // h >= th, unsigned
    __m256 m = _mm256_and_ps(_mm256_castsi256_ps(keep), sc);
    __m256 v = _mm256_loadu_ps(x + i);
    if (op == Op::scale) _mm256_storeu_ps(y + i, _mm256_mul_ps(v, m));
    else if (op == Op::relu_scale) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_max_ps(v, zero), m));
    else if (op == Op::bias_relu_scale)
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_max_ps(_mm256_add_ps(v, _mm256_loadu_ps(r + i)), zero), m));
    else _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(r + i), _mm256_mul_ps(v, m)));
  }
  mask_scalar<float>(x, r, y, i, n, first, k, scale, op);
}

// The same hash on 16 lanes, faster than the AVX2 loop even where the AVX-512 units are 256 bits
// wide (measured: bench/HISTORY.md, "Vector loops"); the same bits, down to the sign of a dropped
// negative (x times a zero).
// GCC 12 takes the AVX-512 headers' deliberately undefined vectors for uninitialised ones (its bug
// 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) inline __m512i mix32x16(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(kMix1)));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(kMix2)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

__attribute__((target("avx512f"))) void mask_avx512(const float* x, const float* r, float* y, uint32_t n,
                                                    uint32_t first, const BlockKey& k, float scale, Op op) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i lo = _mm512_set1_epi32(static_cast<int>(k.lo)), hi = _mm512_set1_epi32(static_cast<int>(k.hi));
  const __m512i th = _mm512_set1_epi32(static_cast<int>(k.th));
  const __m512 sc = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first + i)), lane);
    __m512i h = mix32x16(_mm512_xor_si512(mix32x16(_mm512_xor_si512(lo, idx)), hi));
    __m512 m = _mm512_maskz_mov_ps(_mm512_cmp_epu32_mask(h, th, _MM_CMPINT_NLT), sc);  // h >= th
    __m512 v = _mm512_loadu_ps(x + i);
    if (op == Op::scale) _mm512_storeu_ps(y + i, _mm512_mul_ps(v, m));
    else if (op == Op::relu_scale) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_max_ps(v, zero), m));
    else if (op == Op::bias_relu_scale)
      _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_max_ps(_mm512_add_ps(v, _mm512_loadu_ps(r + i)), zero), m));
    else _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(r + i), _mm512_mul_ps(v, m)));
  }
  mask_scalar<float>(x, r, y, i, n, first, k, scale, op);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

const compute::CpuVectorUnits kUnits = compute::kernel_vector_units();

void block_run(const float* x, const float* r, float* y, uint32_t n, uint32_t first, const BlockKey& k, float scale,
               Op op) {
  if (kUnits.avx512) mask_avx512(x, r, y, n, first, k, scale, op);
  else if (kUnits.avx2_fma) mask_avx2(x, r, y, n, first, k, scale, op);
  else mask_scalar<float>(x, r, y, 0, n, first, k, scale, op);
}
void block_run(const double* x, const double* r, double* y, uint32_t n, uint32_t first, const BlockKey& k,
               double scale, Op op) {
  mask_scalar<double>(x, r, y, 0, n, first, k, scale, op);
}

// The span split where blocks begin.
template <typename T>
void apply_span(const T* x, const T* r, T* y, int64_t n, int64_t e0, const Key& k, T scale, Op op) {
  for (int64_t done = 0; done < n;) {
    const int64_t e = e0 + done, block = e - e % kBlock;
    const int64_t len = std::min(n - done, block + kBlock - e);
    block_run(x + done, r ? r + done : nullptr, y + done, static_cast<uint32_t>(len), static_cast<uint32_t>(e - block),
              BlockKey(static_cast<uint64_t>(block), k), scale, op);
    done += len;
  }
}

}  // namespace

Key draw(double p) {
  auto gen = at::detail::getDefaultCPUGenerator();
  uint64_t seed;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    seed = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
  }
  Key k;
  k.k0 = static_cast<uint32_t>(seed);
  k.k1 = static_cast<uint32_t>(seed >> 32);
  double t = std::ldexp(p, 32);
  k.threshold = t >= 4294967295.0 ? 0xffffffffu : static_cast<uint32_t>(std::llround(t));
  return k;
}

void save(torch::autograd::AutogradContext* ctx, const Key& k, double p) {
  ctx->saved_data["key"] = static_cast<int64_t>((static_cast<uint64_t>(k.k1) << 32) | k.k0);
  ctx->saved_data["threshold"] = static_cast<int64_t>(k.threshold);
  ctx->saved_data["p"] = p;
}

Key saved(const torch::autograd::AutogradContext* ctx) {
  Key k;
  uint64_t packed = static_cast<uint64_t>(ctx->saved_data.at("key").toInt());
  k.k0 = static_cast<uint32_t>(packed);
  k.k1 = static_cast<uint32_t>(packed >> 32);
  k.threshold = static_cast<uint32_t>(ctx->saved_data.at("threshold").toInt());
  return k;
}

void apply(const float* x, const float* r, float* y, int64_t n, int64_t e0, const Key& k, float scale, Op op) {
  apply_span(x, r, y, n, e0, k, scale, op);
}
void apply(const double* x, const double* r, double* y, int64_t n, int64_t e0, const Key& k, double scale, Op op) {
  apply_span(x, r, y, n, e0, k, scale, op);
}

}  // namespace xl::kernels::dropout_mask
