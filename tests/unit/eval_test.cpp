// Evaluation: streams cover every token, batching and padding change nothing, segmentation is
// invisible when the memory holds the whole stream, warm-up and token budgets, head masks, the
// model's state is restored; sampling obeys top-k/top-p and is reproducible.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>

#include "xl/eval/evaluator.h"
#include "xl/eval/generate.h"
#include "xl/train/adam.h"
#include "xl/util/error.h"
#include "xl/util/rng.h"
#include "model_sizes.h"

using namespace xl;
using xl::eval::EvalResult;
using xl::eval::EvalSettings;
using xl::model::ModelConfig;
using xl::model::TransformerXL;

namespace {

ModelConfig eval_config() {
  ModelConfig c = xl::test::model_of_sizes(13, 2, 16, 2, 8, 24);  // tokens, layers, d_model, heads, d_head, d_inner
  c.dropout = 0.1;  // evaluation must switch it off
  return c;
}

TransformerXL eval_model(const ModelConfig& c, torch::Dtype dtype) {
  TransformerXL m(c);
  m->reset_parameters(7);
  m->to(dtype);
  m->train();  // evaluation puts it in eval mode and back
  return m;
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  xl::Rng rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(vocab)));
  return ids;
}

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
