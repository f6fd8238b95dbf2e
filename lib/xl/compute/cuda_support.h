// What xl knows about the GPUs of the machine, from code that CMake compiles only in a build
// with CUDA (cuda_support_cuda.cpp); a build without CUDA compiles cuda_support_none.cpp instead,
// so the rest of the library has no #ifdef for it.
#pragma once
#include <cstdint>
#include <string>

namespace xl::compute {

// Whether the library was built with CUDA support.
bool built_with_cuda();
// Whether GPU `device` computes in bfloat16 natively (compute capability 8.0 and up).
bool cuda_bf16_native(int device);
// GPU `device`'s name as the driver reports it ("" without CUDA).
std::string cuda_device_name(int device);
// The most bytes LibTorch's caching allocator held for tensors on `device` since the last reset
// (0 without CUDA): the peak device memory of a benchmark.
int64_t cuda_peak_allocated_bytes(int device);
void cuda_reset_peak_allocated_bytes(int device);
// LibTorch's current stream on `device` as a cudaStream_t, for xl's own kernels (nullptr without
// CUDA).
void* cuda_current_stream(int device);

}  // namespace xl::compute
