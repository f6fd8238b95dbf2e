// Named tensors, in order: how checkpoints hold parameters, optimizer moments, generator states
// and memories. Names are dotted ("layers.0.dec_attn.qkv_net.weight").
#pragma once
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace xl::checkpoint {

using TensorList = std::vector<std::pair<std::string, torch::Tensor>>;

// The tensor called `name`, or an undefined tensor.
torch::Tensor find_tensor(const TensorList& list, const std::string& name);

}  // namespace xl::checkpoint
