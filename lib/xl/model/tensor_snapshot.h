// What a result kept from some tensors (a weight copy, projected positional keys) needs in order to
// be reused: the same tensors, holding the same data at the same versions. Versions move with
// in-place ops and with Adam's fused update (which bumps them); new data under the same tensor
// (set_data, as Module::to does) leaves the version as it was, so the data's address counts too.
#pragma once
#include <torch/torch.h>

#include <utility>
#include <vector>

namespace xl::model {

class TensorSnapshot {
 public:
  TensorSnapshot() = default;
  // Holds the tensors, so that their addresses are never another's while kept.
  explicit TensorSnapshot(std::vector<torch::Tensor> tensors);
  // True when `tensors` are the snapshot's, unchanged since it was taken.
  bool unchanged(const std::vector<torch::Tensor>& tensors) const;

 private:
  std::vector<torch::Tensor> tensors_;
  std::vector<std::pair<const void*, int64_t>> state_;  // data and version of each
};

}  // namespace xl::model
