// Which implementation runs a model operation. Every operation has a device-generic path made of
// LibTorch tensor ops (any device, any dtype; what a GPU runs where no fused kernel applies) and
// some have fused kernels chosen at run time: xl's own (the CPU blocked attention, the CPU dropout,
// the CPU Adam pass, the GPU's flash relative attention) and LibTorch's (the GPU's fused attention
// in bf16/fp16). By default each operation takes the kernel measured fastest for its shape.
// Narrowing the set lets the tests check on a CPU what a GPU would compute, and a GPU benchmark
// time each kernel against the one it replaces. XL_KERNELS in the environment sets it for a whole
// process: "own" (xl's own CUDA kernels wherever they apply; in training only with deterministic
// algorithms off, XL_DETERMINISTIC=0, since the attention backward's sums are atomic), "library"
// (none of them: LibTorch's fused attention) or "generic" (the explicit attention; no fused
// kernels at all).
#pragma once
#include <torch/torch.h>

#include "xl/compute/setting_scope.h"

namespace xl::compute {

enum class KernelSet { kAll, kOwn, kLibrary, kGeneric };

KernelSet kernel_set();
void set_kernel_set(KernelSet set);
inline bool generic_kernels_forced() { return kernel_set() == KernelSet::kGeneric; }

// True when a fused CPU kernel may run on `t`: a CPU tensor and the generic path not forced.
inline bool cpu_kernel_allowed(const torch::Tensor& t) { return t.device().is_cpu() && !generic_kernels_forced(); }

// Narrows the kernel set while alive (tests).
using KernelSetScope = SettingScope<KernelSet, kernel_set, set_kernel_set>;

// The generic path while alive.
class GenericKernels : public KernelSetScope {
 public:
  GenericKernels() : KernelSetScope(KernelSet::kGeneric) {}
};

// What training keeps of each layer's attention for its backward (the CPU's blocked attention): the
// probabilities (the fastest), or nothing, their row blocks computed again in backward (the same
// bits, one more pair of score products per block, much less memory: bench/HISTORY.md). They take
// batch x heads x tgt_len x (mem_len + tgt_len) floats a layer; training's --attention-probs auto
// chooses by that size. Process-wide, as the thread count.
enum class AttentionProbs { kKeep, kRecompute };
void set_attention_probs(AttentionProbs probs);
AttentionProbs attention_probs();

// Sets the choice while alive (tests).
using AttentionProbsScope = SettingScope<AttentionProbs, attention_probs, set_attention_probs>;

}  // namespace xl::compute
