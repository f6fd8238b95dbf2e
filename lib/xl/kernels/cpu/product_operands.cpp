#include "xl/kernels/cpu/product_operands.h"

#include <algorithm>

#include "xl/compute/blas.h"
#include "xl/compute/parallel.h"
#include "xl/compute/precision.h"

namespace xl::kernels {
namespace {

const uint16_t* bf16_bits(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}

}  // namespace

bool takes_bf16_operands(int64_t rows) {
  constexpr int64_t kFewestRows = 9;
  return rows >= kFewestRows && compute::cpu_bf16_products();
}

torch::Tensor product_operand(const torch::Tensor& t, bool bf16) {
  if (!bf16) return t;
  const int64_t rows = t.size(0), cols = t.size(1), ld = t.stride(0);
  torch::Tensor out = torch::empty({rows, cols}, t.options().dtype(torch::kBFloat16));
  const float* in = t.data_ptr<float>();
  auto* to = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  compute::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    compute::round_rows_to_bf16(in + r0 * ld, ld, to + r0 * cols, cols, r1 - r0, cols);
  });
  return out;
}

void operand_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const torch::Tensor& a, int64_t lda,
                  const torch::Tensor& b, int64_t ldb, float beta, torch::Tensor& c, int64_t ldc) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "operand_gemm: the operands differ in precision");
  if (a.scalar_type() == torch::kBFloat16)
    compute::bf16_gemm_row_major(trans_a, trans_b, m, n, k, bf16_bits(a), lda, bf16_bits(b), ldb, beta, c.data_ptr<float>(),
                        ldc);
  else
    compute::sgemm_row_major(trans_a, trans_b, m, n, k, a.data_ptr<float>(), lda, b.data_ptr<float>(), ldb, beta,
                    c.data_ptr<float>(), ldc);
}

}  // namespace xl::kernels
