#include "xl/model/kernels/linear.h"

#include "xl/model/kernels/blas.h"
#include "xl/model/kernels/kernel_choice.h"
#include "xl/model/precision.h"

namespace xl::model {
namespace {

const float* floats(const torch::Tensor& t) { return t.data_ptr<float>(); }
float* floats(torch::Tensor& t) { return t.data_ptr<float>(); }

class Linear : public torch::autograd::Function<Linear> {
 public:
  // x2 [n, in] contiguous; weight [out, in] with unit column stride; bias [out] or [0] for none
  // (LibTorch 1.13's Function::apply takes no undefined tensors).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x2,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    RECORD_FUNCTION("xl::linear", std::vector<c10::IValue>());
    const int64_t n = x2.size(0), in = x2.size(1), out = weight.size(0);
    torch::Tensor y = torch::empty({n, out}, x2.options());
    float beta = 0;
    const bool has_bias = bias.numel() > 0;
    if (has_bias) {  // the bias first, then the product added to it (no clearing pass)
      y.copy_(bias.view({1, out}).expand({n, out}));
      beta = 1;
    }
    sgemm_row_major(false, true, n, out, in, floats(x2), in, floats(weight), weight.stride(0), beta, floats(y), out);
    ctx->save_for_backward({x2, weight});
    ctx->saved_data["bias"] = has_bias;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    RECORD_FUNCTION("xl::linear_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x2 = saved[0], &weight = saved[1];
    const int64_t n = x2.size(0), in = x2.size(1), out = weight.size(0);
    torch::Tensor go = g[0].contiguous();
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) {  // dX = dY W
      dx = torch::empty({n, in}, go.options());
      sgemm_row_major(false, false, n, in, out, floats(go), out, floats(weight), weight.stride(0), 0, floats(dx), in);
    }
    if (ctx->needs_input_grad(1)) {  // dW = dY^T X
      dw = torch::empty({out, in}, go.options());
      sgemm_row_major(true, false, out, in, n, floats(go), out, floats(x2), in, 0, floats(dw), in);
    }
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) db = go.sum(0);
    return {dx, dw, db};
  }
};

bool runs_here(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  auto is_float = [](const torch::Tensor& t) { return t.scalar_type() == torch::kFloat && t.device().is_cpu(); };
  return cpu_kernel_allowed(x) && blas().sgemm && !cpu_autocast_enabled() && is_float(x) && is_float(weight) &&
         (!bias.defined() || (is_float(bias) && bias.dim() == 1)) && weight.dim() == 2 && x.dim() >= 1 &&
         x.size(-1) == weight.size(1) && x.numel() > 0 && weight.numel() > 0;
}

}  // namespace

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!runs_here(x, weight, bias)) return torch::linear(x, weight, bias);
  const int64_t in = weight.size(1), out = weight.size(0);
  torch::Tensor w = weight.stride(1) == 1 && weight.stride(0) >= in ? weight : weight.contiguous();
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  torch::Tensor b = bias.defined() ? bias : torch::empty({0}, weight.options());
  return Linear::apply(x.reshape({-1, in}).contiguous(), w, b).view(sizes);
}

}  // namespace xl::model
