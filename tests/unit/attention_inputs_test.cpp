// A layer's fused attention inputs (kernels/attention_inputs.h) against the separate linear maps
// and the concatenation, in double precision with LibTorch's autograd: q, kv and the gradients of
// the segment and of W (the memory's share included), with a memory to project, a cached one (whole
// or a view of a larger one), none, and with only the keys and values used downstream.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "xl/model/kernels/attention_inputs.h"

namespace {

double worst(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / (want.abs().max().item<double>() + 1e-30);
}

// kCachedView: the cached projections as evaluation keeps them, a view of the memory's newest
// slots in the last step's keys and values (rows strided across the batch).
enum class Memory { kNone, kProjected, kCached, kCachedView };

void check(int64_t batch, int64_t t, int64_t m, int64_t d, int64_t q_width, int64_t kv_width, Memory memory,
           bool use_q) {
  SCOPED_TRACE(testing::Message() << "B " << batch << " T " << t << " M " << m << " memory " << int(memory)
                                  << " q used " << use_q);
  torch::manual_seed(3);
  auto x = torch::randn({batch, t, d}), mem = torch::randn({batch, m, d});
  auto w = (torch::randn({q_width + kv_width, d}) * 0.2).requires_grad_();
  auto cached = memory == Memory::kCachedView ? torch::randn({batch, m + 3, kv_width}).slice(1, 3)
                                              : torch::randn({batch, m, kv_width});
  const bool is_cached = memory == Memory::kCached || memory == Memory::kCachedView;
  auto xg = x.clone().requires_grad_();
  const torch::Tensor none;
  auto got = xl::model::attention_inputs(xg, memory == Memory::kProjected ? mem : none,
                                         is_cached ? cached : none, w, q_width);
  const int64_t keys = (memory == Memory::kNone ? 0 : m) + t;
  ASSERT_EQ(got.q.sizes(), torch::IntArrayRef({batch, t, q_width}));
  ASSERT_EQ(got.kv.sizes(), torch::IntArrayRef({batch, keys, kv_width}));
  auto gq = torch::randn_like(got.q), gkv = torch::randn_like(got.kv);
  auto loss = (got.kv * gkv).sum();
  if (use_q) loss = loss + (got.q * gq).sum();
  loss.backward();

  auto xd = x.to(torch::kDouble).requires_grad_(), wd = w.detach().to(torch::kDouble).requires_grad_();
  auto qd = torch::matmul(xd, wd.narrow(0, 0, q_width).t());
  auto kvd = torch::matmul(xd, wd.narrow(0, q_width, kv_width).t());
  if (memory == Memory::kProjected)
    kvd = torch::cat({torch::matmul(mem.to(torch::kDouble), wd.narrow(0, q_width, kv_width).t()), kvd}, 1);
  if (is_cached) kvd = torch::cat({cached.to(torch::kDouble), kvd}, 1);
  auto lossd = (kvd * gkv.to(torch::kDouble)).sum();
  if (use_q) lossd = lossd + (qd * gq.to(torch::kDouble)).sum();
  lossd.backward();
  EXPECT_LT(worst(got.q, qd), 1e-5);
  EXPECT_LT(worst(got.kv, kvd), 1e-5);
  EXPECT_LT(worst(xg.grad(), xd.grad()), 1e-5);
  EXPECT_LT(worst(w.grad(), wd.grad()), 1e-5);
}

TEST(AttentionInputs, MatchesSeparateProjectionsInDoubleWithGradients) {
  at::set_num_threads(2);
  for (Memory memory : {Memory::kProjected, Memory::kCached, Memory::kCachedView, Memory::kNone})
    for (bool use_q : {true, false}) check(3, 5, 4, 16, 8, 16, memory, use_q);
  check(3, 5, 1, 16, 8, 16, Memory::kCachedView, true);           // one memory slot
  check(1, 5, 4, 16, 8, 16, Memory::kCachedView, true);           // one sequence
  check(16, 128, 128, 128, 128, 256, Memory::kProjected, true);  // tiny's shape
  check(2, 64, 96, 64, 64, 192, Memory::kProjected, true);       // MGK's: three kv parts
}

}  // namespace
