#include "xl/kernels/cpu/biased_queries.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "xl/compute/blas.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/parallel.h"

namespace xl::kernels {
namespace {

const bool kHaveAvx2 = compute::kernel_vector_units().avx2_fma;

// One row of backward_columns, 8 columns at a time from c0; returns the first column not done.
__attribute__((target("avx2"))) int64_t backward_row_avx2(const float* a, const float* b, float* out, int64_t c0,
                                                          int64_t c1, float* pu, float* pv) {
  int64_t c = c0;
  for (; c + 8 <= c1; c += 8) {
    const __m256 x = _mm256_loadu_ps(a + c), y = _mm256_loadu_ps(b + c);
    _mm256_storeu_ps(out + c, _mm256_add_ps(x, y));
    _mm256_storeu_ps(pu + (c - c0), _mm256_add_ps(_mm256_loadu_ps(pu + (c - c0)), x));
    _mm256_storeu_ps(pv + (c - c0), _mm256_add_ps(_mm256_loadu_ps(pv + (c - c0)), y));
  }
  return c;
}

// q_u = q + u and q_v = q + v on one row, 8 columns at a time; returns the first column not done.
__attribute__((target("avx2"))) int64_t forward_row_avx2(const float* q, const float* u, const float* v, float* q_u,
                                                         float* q_v, int64_t cols) {
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    const __m256 x = _mm256_loadu_ps(q + c);
    _mm256_storeu_ps(q_u + c, _mm256_add_ps(x, _mm256_loadu_ps(u + c)));
    _mm256_storeu_ps(q_v + c, _mm256_add_ps(x, _mm256_loadu_ps(v + c)));
  }
  return c;
}

// Threads split the columns (h, d), not the rows, so every column's sum runs over the tokens in
// order whatever the thread count: the same bits on any machine size.
constexpr int64_t kColumnGrain = 32;
// Rows summed in float before the partial sum is added into the double total.
constexpr int64_t kRowsPerPartial = 64;

// d_q = g_u + g_v on columns [c0, c1) of every row, and those columns' sums of g_u and g_v added
// into su, sv (indexed from c0).
void backward_columns(const float* g_u, const float* g_v, float* d_q, int64_t rows, int64_t cols, int64_t c0,
                      int64_t c1, double* su, double* sv) {
  std::vector<float> pu(static_cast<size_t>(c1 - c0)), pv(pu.size());
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerPartial) {
    std::fill(pu.begin(), pu.end(), 0.0f);
    std::fill(pv.begin(), pv.end(), 0.0f);
    for (int64_t r = r0; r < std::min(rows, r0 + kRowsPerPartial); ++r) {
      const float *a = g_u + r * cols, *b = g_v + r * cols;
      float* out = d_q + r * cols;
      int64_t c = c0;
      if (kHaveAvx2) c = backward_row_avx2(a, b, out, c0, c1, pu.data(), pv.data());
      for (; c < c1; ++c) {
        out[c] = a[c] + b[c];
        pu[c - c0] += a[c];
        pv[c - c0] += b[c];
      }
    }
    for (int64_t c = 0; c < c1 - c0; ++c) su[c] += pu[c], sv[c] += pv[c];
  }
}

class BiasedQueries : public torch::autograd::Function<BiasedQueries> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                                                const torch::Tensor& u, const torch::Tensor& v) {
    const int64_t cols = u.numel(), rows = q.numel() / cols;
    torch::Tensor q_u = torch::empty_like(q), q_v = torch::empty_like(q);
    const float *qp = q.data_ptr<float>(), *up = u.data_ptr<float>(), *vp = v.data_ptr<float>();
    float *qu = q_u.data_ptr<float>(), *qv = q_v.data_ptr<float>();
    compute::parallel_for(0, rows, 256, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float* x = qp + r * cols;
        float *a = qu + r * cols, *b = qv + r * cols;
        // AVX2 by hand (the compiler cannot rule out that the outputs overlap q, so it kept this loop
        // scalar); the columns past the last 8 here.
        for (int64_t c = kHaveAvx2 ? forward_row_avx2(x, up, vp, a, b, cols) : 0; c < cols; ++c) {
          a[c] = x[c] + up[c];
          b[c] = x[c] + vp[c];
        }
      }
    });
    ctx->saved_data["bias_sizes"] = u.sizes().vec();
    return {q_u, q_v};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto bias_sizes = ctx->saved_data["bias_sizes"].toIntVector();
    // An unused output's gradient arrives undefined: zeros stand in.
    const torch::Tensor& defined = grads[0].defined() ? grads[0] : grads[1];
    torch::Tensor g_u = grads[0].defined() ? grads[0].contiguous() : torch::zeros_like(defined);
    torch::Tensor g_v = grads[1].defined() ? grads[1].contiguous() : torch::zeros_like(defined);
    torch::Tensor d_q = torch::empty_like(g_u);
    torch::Tensor d_u = torch::empty(bias_sizes, g_u.options()), d_v = torch::empty(bias_sizes, g_u.options());
    const int64_t cols = d_u.numel(), rows = g_u.numel() / cols;
    const float *gu = g_u.data_ptr<float>(), *gv = g_v.data_ptr<float>();
    float *dq = d_q.data_ptr<float>(), *du = d_u.data_ptr<float>(), *dv = d_v.data_ptr<float>();
    compute::parallel_for(0, cols, kColumnGrain, [&](int64_t c0, int64_t c1) {
      std::vector<double> su(static_cast<size_t>(c1 - c0)), sv(su.size());
      backward_columns(gu, gv, dq, rows, cols, c0, c1, su.data(), sv.data());
      for (int64_t c = c0; c < c1; ++c) du[c] = static_cast<float>(su[c - c0]), dv[c] = static_cast<float>(sv[c - c0]);
    });
    return {d_q, d_u, d_v};
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> biased_queries(const torch::Tensor& q, const torch::Tensor& u,
                                                       const torch::Tensor& v) {
  RECORD_FUNCTION("xl::biased_queries", std::vector<c10::IValue>());
  const int64_t h = q.size(2), dh = q.size(3);
  const bool fused = compute::cpu_kernel_allowed(q) && q.scalar_type() == torch::kFloat && u.scalar_type() == torch::kFloat &&
                     v.scalar_type() == torch::kFloat && q.is_contiguous() && u.is_contiguous() &&
                     v.is_contiguous() && u.numel() == h * dh && v.numel() == h * dh;
  if (!fused) return {q + u.view({1, 1, h, dh}), q + v.view({1, 1, h, dh})};
  auto out = BiasedQueries::apply(q, u, v);
  return {out[0], out[1]};
}

}  // namespace xl::kernels
