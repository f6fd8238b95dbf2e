// Evaluation: streams cover every token, batching and padding change nothing, segmentation is
// invisible when the memory holds the whole stream, warm-up and token budgets, head masks, kept
// key/value projections, the model's state is restored. (Sampling and generation: generate_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>

#include "support/eval_support.h"
#include "xl/eval/evaluator.h"
#include "xl/eval/generate.h"
#include "xl/train/adam.h"
#include "xl/util/error.h"

using namespace xl;
using xl::eval::EvalResult;
using xl::eval::EvalSettings;
using xl::model::ModelConfig;
using xl::model::TransformerXL;
using xl::test::eval_config;
using xl::test::eval_model;
using xl::test::random_ids;

namespace {

// Per-token losses by position in the split.
std::map<int64_t, double> per_token(TransformerXL& m, const std::vector<int32_t>& ids, const EvalSettings& s,
                                    EvalResult* result = nullptr) {
  std::map<int64_t, double> out;
  auto r = xl::eval::evaluate(m, ids, s, [&](int64_t, int64_t index, float nll) {
    EXPECT_EQ(out.count(index), 0u) << "index " << index << " scored twice";
    out[index] = nll;
  });
  if (result) *result = r;
  return out;
}

}  // namespace

TEST(Eval, BatchedStreamsEqualEachStreamAlone) {
  auto m = eval_model(eval_config(), torch::kFloat32);
  const int64_t n = 103, b = 4;  // streams of 26, 26, 26, 25 tokens: the last segment is padded
  auto ids = random_ids(n, 13, 1);
  EvalSettings s;
  s.tgt_len = 7;
  s.mem_len = 5;
  s.batch_size = b;
  EvalResult batched;
  auto tokens_b = per_token(m, ids, s, &batched);
  EXPECT_EQ(batched.tokens, n - b);
  EXPECT_EQ(static_cast<int64_t>(tokens_b.size()), n - b);
  EXPECT_TRUE(m->is_training());

  // The same streams evaluated one at a time, batch size 1.
  double sum = 0;
  int64_t count = 0, start = 0;
  EvalSettings one = s;
  one.batch_size = 1;
  for (int64_t i = 0; i < b; ++i) {
    int64_t len = n / b + (i < n % b ? 1 : 0);
    std::vector<int32_t> stream(ids.begin() + start, ids.begin() + start + len);
    EvalResult r;
    auto alone = per_token(m, stream, one, &r);
    EXPECT_EQ(r.tokens, len - 1);
    sum += r.loss_sum;
    count += r.tokens;
    for (const auto& [index, nll] : alone) {
      ASSERT_TRUE(tokens_b.count(start + index)) << "stream " << i << " index " << index;
      EXPECT_NEAR(tokens_b[start + index], nll, 1e-5 * std::max(1.0, std::abs(nll)));
    }
    start += len;
  }
  EXPECT_EQ(count, batched.tokens);
  EXPECT_NEAR(batched.loss_sum, sum, 1e-5 * std::abs(sum));

  // Batch size 1 over the whole split scores N - 1 tokens.
  auto whole = xl::eval::evaluate(m, ids, one);
  EXPECT_EQ(whole.tokens, n - 1);
  EXPECT_NEAR(whole.loss(), whole.loss_sum / (n - 1), 1e-12);
}

TEST(Eval, SegmentationIsInvisibleWhenMemoryHoldsTheWholeStream) {
  ModelConfig c = eval_config();
  c.same_length = true;  // the model's own settings, overridden below
  c.clamp_len = 3;
  auto m = eval_model(c, torch::kFloat64);
  const int64_t n = 61;
  auto ids = random_ids(n, 13, 2);
  EvalSettings s;
  s.batch_size = 2;
  s.mem_len = n;
  s.same_length = 0;
  s.clamp_len = 0;
  s.tgt_len = n;  // one segment
  auto whole = per_token(m, ids, s);
  ASSERT_EQ(static_cast<int64_t>(whole.size()), n - 2);
  for (int64_t tgt : {1, 2, 5, 8, 29, 30}) {
    s.tgt_len = tgt;
    auto seg = per_token(m, ids, s);
    ASSERT_EQ(seg.size(), whole.size()) << "tgt_len " << tgt;
    for (const auto& [index, nll] : whole) EXPECT_NEAR(seg[index], nll, 1e-9) << "tgt_len " << tgt << " index " << index;
  }
  // The overrides are undone and the training flag restored.
  EXPECT_EQ(m->config.clamp_len, 3);
  EXPECT_TRUE(m->config.same_length);
  EXPECT_TRUE(m->is_training());
  // With a short memory, segmentation does matter (the check above is not vacuous).
  s.mem_len = 2;
  s.tgt_len = 5;
  auto shorter = per_token(m, ids, s);
  double diff = 0;
  for (const auto& [index, nll] : whole) diff = std::max(diff, std::abs(shorter[index] - nll));
  EXPECT_GT(diff, 1e-6);
}

// No key is further back than the stream: a memory of 2^40 slots is the whole stream, without
// positional keys or buffers of that size (their allocation would fail).
TEST(Eval, AMemoryLongerThanTheStreamsIsTheWholeStream) {
  auto m = eval_model(eval_config(), torch::kFloat64);
  const int64_t n = 61;
  auto ids = random_ids(n, 13, 5);
  EvalSettings s;
  s.batch_size = 2;
  s.same_length = 0;
  s.tgt_len = n;  // one segment, no memory
  s.mem_len = 0;
  auto whole = per_token(m, ids, s);
  s.same_length = 1;  // every query sees mem_len keys: all of them
  s.tgt_len = 5;
  s.mem_len = int64_t{1} << 40;
  auto long_memory = per_token(m, ids, s);
  ASSERT_EQ(long_memory.size(), whole.size());
  for (const auto& [index, nll] : whole) EXPECT_NEAR(long_memory[index], nll, 1e-9) << "index " << index;
}

TEST(Eval, WarmupScoresOnlySegmentsWhoseMemoryIsFull) {
  auto m = eval_model(eval_config(), torch::kFloat64);
  const int64_t n = 100;
  auto ids = random_ids(n, 13, 3);
  EvalSettings s;
  s.batch_size = 2;  // streams of 50: 49 predictions each
  s.tgt_len = 8;
  s.mem_len = 16;
  auto all = per_token(m, ids, s);
  s.warmup = true;
  EvalResult r;
  auto warm = per_token(m, ids, s, &r);
  // Segments start at 0, 8, 16, ...; the memory is full from position 16 on: 33 per stream.
  EXPECT_EQ(r.tokens, 2 * 33);
  EXPECT_LT(r.tokens, n - 2);
  for (const auto& [index, nll] : warm) EXPECT_NEAR(all.at(index), nll, 1e-12);
  // Without memory every segment is warm.
  s.mem_len = 0;
  EXPECT_EQ(xl::eval::evaluate(m, ids, s).tokens, n - 2);
  // scores_any says beforehand whether evaluation scores anything, also with adaptive span's
  // shorter memories: memories up to and past the streams' 49 positions, segments of 1 to 50.
  ModelConfig span = eval_config();
  span.adaptive_span = true, span.span_max = 12, span.span_ramp = 2;
  auto spanned = eval_model(span, torch::kFloat64);
  {
    torch::NoGradGuard ng;
    for (auto& l : spanned->layer_list) l->dec_attn->span_z.fill_(0.5);  // about 8 positions
  }
  s.warmup = true;
  int scored = 0, empty = 0;
  for (auto* model : {&m, &spanned})
    for (int64_t tgt : {1, 7, 16, 50})
      for (int64_t mem : {1, 15, 40, 48, 49, 50, 1000}) {
        s.tgt_len = tgt;
        s.mem_len = mem;
        const bool any = xl::eval::evaluate(*model, ids, s).tokens > 0;
        EXPECT_EQ(xl::eval::scores_any(*model, n, s), any) << "tgt " << tgt << " mem " << mem;
        (any ? scored : empty)++;
      }
  EXPECT_GT(scored, 0);
  EXPECT_GT(empty, 0);
}

TEST(Eval, HeadMaskOfOnesEqualsNone) {
  ModelConfig c = eval_config();
  auto m = eval_model(c, torch::kFloat32);
  auto ids = random_ids(80, 13, 4);
  EvalSettings s;
  s.batch_size = 3;
  s.tgt_len = 6;
  s.mem_len = 9;
  auto none = xl::eval::evaluate(m, ids, s);
  s.head_mask = torch::ones({c.n_layer, c.n_head});
  auto ones = xl::eval::evaluate(m, ids, s);
  EXPECT_EQ(none.tokens, ones.tokens);
  EXPECT_DOUBLE_EQ(none.loss_sum, ones.loss_sum);
  s.head_mask[1][0] = 0;
  auto pruned = xl::eval::evaluate(m, ids, s);
  EXPECT_GT(std::abs(pruned.loss_sum - none.loss_sum), 1e-6);
  s.head_mask = torch::ones({c.n_layer + 1, c.n_head});
  EXPECT_THROW(xl::eval::evaluate(m, ids, s), xl::Error);
}

TEST(Eval, KeptKeyValueProjectionsAreThoseOfTheMemory) {
  for (bool pre_lnorm : {false, true}) {
    ModelConfig c = eval_config();
    c.pre_lnorm = pre_lnorm;
    auto m = eval_model(c, torch::kFloat64);
    m->eval();
    auto in = torch::tensor(std::vector<int64_t>{1, 5, 2, 7, 3, 3, 9, 0, 4, 12, 6, 8}, torch::kLong).view({2, 6});
    xl::model::ForwardOptions o;
    o.mem_len = 9;  // memory longer than a segment: kept projections are cut with it
    auto inputs = m->new_memory(), kept = m->new_memory();
    {
      torch::NoGradGuard ng;
      for (int seg = 0; seg < 3; ++seg) m->hidden(in, inputs, o);
      o.cache_kv = true;
      for (int seg = 0; seg < 3; ++seg) m->hidden(in, kept, o);
    }
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const auto& lm = kept.layers[static_cast<size_t>(l)];
      auto attn = m->layer_list[static_cast<size_t>(l)]->dec_attn;
      ASSERT_FALSE(lm.kv.empty()) << "layer " << l;
      EXPECT_FALSE(lm.hidden.defined()) << "the inputs are kept beside their projections, layer " << l;
      EXPECT_EQ(lm.length(), 9);
      ASSERT_EQ(lm.kv.rows().sizes(), (std::vector<int64_t>{2, 9, 2, c.n_head, c.d_head}));
      // Written out: the key and value rows of qkv_net applied to the (layer-normed) memory.
      const torch::Tensor& hidden = inputs.layers[static_cast<size_t>(l)].hidden;
      torch::Tensor x = pre_lnorm ? attn->layer_norm(hidden) : hidden;
      torch::Tensor w_kv = attn->qkv_net->weight.narrow(0, c.n_head * c.d_head, 2 * c.n_head * c.d_head);
      torch::Tensor want = torch::matmul(x, w_kv.t()).view({2, 9, 2, c.n_head, c.d_head});
      EXPECT_LT((lm.kv.rows() - want).abs().max().item<double>(), 1e-12) << "layer " << l << " pre_lnorm " << pre_lnorm;
    }
    // With autograd (training) nothing is kept; a memory of projections alone cannot be trained on or saved.
    auto trained = m->new_memory();
    m->hidden(in, trained, o);
    for (const auto& lm : trained.layers) EXPECT_TRUE(lm.kv.empty());
    EXPECT_THROW(m->hidden(in, kept, o), c10::Error);
    xl::checkpoint::TensorList saved;
    EXPECT_THROW(kept.to_tensors(&saved), xl::Error);
  }
}

TEST(Eval, KvCacheBytesAreWhatTheKeptProjectionsTake) {
  // The budget's estimate against the buffers an evaluation really holds, in each product dtype.
  for (auto [dtype, precision] : {std::pair{torch::kFloat64, compute::Precision::kFp32},
                                  {torch::kFloat32, compute::Precision::kFp32},
                                  {torch::kFloat32, compute::Precision::kBf16}}) {
    SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + compute::to_string(precision));
    const ModelConfig c = eval_config();
    auto m = eval_model(c, dtype);
    m->eval();
    auto in = torch::tensor(std::vector<int64_t>{1, 5, 2, 7, 3, 3, 9, 0, 4, 12, 6, 8}, torch::kLong).view({2, 6});
    xl::model::ForwardOptions o;
    o.mem_len = 9;
    o.cache_kv = true;
    auto kept = m->new_memory();
    {
      torch::NoGradGuard ng;
      compute::AutocastScope autocast(precision, torch::kCPU);
      for (int seg = 0; seg < 3; ++seg) m->hidden(in, kept, o);
    }
    int64_t held = 0;
    for (const auto& lm : kept.layers) {
      ASSERT_FALSE(lm.kv.empty());
      held += static_cast<int64_t>(lm.kv.rows().storage().nbytes());
    }
    EXPECT_EQ(held, xl::eval::kv_cache_bytes(m, 2, 9, 6, precision));
  }
}

TEST(Eval, KeptProjectionsChangeNoLoss) {
  // Also for MGK (its extra keys are kept beside keys and values) and adaptive span (memory trimmed
  // to the span, kept projections with it).
  for (const std::string variant : {"rel", "pre_lnorm", "mgk", "span"}) {
    SCOPED_TRACE(variant);
    ModelConfig c = eval_config();
    c.pre_lnorm = variant == "pre_lnorm";
    if (variant == "mgk") c.attention = "mgk";
    if (variant == "span") c.adaptive_span = true, c.span_max = 8, c.span_ramp = 2;
    // float64: LibTorch's products; float32: the CPU kernels, reading the kept rows in place; bf16
    // products (CPU autocast): the rows kept in bf16, as projecting them again gives them.
    for (auto [dtype, precision] : {std::pair{torch::kFloat64, compute::Precision::kFp32},
                                    {torch::kFloat32, compute::Precision::kFp32},
                                    {torch::kFloat32, compute::Precision::kBf16}}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + compute::to_string(precision));
      auto m = eval_model(c, dtype);
      if (variant == "span") {
        torch::NoGradGuard ng;
        for (auto& l : m->layer_list) l->dec_attn->span_z.uniform_(0.1, 0.6);
      }
      auto ids = random_ids(97, 13, 8);  // uneven streams: a short last segment
      EvalSettings s;
      s.batch_size = 3;
      s.tgt_len = 6;
      s.mem_len = 9;
      s.precision = precision;
      EvalResult projected_run, kept_run, short_run;
      s.kv_cache_bytes = 0;
      auto projected = per_token(m, ids, s, &projected_run);
      s.kv_cache_bytes = xl::eval::kv_cache_bytes(m, 3, 9, 6, precision);  // exactly enough
      auto kept = per_token(m, ids, s, &kept_run);
      // The result says which it was (the reports' kv_cache); a byte short, the inputs are kept.
      EXPECT_FALSE(projected_run.kv_cached);
      EXPECT_TRUE(kept_run.kv_cached);
      s.kv_cache_bytes -= 1;
      per_token(m, ids, s, &short_run);
      EXPECT_FALSE(short_run.kv_cached);
      ASSERT_EQ(kept.size(), projected.size());
      const double tolerance = dtype == torch::kFloat64 ? 1e-12 : precision == compute::Precision::kBf16 ? 2e-2 : 2e-5;
      for (const auto& [index, nll] : projected) EXPECT_NEAR(kept[index], nll, tolerance) << "index " << index;
    }
  }
}

// Each layer reuses its positional keys while r_net's weight is unchanged. After the weights move,
// by Adam's fused update (written through the pointer), an in-place op or new data, evaluation must give
// what a model that never evaluated gives with those weights.
TEST(Eval, ReusedPositionalKeysFollowTheWeights) {
  ModelConfig c = eval_config();
  c.init_std = 0.5;  // scores of order 1: the positional keys show in the loss

  const auto ids = random_ids(80, 13, 9);
  EvalSettings s;
  s.batch_size = 2;
  s.tgt_len = 6;
  s.mem_len = 9;
  auto m = eval_model(c, torch::kFloat32);
  auto same_weights = [&] {
    auto fresh = eval_model(c, torch::kFloat32);
    torch::NoGradGuard ng;
    auto from = m->named_parameters();
    for (auto& p : fresh->named_parameters()) p.value().copy_(from[p.key()]);
    return fresh;
  };
  const double before = xl::eval::evaluate(m, ids, s).loss_sum;

  std::vector<std::pair<std::string, torch::Tensor>> params;
  torch::manual_seed(2);
  for (auto& p : m->named_parameters()) {
    params.emplace_back(p.key(), p.value());
    p.value().mutable_grad() = torch::randn_like(p.value());
  }
  xl::train::Adam adam(params, {});
  adam.step(1e-2);
  auto stepped = same_weights();
  const double after_step = xl::eval::evaluate(m, ids, s).loss_sum;
  EXPECT_NE(after_step, before);
  EXPECT_EQ(after_step, xl::eval::evaluate(stepped, ids, s).loss_sum);

  {
    torch::NoGradGuard ng;
    for (auto& layer : m->layer_list) layer->dec_attn->r_net->weight.mul_(1.5);
  }
  auto scaled = same_weights();
  const double after_scale = xl::eval::evaluate(m, ids, s).loss_sum;
  EXPECT_NE(after_scale, after_step);
  EXPECT_EQ(after_scale, xl::eval::evaluate(scaled, ids, s).loss_sum);

  // New data under the same tensor (set_data, as Module::to does) leaves the version as it was.
  for (auto& layer : m->layer_list) {
    const torch::Tensor w = layer->dec_attn->r_net->weight;
    w.set_data(w.detach() * 0.5);
  }
  auto replaced = same_weights();
  const double after_set_data = xl::eval::evaluate(m, ids, s).loss_sum;
  EXPECT_NE(after_set_data, after_scale);
  EXPECT_EQ(after_set_data, xl::eval::evaluate(replaced, ids, s).loss_sum);
}

TEST(Eval, MaxTokensStopsAfterTheSegmentThatReachesIt) {
  auto m = eval_model(eval_config(), torch::kFloat32);
  auto ids = random_ids(200, 13, 5);
  EvalSettings s;
  s.batch_size = 2;
  s.tgt_len = 8;
  s.mem_len = 8;
  s.max_tokens = 20;
  auto r = xl::eval::evaluate(m, ids, s);
  EXPECT_EQ(r.tokens, 32);  // two segments of 2 x 8
}

TEST(Eval, SameLengthWithoutMemoryIsOff) {
  ModelConfig c = eval_config();
  c.same_length = true;
  auto m = eval_model(c, torch::kFloat32);
  auto ids = random_ids(50, 13, 6);
  EvalSettings s;
  s.mem_len = 0;
  s.tgt_len = 10;
  s.batch_size = 2;
  EXPECT_FALSE(xl::eval::effective_same_length(m, s));
  auto r = xl::eval::evaluate(m, ids, s);
  EXPECT_TRUE(std::isfinite(r.loss()));
  s.mem_len = 4;
  EXPECT_TRUE(xl::eval::effective_same_length(m, s));
  EXPECT_TRUE(std::isfinite(xl::eval::evaluate(m, ids, s).loss()));
}

TEST(Eval, RefusesTooFewTokensAndBadSettings) {
  auto m = eval_model(eval_config(), torch::kFloat32);
  EvalSettings s;
  try {
    xl::eval::evaluate(m, {3}, s);
    FAIL() << "one token was accepted";
  } catch (const xl::Error& e) {
    EXPECT_EQ(e.code(), xl::kExitDataErr);
  }
  s.tgt_len = 0;
  try {
    xl::eval::evaluate(m, random_ids(20, 13, 1), s);
    FAIL() << "tgt_len 0 was accepted";
  } catch (const xl::Error& e) {
    EXPECT_EQ(e.code(), xl::kExitUsage);
  }
  s.tgt_len = 4;
  try {
    xl::eval::evaluate(m, {1, 2, 13, 4}, s);  // the vocab has 13 ids
    FAIL() << "an out-of-range id was accepted";
  } catch (const xl::Error& e) {
    EXPECT_EQ(e.code(), xl::kExitDataErr);
  }
  // A short split is cut into fewer streams, each with a prediction.
  s.tgt_len = 4;
  s.batch_size = 10;
  EXPECT_EQ(xl::eval::stream_count(7, 10), 3);
  EXPECT_EQ(xl::eval::evaluate(m, random_ids(7, 13, 1), s).tokens, 7 - 3);
}
