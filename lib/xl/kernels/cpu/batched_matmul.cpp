#include "xl/kernels/cpu/batched_matmul.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>

#include "xl/compute/blas.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/parallel.h"

namespace xl::kernels {
namespace {

// How BLAS (column-major) reads one matrix of a batch [N, R, C] in place: 'N' with leading dimension
// stride(1) when rows are contiguous, 'T' with stride(2) when columns are.
struct GemmOperand {
  torch::Tensor tensor;  // keeps a contiguous copy alive when one was needed
  char op = 'N';
  int ld = 1;
};

GemmOperand gemm_operand(const torch::Tensor& x) {
  const int64_t r = x.size(1), c = x.size(2);
  if (x.stride(2) == 1 && x.stride(1) >= std::max<int64_t>(1, c)) return {x, 'N', static_cast<int>(x.stride(1))};
  if (x.stride(1) == 1 && x.stride(2) >= std::max<int64_t>(1, r)) return {x, 'T', static_cast<int>(x.stride(2))};
  torch::Tensor y = x.contiguous();
  return {y, 'N', static_cast<int>(std::max<int64_t>(1, c))};
}

bool usable(const torch::Tensor& a, const torch::Tensor& b) {
  const compute::Blas& l = compute::blas();
  return l.sgemm && a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat && compute::cpu_kernel_allowed(a) &&
         b.device().is_cpu() && a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) && a.size(2) == b.size(1) &&
         a.size(0) > 0 && a.numel() > 0 && b.numel() > 0 && a.size(1) < INT32_MAX && b.size(2) < INT32_MAX &&
         a.size(2) < INT32_MAX;
}

// The product itself; the caller has checked usable().
torch::Tensor product(const torch::Tensor& a_in, const torch::Tensor& b_in) {
  RECORD_FUNCTION("xl::batched_matmul", std::vector<c10::IValue>());
  const compute::Blas& l = compute::blas();
  const int64_t n = a_in.size(0);
  const int m = static_cast<int>(a_in.size(1)), k = static_cast<int>(a_in.size(2)), p = static_cast<int>(b_in.size(2));
  GemmOperand a = gemm_operand(a_in), b = gemm_operand(b_in);
  torch::Tensor out = torch::empty({n, m, p}, a_in.options());
  const float* ap = a.tensor.data_ptr<float>();
  const float* bp = b.tensor.data_ptr<float>();
  float* cp = out.data_ptr<float>();
  const int64_t sa = a.tensor.stride(0), sb = b.tensor.stride(0), sc = int64_t{m} * p;
  const float one = 1, zero = 0;
  // Row-major C = A B is column-major C^T = B^T A^T: B is BLAS's first operand.
  auto gemms = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      l.sgemm(&b.op, &a.op, &p, &m, &k, &one, bp + i * sb, &b.ld, ap + i * sa, &a.ld, &zero, cp + i * sc, &p);
  };
  const int threads = at::get_num_threads();
  // Small products only: there the BLAS threads' synchronisation dominates; large ones run as fast
  // on BLAS's threads, without a GEMM buffer per calling thread (which split would cost memory;
  // measured: bench/HISTORY.md, "Code comments' numbers").
  constexpr int64_t kSplitMaxMacs = int64_t{1} << 22;
  if (threads > 1 && n >= threads && l.set_threads && int64_t{m} * p * k <= kSplitMaxMacs) {
    compute::SingleThreadedBlas single;
    compute::parallel_for(0, n, 1, gemms);
  } else {
    gemms(0, n);
  }
  return out;
}

class BatchedMatmul : public torch::autograd::Function<BatchedMatmul> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b) {
    ctx->save_for_backward({a, b});
    return product(a, b);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor& a = saved[0];
    const torch::Tensor& b = saved[1];
    const torch::Tensor& g = grad_out[0];
    torch::Tensor ga, gb;
    if (ctx->needs_input_grad(0)) ga = batched_matmul(g, b.transpose(1, 2));
    if (ctx->needs_input_grad(1)) gb = batched_matmul(a.transpose(1, 2), g);
    return {ga, gb};
  }
};

}  // namespace

torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  if (!usable(a, b)) return torch::bmm(a, b);
  if (torch::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad())) return BatchedMatmul::apply(a, b);
  return product(a, b);
}

}  // namespace xl::kernels
