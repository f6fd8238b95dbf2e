// The model's affine maps (kernels/linear.h) against LibTorch's own linear in double precision with
// its autograd: outputs and every gradient, with and without a bias, 3-D inputs, a weight that is
// a view into a larger matrix, an input that needs no gradient, and shapes on either side of
// the GEMM library choice (small tiny-model products and a base-model weight gradient); with bf16
// products on a CPU that has them, against double products of the operands rounded to bf16.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "xl/compute/blas.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cpu/linear.h"

namespace {

double worst(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / (want.abs().max().item<double>() + 1e-30);
}

struct Case {
  std::vector<int64_t> x_shape;
  int64_t out;
  bool bias, input_grad, weight_view;
};

// Rounded to bf16 and back, in double: what a bf16 product's operand holds.
torch::Tensor rounded(const torch::Tensor& t) { return t.detach().to(torch::kBFloat16).to(torch::kDouble); }

void check(const Case& c, bool bf16 = false) {
  const int64_t in = c.x_shape.back();
  torch::manual_seed(11);
  auto x = torch::randn(c.x_shape);
  // A view into a larger matrix (rows apart by more than a row's length) or a contiguous copy.
  auto big = torch::randn({c.out + 2, in + 5}) * 0.1;
  auto view = big.narrow(0, 1, c.out).narrow(1, 2, in);
  auto w = (c.weight_view ? view : view.contiguous()).detach().requires_grad_();
  auto b = c.bias ? (torch::randn({c.out}) * 0.1).requires_grad_() : torch::Tensor();
  auto xg = x.clone().requires_grad_(c.input_grad);
  torch::Tensor y;
  {
    xl::compute::AutocastScope autocast(bf16 ? xl::compute::Precision::kBf16 : xl::compute::Precision::kFp32, torch::kCPU);
    y = xl::kernels::linear(xg, w, b);
  }
  auto gy = torch::randn_like(y);
  y.backward(gy);

  // bf16: every product's operands rounded (the output's gradient too), the sums exact; the bias's
  // gradient is a sum of the unrounded output gradient. Up to 8 rows the products run in fp32
  // (product_operands.h).
  const bool round = bf16 && x.numel() / in >= 9;
  auto operand = [&](const torch::Tensor& t) { return round ? rounded(t) : t.detach().to(torch::kDouble); };
  auto xd = operand(x).requires_grad_(c.input_grad);
  auto wd = operand(w).requires_grad_();
  auto yd = torch::linear(xd, wd);
  yd.backward(operand(gy));
  if (c.bias) yd = yd + b.detach().to(torch::kDouble);

  ASSERT_EQ(y.sizes(), yd.sizes());
  EXPECT_EQ(y.scalar_type(), torch::kFloat);
  EXPECT_LT(worst(y, yd), 1e-5);
  EXPECT_LT(worst(w.grad(), wd.grad()), 1e-5);
  if (round) {  // the rounding is there: against the unrounded operands' products it is bf16's error
    const auto exact = torch::linear(x.to(torch::kDouble), w.detach().to(torch::kDouble));
    EXPECT_GT(worst(y - (c.bias ? b.detach() : torch::zeros({1})), exact), 1e-4);
  }
  if (c.bias) {
    EXPECT_LT(worst(b.grad(), gy.to(torch::kDouble).reshape({-1, c.out}).sum(0)), 1e-5);
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

TEST(Linear, Bf16ProductsRoundTheOperandsAndSumInFloat32) {
  if (!xl::compute::bf16_gemm_native()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 (or no oneDNN): autocast's ops";
  at::set_num_threads(2);
  for (const Case& c : {Case{{37, 29}, 23, true, true, false}, Case{{3, 41, 64}, 48, false, true, true},
                        Case{{5, 7, 16}, 9, true, false, true}, Case{{1024, 512}, 2048, true, true, false},
                        Case{{2, 4, 512}, 2048, true, true, false}})  // 8 rows: fp32 products
    check(c, true);
}

TEST(Linear, TheGenericPathAndTheKernelAgree) {
  torch::manual_seed(5);
  auto x = torch::randn({4, 33, 40});
  auto w = torch::randn({17, 40}), b = torch::randn({17});
  auto fast = xl::kernels::linear(x, w, b);
  torch::Tensor generic;
  {
    xl::compute::GenericKernels force;
    generic = xl::kernels::linear(x, w, b);
  }
  // Forced generic, it is LibTorch's own linear exactly; the kernel agrees with it within rounding.
  EXPECT_TRUE(torch::equal(generic, torch::linear(x, w, b)));
  EXPECT_LT((fast - generic).abs().max().item<double>(), 1e-4);
}

}  // namespace
