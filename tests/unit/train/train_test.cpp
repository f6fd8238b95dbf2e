// Batching, learning-rate schedules and Adam of the trainer.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "xl/compute/kernel_choice.h"
#include "xl/train/adam.h"
#include "xl/train/batcher.h"
#include "xl/train/generators.h"
#include "xl/train/loss_scale.h"
#include "xl/train/lr_schedule.h"
#include "xl/train/train_config.h"
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

TEST(Generators, StreamsPutBackDrawWhatTheyDrewWhenSaved) {
  Generators g = Generators::seeded(7);
  g.skip.uniform();  // not at their seeds
  torch::rand({3});
  const Generators::Saved saved = g.save();
  const double skip = g.skip.uniform(), cross = g.cross_head.uniform();
  const torch::Tensor dropout = torch::rand({5});
  g.put_back(saved);
  EXPECT_EQ(g.skip.uniform(), skip);
  EXPECT_EQ(g.cross_head.uniform(), cross);
  EXPECT_TRUE(torch::equal(torch::rand({5}), dropout));
  // The saved copies did not move with the draws: a second put_back draws the same again.
  g.put_back(saved);
  EXPECT_EQ(g.skip.uniform(), skip);
  EXPECT_TRUE(torch::equal(torch::rand({5}), dropout));
}

TEST(LearningRate, TxlCountFollowsTransformerXLsTrainingLoop) {
  // Transformer-XL's train.py, written out: the optimizer starts at lr; after each update
  // train_step += 1, then the warm-up sets lr * train_step / warmup, or the cosine steps to train_step.
  const double pi = std::acos(-1.0);
  for (int64_t warmup : {0, 10}) {
    LrSchedule s;
    s.lr = 2.0;
    s.eta_min = 0.1;
    s.warmup = warmup;
    s.steps = 100;
    s.count = "txl";
    double lr = s.lr;
    for (int64_t train_step = 0; train_step < 130; ++train_step) {
      EXPECT_NEAR(s.at(train_step), lr, 1e-12) << "update " << train_step + 1 << " warmup " << warmup;
      const int64_t done = train_step + 1;
      if (done < warmup) lr = s.lr * static_cast<double>(done) / static_cast<double>(warmup);
      else lr = s.eta_min + (s.lr - s.eta_min) * (1 + std::cos(pi * static_cast<double>(std::min<int64_t>(done, 100)) / 100.0)) / 2;
    }
    EXPECT_NEAR(s.at(s.end()), s.eta_min, 1e-12);
    EXPECT_GT(s.at(s.end() - 1), s.eta_min);
  }
}

TEST(LearningRate, AheadCountConstantAndCyclic) {
  LrSchedule s;
  s.lr = 1.0;
  s.warmup = 10;
  s.steps = 100;
  s.count = "ahead";  // update k uses the schedule at k
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(8), 0.9);
  EXPECT_NEAR(s.at(49), 0.5, 1e-12);
  EXPECT_NEAR(s.at(s.end()), 0.0, 1e-12);
  EXPECT_GT(s.at(s.end() - 1), 1e-6);
  s.kind = "constant";
  s.warmup = 0;
  EXPECT_DOUBLE_EQ(s.at(1234), 1.0);
  EXPECT_EQ(s.end(), -1);
  // The paper's code: LR 0 at the end of warm-up, then a cosine of period 2 x warmup.
  s.kind = "cyclic-cosine";
  s.warmup = 10;
  EXPECT_NEAR(s.at(9), 0.0, 1e-12);
  EXPECT_NEAR(s.at(19), 1.0, 1e-12);
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
  // State round trip: an optimizer built from a saved state (as a resumed run builds it) holds
  // that state and takes the next step exactly as the one that saved it.
  xl::checkpoint::TensorList saved;
  for (const auto& [name, t] : ours.state()) saved.emplace_back(name, t.clone());
  auto v1 = w1.detach().clone().requires_grad_(), v2 = w2.detach().clone().requires_grad_();
  Adam other({{"a", v1}, {"b", v2}}, AdamOptions{}, &saved, "test");
  auto s1 = ours.state(), s2 = other.state();
  ASSERT_EQ(s1.size(), s2.size());
  for (size_t i = 0; i < s1.size(); ++i) EXPECT_TRUE(torch::equal(s1[i].second, s2[i].second)) << s1[i].first;
  ours.clear_grads();
  auto x = torch::randn({4});
  (torch::mv(w1, x).sum() + w2.pow(2).sum()).backward();
  (torch::mv(v1, x).sum() + v2.pow(2).sum()).backward();
  ours.step(0.01);
  other.step(0.01);
  EXPECT_TRUE(torch::equal(w1, v1));
  EXPECT_TRUE(torch::equal(w2, v2));
  // A state that lacks a parameter's moments, or holds them in another shape: 65, naming the file.
  xl::checkpoint::TensorList lacking(saved.begin() + 3, saved.end());
  EXPECT_THROW(Adam({{"a", v1}, {"b", v2}}, AdamOptions{}, &lacking, "ckpt.h5"), xl::Error);
  saved[0].second = torch::zeros({12});
  try {
    Adam({{"a", v1}, {"b", v2}}, AdamOptions{}, &saved, "ckpt.h5");
    ADD_FAILURE() << "a moment of the wrong shape was taken";
  } catch (const xl::Error& e) {
    EXPECT_EQ(e.code(), xl::kExitDataErr);
    EXPECT_NE(std::string(e.what()).find("ckpt.h5: optimizer state of 'a' has the wrong shape"), std::string::npos) << e.what();
  }
}

TEST(Adam, StepModeMovesSkippedParametersAsPyTorchDoesWithZeroGradients) {
  // --skipped-layers-in-adam step: a parameter without a gradient this step is stepped with a zero
  // one once it has had a real gradient, which is what torch.optim.Adam does after zero_grad()
  // leaves zeros (the paper's PyTorch 1.5 code).
  torch::manual_seed(2);
  auto w = torch::randn({4}, torch::requires_grad()), never = torch::randn({2}, torch::requires_grad());
  auto r = w.detach().clone().requires_grad_(), r_never = never.detach().clone().requires_grad_();
  AdamOptions o;
  o.zero_missing_grads = true;
  Adam ours({{"w", w}, {"never", never}}, o);
  torch::optim::Adam ref({r}, torch::optim::AdamOptions(0.01));
  for (int step = 0; step < 6; ++step) {
    const bool skipped = step == 2 || step == 3 || step == 5;
    if (!skipped) {
      auto x = torch::randn({4});
      (w * x).sum().backward();
      (r * x).sum().backward();
    } else {
      r.mutable_grad() = torch::zeros_like(r);  // what zero_grad() leaves
    }
    ours.step(0.01);
    ref.step();
    ours.clear_grads();
    ref.zero_grad();
  }
  EXPECT_LT((w - r).abs().max().item<double>(), 1e-6);
  // A parameter that never had a gradient is left alone, as PyTorch leaves a None gradient.
  EXPECT_TRUE(torch::equal(never, r_never));
  // The default (freeze) does not move a skipped parameter at all.
  auto f = torch::randn({4}, torch::requires_grad());
  Adam frozen({{"f", f}}, AdamOptions{});
  (f * 2).sum().backward();
  frozen.step(0.01);
  frozen.clear_grads();
  auto before = f.detach().clone();
  EXPECT_EQ(frozen.step(0.01), 0);
  EXPECT_TRUE(torch::equal(f, before));
}

TEST(LossScaler, UnscalesSkipsOverflowsAndGrows) {
  auto a = torch::zeros({3}, torch::requires_grad()), b = torch::zeros({2}, torch::requires_grad());
  LossScaler scaler(1024.0, 0, 3);
  a.mutable_grad() = torch::tensor({1024.0f, 2048.0f, -512.0f});
  b.mutable_grad() = torch::tensor({4.0f, 8.0f});
  EXPECT_TRUE(scaler.unscale({a, b}));
  EXPECT_TRUE(torch::allclose(a.grad(), torch::tensor({1.0f, 2.0f, -0.5f})));
  EXPECT_TRUE(torch::allclose(b.grad(), torch::tensor({4.0f / 1024, 8.0f / 1024})));
  for (int i = 0; i < 3; ++i) scaler.update(true);
  EXPECT_EQ(scaler.scale(), 2048.0);  // three good steps in a row
  b.mutable_grad() = torch::tensor({INFINITY, 1.0f});
  EXPECT_FALSE(scaler.unscale({a, b}));
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_EQ(scaler.good_steps(), 0);
  a.mutable_grad() = torch::tensor({NAN, 0.0f, 0.0f});
  EXPECT_FALSE(scaler.unscale({a}));
}

TEST(Adam, ClipsInItsUpdateAsClipGradNormThenAdamDo) {
  // Clipping folded into the update's pass (float: the fused kernel; double: the tensor ops)
  // against LibTorch's clip_grad_norm_ followed by its Adam, over steps with the norm above and
  // below the limit.
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    torch::manual_seed(2);
    auto w = torch::randn({37, 5}, torch::TensorOptions(dtype).requires_grad(true));
    auto r = w.detach().clone().requires_grad_();
    Adam ours({{"w", w}}, AdamOptions{});
    torch::optim::Adam ref({r}, torch::optim::AdamOptions(0.01));
    const double max_norm = 3.0;
    int clipped = 0;
    for (int step = 0; step < 6; ++step) {
      auto x = torch::randn({5}, dtype) * (step % 2 == 0 ? 10.0 : 0.01);
      torch::mv(w, x).pow(2).sum().backward();
      torch::mv(r, x).pow(2).sum().backward();
      const double norm = ours.grad_norm();
      EXPECT_NEAR(norm, r.grad().norm().item<double>(), 1e-5 * norm);
      clipped += norm > max_norm;
      ours.step(0.01, clip_factor(norm, max_norm));
      torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{r}, max_norm);
      ref.step();
      ours.clear_grads();
      ref.zero_grad();
    }
    EXPECT_EQ(clipped, 3);  // (the norms differ in their last bits: LibTorch sums per-tensor norms)
    EXPECT_LT((w - r).abs().max().item<double>(), dtype == torch::kFloat ? 1e-6 : 1e-8);
  }
  EXPECT_EQ(clip_factor(5.0, 0.0), 1.0);  // 0: no clipping
  EXPECT_EQ(clip_factor(0.5, 1.0), 1.0);
  EXPECT_NEAR(clip_factor(5.0, 1.0), 0.2, 1e-7);
}

namespace {

// A parameter of three chunks, small ones, a double one, and one without a gradient, against
// LibTorch's clip_grad_norm_ and Adam over four steps; the norm against float64's.
void expect_adam_matches_libtorch(bool generic) {
  std::optional<xl::compute::GenericKernels> forced;
  if (generic) forced.emplace();
  torch::manual_seed(4);
  const std::vector<torch::Tensor> init = {torch::randn({300, 250}), torch::randn({7}),
                                           torch::randn({20}, torch::kDouble), torch::randn({3})};
  std::vector<torch::Tensor> ours_p, ref_p;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (size_t i = 0; i < init.size(); ++i) {
    ours_p.push_back(init[i].clone().requires_grad_());
    ref_p.push_back(init[i].clone().requires_grad_());
    named.emplace_back("p" + std::to_string(i), ours_p.back());
  }
  Adam ours(named, AdamOptions{});
  torch::optim::Adam ref({ref_p[0], ref_p[1], ref_p[2]}, torch::optim::AdamOptions(0.01));
  const double max_norm = 50.0;
  for (int step = 0; step < 4; ++step) {
    for (size_t i = 0; i < 3; ++i) {  // p3 never gets a gradient
      const torch::Tensor g = torch::randn(init[i].sizes(), init[i].options()) * (step % 2 == 0 ? 1.0 : 0.01);
      ours_p[i].mutable_grad() = g.clone();
      ref_p[i].mutable_grad() = g.clone();
    }
    double want = 0;
    for (size_t i = 0; i < 3; ++i) want += ours_p[i].grad().to(torch::kDouble).pow(2).sum().item<double>();
    const double norm = ours.grad_norm();
    // The multi-tensor path takes each float gradient's norm in float.
    EXPECT_NEAR(norm, std::sqrt(want), (generic ? 1e-6 : 1e-12) * norm);
    if (!generic) {
      at::set_num_threads(1);
      EXPECT_EQ(ours.grad_norm(), norm);  // the same bits on one thread
      at::set_num_threads(2);
    }
    EXPECT_EQ(ours.step(0.01, clip_factor(norm, max_norm)), 3);
    torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{ref_p[0], ref_p[1], ref_p[2]}, max_norm);
    ref.step();
    ours.clear_grads();
    ref.zero_grad();
  }
  for (size_t i = 0; i < 3; ++i)
    EXPECT_LT((ours_p[i] - ref_p[i]).abs().max().item<double>(), 1e-6) << "parameter " << i;
  EXPECT_TRUE(torch::equal(ours_p[3], init[3]));
}

}  // namespace

TEST(Adam, OnePassOverManyParametersMatchesLibTorchAndTheNormInDouble) {
  // The fused update and norm run over all float parameters in chunks of 32,768 floats, beside
  // the multi-tensor ops for the others (the double); the norm the same bits on one thread and two.
  expect_adam_matches_libtorch(false);
}

TEST(Adam, NormOfFloatGradientsHasOneSummationOrderOnEveryCpu) {
  // Each chunk of 32,768 floats: element i's square into running sum i % 8 (the tail's into sum
  // 0), the eight added pairwise; the chunks' sums in order. Written out here in scalar double, so
  // the vector kernels must give these bits, not merely a close value. Another order changes the
  // sum's last bits, which the square root keeps about half the time: 32 draws.
  for (int draw = 0; draw < 32; ++draw) {
    torch::manual_seed(draw);
    // One chunk with a tail of 5, or three; a small chunk's last bits would be lost in a larger sum.
    const torch::Tensor g = torch::randn({draw % 2 == 0 ? 32765 : 98301});
    std::vector<std::pair<std::string, torch::Tensor>> named{{"p", torch::zeros_like(g).requires_grad_()}};
    named[0].second.mutable_grad() = g;
    const float* x = g.data_ptr<float>();
    double total = 0;
    for (int64_t begin = 0; begin < g.numel(); begin += 32768) {
      const int64_t n = std::min<int64_t>(32768, g.numel() - begin);
      double lane[8] = {};
      int64_t i = 0;
      for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) lane[j] += static_cast<double>(x[begin + i + j]) * x[begin + i + j];
      for (; i < n; ++i) lane[0] += static_cast<double>(x[begin + i]) * x[begin + i];
      total += ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
    EXPECT_EQ(Adam(named, AdamOptions{}).grad_norm(), std::sqrt(total)) << "draw " << draw;
  }
}

TEST(Adam, MultiTensorOpsMatchLibTorch) {
  // Where the fused pass does not run (a GPU's parameters; here forced on the CPU), every
  // parameter is updated and its norm taken by _foreach ops over all of them at once.
  expect_adam_matches_libtorch(true);
}

TEST(TrainConfig, JsonRoundTripAndValidation) {
  TrainConfig c;
  c.max_steps = 100;
  c.skip_schedule = "no-first";
  auto back = TrainConfig::from_json(c.to_json(), "t");
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_EQ(c.effective_eval_mem_len(), 128);
  c.eval_tgt_len = 64;
  EXPECT_EQ(c.effective_eval_mem_len(), 192);  // Transformer-XL: mem + tgt - eval_tgt
  c.batch_chunk = 3;
  EXPECT_THROW(c.validate(xl::SettingOrigins("t")), xl::Error);
  c.batch_chunk = 1;
  c.budget_from = "everything";
  EXPECT_THROW(c.validate(xl::SettingOrigins("t")), xl::Error);
}
