// Which implementation runs a model operation. Every operation has a device-generic path made of
// LibTorch tensor ops (any device, any dtype; what a GPU runs where no fused kernel applies) and
// some have fused kernels chosen at run time (the CPU blocked attention, the CPU dropout, the CPU
// Adam pass, the GPU's fused attention in bf16/fp16). Forcing the generic path lets the tests
// check on a CPU what a GPU would compute, and a GPU benchmark time the fused attention against
// the explicit one; XL_KERNELS=generic in the environment forces it for a whole process.
#pragma once
#include <torch/torch.h>

namespace xl::model {

bool generic_kernels_forced();
void force_generic_kernels(bool on);

// True when a fused CPU kernel may run on `t`: a CPU tensor and the generic path not forced.
inline bool cpu_kernel_allowed(const torch::Tensor& t) { return t.device().is_cpu() && !generic_kernels_forced(); }

// Forces the generic path while alive (tests).
class GenericKernels {
 public:
  GenericKernels() : saved_(generic_kernels_forced()) { force_generic_kernels(true); }
  ~GenericKernels() { force_generic_kernels(saved_); }
  GenericKernels(const GenericKernels&) = delete;
  GenericKernels& operator=(const GenericKernels&) = delete;

 private:
  bool saved_;
};

}  // namespace xl::model
