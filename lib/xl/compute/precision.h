// Mixed precision (--precision): the matrix products run in bf16 or fp16 through LibTorch's
// autocast, while the parameters and Adam's state (fp32 master weights), the residual stream and
// the memories, layer norm, the attention softmax and the loss stay fp32: the model code upcasts
// those explicitly (upcast()), so the policy does not depend on autocast's per-device op lists.
// fp16 also needs loss scaling (train/loss_scale.h); bf16 does not. On a CPU with AVX-512 BF16
// the fused kernels run autocast's bf16 products themselves, with fp32 results
// (cpu_bf16_products), where autocast's tensor ops would cast every operand and result.
#pragma once
#include <torch/torch.h>

#include <string>

namespace xl::compute {

enum class Precision { kFp32, kBf16, kFp16 };

// "fp32", "bf16" or "fp16"; 64 on anything else.
Precision parse_precision(const std::string& name);
// Whether --precision takes `name`: auto, fp32, bf16 or fp16.
bool is_precision_name(const std::string& name);
std::string to_string(Precision p);
// "auto": fp32 on a CPU, bf16 on a GPU that computes in it natively (compute capability 8.0 and
// up), fp32 on older GPUs; otherwise the named precision. fp16 on a CPU is refused (64): LibTorch's
// CPU autocast computes in bf16 only.
Precision resolve_precision(const std::string& name, const torch::Device& device);

// Whether LibTorch's CPU autocast is on in this thread (an AutocastScope for a CPU device).
bool cpu_autocast_enabled();
// The dtype autocast computes in on `device` in this thread; Undefined when it is off.
at::ScalarType active_autocast_dtype(const torch::Device& device);
// The dtype a matrix product of x gives here: autocast's where it is on, else x's own; fp32 where
// the CPU's kernels take autocast's bf16 products (cpu_bf16_products: fp32 sums and results).
at::ScalarType product_dtype(const torch::Tensor& x);

// Whether a run in precision p on `device` has the CPU's fused kernels run its products in bf16
// themselves: operands rounded to bf16, oneDNN's GEMM on AVX-512 BF16 or AMX (bf16_gemm_native),
// sums and results in fp32. Where they cannot (no such units, the generic path forced), autocast's
// tensor ops run them, with bf16 results.
bool cpu_kernels_run_bf16(Precision p, const torch::Device& device);
// Whether, in this thread, CPU autocast is on in bf16 and the CPU's kernels run its products.
bool cpu_bf16_products();
// Whether the CPU's fused kernels take this thread's products: CPU autocast off (fp32), or
// cpu_bf16_products(). Otherwise autocast's tensor ops must, so that it reaches every product.
bool cpu_kernels_take_products();

// Half and bfloat16 tensors as float; others as they are.
torch::Tensor upcast(const torch::Tensor& x);

// Autocast to the precision's dtype on `device` while alive (nothing for fp32).
class AutocastScope {
 public:
  AutocastScope(Precision p, const torch::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  bool cuda_ = false;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

}  // namespace xl::compute
