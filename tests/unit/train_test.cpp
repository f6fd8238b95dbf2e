// Batching, learning-rate schedules and Adam of the trainer.
#include <gtest/gtest.h>

#include <cmath>

#include "xl/train/adam.h"
#include "xl/train/batcher.h"
#include "xl/train/lr_schedule.h"
#include "xl/train/train_config.h"
#include "xl/train/train_options.h"
#include "xl/util/error.h"

using namespace xl::train;

TEST(Batcher, StreamsSegmentsAndAnExactCursor) {
  std::vector<int32_t> ids(103);
  for (int i = 0; i < 103; ++i) ids[i] = i;
  StreamBatcher b(ids, 4, 10);  // 4 streams of 25 (3 tokens dropped)
  EXPECT_EQ(b.stream_length(), 25);
  EXPECT_EQ(b.tokens_per_epoch(), 4 * 24);
  Cursor c;
  auto s = b.next(&c);
  EXPECT_TRUE(s.new_epoch);
  EXPECT_EQ(s.input.sizes(), (std::vector<int64_t>{4, 10}));
  EXPECT_EQ(s.input[1][0].item<int64_t>(), 25);  // stream 1 starts at token 25
  EXPECT_EQ(s.target[1][0].item<int64_t>(), 26);
  s = b.next(&c);
  EXPECT_FALSE(s.new_epoch);
  EXPECT_EQ(s.input[0][0].item<int64_t>(), 10);
  s = b.next(&c);  // the last, partial segment: 4 inputs (positions 20..23), targets to 24
  EXPECT_EQ(s.input.size(1), 4);
  EXPECT_EQ(s.target[3][3].item<int64_t>(), 99);
  EXPECT_EQ(c.offset, 24);
  Cursor copy = c;  // a resumed cursor reads the very next segment
  auto a1 = b.next(&c), a2 = b.next(&copy);
  EXPECT_TRUE(a1.new_epoch);
  EXPECT_EQ(c.epoch, 1);
  EXPECT_TRUE(torch::equal(a1.input, a2.input));
  EXPECT_THROW(StreamBatcher(std::vector<int32_t>(5), 4, 10), xl::Error);
}

TEST(LearningRate, WarmupCosineConstantAndCyclic) {
  // Transformer-XL: lr * n / warmup, then cosine over the whole run, n counted from 1.
  EXPECT_DOUBLE_EQ(learning_rate("cosine", 1.0, 0.0, 10, 100, 0), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate("cosine", 1.0, 0.0, 10, 100, 8), 0.9);
  EXPECT_NEAR(learning_rate("cosine", 1.0, 0.0, 10, 100, 49), 0.5, 1e-12);
  EXPECT_NEAR(learning_rate("cosine", 1.0, 0.1, 0, 100, 99), 0.1, 1e-12);
  EXPECT_NEAR(learning_rate("cosine", 1.0, 0.0, 0, 100, 500), 0.0, 1e-12);  // stays at the end
  EXPECT_DOUBLE_EQ(learning_rate("constant", 0.5, 0.0, 0, 0, 1234), 0.5);
  // The paper's code: LR 0 at the end of warm-up, then a cosine of period 2 x warmup.
  EXPECT_NEAR(learning_rate("cyclic-cosine", 1.0, 0.0, 10, 0, 9), 0.0, 1e-12);
  EXPECT_NEAR(learning_rate("cyclic-cosine", 1.0, 0.0, 10, 0, 19), 1.0, 1e-12);
}

TEST(Adam, MatchesLibTorchAdamAndSkipsParametersWithoutGradient) {
  torch::manual_seed(1);
  auto w1 = torch::randn({3, 4}, torch::requires_grad()), w2 = torch::randn({5}, torch::requires_grad());
  auto r1 = w1.detach().clone().requires_grad_(), r2 = w2.detach().clone().requires_grad_();
  Adam ours({{"a", w1}, {"b", w2}}, AdamOptions{});
  torch::optim::Adam ref({r1, r2}, torch::optim::AdamOptions(0.01));
  for (int step = 0; step < 5; ++step) {
    auto x = torch::randn({4});
    (torch::mv(w1, x).sum() + w2.pow(2).sum()).backward();
    (torch::mv(r1, x).sum() + r2.pow(2).sum()).backward();
    ours.step(0.01);
    ref.step();
    ours.clear_grads();
    ref.zero_grad();
  }
  EXPECT_LT((w1 - r1).abs().max().item<double>(), 1e-6);
  EXPECT_LT((w2 - r2).abs().max().item<double>(), 1e-6);
  // A parameter with no gradient this step (a skipped layer) does not move at all.
  auto before = w2.detach().clone();
  torch::mv(w1, torch::ones({4})).sum().backward();
  EXPECT_EQ(ours.step(0.01), 1);
  EXPECT_TRUE(torch::equal(w2, before));
  // State round trip.
  Adam other({{"a", w1}, {"b", w2}}, AdamOptions{});
  other.load_state(ours.state(), "test");
  auto s1 = ours.state(), s2 = other.state();
  for (size_t i = 0; i < s1.size(); ++i) EXPECT_TRUE(torch::equal(s1[i].second, s2[i].second)) << s1[i].first;
}

TEST(Adam, ClipsTheGlobalNorm) {
  auto w = torch::zeros({2}, torch::requires_grad());
  Adam adam({{"w", w}}, AdamOptions{});
  (w * torch::tensor({3.0f, 4.0f})).sum().backward();
  EXPECT_NEAR(adam.clip_grad_norm(1.0), 5.0, 1e-6);
  EXPECT_NEAR(w.grad().norm().item<double>(), 1.0, 1e-5);
}

TEST(TrainConfig, JsonRoundTripValidationAndDurations) {
  TrainConfig c;
  c.max_steps = 100;
  c.skip_schedule = "no-first";
  auto back = TrainConfig::from_json(c.to_json(), "t");
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(c.effective_eval_mem_len(), 128);
  c.eval_tgt_len = 64;
  EXPECT_EQ(c.effective_eval_mem_len(), 192);  // Transformer-XL: mem + tgt - eval_tgt
  c.batch_chunk = 3;
  EXPECT_THROW(c.validate("t"), xl::Error);
  c.batch_chunk = 1;
  c.max_steps = 0;
  EXPECT_THROW(c.validate("t"), xl::Error);  // cosine needs a length
  EXPECT_DOUBLE_EQ(parse_duration("15m", "x"), 900);
  EXPECT_DOUBLE_EQ(parse_duration("2h", "x"), 7200);
  EXPECT_DOUBLE_EQ(parse_duration("90", "x"), 90);
  EXPECT_THROW(parse_duration("soon", "x"), xl::Error);
}
