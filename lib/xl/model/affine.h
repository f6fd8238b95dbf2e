// A linear layer y = x W^T + b whose tensors are allocated but never filled. LibTorch's Linear
// draws kaiming-uniform weights in its constructor, which xl always overwrites: TransformerXL draws
// its own (reset_parameters), and a model about to be loaded has every tensor read into it. Left
// untouched, such a model holds no memory until its tensors are read (an import builds one for its
// names and shapes alone), and building it draws nothing. Names follow torch::nn::Linear: weight
// [out, in], bias [out].
#pragma once
#include <torch/torch.h>

namespace xl::model {

class AffineImpl : public torch::nn::Cloneable<AffineImpl> {
 public:
  AffineImpl(int64_t in_features, int64_t out_features, bool with_bias = true);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);  // through xl::model::linear (kernels/linear.h)
  int64_t in_features, out_features;
  bool with_bias;
  torch::Tensor weight, bias;
};
TORCH_MODULE(Affine);

}  // namespace xl::model
