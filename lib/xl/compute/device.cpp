#include "xl/compute/device.h"

#include <torch/version.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "xl/compute/cuda_support.h"
#include "xl/util/error.h"

namespace xl::compute {

namespace {

// One GPU per local rank; each rank's only GPU when the launcher gave each its own through
// CUDA_VISIBLE_DEVICES.
torch::Device rank_gpu(int local_rank) {
  const int64_t n = std::max<int64_t>(1, torch::cuda::device_count());
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % n));
}

}  // namespace

bool is_device_name(const std::string& name) {
  if (name == "auto" || name == "cpu" || name == "cuda") return true;
  const std::string index = name.rfind("cuda:", 0) == 0 ? name.substr(5) : "";
  return !index.empty() && index.size() <= 4 && index.find_first_not_of("0123456789") == std::string::npos &&
         (index == "0" || index[0] != '0');
}

torch::Device parse_device(const std::string& name, int local_rank) {
  XL_CHECK(is_device_name(name), kExitUsage, "--device: bad device '" << name << "' (use auto, cpu, cuda or cuda:N)");
  if (name == "auto") return torch::cuda::is_available() ? rank_gpu(local_rank) : torch::Device(torch::kCPU);
  if (name == "cpu") return torch::Device(torch::kCPU);
  XL_CHECK(torch::cuda::is_available(), kExitNoInput,
           "--device " << name << ": "
                       << (built_with_cuda() ? "this machine has no usable GPU"
                                             : "this build of xl has no CUDA (doc/gpu.md: building with CUDA)"));
  const torch::Device d(name);  // cuda or cuda:N
  XL_CHECK(!d.has_index() || d.index() < static_cast<int>(torch::cuda::device_count()), kExitUsage,
           "--device " << name << ": there are only " << torch::cuda::device_count() << " CUDA devices");
  return d.has_index() ? d : rank_gpu(local_rank);
}

bool use_deterministic_kernels(const torch::Device& device) {
  if (!device.is_cuda()) return true;
  const std::string asked = std::getenv("XL_DETERMINISTIC") ? std::getenv("XL_DETERMINISTIC") : "";
  if (asked == "0") return false;
  if (!asked.empty() && asked != "1")
    std::fprintf(stderr, "xl: XL_DETERMINISTIC=%s is not 0 or 1; deterministic GPU kernels stay on\n", asked.c_str());
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  // Deterministic mode in LibTorch 2.2+ also fills every new tensor with NaN, a guard against
  // reading memory nothing wrote. xl reads none (the CUDA tests match the CPU and repeat runs bit
  // for bit with the fill off). The fill is a kernel per new tensor, a large share of a bf16
  // training step (measured: bench/HISTORY.md, "GPU runs", the profile).
  at::globalContext().setDeterministicFillUninitializedMemory(false);
#endif
  return true;
}

}  // namespace xl::compute
