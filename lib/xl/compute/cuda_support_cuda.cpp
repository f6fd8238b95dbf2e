// The build with CUDA (see cuda_support.h).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "xl/compute/cuda_support.h"

namespace xl::compute {

bool built_with_cuda() { return true; }

bool cuda_bf16_native(int device) {
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(device);
  return p && p->major >= 8;
}

std::string cuda_device_name(int device) {
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(device);
  return p ? p->name : "";
}

// The statistics' type moved between LibTorch versions (DeviceStats in CUDACachingAllocator, then
// c10::CachingDeviceAllocator); auto and index 0 (StatType::AGGREGATE) read both.
int64_t cuda_peak_allocated_bytes(int device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  return stats.allocated_bytes[0].peak;
}

void cuda_reset_peak_allocated_bytes(int device) { c10::cuda::CUDACachingAllocator::resetPeakStats(device); }

void* cuda_current_stream(int device) { return at::cuda::getCurrentCUDAStream(device).stream(); }

}  // namespace xl::compute
