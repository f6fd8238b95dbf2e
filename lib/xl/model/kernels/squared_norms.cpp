#include "xl/model/kernels/squared_norms.h"

#include "xl/model/kernels/kernel_choice.h"
#include "xl/model/kernels/parallel.h"
#include "xl/model/kernels/row_kernels.h"

namespace xl::model {
namespace {

class SquaredNorms : public torch::autograd::Function<SquaredNorms> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, bool heads_first) {
    const int64_t b = x.size(0), n = x.size(1), h = x.size(2), d = x.size(3);
    torch::Tensor out = torch::empty(heads_first ? std::vector<int64_t>{b, h, n} : std::vector<int64_t>{b, n, h},
                                     x.options());
    const float* xp = x.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const int64_t sb = x.stride(0), sn = x.stride(1), sh = x.stride(2);
    if (heads_first) {  // each stream's head: n vectors sn apart
      parallel_for(0, b * h, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) rows::squared_lengths(xp + (p / h) * sb + (p % h) * sh, sn, n, op + p * n, d);
      });
    } else {  // each row: h vectors sh apart
      parallel_for(0, b * n, 256, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) rows::squared_lengths(xp + (r / n) * sb + (r % n) * sn, sh, h, op + r * h, d);
      });
    }
    ctx->save_for_backward({x});
    ctx->saved_data["heads_first"] = heads_first;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    torch::Tensor go = g[0];
    if (ctx->saved_data["heads_first"].toBool()) go = go.transpose(1, 2);  // [B, N, H]
    return {2 * x * go.unsqueeze(3), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor squared_norms(const torch::Tensor& x, bool heads_first) {
  TORCH_CHECK(x.dim() == 4, "squared_norms: x must be [B, N, H, d]");
  if (!cpu_kernel_allowed(x) || x.scalar_type() != torch::kFloat || x.stride(3) != 1 || x.numel() == 0) {
    torch::Tensor s = (x * x).sum(3);
    return heads_first ? s.transpose(1, 2).contiguous() : s;
  }
  return SquaredNorms::apply(x, heads_first);
}

}  // namespace xl::model
