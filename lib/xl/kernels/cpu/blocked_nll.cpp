#include "xl/kernels/cpu/blocked_nll.h"

#include <algorithm>

#include "xl/compute/precision.h"
#include "xl/kernels/cpu/linear.h"
#include "xl/kernels/cpu/target_log_softmax.h"

namespace xl::kernels {
namespace {

struct Block {
  int64_t start, end;
  torch::Tensor weight, bias;
};

Block block_of(const torch::Tensor& weight, const torch::Tensor& bias, int64_t start, int64_t cols) {
  const int64_t end = std::min(weight.size(0), start + cols);
  return {start, end, weight.slice(0, start, end), bias.defined() ? bias.slice(0, start, end) : bias};
}

// The block's logits in fp32 at least, as the whole layer's would be.
torch::Tensor logits_of(const torch::Tensor& h, const Block& b) { return compute::upcast(linear(h, b.weight, b.bias)); }

class BlockedNll : public torch::autograd::Function<BlockedNll> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& h, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& target, int64_t cols) {
    torch::Tensor log_sum_exp, target_logit;
    for (int64_t start = 0; start < weight.size(0); start += cols) {
      const Block b = block_of(weight, bias, start, cols);
      const torch::Tensor z = logits_of(h, b);
      const torch::Tensor lse = row_log_sum_exp(z);
      const torch::Tensor column = (target - b.start).clamp(0, b.end - b.start - 1).unsqueeze(1);
      const torch::Tensor picked =
          torch::where((target >= b.start) & (target < b.end), z.gather(1, column).squeeze(1), torch::zeros_like(lse));
      log_sum_exp = log_sum_exp.defined() ? torch::logaddexp(log_sum_exp, lse) : lse;
      target_logit = target_logit.defined() ? target_logit + picked : picked;
    }
    ctx->save_for_backward({h, weight, bias, target, log_sum_exp});
    ctx->saved_data["cols"] = cols;
    return log_sum_exp - target_logit;
  }

  // d loss[n] / d z[n, j] = softmax(z[n])[j] - [j == target[n]], block by block.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &h = saved[0], &weight = saved[1], &bias = saved[2], &target = saved[3], &lse = saved[4];
    const int64_t cols = ctx->saved_data["cols"].toInt();
    const torch::Tensor g = grads[0].to(lse.scalar_type()).contiguous();
    torch::Tensor gh = torch::zeros(h.sizes(), h.options().dtype(lse.scalar_type()));
    torch::Tensor gw = torch::empty(weight.sizes(), weight.options());
    torch::Tensor gb = bias.defined() ? torch::empty(bias.sizes(), bias.options()) : torch::Tensor();
    const torch::Tensor hx = h.to(lse.scalar_type());
    for (int64_t start = 0; start < weight.size(0); start += cols) {
      const Block b = block_of(weight, bias, start, cols);
      torch::Tensor dz = logits_of(h, b);
      softmax_minus_target_(dz, lse, target - b.start, g);
      gh.addmm_(dz, b.weight.to(dz.scalar_type()));
      gw.slice(0, b.start, b.end).copy_(dz.t().mm(hx));
      if (gb.defined()) gb.slice(0, b.start, b.end).copy_(dz.sum(0));
    }
    return {gh.to(h.scalar_type()), gw, gb, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor blocked_nll(const torch::Tensor& h, const torch::Tensor& weight, const torch::Tensor& bias,
                          const torch::Tensor& target, int64_t cols) {
  TORCH_CHECK(h.dim() == 2 && weight.dim() == 2 && target.dim() == 1 && target.size(0) == h.size(0) && cols > 0,
              "blocked_nll: h [N, d], weight [V, d], target [N] and cols > 0 expected");
  return BlockedNll::apply(h, weight, bias, target, cols);
}

}  // namespace xl::kernels
