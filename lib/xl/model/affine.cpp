#include "xl/model/affine.h"

#include "xl/kernels/cpu/linear.h"

namespace xl::model {

AffineImpl::AffineImpl(int64_t in_features, int64_t out_features, bool with_bias)
    : in_features(in_features), out_features(out_features), with_bias(with_bias) {
  reset();
}

void AffineImpl::reset() {
  weight = register_parameter("weight", torch::empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", torch::empty({out_features}));
}

torch::Tensor AffineImpl::forward(const torch::Tensor& x) { return kernels::linear(x, weight, bias); }

}  // namespace xl::model
