// squared_norms (MGK's |q|^2 and |k|^2) against an explicit loop in double: rows read in place
// from a strided view (the keys beside the values), both output layouts, and the gradient 2 x g.
#include <gtest/gtest.h>

#include "xl/model/kernels/squared_norms.h"

using namespace xl::model;
using torch::Tensor;

TEST(SquaredNorms, MatchAnExplicitLoopInPlaceAndTransposedWithTheirGradient) {
  torch::manual_seed(3);
  const int64_t b = 2, n = 37, h = 3, d = 21;
  // Keys as the projections leave them: [B, N, 2, H, d], the keys at index 0.
  const Tensor buffer = torch::randn({b, n, 2, h, d});
  for (const bool heads_first : {false, true}) {
    SCOPED_TRACE(heads_first ? "[B, H, N]" : "[B, N, H]");
    Tensor leaf = buffer.clone().requires_grad_(true);
    Tensor got = squared_norms(leaf.select(2, 0), heads_first);
    ASSERT_TRUE(got.is_contiguous());
    ASSERT_EQ(got.sizes(), heads_first ? torch::IntArrayRef({b, h, n}) : torch::IntArrayRef({b, n, h}));
    auto v = buffer.accessor<float, 5>();
    auto g_acc = got.accessor<float, 3>();
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < h; ++k) {
          double want = 0;
          for (int64_t e = 0; e < d; ++e) want += double(v[i][j][0][k][e]) * v[i][j][0][k][e];
          const float at = heads_first ? g_acc[i][k][j] : g_acc[i][j][k];
          ASSERT_NEAR(at, want, 1e-5 * want) << i << " " << j << " " << k;
        }
    const Tensor g = torch::randn(got.sizes());
    got.backward(g);
    Tensor want_grad = torch::zeros_like(buffer);
    auto w = want_grad.accessor<float, 5>();
    auto ga = g.accessor<float, 3>();
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < h; ++k)
          for (int64_t e = 0; e < d; ++e)
            w[i][j][0][k][e] = 2 * v[i][j][0][k][e] * (heads_first ? ga[i][k][j] : ga[i][j][k]);
    EXPECT_TRUE(torch::allclose(leaf.grad(), want_grad, 1e-6, 1e-6));
    // Another dtype takes tensor ops: the same values.
    EXPECT_TRUE(torch::allclose(squared_norms(buffer.select(2, 0).to(torch::kFloat64), heads_first),
                                got.detach().to(torch::kFloat64), 1e-5, 1e-5));
  }
}
