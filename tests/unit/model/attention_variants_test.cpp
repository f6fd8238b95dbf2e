// The attention variants (MGK, sMGK, persistent memory, adaptive span) against an explicit
// double loop over (query, key) written from the equations in attention_variants.h, with memories
// of any age (Skip-Retain) and head permutations (SCH); gradients by central differences; and
// the identities that tie them to Transformer-XL.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "xl/compute/kernel_choice.h"
#include "xl/kernels/cpu/chunked_attention.h"
#include "xl/model/head_pruning.h"
#include "xl/model/model_io.h"
#include "xl/model/rel_attention.h"
#include "xl/model/transformer_xl.h"
#include "xl/util/error.h"
#include "support/attention_support.h"

using namespace xl;
using namespace xl::model;
using torch::Tensor;
using xl::test::positions_of;
using xl::test::sinusoid;

namespace {

double logsumexp(const std::vector<double>& x) {
  double mx = -1e300, z = 0;
  for (double v : x) mx = std::max(mx, v);
  for (double v : x) z += std::exp(v - mx);
  return mx + std::log(z);
}

// One attention sublayer (post layer norm), query by query and key by key.
Tensor naive_variant(RelMultiHeadAttn& a, const ModelConfig& c, const Tensor& w, const Tensor& mem,
                     const std::vector<int64_t>& key_pos, int64_t position, const Tensor& u, const Tensor& v,
                     const std::vector<int64_t>& perm) {
  const int64_t B = w.size(0), T = w.size(1), D = w.size(2), H = a->n_head, dh = a->d_head;
  const int64_t M = mem.defined() ? mem.size(1) : 0, K = M + T, N = c.persistent_mem;
  Tensor x = M > 0 ? torch::cat({mem, w}, 1) : w;
  auto W = a->qkv_net->weight;
  auto Wq = W.narrow(0, 0, H * dh), Wk = W.narrow(0, H * dh, H * dh), Wv = W.narrow(0, 2 * H * dh, H * dh);
  auto Wr = a->r_net->weight;
  const double s = 1.0 / std::sqrt(static_cast<double>(dh));
  Tensor out = torch::zeros({B, T, H * dh}, torch::kFloat64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hp = perm.empty() ? h : perm[static_cast<size_t>(h)];
      auto wq = Wq.narrow(0, h * dh, dh), wk = Wk.narrow(0, hp * dh, dh), wv = Wv.narrow(0, hp * dh, dh);
      auto wr = Wr.narrow(0, hp * dh, dh);
      for (int64_t i = 0; i < T; ++i) {
        auto q = torch::mv(wq, x[b][M + i]);
        auto qu = q + u[h], qv = q + v[h];
        std::vector<double> logit;
        std::vector<Tensor> val;
        std::vector<int64_t> dist;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t d = position + i - key_pos[static_cast<size_t>(j)];
          if (d < 0) continue;
          auto k0 = torch::mv(wk, x[b][j]);
          double content = 0;
          if (c.is_mgk()) {
            auto log_pi = torch::log_softmax(a->mgk_pi[hp], 0);
            std::vector<double> comp;
            for (int64_t m = 0; m < c.mgk_keys; ++m) {
              Tensor km = k0;
              if (c.attention == "smgk") km = k0 + a->mgk_mu[hp][m];
              else if (m > 0)
                km = torch::mv(a->mgk_k_net->weight.narrow(0, ((m - 1) * H + hp) * dh, dh), x[b][j]);
              const double sigma_sq = std::sqrt(static_cast<double>(dh)) / static_cast<double>(2 * m + 1);
              comp.push_back(log_pi[m].item<double>() - (qu - km).pow(2).sum().item<double>() / (2 * sigma_sq));
            }
            content = c.mgk_estep == "hard" ? *std::max_element(comp.begin(), comp.end()) : logsumexp(comp);
          } else {
            content = qu.dot(k0).item<double>() * s;
          }
          auto r = torch::mv(wr, sinusoid(d, D));
          logit.push_back(content + qv.dot(r).item<double>() * s);
          val.push_back(torch::mv(wv, x[b][j]));
          dist.push_back(d);
        }
        const size_t context = logit.size();
        for (int64_t n = 0; n < N; ++n) {
          auto pk = a->pers_key[hp][n] * std::sqrt(static_cast<double>(dh));
          logit.push_back(qu.dot(pk).item<double>() * s);
          val.push_back(a->pers_val[hp][n] * std::sqrt(static_cast<double>(N)));
        }
        // Adaptive span (the paper's soft mask): p_j = m(d_j) exp(logit_j) / sum_k m(d_k) exp(logit_k),
        // persistent keys unmasked.
        std::vector<double> p;
        const double mx = *std::max_element(logit.begin(), logit.end());
        double sum = 0;
        for (size_t j = 0; j < logit.size(); ++j) {
          double e = std::exp(logit[j] - mx);
          if (c.adaptive_span && j < context) {
            const double z = std::min(1.0, std::max(0.0, a->span_z[h].item<double>()));
            e *= std::min(1.0, std::max(0.0, (z * c.span_max - dist[j]) / c.span_ramp + 1));
          }
          p.push_back(e);
          sum += e;
        }
        for (double& pj : p) pj /= sum;
        auto vec = torch::zeros({dh}, torch::kFloat64);
        for (size_t j = 0; j < p.size(); ++j) vec += p[j] * val[j];
        out[b][i].narrow(0, h * dh, dh).copy_(vec);
      }
    }
  return a->layer_norm(w + torch::linear(out, a->o_net->weight));
}

struct Fixture {
  ModelConfig cfg;
  RelMultiHeadAttn attn{nullptr};
  Tensor u, v;
  explicit Fixture(ModelConfig c, int64_t heads = 3) : cfg(std::move(c)) {
    cfg.d_model = 12;
    cfg.n_head = heads;
    cfg.d_head = 4;
    cfg.dropout = 0;
    torch::manual_seed(11);
    attn = RelMultiHeadAttn(cfg, heads, false);
    for (auto& p : attn->parameters()) p.data().normal_(0, 0.5);
    if (attn->span_z.defined()) {
      // Spans of a whole number of keys and a half: no key sits at the very end of a ramp, where
      // the mask m is near 0 and log m's gradient 1/m magnifies float32's rounding past any fixed
      // tolerance (a key at m = 0.008 did).
      const double s = static_cast<double>(cfg.span_max);
      attn->span_z.data().uniform_(0.2, 0.9).mul_(s).floor_().add_(0.5).div_(s);
    }
    attn->to(torch::kFloat64);
    attn->eval();
    u = torch::randn({heads, cfg.d_head}, torch::kFloat64);
    v = torch::randn({heads, cfg.d_head}, torch::kFloat64);
  }
  Tensor run(const Tensor& w, const Tensor& mem, const std::vector<MemoryRun>& runs, int64_t position,
             const std::vector<int64_t>& perm = {}) {
    SinusoidTable table(cfg.d_model);
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, Tensor> masks;
    AttentionPass pass;
    pass.position = position;
    pass.mem_len = 16;
    pass.sinusoid = &table;
    pass.mask_cache = &masks;
    LayerMemory lm;
    lm.hidden = mem;
    lm.runs = runs;
    return attn(w, lm, pass, u, v, perm, Tensor());
  }
};

double max_diff(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); }

ModelConfig variant(const std::string& attention, int64_t persistent = 0, bool span = false,
                    const std::string& estep = "soft", int64_t keys = 2) {
  ModelConfig c;
  c.attention = attention;
  c.persistent_mem = persistent;
  c.adaptive_span = span;
  c.span_max = span ? 12 : 0;
  c.span_ramp = 4;
  c.mgk_estep = estep;
  c.mgk_keys = keys;
  return c;
}

std::vector<ModelConfig> all_variants() {
  return {variant("mgk"), variant("mgk", 0, false, "hard"), variant("mgk", 0, false, "soft", 3), variant("smgk"),
          variant("smgk", 0, true), variant("rel", 5), variant("rel", 0, true), variant("rel", 5, true),
          variant("mgk", 0, true)};
}

std::string name_of(const ModelConfig& c) {
  return c.attention + "/" + c.mgk_estep + "/M=" + std::to_string(c.mgk_keys) + " N=" + std::to_string(c.persistent_mem) +
         (c.adaptive_span ? " span" : "");
}

}  // namespace

TEST(AttentionVariants, MatchNaiveLoopWithFreshAndAgedMemoriesAndCrossHeads) {
  for (const auto& c : all_variants()) {
    Fixture f(c);
    const int64_t t = 3, position = 30;
    // No memory; a fresh one; one left behind by skipped layers; several runs of different ages.
    for (const auto& runs : std::vector<std::vector<MemoryRun>>{{}, {{26, 4}}, {{19, 4}}, {{15, 3}, {24, 2}, {28, 2}}}) {
      for (const auto& perm : std::vector<std::vector<int64_t>>{{}, {2, 0, 1}}) {
        int64_t m = 0;
        for (const auto& r : runs) m += r.length;
        auto w = torch::randn({2, t, f.cfg.d_model}, torch::kFloat64);
        Tensor mem = m > 0 ? torch::randn({2, m, f.cfg.d_model}, torch::kFloat64) : Tensor();
        auto got = f.run(w, mem, runs, position, perm);
        auto want = naive_variant(f.attn, f.cfg, w, mem, positions_of(runs, position, t), position, f.u, f.v, perm);
        EXPECT_LT(max_diff(got, want), 1e-10) << name_of(c) << " memory " << m << " perm " << perm.size();
      }
    }
  }
}

TEST(AttentionVariants, GradientsMatchCentralDifferences) {
  for (const auto& c : all_variants()) {
    Fixture f(c);
    f.attn->train();
    const int64_t t = 3, position = 20;
    std::vector<MemoryRun> runs{{13, 4}};
    auto w = torch::randn({1, t, f.cfg.d_model}, torch::kFloat64).requires_grad_(true);
    auto mem = torch::randn({1, 4, f.cfg.d_model}, torch::kFloat64);
    auto weights = torch::randn({1, t, f.cfg.d_model}, torch::kFloat64);
    auto objective = [&] { return (f.run(w, mem, runs, position, {1, 2, 0}) * weights).sum(); };
    std::vector<Tensor> wrt{w, f.attn->qkv_net->weight};
    for (const auto& p : {f.attn->mgk_pi, f.attn->mgk_mu, f.attn->pers_key, f.attn->pers_val, f.attn->span_z})
      if (p.defined()) wrt.push_back(p);
    if (f.attn->mgk_k_net) wrt.push_back(f.attn->mgk_k_net->weight);
    const auto grads = xl::test::expect_directional_derivatives(objective, wrt, name_of(c));
    for (size_t i = 0; i < wrt.size(); ++i) {
      EXPECT_GT(grads[i].abs().sum().item<double>(), 0) << name_of(c) << " tensor " << i << " gets no gradient";
    }
  }
}

TEST(AttentionVariants, ShiftedMgkWithZeroShiftIsTwoKeyMgkWithTiedKeys) {
  Fixture s(variant("smgk"));
  Fixture m(variant("mgk"));
  torch::NoGradGuard no_grad;
  m.attn->qkv_net->weight.copy_(s.attn->qkv_net->weight);
  m.attn->r_net->weight.copy_(s.attn->r_net->weight);
  m.attn->o_net->weight.copy_(s.attn->o_net->weight);
  m.attn->layer_norm->weight.copy_(s.attn->layer_norm->weight);
  m.attn->layer_norm->bias.copy_(s.attn->layer_norm->bias);
  m.attn->mgk_pi.copy_(s.attn->mgk_pi);
  s.attn->mgk_mu.zero_();
  const int64_t h = 3, dh = 4;
  m.attn->mgk_k_net->weight.copy_(s.attn->qkv_net->weight.narrow(0, h * dh, h * dh));  // key 1 = key 0
  m.u = s.u;
  m.v = s.v;
  auto w = torch::randn({2, 3, 12}, torch::kFloat64), mem = torch::randn({2, 4, 12}, torch::kFloat64);
  EXPECT_LT(max_diff(s.run(w, mem, {{26, 4}}, 30), m.run(w, mem, {{26, 4}}, 30)), 1e-12);
  // And a shift changes it.
  s.attn->mgk_mu.normal_(0, 0.5);
  EXPECT_GT(max_diff(s.run(w, mem, {{26, 4}}, 30), m.run(w, mem, {{26, 4}}, 30)), 1e-6);
}

TEST(AttentionVariants, FullAdaptiveSpanIsTheTransformerXLAttention) {
  // z = 1 with S beyond every distance: the mask is 1 everywhere.
  ModelConfig c = variant("rel", 0, true);
  c.span_max = 64;
  Fixture span(c);
  Fixture plain(variant("rel"));
  torch::NoGradGuard no_grad;
  for (const char* n : {"qkv_net.weight", "r_net.weight", "o_net.weight", "layer_norm.weight", "layer_norm.bias"})
    plain.attn->named_parameters()[n].copy_(span.attn->named_parameters()[n]);
  plain.u = span.u;
  plain.v = span.v;
  span.attn->span_z.fill_(1.0);
  auto w = torch::randn({2, 3, 12}, torch::kFloat64), mem = torch::randn({2, 5, 12}, torch::kFloat64);
  for (const auto& runs : std::vector<std::vector<MemoryRun>>{{{25, 5}}, {{12, 5}}})
    EXPECT_LT(max_diff(span.run(w, mem, runs, 30), plain.run(w, mem, runs, 30)), 1e-12);
  // A short span forgets the memory: a head with z = 0 and ramp 4 sees only the last 4 positions.
  span.attn->span_z.fill_(0.0);
  auto far = mem.clone();
  far.narrow(1, 0, 2).normal_();  // positions 25, 26: distances >= 4 from every query
  EXPECT_LT(max_diff(span.run(w, mem, {{25, 5}}, 30), span.run(w, far, {{25, 5}}, 30)), 1e-15);
}

TEST(AttentionVariants, AdaptiveSpanKeepsOnlyTheMemoryItsHeadsReach) {
  Fixture f(variant("rel", 0, true));  // S = 12, R = 4
  torch::NoGradGuard no_grad;
  f.attn->span_z.copy_(torch::tensor({0.1, 0.3, 0.2}, torch::kFloat64));
  const double z_max = f.attn->span_z.max().item<double>();
  EXPECT_EQ(f.attn->memory_needed(30, z_max), 7);  // m(d) > 0 for d < 0.3 x 12 + 4 = 7.6
  EXPECT_EQ(f.attn->memory_needed(5, z_max), 5);
  // Slot 23 is at distance 7 from the first query (position 30), slot 22 at 8: beyond every head.
  auto w = torch::randn({2, 3, 12}, torch::kFloat64), mem = torch::randn({2, 20, 12}, torch::kFloat64);
  Tensor full = f.run(w, mem, {{10, 20}}, 30);
  EXPECT_LT(max_diff(full, f.run(w, mem.narrow(1, 13, 7), {{23, 7}}, 30)), 1e-14);
  EXPECT_GT(max_diff(full, f.run(w, mem.narrow(1, 14, 6), {{24, 6}}, 30)), 1e-9);

  // A model keeps that much memory per layer, and a full one without adaptive span.
  for (bool span : {true, false}) {
    ModelConfig c = variant("rel", 0, span);
    c.n_token = 40, c.n_layer = 2, c.d_model = 12, c.n_head = 3, c.d_head = 4, c.d_inner = 16;
    TransformerXL model(c);
    model->eval();
    if (span) model->layer_list[1]->dec_attn->span_z.copy_(torch::tensor({0.1, 0.3, 0.2}));
    Memory mem = model->new_memory();
    ForwardOptions o;
    o.mem_len = 30;
    model->forward(torch::randint(0, 40, {2, 20}), torch::randint(0, 40, {2, 20}), mem, o);
    EXPECT_EQ(mem.layers[0].length(), span ? 3 : 20);  // z = 0 at initialisation: d < 4
    EXPECT_EQ(mem.layers[1].length(), span ? 7 : 20);
    EXPECT_EQ(model->memory_lengths(30), (std::vector<int64_t>{span ? 3 : 30, span ? 7 : 30}));
  }
}

// The CPU's blocked kernel (float32) against the full-matrix path (float64, generic kernels) on the
// same parameters: outputs and every gradient, segments longer than a block of query rows, fresh,
// aged and multi-run memories, with and without SCH; the same bits when backward computes the
// probabilities again.
TEST(AttentionVariants, TheBlockedKernelMatchesTheFullMatrices) {
  if (!kernels::chunked_attention_usable(torch::empty({1}))) GTEST_SKIP() << "no BLAS sgemm found";
  const int64_t position = 1000;
  const std::vector<std::vector<MemoryRun>> memories = {
      {}, {{position - 40, 40}}, {{position - 100, 30}}, {{position - 300, 20}, {position - 120, 50}, {position - 25, 25}}};
  for (auto c : all_variants()) {
    if (c.adaptive_span) c.span_max = 60;  // spans of 12 to 54: keys hidden, ramps and full rows
    // 70 queries, and generation's one (row kernels for its scores and values).
    for (const int64_t t : {70, 1})
    for (const auto& runs : memories)
      for (const auto& perm : std::vector<std::vector<int64_t>>{{}, {2, 0, 1}}) {
        SCOPED_TRACE(name_of(c) + " T " + std::to_string(t) + " runs " + std::to_string(runs.size()) + " perm " +
                     std::to_string(perm.size()));
        Fixture f(c);
        int64_t m = 0;
        for (const auto& r : runs) m += r.length;
        f.attn->to(torch::kFloat32);
        auto w = torch::randn({2, t, f.cfg.d_model}).requires_grad_(true);
        Tensor mem = m > 0 ? torch::randn({2, m, f.cfg.d_model}) : Tensor();
        Tensor weights = torch::randn({2, t, f.cfg.d_model}, torch::kFloat64);
        std::vector<Tensor> wrt{w};
        for (auto& p : f.attn->parameters()) wrt.push_back(p);
        f.u = f.u.to(torch::kFloat32).requires_grad_(true);
        f.v = f.v.to(torch::kFloat32);
        wrt.push_back(f.u);
        Tensor got = f.run(w, mem, runs, position, perm);
        auto got_grads = torch::autograd::grad({(got * weights.to(torch::kFloat32)).sum()}, wrt);
        {  // the probabilities computed again in backward: the same bits
          compute::AttentionProbsScope recompute(compute::AttentionProbs::kRecompute);
          Tensor again = f.run(w, mem, runs, position, perm);
          auto again_grads = torch::autograd::grad({(again * weights.to(torch::kFloat32)).sum()}, wrt);
          EXPECT_TRUE(torch::equal(again, got));
          for (size_t i = 0; i < wrt.size(); ++i)
            EXPECT_TRUE(torch::equal(again_grads[i], got_grads[i])) << "gradient " << i << " when recomputed";
        }

        f.attn->to(torch::kFloat64);
        Tensor w64 = w.detach().to(torch::kFloat64).requires_grad_(true);
        std::vector<Tensor> wrt64{w64};
        for (auto& p : f.attn->parameters()) wrt64.push_back(p);
        f.u = f.u.detach().to(torch::kFloat64).requires_grad_(true);
        f.v = f.v.to(torch::kFloat64);
        wrt64.push_back(f.u);
        compute::GenericKernels generic;
        Tensor want = f.run(w64, m > 0 ? mem.to(torch::kFloat64) : Tensor(), runs, position, perm);
        auto want_grads = torch::autograd::grad({(want * weights).sum()}, wrt64);
        EXPECT_LT(max_diff(got.to(torch::kFloat64), want), 2e-5);
        for (size_t i = 0; i < wrt.size(); ++i) {
          const double size = std::max(1.0, want_grads[i].abs().max().item<double>());
          EXPECT_LT(max_diff(got_grads[i].to(torch::kFloat64), want_grads[i]), 5e-5 * size) << "gradient " << i;
        }
      }
  }
}

TEST(AttentionVariants, WholeModelsRoundTripPruneAndRefuseWhatTheyCannot) {
  for (auto c : {variant("smgk", 0, true), variant("mgk"), variant("rel", 4, true)}) {
    c.n_token = 40;
    c.n_layer = 2;
    c.d_model = 16;
    c.n_head = 3;
    c.d_head = 4;
    c.d_inner = 24;
    c.dropout = 0;
    if (c.persistent_mem > 0) c.ff = false;
    TransformerXL model(c);
    model->eval();
    if (c.adaptive_span)
      for (auto& l : model->layer_list) l->dec_attn->span_z.data().fill_(0.7);
    auto input = torch::randint(0, 40, {2, 6}), target = torch::randint(0, 40, {2, 6});
    auto run = [&](TransformerXL& m, const Tensor& head_mask) {
      Memory mem = m->new_memory();
      ForwardOptions o;
      o.mem_len = 6;
      o.head_mask = head_mask;
      torch::NoGradGuard ng;
      m->forward(input, target, mem, o);  // a memory first, then the segment scored
      return m->forward(target, input, mem, o);
    };
    // Every tensor of the variant reaches a copy through the checkpoint's tensor list.
    TransformerXL copy(c);
    copy->eval();
    load_model_tensors(copy, model_tensors(model), "test");
    EXPECT_EQ(max_diff(run(model, Tensor()), run(copy, Tensor())), 0) << name_of(c);
    // Masked equals pruned.
    auto keep = torch::ones({2, 3}, torch::kBool);
    keep[0][1] = false;
    keep[1][0] = false;
    auto pruned = remove_heads(model, keep);
    EXPECT_LT(max_diff(run(model, keep_to_head_mask(c, keep, torch::kFloat32)), run(pruned, Tensor())), 1e-5) << name_of(c);
    if (c.adaptive_span) {
      EXPECT_GT(model->span_loss().item<double>(), 0);
    }
  }
  ModelConfig bad = variant("mgk", 4);
  EXPECT_THROW(bad.validate(xl::SettingOrigins("test")), xl::Error);
  ModelConfig no_ff;
  no_ff.ff = false;
  EXPECT_THROW(no_ff.validate(xl::SettingOrigins("test")), xl::Error);
  ModelConfig shorter_span = variant("rel", 0, true);
  shorter_span.span_max = -1;
  EXPECT_THROW(shorter_span.validate(xl::SettingOrigins("test")), xl::Error);
}
