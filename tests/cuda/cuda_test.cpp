// The model on a GPU against the same model on the CPU (where it is checked against independent
// computations): attention with aged memories, SCH and head masks, a whole training step, mixed
// precision and the dropout streams. Skipped without a GPU; ctest label "cuda".
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>

#include "xl/compute/device.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cuda/fused_attention.h"
#include "xl/model/rel_attention.h"
#include "xl/model/transformer_xl.h"
#include "xl/train/adam.h"
#include "xl/train/generators.h"
#include "xl/train/loss_scale.h"
#include "../unit/support/model_sizes.h"

using namespace xl;
using namespace xl::model;
using torch::Tensor;

namespace {

#define REQUIRE_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU"

ModelConfig tiny() {
  return xl::test::model_of_sizes(30, 3, 16, 4, 8, 32);  // tokens, layers, d_model, heads, d_head, d_inner
}

TransformerXL model_on(const ModelConfig& c, const torch::Device& d, torch::Dtype dtype) {
  TransformerXL m(c);
  m->reset_parameters(11);
  m->to(d, dtype);
  return m;
}

double max_diff(const Tensor& a, const Tensor& b) { return (a.cpu().to(torch::kDouble) - b.cpu().to(torch::kDouble)).abs().max().item<double>(); }

// Token ids for a batch of 2 segments of 6, from LibTorch's global generator.
Tensor random_tokens(const ModelConfig& c) { return torch::randint(0, c.n_token, {2, 6}, torch::kLong); }

// The same model on the CPU and on the GPU in float64, in training mode.
std::pair<TransformerXL, TransformerXL> training_pair(const ModelConfig& c) {
  std::pair<TransformerXL, TransformerXL> m{model_on(c, torch::kCPU, torch::kFloat64), model_on(c, torch::kCUDA, torch::kFloat64)};
  m.first->train();
  m.second->train();
  return m;
}

// Every parameter's gradient on the GPU within 1e-9 of the CPU's (or undefined on both); then
// both cleared for the next step.
void expect_same_gradients(TransformerXL& cpu, TransformerXL& gpu, int step) {
  auto pg = gpu->named_parameters();
  for (const auto& item : cpu->named_parameters()) {
    const Tensor& g = pg[item.key()].grad();
    ASSERT_EQ(item.value().grad().defined(), g.defined()) << item.key();
    if (g.defined()) {
      EXPECT_LT(max_diff(item.value().grad(), g), 1e-9) << item.key() << " step " << step;
    }
  }
  for (auto& p : cpu->parameters()) p.mutable_grad() = Tensor();
  for (auto& p : gpu->parameters()) p.mutable_grad() = Tensor();
}

}  // namespace

TEST(Cuda, TrainingStepsWithSkipsSchAndMasksMatchTheCpu) {
  REQUIRE_GPU();
  // Double precision: the GPU's generic path against the CPU's fused kernels, over segments with
  // a skipped layer (aged memory), SCH and a head mask, forward and every gradient.
  const ModelConfig c = tiny();
  auto [cpu, gpu] = training_pair(c);
  Memory mc = cpu->new_memory(), mg = gpu->new_memory();
  for (int step = 0; step < 4; ++step) {
    torch::manual_seed(step);
    auto in = random_tokens(c), tg = random_tokens(c);
    ForwardOptions o;
    o.mem_len = 8;
    o.skip = {false, step == 1 || step == 2, false};
    o.perms = {{}, {}, step == 3 ? std::vector<int64_t>{3, 1, 0, 2} : std::vector<int64_t>{}};
    o.head_mask = torch::tensor({1.0, 1.0, 0.0, 1.0}, torch::kFloat64).repeat({3, 1});
    auto lc = cpu->forward(in, tg, mc, o).mean();
    ForwardOptions og = o;
    og.head_mask = o.head_mask.cuda();
    auto lg = gpu->forward(in.cuda(), tg.cuda(), mg, og).mean();
    EXPECT_LT(max_diff(lc, lg), 1e-10) << "step " << step;
    lc.backward();
    lg.backward();
    expect_same_gradients(cpu, gpu, step);
  }
}

TEST(Cuda, FusedAttentionMatchesTheExplicitPath) {
  REQUIRE_GPU();
  const auto bf16 = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  if (!kernels::fused_attention_applies(torch::zeros({1, 1, 1, 8}, bf16), false))
    GTEST_SKIP() << "this LibTorch has no fused attention (2.1 and later)";
  // The fused kernel (the positional scores as the bias of PyTorch's memory-efficient attention)
  // against the GPU's explicit path, itself checked against the CPU in float64 above: forward and
  // every gradient over segments with a skipped layer (several key blocks), SCH and a head mask,
  // in bf16 and fp16, head widths 8 and 6 (padded to 8); with strict deterministic kernels, as
  // training runs, the same bits twice.
  const bool was_deterministic = at::globalContext().deterministicAlgorithms();
  const bool was_warn_only = at::globalContext().deterministicAlgorithmsWarnOnly();
  compute::use_deterministic_kernels(torch::Device(torch::kCUDA, 0));
  ModelConfig narrow = tiny();
  narrow.d_head = 6;
  for (const ModelConfig& c : {tiny(), narrow}) {
    for (compute::Precision p : {compute::Precision::kBf16, compute::Precision::kFp16}) {
      SCOPED_TRACE("d_head " + std::to_string(c.d_head) + " " + compute::to_string(p));
      const double tol = 0.1;
      auto gpu = model_on(c, torch::kCUDA, torch::kFloat32);
      gpu->train();
      auto run = [&](const Tensor& in, const Tensor& tg, Memory& mem, const ForwardOptions& o, bool fused) {
        std::optional<compute::GenericKernels> explicit_path;
        if (!fused) explicit_path.emplace();
        Tensor loss;
        {
          compute::AutocastScope autocast(p, torch::kCUDA);
          loss = gpu->forward(in, tg, mem, o).mean();
        }
        loss.backward();
        std::vector<Tensor> result{loss.detach()};
        for (auto& prm : gpu->parameters()) {
          result.push_back(prm.grad().defined() ? prm.grad().clone() : Tensor());
          prm.mutable_grad() = Tensor();
        }
        return result;
      };
      Memory mf = gpu->new_memory(), me = gpu->new_memory();
      for (int step = 0; step < 4; ++step) {
        torch::manual_seed(step);
        auto in = random_tokens(c).cuda();
        auto tg = random_tokens(c).cuda();
        ForwardOptions o;
        o.mem_len = 8;
        o.skip = {false, step == 1 || step == 2, false};
        o.perms = {{}, {}, step == 3 ? std::vector<int64_t>{3, 1, 0, 2} : std::vector<int64_t>{}};
        o.head_mask = torch::tensor({1.0f, 1.0f, 0.0f, 1.0f}, torch::kCUDA).repeat({3, 1});
        const auto fused = run(in, tg, mf, o, true), expl = run(in, tg, me, o, false);
        EXPECT_LT(max_diff(fused[0], expl[0]), tol * expl[0].abs().item<double>()) << "loss, step " << step;
        for (size_t i = 1; i < fused.size(); ++i) {
          ASSERT_EQ(fused[i].defined(), expl[i].defined()) << "gradient " << i;
          if (!fused[i].defined()) continue;
          const double scale = expl[i].abs().max().item<double>();
          EXPECT_LE(max_diff(fused[i], expl[i]), tol * scale + 1e-7) << "gradient " << i << ", step " << step;
        }
      }
      Memory a = gpu->new_memory(), b = gpu->new_memory();
      torch::manual_seed(9);
      auto in = random_tokens(c).cuda();
      ForwardOptions o;
      o.mem_len = 8;
      const auto once = run(in, in, a, o, true), twice = run(in, in, b, o, true);
      for (size_t i = 0; i < once.size(); ++i) {
        if (!once[i].defined()) continue;
        EXPECT_TRUE(torch::equal(once[i], twice[i])) << "not deterministic: " << i;
      }
    }
  }
  at::globalContext().setDeterministicAlgorithms(was_deterministic, was_warn_only);
}

TEST(Cuda, AdaptiveSoftmaxGradientsMatchTheCpu) {
  REQUIRE_GPU();
  // Words in double precision: one output layer gathered per cluster (div_val 1, OutputRows'
  // gradient written into the one weight) and a layer per cluster (div_val 2), loss and every
  // gradient over two segments, the second reading the first's memory.
  for (int64_t div_val : {1, 2}) {
    SCOPED_TRACE("div_val " + std::to_string(div_val));
    ModelConfig c = tiny();
    c.cutoffs = {10, 20};
    c.div_val = div_val;
    auto [cpu, gpu] = training_pair(c);
    Memory mc = cpu->new_memory(), mg = gpu->new_memory();
    for (int step = 0; step < 2; ++step) {
      torch::manual_seed(step);
      auto in = random_tokens(c), tg = random_tokens(c);
      ForwardOptions o;
      o.mem_len = 8;
      auto lc = cpu->forward(in, tg, mc, o).mean();
      auto lg = gpu->forward(in.cuda(), tg.cuda(), mg, o).mean();
      EXPECT_LT(max_diff(lc, lg), 1e-10) << "step " << step;
      lc.backward();
      lg.backward();
      expect_same_gradients(cpu, gpu, step);
    }
  }
}

TEST(Cuda, Float32AndBf16OnTheGpuTrackTheCpu) {
  REQUIRE_GPU();
  // Characters, and words (adaptive input and softmax, whose projections autocast runs in bf16).
  ModelConfig words = tiny();
  words.cutoffs = {10, 20};
  words.div_val = 2;
  for (const ModelConfig& c : {tiny(), words}) {
    SCOPED_TRACE(c.cutoffs.empty() ? "characters" : "words");
    auto cpu = model_on(c, torch::kCPU, torch::kFloat32), gpu = model_on(c, torch::kCUDA, torch::kFloat32);
    cpu->eval();
    gpu->eval();
    ForwardOptions o;
    o.mem_len = 8;
    Memory mc = cpu->new_memory(), mg = gpu->new_memory(), mb = gpu->new_memory();
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(step);
      auto in = random_tokens(c), tg = random_tokens(c);
      auto lc = cpu->forward(in, tg, mc, o);
      auto lg = gpu->forward(in.cuda(), tg.cuda(), mg, o);
      EXPECT_LT(max_diff(lc, lg), 1e-4) << "fp32 step " << step;
      Tensor lb;
      {
        compute::AutocastScope autocast(compute::Precision::kBf16, torch::kCUDA);
        lb = gpu->forward(in.cuda(), tg.cuda(), mb, o);
      }
      EXPECT_EQ(lb.scalar_type(), torch::kFloat);
      EXPECT_LT(((lb.cpu() - lc).abs() / lc.abs()).max().item<double>(), 0.05) << "bf16 step " << step;
      for (const auto& layer : mb.layers) EXPECT_EQ(layer.hidden.scalar_type(), torch::kFloat);
    }
  }
}

TEST(Cuda, DropoutMasksFollowTheSavedGeneratorState) {
  REQUIRE_GPU();
  auto gen = xl::train::Generators::seeded(5);
  xl::checkpoint::TensorList saved;
  gen.to_tensors(&saved);
  auto x = torch::ones({1000}, torch::kCUDA);
  auto first = torch::dropout(x, 0.5, true);
  gen.load(saved, "test");
  auto again = torch::dropout(x, 0.5, true);
  EXPECT_TRUE(torch::equal(first, again));
}

TEST(Cuda, AdamsMultiTensorOpsOnTheGpuMatchTheCpusFusedPass) {
  REQUIRE_GPU();
  // The model's parameters updated on the GPU (one _foreach op per operation over all of them) and
  // on the CPU (the fused pass), from the same gradients: clipped and not, and a layer left out
  // of two steps (its own step count, so its own bias corrections); then the same bits twice.
  const ModelConfig c = tiny();
  auto run = [&](const torch::Device& device) {
    auto m = model_on(c, device, torch::kFloat32);
    std::vector<std::pair<std::string, Tensor>> named;
    for (const auto& p : m->named_parameters()) named.emplace_back(p.key(), p.value());
    xl::train::Adam adam(named, xl::train::AdamOptions{});
    std::vector<double> norms;
    for (int step = 0; step < 4; ++step) {
      torch::manual_seed(100 + step);
      for (auto& [name, p] : named) {
        const Tensor g = torch::randn(p.sizes()) * (step % 2 == 0 ? 1.0 : 0.01);
        const bool skipped = (step == 1 || step == 2) && name.find("layers.1.") != std::string::npos;
        p.mutable_grad() = skipped ? Tensor() : g.to(device);
      }
      norms.push_back(adam.grad_norm());
      adam.step(0.01, xl::train::clip_factor(norms.back(), 5.0));
      adam.clear_grads();
    }
    std::vector<Tensor> out;
    for (auto& [name, p] : named) out.push_back(p.detach().cpu());
    return std::make_pair(norms, out);
  };
  const auto [cpu_norms, cpu_params] = run(torch::kCPU);
  const auto [gpu_norms, gpu_params] = run(torch::kCUDA);
  for (size_t s = 0; s < cpu_norms.size(); ++s) EXPECT_NEAR(gpu_norms[s], cpu_norms[s], 1e-6 * cpu_norms[s]) << s;
  for (size_t i = 0; i < cpu_params.size(); ++i) EXPECT_LT(max_diff(cpu_params[i], gpu_params[i]), 1e-6) << i;
  const auto again = run(torch::kCUDA).second;
  for (size_t i = 0; i < gpu_params.size(); ++i) EXPECT_TRUE(torch::equal(gpu_params[i], again[i])) << i;
}

TEST(Cuda, LossScalerUnscalesAndFindsOverflowsInOnePass) {
  REQUIRE_GPU();
  // GradScaler's multi-tensor kernel on the GPU against the division by the scale on the CPU.
  auto a = torch::zeros({3}, torch::TensorOptions(torch::kCUDA).requires_grad(true));
  auto b = torch::zeros({2}, torch::TensorOptions(torch::kCUDA).requires_grad(true));
  auto none = torch::zeros({4}, torch::TensorOptions(torch::kCUDA).requires_grad(true));  // no gradient
  xl::train::LossScaler scaler(1024.0, 0, 3);
  const Tensor ga = torch::tensor({1024.0f, 2048.0f, -512.0f}), gb = torch::tensor({4.0f, 8.0f});
  a.mutable_grad() = ga.cuda();
  b.mutable_grad() = gb.cuda();
  EXPECT_TRUE(scaler.unscale({a, none, b}));
  EXPECT_TRUE(torch::equal(a.grad().cpu(), ga / 1024.0));
  EXPECT_TRUE(torch::equal(b.grad().cpu(), gb / 1024.0));
  b.mutable_grad() = torch::tensor({INFINITY, 1.0f}).cuda();
  EXPECT_FALSE(scaler.unscale({a, b}));
  a.mutable_grad() = torch::tensor({NAN, 0.0f, 0.0f}).cuda();
  b.mutable_grad() = gb.cuda();
  EXPECT_FALSE(scaler.unscale({a, b}));
}

TEST(Cuda, AttentionVariantsTrainAsOnTheCpuUnderStrictDeterminism) {
  REQUIRE_GPU();
  // Mixture-of-Gaussian keys (soft and hard E-step, shifted keys) and persistent memory with an
  // adaptive span: the GPU in float64 against the CPU's kernels, forward and every gradient over
  // segments with a skipped layer and SCH, with the strict deterministic kernels training runs
  // (an operation without one would throw here), and the same bits twice.
  const bool was_deterministic = at::globalContext().deterministicAlgorithms();
  const bool was_warn_only = at::globalContext().deterministicAlgorithmsWarnOnly();
  compute::use_deterministic_kernels(torch::Device(torch::kCUDA, 0));
  ModelConfig mgk = tiny(), smgk = tiny(), span = tiny();
  mgk.attention = "mgk";
  smgk.attention = "smgk";
  smgk.mgk_estep = "hard";
  span.persistent_mem = 3;
  span.adaptive_span = true;
  span.span_max = 16;
  span.span_ramp = 4;
  for (const ModelConfig& c : {mgk, smgk, span}) {
    SCOPED_TRACE(c.attention + (c.adaptive_span ? " + persistent memory + adaptive span" : ""));
    auto cpu = model_on(c, torch::kCPU, torch::kFloat64);
    auto run_gpu = [&]() -> std::vector<Tensor> {
      auto gpu = model_on(c, torch::kCUDA, torch::kFloat64);
      gpu->train();
      cpu->train();
      Memory mc = cpu->new_memory(), mg = gpu->new_memory();
      std::vector<Tensor> out;
      for (int step = 0; step < 3; ++step) {
        torch::manual_seed(step);
        auto in = random_tokens(c);
        auto tg = random_tokens(c);
        ForwardOptions o;
        o.mem_len = 8;
        o.skip = {false, step == 1, false};
        o.perms = {{}, {}, step == 2 ? std::vector<int64_t>{3, 1, 0, 2} : std::vector<int64_t>{}};
        auto lc = cpu->forward(in, tg, mc, o).mean();
        auto lg = gpu->forward(in.cuda(), tg.cuda(), mg, o).mean();
        EXPECT_LT(max_diff(lc, lg), 1e-10) << "step " << step;
        lc.backward();
        lg.backward();
        out.push_back(lg.detach());
        auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
        for (const auto& item : pc) {
          const Tensor& g = pg[item.key()].grad();
          EXPECT_EQ(item.value().grad().defined(), g.defined()) << item.key();
          if (!g.defined() || !item.value().grad().defined()) continue;
          EXPECT_LT(max_diff(item.value().grad(), g), 1e-9) << item.key() << " step " << step;
          out.push_back(g.detach().clone());
        }
        for (auto& p : cpu->parameters()) p.mutable_grad() = Tensor();
        for (auto& p : gpu->parameters()) p.mutable_grad() = Tensor();
      }
      return out;
    };
    const auto once = run_gpu(), twice = run_gpu();
    ASSERT_EQ(once.size(), twice.size());
    for (size_t i = 0; i < once.size(); ++i) EXPECT_TRUE(torch::equal(once[i], twice[i])) << "not deterministic: " << i;
  }
  at::globalContext().setDeterministicAlgorithms(was_deterministic, was_warn_only);
}
