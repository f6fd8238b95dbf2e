#include "xl/model/tensor_snapshot.h"

namespace xl::model {

TensorSnapshot::TensorSnapshot(std::vector<torch::Tensor> tensors) : tensors_(std::move(tensors)) {
  for (const auto& t : tensors_) state_.emplace_back(t.data_ptr(), t._version());
}

bool TensorSnapshot::unchanged(const std::vector<torch::Tensor>& tensors) const {
  if (tensors.size() != tensors_.size()) return false;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i].is_same(tensors_[i]) || tensors[i].data_ptr() != state_[i].first ||
        tensors[i]._version() != state_[i].second)
      return false;
  return true;
}

}  // namespace xl::model
