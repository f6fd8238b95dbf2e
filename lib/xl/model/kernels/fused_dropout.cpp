#include "xl/model/kernels/fused_dropout.h"

#include <ATen/CPUGeneratorImpl.h>
#include "xl/model/kernels/kernel_choice.h"
#include "xl/model/kernels/parallel.h"

#include <algorithm>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <mutex>


namespace xl::model {
namespace {

// Mask of one call: element e is kept when hash(e) >= threshold (P(keep) = 1 - threshold / 2^32).
struct MaskKey {
  uint32_t k0 = 0, k1 = 0, threshold = 0;
};

MaskKey draw_key(double p) {
  auto gen = at::detail::getDefaultCPUGenerator();
  uint64_t seed;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    seed = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
  }
  MaskKey k;
  k.k0 = static_cast<uint32_t>(seed);
  k.k1 = static_cast<uint32_t>(seed >> 32);
  double t = std::ldexp(p, 32);
  k.threshold = t >= 4294967295.0 ? 0xffffffffu : static_cast<uint32_t>(std::llround(t));
  return k;
}

MaskKey key_of(const torch::autograd::AutogradContext* ctx) {
  MaskKey k;
  uint64_t packed = static_cast<uint64_t>(ctx->saved_data.at("key").toInt());
  k.k0 = static_cast<uint32_t>(packed);
  k.k1 = static_cast<uint32_t>(packed >> 32);
  k.threshold = static_cast<uint32_t>(ctx->saved_data.at("threshold").toInt());
  return k;
}

void save_key(torch::autograd::AutogradContext* ctx, const MaskKey& k, double p) {
  ctx->saved_data["key"] = static_cast<int64_t>((static_cast<uint64_t>(k.k1) << 32) | k.k0);
  ctx->saved_data["threshold"] = static_cast<int64_t>(k.threshold);
  ctx->saved_data["p"] = p;
}

__attribute__((always_inline)) inline uint32_t mix32(uint32_t x) {  // "lowbias32" (C. Wellons): a strong 32-bit integer hash
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

constexpr int64_t kBlock = 4096;  // blocks start at multiples of kBlock: the high word is constant

// The hash of element e0 + i of a block (e0 a multiple of kBlock, so the low word is e0's xor i).
struct BlockKey {
  uint32_t lo, hi, th;
  BlockKey(uint64_t e0, const MaskKey& k)
      : lo(static_cast<uint32_t>(e0) ^ k.k0), hi(k.k1 ^ (static_cast<uint32_t>(e0 >> 32) * 0x9E3779B9U)),
        th(k.threshold) {}
  bool keep(uint32_t i) const { return mix32(mix32(lo ^ i) ^ hi) >= th; }
};

// mode 0: y = x*m; 1: y = relu(x)*m; 2: y = r + x*m; m = scale where kept, 0 where dropped.
template <typename T>
void mask_scalar(const T* x, const T* r, T* y, uint32_t from, uint32_t n, const BlockKey& k, T scale, int mode) {
  for (uint32_t i = from; i < n; ++i) {
    const T m = k.keep(i) ? scale : T(0);
    if (mode == 0) y[i] = x[i] * m;
    else if (mode == 1) y[i] = (x[i] > T(0) ? x[i] : T(0)) * m;
    else y[i] = r[i] + x[i] * m;
  }
}

__attribute__((target("avx2"))) inline __m256i mix32x8(__m256i x) {
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(0x846ca68bU)));
  return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

__attribute__((target("avx2"))) void mask_avx2(const float* x, const float* r, float* y, uint32_t n,
                                               const BlockKey& k, float scale, int mode) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i lo = _mm256_set1_epi32(static_cast<int>(k.lo)), hi = _mm256_set1_epi32(static_cast<int>(k.hi));
  const __m256i th = _mm256_set1_epi32(static_cast<int>(k.th));
  const __m256 sc = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(i)), lane);
    __m256i h = mix32x8(_mm256_xor_si256(mix32x8(_mm256_xor_si256(lo, idx)), hi));
    __m256i keep = _mm256_cmpeq_epi32(_mm256_max_epu32(h, th), h);  // h >= th, unsigned
    __m256 m = _mm256_and_ps(_mm256_castsi256_ps(keep), sc);
    __m256 v = _mm256_loadu_ps(x + i);
    if (mode == 0) _mm256_storeu_ps(y + i, _mm256_mul_ps(v, m));
    else if (mode == 1) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_max_ps(v, zero), m));
    else _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(r + i), _mm256_mul_ps(v, m)));
  }
  mask_scalar<float>(x, r, y, i, n, k, scale, mode);
}

const bool kHaveAvx2 = __builtin_cpu_supports("avx2");

void mask_run(const float* x, const float* r, float* y, uint32_t n, uint64_t e0, const MaskKey& k, float scale,
              int mode) {
  BlockKey bk(e0, k);
  if (kHaveAvx2) mask_avx2(x, r, y, n, bk, scale, mode);
  else mask_scalar<float>(x, r, y, 0, n, bk, scale, mode);
}
void mask_run(const double* x, const double* r, double* y, uint32_t n, uint64_t e0, const MaskKey& k, double scale,
              int mode) {
  mask_scalar<double>(x, r, y, 0, n, BlockKey(e0, k), scale, mode);
}

template <typename T>
void relu_grad(const T* g, const T* out, T* gi, int64_t n, T scale) {
  for (int64_t i = 0; i < n; ++i) gi[i] = out[i] > T(0) ? g[i] * scale : T(0);
}
__attribute__((target("avx2"))) void relu_grad_avx2(const float* g, const float* out, float* gi, int64_t n,
                                                    float scale) {
  const __m256 sc = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 m = _mm256_and_ps(_mm256_cmp_ps(_mm256_loadu_ps(out + i), zero, _CMP_GT_OQ), sc);
    _mm256_storeu_ps(gi + i, _mm256_mul_ps(_mm256_loadu_ps(g + i), m));
  }
  relu_grad<float>(g + i, out + i, gi + i, n - i, scale);
}
void relu_grad(const float* g, const float* out, float* gi, int64_t n, float scale) {
  if (kHaveAvx2) relu_grad_avx2(g, out, gi, n, scale);
  else relu_grad<float>(g, out, gi, n, scale);
}

// out = [residual +] mask(x) * scale (relu first when asked); all contiguous, same shape.
void apply_mask(const torch::Tensor& x, const torch::Tensor& residual, torch::Tensor& out, const MaskKey& k,
                double p, bool relu) {
  const int mode = residual.defined() ? 2 : relu ? 1 : 0;
  const int64_t n = x.numel();
  const double scale = 1.0 / (1.0 - p);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_dropout", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* rp = residual.defined() ? residual.data_ptr<scalar_t>() : nullptr;
    scalar_t* yp = out.data_ptr<scalar_t>();
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    xl::model::parallel_for(0, blocks, 8, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t e0 = b * kBlock;
        const uint32_t len = static_cast<uint32_t>(std::min<int64_t>(kBlock, n - e0));
        mask_run(xp + e0, rp ? rp + e0 : nullptr, yp + e0, len, static_cast<uint64_t>(e0), k,
                 static_cast<scalar_t>(scale), mode);
      }
    });
  });
}

torch::Tensor masked(const torch::Tensor& x, const MaskKey& k, double p) {
  torch::Tensor xc = x.contiguous();
  torch::Tensor out = torch::empty_like(xc);
  apply_mask(xc, torch::Tensor(), out, k, p, false);
  return out;
}

class Dropout : public torch::autograd::Function<Dropout> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, double p) {
    MaskKey k = draw_key(p);
    save_key(ctx, k, p);
    return masked(x, k, p);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    return {masked(g[0], key_of(ctx), ctx->saved_data["p"].toDouble()), torch::Tensor()};
  }
};

class ReluDropout : public torch::autograd::Function<ReluDropout> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, double p) {
    MaskKey k = draw_key(p);
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    apply_mask(xc, torch::Tensor(), out, k, p, true);
    ctx->save_for_backward({out});
    ctx->saved_data["p"] = p;
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    // The output is positive exactly where the input was positive and kept.
    torch::Tensor out = ctx->get_saved_variables()[0];
    double scale = 1.0 / (1.0 - ctx->saved_data["p"].toDouble());
    torch::Tensor go = g[0].contiguous();
    torch::Tensor gi = torch::empty_like(go);
    AT_DISPATCH_FLOATING_TYPES(go.scalar_type(), "fused_relu_dropout_backward", [&] {
      const scalar_t* gp = go.data_ptr<scalar_t>();
      const scalar_t* op = out.data_ptr<scalar_t>();
      scalar_t* ip = gi.data_ptr<scalar_t>();
      const scalar_t s = static_cast<scalar_t>(scale);
      xl::model::parallel_for(0, go.numel(), 16384, [&](int64_t b, int64_t e) {
        relu_grad(gp + b, op + b, ip + b, e - b, s);
      });
    });
    return {gi, torch::Tensor()};
  }
};

class DropoutAdd : public torch::autograd::Function<DropoutAdd> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& residual, double p) {
    MaskKey k = draw_key(p);
    save_key(ctx, k, p);
    torch::Tensor xc = x.contiguous(), rc = residual.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    apply_mask(xc, rc, out, k, p, false);
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    return {masked(g[0], key_of(ctx), ctx->saved_data["p"].toDouble()), g[0], torch::Tensor()};
  }
};

// The counter-based kernels cover float and double CPU tensors; everything else (GPUs, bf16,
// the generic path forced) draws its masks with torch::dropout from the device's generator.
bool fused(const torch::Tensor& x) {
  return cpu_kernel_allowed(x) && (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble);
}

}  // namespace

torch::Tensor fused_dropout(const torch::Tensor& x, double p, bool train) {
  if (!train || p <= 0) return x;
  if (p >= 1) return x * 0;
  return fused(x) ? Dropout::apply(x, p) : torch::dropout(x, p, true);
}

torch::Tensor fused_relu_dropout(const torch::Tensor& x, double p, bool train) {
  if (!train || p <= 0) return torch::relu(x);
  if (p >= 1) return torch::relu(x) * 0;
  return fused(x) ? ReluDropout::apply(x, p) : torch::dropout(torch::relu(x), p, true);
}

torch::Tensor fused_dropout_add(const torch::Tensor& x, const torch::Tensor& residual, double p, bool train) {
  if (!train || p <= 0) return residual + x;
  if (p >= 1) return residual + x * 0;
  return fused(x) && x.scalar_type() == residual.scalar_type() ? DropoutAdd::apply(x, residual, p)
                                                                : residual + torch::dropout(x, p, true);
}

}  // namespace xl::model
