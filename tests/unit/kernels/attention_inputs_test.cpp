// A layer's fused attention inputs (kernels/attention_inputs.h) against the separate linear maps
// and the concatenation, in double precision with LibTorch's autograd: q, kv and the gradients of
// the segment and of W (the memory's share included), with a memory to project or none, with
// only the keys and values used downstream, and with the queries' biases u and v added (and their
// gradients) or not. Evaluation's form (attention_inputs_into) writes the
// segment's keys and values behind kept ones in a larger buffer, and nothing else. With bf16
// products on a CPU that has them: against double products of the operands rounded to bf16.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "xl/compute/blas.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cpu/attention_inputs.h"

namespace {

double worst(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kDouble) - want).abs().max().item<double>() / (want.abs().max().item<double>() + 1e-30);
}

enum class Memory { kNone, kProjected };
// Which queries the loss reads: none, q (no biases), or with the biases u and v: both of q + u and
// q + v, or only one of them (the other's gradient arrives undefined).
enum class Queries { kUnused, kPlain, kBiased, kContentOnly, kPositionalOnly };

void check(int64_t batch, int64_t t, int64_t m, int64_t d, int64_t q_width, int64_t kv_width, Memory memory,
           Queries queries) {
  SCOPED_TRACE(testing::Message() << "B " << batch << " T " << t << " M " << m << " memory " << int(memory)
                                  << " queries " << int(queries));
  const bool biased = queries != Queries::kUnused && queries != Queries::kPlain;
  torch::manual_seed(3);
  auto x = torch::randn({batch, t, d}), mem = torch::randn({batch, m, d});
  auto w = (torch::randn({q_width + kv_width, d}) * 0.2).requires_grad_();
  auto u = torch::randn({q_width}).requires_grad_(), v = torch::randn({q_width}).requires_grad_();
  auto xg = x.clone().requires_grad_();
  auto got = xl::kernels::attention_inputs(xg, memory == Memory::kProjected ? mem : torch::Tensor(), w, q_width,
                                         biased ? u : torch::Tensor(), biased ? v : torch::Tensor());
  const int64_t keys = (memory == Memory::kNone ? 0 : m) + t;
  ASSERT_EQ(got.q.sizes(), torch::IntArrayRef({batch, t, q_width}));
  ASSERT_EQ(got.kv.sizes(), torch::IntArrayRef({batch, keys, kv_width}));
  ASSERT_EQ(got.q_v.defined(), biased);
  auto gq = torch::randn_like(got.q), gqv = torch::randn_like(got.q), gkv = torch::randn_like(got.kv);
  auto loss = (got.kv * gkv).sum();
  const bool content = queries == Queries::kPlain || queries == Queries::kBiased || queries == Queries::kContentOnly;
  const bool positional = queries == Queries::kBiased || queries == Queries::kPositionalOnly;
  if (content) loss = loss + (got.q * gq).sum();
  if (positional) loss = loss + (got.q_v * gqv).sum();
  loss.backward();

  auto xd = x.to(torch::kDouble).requires_grad_(), wd = w.detach().to(torch::kDouble).requires_grad_();
  auto ud = u.detach().to(torch::kDouble).requires_grad_(), vd = v.detach().to(torch::kDouble).requires_grad_();
  auto qd = torch::matmul(xd, wd.narrow(0, 0, q_width).t());
  auto kvd = torch::matmul(xd, wd.narrow(0, q_width, kv_width).t());
  if (memory == Memory::kProjected)
    kvd = torch::cat({torch::matmul(mem.to(torch::kDouble), wd.narrow(0, q_width, kv_width).t()), kvd}, 1);
  auto q_ud = biased ? qd + ud : qd, q_vd = qd + vd;
  auto lossd = (kvd * gkv.to(torch::kDouble)).sum();
  if (content) lossd = lossd + (q_ud * gq.to(torch::kDouble)).sum();
  if (positional) lossd = lossd + (q_vd * gqv.to(torch::kDouble)).sum();
  lossd.backward();
  EXPECT_LT(worst(got.q, q_ud), 1e-5);
  if (biased) {
    EXPECT_LT(worst(got.q_v, q_vd), 1e-5);
  }
  EXPECT_LT(worst(got.kv, kvd), 1e-5);
  EXPECT_LT(worst(xg.grad(), xd.grad()), 1e-5);
  EXPECT_LT(worst(w.grad(), wd.grad()), 1e-5);
  if (content && biased) {
    EXPECT_LT(worst(u.grad(), ud.grad()), 1e-5);
  }
  if (positional) {
    EXPECT_LT(worst(v.grad(), vd.grad()), 1e-5);
  }
  if (!biased) {
    EXPECT_FALSE(u.grad().defined() || v.grad().defined());
  }
}

TEST(AttentionInputs, MatchesSeparateProjectionsInDoubleWithGradients) {
  at::set_num_threads(2);
  for (Memory memory : {Memory::kProjected, Memory::kNone})
    for (Queries queries : {Queries::kUnused, Queries::kPlain, Queries::kBiased, Queries::kContentOnly,
                            Queries::kPositionalOnly})
      check(3, 5, 4, 16, 8, 16, memory, queries);
  check(3, 5, 1, 16, 8, 16, Memory::kProjected, Queries::kBiased);           // one memory slot
  check(1, 5, 4, 16, 8, 16, Memory::kProjected, Queries::kBiased);           // one sequence
  check(16, 128, 128, 128, 128, 256, Memory::kProjected, Queries::kBiased);  // tiny's shape
  check(2, 64, 96, 64, 64, 192, Memory::kProjected, Queries::kPlain);        // MGK's: three kv parts
}

// Rounded to bf16 and back, in double: what a bf16 product's operand holds.
torch::Tensor rounded(const torch::Tensor& t) { return t.detach().to(torch::kBFloat16).to(torch::kDouble); }

// Under bf16 autocast, from 9 rows of x on, every product takes its operands rounded to bf16 (x,
// the memory, W, and in backward the gradients of the segment's rows, q's summed in float32 first,
// and of the memory's keys and values) and sums them exactly enough to meet double's within 1e-5;
// the biases are added in float32 after the product. Training's form and evaluation's.
void check_bf16(int64_t batch, int64_t t, int64_t m, int64_t d, int64_t q_width, int64_t kv_width) {
  SCOPED_TRACE(testing::Message() << "bf16 B " << batch << " T " << t << " M " << m << " d " << d);
  torch::manual_seed(7);
  auto x = torch::randn({batch, t, d}), mem = torch::randn({batch, m, d});
  auto w = (torch::randn({q_width + kv_width, d}) * 0.2).requires_grad_();
  auto u = torch::randn({q_width}).requires_grad_(), v = torch::randn({q_width}).requires_grad_();
  auto xg = x.clone().requires_grad_();
  xl::kernels::AttentionInputs got, eval;
  {
    xl::compute::AutocastScope autocast(xl::compute::Precision::kBf16, torch::kCPU);
    got = xl::kernels::attention_inputs(xg, mem, w, q_width, u, v);
    torch::NoGradGuard no_grad;
    auto kv = torch::zeros({batch, m + t, kv_width});
    eval = xl::kernels::attention_inputs_into(x, w.detach(), q_width, kv, u.detach(), v.detach());
  }
  // Up to 8 rows of x the products run in fp32 (product_operands.h).
  const bool round = batch * t >= 9;
  auto operand = [&](const torch::Tensor& t) { return round ? rounded(t) : t.detach().to(torch::kDouble); };
  auto gq = torch::randn_like(got.q), gqv = torch::randn_like(got.q), gkv = torch::randn_like(got.kv);
  ((got.q * gq).sum() + (got.q_v * gqv).sum() + (got.kv * gkv).sum()).backward();

  const auto xr = operand(x), wr = operand(w), memr = operand(mem);
  const auto wq = wr.narrow(0, 0, q_width), wkv = wr.narrow(0, q_width, kv_width);
  const auto qd = torch::matmul(xr, wq.t()), kv_seg = torch::matmul(xr, wkv.t());
  const auto kvd = torch::cat({torch::matmul(memr, wkv.t()), kv_seg}, 1);
  EXPECT_EQ(got.q.scalar_type(), torch::kFloat);
  EXPECT_LT(worst(got.q, qd + u.detach().to(torch::kDouble)), 1e-5);
  EXPECT_LT(worst(got.q_v, qd + v.detach().to(torch::kDouble)), 1e-5);
  EXPECT_LT(worst(got.kv, kvd), 1e-5);
  EXPECT_LT(worst(eval.q, qd + u.detach().to(torch::kDouble)), 1e-5);
  EXPECT_LT(worst(eval.q_v, qd + v.detach().to(torch::kDouble)), 1e-5);
  EXPECT_LT(worst(eval.kv.narrow(1, m, t), kv_seg), 1e-5);
  if (round) {  // the rounding is there: against the unrounded operands' products it is bf16's error
    const auto exact_q = torch::matmul(x.to(torch::kDouble), w.detach().to(torch::kDouble).narrow(0, 0, q_width).t());
    EXPECT_GT(worst(got.q - u.detach(), exact_q), 1e-4);
  }

  const auto d_seg = operand(torch::cat({gq + gqv, gkv.narrow(1, m, t)}, -1).reshape({batch * t, -1}));
  const auto d_mem = operand(gkv.narrow(1, 0, m).reshape({batch * m, kv_width}));
  const auto dx = torch::matmul(d_seg, wr).reshape({batch, t, d});
  auto dw = torch::matmul(d_seg.t(), xr.reshape({batch * t, d}));
  dw.narrow(0, q_width, kv_width).add_(torch::matmul(d_mem.t(), memr.reshape({batch * m, d})));
  EXPECT_LT(worst(xg.grad(), dx), 1e-5);
  EXPECT_LT(worst(w.grad(), dw), 1e-5);
  EXPECT_LT(worst(u.grad(), gq.to(torch::kDouble).sum(std::vector<int64_t>{0, 1})), 1e-5);
  EXPECT_LT(worst(v.grad(), gqv.to(torch::kDouble).sum(std::vector<int64_t>{0, 1})), 1e-5);
}

TEST(AttentionInputs, Bf16ProductsRoundTheOperandsAndSumInFloat32) {
  if (!xl::compute::bf16_gemm_native()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 (or no oneDNN): autocast's ops";
  at::set_num_threads(2);
  check_bf16(3, 5, 4, 16, 8, 16);
  check_bf16(16, 128, 128, 128, 128, 256);  // tiny's shape
  check_bf16(2, 4, 6, 16, 8, 16);           // 8 rows: fp32 products
}

// Outside the kernels' reach (float64 here) the biased queries come from biased_queries.
TEST(AttentionInputs, BiasedQueriesOnTheGenericPathMatchTheBroadcastAdds) {
  torch::manual_seed(5);
  auto x = torch::randn({2, 3, 8}, torch::kDouble), w = torch::randn({8 + 16, 8}, torch::kDouble);
  auto u = torch::randn({2, 4}, torch::kDouble), v = torch::randn({2, 4}, torch::kDouble);
  auto got = xl::kernels::attention_inputs(x, torch::Tensor(), w, 8, u, v);
  auto q = torch::matmul(x, w.narrow(0, 0, 8).t());
  EXPECT_TRUE(torch::allclose(got.q, q + u.reshape({8}), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(got.q_v, q + v.reshape({8}), 1e-12, 1e-12));
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
  auto u = torch::randn({q_width}, dtype), v = torch::randn({q_width}, dtype);
  auto got = xl::kernels::attention_inputs_into(x, w, q_width, kv, u, v);
  EXPECT_TRUE(got.kv.is_same(kv));
  auto xd = x.to(torch::kDouble), wd = w.to(torch::kDouble);
  const auto qd = torch::matmul(xd, wd.narrow(0, 0, q_width).t());
  EXPECT_LT(worst(got.q, qd + u.to(torch::kDouble)), 1e-6);
  EXPECT_LT(worst(got.q_v, qd + v.to(torch::kDouble)), 1e-6);
  EXPECT_LT(worst(xl::kernels::attention_inputs_into(x, w, q_width, kv).q, qd), 1e-6);  // no biases: q itself
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
