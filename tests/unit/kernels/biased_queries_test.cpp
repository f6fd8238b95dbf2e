// The fused q + u, q + v (kernels/biased_queries.h) against the broadcast adds in double precision
// with LibTorch's autograd: both outputs and the gradients of q, u and v, with both outputs used or
// one, and the same bits whatever the thread count.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "xl/kernels/cpu/biased_queries.h"

namespace {

double worst(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / (want.abs().max().item<double>() + 1e-30);
}

struct Result {
  torch::Tensor q_u, q_v, d_q, d_u, d_v;
};

Result run(const torch::Tensor& q0, const torch::Tensor& u0, const torch::Tensor& v0, const torch::Tensor& a,
           const torch::Tensor& b, bool use_v) {
  auto q = q0.clone().requires_grad_(), u = u0.clone().requires_grad_(), v = v0.clone().requires_grad_();
  auto [q_u, q_v] = xl::kernels::biased_queries(q, u, v);
  auto loss = (q_u * a).sum();
  if (use_v) loss = loss + (q_v * b).sum();
  loss.backward();
  return {q_u.detach(), q_v.detach(), q.grad(), u.grad(), v.grad()};
}

TEST(BiasedQueries, MatchesBroadcastAddsInDoubleWithGradients) {
  for (auto shape : {std::vector<int64_t>{2, 5, 3, 4}, std::vector<int64_t>{16, 128, 4, 32}}) {
    for (bool use_v : {true, false}) {
      torch::manual_seed(5);
      const int64_t h = shape[2], dh = shape[3];
      auto q = torch::randn(shape), u = torch::randn({h, dh}), v = torch::randn({h, dh});
      auto a = torch::randn(shape), b = torch::randn(shape);
      at::set_num_threads(2);
      Result got = run(q, u, v, a, b, use_v);

      auto qd = q.to(torch::kDouble).requires_grad_(), ud = u.to(torch::kDouble).requires_grad_(),
           vd = v.to(torch::kDouble).requires_grad_();
      auto qud = qd + ud.view({1, 1, h, dh}), qvd = qd + vd.view({1, 1, h, dh});
      auto loss = (qud * a.to(torch::kDouble)).sum();
      if (use_v) loss = loss + (qvd * b.to(torch::kDouble)).sum();
      loss.backward();
      EXPECT_LT(worst(got.q_u, qud), 1e-7);
      EXPECT_LT(worst(got.q_v, qvd), 1e-7);
      EXPECT_LT(worst(got.d_q, qd.grad()), 1e-6);
      EXPECT_LT(worst(got.d_u, ud.grad()), 1e-6);
      if (use_v) {
        EXPECT_LT(worst(got.d_v, vd.grad()), 1e-6);
      } else {
        EXPECT_EQ(got.d_v.abs().max().item<float>(), 0.0f);
      }

      at::set_num_threads(1);
      Result one = run(q, u, v, a, b, use_v);
      at::set_num_threads(2);
      EXPECT_TRUE(torch::equal(one.d_q, got.d_q) && torch::equal(one.d_u, got.d_u) && torch::equal(one.d_v, got.d_v));
    }
  }
}

}  // namespace
