// The model's affine maps y = x W^T + b on the CPU through the library's GEMM choice (blas.h), so
// that the smaller models' products run on the faster library: LibTorch 1.13 sends every
// torch::linear to OpenBLAS, which at the tiny model's shapes (2048 rows, K = 128 to 512) ran
// slower than oneDNN, and tiny training runs faster through here (measured: bench/HISTORY.md,
// "The product rules").
// Differentiable; the input gradient is computed only when the input needs one (the memory's rows
// do not). Under CPU autocast in bf16 where the CPU has bf16 products (from 9 rows of x on:
// takes_bf16_operands), the products take operands rounded to bf16 and sum in fp32, and y stays
// fp32. Other dtypes, devices, other autocast or the generic path forced: torch::linear.
#pragma once
#include <torch/torch.h>

namespace xl::kernels {

// x [..., in], weight [out, in] (rows may be a strided view), bias [out] or undefined.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

}  // namespace xl::kernels
