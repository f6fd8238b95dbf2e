// The loss's log-probability of each row's target (kernels/target_log_softmax.h) against an
// explicit per-row loop in double precision: values and the logits' gradient
// (upstream g[n] times [j == t[n]] - softmax(z[n])[j]), for row lengths on either side of the
// vector width, rows far from 0, masked (-inf) entries and one row per thread or many.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "xl/kernels/cpu/target_log_softmax.h"

namespace {

struct Want {
  std::vector<double> value;
  std::vector<std::vector<double>> grad;
};

Want explicit_loop(const torch::Tensor& z, const torch::Tensor& t, const torch::Tensor& g) {
  auto za = z.to(torch::kDouble).contiguous();
  Want w;
  for (int64_t n = 0; n < z.size(0); ++n) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < z.size(1); ++j) mx = std::max(mx, za[n][j].item<double>());
    for (int64_t j = 0; j < z.size(1); ++j) s += std::exp(za[n][j].item<double>() - mx);
    const double lse = mx + std::log(s);
    const int64_t tn = t[n].item<int64_t>();
    w.value.push_back(za[n][tn].item<double>() - lse);
    std::vector<double> row;
    for (int64_t j = 0; j < z.size(1); ++j)
      row.push_back(g[n].item<double>() * ((j == tn) - std::exp(za[n][j].item<double>() - lse)));
    w.grad.push_back(row);
  }
  return w;
}

// tol: the precision's epsilon times a margin; scores near `offset` carry an absolute rounding
// error that grows with it, and so do their exponentials' arguments.
void check(int64_t rows, int64_t v, torch::ScalarType dtype, double offset, bool masked) {
  const double tol = (dtype == torch::kFloat ? 1.2e-7 : 2.3e-16) * 32 * (1 + std::abs(offset));
  SCOPED_TRACE(::testing::Message() << rows << " x " << v << " " << dtype);
  torch::manual_seed(rows * 1000 + v);
  auto z = (torch::randn({rows, v}, torch::kDouble) * 3 + offset).to(dtype);
  auto t = torch::randint(v, {rows}, torch::kLong);
  if (masked && v > 2) {  // a masked entry in every row, never the target
    for (int64_t n = 0; n < rows; ++n) z[n][(t[n].item<int64_t>() + 1) % v] = -INFINITY;
  }
  auto zg = z.clone().requires_grad_();
  auto out = xl::kernels::target_log_softmax(zg, t);
  auto g = torch::randn({rows}, torch::kDouble).to(dtype);
  out.backward(g);
  const Want want = explicit_loop(z, t, g);
  ASSERT_EQ(out.scalar_type(), dtype);
  for (int64_t n = 0; n < rows; ++n) {
    EXPECT_NEAR(out[n].item<double>(), want.value[n], tol * (1 + std::abs(want.value[n])));
    for (int64_t j = 0; j < v; ++j) EXPECT_NEAR(zg.grad()[n][j].item<double>(), want.grad[n][j], tol);
  }
}

TEST(TargetLogSoftmax, MatchesAnExplicitLoopInFloatAndDouble) {
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    check(1, 1, dtype, 0, false);
    check(3, 7, dtype, 0, false);
    check(5, 8, dtype, 0, true);
    check(4, 37, dtype, 500, true);  // exp of unshifted scores would overflow
    check(64, 203, dtype, -80, false);
    check(2, 5000, dtype, 0, true);  // rows longer than a parallel task
  }
}

TEST(TargetLogSoftmax, OnAWordSizedRowIsAsCloseToDoubleAsLibTorchsFloatLogSoftmax) {
  torch::manual_seed(3);
  auto z = (torch::randn({6, 40000}) * 4).requires_grad_();
  auto t = torch::randint(40000, {6}, torch::kLong);
  auto got = xl::kernels::target_log_softmax(z, t);
  got.sum().backward();
  auto zf = z.detach().clone().requires_grad_();  // LibTorch's own float path
  auto theirs = torch::log_softmax(zf, -1).gather(1, t.unsqueeze(1)).squeeze(1);
  theirs.sum().backward();
  auto zd = z.detach().to(torch::kDouble).requires_grad_();
  auto want = torch::log_softmax(zd, -1).gather(1, t.unsqueeze(1)).squeeze(1);
  want.sum().backward();
  auto err = [](const torch::Tensor& a, const torch::Tensor& b) { return (a.to(torch::kDouble) - b).abs().max().item<double>(); };
  EXPECT_LE(err(got, want), 2 * err(theirs, want) + 1e-6);
  EXPECT_LE(err(z.grad(), zd.grad()), 2 * err(zf.grad(), zd.grad()) + 1e-8);
}

TEST(TargetLogSoftmax, RefusesATargetOutsideTheRow) {
  auto z = torch::randn({2, 5});
  EXPECT_THROW(xl::kernels::target_log_softmax(z, torch::tensor({1, 5}, torch::kLong)), c10::Error);
  EXPECT_THROW(xl::kernels::target_log_softmax(z, torch::tensor({-1, 0}, torch::kLong)), c10::Error);
}

}  // namespace
