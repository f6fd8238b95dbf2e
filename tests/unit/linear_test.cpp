// The model's affine maps (kernels/linear.h) against LibTorch's own linear in double precision with
// its autograd: outputs and every gradient, with and without a bias, 3-D inputs, a weight that is
// a view into a larger matrix, an input that needs no gradient, and shapes on either side of
// the GEMM library choice (small tiny-model products and a base-model weight gradient).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "xl/model/kernels/kernel_choice.h"
#include "xl/model/kernels/linear.h"

namespace {

double worst(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / (want.abs().max().item<double>() + 1e-30);
}

struct Case {
  std::vector<int64_t> x_shape;
  int64_t out;
  bool bias, input_grad, weight_view;
};

void check(const Case& c) {
  const int64_t in = c.x_shape.back();
  torch::manual_seed(11);
  auto x = torch::randn(c.x_shape);
  // A view into a larger matrix (rows apart by more than a row's length) or a contiguous copy.
  auto big = torch::randn({c.out + 2, in + 5}) * 0.1;
  auto view = big.narrow(0, 1, c.out).narrow(1, 2, in);
  auto w = (c.weight_view ? view : view.contiguous()).detach().requires_grad_();
  auto b = c.bias ? (torch::randn({c.out}) * 0.1).requires_grad_() : torch::Tensor();
  auto xg = x.clone().requires_grad_(c.input_grad);
  auto y = xl::model::linear(xg, w, b);
  auto gy = torch::randn_like(y);
  y.backward(gy);

  auto xd = x.to(torch::kDouble).requires_grad_(c.input_grad);
  auto wd = w.detach().to(torch::kDouble).requires_grad_();
  auto bd = c.bias ? b.detach().to(torch::kDouble).requires_grad_() : torch::Tensor();
  auto yd = torch::linear(xd, wd, bd);
  yd.backward(gy.to(torch::kDouble));

  ASSERT_EQ(y.sizes(), yd.sizes());
  EXPECT_LT(worst(y, yd), 1e-5);
  EXPECT_LT(worst(w.grad(), wd.grad()), 1e-5);
  if (c.bias) {
    EXPECT_LT(worst(b.grad(), bd.grad()), 1e-5);
  }
  if (c.input_grad) {
    EXPECT_LT(worst(xg.grad(), xd.grad()), 1e-5);
  } else {
    EXPECT_FALSE(xg.grad().defined());
  }
}

TEST(Linear, MatchesLibTorchInDoubleWithGradients) {
  at::set_num_threads(2);
  for (const Case& c : {Case{{37, 29}, 23, true, true, false}, Case{{3, 41, 64}, 48, false, true, true},
                        Case{{5, 7, 16}, 9, true, false, true},
                        Case{{2048, 128}, 384, false, true, true},    // tiny's projection: small products
                        Case{{1024, 512}, 2048, true, true, false}})  // base's: a large weight gradient
    check(c);
}

TEST(Linear, TheGenericPathAndTheKernelAgree) {
  torch::manual_seed(5);
  auto x = torch::randn({4, 33, 40});
  auto w = torch::randn({17, 40}), b = torch::randn({17});
  auto fast = xl::model::linear(x, w, b);
  torch::Tensor generic;
  {
    xl::model::GenericKernels force;
    generic = xl::model::linear(x, w, b);
  }
  // Forced generic, it is LibTorch's own linear exactly; the kernel agrees with it within rounding.
  EXPECT_TRUE(torch::equal(generic, torch::linear(x, w, b)));
  EXPECT_LT((fast - generic).abs().max().item<double>(), 1e-4);
}

}  // namespace
