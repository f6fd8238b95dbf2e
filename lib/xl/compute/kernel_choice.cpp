#include "xl/compute/kernel_choice.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace xl::compute {
namespace {

std::atomic<KernelSet>& current() {
  static std::atomic<KernelSet> set{[] {
    const char* v = std::getenv("XL_KERNELS");
    if (v && std::strcmp(v, "generic") == 0) return KernelSet::kGeneric;
    if (v && std::strcmp(v, "library") == 0) return KernelSet::kLibrary;
    if (v && std::strcmp(v, "own") == 0) return KernelSet::kOwn;
    return KernelSet::kAll;
  }()};
  return set;
}

}  // namespace

KernelSet kernel_set() { return current().load(); }
void set_kernel_set(KernelSet set) { current().store(set); }

namespace {
std::atomic<AttentionProbs> g_attention_probs{AttentionProbs::kKeep};
}  // namespace

void set_attention_probs(AttentionProbs probs) { g_attention_probs = probs; }
AttentionProbs attention_probs() { return g_attention_probs; }

}  // namespace xl::compute
