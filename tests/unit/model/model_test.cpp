// The whole model: memory semantics, Skip-Retain and SCH invariants, initial weights, gradients,
// the generic and bf16 paths, the config. (The adaptive softmax: adaptive_softmax_test.cpp.)
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>

#include "support/reference_txl.h"
#include "support/tiny_models.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/precision.h"
#include "xl/model/cross_head.h"
#include "xl/model/skip_retain.h"
#include "xl/model/transformer_xl.h"
#include "xl/util/error.h"

using namespace xl;
using namespace xl::model;
using torch::Tensor;
using xl::test::make_model;
using xl::test::small_adaptive_config;
using xl::test::tiny_config;
using xl::test::tokens;

namespace {

// Inputs of every layer for one segment, computed layer by layer with the module's own layers.
std::vector<Tensor> layer_inputs(TransformerXL& m, const Tensor& input, const Memory& before, int64_t mem_len) {
  Memory mem = before;
  AttentionPass pass;
  SinusoidTable table(m->config.d_model);
  pass.position = mem.position;
  pass.mem_len = mem_len;
  pass.sinusoid = &table;
  std::vector<Tensor> inputs;
  Tensor h = m->word_emb(input);
  for (int64_t l = 0; l < m->config.n_layer; ++l) {
    inputs.push_back(h);
    auto [u, v] = m->biases(l);
    h = m->layer_list[l](h, mem.layers[l], pass, u, v, std::vector<int64_t>{}, Tensor());
  }
  return inputs;
}

}  // namespace

TEST(Model, ParameterNamesFollowThePyTorchTransformerXL) {
  ModelConfig c = tiny_config();
  TransformerXL m(c);
  std::set<std::string> names;
  for (const auto& [name, t] : m->named_tensors()) names.insert(name);
  for (const char* want : {"word_emb.emb_layers.0.weight", "r_w_bias", "r_r_bias", "layers.0.dec_attn.qkv_net.weight",
                           "layers.2.dec_attn.r_net.weight", "layers.1.dec_attn.o_net.weight",
                           "layers.0.dec_attn.layer_norm.weight", "layers.0.pos_ff.CoreNet.0.weight",
                           "layers.0.pos_ff.CoreNet.3.bias", "layers.0.pos_ff.layer_norm.bias", "crit.out_layers.0.bias",
                           "pos_emb.inv_freq"})
    EXPECT_TRUE(names.count(want)) << want;
  // The tied output weight is the embedding itself, stored once.
  EXPECT_FALSE(names.count("crit.out_layers.0.weight"));
  EXPECT_EQ(m->crit->layers[0]->weight.data_ptr(), m->word_emb->embeddings[0]->weight.data_ptr());
  EXPECT_FALSE(names.count("layers.0.dec_attn.qkv_net.bias"));
}

// LibTorch's Linear and Embedding drew initial weights from the global generator (the one dropout
// draws from) that xl then overwrote: building a model, seeded or not, now leaves that generator
// as it was, and a seeded model's tensors are its seed's alone, every one of them written.
TEST(Model, BuildingAModelDrawsOnlyFromItsSeed) {
  for (const ModelConfig& c : {tiny_config(), small_adaptive_config()}) {
    torch::manual_seed(3);
    TransformerXL unset(c, std::nullopt), seeded(c, 7);
    const Tensor after = torch::rand({4});
    torch::manual_seed(3);
    EXPECT_TRUE(torch::equal(after, torch::rand({4})));
    torch::manual_seed(99);
    TransformerXL again(c, 7);
    const auto want = seeded->named_tensors(), got = again->named_tensors();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(torch::equal(got[i].second, want[i].second)) << want[i].first;
      EXPECT_TRUE(torch::isfinite(want[i].second).all().item<bool>()) << want[i].first;
    }
  }
}

// Weights are drawn piece by piece (no double-precision copy of a large embedding), yet as one
// draw per tensor from the seed's generator would give them: here an embedding of 2^20 + 24 values
// (two pieces) and the tensors before and after it, drawn whole in order as written out here.
TEST(Model, InitialWeightsAreOneDoublePrecisionDrawPerTensor) {
  ModelConfig c = tiny_config();
  c.n_token = (int64_t{1} << 20) / c.d_model + 3;
  TransformerXL m(c, 11);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  int drawn = 0;
  for (const auto& item : m->named_parameters(true)) {
    const std::string& name = item.key();
    const Tensor& p = item.value();
    SCOPED_TRACE(name);
    const bool bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0 && name.find("r_w_bias") == std::string::npos &&
                      name.find("r_r_bias") == std::string::npos;
    if (bias) {
      EXPECT_EQ(p.abs().max().item<float>(), 0.0f);
      continue;
    }
    const double mean = name.find("layer_norm.weight") != std::string::npos ? 1.0 : 0.0;
    const Tensor want = torch::empty(p.sizes(), torch::kFloat64).normal_(mean, c.init_std, gen).to(torch::kFloat);
    EXPECT_TRUE(torch::equal(p, want));
    drawn += p.numel() > (int64_t{1} << 20);
  }
  EXPECT_EQ(drawn, 1);  // the embedding
}

TEST(Model, MemoryHoldsDetachedLayerInputsOfTheRightLength) {
  ModelConfig c = tiny_config();
  auto m = make_model(c);
  Memory mem = m->new_memory();
  const int64_t mem_len = 5;
  ForwardOptions opts;
  opts.mem_len = mem_len;
  int64_t seen = 0;
  for (int64_t t : {3, 4, 1, 6}) {
    auto input = tokens(2, t, c.n_token, static_cast<int>(t));
    auto expected_inputs = layer_inputs(m, input, mem, mem_len);
    Memory before = mem;
    m->hidden(input, mem, opts);
    seen += t;
    EXPECT_EQ(mem.position, seen);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const auto& lm = mem.layers[l];
      ASSERT_EQ(lm.length(), std::min(seen, mem_len));
      EXPECT_FALSE(lm.hidden.requires_grad());
      auto all = before.layers[l].length() > 0 ? torch::cat({before.layers[l].hidden, expected_inputs[l]}, 1) : expected_inputs[l];
      EXPECT_TRUE(torch::allclose(lm.hidden, all.slice(1, all.size(1) - lm.length()), 1e-12, 1e-12));
      EXPECT_EQ(lm.gap(mem.position), 0);
    }
  }
  // mem_len 0 keeps nothing (a [-0:] slice would keep everything).
  Memory none = m->new_memory();
  opts.mem_len = 0;
  m->hidden(tokens(2, 4, c.n_token, 1), none, opts);
  for (const auto& lm : none.layers) EXPECT_EQ(lm.length(), 0);
}

TEST(Model, LongerMemoryThanSegmentSeesEarlierSegments) {
  // With mem_len >= stream length, segmenting the stream changes nothing (same_length off).
  ModelConfig c = tiny_config();
  auto m = make_model(c);
  auto stream = tokens(2, 12, c.n_token, 9);
  ForwardOptions opts;
  opts.mem_len = 12;
  Memory whole = m->new_memory();
  auto full = m->forward(stream.slice(1, 0, 11), stream.slice(1, 1, 12), whole, opts);
  Memory parts = m->new_memory();
  std::vector<Tensor> pieces;
  for (int64_t s = 0; s < 11; s += 4) {
    int64_t e = std::min<int64_t>(s + 4, 11);
    pieces.push_back(m->forward(stream.slice(1, s, e), stream.slice(1, s + 1, e + 1), parts, opts));
  }
  EXPECT_LT((torch::cat(pieces, 1) - full).abs().max().item<double>(), 1e-10);
}

TEST(Model, SameLengthWithoutMemoryTrainsAsWithoutSameLength) {
  // mem_len 0 leaves same_length nothing to keep the same: training's forward and gradients are
  // those of the model without it (it used to mask every key and train on NaN).
  for (const bool generic : {false, true}) {
    std::optional<compute::GenericKernels> forced;
    if (generic) forced.emplace();
    ModelConfig c = tiny_config();
    auto plain = make_model(c);
    c.same_length = true;
    auto same = make_model(c);
    plain->train();
    same->train();
    ForwardOptions opts;
    opts.mem_len = 0;
    Memory mp = plain->new_memory(), ms = same->new_memory();
    for (int seg = 0; seg < 2; ++seg) {
      auto in = tokens(2, 5, c.n_token, 20 + seg), tg = tokens(2, 5, c.n_token, 30 + seg);
      const Tensor lp = plain->forward(in, tg, mp, opts).mean(), ls = same->forward(in, tg, ms, opts).mean();
      ASSERT_TRUE(std::isfinite(ls.item<double>())) << "generic " << generic;
      EXPECT_TRUE(torch::equal(lp, ls)) << "generic " << generic;
      lp.backward();
      ls.backward();
    }
    auto pp = plain->named_parameters(), ps = same->named_parameters();
    for (const auto& item : pp)
      EXPECT_TRUE(torch::equal(item.value().grad(), ps[item.key()].grad())) << item.key();
  }
}

TEST(Model, NoSkipAndZeroBetaAreExactlyAPlainTransformerXL) {
  // Phase 1's training path with p_skip 0 and beta 0 (the draws made, nothing skipped or permuted)
  // against a plain Transformer-XL written in the test without any of that machinery, over
  // segments whose memory fills, overflows and (same_length) limits what a query sees.
  for (int variant = 0; variant < 3; ++variant) {
    ModelConfig c = tiny_config();
    c.pre_lnorm = variant == 1;
    c.untie_r = variant == 2;
    c.same_length = variant == 2;
    c.clamp_len = variant == 1 ? 4 : 0;
    auto m = make_model(c);
    {
      torch::NoGradGuard g;  // biases and norms away from their init, so every term matters
      for (auto& [name, t] : m->named_tensors())
        if (name != "pos_emb.inv_freq") t.add_(torch::randn(t.sizes(), t.options()) * 0.3);
    }
    m->train();  // the training path (dropout is 0)
    xl::test::ReferenceTxl ref(c, m->named_tensors());
    xl::Rng rng(3);
    Memory mem = m->new_memory();
    const auto probs = skip_probabilities(SkipSchedule::kUniform, c.n_layer, 0.0);
    for (int step = 0; step < 4; ++step) {
      const int64_t t = step == 2 ? 3 : 5;
      auto input = tokens(2, t, c.n_token, step), target = tokens(2, t, c.n_token, step + 10);
      ForwardOptions opts;
      opts.mem_len = 7;
      opts.skip = draw_skips(rng, probs);
      opts.perms = draw_cross_head(rng, 0.0, m->heads_per_layer());
      Tensor ours = m->forward(input, target, mem, opts);
      Tensor theirs = ref.nll(input, target, opts.mem_len);
      EXPECT_LT((ours - theirs).abs().max().item<double>(), 1e-10) << "variant " << variant << " step " << step;
    }
  }
}

TEST(Model, SkippedLayerIsIdentityAndKeepsItsMemory) {
  ModelConfig c = tiny_config();
  auto m = make_model(c);
  ForwardOptions opts;
  opts.mem_len = 4;
  Memory mem = m->new_memory();
  m->hidden(tokens(2, 4, c.n_token, 1), mem, opts);  // segment 1: all layers write memory
  Memory after_first = mem;
  // Segment 2: skip layer 1. Layer 2's input must then be layer 1's input.
  auto input2 = tokens(2, 4, c.n_token, 2);
  auto inputs2 = layer_inputs(m, input2, mem, 4);  // without skip, for layer 0's output
  ForwardOptions skip1 = opts;
  skip1.skip = {false, true, false};
  m->hidden(input2, mem, skip1);
  EXPECT_TRUE(torch::equal(mem.layers[1].hidden, after_first.layers[1].hidden));
  EXPECT_EQ(mem.layers[1].gap(mem.position), 4);
  EXPECT_EQ(mem.layers[0].gap(mem.position), 0);
  // Layer 2 stored its input, which is layer 0's output (= layer 1's input) because 1 was skipped.
  EXPECT_LT((mem.layers[2].hidden - inputs2[1].slice(1, 0)).abs().max().item<double>(), 1e-12);
  // A second consecutive skip: the memory grows older still.
  m->hidden(tokens(2, 3, c.n_token, 3), mem, skip1);
  EXPECT_EQ(mem.layers[1].gap(mem.position), 7);
  EXPECT_TRUE(torch::equal(mem.layers[1].hidden, after_first.layers[1].hidden));
  // The next unskipped step writes fresh memory again.
  m->hidden(tokens(2, 4, c.n_token, 4), mem, opts);
  EXPECT_EQ(mem.layers[1].gap(mem.position), 0);
  EXPECT_NEAR(mem.mean_gap(), 0.0, 1e-12);
}

TEST(Model, SkipSchedulesFollowThePaper) {
  auto lin = skip_probabilities(SkipSchedule::kLinear, 4, 0.3);
  EXPECT_DOUBLE_EQ(lin[0], 0.0);
  EXPECT_DOUBLE_EQ(lin[1], 0.125);
  EXPECT_DOUBLE_EQ(lin[2], 0.25);
  EXPECT_DOUBLE_EQ(lin[3], 0.0);
  EXPECT_EQ(skip_probabilities(SkipSchedule::kNoFirstLast, 4, 0.1), (std::vector<double>{0, 0.1, 0.1, 0}));
  EXPECT_EQ(skip_probabilities(SkipSchedule::kNoFirst, 3, 0.1), (std::vector<double>{0, 0.1, 0.1}));
  EXPECT_EQ(skip_probabilities(SkipSchedule::kNoLast, 3, 0.1), (std::vector<double>{0.1, 0.1, 0}));
  EXPECT_DOUBLE_EQ(expected_context(lin, 512), 0.375 * 1024);
  // Empirical rates match the schedule.
  xl::Rng rng(11);
  auto probs = skip_probabilities(SkipSchedule::kLinear, 12, 0);
  std::vector<int> count(12, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto s = draw_skips(rng, probs);
    for (int l = 0; l < 12; ++l) count[l] += s[l];
  }
  for (int l = 0; l < 12; ++l) EXPECT_NEAR(count[l] / double(n), probs[l], 0.012) << "layer " << l;
  EXPECT_THROW(parse_skip_schedule("sometimes"), xl::Error);
}

TEST(Model, CrossHeadDrawsFireAtRateBetaWithUniformPermutations) {
  xl::Rng rng(5);
  int fired = 0, identity = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto p = draw_cross_head(rng, 0.25, {3});
    if (!p[0].empty()) {
      ++fired;
      identity += p[0] == std::vector<int64_t>{0, 1, 2};
    }
  }
  EXPECT_NEAR(fired / double(n), 0.25, 0.01);
  EXPECT_NEAR(identity / double(fired), 1.0 / 6, 0.02);  // identity allowed, 1 of 3! orders
}

TEST(Model, GradientsMatchFiniteDifferencesInDoublePrecision) {
  for (bool adaptive : {false, true}) {
    ModelConfig c = tiny_config();
    c.n_layer = 2;
    c.pre_lnorm = adaptive;
    if (adaptive) {
      c.n_token = 20;
      c.cutoffs = {8};
      c.div_val = 2;
    }
    auto m = make_model(c);
    auto input = tokens(2, 4, c.n_token, 1), target = tokens(2, 4, c.n_token, 2);
    Memory warm = m->new_memory();
    ForwardOptions opts;
    opts.mem_len = 3;
    m->hidden(tokens(2, 3, c.n_token, 3), warm, opts);  // a non-empty memory
    auto loss_of = [&]() {
      Memory mem = warm;
      return m->forward(input, target, mem, opts).sum();
    };
    m->zero_grad();
    loss_of().backward();
    for (const auto& [name, p] : m->named_tensors()) {
      if (!p.requires_grad()) continue;
      auto flat = p.data().view({-1});
      auto grad = p.grad().view({-1});
      for (int64_t k : {int64_t(0), flat.numel() / 2, flat.numel() - 1}) {
        double old = flat[k].item<double>(), eps = 1e-6;
        flat[k] = old + eps;
        double up = loss_of().item<double>();
        flat[k] = old - eps;
        double down = loss_of().item<double>();
        flat[k] = old;
        double fd = (up - down) / (2 * eps);
        EXPECT_NEAR(grad[k].item<double>(), fd, 1e-6 * std::max(1.0, std::abs(fd))) << name << "[" << k << "]";
      }
    }
  }
}

TEST(Model, GenericPathAndBf16TrackTheFusedFloat32Path) {
  // What a GPU computes (the tensor-op path) and what mixed precision gives, against the CPU's
  // fused float32 kernels: the whole model over segments whose memory fills and slides, with
  // characters and with words (adaptive input and softmax: narrower clusters, projected).
  ModelConfig chars = tiny_config();
  chars.d_model = 16;
  chars.d_head = 8;
  ModelConfig words = chars;
  words.n_token = 30;
  words.cutoffs = {10, 20};
  words.div_val = 2;
  for (const ModelConfig& c : {chars, words}) {
    SCOPED_TRACE(c.cutoffs.empty() ? "characters" : "words");
    auto m = make_model(c, torch::kFloat32);
    ForwardOptions opts;
    opts.mem_len = 6;
    auto run = [&](bool generic, compute::Precision p) {
      compute::KernelSetScope kernels(generic ? compute::KernelSet::kGeneric : compute::KernelSet::kAll);
      Memory mem = m->new_memory();
      std::vector<Tensor> out;
      for (int step = 0; step < 3; ++step) {
        compute::AutocastScope autocast(p, torch::kCPU);
        out.push_back(m->forward(tokens(2, 5, c.n_token, step), tokens(2, 5, c.n_token, step + 10), mem, opts));
      }
      for (const auto& layer : mem.layers) EXPECT_EQ(layer.hidden.scalar_type(), torch::kFloat) << "memories stay fp32";
      return torch::stack(out);
    };
    const Tensor fused = run(false, compute::Precision::kFp32), generic = run(true, compute::Precision::kFp32);
    EXPECT_EQ(generic.scalar_type(), torch::kFloat);
    EXPECT_LT((fused - generic).abs().max().item<double>(), 1e-5);
    // bf16 on the CPU's kernels and on the GPU's tensor-op path (where autocast reaches every
    // product): 8 bits of mantissa, so per-token losses within a few percent, their mean closer.
    for (bool generic_bf16 : {false, true}) {
      SCOPED_TRACE(generic_bf16 ? "bf16, tensor ops" : "bf16, CPU kernels");
      const Tensor bf16 = run(generic_bf16, compute::Precision::kBf16);
      EXPECT_EQ(bf16.scalar_type(), torch::kFloat) << "the loss is fp32";
      EXPECT_LT(((bf16 - fused).abs() / fused.abs()).max().item<double>(), 0.05);
      EXPECT_LT(std::abs(bf16.mean().item<double>() - fused.mean().item<double>()) / fused.mean().item<double>(), 0.01);
      EXPECT_GT((bf16 - fused).abs().max().item<double>(), 0.0) << "bf16 did not change anything: autocast is off";
    }
  }
  // The precision a run resolves to: fp32 on a CPU; fp16 needs a GPU.
  EXPECT_EQ(compute::resolve_precision("auto", torch::kCPU), compute::Precision::kFp32);
  EXPECT_EQ(compute::resolve_precision("bf16", torch::kCPU), compute::Precision::kBf16);
  EXPECT_THROW(compute::resolve_precision("fp16", torch::kCPU), xl::Error);
  EXPECT_THROW(compute::resolve_precision("fp8", torch::kCPU), xl::Error);
}

TEST(Model, ConfigJsonRoundTripAndValidation) {
  ModelConfig c = tiny_config();
  c.cutoffs = {5};
  c.tie_projs = {false, true};
  auto back = ModelConfig::from_json(c.to_json(), "t");
  EXPECT_EQ(back.to_json(), c.to_json());
  auto j = c.to_json();
  j["d_modle"] = 3;
  EXPECT_THROW(ModelConfig::from_json(j, "t"), xl::Error);
  j = c.to_json();
  j["n_head"] = "eight";
  try {
    ModelConfig::from_json(j, "cfg.json");
    FAIL();
  } catch (const xl::Error& e) {
    EXPECT_EQ(e.code(), xl::kExitConfig);
    EXPECT_NE(std::string(e.what()).find("n_head"), std::string::npos);
  }
  j = c.to_json();
  j["cutoffs"] = {20};
  EXPECT_THROW(ModelConfig::from_json(j, "t"), xl::Error);
}
