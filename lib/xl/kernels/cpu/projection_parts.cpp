#include "xl/kernels/cpu/projection_parts.h"

#include <ATen/record_function.h>

namespace xl::kernels {
namespace {

// Outputs kv, key0, then each extra key: views of the input.
torch::autograd::variable_list views_of(const torch::Tensor& proj) {
  torch::autograd::variable_list out{proj.narrow(2, 0, 2), proj.select(2, 0)};
  for (int64_t p = 2; p < proj.size(2); ++p) out.push_back(proj.select(2, p));
  return out;
}

class Parts : public torch::autograd::Function<Parts> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& proj) {
    ctx->saved_data["sizes"] = proj.sizes().vec();
    return views_of(proj);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("xl::projection_parts_backward", std::vector<c10::IValue>());
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const torch::Tensor* any = nullptr;
    for (const auto& g : grads)
      if (g.defined()) any = &g;
    if (any == nullptr) return {torch::Tensor()};
    if (sizes[2] == 2 && any == &grads[0]) return {grads[0]};  // keys and values alone: nothing to add
    // Each part written once (zeros where no view had a gradient), key0's added onto part 0.
    torch::Tensor d = torch::empty(sizes, any->options());
    if (grads[0].defined()) d.narrow(2, 0, 2).copy_(grads[0]);
    else d.narrow(2, 0, 2).zero_();
    if (grads[1].defined()) d.select(2, 0).add_(grads[1]);
    for (int64_t p = 2; p < sizes[2]; ++p) {
      const torch::Tensor& g = grads[static_cast<size_t>(p)];
      if (g.defined()) d.select(2, p).copy_(g);
      else d.select(2, p).zero_();
    }
    return {d};
  }
};

}  // namespace

ProjectionParts projection_parts(const torch::Tensor& proj) {
  TORCH_CHECK(proj.dim() == 5 && proj.size(2) >= 2, "projections must be [B, K, parts >= 2, H, dh]");
  const torch::autograd::variable_list v = proj.requires_grad() ? Parts::apply(proj) : views_of(proj);
  return {v[0], v[1], {v.begin() + 2, v.end()}};
}

}  // namespace xl::kernels
