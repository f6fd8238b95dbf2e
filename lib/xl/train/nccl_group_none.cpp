// A build without CUDA has no ProcessGroupNCCL (see group_communicator.h).
#include "xl/train/group_communicator.h"
#include "xl/util/error.h"

namespace xl::train {

std::unique_ptr<Communicator> connect_nccl(const DistConfig&, const c10::intrusive_ptr<c10d::Store>&) {
  XL_FAIL(kExitUnavailable, "this build of xl has no NCCL (use --dist-backend gloo, or build with a CUDA LibTorch)");
}

}  // namespace xl::train
