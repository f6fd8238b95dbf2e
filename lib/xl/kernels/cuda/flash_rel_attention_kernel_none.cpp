// A build without a CUDA compiler (see flash_rel_attention_kernel.h): no kernel to launch.
#include "xl/kernels/cuda/flash_rel_attention_kernel.h"

namespace xl::kernels::gpu {

bool flash_rel_attention_kernel_built() { return false; }
bool flash_rel_attention_fits(int) { return false; }

const char* launch_flash_rel_attention(const FlashRelAttentionArgs&, Element, void*) {
  return "this build of xl has no CUDA kernels (no CUDA compiler was found)";
}

bool flash_rel_attention_backward_fits(int) { return false; }

const char* launch_flash_rel_attention_backward(const FlashRelAttentionGradArgs&, Element, void*) {
  return "this build of xl has no CUDA kernels (no CUDA compiler was found)";
}

}  // namespace xl::kernels::gpu
