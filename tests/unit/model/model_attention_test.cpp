// Relative attention against an explicit double loop over (query, key) with explicit distances:
// memory lengths 0, partial and full, same_length and clamp_len on and off, memories of any age
// (Skip-Retain), head permutations (SCH) and head masks.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "xl/compute/kernel_choice.h"
#include "xl/model/rel_attention.h"
#include "support/attention_support.h"

using namespace xl;
using namespace xl::model;
using torch::Tensor;
using xl::test::expect_directional_derivatives;
using xl::test::positions_of;
using xl::test::sinusoid;

namespace {

struct NaiveSettings {
  bool same_length = false;
  int64_t mem_len = 0;
  int64_t clamp_len = 0;
  std::vector<int64_t> perm;  // SCH: head h reads head perm[h]
  Tensor head_mask;           // [H] or undefined
};

// One layer's attention sublayer, computed query by query and key by key.
Tensor naive_attention(RelMultiHeadAttn& a, const Tensor& w, const Tensor& mem, const std::vector<int64_t>& key_pos,
                       int64_t position, const Tensor& u, const Tensor& v, const NaiveSettings& s) {
  const int64_t B = w.size(0), T = w.size(1), D = w.size(2), H = a->n_head, dh = a->d_head;
  const int64_t M = mem.defined() ? mem.size(1) : 0, K = M + T;
  Tensor cat = M > 0 ? torch::cat({mem, w}, 1) : w;
  Tensor x_kv = a->pre_lnorm ? a->layer_norm(cat) : cat;
  auto W = a->qkv_net->weight;
  auto Wq = W.narrow(0, 0, H * dh), Wk = W.narrow(0, H * dh, H * dh), Wv = W.narrow(0, 2 * H * dh, H * dh);
  auto Wr = a->r_net->weight;
  Tensor out = torch::zeros({B, T, H * dh}, torch::kFloat64);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      int64_t hp = s.perm.empty() ? h : s.perm[static_cast<size_t>(h)];
      auto wq = Wq.narrow(0, h * dh, dh), wk = Wk.narrow(0, hp * dh, dh), wv = Wv.narrow(0, hp * dh, dh);
      auto wr = Wr.narrow(0, hp * dh, dh);
      for (int64_t i = 0; i < T; ++i) {
        auto q = torch::mv(wq, x_kv[b][M + i]);
        std::vector<double> scores(static_cast<size_t>(K));
        std::vector<bool> visible(static_cast<size_t>(K));
        for (int64_t j = 0; j < K; ++j) {
          int64_t d = position + i - key_pos[static_cast<size_t>(j)];
          bool vis = d >= 0 && !(s.same_length && M + i - j >= s.mem_len);
          visible[static_cast<size_t>(j)] = vis;
          if (!vis) continue;
          int64_t dc = s.clamp_len > 0 ? std::min(d, s.clamp_len) : d;
          auto k = torch::mv(wk, x_kv[b][j]);
          auto r = torch::mv(wr, sinusoid(dc, D));
          scores[static_cast<size_t>(j)] =
              ((q + u[h]).dot(k) + (q + v[h]).dot(r)).item<double>() / std::sqrt(static_cast<double>(dh));
        }
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j < K; ++j) if (visible[j]) mx = std::max(mx, scores[j]);
        for (int64_t j = 0; j < K; ++j) if (visible[j]) z += std::exp(scores[j] - mx);
        auto vec = torch::zeros({dh}, torch::kFloat64);
        for (int64_t j = 0; j < K; ++j)
          if (visible[j]) vec += std::exp(scores[j] - mx) / z * torch::mv(wv, x_kv[b][j]);
        if (s.head_mask.defined()) vec = vec * s.head_mask[h];
        out[b][i].narrow(0, h * dh, dh).copy_(vec);
      }
    }
  Tensor attn_out = torch::linear(out, a->o_net->weight);
  return a->pre_lnorm ? w + attn_out : a->layer_norm(w + attn_out);
}

struct Fixture {
  ModelConfig cfg;
  RelMultiHeadAttn attn{nullptr};
  Tensor u, v;
  explicit Fixture(int64_t heads = 3, bool pre_ln = false) {
    cfg.d_model = 12;
    cfg.n_head = heads;
    cfg.d_head = 4;
    cfg.dropout = 0;
    cfg.pre_lnorm = pre_ln;
    torch::manual_seed(7);
    attn = RelMultiHeadAttn(cfg, heads, false);
    for (auto& p : attn->parameters()) p.data().normal_(0, 0.5);
    attn->to(torch::kFloat64);
    attn->eval();
    u = torch::randn({heads, cfg.d_head}, torch::kFloat64);
    v = torch::randn({heads, cfg.d_head}, torch::kFloat64);
  }
};

// Runs the module with memory `runs` (positions) before a segment at `position`.
Tensor module_attention(Fixture& f, const Tensor& w, const Tensor& mem, const std::vector<MemoryRun>& runs,
                        int64_t position, const NaiveSettings& s) {
  SinusoidTable table(f.cfg.d_model);
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, Tensor> masks;
  AttentionPass pass;
  pass.position = position;
  pass.mem_len = s.mem_len;
  pass.same_length = s.same_length;
  pass.clamp_len = s.clamp_len;
  pass.sinusoid = &table;
  pass.mask_cache = &masks;
  LayerMemory lm;
  lm.hidden = mem;
  lm.runs = runs;
  return f.attn(w, lm, pass, f.u, f.v, s.perm, s.head_mask);
}

void expect_close(const Tensor& a, const Tensor& b, double tol = 1e-10) {
  ASSERT_EQ(a.sizes(), b.sizes());
  double diff = (a - b).abs().max().item<double>();
  EXPECT_LT(diff, tol) << "max abs difference " << diff;
}

}  // namespace

TEST(RelAttention, MatchesNaiveLoopOverShapesMemoryLengthsAndOptions) {
  for (bool pre_ln : {false, true}) {
    Fixture f(3, pre_ln);
    for (int64_t t : {1, 2, 5}) {
      for (int64_t m : {0, 1, 3, 6}) {
        for (bool same_length : {false, true}) {
          for (int64_t clamp : {0, 3}) {
            NaiveSettings s;
            s.same_length = same_length;
            s.mem_len = std::max<int64_t>(m, 4);  // partial (m < mem_len) and full memories
            s.clamp_len = clamp;
            auto w = torch::randn({2, t, f.cfg.d_model}, torch::kFloat64);
            Tensor mem = m > 0 ? torch::randn({2, m, f.cfg.d_model}, torch::kFloat64) : Tensor();
            const int64_t position = 20;
            std::vector<MemoryRun> runs;
            if (m > 0) runs.push_back({position - m, m});
            auto got = module_attention(f, w, mem, runs, position, s);
            auto want = naive_attention(f.attn, w, mem, positions_of(runs, position, t), position, f.u, f.v, s);
            SCOPED_TRACE(testing::Message() << "pre_ln=" << pre_ln << " t=" << t << " m=" << m
                                            << " same_length=" << same_length << " clamp=" << clamp);
            expect_close(got, want);
          }
        }
      }
    }
  }
}

// float32 takes the blocked path (chunked_attention): segments longer than a block of query rows,
// with SCH, causal and same_length masks, fresh and older memory, against the naive loop in double.
TEST(RelAttention, Float32BlockedPathMatchesNaiveLoop) {
  for (auto [same_length, gap] : {std::pair{false, 0}, std::pair{true, 0}, std::pair{false, 25}}) {
    Fixture f(3);
    NaiveSettings s;
    s.same_length = same_length;
    s.mem_len = 60;
    s.perm = {1, 2, 0};
    const int64_t t = 70, m = 50, position = 100;
    std::vector<MemoryRun> runs{{position - gap - m, m}};
    auto w = torch::randn({1, t, f.cfg.d_model}, torch::kFloat64);
    auto mem = torch::randn({1, m, f.cfg.d_model}, torch::kFloat64);
    auto want = naive_attention(f.attn, w, mem, positions_of(runs, position, t), position, f.u, f.v, s);
    f.attn->to(torch::kFloat32);
    f.u = f.u.to(torch::kFloat32);
    f.v = f.v.to(torch::kFloat32);
    auto got = module_attention(f, w.to(torch::kFloat32), mem.to(torch::kFloat32), runs, position, s);
    SCOPED_TRACE(testing::Message() << "same_length=" << same_length << " gap=" << gap);
    expect_close(got.to(torch::kFloat64), want, 1e-4);
  }
}

TEST(RelAttention, OldMemoryAfterSkipsUsesTheDistancesIncludingTheGap) {
  Fixture f;
  for (int64_t gap : {3, 8}) {        // one skipped segment of 3, or two consecutive ones
    for (int64_t clamp : {0, 9}) {
      NaiveSettings s;
      s.clamp_len = clamp;
      s.mem_len = 4;
      const int64_t t = 3, m = 4, position = 30;
      std::vector<MemoryRun> runs{{position - gap - m, m}};
      auto w = torch::randn({2, t, f.cfg.d_model}, torch::kFloat64);
      auto mem = torch::randn({2, m, f.cfg.d_model}, torch::kFloat64);
      auto got = module_attention(f, w, mem, runs, position, s);
      auto want = naive_attention(f.attn, w, mem, positions_of(runs, position, t), position, f.u, f.v, s);
      expect_close(got, want);
      // And it differs from pretending the memory were fresh.
      auto fresh = naive_attention(f.attn, w, mem, positions_of({{position - m, m}}, position, t), position, f.u, f.v, s);
      EXPECT_GT((got - fresh).abs().max().item<double>(), 1e-6);
    }
  }
  // A memory made of several runs of different ages (mem_len > tgt_len with skips in between).
  NaiveSettings s;
  s.mem_len = 7;
  const int64_t t = 2, position = 40;
  std::vector<MemoryRun> runs{{25, 3}, {33, 2}, {38, 2}};
  auto w = torch::randn({1, t, f.cfg.d_model}, torch::kFloat64);
  auto mem = torch::randn({1, 7, f.cfg.d_model}, torch::kFloat64);
  expect_close(module_attention(f, w, mem, runs, position, s),
               naive_attention(f.attn, w, mem, positions_of(runs, position, t), position, f.u, f.v, s));
}

TEST(RelAttention, CrossHeadPermutationEqualsNaivePerHeadSwap) {
  Fixture f(4);
  NaiveSettings s;
  s.mem_len = 3;
  s.perm = {2, 0, 3, 1};
  const int64_t t = 3, m = 3, position = 10;
  std::vector<MemoryRun> runs{{position - m, m}};
  auto w = torch::randn({2, t, f.cfg.d_model}, torch::kFloat64);
  auto mem = torch::randn({2, m, f.cfg.d_model}, torch::kFloat64);
  auto got = module_attention(f, w, mem, runs, position, s);
  expect_close(got, naive_attention(f.attn, w, mem, positions_of(runs, position, t), position, f.u, f.v, s));
  NaiveSettings plain = s;
  plain.perm.clear();
  EXPECT_GT((got - module_attention(f, w, mem, runs, position, plain)).abs().max().item<double>(), 1e-6);
  NaiveSettings identity = s;
  identity.perm = {0, 1, 2, 3};
  EXPECT_TRUE(torch::equal(module_attention(f, w, mem, runs, position, identity),
                           module_attention(f, w, mem, runs, position, plain)));
  // Gradients through the permuted heads: directional derivatives by central differences.
  auto wg = w.clone().requires_grad_();
  auto probe = torch::randn_like(got);
  std::vector<Tensor> wrt{wg, f.attn->qkv_net->weight, f.attn->r_net->weight};
  auto objective = [&] { return (module_attention(f, wg, mem, runs, position, s) * probe).sum(); };
  expect_directional_derivatives(objective, wrt);
}

TEST(RelAttention, HeadMaskOfOnesIsNoMaskAndMaskingActsOnlyThroughThatHead) {
  Fixture f(3);
  NaiveSettings s;
  s.mem_len = 2;
  const int64_t t = 4, m = 2, position = 9;
  std::vector<MemoryRun> runs{{position - m, m}};
  auto w = torch::randn({2, t, f.cfg.d_model}, torch::kFloat64);
  auto mem = torch::randn({2, m, f.cfg.d_model}, torch::kFloat64);
  auto plain = module_attention(f, w, mem, runs, position, s);
  NaiveSettings ones = s;
  ones.head_mask = torch::ones({3}, torch::kFloat64);
  EXPECT_TRUE(torch::equal(module_attention(f, w, mem, runs, position, ones), plain));
  NaiveSettings masked = s;
  masked.head_mask = torch::tensor({1.0, 0.0, 1.0}, torch::kFloat64);
  expect_close(module_attention(f, w, mem, runs, position, masked),
               naive_attention(f.attn, w, mem, positions_of(runs, position, t), position, f.u, f.v, masked));
}

TEST(RelAttention, GradientsOfTheFusedSoftmaxMatchAutogradOfTheNaiveShift) {
  // Backward of the strided relative shift against autograd through plain indexing.
  torch::manual_seed(3);
  for (auto [t, m] : {std::pair<int64_t, int64_t>{4, 3}, {1, 5}, {5, 0}}) {
    const int64_t n = 2, k = t + m;
    auto ac = torch::randn({n, t, k}, torch::dtype(torch::kFloat64).requires_grad(true));
    auto bd = torch::randn({n, t, k}, torch::dtype(torch::kFloat64).requires_grad(true));
    auto mask = (torch::arange(k).unsqueeze(0) > (m + torch::arange(t)).unsqueeze(1));
    auto p = kernels::relative_attention_probs(ac, {bd}, {{0, k, k - 1, k}}, mask, 0.5);
    auto g = torch::randn_like(p);
    auto grads = torch::autograd::grad({(p * g).sum()}, {ac, bd});
    // Naive: gather BD[i][j + T - 1 - i] for visible entries.
    auto idx = (torch::arange(k).unsqueeze(0) + (t - 1) - torch::arange(t).unsqueeze(1)).clamp(0, k - 1);
    auto shifted = bd.gather(2, idx.unsqueeze(0).expand({n, t, k}));
    auto s = ((ac + shifted) * 0.5).masked_fill(mask, -INFINITY);
    auto p2 = torch::softmax(s, -1);
    auto grads2 = torch::autograd::grad({(p2 * g).sum()}, {ac, bd});
    EXPECT_LT((p - p2).abs().max().item<double>(), 1e-12);
    EXPECT_LT((grads[0] - grads2[0]).abs().max().item<double>(), 1e-12);
    EXPECT_LT((grads[1] - grads2[1]).abs().max().item<double>(), 1e-12);
  }
  // A memory-only block (older run): table of T + len - 1 distances.
  const int64_t n = 2, t = 3, len = 4, table = t + len - 1;
  auto ac = torch::randn({n, t, len + t}, torch::dtype(torch::kFloat64).requires_grad(true));
  auto bd_mem = torch::randn({n, t, table}, torch::dtype(torch::kFloat64).requires_grad(true));
  auto bd_cur = torch::randn({n, t, t}, torch::dtype(torch::kFloat64).requires_grad(true));
  auto mask = torch::cat({torch::zeros({t, len}, torch::kBool), torch::arange(t).unsqueeze(0) > torch::arange(t).unsqueeze(1)}, 1);
  auto p = kernels::relative_attention_probs(ac, {bd_mem, bd_cur}, {{0, len, 9, table}, {len, t, t - 1, t}}, mask, 1.0);
  auto g = torch::randn_like(p);
  auto grads = torch::autograd::grad({(p * g).sum()}, {ac, bd_mem, bd_cur});
  auto idx_m = torch::arange(len).unsqueeze(0) + (t - 1) - torch::arange(t).unsqueeze(1);
  auto idx_c = (torch::arange(t).unsqueeze(0) + (t - 1) - torch::arange(t).unsqueeze(1)).clamp(0, t - 1);
  auto shifted = torch::cat({bd_mem.gather(2, idx_m.unsqueeze(0).expand({n, t, len})),
                             bd_cur.gather(2, idx_c.unsqueeze(0).expand({n, t, t}))}, 2);
  auto p2 = torch::softmax((ac + shifted).masked_fill(mask, -INFINITY), -1);
  auto grads2 = torch::autograd::grad({(p2 * g).sum()}, {ac, bd_mem, bd_cur});
  for (int i = 0; i < 3; ++i) EXPECT_LT((grads[i] - grads2[i]).abs().max().item<double>(), 1e-12) << i;
}

// The tensor-op path in bf16, as autocast feeds it on a GPU: scores added into float32 copies, the
// shift a view of the padded table, the softmax in float32; probabilities and gradients against
// float64 through plain indexing on the same (bf16-rounded) values.
TEST(RelAttention, GenericPathInBf16TracksFloat64WithGradients) {
  compute::GenericKernels generic;
  torch::manual_seed(4);
  const int64_t n = 3, t = 5, len = 4, table = t + len - 1;
  auto leaf = [](std::vector<int64_t> sizes) {
    return torch::randn(sizes, torch::kFloat64).mul(3).to(torch::kBFloat16).requires_grad_();
  };
  auto ac = leaf({n, t, len + t}), bd_mem = leaf({n, t, table}), bd_cur = leaf({n, t, t});
  auto mask = torch::cat({torch::zeros({t, len}, torch::kBool), torch::arange(t).unsqueeze(0) > torch::arange(t).unsqueeze(1)}, 1);
  auto p = kernels::relative_attention_probs(ac, {bd_mem, bd_cur}, {{0, len, table - 1, table}, {len, t, t - 1, t}}, mask, 0.5);
  EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
  auto g = torch::randn(p.sizes(), torch::kFloat64);
  auto grads = torch::autograd::grad({(p.to(torch::kFloat64) * g).sum()}, {ac, bd_mem, bd_cur});
  std::vector<Tensor> x64;
  for (const auto& x : {ac, bd_mem, bd_cur}) x64.push_back(x.detach().to(torch::kFloat64).requires_grad_());
  auto idx_m = torch::arange(len).unsqueeze(0) + (t - 1) - torch::arange(t).unsqueeze(1);
  auto idx_c = (torch::arange(t).unsqueeze(0) + (t - 1) - torch::arange(t).unsqueeze(1)).clamp(0, t - 1);
  auto shifted = torch::cat({x64[1].gather(2, idx_m.unsqueeze(0).expand({n, t, len})),
                             x64[2].gather(2, idx_c.unsqueeze(0).expand({n, t, t}))}, 2);
  auto p64 = torch::softmax(((x64[0] + shifted) * 0.5).masked_fill(mask, -INFINITY), -1);
  auto grads64 = torch::autograd::grad({(p64 * g).sum()}, x64);
  EXPECT_LT((p.to(torch::kFloat64) - p64).abs().max().item<double>(), 8e-3);  // bf16 keeps 8 bits
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(grads[i].scalar_type(), torch::kBFloat16) << i;
    const double scale = grads64[i].abs().max().item<double>();
    EXPECT_LT((grads[i].to(torch::kFloat64) - grads64[i]).abs().max().item<double>(), 0.02 * scale) << i;
  }
}

// What a GPU runs where no fused kernel applies: the same attention with tensor ops only (the
// relative shift as a view, the softmax in float32 or float64), forced on the CPU.
TEST(RelAttention, GenericPathMatchesNaiveLoopWithGradients) {
  compute::GenericKernels generic;
  // Fresh, aged and several-run memories; SCH; same_length; clamp; a head mask; float64.
  struct Case {
    int64_t t;
    std::vector<MemoryRun> runs;
    bool same_length;
    int64_t clamp;
    std::vector<int64_t> perm;
  };
  const int64_t position = 40;
  for (const Case& c : {Case{5, {}, false, 0, {}}, Case{3, {{37, 3}}, true, 0, {}}, Case{4, {{30, 4}}, false, 5, {2, 0, 1}},
                        Case{2, {{25, 3}, {33, 2}, {38, 2}}, false, 0, {1, 2, 0}}, Case{70, {{10, 20}}, true, 0, {}}}) {
    Fixture f(3);
    NaiveSettings s;
    s.same_length = c.same_length;
    s.clamp_len = c.clamp;
    s.perm = c.perm;
    int64_t m = 0;
    for (const auto& r : c.runs) m += r.length;
    s.mem_len = std::max<int64_t>(m, 4);
    s.head_mask = torch::tensor({1.0, 0.5, 1.0}, torch::kFloat64);
    auto w = torch::randn({2, c.t, f.cfg.d_model}, torch::kFloat64);
    Tensor mem = m > 0 ? torch::randn({2, m, f.cfg.d_model}, torch::kFloat64) : Tensor();
    const auto want = naive_attention(f.attn, w, mem, positions_of(c.runs, position, c.t), position, f.u, f.v, s);
    SCOPED_TRACE(testing::Message() << "t=" << c.t << " runs=" << c.runs.size() << " same_length=" << c.same_length);
    expect_close(module_attention(f, w, mem, c.runs, position, s), want);
    // Directional derivatives by central differences.
    auto wg = w.clone().requires_grad_();
    auto probe = torch::randn_like(want);
    std::vector<Tensor> wrt{wg, f.attn->qkv_net->weight, f.attn->r_net->weight, f.attn->o_net->weight};
    auto objective = [&] { return (module_attention(f, wg, mem, c.runs, position, s) * probe).sum(); };
    expect_directional_derivatives(objective, wrt);
    // The same in float32, as a GPU computes it.
    f.attn->to(torch::kFloat32);
    f.u = f.u.to(torch::kFloat32);
    f.v = f.v.to(torch::kFloat32);
    NaiveSettings s32 = s;
    s32.head_mask = s.head_mask.to(torch::kFloat32);
    auto got32 = module_attention(f, w.to(torch::kFloat32), m > 0 ? mem.to(torch::kFloat32) : Tensor(), c.runs, position, s32);
    expect_close(got32.to(torch::kFloat64), want, 1e-4);
  }
}
