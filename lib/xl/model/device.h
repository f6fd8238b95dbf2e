// Where a model computes: --device auto|cpu|cuda|cuda:N.
#pragma once
#include <torch/torch.h>

#include <string>

namespace xl::model {

// "auto" (the first GPU when there is one, else the CPU), "cpu", "cuda" or "cuda:N"; 64 on
// anything else and 66 when a GPU is asked for but this build or machine has none.
torch::Device parse_device(const std::string& name);

}  // namespace xl::model
