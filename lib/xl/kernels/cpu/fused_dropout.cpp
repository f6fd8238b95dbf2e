#include "xl/kernels/cpu/fused_dropout.h"

#include "xl/compute/blas.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/parallel.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cpu/dropout_mask.h"
#include "xl/kernels/cpu/linear.h"
#include "xl/kernels/cpu/partial_sums.h"
#include "xl/kernels/cpu/row_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace xl::kernels {
namespace {

using dropout_mask::Key;
using dropout_mask::Op;

const bool kHaveAvx2 = compute::kernel_vector_units().avx2_fma;

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
void apply_mask(const torch::Tensor& x, const torch::Tensor& residual, torch::Tensor& out, const Key& k, double p,
                bool relu) {
  const Op op = residual.defined() ? Op::add : relu ? Op::relu_scale : Op::scale;
  const int64_t n = x.numel();
  const double scale = 1.0 / (1.0 - p);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_dropout", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* rp = residual.defined() ? residual.data_ptr<scalar_t>() : nullptr;
    scalar_t* yp = out.data_ptr<scalar_t>();
    compute::parallel_for(0, n, 32768, [&](int64_t b, int64_t e) {
      dropout_mask::apply(xp + b, rp ? rp + b : nullptr, yp + b, e - b, b, k, static_cast<scalar_t>(scale), op);
    });
  });
}

torch::Tensor masked(const torch::Tensor& x, const Key& k, double p) {
  torch::Tensor xc = x.contiguous();
  torch::Tensor out = torch::empty_like(xc);
  apply_mask(xc, torch::Tensor(), out, k, p, false);
  return out;
}

class Dropout : public torch::autograd::Function<Dropout> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, double p) {
    Key k = dropout_mask::draw(p);
    dropout_mask::save(ctx, k, p);
    return masked(x, k, p);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    return {masked(g[0], dropout_mask::saved(ctx), ctx->saved_data["p"].toDouble()), torch::Tensor()};
  }
};

// dropout(relu(x + bias)) over x's last dimension; bias [d], or [0] for none (LibTorch 1.13's
// Function::apply takes no undefined tensors).
class ReluDropout : public torch::autograd::Function<ReluDropout> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& bias, double p) {
    Key k = dropout_mask::draw(p);
    torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const bool has_bias = bias.numel() > 0;
    if (has_bias) {  // a row at a time, the bias beside it: the same mask as over the whole tensor
      const int64_t d = xc.size(-1), n_rows = xc.numel() / d;
      const double scale = 1.0 / (1.0 - p);
      AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "fused_bias_relu_dropout", [&] {
        const scalar_t *xp = xc.data_ptr<scalar_t>(), *bp = bias.data_ptr<scalar_t>();
        scalar_t* yp = out.data_ptr<scalar_t>();
        compute::parallel_for(0, n_rows, std::max<int64_t>(1, 32768 / d), [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r)
            dropout_mask::apply(xp + r * d, bp, yp + r * d, d, r * d, k, static_cast<scalar_t>(scale),
                                Op::bias_relu_scale);
        });
      });
    } else {
      apply_mask(xc, torch::Tensor(), out, k, p, true);
    }
    ctx->save_for_backward({out});
    ctx->saved_data["p"] = p;
    ctx->saved_data["bias"] = has_bias;
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    // The output is positive exactly where the input was positive and kept.
    torch::Tensor out = ctx->get_saved_variables()[0];
    double scale = 1.0 / (1.0 - ctx->saved_data["p"].toDouble());
    torch::Tensor go = g[0].contiguous();
    torch::Tensor gi = torch::empty_like(go);
    if (!ctx->saved_data["bias"].toBool()) {
      AT_DISPATCH_FLOATING_TYPES(go.scalar_type(), "fused_relu_dropout_backward", [&] {
        const scalar_t* gp = go.data_ptr<scalar_t>();
        const scalar_t* op = out.data_ptr<scalar_t>();
        scalar_t* ip = gi.data_ptr<scalar_t>();
        const scalar_t s = static_cast<scalar_t>(scale);
        compute::parallel_for(0, go.numel(), 16384, [&](int64_t b, int64_t e) {
          relu_grad(gp + b, op + b, ip + b, e - b, s);
        });
      });
      return {gi, torch::Tensor(), torch::Tensor()};
    }
    // The bias's gradient, the input's summed over rows, in the same pass (partial_sums.h).
    const int64_t d = go.size(-1), n_rows = go.numel() / d, tasks = partial_tasks(n_rows);
    torch::Tensor partial = torch::empty({tasks, d}, go.options()), d_bias = torch::empty({d}, go.options());
    AT_DISPATCH_FLOATING_TYPES(go.scalar_type(), "fused_bias_relu_dropout_backward", [&] {
      const scalar_t* gp = go.data_ptr<scalar_t>();
      const scalar_t* op = out.data_ptr<scalar_t>();
      scalar_t *ip = gi.data_ptr<scalar_t>(), *pp = partial.data_ptr<scalar_t>(), *db = d_bias.data_ptr<scalar_t>();
      const scalar_t s = static_cast<scalar_t>(scale);
      compute::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t task = t0; task < t1; ++task) {
          scalar_t* sum = pp + task * d;
          const int64_t i0 = task * kPartialRows, i1 = std::min(n_rows, i0 + kPartialRows);
          relu_grad(gp + i0 * d, op + i0 * d, ip + i0 * d, d, s);
          std::copy_n(ip + i0 * d, d, sum);
          for (int64_t i = i0 + 1; i < i1; ++i) {
            relu_grad(gp + i * d, op + i * d, ip + i * d, d, s);
            rows::add_scale(sum, ip + i * d, sum, d, scalar_t(1));
          }
        }
      });
      add_partials(pp, tasks, d, db);
    });
    return {gi, d_bias, torch::Tensor()};
  }
};

class DropoutAdd : public torch::autograd::Function<DropoutAdd> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& residual, double p) {
    Key k = dropout_mask::draw(p);
    dropout_mask::save(ctx, k, p);
    torch::Tensor xc = x.contiguous(), rc = residual.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    apply_mask(xc, rc, out, k, p, false);
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    return {masked(g[0], dropout_mask::saved(ctx), ctx->saved_data["p"].toDouble()), g[0], torch::Tensor()};
  }
};

// The counter-based kernels cover float and double CPU tensors; everything else (GPUs, bf16,
// the generic path forced) draws its masks with torch::dropout from the device's generator.
bool fused(const torch::Tensor& x) {
  return compute::cpu_kernel_allowed(x) && (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble);
}

}  // namespace

torch::Tensor fused_dropout(const torch::Tensor& x, double p, bool train) {
  if (!train || p <= 0) return x;
  if (p >= 1) return x * 0;
  return fused(x) ? Dropout::apply(x, p) : torch::dropout(x, p, true);
}

torch::Tensor linear_relu_dropout(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                  double p, bool train) {
  RECORD_FUNCTION("xl::linear_relu_dropout", std::vector<c10::IValue>());
  const bool drop = train && p > 0 && p < 1;
  const bool bias_here = drop && fused(x) && compute::cpu_kernels_take_products() && bias.defined() && bias.dim() == 1 &&
                         bias.device().is_cpu() && bias.scalar_type() == x.scalar_type() &&
                         weight.scalar_type() == x.scalar_type() && weight.dim() == 2 &&
                         bias.size(0) == weight.size(0);
  if (bias_here) return ReluDropout::apply(kernels::linear(x, weight), bias.contiguous(), p);
  const torch::Tensor h = kernels::linear(x, weight, bias);
  if (!drop) return p >= 1 && train ? torch::relu(h) * 0 : torch::relu(h);
  return fused(h) ? ReluDropout::apply(h, torch::empty({0}, h.options()), p) : torch::dropout(torch::relu(h), p, true);
}

torch::Tensor fused_dropout_add(const torch::Tensor& x, const torch::Tensor& residual, double p, bool train) {
  RECORD_FUNCTION("xl::dropout_add", std::vector<c10::IValue>());
  if (!train || p <= 0) return residual + x;
  if (p >= 1) return residual + x * 0;
  return fused(x) && x.scalar_type() == residual.scalar_type() ? DropoutAdd::apply(x, residual, p)
                                                                : residual + torch::dropout(x, p, true);
}

}  // namespace xl::kernels
