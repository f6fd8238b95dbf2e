// Where a model computes: --device auto|cpu|cuda|cuda:N.
#pragma once
#include <torch/torch.h>

#include <string>

namespace xl::model {

// "auto" (a GPU when there is one, else the CPU), "cpu", "cuda" or "cuda:N"; 64 on anything else
// and 66 when a GPU is asked for but this build or machine has none. "cuda" and "auto" come back
// with an index, local_rank's GPU (cuda:0 in one process), so that logs, checkpoints and the
// allocator's statistics all name one device.
torch::Device parse_device(const std::string& name, int local_rank = 0);

}  // namespace xl::model
