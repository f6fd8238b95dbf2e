// Sampling obeys top-k/top-p, draws what its fully sorted definition draws (a token excluded
// included) and is reproducible; prompts leave an open last line open; generation carries memory.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>

#include "support/eval_support.h"
#include "xl/eval/evaluator.h"
#include "xl/eval/generate.h"
#include "xl/util/error.h"

using namespace xl;
using xl::eval::EvalResult;
using xl::eval::EvalSettings;
using xl::model::ModelConfig;
using xl::model::TransformerXL;
using xl::test::eval_config;
using xl::test::eval_model;
using xl::test::random_ids;

TEST(Eval, SamplingObeysTopKTopPAndIsReproducible) {
  // log-probabilities of a 6-token distribution, most likely first: 3, 0, 5, 1, 4, 2.
  auto p = torch::tensor({0.25, 0.1, 0.02, 0.4, 0.03, 0.2}, torch::kDouble).log();
  xl::eval::SampleSettings s;
  s.top_k = 1;
  xl::Rng rng(1);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(xl::eval::sample_token(p, s, rng), 3);
  s.top_k = 0;
  s.temperature = 0;
  EXPECT_EQ(xl::eval::sample_token(p, s, rng), 3);
  s.temperature = 1;
  s.top_k = 3;
  std::map<int32_t, int> seen;
  for (int i = 0; i < 3000; ++i) ++seen[xl::eval::sample_token(p, s, rng)];
  EXPECT_EQ(seen.size(), 3u);
  for (int32_t id : {3, 0, 5}) EXPECT_GT(seen[id], 0) << id;
  EXPECT_NEAR(seen[3] / 3000.0, 0.4 / 0.85, 0.04);
  s.top_k = 0;
  s.top_p = 0.6;  // 0.4 + 0.25 reaches it: tokens 3 and 0
  seen.clear();
  for (int i = 0; i < 2000; ++i) ++seen[xl::eval::sample_token(p, s, rng)];
  EXPECT_EQ(seen.size(), 2u);
  // The same generator state draws the same sequence.
  xl::Rng a(9), b(9);
  s.top_p = 1;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(xl::eval::sample_token(p, s, a), xl::eval::sample_token(p, s, b));
}

namespace {

// sample_token's definition written out: every candidate sorted by falling probability (ties:
// lower id), the mass summed in id order, the nucleus and the draw walked in sorted order.
int32_t naive_sample(const torch::Tensor& log_probs, const xl::eval::SampleSettings& s, xl::Rng& rng) {
  const auto lp = log_probs.contiguous();
  const double* p = lp.data_ptr<double>();
  const int32_t v = static_cast<int32_t>(lp.numel());
  std::vector<int32_t> sorted(static_cast<size_t>(v));
  std::iota(sorted.begin(), sorted.end(), 0);
  std::sort(sorted.begin(), sorted.end(), [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  if (s.temperature <= 0 || s.top_k == 1) return sorted[0];
  if (s.top_k > 0 && s.top_k < v) sorted.resize(static_cast<size_t>(s.top_k));
  std::vector<int32_t> by_id = sorted;
  std::sort(by_id.begin(), by_id.end());
  const double inv_t = 1.0 / s.temperature;
  const double top = p[sorted[0]] * inv_t;
  auto w = [&](int32_t id) { return std::exp(p[id] * inv_t - top); };
  double total = 0;
  for (int32_t id : by_id) total += w(id);
  size_t n = sorted.size();
  if (s.top_p < 1) {
    double cum = 0, kept = 0;
    for (size_t i = 0; i < sorted.size(); ++i) {
      cum += w(sorted[i]) / total;
      kept += w(sorted[i]);
      if (cum >= s.top_p) {
        n = i + 1;
        break;
      }
    }
    total = kept;
  }
  double u = rng.uniform() * total;
  for (size_t i = 0; i < n; ++i)
    if ((u -= w(sorted[i])) < 0) return sorted[i];
  return sorted[n - 1];
}

}  // namespace

// sample_token against its definition written out (naive_sample). Random distributions, ties among them, every filter; the same generator states draw the same ids.
TEST(Eval, SamplingDrawsWhatTheFullySortedDefinitionDraws) {
  auto check = [&](const torch::Tensor& lp, const std::string& what, const std::vector<double>& temperatures,
                   const std::vector<int64_t>& top_ks, const std::vector<double>& top_ps) {
    for (double temperature : temperatures)
      for (int64_t top_k : top_ks)
        for (double top_p : top_ps) {
          xl::eval::SampleSettings s{temperature, top_k, top_p};
          xl::Rng a(lp.numel() * 7 + top_k), b(lp.numel() * 7 + top_k);
          for (int i = 0; i < 8; ++i)
            ASSERT_EQ(xl::eval::sample_token(lp, s, a), naive_sample(lp, s, b))
                << what << ", T " << temperature << ", k " << top_k << ", p " << top_p << ", draw " << i;
        }
  };
  torch::manual_seed(3);
  for (int64_t v : {1, 2, 7, 300, 5000}) {
    for (std::string kind : {"", " with ties", " with impossible tokens", " unnormalised"}) {
      auto logits = torch::randn({v}, torch::kDouble) * 3;
      if (kind == " with ties") logits = logits.round();  // a few dozen distinct values, many tokens each
      if (kind == " with impossible tokens") {  // probability 0 (log-probability -inf), but not for token 0
        auto impossible = torch::rand({v}, torch::kDouble) < 0.3;
        impossible[0] = false;
        logits.masked_fill_(impossible, -std::numeric_limits<double>::infinity());
      }
      // Logits work too (the mass is summed anyway), positive and negative alike.
      check(kind == " unnormalised" ? logits : torch::log_softmax(logits, 0), "V " + std::to_string(v) + kind, {0.0, 0.7, 1.0, 2.5}, {0, 1, 5, 1000},
            {1.0, 0.9, 0.3});
    }
  }
  // Nearly flat distributions, as an untrained model or a high temperature gives: the draw walks
  // deep, through large groups of candidates whose leading bits agree (and, rounded, whole groups
  // of equal ones).
  for (bool ties : {false, true}) {
    auto logits = torch::randn({100000}, torch::kDouble) * 0.02;
    if (ties) logits = (logits * 1000).round() / 1000;
    check(torch::log_softmax(logits, 0), ties ? "flat, with ties" : "flat", {1.0, 2.5}, {0, 1000}, {1.0, 0.9});
  }
  // -0 and +0 are equal, so the lower id comes first.
  xl::Rng rng(1);
  EXPECT_EQ(xl::eval::sample_token(torch::tensor({-1.0, -0.0, 0.0}, torch::kDouble), {0.0, 0, 1.0}, rng), 1);
  // A model gone wrong is named, not sampled from.
  const auto nan = torch::tensor({-1.0, std::nan(""), -2.0}, torch::kDouble);
  EXPECT_THROW(xl::eval::sample_token(nan, {}, rng), xl::Error);
}

// An excluded token (--no-unk) is never drawn, and the others are drawn as the definition draws
// them from the vocab without it: the same ids (those above it one higher) from the same generator
// states. Greedy decoding takes the next most likely; a vocab of that token alone is refused.
TEST(Eval, SamplingWithATokenExcludedDrawsAsFromTheVocabWithoutIt) {
  torch::manual_seed(5);
  for (int64_t v : {2, 7, 300}) {
    const auto lp = torch::log_softmax(torch::randn({v}, torch::kDouble) * 3, 0);
    const int32_t most_likely = static_cast<int32_t>(lp.argmax().item<int64_t>());
    for (int32_t excluded : {most_likely, int32_t{0}, static_cast<int32_t>(v - 1)}) {
      const auto rest = torch::cat({lp.narrow(0, 0, excluded), lp.narrow(0, excluded + 1, v - excluded - 1)});
      for (auto [temperature, top_k, top_p] : {std::tuple{1.0, int64_t{0}, 1.0}, {0.7, int64_t{5}, 1.0}, {1.0, int64_t{0}, 0.5},
                                               {0.0, int64_t{0}, 1.0}}) {
        xl::eval::SampleSettings s{temperature, top_k, top_p};
        xl::eval::SampleSettings without = s;
        s.excluded = excluded;
        xl::Rng a(v + excluded), b(v + excluded);
        for (int i = 0; i < 50; ++i) {
          const int32_t id = xl::eval::sample_token(lp, s, a);
          const int32_t expected = naive_sample(rest, without, b);
          ASSERT_NE(id, excluded);
          ASSERT_EQ(id, expected >= excluded ? expected + 1 : expected)
              << "V " << v << ", excluded " << excluded << ", T " << temperature << ", k " << top_k << ", draw " << i;
        }
      }
    }
  }
  xl::eval::SampleSettings s;
  s.excluded = 0;
  xl::Rng rng(1);
  try {
    xl::eval::sample_token(torch::zeros({1}, torch::kDouble), s, rng);
    FAIL() << "drew from a vocab of the excluded token alone";
  } catch (const xl::Error& e) {
    EXPECT_EQ(e.code(), xl::kExitUsage);
  }
}

// A word prompt's last line is continued unless it ends with its newline.
TEST(Eval, PromptsLeaveAnOpenLastLineOpen) {
  xl::text::Vocab words(xl::text::VocabType::kWord, {"<eos>", "<unk>", "a", "b"}, {}, 2);
  xl::text::Tokenizer tok(words);
  auto ids = [&](const std::string& text) { return xl::eval::prompt_ids(tok, words, text, "prompt"); };
  EXPECT_EQ(ids("a b"), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(ids("a b\n"), (std::vector<int32_t>{2, 3, 0}));
  EXPECT_EQ(ids("a\nb  "), (std::vector<int32_t>{2, 0, 3}));
  EXPECT_EQ(ids("a\n\n"), (std::vector<int32_t>{2, 0, 0}));
  EXPECT_EQ(ids("a\n  "), (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(ids("a\r"), (std::vector<int32_t>{2, 0}));  // a lone CR ends a line too
  EXPECT_EQ(ids("a\rb"), (std::vector<int32_t>{2, 0, 3}));
  EXPECT_EQ(ids("a\r\n"), (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(ids("a <eos>"), (std::vector<int32_t>{2, 0}));  // a written <eos> is kept
  EXPECT_TRUE(ids("").empty());
  xl::text::Vocab moses_words(xl::text::VocabType::kWord, {"<eos>", "<unk>", "a", ","}, {}, 2);
  xl::text::Tokenizer moses(moses_words, false, xl::text::Pretokenizer::kMoses);
  EXPECT_EQ(xl::eval::prompt_ids(moses, moses_words, "a,", "prompt"), (std::vector<int32_t>{2, 3}));
  xl::text::Vocab chars(xl::text::VocabType::kChar, {"<unk>", "a", "\n"}, {}, 1);
  EXPECT_EQ(xl::eval::prompt_ids(xl::text::Tokenizer(chars), chars, "a\n", "prompt"), (std::vector<int32_t>{1, 2}));
}

TEST(Eval, GenerationIsReproducibleAndCarriesMemory) {
  auto m = eval_model(eval_config(), torch::kFloat32);
  xl::eval::GenerateSettings g;
  g.length = 30;
  g.tgt_len = 4;
  g.mem_len = 16;
  g.sampling.top_k = 5;
  std::vector<int32_t> prompt = random_ids(11, 13, 7);
  xl::Rng r1(3), r2(3), r3(4);
  std::vector<int32_t> streamed;
  auto a = xl::eval::generate(m, prompt, g, r1, [&](int32_t id) { streamed.push_back(id); });
  auto b = xl::eval::generate(m, prompt, g, r2, nullptr);
  auto c = xl::eval::generate(m, prompt, g, r3, nullptr);
  EXPECT_EQ(a.size(), 30u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, streamed);
  EXPECT_NE(a, c);
  EXPECT_TRUE(m->is_training());
  // Greedy decoding is the argmax of the model's next-token distribution over the full context.
  g.sampling.top_k = 1;
  g.length = 3;
  g.mem_len = 100;
  xl::Rng r4(1);
  auto greedy = xl::eval::generate(m, prompt, g, r4, nullptr);
  m->eval();
  std::vector<int32_t> ctx = prompt;
  for (int32_t id : greedy) {
    torch::NoGradGuard ng;
    auto mem = m->new_memory();
    xl::model::ForwardOptions o;
    auto in = torch::tensor(std::vector<int64_t>(ctx.begin(), ctx.end()), torch::kLong).view({1, -1});
    auto h = m->hidden(in, mem, o);
    auto lp = m->log_probs(h.select(1, h.size(1) - 1));
    EXPECT_EQ(lp.argmax(-1).item<int64_t>(), id);
    ctx.push_back(id);
  }
  // A memory of 2^40 slots holds the whole context, without positional keys of that size.
  g.mem_len = int64_t{1} << 40;
  xl::Rng r6(1);
  EXPECT_EQ(xl::eval::generate(m, prompt, g, r6, nullptr), greedy);
  // A memory shorter than the generation slides (its kept projections move to new buffers now and
  // then): the same tokens as projecting the memory again for every token. Weights of scale 0.5
  // make the tokens depend on the memory.
  ModelConfig strong = eval_config();
  strong.init_std = 0.5;
  m = eval_model(strong, torch::kFloat32);
  g.length = 40;
  g.mem_len = 5;
  xl::Rng r5(1);
  auto slid = xl::eval::generate(m, prompt, g, r5, nullptr);
  m->eval();
  torch::NoGradGuard ng;
  auto mem = m->new_memory();
  xl::model::ForwardOptions o;
  o.mem_len = g.mem_len;
  torch::Tensor last;
  for (size_t pos = 0; pos < prompt.size(); pos += static_cast<size_t>(g.tgt_len)) {
    const size_t end = std::min(prompt.size(), pos + static_cast<size_t>(g.tgt_len));
    auto in = torch::tensor(std::vector<int64_t>(prompt.begin() + pos, prompt.begin() + end), torch::kLong).view({1, -1});
    last = m->hidden(in, mem, o).select(1, static_cast<int64_t>(end - pos) - 1);
  }
  for (int32_t id : slid) {
    EXPECT_EQ(m->log_probs(last).argmax(-1).item<int64_t>(), id);
    last = m->hidden(torch::tensor({{static_cast<int64_t>(id)}}, torch::kLong), mem, o).select(1, 0);
  }
}
