// The post-LN sublayers' end, layer_norm(residual + dropout(x)) (kernels/dropout_add_layer_norm.h),
// the feed-forward's dropout(relu(x W^T + b)) (kernels/fused_dropout.h) and the counter-based mask
// beneath them (kernels/dropout_mask.h), against explicit computations:
// the mask element by element from the hash that defines it and the key drawn from the seeded
// generator, LibTorch's own layer_norm and autograd on that independently masked sum, for rows that
// straddle the mask's 4,096-element blocks, widths on either side of the vector width, float and
// double, training, evaluation and no-gradient calls, one thread or two.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstdint>
#include <mutex>

#include "xl/kernels/cpu/dropout_add_layer_norm.h"
#include "xl/kernels/cpu/dropout_mask.h"
#include "xl/kernels/cpu/fused_dropout.h"

namespace {

uint32_t lowbias32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Whether element e survives the key (k0, k1, threshold), as dropout_mask.h defines it.
bool kept(uint64_t e, uint32_t k0, uint32_t k1, uint32_t threshold) {
  const uint32_t hi = k1 ^ (static_cast<uint32_t>(e >> 32) * 0x9E3779B9U);
  return lowbias32(lowbias32(static_cast<uint32_t>(e) ^ k0) ^ hi) >= threshold;
}

// The mask [n] (scale where kept, 0 elsewhere) of the next dropout call after `seed`: one 64-bit
// draw from the default CPU generator is that call's key.
torch::Tensor next_mask(uint64_t seed, int64_t n, double p) {
  torch::manual_seed(seed);
  auto gen = at::detail::getDefaultCPUGenerator();
  uint64_t draw;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    draw = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
  }
  torch::manual_seed(seed);
  const auto threshold = static_cast<uint32_t>(std::llround(std::ldexp(p, 32)));
  torch::Tensor m = torch::empty({n}, torch::kDouble);
  auto a = m.accessor<double, 1>();
  for (int64_t e = 0; e < n; ++e)
    a[e] = kept(static_cast<uint64_t>(e), static_cast<uint32_t>(draw), static_cast<uint32_t>(draw >> 32), threshold)
               ? 1.0 / (1.0 - p)
               : 0.0;
  return m;
}

TEST(DropoutMask, AnySpanOfACallMatchesTheHashElementByElement) {
  const double p = 0.3;
  const int64_t n = 3 * 4096 + 777;
  const torch::Tensor want = next_mask(7, n, p);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    torch::manual_seed(7);
    const auto key = xl::kernels::dropout_mask::draw(p);
    torch::Tensor x = torch::randn({n}, torch::kDouble).to(dtype), r = torch::randn({n}, torch::kDouble).to(dtype);
    torch::Tensor scaled = torch::empty_like(x), relu = torch::empty_like(x), added = torch::empty_like(x);
    torch::Tensor biased = torch::empty_like(x);
    // Spans that start and end anywhere: inside blocks, on their edges, one element long.
    const std::vector<int64_t> cuts{0, 1, 100, 4095, 4096, 4097, 5000, 8191, 8200, 12000, 12287, n};
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const int64_t e0 = cuts[c], len = cuts[c + 1] - cuts[c];
      using xl::kernels::dropout_mask::Op;
      if (dtype == torch::kFloat) {
        const float *xp = x.data_ptr<float>() + e0, *rp = r.data_ptr<float>() + e0;
        const float s = static_cast<float>(1.0 / (1.0 - p));
        xl::kernels::dropout_mask::apply(xp, nullptr, scaled.data_ptr<float>() + e0, len, e0, key, s, Op::scale);
        xl::kernels::dropout_mask::apply(xp, nullptr, relu.data_ptr<float>() + e0, len, e0, key, s, Op::relu_scale);
        xl::kernels::dropout_mask::apply(xp, rp, added.data_ptr<float>() + e0, len, e0, key, s, Op::add);
        xl::kernels::dropout_mask::apply(xp, rp, biased.data_ptr<float>() + e0, len, e0, key, s, Op::bias_relu_scale);
      } else {
        const double *xp = x.data_ptr<double>() + e0, *rp = r.data_ptr<double>() + e0;
        const double s = 1.0 / (1.0 - p);
        xl::kernels::dropout_mask::apply(xp, nullptr, scaled.data_ptr<double>() + e0, len, e0, key, s, Op::scale);
        xl::kernels::dropout_mask::apply(xp, nullptr, relu.data_ptr<double>() + e0, len, e0, key, s, Op::relu_scale);
        xl::kernels::dropout_mask::apply(xp, rp, added.data_ptr<double>() + e0, len, e0, key, s, Op::add);
        xl::kernels::dropout_mask::apply(xp, rp, biased.data_ptr<double>() + e0, len, e0, key, s, Op::bias_relu_scale);
      }
    }
    const torch::Tensor xd = x.to(torch::kDouble), rd = r.to(torch::kDouble);
    const double tol = dtype == torch::kFloat ? 1e-6 : 1e-15;
    EXPECT_TRUE(torch::allclose(scaled.to(torch::kDouble), xd * want, tol, tol)) << dtype;
    EXPECT_TRUE(torch::allclose(relu.to(torch::kDouble), xd.relu() * want, tol, tol)) << dtype;
    EXPECT_TRUE(torch::allclose(added.to(torch::kDouble), rd + xd * want, tol, tol)) << dtype;
    EXPECT_TRUE(torch::allclose(biased.to(torch::kDouble), (xd + rd).relu() * want, tol, tol)) << dtype;
    const double kept_share = (want > 0).to(torch::kDouble).mean().item<double>();
    EXPECT_NEAR(kept_share, 1 - p, 0.02);
  }
}

// Against relu(x W^T + b) times the mask from the hash, and LibTorch's autograd of that in double,
// with the bias (the CPU kernel adds it in the mask's pass and sums its gradient there) and
// without.
TEST(LinearReluDropout, MatchesTheMaskedReluAndItsGradients) {
  const double p = 0.25;
  const int64_t rows = 45, in = 7, d = 300;  // 13,500 outputs: four mask blocks; rows end off the vector width
  const uint64_t seed = 9;
  const torch::Tensor mask = next_mask(seed, rows * d, p).view({rows, d});
  for (bool with_bias : {true, false}) {
    for (auto dtype : {torch::kFloat, torch::kDouble}) {
      SCOPED_TRACE(::testing::Message() << dtype << (with_bias ? " with bias" : " without bias"));
      torch::manual_seed(3);
      const torch::Tensor x = torch::randn({rows, in}, torch::kDouble), w = torch::randn({d, in}, torch::kDouble);
      const torch::Tensor b = torch::randn({d}, torch::kDouble), g = torch::randn({rows, d}, torch::kDouble);
      torch::Tensor xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_(), br = b.clone().requires_grad_();
      const torch::Tensor want = torch::relu(torch::matmul(xr, wr.t()) + (with_bias ? br : br * 0)) * mask;
      want.backward(g);
      torch::Tensor xf = x.to(dtype).requires_grad_(), wf = w.to(dtype).requires_grad_();
      torch::Tensor bf = b.to(dtype).requires_grad_();
      torch::manual_seed(seed);
      const torch::Tensor got = xl::kernels::linear_relu_dropout(xf, wf, with_bias ? bf : torch::Tensor(), p, true);
      got.backward(g.to(dtype));
      const double tol = dtype == torch::kFloat ? 1e-5 : 1e-13;
      ASSERT_EQ(got.scalar_type(), dtype);
      EXPECT_LE((got.to(torch::kDouble) - want.detach()).abs().max().item<double>(), tol);
      EXPECT_LE((xf.grad().to(torch::kDouble) - xr.grad()).abs().max().item<double>(), tol * 10);
      EXPECT_LE((wf.grad().to(torch::kDouble) - wr.grad()).abs().max().item<double>(), tol * 10);
      if (with_bias) {
        EXPECT_LE((bf.grad().to(torch::kDouble) - br.grad()).abs().max().item<double>(), tol * 10);
      } else {
        EXPECT_FALSE(bf.grad().defined());
      }
      EXPECT_GT((got == 0).to(torch::kDouble).mean().item<double>(), p);  // dropped and cut by the ReLU
    }
  }
}

struct Result {
  torch::Tensor y, dx, dr, dw, db;
};

// The fused operation, or (reference) LibTorch's layer_norm over r + x * mask with LibTorch's
// autograd; mask: the call's dropout mask, ones when none.
Result run(const torch::Tensor& x0, const torch::Tensor& r0, const torch::Tensor& w0, const torch::Tensor& b0,
           const torch::Tensor& g, double p, bool train, uint64_t seed, const torch::Tensor* mask) {
  torch::Tensor x = x0.clone().requires_grad_(), r = r0.clone().requires_grad_();
  torch::Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  torch::Tensor y;
  const int64_t d = x.size(-1);
  if (mask) {
    y = torch::layer_norm(r + x * mask->view(x.sizes()).to(x.scalar_type()), {d}, w, b, 1e-5);
  } else {
    torch::manual_seed(seed);
    y = xl::kernels::dropout_add_layer_norm(x, r, p, train, w, b, 1e-5);
  }
  y.backward(g);
  return {y.detach(), x.grad(), r.grad(), w.grad(), b.grad()};
}

void check(std::vector<int64_t> shape, torch::ScalarType dtype, double p, bool train) {
  SCOPED_TRACE(::testing::Message() << torch::IntArrayRef(shape) << " " << dtype << " p " << p << " train " << train);
  torch::manual_seed(11 + shape.back());
  const int64_t d = shape.back();
  // A residual stream far from zero mean, as deep layers' are.
  torch::Tensor x = torch::randn(shape, torch::kDouble).to(dtype);
  torch::Tensor r = (torch::randn(shape, torch::kDouble) * 2 + 3).to(dtype);
  torch::Tensor w = (torch::rand({d}, torch::kDouble) + 0.5).to(dtype), b = torch::randn({d}, torch::kDouble).to(dtype);
  torch::Tensor g = torch::randn(shape, torch::kDouble).to(dtype);
  const uint64_t seed = 5;
  const bool drop = train && p > 0;
  const torch::Tensor mask = drop ? next_mask(seed, x.numel(), p) : torch::ones({x.numel()}, torch::kDouble);
  const Result got = run(x, r, w, b, g, p, train, seed, nullptr);
  const Result want = run(x.to(torch::kDouble), r.to(torch::kDouble), w.to(torch::kDouble), b.to(torch::kDouble),
                          g.to(torch::kDouble), p, train, seed, &mask);
  const double tol = dtype == torch::kFloat ? 2e-5 : 1e-12;
  auto near = [&](const torch::Tensor& a, const torch::Tensor& e, const char* what) {
    ASSERT_EQ(a.scalar_type(), dtype) << what;
    const double err = (a.to(torch::kDouble) - e).abs().max().item<double>();
    const double size = e.abs().max().item<double>();
    EXPECT_LE(err, tol * (1 + size)) << what;
  };
  near(got.y, want.y, "y");
  near(got.dx, want.dx, "x's gradient");
  near(got.dr, want.dr, "the residual's gradient");
  near(got.dw, want.dw, "the weight's gradient");
  near(got.db, want.db, "the bias's gradient");
  // Without gradients nothing is kept for backward; the values are the same.
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  const torch::Tensor y = xl::kernels::dropout_add_layer_norm(x, r, p, train, w, b, 1e-5);
  EXPECT_TRUE(torch::equal(y, got.y));
}

TEST(DropoutAddLayerNorm, MatchesLibTorchsLayerNormOfTheMaskedSum) {
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    check({3, 37, 130}, dtype, 0.3, true);  // rows straddle the mask's blocks
    check({2, 64, 128}, dtype, 0.1, true);
    check({5, 7}, dtype, 0.5, true);  // narrower than a vector
    check({2, 64, 128}, dtype, 0.1, false);
    check({4, 33, 624}, dtype, 0.0, true);
  }
}

TEST(DropoutAddLayerNorm, GradientsAreTheSameBitsOnOneThreadAndTwo) {
  const int saved = torch::get_num_threads();
  torch::manual_seed(3);
  torch::Tensor x = torch::randn({8, 100, 256}), r = torch::randn({8, 100, 256});
  torch::Tensor w = torch::rand({256}) + 0.5, b = torch::randn({256}), g = torch::randn({8, 100, 256});
  std::vector<Result> results;
  for (int threads : {1, 2}) {
    torch::set_num_threads(threads);
    results.push_back(run(x, r, w, b, g, 0.1, true, 9, nullptr));
  }
  torch::set_num_threads(saved);
  EXPECT_TRUE(torch::equal(results[0].y, results[1].y));
  EXPECT_TRUE(torch::equal(results[0].dx, results[1].dx));
  EXPECT_TRUE(torch::equal(results[0].dw, results[1].dw));
  EXPECT_TRUE(torch::equal(results[0].db, results[1].db));
}

}  // namespace
