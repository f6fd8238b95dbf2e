// The projections' parts (kernels/projection_parts.h): views of the projections, and the gradient
// they send back equal to the sum of each used part's gradient written into its place, whichever
// parts are used.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "xl/kernels/cpu/projection_parts.h"

namespace {

TEST(ProjectionParts, ViewsWhoseGradientsLandInTheirPlaces) {
  for (int64_t parts : {2, 4}) {
    // Bit u of `used`: output u (kv, key0, then the extra keys) takes part in the loss.
    const int64_t outputs = parts, all = (1 << outputs) - 1;
    for (int64_t used = 0; used <= all; ++used) {
      torch::manual_seed(11);
      auto proj = torch::randn({2, 5, parts, 3, 4}).requires_grad_();
      xl::kernels::ProjectionParts got = xl::kernels::projection_parts(proj);
      ASSERT_EQ(static_cast<int64_t>(got.extra_keys.size()), parts - 2);
      std::vector<torch::Tensor> out{got.kv, got.key0};
      out.insert(out.end(), got.extra_keys.begin(), got.extra_keys.end());

      // Independently: part p of the expected gradient sums the weights of every used output over it.
      auto want = torch::zeros_like(proj);
      torch::Tensor loss = torch::zeros({});
      for (int64_t o = 0; o < outputs; ++o) {
        const int64_t first = o <= 1 ? 0 : o;  // the part it starts at
        EXPECT_EQ(out[o].data_ptr(), proj[0][0][first].data_ptr()) << "output " << o << " is a view in place";
        EXPECT_TRUE(torch::equal(out[o], o == 0 ? proj.narrow(2, 0, 2) : proj.select(2, first)));
        if (!((used >> o) & 1)) continue;
        auto w = torch::randn(out[o].sizes());
        loss = loss + (out[o] * w).sum();
        if (o == 0) want.narrow(2, 0, 2).add_(w);
        else want.select(2, first).add_(w);
      }
      if (used == 0) continue;  // no output in the loss: nothing to differentiate
      loss.backward();
      ASSERT_TRUE(proj.grad().defined());
      EXPECT_TRUE(torch::equal(proj.grad(), want)) << parts << " parts, used " << used;
    }
  }
}

TEST(ProjectionParts, WithoutAutogradThePartsArePlainViews) {
  auto proj = torch::randn({1, 3, 3, 2, 4});
  xl::kernels::ProjectionParts got = xl::kernels::projection_parts(proj);
  EXPECT_FALSE(got.kv.requires_grad());
  EXPECT_TRUE(torch::equal(got.extra_keys.at(0), proj.select(2, 2)));
  EXPECT_EQ(got.key0.data_ptr(), proj.data_ptr());
}

}  // namespace
