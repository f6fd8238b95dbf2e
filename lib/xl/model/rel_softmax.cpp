#include "xl/model/rel_softmax.h"

#include <ATen/ops/_softmax_backward_data.h>

#include <limits>

namespace xl::model {

torch::Tensor relative_shift_view(const torch::Tensor& bd, int64_t len) {
  const int64_t n = bd.size(0), t = bd.size(1), p = bd.size(2);
  TORCH_CHECK(bd.is_contiguous(), "relative_shift_view needs a contiguous tensor");
  return bd.as_strided({n, t, len}, {t * p, p - 1, 1}, bd.storage_offset() + t - 1);
}

namespace {

// Adjoint of relative_shift_view for the entries that are read unmasked.
torch::Tensor relative_shift_backward(const torch::Tensor& grad, int64_t table) {
  const int64_t n = grad.size(0), t = grad.size(1), len = grad.size(2);
  if (len == table) {
    // Transformer-XL's pad-and-reshape in reverse: an exact inverse map, so every table entry
    // receives the gradient of the one score that read it.
    auto flat = torch::cat({torch::zeros({n, t}, grad.options()), grad.contiguous().view({n, t * len})}, 1);
    return flat.view({n, t, len + 1}).slice(2, 1).contiguous();
  }
  // Memory-only block: the strided map is injective when T >= 2 (len < table), so a copy suffices.
  auto out = torch::zeros({n, t, table}, grad.options());
  out.as_strided({n, t, len}, {t * table, table - 1, 1}, t - 1).copy_(grad);
  return out;
}

class RelativeAttentionProbs : public torch::autograd::Function<RelativeAttentionProbs> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& ac,
                               torch::TensorList bds, const std::vector<KeyBlock>& blocks,
                               const torch::Tensor& mask, double scale) {
    torch::Tensor s = ac * scale;
    for (size_t b = 0; b < blocks.size(); ++b)
      s.narrow(2, blocks[b].col, blocks[b].len).add_(relative_shift_view(bds[b], blocks[b].len), scale);
    if (mask.defined()) s.masked_fill_(mask, -std::numeric_limits<double>::infinity());
    torch::Tensor p = torch::softmax(s, -1);
    ctx->save_for_backward({p});
    std::vector<int64_t> info;
    for (const auto& blk : blocks) info.insert(info.end(), {blk.col, blk.len, blk.table});
    ctx->saved_data["blocks"] = info;
    ctx->saved_data["scale"] = scale;
    return p;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto p = ctx->get_saved_variables()[0];
    double scale = ctx->saved_data["scale"].toDouble();
    auto info = ctx->saved_data["blocks"].toIntVector();
    torch::Tensor gs = at::_softmax_backward_data(grad_out[0].contiguous(), p, -1, p.scalar_type()).mul_(scale);
    torch::autograd::variable_list grads;
    grads.push_back(gs);  // ac
    for (size_t i = 0; i < info.size(); i += 3)
      grads.push_back(relative_shift_backward(gs.narrow(2, info[i], info[i + 1]), info[i + 2]));
    grads.push_back(torch::Tensor());  // blocks
    grads.push_back(torch::Tensor());  // mask
    grads.push_back(torch::Tensor());  // scale
    return grads;
  }
};

}  // namespace

torch::Tensor relative_attention_probs(const torch::Tensor& ac, const std::vector<torch::Tensor>& bds,
                                       const std::vector<KeyBlock>& blocks, const torch::Tensor& mask,
                                       double scale) {
  return RelativeAttentionProbs::apply(ac, torch::TensorList(bds), blocks, mask, scale);
}

}  // namespace xl::model
