// The build without CUDA (see cuda_support.h).
#include "xl/compute/cuda_support.h"

namespace xl::compute {

bool built_with_cuda() { return false; }
bool cuda_bf16_native(int) { return false; }
std::string cuda_device_name(int) { return ""; }
int64_t cuda_peak_allocated_bytes(int) { return 0; }
void cuda_reset_peak_allocated_bytes(int) {}
void* cuda_current_stream(int) { return nullptr; }

}  // namespace xl::compute
