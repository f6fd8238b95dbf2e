#include "xl/model/kernels/kernel_choice.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace xl::model {
namespace {

std::atomic<bool>& forced() {
  static std::atomic<bool> f{[] {
    const char* v = std::getenv("XL_KERNELS");
    return v && std::strcmp(v, "generic") == 0;
  }()};
  return f;
}

}  // namespace

bool generic_kernels_forced() { return forced().load(); }
void force_generic_kernels(bool on) { forced().store(on); }

}  // namespace xl::model
