#include "xl/kernels/cpu/dropout_add_layer_norm.h"

#include <algorithm>
#include <vector>

#include "xl/compute/kernel_choice.h"
#include "xl/compute/parallel.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cpu/dropout_mask.h"
#include "xl/kernels/cpu/fused_dropout.h"
#include "xl/kernels/cpu/partial_sums.h"
#include "xl/kernels/cpu/row_kernels.h"

namespace xl::kernels {
namespace {

// Forward's rows per block: the block's sums stay in L1 between the add and the normalisation.
constexpr int64_t kBlockFloats = 4096;

// y (and, when `sum` is given, the sum and each row's mean and rstd) from x and the residual, the
// mask's key when p > 0.
void forward_rows(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                  const torch::Tensor& bias, double p, const dropout_mask::Key& key, double eps, torch::Tensor& y,
                  torch::Tensor* sum, torch::Tensor* mean, torch::Tensor* rstd) {
  const int64_t d = x.size(-1), n_rows = x.numel() / d, block = std::max<int64_t>(1, kBlockFloats / d);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "dropout_add_layer_norm", [&] {
    using T = scalar_t;
    const T *xp = x.data_ptr<T>(), *rp = residual.data_ptr<T>(), *w = weight.data_ptr<T>(), *b = bias.data_ptr<T>();
    T* yp = y.data_ptr<T>();
    T* sp = sum ? sum->data_ptr<T>() : nullptr;
    T* mp = mean ? mean->data_ptr<T>() : nullptr;
    T* rsp = rstd ? rstd->data_ptr<T>() : nullptr;
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    compute::parallel_for(0, n_rows, block, [&](int64_t r0, int64_t r1) {
      std::vector<T> scratch(sp ? 0 : static_cast<size_t>(block * d));
      for (int64_t i0 = r0; i0 < r1; i0 += block) {
        const int64_t n = std::min(block, r1 - i0) * d, e0 = i0 * d;
        T* s = sp ? sp + e0 : scratch.data();
        if (p > 0) dropout_mask::apply(xp + e0, rp + e0, s, n, e0, key, scale, dropout_mask::Op::add);
        else rows::add_scale(rp + e0, xp + e0, s, n, T(1));
        for (int64_t i = i0; i < i0 + n / d; ++i) {
          T m, r;
          rows::layer_norm(s + (i - i0) * d, w, b, yp + i * d, d, eps, &m, &r);
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
    const int64_t n_rows = x.numel() / x.size(-1);
    torch::Tensor y = torch::empty_like(x), sum = torch::empty_like(x);
    torch::Tensor mean = torch::empty({n_rows}, x.options()), rstd = torch::empty({n_rows}, x.options());
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
    const int64_t d = sum.size(-1), n_rows = sum.numel() / d, tasks = partial_tasks(n_rows);
    torch::Tensor d_res = torch::empty_like(sum), d_x = p > 0 ? torch::empty_like(sum) : d_res;
    torch::Tensor partial = torch::empty({2, tasks, d}, sum.options());  // weight's, then bias's
    torch::Tensor d_w = torch::empty({d}, sum.options()), d_b = torch::empty({d}, sum.options());
    AT_DISPATCH_FLOATING_TYPES(sum.scalar_type(), "dropout_add_layer_norm_backward", [&] {
      using T = scalar_t;
      const T *g = dy.data_ptr<T>(), *s = sum.data_ptr<T>(), *mp = mean.data_ptr<T>(), *rp = rstd.data_ptr<T>();
      const T* w = weight.data_ptr<T>();
      T *dr = d_res.data_ptr<T>(), *dx = d_x.data_ptr<T>(), *pw = partial.data_ptr<T>(), *pb = pw + tasks * d;
      const T scale = static_cast<T>(1.0 / (1.0 - p));
      compute::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t task = t0; task < t1; ++task) {
          T *tw = pw + task * d, *tb = pb + task * d;
          std::fill_n(tw, d, T(0));
          std::fill_n(tb, d, T(0));
          const int64_t i0 = task * kPartialRows, i1 = std::min(n_rows, i0 + kPartialRows);
          for (int64_t i = i0; i < i1; ++i) {
            rows::layer_norm_grad(g + i * d, w, s + i * d, mp[i], rp[i], dr + i * d, tw, tb, d);
          }
          if (p > 0)
            dropout_mask::apply(dr + i0 * d, nullptr, dx + i0 * d, (i1 - i0) * d, i0 * d, key, scale,
                                dropout_mask::Op::scale);
        }
      });
      add_partials(pw, tasks, d, d_w.data_ptr<T>());
      add_partials(pb, tasks, d, d_b.data_ptr<T>());
    });
    return {d_x, d_res, d_w, d_b, torch::Tensor(), torch::Tensor()};
  }
};

bool runs_here(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
               const torch::Tensor& bias) {
  const auto dtype = x.scalar_type();
  auto same = [&](const torch::Tensor& t) { return t.defined() && t.scalar_type() == dtype && t.device().is_cpu(); };
  return compute::cpu_kernel_allowed(x) && compute::cpu_kernels_take_products() && (dtype == torch::kFloat || dtype == torch::kDouble) &&
         x.dim() >= 1 && x.numel() > 0 && same(residual) && residual.sizes() == x.sizes() && same(weight) &&
         same(bias) && weight.dim() == 1 && bias.dim() == 1 && weight.size(0) == x.size(-1) &&
         bias.size(0) == x.size(-1);
}

}  // namespace

torch::Tensor dropout_add_layer_norm(const torch::Tensor& x, const torch::Tensor& residual, double p, bool train,
                                     const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
  RECORD_FUNCTION("xl::dropout_add_layer_norm", std::vector<c10::IValue>());
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

}  // namespace xl::kernels
