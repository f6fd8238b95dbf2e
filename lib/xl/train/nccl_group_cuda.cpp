// ProcessGroupNCCL in a build with CUDA (see group_communicator.h).
// A CUDA LibTorch has NCCL; not every packaging exports the define its header wants.
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "xl/train/group_communicator.h"

namespace xl::train {

std::unique_ptr<Communicator> connect_nccl(const DistConfig& config, const c10::intrusive_ptr<c10d::Store>& store) {
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group;
  guarded(*store, config, "setting up the NCCL process group", [&] {
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = config.timeout;
    group = c10::make_intrusive<c10d::ProcessGroupNCCL>(group_store(store), config.rank, config.world, options);
  });
  return std::make_unique<GroupCommunicator<c10d::ProcessGroupNCCL>>(config, store, group);
}

}  // namespace xl::train
