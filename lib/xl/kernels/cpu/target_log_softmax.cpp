#include "xl/kernels/cpu/target_log_softmax.h"

#include "xl/compute/kernel_choice.h"
#include "xl/compute/parallel.h"
#include "xl/kernels/cpu/row_kernels.h"

namespace xl::kernels {
namespace {

// Whether the row kernels take these logits (and targets): float or double rows on the CPU.
bool row_kernels_take(const torch::Tensor& logits, const torch::Tensor& target = {}) {
  return compute::cpu_kernel_allowed(logits) && (logits.scalar_type() == torch::kFloat || logits.scalar_type() == torch::kDouble) &&
         logits.size(1) > 0 && (!target.defined() || (target.scalar_type() == torch::kLong && target.device().is_cpu()));
}

// Rows per parallel task: enough elements that a task outweighs waking a thread.
int64_t row_grain(int64_t v) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(v, 1)); }

// The row kernels' out[n, j] = g[n] (exp(z[n, j] - lse[n]) - [j == target[n]]) for contiguous
// float or double z and out (out may be z); a target outside [0, V) adds no -g.
void softmax_minus_target_rows(const torch::Tensor& z, torch::Tensor& out, const torch::Tensor& lse,
                               const torch::Tensor& target, const torch::Tensor& g) {
  const int64_t n = z.size(0), v = z.size(1);
  const torch::Tensor t = target.contiguous(), l = lse.to(z.scalar_type()).contiguous(),
                      gg = g.to(z.scalar_type()).contiguous();
  const int64_t* tp = t.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "softmax_minus_target", [&] {
    const scalar_t *zp = z.data_ptr<scalar_t>(), *lp = l.data_ptr<scalar_t>(), *gp = gg.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    compute::parallel_for(0, n, row_grain(v), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        rows::exp_shifted(zp + r * v, op + r * v, v, lp[r], gp[r]);
        if (tp[r] >= 0 && tp[r] < v) op[r * v + tp[r]] -= gp[r];
      }
    });
  });
}

class TargetLogSoftmax : public torch::autograd::Function<TargetLogSoftmax> {
 public:
  // z [N, V] contiguous, t [N] int64 contiguous, every t in [0, V).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& z, const torch::Tensor& t) {
    const int64_t n = z.size(0), v = z.size(1);
    torch::Tensor lse = torch::empty({n}, z.options()), out = torch::empty({n}, z.options());
    const int64_t* tp = t.data_ptr<int64_t>();
    AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "target_log_softmax", [&] {
      const scalar_t* zp = z.data_ptr<scalar_t>();
      scalar_t *lp = lse.data_ptr<scalar_t>(), *op = out.data_ptr<scalar_t>();
      compute::parallel_for(0, n, row_grain(v), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          lp[r] = rows::log_sum_exp(zp + r * v, v);
          op[r] = zp[r * v + tp[r]] - lp[r];
        }
      });
    });
    ctx->save_for_backward({z, t, lse});
    return out;
  }

  // d out[n] / d z[n, j] = [j == t[n]] - softmax(z[n])[j]
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &z = saved[0], &t = saved[1], &lse = saved[2];
    torch::Tensor gz = torch::empty_like(z);
    softmax_minus_target_rows(z, gz, lse, t, grads[0].neg());  // the loss is -out
    return {gz, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor target_log_softmax(const torch::Tensor& logits, const torch::Tensor& target) {
  RECORD_FUNCTION("xl::target_log_softmax", std::vector<c10::IValue>());
  TORCH_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
              "target_log_softmax: [N, V] logits and [N] targets expected");
  if (!row_kernels_take(logits, target) || target.numel() == 0)
    return torch::log_softmax(logits, -1).gather(1, target.unsqueeze(1)).squeeze(1);
  TORCH_CHECK(target.min().item<int64_t>() >= 0 && target.max().item<int64_t>() < logits.size(1),
              "target_log_softmax: a target outside [0, ", logits.size(1), ")");
  return TargetLogSoftmax::apply(logits.contiguous(), target.contiguous());
}

torch::Tensor row_log_sum_exp(const torch::Tensor& logits) {
  TORCH_CHECK(logits.dim() == 2, "row_log_sum_exp: [N, V] logits expected");
  if (!row_kernels_take(logits)) return logits.logsumexp(1);
  const torch::Tensor z = logits.contiguous();
  const int64_t n = z.size(0), v = z.size(1);
  torch::Tensor lse = torch::empty({n}, z.options());
  AT_DISPATCH_FLOATING_TYPES(z.scalar_type(), "row_log_sum_exp", [&] {
    const scalar_t* zp = z.data_ptr<scalar_t>();
    scalar_t* lp = lse.data_ptr<scalar_t>();
    compute::parallel_for(0, n, row_grain(v), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) lp[r] = rows::log_sum_exp(zp + r * v, v);
    });
  });
  return lse;
}

void softmax_minus_target_(torch::Tensor& z, const torch::Tensor& lse, const torch::Tensor& target,
                           const torch::Tensor& g) {
  TORCH_CHECK(z.dim() == 2 && z.is_contiguous() && lse.size(0) == z.size(0) && target.size(0) == z.size(0) &&
                  g.size(0) == z.size(0),
              "softmax_minus_target_: contiguous [N, V] logits and [N] lse, target and g expected");
  const int64_t v = z.size(1);
  if (!row_kernels_take(z, target)) {
    z.sub_(lse.unsqueeze(1)).exp_().mul_(g.unsqueeze(1));
    const torch::Tensor inside = (target >= 0) & (target < v);
    z.scatter_add_(1, target.clamp(0, std::max<int64_t>(v - 1, 0)).unsqueeze(1),
                   torch::where(inside, -g, torch::zeros_like(g)).unsqueeze(1));
    return;
  }
  softmax_minus_target_rows(z, z, lse, target, g);
}

}  // namespace xl::kernels
