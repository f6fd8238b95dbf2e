// The blocked attention core (float32, BLAS) against the full-matrix path computed in double
// (itself checked against the naive loop in model_attention_test): outputs and all five gradients,
// for segments shorter and longer than a block of query rows, memories of every length and age
// (Skip-Retain runs), causal and same_length masks, keys no query sees, heads read in place and
// (wide rows) copied.
// Training that computes the probabilities again in backward (--attention-probs recompute) gives
// the same bits as keeping them. Also: no gradient => the same output without keeping
// probabilities, and with the keys and values in a larger buffer (evaluation's kept projections)
// or in wider rows (MGK's extra keys beside them); the positional bias a GPU's fused kernel takes,
// against its definition and against the probabilities. With bf16 products (a CPU
// with AVX-512 BF16): the same cases against the full-matrix path in double on the operands rounded
// to bf16, within the rounding of the probabilities and score gradients the kernel rounds too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "xl/compute/blas.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cpu/batched_matmul.h"
#include "xl/kernels/cpu/chunked_attention.h"
#include "xl/kernels/cpu/rel_softmax.h"
#include "xl/model/rel_attention.h"

using namespace xl;
using namespace xl::model;
using torch::Tensor;

namespace {

struct Case {
  int64_t heads, batch, t, dh;
  std::vector<MemoryRun> runs;  // the memory, oldest first, before a segment at position 1000
  bool same_length = false;
  int64_t mem_len = 0;
  int64_t hidden_tail = 0;  // the last keys hidden from every query: they get no gradient
};

constexpr int64_t kPosition = 1000;

int64_t memory_length(const Case& c) {
  int64_t m = 0;
  for (const auto& r : c.runs) m += r.length;
  return m;
}

std::vector<kernels::KeyBlock> key_blocks(const Case& c) {
  LayerMemory mem;
  mem.runs = c.runs;
  return RelMultiHeadAttnImpl::key_blocks(mem, kPosition, c.t);
}

Tensor mask_for(const Case& c) {
  AttentionPass pass;
  pass.same_length = c.same_length;
  pass.mem_len = c.mem_len;
  Tensor mask = pass.mask(c.t, memory_length(c), torch::kCPU);
  mask.narrow(1, mask.size(1) - c.hidden_tail, c.hidden_tail).fill_(true);
  return mask;
}

// The general path from per-head copies: whole score matrices, fused shift + mask + softmax,
// batched products; SCH by gathering the source heads' keys, values and tables. [B, T, H, dh].
Tensor full_matrix(const Case& c, const std::vector<int64_t>& heads, const Tensor& q_u, const Tensor& q_v,
                   const Tensor& kv, const std::vector<Tensor>& tables, const Tensor& mask, double scale) {
  const auto blocks = key_blocks(c);
  const int64_t n = c.heads * c.batch;
  Tensor source = torch::tensor(heads, torch::kLong);
  auto per_head = [&](const Tensor& x) { return x.permute({2, 0, 1, 3}).reshape({n, -1, c.dh}); };
  Tensor kv_src = kv.index_select(3, source);
  Tensor key = per_head(kv_src.select(2, 0)), value = per_head(kv_src.select(2, 1));
  Tensor ac = torch::bmm(per_head(q_u), key.transpose(1, 2));
  std::vector<Tensor> bds;
  for (size_t b = 0; b < blocks.size(); ++b) {
    Tensor r = tables[b].index_select(1, source).permute({1, 2, 0});  // [H, dh, P]
    bds.push_back(torch::bmm(per_head(q_v).reshape({c.heads, c.batch * c.t, c.dh}), r).view({n, c.t, -1}));
  }
  Tensor probs = kernels::relative_attention_probs(ac, bds, blocks, mask, scale);
  return torch::bmm(probs, value).view({c.heads, c.batch, c.t, c.dh}).permute({1, 2, 0, 3});
}

// The largest difference relative to the largest value (at least 1).
double difference(const Tensor& got, const Tensor& want) {
  const double err = (got.to(torch::kFloat64) - want).abs().max().item<double>();
  return err / std::max(1.0, want.abs().max().item<double>());
}

void expect_near(const Tensor& got, const Tensor& want, const char* what, double tolerance = 2e-5) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_LT(difference(got, want), tolerance) << what << " (values up to " << want.abs().max().item<double>() << ")";
}

// bf16: the kernel runs its products in bf16 (CPU autocast), the reference takes the operands
// rounded to bf16.
void check_against_the_full_matrix_path(bool bf16) {
  const compute::Precision precision = bf16 ? compute::Precision::kBf16 : compute::Precision::kFp32;
  auto fresh = [](int64_t m) { return m > 0 ? std::vector<MemoryRun>{{kPosition - m, m}} : std::vector<MemoryRun>{}; };
  const std::vector<Case> cases = {
      {2, 2, 1, 8, fresh(0)},
      {2, 2, 5, 8, fresh(0)},
      {2, 3, 64, 8, fresh(64), false, 64},
      {3, 2, 70, 16, fresh(30), false, 70},
      {2, 2, 130, 8, fresh(130), false, 130},
      {2, 2, 128, 8, fresh(128), false, 128},  // 256 keys: rows of probabilities padded off 1 KB
      {2, 2, 200, 4, fresh(7), false, 200},
      {2, 2, 70, 8, fresh(70), true, 70},
      {2, 1, 130, 8, fresh(40), true, 90},
      {1, 2, 3, 8, fresh(300), false, 300},
      // Skip-Retain: a memory left by a skipped layer, and one of several runs of different ages.
      {2, 2, 70, 8, {{kPosition - 70 - 60, 60}}, false, 60},
      {2, 2, 100, 8, {{kPosition - 400, 30}, {kPosition - 250, 50}, {kPosition - 90, 20}}, false, 100},
      {2, 1, 80, 8, {{kPosition - 300, 50}, {kPosition - 40, 40}}, true, 70},
      // Keys a page apart (2 x H x dh floats = 4 KB): each task works on a copy of its rows.
      {2, 2, 70, 256, fresh(70), false, 70},
      {4, 1, 80, 128, {{kPosition - 300, 50}, {kPosition - 40, 40}}, true, 70},
      // ... but not for a few queries (generation's one), which read each row about once.
      {2, 2, 1, 256, fresh(70), false, 70},
      {2, 1, 15, 256, fresh(70), true, 70},
      // A single query runs on the row kernels: d_head in one pass of registers or more, a row's
      // end masked (wt103's 39), over memories of one run and several.
      {2, 2, 1, 39, fresh(70), false, 70},
      {3, 1, 1, 64, {{kPosition - 300, 50}, {kPosition - 40, 40}}, true, 70},
      {2, 1, 1, 100, fresh(20), false, 20},
      {1, 2, 1, 1, fresh(9), false, 9},
      // Keys no query sees (the widest row block stops short of them), read in place and copied.
      {2, 2, 70, 8, fresh(70), false, 70, 5},
      {2, 2, 70, 256, fresh(70), false, 70, 3},
  };
  torch::manual_seed(11);
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "H=" << c.heads << " B=" << c.batch << " T=" << c.t << " M="
                                    << memory_length(c) << " runs=" << c.runs.size() << " dh=" << c.dh
                                    << " same_length=" << c.same_length << " hidden_tail=" << c.hidden_tail);
    const int64_t k = memory_length(c) + c.t;
    // bf16 products round the operands from 9 queries on (fewer run in fp32: product_operands.h),
    // the probabilities and score gradients too before their products: 2^-9 relative each.
    const bool rounded = bf16 && c.t >= 9;
    const double tolerance = rounded ? 1e-2 : 2e-5;
    const auto blocks = key_blocks(c);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.dh));
    auto make = [](std::vector<int64_t> shape) { return torch::randn(shape).mul_(2).requires_grad_(true); };
    Tensor q_u = make({c.batch, c.t, c.heads, c.dh}), q_v = make({c.batch, c.t, c.heads, c.dh});
    Tensor kv = make({c.batch, k, 2, c.heads, c.dh});
    std::vector<Tensor> tables;
    for (const auto& b : blocks) tables.push_back(make({b.table, c.heads, c.dh}));
    const Tensor mask = mask_for(c);
    const Tensor grad_out = torch::randn({c.batch, c.t, c.heads, c.dh});
    std::vector<int64_t> own(c.heads), shifted(c.heads);
    for (int64_t h = 0; h < c.heads; ++h) own[h] = h, shifted[h] = (h + 1) % c.heads;

    auto wide = [&](const Tensor& x) {  // what the products take, in double
      return (rounded ? x.detach().to(torch::kBFloat16) : x.detach()).to(torch::kFloat64);
    };
    for (const auto& heads : {own, shifted}) {  // without and with SCH
      SCOPED_TRACE(testing::Message() << "SCH=" << (heads != own));
      auto attend = [&](const Tensor& keys_values) {
        compute::AutocastScope autocast(precision, torch::kCPU);
        return kernels::chunked_relative_attention(q_u, q_v, keys_values, tables, blocks,
                                          heads == own ? std::vector<int64_t>{} : heads, mask, scale);
      };
      Tensor got = attend(kv);
      std::vector<Tensor> inputs = {q_u, q_v, kv};
      inputs.insert(inputs.end(), tables.begin(), tables.end());
      auto got_grads = torch::autograd::grad({got}, inputs, {grad_out});

      std::vector<Tensor> operands;
      for (const auto& x : inputs) operands.push_back(wide(x).requires_grad_(true));
      Tensor want = full_matrix(c, heads, operands[0], operands[1], operands[2], {operands.begin() + 3, operands.end()},
                                mask, scale);
      auto want_grads = torch::autograd::grad({want}, operands, {wide(grad_out)});

      expect_near(got, want, "output", tolerance);
      const char* names[] = {"d q_u", "d q_v", "d kv"};
      for (size_t i = 0; i < inputs.size(); ++i)
        expect_near(got_grads[i], want_grads[i], i < 3 ? names[i] : "d table", tolerance);
      if (rounded) {  // the rounding is there: the unrounded operands give another output
        std::vector<Tensor> exact;
        for (const auto& x : inputs) exact.push_back(x.detach().to(torch::kFloat64));
        const Tensor unrounded = full_matrix(c, heads, exact[0], exact[1], exact[2], {exact.begin() + 3, exact.end()},
                                             mask, scale);
        EXPECT_GT(difference(got, unrounded), 1e-4) << "no bf16 rounding: the products ran in fp32";
      }

      {
        compute::AttentionProbsScope recompute(compute::AttentionProbs::kRecompute);
        Tensor again = attend(kv);
        auto again_grads = torch::autograd::grad({again}, inputs, {grad_out});
        EXPECT_TRUE(torch::equal(again, got)) << "recomputing the probabilities changes the output";
        for (size_t i = 0; i < inputs.size(); ++i)
          EXPECT_TRUE(torch::equal(again_grads[i], got_grads[i]))
              << (i < 3 ? names[i] : "d table") << " differs when the probabilities are computed again";
      }

      torch::NoGradGuard no_grad;
      Tensor inference = attend(kv);
      EXPECT_TRUE(torch::equal(inference, got.detach())) << "inference differs from the training forward";
      // Evaluation's kept keys and values lie in a buffer with room around each stream's rows.
      Tensor roomy = torch::randn({c.batch, k + 5, 2, c.heads, c.dh});
      roomy.narrow(1, 3, k).copy_(kv);
      Tensor kept = attend(roomy.narrow(1, 3, k));
      EXPECT_TRUE(torch::equal(kept, got.detach())) << "keys and values in a larger buffer change the output";
      // ... or beside other rows of each key (MGK's extra keys): read in place, the same output.
      Tensor wide = torch::randn({c.batch, k, 3, c.heads, c.dh});
      wide.narrow(2, 0, 2).copy_(kv);
      Tensor beside = attend(wide.narrow(2, 0, 2));
      EXPECT_TRUE(torch::equal(beside, got.detach())) << "keys and values beside other rows change the output";
    }
  }
}

}  // namespace

TEST(ChunkedAttention, MatchesTheFullMatrixPathWithGradients) {
  if (!kernels::chunked_attention_usable(torch::empty({1}))) GTEST_SKIP() << "no BLAS sgemm found";
  check_against_the_full_matrix_path(false);
}

TEST(ChunkedAttention, Bf16ProductsMatchTheFullMatrixPathOnRoundedOperands) {
  if (!kernels::chunked_attention_usable(torch::empty({1})) || !compute::bf16_gemm_native())
    GTEST_SKIP() << "no bf16 products here: " << compute::gemm_choice_description();
  check_against_the_full_matrix_path(true);
}

TEST(ChunkedAttention, RefusesAMaskThatShowsAQueryItsFuture) {
  if (!kernels::chunked_attention_usable(torch::empty({1}))) GTEST_SKIP() << "no BLAS sgemm found";
  Tensor q = torch::randn({1, 4, 2, 8}), kv = torch::randn({1, 6, 2, 2, 8}), r = torch::randn({6, 2, 8});
  Tensor mask = torch::zeros({4, 6}, torch::kBool);  // query 0 would see keys 3..5, which follow it
  EXPECT_THROW(kernels::chunked_relative_attention(q, q, kv, {r}, {kernels::KeyBlock{0, 6, 5, 6}}, {}, mask, 0.5), c10::Error);
  mask = torch::ones({4, 6}).triu(3).to(torch::kBool);  // causal: accepted, but heads must be a permutation
  EXPECT_NO_THROW(kernels::chunked_relative_attention(q, q, kv, {r}, {kernels::KeyBlock{0, 6, 5, 6}}, {1, 0}, mask, 0.5));
  EXPECT_THROW(kernels::chunked_relative_attention(q, q, kv, {r}, {kernels::KeyBlock{0, 6, 5, 6}}, {1, 1}, mask, 0.5), c10::Error);
}

TEST(ChunkedAttention, PositionalBiasIsEachBlocksShiftedScoresMasked) {
  // What a GPU's fused attention adds to q k^T: in key block b, query i's score for key j is its
  // table entry j - col + T - 1 - i (Transformer-XL's shift), -inf where masked; and
  // softmax(ac + bias) is what relative_attention_probs computes from the same scores (on the
  // CPU's fused kernel and on the generic path, with and without gradients).
  const std::vector<Case> cases = {
      {2, 2, 1, 8, {}},
      {2, 2, 5, 8, {{kPosition - 7, 7}}, false, 0},
      {2, 2, 6, 8, {{kPosition - 6, 6}}, true, 6},
      {2, 2, 7, 8, {{kPosition - 40, 5}, {kPosition - 20, 9}, {kPosition - 3, 3}}, false, 0},
      {1, 3, 9, 8, {{kPosition - 30, 4}, {kPosition - 9, 9}}, true, 9},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("t " + std::to_string(c.t) + ", runs " + std::to_string(c.runs.size()));
    const auto blocks = key_blocks(c);
    const Tensor mask = mask_for(c);
    const int64_t n = c.heads * c.batch, k = mask.size(1);
    torch::manual_seed(3);
    std::vector<Tensor> bds;
    for (const auto& blk : blocks) bds.push_back(torch::randn({n, c.t, blk.table}, torch::kFloat64));
    const Tensor bias = kernels::relative_positional_bias(bds, blocks, mask, torch::kFloat64);
    ASSERT_EQ(bias.sizes(), (std::vector<int64_t>{n, c.t, k}));
    auto b_acc = bias.accessor<double, 3>();
    auto m_acc = mask.accessor<bool, 2>();
    for (size_t b = 0; b < blocks.size(); ++b) {
      auto bd = bds[b].accessor<double, 3>();
      for (int64_t j = blocks[b].col; j < blocks[b].col + blocks[b].len; ++j)
        for (int64_t i = 0; i < c.t; ++i)
          for (int64_t h = 0; h < n; ++h) {
            if (m_acc[i][j]) {
              ASSERT_TRUE(std::isinf(b_acc[h][i][j]) && b_acc[h][i][j] < 0) << i << " " << j;
            } else {
              ASSERT_EQ(b_acc[h][i][j], bd[h][i][j - blocks[b].col + c.t - 1 - i]) << i << " " << j;
            }
          }
    }
    // In another dtype (a GPU's bf16 products): the same bias, rounded.
    std::vector<Tensor> bds_bf16, bds_float;
    for (const auto& bd : bds) bds_bf16.push_back(bd.to(torch::kBFloat16)), bds_float.push_back(bd.to(torch::kFloat));
    EXPECT_TRUE(torch::equal(kernels::relative_positional_bias(bds_bf16, blocks, mask, torch::kBFloat16), bias.to(torch::kBFloat16)));
    EXPECT_TRUE(torch::equal(kernels::relative_positional_bias(bds_float, blocks, mask, torch::kBFloat16), bias.to(torch::kBFloat16)));
    // Differentiable tables: the same bias, and each unmasked entry's gradient lands on the
    // table entry it read; a masked entry does not read the table, so its gradient (given here,
    // as a fused kernel's may be) lands on none.
    std::vector<Tensor> tracked;
    for (const auto& bd : bds) tracked.push_back(bd.clone().requires_grad_());
    const Tensor tracked_bias = kernels::relative_positional_bias(tracked, blocks, mask, torch::kFloat64);
    EXPECT_TRUE(torch::equal(tracked_bias, bias));
    const Tensor w = torch::randn({n, c.t, k}, torch::kFloat64);
    tracked_bias.backward(w);
    auto w_acc = w.accessor<double, 3>();
    for (size_t b = 0; b < blocks.size(); ++b) {
      Tensor want_grad = torch::zeros_like(bds[b]);
      auto g = want_grad.accessor<double, 3>();
      for (int64_t j = blocks[b].col; j < blocks[b].col + blocks[b].len; ++j)
        for (int64_t i = 0; i < c.t; ++i)
          for (int64_t h = 0; h < n; ++h)
            if (!m_acc[i][j]) g[h][i][j - blocks[b].col + c.t - 1 - i] += w_acc[h][i][j];
      ASSERT_TRUE(tracked[b].grad().defined());
      EXPECT_TRUE(torch::allclose(tracked[b].grad(), want_grad, 0, 1e-12)) << "block " << b;
    }
    const Tensor ac = torch::randn({n, c.t, k}, torch::kFloat64), ac_before = ac.clone();
    const Tensor want = torch::softmax(ac + bias, -1);
    expect_near(kernels::relative_attention_probs(ac, bds, blocks, mask, 1.0), want, "CPU kernel");
    compute::GenericKernels generic;
    expect_near(kernels::relative_attention_probs(ac, bds, blocks, mask, 1.0), want, "generic path");
    // Scores handed over (nothing else holds them) take the positional scores in place; the
    // caller's own are never written.
    expect_near(kernels::relative_attention_probs(ac.clone(), bds, blocks, mask, 1.0), want, "generic path, in place");
    EXPECT_TRUE(torch::equal(ac, ac_before));
  }
}

// The variants' terms (AttentionExtras: a mixture's components, persistent keys and values):
// output and every gradient against the full matrices in double. With bf16 products, on the
// operands rounded to bf16 (a mixture's log weights stay float), within the rounding of
// the probabilities and score gradients; against the same with the variant's own operands
// unrounded the output lies several times further: its products did take rounded operands.
// shared: the components' queries are q_u itself and their keys one tensor (MGK's queries, sMGK's
// keys), whose gradients the kernel sums in one buffer.
void check_variant(int64_t components, int64_t persistent, bool shared, bool bf16) {
  const Case c{2, 2, 70, 8, {{kPosition - 30, 30}}, false, 70};
  const auto blocks = key_blocks(c);
  const Tensor mask = mask_for(c);
  const int64_t k = memory_length(c) + c.t, n = c.heads * c.batch;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.dh));
  torch::manual_seed(5);
  auto make = [](std::vector<int64_t> shape, double s) { return torch::randn(shape).mul_(s).requires_grad_(true); };
  // Inputs: q_u, q_v, kv, tables; then per component query, key, log weights; or the persistent keys and values.
  std::vector<Tensor> inputs = {make({c.batch, c.t, c.heads, c.dh}, 3), make({c.batch, c.t, c.heads, c.dh}, 2),
                                make({c.batch, k, 2, c.heads, c.dh}, 2)};
  for (const auto& b : blocks) inputs.push_back(make({b.table, c.heads, c.dh}, 2));
  const size_t first_extra = inputs.size();
  const std::vector<Tensor> tables(inputs.begin() + 3, inputs.end());
  kernels::AttentionExtras extras;
  std::vector<double> coefs;
  std::vector<bool> rounds(first_extra, true);
  for (int64_t m = 0; m < components; ++m) {
    coefs.push_back(m == 0 ? 1.0 : 0.5);
    const Tensor query = shared ? inputs[0] : make({c.batch, c.t, c.heads, c.dh}, 3);
    const Tensor key = shared && m > 0 ? extras.mixture[0].key : make({c.batch, k, c.heads, c.dh}, 3);
    extras.mixture.push_back({query, key, make({c.heads}, 1), coefs.back()});
    const auto& comp = extras.mixture.back();
    inputs.insert(inputs.end(), {comp.query, comp.key, comp.log_weight});
    rounds.insert(rounds.end(), {true, true, false});
  }
  if (persistent > 0) {
    extras.persistent_key = make({c.heads, persistent, c.dh}, 4);
    extras.persistent_value = make({c.heads, persistent, c.dh}, 2);
    inputs.insert(inputs.end(), {extras.persistent_key, extras.persistent_value});
    rounds.insert(rounds.end(), {true, true});
  }
  const Tensor grad_out = torch::randn({c.batch, c.t, c.heads, c.dh});
  Tensor got;
  {
    compute::AutocastScope autocast(bf16 ? compute::Precision::kBf16 : compute::Precision::kFp32, torch::kCPU);
    got = kernels::chunked_relative_attention(inputs[0], inputs[1], inputs[2], tables, blocks, {}, mask, scale, extras);
  }
  // A mixture alone leaves q_u unread (its gradient undefined) unless its components' queries are q_u.
  const std::vector<Tensor> wrt(inputs.begin() + (components > 0 && persistent == 0 && !shared ? 1 : 0), inputs.end());
  const auto got_grads = torch::autograd::grad({got}, wrt, {grad_out});

  // The full matrices in double: the context's logits scale (content + shift(q_v tables^T)), the
  // content q_u k^T or a mixture's logsumexp_m(log_weight_m - coef_m / 2 |q_m - k_m|^2) / scale
  // (the distances as differences, where the kernel expands them); the persistent keys' scale
  // (q_u pk^T) before them, never masked.
  auto reference = [&](bool variant_rounded) {
    std::vector<Tensor> x;
    for (size_t i = 0; i < inputs.size(); ++i) {
      // An input given twice is one tensor here too: its gradient sums both uses.
      const auto same = std::find_if(inputs.begin(), inputs.begin() + static_cast<int64_t>(i),
                                     [&](const Tensor& t) { return t.is_same(inputs[i]); });
      if (same != inputs.begin() + static_cast<int64_t>(i)) {
        x.push_back(x[static_cast<size_t>(same - inputs.begin())]);
        continue;
      }
      const bool rounded = bf16 && rounds[i] && (i < first_extra || variant_rounded);
      const Tensor d = inputs[i].detach();
      x.push_back((rounded ? d.to(torch::kBFloat16) : d).to(torch::kFloat64).requires_grad_(true));
    }
    auto per_head = [&](const Tensor& t) { return t.permute({2, 0, 1, 3}).reshape({n, -1, c.dh}); };
    Tensor content = torch::bmm(per_head(x[0]), per_head(x[2].select(2, 0)).transpose(1, 2));
    if (components > 0) {
      std::vector<Tensor> terms;
      for (int64_t m = 0; m < components; ++m) {
        const Tensor* comp = &x[first_extra + 3 * m];
        const Tensor distance = (per_head(comp[0]).unsqueeze(2) - per_head(comp[1]).unsqueeze(1)).pow(2).sum(3);
        terms.push_back(comp[2].repeat_interleave(c.batch).view({n, 1, 1}) - coefs[m] / 2 * distance);
      }
      content = torch::logsumexp(torch::stack(terms), 0) / scale;
    }
    std::vector<Tensor> bds;
    for (size_t b = 0; b < blocks.size(); ++b) {
      const Tensor r = x[3 + b].permute({1, 2, 0});  // [H, dh, P]
      bds.push_back(torch::bmm(per_head(x[1]).reshape({c.heads, c.batch * c.t, c.dh}), r).view({n, c.t, -1}));
    }
    Tensor logits = scale * (content + kernels::relative_positional_bias(bds, blocks, mask, torch::kFloat64));
    Tensor value = per_head(x[2].select(2, 1));
    if (persistent > 0) {  // per head h, the same keys and values for each batch: n = h B + b
      const Tensor pk = x[first_extra].repeat_interleave(c.batch, 0);
      const Tensor pv = x[first_extra + 1].repeat_interleave(c.batch, 0);
      logits = torch::cat({scale * torch::bmm(per_head(x[0]), pk.transpose(1, 2)), logits}, 2);
      value = torch::cat({pv, value}, 1);
    }
    const Tensor out =
        torch::bmm(torch::softmax(logits, 2), value).view({c.heads, c.batch, c.t, c.dh}).permute({1, 2, 0, 3});
    const std::vector<Tensor> x_wrt(x.begin() + (inputs.size() - wrt.size()), x.end());
    return std::make_pair(out, torch::autograd::grad({out}, x_wrt, {grad_out.to(torch::kFloat64)}));
  };
  const auto [want, want_grads] = reference(true);
  const double tolerance = bf16 ? 1e-2 : 2e-5;
  expect_near(got, want, "output", tolerance);
  for (size_t i = 0; i < wrt.size(); ++i)
    expect_near(got_grads[i], want_grads[i], ("gradient of input " + std::to_string(i)).c_str(), tolerance);
  if (bf16) {
    EXPECT_GT(difference(got, reference(false).first), 3 * difference(got, want));
  }
}

TEST(ChunkedAttention, Bf16VariantProductsMatchTheFullMatricesOnRoundedOperands) {
  if (!kernels::chunked_attention_usable(torch::empty({1})) || !compute::bf16_gemm_native())
    GTEST_SKIP() << "no bf16 products here: " << compute::gemm_choice_description();
  {
    SCOPED_TRACE("a mixture of 2");
    check_variant(2, 0, false, true);
  }
  {
    SCOPED_TRACE("a mixture of 3 sharing q_u and a key");
    check_variant(3, 0, true, true);
  }
  {
    SCOPED_TRACE("20 persistent keys");
    check_variant(0, 20, false, true);
  }
}

TEST(ChunkedAttention, MixtureComponentsSharingQueriesAndKeysMatchTheFullMatrices) {
  if (!kernels::chunked_attention_usable(torch::empty({1}))) GTEST_SKIP() << "no BLAS sgemm found";
  for (const int64_t components : {2, 3}) {
    SCOPED_TRACE(std::to_string(components) + " components");
    check_variant(components, 0, true, false);
    check_variant(components, 0, false, false);
  }
}
