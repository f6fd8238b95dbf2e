#include "xl/model/kernels/linear.h"

#include "xl/model/kernels/blas.h"
#include "xl/model/kernels/kernel_choice.h"
#include "xl/model/kernels/parallel.h"
#include "xl/model/precision.h"

namespace xl::model {
namespace {

const float* floats(const torch::Tensor& t) { return t.data_ptr<float>(); }
float* floats(torch::Tensor& t) { return t.data_ptr<float>(); }
const uint16_t* bf16_bits(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}

// t [rows, cols] with unit column stride, rounded to bf16 (contiguous) on all threads, in xl's
// rounding (blas.h): LibTorch's conversion took 9% of the base model's bf16 training step.
torch::Tensor rounded_to_bf16(const torch::Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1), ld = t.stride(0);
  torch::Tensor out = torch::empty({rows, cols}, t.options().dtype(torch::kBFloat16));
  const float* in = floats(t);
  auto* to = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    round_rows_to_bf16(in + r0 * ld, ld, to + r0 * cols, cols, r1 - r0, cols);
  });
  return out;
}

// Row-major C = op(A) op(B) + beta C in the operands' precision: fp32 or bf16 (fp32 sums).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const torch::Tensor& a, int64_t lda,
          const torch::Tensor& b, int64_t ldb, float beta, torch::Tensor& c, int64_t ldc) {
  if (a.scalar_type() == torch::kBFloat16)
    bf16_gemm_row_major(trans_a, trans_b, m, n, k, bf16_bits(a), lda, bf16_bits(b), ldb, beta, floats(c), ldc);
  else
    sgemm_row_major(trans_a, trans_b, m, n, k, floats(a), lda, floats(b), ldb, beta, floats(c), ldc);
}

class Linear : public torch::autograd::Function<Linear> {
 public:
  // x2 [n, in] contiguous; weight [out, in] with unit column stride; bias [out] or [0] for none
  // (LibTorch 1.13's Function::apply takes no undefined tensors). bf16: the products take operands
  // rounded to bf16 (cpu_bf16_products), kept for backward at half the room.
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
    const torch::Tensor x_op = bf16 ? rounded_to_bf16(x2) : x2;
    const torch::Tensor w_op = bf16 ? rounded_to_bf16(weight) : weight;
    gemm(false, true, n, out, in, x_op, in, w_op, w_op.stride(0), beta, y, out);
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
    const torch::Tensor go_op = bf16 ? rounded_to_bf16(go) : go;
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) {  // dX = dY W
      dx = torch::empty({n, in}, go.options());
      gemm(false, false, n, in, out, go_op, out, w_op, w_op.stride(0), 0, dx, in);
    }
    if (ctx->needs_input_grad(1)) {  // dW = dY^T X
      dw = torch::empty({out, in}, go.options());
      gemm(true, false, out, in, n, go_op, out, x_op, in, 0, dw, in);
    }
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) db = go.sum(0);
    return {dx, dw, db, torch::Tensor()};
  }
};

bool runs_here(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  auto is_float = [](const torch::Tensor& t) { return t.scalar_type() == torch::kFloat && t.device().is_cpu(); };
  return cpu_kernel_allowed(x) && blas().sgemm && cpu_kernels_take_products() && is_float(x) && is_float(weight) &&
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
  return Linear::apply(x.reshape({-1, in}).contiguous(), w, b, cpu_bf16_products()).view(sizes);
}

}  // namespace xl::model
