// Structural head pruning: a pruned model computes what the full model computes with the removed
// heads masked, over several segments with memory, for char-level and adaptive models, in float32
// and float64; it is smaller, and it survives a checkpoint round trip.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "xl/checkpoint/checkpoint.h"
#include "xl/model/head_pruning.h"
#include "xl/model/model_io.h"
#include "xl/util/error.h"
#include "support/model_sizes.h"

using namespace xl;
using namespace xl::model;
using torch::Tensor;
namespace fs = std::filesystem;

namespace {

ModelConfig char_config() {
  return xl::test::model_of_sizes(13, 3, 16, 4, 5, 24);  // tokens, layers, d_model, heads, d_head, d_inner
}

ModelConfig adaptive_config(bool untie_r) {
  ModelConfig c = char_config();
  c.n_token = 40;
  c.n_layer = 4;
  c.cutoffs = {10, 25};
  c.div_val = 2;
  c.d_embed = 12;
  c.tie_projs = {false, true, true};
  c.pre_lnorm = true;
  c.same_length = true;
  c.clamp_len = 7;
  c.untie_r = untie_r;
  return c;
}

TransformerXL make_model(const ModelConfig& c, torch::Dtype dtype, uint64_t seed = 3) {
  TransformerXL m(c);
  m->reset_parameters(seed);
  {
    // Non-zero biases and u, v, so that every copied tensor matters.
    torch::NoGradGuard g;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 100);
    for (auto& [name, t] : m->named_tensors())
      if (name != "pos_emb.inv_freq") t.add_(torch::empty(t.sizes()).normal_(0, 0.1, gen));
  }
  m->to(dtype);
  m->eval();
  return m;
}

Tensor tokens(int64_t b, int64_t t, int64_t v, int seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randint(0, v, {b, t}, gen, torch::kLong);
}

struct Outputs {
  std::vector<Tensor> hidden, nll;
};

// Four segments of 5 tokens with memory 7 (memory shorter and longer than a segment).
Outputs run(TransformerXL& m, const Tensor& head_mask) {
  torch::NoGradGuard g;
  Outputs out;
  Memory mem = m->new_memory();
  ForwardOptions o;
  o.mem_len = 7;
  o.head_mask = head_mask;
  for (int s = 0; s < 4; ++s) {
    Tensor input = tokens(2, 5, m->config.n_token, 10 + s), target = tokens(2, 5, m->config.n_token, 50 + s);
    Tensor h = m->hidden(input, mem, o);
    out.hidden.push_back(h);
    out.nll.push_back(m->crit(h.reshape({-1, m->config.d_model}), target.reshape({-1})));
  }
  return out;
}

void expect_close(const Outputs& a, const Outputs& b, double tol, const std::string& what) {
  ASSERT_EQ(a.hidden.size(), b.hidden.size());
  for (size_t s = 0; s < a.hidden.size(); ++s) {
    double dh = (a.hidden[s] - b.hidden[s]).abs().max().item<double>();
    double dn = (a.nll[s] - b.nll[s]).abs().max().item<double>();
    EXPECT_LE(dh, tol) << what << " segment " << s << " hidden";
    EXPECT_LE(dn, tol) << what << " segment " << s << " nll";
  }
}

std::vector<Tensor> keep_patterns(const ModelConfig& c) {
  std::vector<Tensor> keeps;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77);
  for (int k = 0; k < 3; ++k) keeps.push_back(torch::rand({c.n_layer, c.n_head}, gen) < 0.6);
  Tensor whole = torch::ones({c.n_layer, c.n_head}, torch::kBool);
  whole[1].fill_(false);  // a whole layer removed
  whole[0][2] = false;
  keeps.push_back(whole);
  Tensor one_each = torch::zeros({c.n_layer, c.n_head}, torch::kInt64);  // 0/1 numbers, one head per layer
  for (int64_t l = 0; l < c.n_layer; ++l) one_each[l][(l * 3) % c.n_head] = 1;
  keeps.push_back(one_each);
  keeps.push_back(torch::zeros({c.n_layer, c.n_head}, torch::kBool));  // every head removed
  return keeps;
}

std::vector<std::pair<std::string, ModelConfig>> configs() {
  return {{"char", char_config()}, {"adaptive", adaptive_config(false)}, {"adaptive-untie_r", adaptive_config(true)}};
}

}  // namespace

TEST(HeadPruning, RemovalEqualsMaskingOverSegmentsWithMemory) {
  for (auto [name, cfg] : configs()) {
    for (auto [dtype, tol] : {std::make_pair(torch::kFloat32, 1e-5), std::make_pair(torch::kFloat64, 1e-10)}) {
      auto model = make_model(cfg, dtype);
      for (const Tensor& keep : keep_patterns(cfg)) {
        auto pruned = remove_heads(model, keep);
        auto want = run(model, keep_to_head_mask(cfg, keep, dtype));
        auto got = run(pruned, Tensor());
        std::ostringstream what;
        what << name << " " << dtype << " keep " << keep.to(torch::kLong).view({-1});
        expect_close(want, got, tol, what.str());
        EXPECT_EQ(pruned->config.heads_per_layer, kept_head_counts(cfg, keep)) << what.str();
        EXPECT_TRUE(pruned->config.per_layer_biases());
        EXPECT_EQ(pruned->named_tensors()[0].second.scalar_type(), dtype);
      }
    }
  }
}

TEST(HeadPruning, KeepingEveryHeadChangesNothing) {
  for (auto [name, cfg] : configs()) {
    auto model = make_model(cfg, torch::kFloat64);
    std::vector<std::pair<std::string, Tensor>> before;
    for (auto& [n, t] : model->named_tensors()) before.emplace_back(n, t.clone());
    auto pruned = remove_heads(model, torch::ones({cfg.n_layer, cfg.n_head}));
    auto want = run(model, Tensor()), got = run(pruned, Tensor());
    for (size_t s = 0; s < want.hidden.size(); ++s) {
      EXPECT_TRUE(torch::equal(want.hidden[s], got.hidden[s])) << name << " segment " << s;
      EXPECT_TRUE(torch::equal(want.nll[s], got.nll[s])) << name << " segment " << s;
    }
    // The source model is untouched.
    auto after = model->named_tensors();
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(torch::equal(after[i].second, before[i].second)) << after[i].first;
  }
}

TEST(HeadPruning, PrunedModelHasFewerParametersByExactlyTheRemovedHeads) {
  for (auto [name, cfg] : configs()) {
    auto model = make_model(cfg, torch::kFloat32);
    for (const Tensor& keep : keep_patterns(cfg)) {
      auto pruned = remove_heads(model, keep);
      auto counts = kept_head_counts(cfg, keep);
      int64_t kept = 0;
      for (int64_t h : counts) kept += h;
      const int64_t removed = cfg.n_layer * cfg.n_head - kept;
      const int64_t per_head = 5 * cfg.d_head * cfg.d_model;  // q, k, v, r rows and o columns
      // u, v: shared [H, dh] (or per layer) before, per layer for the kept heads after.
      const int64_t biases_before = 2 * cfg.n_head * cfg.d_head * (cfg.untie_r ? cfg.n_layer : 1);
      const int64_t biases_after = 2 * kept * cfg.d_head;
      EXPECT_EQ(pruned->parameter_count(), model->parameter_count() - removed * per_head - biases_before + biases_after)
          << name;
      if (removed > 0) {
        EXPECT_LT(pruned->parameter_count(true), model->parameter_count(true)) << name;
      }
    }
  }
}

TEST(HeadPruning, PruningAPrunedModelIndexesItsRemainingHeads) {
  ModelConfig cfg = adaptive_config(false);
  auto model = make_model(cfg, torch::kFloat64);
  Tensor first = torch::tensor({1, 0, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 1, 0}, torch::kInt64).view({4, 4});
  auto once = remove_heads(model, first);
  // Second pattern over the remaining heads (first heads_in_layer(l) entries of each row count).
  Tensor second = torch::tensor({0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 0, 1, 1}, torch::kInt64).view({4, 4});
  auto twice = remove_heads(once, second);
  // The combined keep pattern in the original head numbering.
  Tensor combined = torch::zeros({4, 4}, torch::kBool);
  for (int64_t l = 0; l < 4; ++l) {
    auto kept1 = kept_heads(cfg, first, l);
    for (int64_t j : kept_heads(once->config, second, l)) combined[l][kept1[static_cast<size_t>(j)]] = true;
  }
  expect_close(run(model, keep_to_head_mask(cfg, combined, torch::kFloat64)), run(twice, Tensor()), 1e-10, "twice");
  EXPECT_EQ(twice->config.heads_per_layer, kept_head_counts(cfg, combined));
}

TEST(HeadPruning, PrunedCheckpointRoundTripGivesIdenticalOutputs) {
  fs::path dir = fs::temp_directory_path() / ("xl-prune-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (auto [name, cfg] : configs()) {
    auto model = make_model(cfg, torch::kFloat32);
    Tensor keep = keep_patterns(cfg)[3];  // includes a layer with no heads
    auto pruned = remove_heads(model, keep);
    xl::checkpoint::Checkpoint ckpt;
    ckpt.phase = "pruned";
    ckpt.model_config = pruned->config.to_json();
    ckpt.train_config = nullptr;
    ckpt.state = {};
    std::vector<std::string> pieces;
    for (int64_t i = 0; i < cfg.n_token; ++i) pieces.push_back("w" + std::to_string(i));
    ckpt.vocab = xl::text::Vocab(xl::text::VocabType::kWord, pieces, std::vector<int64_t>(pieces.size(), 1), 0);
    ckpt.model = model_tensors(pruned);
    const std::string path = (dir / (name + ".h5")).string();
    xl::checkpoint::save(path, ckpt, false);
    auto loaded = xl::checkpoint::load(path);
    auto back = model_from_checkpoint(loaded, path);
    EXPECT_EQ(back->config.heads_per_layer, pruned->config.heads_per_layer);
    auto want = run(pruned, Tensor()), got = run(back, Tensor());
    for (size_t s = 0; s < want.hidden.size(); ++s) {
      EXPECT_TRUE(torch::equal(want.hidden[s], got.hidden[s])) << name << " segment " << s;
      EXPECT_TRUE(torch::equal(want.nll[s], got.nll[s])) << name << " segment " << s;
    }
  }
  fs::remove_all(dir);
}

TEST(HeadPruning, KeepPatternsAreValidated) {
  ModelConfig cfg = char_config();
  auto model = make_model(cfg, torch::kFloat32);
  auto code_of = [&](const Tensor& keep) {
    try {
      remove_heads(model, keep);
    } catch (const xl::Error& e) {
      return e.code();
    }
    return 0;
  };
  EXPECT_EQ(code_of(torch::ones({2, 4})), xl::kExitDataErr);
  EXPECT_EQ(code_of(torch::ones({3, 5})), xl::kExitDataErr);
  EXPECT_EQ(code_of(torch::full({3, 4}, 0.5)), xl::kExitDataErr);
  EXPECT_EQ(code_of(torch::ones({3, 4})), 0);
  // Entries beyond a pruned layer's heads are ignored.
  ModelConfig p = cfg;
  p.heads_per_layer = {4, 2, 0};
  Tensor k = heads_kept_mask(p, torch::ones({3, 4}));
  EXPECT_EQ(k.sum().item<int64_t>(), 6);
  EXPECT_TRUE(torch::equal(all_heads_mask(p), k));
}
