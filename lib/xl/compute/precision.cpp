#include "xl/compute/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "xl/compute/blas.h"
#include "xl/compute/cuda_support.h"
#include "xl/compute/kernel_choice.h"
#include "xl/util/error.h"

// LibTorch 2.4 made the autocast switches per device type; 1.13 to 2.3 have one per backend.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define XL_AUTOCAST_BY_DEVICE_TYPE 1
#endif

namespace xl::compute {
namespace {

bool autocast_enabled(bool cuda) {
#ifdef XL_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU);
#else
  return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

at::ScalarType autocast_dtype(bool cuda) {
#ifdef XL_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(cuda ? at::kCUDA : at::kCPU);
#else
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
}

void set_autocast(bool cuda, bool enabled, at::ScalarType dtype) {
#ifdef XL_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, dtype);
  at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, enabled);
#else
  if (cuda) {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
}

}  // namespace

bool cpu_autocast_enabled() { return autocast_enabled(false); }

at::ScalarType active_autocast_dtype(const torch::Device& device) {
  const bool cuda = device.is_cuda();
  if (!cuda && !device.is_cpu()) return at::ScalarType::Undefined;
  return autocast_enabled(cuda) ? autocast_dtype(cuda) : at::ScalarType::Undefined;
}

bool cpu_kernels_run_bf16(Precision p, const torch::Device& device) {
  return p == Precision::kBf16 && device.is_cpu() && bf16_gemm_native() && !generic_kernels_forced();
}

bool cpu_bf16_products() {
  return cpu_autocast_enabled() && autocast_dtype(false) == at::kBFloat16 &&
         cpu_kernels_run_bf16(Precision::kBf16, torch::kCPU);
}

bool cpu_kernels_take_products() { return !cpu_autocast_enabled() || cpu_bf16_products(); }

at::ScalarType product_dtype(const torch::Tensor& x) {
  if (x.device().is_cpu() && x.scalar_type() == torch::kFloat && cpu_bf16_products()) return torch::kFloat;
  const at::ScalarType autocast = active_autocast_dtype(x.device());
  return autocast == at::ScalarType::Undefined ? x.scalar_type() : autocast;
}

bool is_precision_name(const std::string& name) {
  return name == "auto" || name == "fp32" || name == "bf16" || name == "fp16";
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  XL_FAIL(kExitUsage, "--precision: '" << name << "' (use auto, fp32, bf16 or fp16)");
}

std::string to_string(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

Precision resolve_precision(const std::string& name, const torch::Device& device) {
  if (name == "auto") {
    if (device.is_cpu()) return Precision::kFp32;
    return cuda_bf16_native(device.has_index() ? device.index() : 0) ? Precision::kBf16 : Precision::kFp32;
  }
  const Precision p = parse_precision(name);
  XL_CHECK(!(p == Precision::kFp16 && device.is_cpu()), kExitUsage,
           "--precision fp16 needs a GPU (LibTorch's CPU autocast computes in bf16 only); use --precision bf16");
  return p;
}

torch::Tensor upcast(const torch::Tensor& x) {
  return x.scalar_type() == torch::kHalf || x.scalar_type() == torch::kBFloat16 ? x.to(torch::kFloat) : x;
}

AutocastScope::AutocastScope(Precision p, const torch::Device& device) {
  if (p == Precision::kFp32) return;
  active_ = true;
  cuda_ = device.is_cuda();
  was_enabled_ = autocast_enabled(cuda_);
  was_dtype_ = autocast_dtype(cuda_);
  set_autocast(cuda_, true, p == Precision::kBf16 ? at::kBFloat16 : at::kHalf);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // The casts of the weights autocast cached live until the outermost region ends.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast(cuda_, was_enabled_, was_dtype_);
}

}  // namespace xl::compute
