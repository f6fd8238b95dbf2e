// The whole model: memory semantics, Skip-Retain and SCH invariants, adaptive softmax, gradients.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>

#include "xl/compute/kernel_choice.h"
#include "xl/compute/precision.h"
#include "xl/model/cross_head.h"
#include "xl/model/skip_retain.h"
#include "xl/model/transformer_xl.h"
#include "xl/util/error.h"
#include "reference_txl.h"
#include "model_sizes.h"

using namespace xl;
using namespace xl::model;
using torch::Tensor;

namespace {

ModelConfig tiny_config() {
  return xl::test::model_of_sizes(11, 3, 8, 2, 3, 10);  // tokens, layers, d_model, heads, d_head, d_inner
}

// 40 words in a shortlist of 10 and tails of 15 (projected to 4) and 15 (to 2), d_model 8.
ModelConfig small_adaptive_config() {
  ModelConfig c = tiny_config();
  c.n_token = 40;
  c.cutoffs = {10, 25};
  c.div_val = 2;
  c.tie_projs = {false, true, true};
  return c;
}

TransformerXL make_model(const ModelConfig& c, torch::Dtype dtype = torch::kFloat64) {
  TransformerXL m(c);
  m->reset_parameters(5);
  m->to(dtype);
  m->eval();
  return m;
}

Tensor tokens(int64_t b, int64_t t, int64_t v, int seed) {
  torch::manual_seed(seed);
  return torch::randint(0, v, {b, t}, torch::kLong);
}

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

TEST(Model, AdaptiveSoftmaxIsANormalizedDistributionMatchingTheLoss) {
  ModelConfig c = small_adaptive_config();
  auto m = make_model(c);
  auto input = tokens(2, 6, c.n_token, 4), target = tokens(2, 6, c.n_token, 8);
  Memory mem = m->new_memory();
  ForwardOptions opts;
  opts.mem_len = 4;
  Memory mem2 = mem;
  auto nll = m->forward(input, target, mem, opts);
  auto h = m->hidden(input, mem2, opts).reshape({12, c.d_model});
  auto lp = m->log_probs(h);
  EXPECT_LT((lp.exp().sum(1) - 1).abs().max().item<double>(), 1e-10);
  auto want = -lp.gather(1, target.reshape({12, 1})).squeeze(1);
  EXPECT_LT((nll.reshape({12}) - want).abs().max().item<double>(), 1e-10);
  // Tied projections are the embedding's own tensors.
  EXPECT_EQ(m->crit->projections[1].data_ptr(), m->word_emb->projections[1].data_ptr());
  EXPECT_NE(m->crit->projections[0].data_ptr(), m->word_emb->projections[0].data_ptr());
}

TEST(Model, AdaptiveSoftmaxEqualsAnExplicitComputationOfTheClusters) {
  // Transformer-XL's projected adaptive softmax written out token by token from the parameters: the
  // head scores the shortlist and one column per tail cluster (cluster i is the i-th column from
  // the end); a tail token's log-probability is its cluster column's plus its place in the tail.
  ModelConfig c = small_adaptive_config();
  auto m = make_model(c);
  {
    torch::NoGradGuard g;
    for (auto& [name, t] : m->named_tensors())
      if (name != "pos_emb.inv_freq") t.add_(torch::randn(t.sizes(), t.options()) * 0.5);
  }
  std::map<std::string, Tensor> p;
  for (auto& [name, t] : m->named_tensors()) p[name] = t;
  const std::vector<int64_t> ends = {0, 10, 25, 40};
  auto proj = [&](int i) { return c.tie_projs[i] ? p["word_emb.emb_projs." + std::to_string(i)] : p["crit.out_projs." + std::to_string(i)]; };
  auto weight = [&](int i) { return p["word_emb.emb_layers." + std::to_string(i) + ".weight"]; };  // tie_weight
  auto bias = [&](int i) { return p["crit.out_layers." + std::to_string(i) + ".bias"]; };
  Tensor h = torch::randn({5, c.d_model}, torch::kFloat64);
  Tensor lp = m->log_probs(h);
  Tensor target = torch::tensor({3, 12, 24, 25, 39}, torch::kLong);
  Tensor nll = m->crit(h, target);
  auto log_softmax = [](const std::vector<double>& z) {
    double mx = *std::max_element(z.begin(), z.end()), s = 0;
    for (double v : z) s += std::exp(v - mx);
    std::vector<double> out;
    for (double v : z) out.push_back(v - mx - std::log(s));
    return out;
  };
  for (int64_t n = 0; n < 5; ++n) {
    // Scores of cluster i: W_i (h P_i) + b_i, and for the head the cluster rows after the shortlist.
    auto scores = [&](int i) {
      Tensor x = torch::matmul(h[n], proj(i));
      std::vector<double> z;
      for (int64_t r = 0; r < weight(i).size(0); ++r) z.push_back((weight(i)[r] * x).sum().item<double>() + bias(i)[r].item<double>());
      if (i == 0)
        for (int64_t k = 0; k < 2; ++k)
          z.push_back((p["crit.cluster_weight"][k] * x).sum().item<double>() + p["crit.cluster_bias"][k].item<double>());
      return log_softmax(z);
    };
    const auto head = scores(0);
    for (int64_t y = 0; y < c.n_token; ++y) {
      double want = 0;
      if (y < ends[1]) {
        want = head[y];
      } else {
        const int i = y < ends[2] ? 1 : 2;
        want = head[head.size() - i] + scores(i)[y - ends[i]];
      }
      EXPECT_NEAR(lp[n][y].item<double>(), want, 1e-10) << "token " << y;
      if (y == target[n].item<int64_t>()) {
        EXPECT_NEAR(nll[n].item<double>(), -want, 1e-10);
      }
    }
  }
}

// Without autograd the head's weight with the cluster rows appended is kept between calls; it must
// follow the weights when they change in place (an optimizer step) or get new data (set_data).
TEST(Model, AdaptiveSoftmaxWithoutAutogradFollowsItsWeights) {
  auto m = make_model(small_adaptive_config());
  Tensor h = torch::randn({3, 8}, torch::kFloat64);
  auto fresh = [&] { return m->log_probs(h).detach(); };  // with autograd: made anew
  auto kept = [&] {
    torch::NoGradGuard g;
    return m->log_probs(h);
  };
  const Tensor before = fresh();
  EXPECT_TRUE(torch::equal(kept(), before));
  EXPECT_TRUE(torch::equal(kept(), before));
  Tensor head = m->named_parameters()["word_emb.emb_layers.0.weight"];
  {
    torch::NoGradGuard g;
    head.add_(0.5);
    m->crit->cluster_bias.sub_(1.0);
  }
  const Tensor updated = fresh();
  EXPECT_FALSE(torch::equal(updated, before));
  EXPECT_TRUE(torch::equal(kept(), updated));
  head.set_data(head.detach().clone() * 2);
  const Tensor replaced = fresh();
  EXPECT_FALSE(torch::equal(replaced, updated));
  EXPECT_TRUE(torch::equal(kept(), replaced));
}

// Evaluation of an output layer too large for eval_logit_bytes goes through its vocabulary in
// blocks of columns; each token's loss is still -log_probs at its target (log_probs: every
// cluster's full log_softmax), with or without clusters, in float64 and float32, targets at the
// blocks' edges included.
TEST(Model, AdaptiveSoftmaxEvaluatesLargeLayersInBlocksOfColumns) {
  ModelConfig plain = tiny_config();
  plain.n_token = 23;
  for (const ModelConfig& c : {plain, small_adaptive_config()}) {
    for (torch::Dtype dtype : {torch::kFloat64, torch::kFloat32}) {
      SCOPED_TRACE(std::string(c.cutoffs.empty() ? "plain" : "adaptive") + (dtype == torch::kFloat64 ? " float64" : " float32"));
      auto m = make_model(c, dtype);
      torch::manual_seed(3);
      const Tensor h = torch::randn({12, c.d_model}, dtype);
      Tensor target = torch::arange(12, torch::kLong) * 3 % c.n_token;
      target[0] = 0;
      target[11] = c.n_token - 1;
      torch::NoGradGuard g;
      const Tensor want = -m->log_probs(h).gather(1, target.unsqueeze(1)).squeeze(1);
      const Tensor whole = m->crit(h, target);
      m->crit->eval_logit_bytes = 4 * 12 * 4;  // blocks of 4 columns at 12 rows (fewer rows in a tail)
      const Tensor blocked = m->crit(h, target);
      const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
      EXPECT_LT((whole - want).abs().max().item<double>(), tol);
      EXPECT_LT((blocked - want).abs().max().item<double>(), tol);
      EXPECT_FALSE(torch::equal(blocked, whole)) << "the blocked path did not run";
    }
  }
}

TEST(Model, AdaptiveSoftmaxGradientsMatchTheFullLogProbabilities) {
  // The loss takes one log-probability per token from each row's log-sum-exp; its gradients must be
  // those of the full distribution (log_probs: every cluster's log_softmax, concatenated) at the
  // target, for the hidden states and every parameter of the softmax; also when the output layers
  // go in blocks of 4 columns (train_logit_bytes), with and without clusters.
  ModelConfig plain = tiny_config();
  plain.n_token = 23;
  for (const ModelConfig& c : {small_adaptive_config(), plain}) {
    for (bool blocked : {false, true}) {
      SCOPED_TRACE(std::string(c.cutoffs.empty() ? "plain" : "adaptive") + (blocked ? ", blocked" : ""));
      auto m = make_model(c);
      if (blocked) m->crit->train_logit_bytes = 4 * 9 * 4;
      Tensor h = torch::randn({9, c.d_model}, torch::kFloat64).requires_grad_();
      Tensor target = torch::tensor({3, 12, 24, 25, 39, 0, 10, 30, 9}, torch::kLong) % c.n_token;
      Tensor weights = torch::rand({9}, torch::kFloat64);
      auto grads = [&](const Tensor& loss) {
        m->zero_grad();
        h.mutable_grad() = Tensor();
        loss.backward();
        std::vector<Tensor> g{h.grad().clone()};
        for (auto& p : m->parameters())
          if (p.grad().defined()) g.push_back(p.grad().clone());
        return g;
      };
      auto got = grads((m->crit(h, target) * weights).sum());
      auto want = grads((-m->log_probs(h).gather(1, target.unsqueeze(1)).squeeze(1) * weights).sum());
      ASSERT_EQ(got.size(), want.size());
      ASSERT_GT(got.size(), 2u);
      for (size_t i = 0; i < got.size(); ++i) EXPECT_LT((got[i] - want[i]).abs().max().item<double>(), 1e-12) << i;
    }
  }
}

// The gradients of the adaptive softmax's parameters, tied to the input embedding or not, with one
// output layer sliced per cluster (div_val 1) or one per cluster, and with a cluster that no target
// reaches: as LibTorch's own slices, concatenations and log_softmax give them, written here from
// the module's tensors as Transformer-XL's ProjectedAdaptiveLogSoftmax computes its loss (and, at
// div_val 1, the input embedding's rows, whose gradient the model makes sparse when tied).
TEST(Model, AdaptiveSoftmaxParameterGradientsMatchAnExplicitLibTorchLoss) {
  for (int64_t div_val : {1, 2}) {
    for (bool tied : {true, false}) {
      for (bool every_cluster : {true, false}) {
        SCOPED_TRACE("div_val " + std::to_string(div_val) + (tied ? ", tied" : ", untied") +
                     (every_cluster ? "" : ", the last cluster without targets"));
        ModelConfig c = small_adaptive_config();
        c.div_val = div_val;
        c.tie_weight = tied;
        auto m = make_model(c);
        m->train();
        const auto& crit = m->crit;
        Tensor h = torch::randn({9, c.d_model}, torch::kFloat64).requires_grad_();
        Tensor target = every_cluster ? torch::tensor({3, 12, 24, 25, 39, 0, 10, 30, 9}, torch::kLong)
                                      : torch::tensor({3, 12, 24, 2, 19, 0, 10, 20, 9}, torch::kLong);
        Tensor input = torch::tensor({{1, 30, 12}, {39, 5, 22}}, torch::kLong);  // the embedding's own use
        Tensor weights = torch::rand({9}, torch::kFloat64), emb_weights = torch::randn({2, 3, c.d_model}, torch::kFloat64);
        auto explicit_nll = [&] {
          const auto& ends = crit->cutoff_ends;
          auto rows = [&](int64_t i) {  // weight and bias of cluster i's rows
            const auto& layer = crit->layers[div_val == 1 ? 0 : static_cast<size_t>(i)];
            if (div_val != 1) return std::make_pair(layer->weight, layer->bias);
            return std::make_pair(layer->weight.slice(0, ends[i], ends[i + 1]), layer->bias.slice(0, ends[i], ends[i + 1]));
          };
          auto log_softmax_of = [&](int64_t i, const Tensor& w, const Tensor& b) {
            const Tensor& proj = crit->projections[static_cast<size_t>(i)];
            return torch::log_softmax(torch::matmul(proj.defined() ? torch::matmul(h, proj) : h, w.t()) + b, 1);
          };
          auto [w0, b0] = rows(0);
          Tensor head = log_softmax_of(0, torch::cat({w0, crit->cluster_weight}), torch::cat({b0, crit->cluster_bias}));
          std::vector<Tensor> nll;
          for (int64_t n = 0; n < 9; ++n) {
            const int64_t y = target[n].item<int64_t>();
            int64_t i = 0;
            while (y >= ends[i + 1]) ++i;
            if (i == 0) {
              nll.push_back(-head[n][y]);
            } else {
              auto [w, b] = rows(i);
              nll.push_back(-head[n][head.size(1) - i] - log_softmax_of(i, w, b)[n][y - ends[i]]);
            }
          }
          return torch::stack(nll);
        };
        // The input embedding's rows, scaled (div_val 1 here has no projection).
        auto explicit_embedding = [&] {
          const Tensor& w = m->word_emb->embeddings[0]->weight;
          return w.index_select(0, input.reshape(-1)).view({2, 3, c.d_model}) * std::sqrt(static_cast<double>(c.d_model));
        };
        auto grads = [&](const Tensor& nll, const Tensor& embedded) {
          m->zero_grad();
          h.mutable_grad() = Tensor();
          ((nll * weights).sum() + (embedded * emb_weights).sum()).backward();
          std::vector<Tensor> g{h.grad().clone()};
          for (auto& p : m->parameters()) {
            if (!p.grad().defined()) continue;
            EXPECT_FALSE(p.grad().is_sparse());
            g.push_back(p.grad().clone());
          }
          return g;
        };
        auto got = grads(m->crit(h, target), m->word_emb(input));
        auto want = grads(explicit_nll(), div_val == 1 ? explicit_embedding() : m->word_emb(input));
        ASSERT_EQ(got.size(), want.size());
        ASSERT_GT(got.size(), 4u);
        for (size_t i = 0; i < got.size(); ++i) EXPECT_LT((got[i] - want[i]).abs().max().item<double>(), 1e-12) << i;
      }
    }
  }
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
