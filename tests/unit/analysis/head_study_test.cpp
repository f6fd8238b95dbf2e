// Head studies: ablation rows and layer deviations, importance scores, iterative pruning.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <functional>

#include "xl/analysis/head_ablation.h"
#include "xl/analysis/head_importance.h"
#include "xl/analysis/head_report.h"
#include "xl/analysis/iterative_pruning.h"
#include "xl/model/head_pruning.h"
#include "xl/util/error.h"
#include "xl/util/stats.h"
#include "support/model_sizes.h"

using namespace xl;

namespace {

model::TransformerXL tiny_model(int seed = 1) {
  torch::manual_seed(seed);
  model::ModelConfig c = xl::test::model_of_sizes(13, 2, 16, 3, 4, 16);  // tokens, layers, d_model, heads, d_head, d_inner
  model::TransformerXL m(c);
  m->reset_parameters(3);
  for (auto& p : m->parameters()) p.data().add_(torch::randn_like(p) * 0.3);  // heads that matter
  m->eval();
  return m;
}

// The studies' evaluation (and importance passes): 8-token segments, 8 of memory, 2 streams.
template <typename Settings = eval::EvalSettings>
Settings short_segments() {
  Settings s;
  s.tgt_len = 8;
  s.mem_len = 8;
  s.batch_size = 2;
  return s;
}

std::vector<int32_t> stream(int n) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = (i * 7 + i / 5) % 13;
  return ids;
}

}  // namespace

TEST(HeadStudy, AblateOneGivesOneRowPerHeadAndTheSampleStddev) {
  auto m = tiny_model(1);
  eval::EvalSettings s = short_segments();
  auto ids = stream(200);
  auto a = analysis::ablate_each_head([&] { return m; }, ids, s, 1);
  ASSERT_EQ(a.heads.size(), 6u);
  EXPECT_NEAR(a.base_loss, eval::evaluate(m, ids, s).loss(), 1e-9);
  // Each row is the evaluation with exactly that head masked.
  eval::EvalSettings one = s;
  one.head_mask = torch::ones({2, 3});
  one.head_mask[1][2] = 0;
  EXPECT_NEAR(a.heads[5].loss, eval::evaluate(m, ids, one).loss(), 1e-9);
  EXPECT_EQ(a.heads[5].layer, 1);
  EXPECT_EQ(a.heads[5].head, 2);
  auto rows = analysis::ablation_rows({"m.h5", a}, xl::eval::Metric(xl::text::VocabType::kByte));
  int heads = 0, layers = 0;
  for (const auto& r : rows) {
    heads += r["event"] == "head";
    layers += r["event"] == "layer";
  }
  EXPECT_EQ(heads, 6);
  EXPECT_EQ(layers, 2);
  // Two workers give the same table.
  auto b = analysis::ablate_each_head([&] { return tiny_model(1); }, ids, s, 2);
  for (size_t i = 0; i < a.heads.size(); ++i) EXPECT_NEAR(b.heads[i].loss, a.heads[i].loss, 1e-5);
  // The paper's Table 3, layer 1 upper row: seven -0.01 and one 0.77 give 0.28.
  EXPECT_NEAR(xl::stats::sample_stddev({-0.01, -0.01, -0.01, 0.77, -0.01, -0.01, -0.01, -0.01}), 0.2758, 1e-3);
}

TEST(HeadStudy, AKeptEvaluationIsTakenOnlyForTheSameModelTokensSettingsAndMask) {
  auto m = tiny_model(1);
  eval::EvalSettings s = short_segments();
  auto ids = stream(200);
  const std::string study = analysis::EvalCache::study_key(m, ids, s);
  EXPECT_EQ(study, analysis::EvalCache::study_key(tiny_model(1), ids, s));  // the same weights, built again
  EXPECT_NE(study, analysis::EvalCache::study_key(tiny_model(2), ids, s));
  auto fewer = ids;
  fewer.pop_back();
  EXPECT_NE(study, analysis::EvalCache::study_key(m, fewer, s));
  for (auto change : std::vector<std::function<void(eval::EvalSettings&)>>{
           [](eval::EvalSettings& e) { e.mem_len = 16; }, [](eval::EvalSettings& e) { e.clamp_len = 4; },
           [](eval::EvalSettings& e) { e.max_tokens = 100; }, [](eval::EvalSettings& e) { e.warmup = true; }}) {
    eval::EvalSettings other = s;
    change(other);
    EXPECT_NE(study, analysis::EvalCache::study_key(m, ids, other));
  }
  const model::ModelConfig& cfg = m->config;
  torch::Tensor mask = torch::ones({2, 3});
  const std::string all = analysis::EvalCache::key(study, cfg, mask);
  mask[1][2] = 0;
  const std::string one_off = analysis::EvalCache::key(study, cfg, mask);
  EXPECT_NE(all, one_off);
  EXPECT_EQ(all, analysis::EvalCache::key(study, cfg, torch::ones({2, 3}, torch::kFloat64)));  // as the evaluation sees it
  // No mask removes no head, as a mask of ones does: xl-eval-longctx's evaluation is xl-prune-heads'.
  EXPECT_EQ(all, analysis::EvalCache::key(study, cfg, torch::Tensor()));
  // Beside a layer pruned to 2 heads, its third entry removes nothing.
  model::ModelConfig pruned = cfg;
  pruned.heads_per_layer = {3, 2};
  EXPECT_EQ(all, analysis::EvalCache::key(study, pruned, mask));
  mask[0][0] = 0;
  EXPECT_NE(analysis::EvalCache::key(study, pruned, mask), analysis::EvalCache::key(study, cfg, mask));
  EXPECT_NE(analysis::EvalCache::key(study, pruned, mask), one_off);

  // A study with a cache: a second run evaluates nothing and gives the same table, to the bit.
  const std::string file = ::testing::TempDir() + "kept-" + std::to_string(getpid()) + ".jsonl";
  std::remove(file.c_str());
  analysis::EvalCache first(file);
  auto a = analysis::ablate_each_head([&] { return m; }, ids, s, 1, nullptr, &first);
  EXPECT_EQ(a.kept, 0);
  analysis::EvalCache again(file);
  auto b = analysis::ablate_each_head([&] { return m; }, ids, s, 1, nullptr, &again);
  EXPECT_EQ(b.kept, 7);
  EXPECT_EQ(b.base_loss, a.base_loss);
  for (size_t i = 0; i < a.heads.size(); ++i) EXPECT_EQ(b.heads[i].loss, a.heads[i].loss);
  std::remove(file.c_str());
}

TEST(HeadStudy, SidesOfSeveralCheckpointsShowMeansAndIntervals) {
  const eval::EvalSettings s = short_segments();
  const auto ids = stream(120);
  const eval::Metric bpc(text::VocabType::kByte);
  std::vector<analysis::AblationSide> sides(2);
  for (int seed = 1; seed <= 4; ++seed) {
    auto m = tiny_model(seed);
    sides[seed <= 2 ? 0 : 1].push_back({"m" + std::to_string(seed) + ".h5", analysis::ablate_each_head([&] { return m; }, ids, s, 1)});
  }
  // Each checkpoint's own layer deviation, from its rows; the side's line is their mean.
  auto layer_sd = [&](const analysis::LabeledAblation& a, int64_t layer) {
    for (const auto& r : analysis::ablation_rows(a, bpc))
      if (r["event"] == "layer" && r["layer"] == layer) return r["stddev_bpc"].get<double>();
    return -1.0;
  };
  const auto summary = analysis::layer_summary_rows(sides, bpc);
  ASSERT_EQ(summary.size(), 4u);
  for (const auto& row : summary) {
    const auto& side = sides[row["side"].get<size_t>()];
    const int64_t layer = row["layer"];
    const double a = layer_sd(side[0], layer), b = layer_sd(side[1], layer);
    EXPECT_NEAR(row["stddev_bpc_mean"].get<double>(), (a + b) / 2, 1e-12);
    // Two values: the interval is t(0.975, 1) = 12.706 times |a - b| / 2.
    EXPECT_NEAR(row["ci95"][1].get<double>() - row["stddev_bpc_mean"].get<double>(), 12.7062 * std::abs(a - b) / 2, 1e-3 * std::abs(a - b) + 1e-9);
  }
  EXPECT_TRUE(summary[2].contains("stddev_change_pct"));
  const std::string md = analysis::ablation_markdown(sides, bpc);
  EXPECT_NE(md.find("mean over each side's checkpoints"), std::string::npos) << md;
  EXPECT_NE(md.find(" ± "), std::string::npos) << md;
  EXPECT_NE(md.find("m1.h5, m2.h5"), std::string::npos) << md;
}

TEST(HeadStudy, AHeadWhoseOutputColumnsAreZeroHasImportanceZero) {
  torch::manual_seed(2);
  auto m = tiny_model();
  {
    torch::NoGradGuard ng;
    m->layer_list[0]->dec_attn->o_net->weight.narrow(1, 1 * 4, 4).zero_();  // head 1 of layer 0
  }
  analysis::ImportanceSettings s = short_segments<analysis::ImportanceSettings>();
  auto scores = analysis::head_importance(m, stream(200), s).scores;
  EXPECT_EQ(scores[0][1].item<float>(), 0.0f);
  EXPECT_GT(scores[0][0].item<float>(), 0.0f);
  EXPECT_GT(scores[1][2].item<float>(), 0.0f);
  s.normalize_layers = true;
  auto norm = analysis::head_importance(m, stream(200), s).scores;
  EXPECT_NEAR(norm[1].norm().item<double>(), 1.0, 1e-5);
}

// The iterative pruning tests' model (6 heads), settings and schedule (half of the heads a step).
struct PruningStudy {
  model::TransformerXL m = tiny_model();
  const eval::EvalSettings es = short_segments();
  const analysis::ImportanceSettings is = short_segments<analysis::ImportanceSettings>();
  const std::vector<int32_t> ids = stream(160);
  analysis::PruningSchedule sched;
  PruningStudy() { sched.step_percent = 50; }
};

TEST(HeadStudy, IterativePruningFollowsImportanceAndRefusesTooMany) {
  PruningStudy study;
  auto& [m, es, is, ids, sched] = study;
  auto r = analysis::prune_iteratively(m, ids, es, ids, is, sched);
  ASSERT_EQ(r.curve.size(), 3u);  // 0, 3 and 6 of 6 heads
  EXPECT_EQ(r.curve[1].pruned, 3);
  EXPECT_EQ(r.keep.sum().item<int64_t>(), 0);
  // A step of less than one head prunes one a step, to --max-fraction: 10% of 6 heads is 0.6,
  // and 2 x 0.6 rounded is one head again.
  sched.step_percent = 10;
  sched.max_fraction = 0.5;
  auto fine = analysis::prune_iteratively(m, ids, es, ids, is, sched);
  std::vector<int64_t> counts;
  for (const auto& p : fine.curve) counts.push_back(p.pruned);
  EXPECT_EQ(counts, (std::vector<int64_t>{0, 1, 2, 3}));
  sched.max_fraction = 1;
  // The three least important heads go first.
  sched.exact_heads = 3;
  auto first = analysis::prune_iteratively(m, ids, es, ids, is, sched);
  auto order = std::get<0>(r.importance.flatten().sort());
  auto removed = (~first.keep).flatten();
  auto flat = r.importance.flatten();
  double max_removed = flat.masked_select(removed).max().item<double>();
  double min_kept = flat.masked_select(~removed).min().item<double>();
  EXPECT_LE(max_removed, min_kept);
  sched.exact_heads = 7;
  EXPECT_THROW(analysis::prune_iteratively(m, ids, es, ids, is, sched), xl::Error);
}

TEST(HeadStudy, IterativePruningRunAgainTakesItsKeptPassesAndGivesTheSameCurve) {
  PruningStudy study;
  auto& [m, es, is, ids, sched] = study;
  sched.rescore = true;
  const auto plain = analysis::prune_iteratively(m, ids, es, ids, is, sched);
  const std::string file = ::testing::TempDir() + "kept-iterative-" + std::to_string(getpid()) + ".jsonl";
  std::remove(file.c_str());
  analysis::EvalCache first(file);
  const auto a = analysis::prune_iteratively(m, ids, es, ids, is, sched, nullptr, &first);
  // 0, 3 and 6 heads pruned, scored before the first and second steps.
  EXPECT_EQ(a.evaluations, 3);
  EXPECT_EQ(a.scorings, 2);
  EXPECT_EQ(a.kept, 0);
  analysis::EvalCache again(file);
  const auto b = analysis::prune_iteratively(m, ids, es, ids, is, sched, nullptr, &again);
  EXPECT_EQ(b.kept, 5);
  for (const auto* r : {&a, &b}) {
    ASSERT_EQ(r->curve.size(), plain.curve.size());
    for (size_t i = 0; i < plain.curve.size(); ++i) EXPECT_EQ(r->curve[i].loss, plain.curve[i].loss) << i;
    EXPECT_TRUE(torch::equal(r->importance, plain.importance));
    EXPECT_TRUE(torch::equal(r->keep, plain.keep));
  }
  // Kept scores are the computed ones to the bit, and the layer normalisation applies to them.
  analysis::ImportanceSettings n = is;
  n.head_mask = torch::ones({2, 3});
  n.normalize_layers = true;
  const auto fresh = analysis::head_importance(m, ids, n);
  const auto kept = analysis::head_importance(m, ids, n, &again);
  EXPECT_TRUE(kept.kept);
  EXPECT_TRUE(torch::equal(kept.scores, fresh.scores));
  analysis::ImportanceSettings none = n;
  none.head_mask = torch::Tensor();
  EXPECT_TRUE(analysis::head_importance(m, ids, none, &again).kept);  // no mask: every head's
  n.head_mask[0][1] = 0;
  EXPECT_FALSE(analysis::head_importance(m, ids, n, &again).kept);
  n.max_tokens = 16;
  n.head_mask = torch::ones({2, 3});
  EXPECT_FALSE(analysis::head_importance(m, ids, n, &again).kept);
  std::remove(file.c_str());
}
