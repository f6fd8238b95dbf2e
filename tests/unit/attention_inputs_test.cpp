// A layer's fused attention inputs (kernels/attention_inputs.h) against the separate linear maps
// and the concatenation, in double precision with LibTorch's autograd: q, kv and the gradients of
// the segment and of W (the memory's share included), with a memory to project or none, and with
// only the keys and values used downstream. Evaluation's form (attention_inputs_into) writes the
// segment's keys and values behind kept ones in a larger buffer, and nothing else.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "xl/model/kernels/attention_inputs.h"

namespace {

double worst(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / (want.abs().max().item<double>() + 1e-30);
}

enum class Memory { kNone, kProjected };

void check(int64_t batch, int64_t t, int64_t m, int64_t d, int64_t q_width, int64_t kv_width, Memory memory,
           bool use_q) {
  SCOPED_TRACE(testing::Message() << "B " << batch << " T " << t << " M " << m << " memory " << int(memory)
                                  << " q used " << use_q);
  torch::manual_seed(3);
  auto x = torch::randn({batch, t, d}), mem = torch::randn({batch, m, d});
  auto w = (torch::randn({q_width + kv_width, d}) * 0.2).requires_grad_();
  auto xg = x.clone().requires_grad_();
  auto got = xl::model::attention_inputs(xg, memory == Memory::kProjected ? mem : torch::Tensor(), w, q_width);
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
  for (Memory memory : {Memory::kProjected, Memory::kNone})
    for (bool use_q : {true, false}) check(3, 5, 4, 16, 8, 16, memory, use_q);
  check(3, 5, 1, 16, 8, 16, Memory::kProjected, true);           // one memory slot
  check(1, 5, 4, 16, 8, 16, Memory::kProjected, true);           // one sequence
  check(16, 128, 128, 128, 128, 256, Memory::kProjected, true);  // tiny's shape
  check(2, 64, 96, 64, 64, 192, Memory::kProjected, true);       // MGK's: three kv parts
}

// Kept rows [start, start + m) of each stream in a buffer of `capacity` rows; the segment's t rows
// are written behind them. In float32 (the BLAS kernel) and float64 (LibTorch's products).
void check_into(int64_t batch, int64_t t, int64_t m, int64_t start, int64_t capacity, torch::ScalarType dtype) {
  SCOPED_TRACE(testing::Message() << "B " << batch << " T " << t << " M " << m << " start " << start << " capacity "
                                  << capacity << " " << dtype);
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  const int64_t d = 16, q_width = 8, kv_width = 24;
  auto x = torch::randn({batch, t, d}, dtype), w = torch::randn({q_width + kv_width, d}, dtype) * 0.2;
  auto buffer = torch::randn({batch, capacity, kv_width}, dtype);
  const auto before = buffer.clone();
  auto kv = buffer.narrow(1, start, m + t);
  auto got = xl::model::attention_inputs_into(x, w, q_width, kv);
  EXPECT_TRUE(got.kv.is_same(kv));
  auto xd = x.to(torch::kDouble), wd = w.to(torch::kDouble);
  EXPECT_LT(worst(got.q, torch::matmul(xd, wd.narrow(0, 0, q_width).t())), 1e-6);
  EXPECT_LT(worst(kv.narrow(1, m, t), torch::matmul(xd, wd.narrow(0, q_width, kv_width).t())), 1e-6);
  // Every other row of the buffer is as it was: the kept ones, and the room on either side.
  auto untouched = torch::ones({batch, capacity}, torch::kBool);
  untouched.narrow(1, start + m, t).fill_(false);
  EXPECT_TRUE(torch::equal(buffer.index({untouched}), before.index({untouched})));
}

TEST(AttentionInputs, IntoKeptRowsWritesOnlyTheSegmentsRows) {
  at::set_num_threads(2);
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    check_into(3, 5, 4, 2, 16, dtype);
    check_into(3, 5, 0, 0, 5, dtype);   // no memory yet, no room
    check_into(1, 1, 7, 3, 12, dtype);  // generation: one stream, one token
  }
}

}  // namespace
