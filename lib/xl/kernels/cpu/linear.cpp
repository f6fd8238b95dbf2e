#include "xl/kernels/cpu/linear.h"

#include "xl/compute/blas.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cpu/product_operands.h"

namespace xl::kernels {
namespace {

class Linear : public torch::autograd::Function<Linear> {
 public:
  // x2 [n, in] contiguous; weight [out, in] with unit column stride; bias [out] or [0] for none
  // (LibTorch 1.13's Function::apply takes no undefined tensors). bf16: the products take operands
  // rounded to bf16 (product_operands.h).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x2,
                               const torch::Tensor& weight, const torch::Tensor& bias, bool bf16) {
    RECORD_FUNCTION("xl::linear", std::vector<c10::IValue>());
    const int64_t n = x2.size(0), in = x2.size(1), out = weight.size(0);
    torch::Tensor y = torch::empty({n, out}, x2.options());
    float beta = 0;
    const bool has_bias = bias.numel() > 0;
    if (has_bias) {  // the bias first, then the product added to it (no clearing pass)
      y.copy_(bias.view({1, out}).expand({n, out}));
      beta = 1;
    }
    const torch::Tensor x_op = product_operand(x2, bf16), w_op = product_operand(weight, bf16);
    operand_gemm(false, true, n, out, in, x_op, in, w_op, w_op.stride(0), beta, y, out);
    ctx->save_for_backward({x_op, w_op});
    ctx->saved_data["bias"] = has_bias;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    RECORD_FUNCTION("xl::linear_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x_op = saved[0], &w_op = saved[1];
    const int64_t n = x_op.size(0), in = x_op.size(1), out = w_op.size(0);
    const torch::Tensor go = g[0].contiguous();
    const bool bf16 = x_op.scalar_type() == torch::kBFloat16;  // the forward's precision
    const torch::Tensor go_op = product_operand(go, bf16);
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) {  // dX = dY W
      dx = torch::empty({n, in}, go.options());
      operand_gemm(false, false, n, in, out, go_op, out, w_op, w_op.stride(0), 0, dx, in);
    }
    if (ctx->needs_input_grad(1)) {  // dW = dY^T X
      dw = torch::empty({out, in}, go.options());
      operand_gemm(true, false, out, in, n, go_op, out, x_op, in, 0, dw, in);
    }
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) db = go.sum(0);
    return {dx, dw, db, torch::Tensor()};
  }
};

bool runs_here(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  auto is_float = [](const torch::Tensor& t) { return t.scalar_type() == torch::kFloat && t.device().is_cpu(); };
  return compute::cpu_kernel_allowed(x) && compute::blas().sgemm && compute::cpu_kernels_take_products() && is_float(x) && is_float(weight) &&
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
  const torch::Tensor x2 = x.reshape({-1, in}).contiguous();
  return Linear::apply(x2, w, b, takes_bf16_operands(x2.size(0))).view(sizes);
}

}  // namespace xl::kernels
