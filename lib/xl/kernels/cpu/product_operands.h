// The operands of the CPU kernels' products in the step's precision: float32 as they are, or, with
// bf16 products (cpu_bf16_products: --precision bf16 on a CPU with them), rounded to bf16 once and
// kept for backward at half the room; sums and results stay float32 either way.
#pragma once
#include <torch/torch.h>

namespace xl::kernels {

// Whether a product over `rows` rows of activations (of queries, in the attention) takes bf16
// operands here: with bf16 products (cpu_bf16_products), from 9 rows on. Up to 8 rows (generation:
// a token per stream) rounding the weight, or a head's keys, took longer than the bf16 product
// saved (measured: bench/HISTORY.md, "Products over few rows"), so those run in float32, as
// precise or more.
bool takes_bf16_operands(int64_t rows);

// t [rows, cols] (float32, unit column stride) as a product's operand: t itself, or with bf16 a
// contiguous bf16 copy rounded on all threads in xl's rounding (blas.h): LibTorch's conversion,
// on one thread, was a large share of the base model's bf16 training step (bench/HISTORY.md,
// "bf16 products in xl's CPU kernels").
torch::Tensor product_operand(const torch::Tensor& t, bool bf16);

// Row-major C = op(A) op(B) + beta C on operands from product_operand (both float32 or both bf16;
// views at an offset are fine), C float32.
void operand_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const torch::Tensor& a, int64_t lda,
                  const torch::Tensor& b, int64_t ldb, float beta, torch::Tensor& c, int64_t ldc);

}  // namespace xl::kernels
