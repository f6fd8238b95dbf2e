// xl's flash relative attention kernel (flash_rel_attention.h) against an explicit float64 loop
// written here, and the model's evaluation through it against LibTorch's fused kernel and the
// explicit path. Skipped without a GPU; ctest label "cuda".
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "xl/compute/kernel_choice.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cpu/chunked_attention.h"
#include "xl/kernels/cuda/flash_rel_attention.h"
#include "xl/model/transformer_xl.h"
#include "../unit/support/model_sizes.h"

using namespace xl;
using namespace xl::model;
using torch::Tensor;

namespace {

// Whether this build and GPU run the kernel (a CUDA compiler at build time, sm_80 or later).
bool flash_available() {
  if (!torch::cuda::is_available()) return false;
  torch::NoGradGuard no_grad;
  compute::KernelSetScope own(compute::KernelSet::kOwn);
  return kernels::flash_rel_attention_applies(torch::zeros({1, 1, 1, 8}, torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16)),
                                     1, false);
}

// LibTorch's deterministic algorithms on or off for a scope, restored after (the backward runs
// with them off, as XL_DETERMINISTIC=0 leaves them: its sums are atomic).
struct DeterministicScope {
  const bool was = at::globalContext().deterministicAlgorithms();
  const bool warn = at::globalContext().deterministicAlgorithmsWarnOnly();
  explicit DeterministicScope(bool on) { at::globalContext().setDeterministicAlgorithms(on, false); }
  ~DeterministicScope() { at::globalContext().setDeterministicAlgorithms(was, warn); }
};

#define REQUIRE_FLASH() \
  if (!flash_available()) GTEST_SKIP() << "no GPU, no flash kernel in this build, or a GPU older than sm_80"

struct Case {
  int64_t b, t, h, dh, old_len, mem;  // an aged memory run of old_len keys, then mem + t adjacent
  bool same_length;
  torch::Dtype dtype;      // the product dtype
  torch::Dtype given;      // the operands' dtype as passed
  std::vector<int64_t> heads;
};

std::string name(const Case& c) {
  return "b" + std::to_string(c.b) + " t" + std::to_string(c.t) + " h" + std::to_string(c.h) + " dh" +
         std::to_string(c.dh) + " old" + std::to_string(c.old_len) + " mem" + std::to_string(c.mem) +
         (c.same_length ? " same_length" : "") + " " + std::string(c10::toString(c.dtype)) + " given " +
         c10::toString(c.given) + (c.heads.empty() ? "" : " sch");
}

// softmax(scale (q_u k^T + shift(q_v R^T)) masked) value, one query at a time, in float64.
Tensor naive(const Tensor& q, const Tensor& u, const Tensor& v, const Tensor& kv, const std::vector<Tensor>& tables,
             const std::vector<kernels::KeyBlock>& blocks, const std::vector<int64_t>& heads, const Tensor& mask, double scale) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), D = q.size(3), K = kv.size(1);
  auto Q = q.to(torch::kDouble).contiguous(), KV = kv.to(torch::kDouble).contiguous();
  auto U = u.to(torch::kDouble), V = v.to(torch::kDouble);
  std::vector<Tensor> R;
  for (const auto& t : tables) R.push_back(t.to(torch::kDouble).contiguous());
  auto qa = Q.accessor<double, 4>();
  auto kva = KV.accessor<double, 5>();
  auto ua = U.accessor<double, 2>(), va = V.accessor<double, 2>();
  auto ma = mask.accessor<bool, 2>();
  Tensor out = torch::zeros({B, T, H, D}, torch::kDouble);
  auto oa = out.accessor<double, 4>();
  std::vector<double> logit(K);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = heads.empty() ? h : heads[h];
      for (int64_t i = 0; i < T; ++i) {
        double top = -std::numeric_limits<double>::infinity();
        for (size_t n = 0; n < blocks.size(); ++n) {
          auto ra = R[n].accessor<double, 3>();
          for (int64_t j = 0; j < blocks[n].len; ++j) {
            const int64_t key = blocks[n].col + j;
            logit[key] = -std::numeric_limits<double>::infinity();
            if (ma[i][key]) continue;
            const int64_t row = j + T - 1 - i;
            double content = 0, position = 0;
            for (int64_t d = 0; d < D; ++d) {
              content += (qa[b][i][h][d] + ua[h][d]) * kva[b][key][0][hk][d];
              position += (qa[b][i][h][d] + va[h][d]) * ra[row][hk][d];
            }
            logit[key] = scale * (content + position);
            top = std::max(top, logit[key]);
          }
        }
        double sum = 0;
        for (int64_t key = 0; key < K; ++key) sum += std::exp(logit[key] - top);
        for (int64_t key = 0; key < K; ++key) {
          const double p = std::exp(logit[key] - top) / sum;
          if (p == 0) continue;
          for (int64_t d = 0; d < D; ++d) oa[b][i][h][d] += p * kva[b][key][1][hk][d];
        }
      }
    }
  return out;
}

// The same function in float64 tensor operations that autograd differentiates: whole score
// matrices, the relative shift as a gather by table row j + T - 1 - i.
Tensor differentiable(const Tensor& q, const Tensor& u, const Tensor& v, const Tensor& kv,
                      const std::vector<Tensor>& tables, const std::vector<kernels::KeyBlock>& blocks,
                      const std::vector<int64_t>& heads, const Tensor& mask, double scale) {
  const int64_t T = q.size(1), H = q.size(2);
  const auto dbl = [](const Tensor& x) { return x.to(torch::kDouble); };
  const Tensor idx = heads.empty() ? torch::arange(H, torch::kLong) : torch::tensor(heads, torch::kLong);
  const Tensor perm = idx.to(q.device());
  const Tensor Q = dbl(q), key = dbl(kv.select(2, 0)).index_select(2, perm), value = dbl(kv.select(2, 1)).index_select(2, perm);
  const Tensor content = torch::einsum("bthd,bkhd->bhtk", {Q + dbl(u), key});
  std::vector<Tensor> position;
  for (size_t n = 0; n < blocks.size(); ++n) {
    const Tensor all = torch::einsum("bthd,phd->bhtp", {Q + dbl(v), dbl(tables[n]).index_select(1, perm)});
    const Tensor row = (torch::arange(blocks[n].len).unsqueeze(0) + (T - 1) - torch::arange(T).unsqueeze(1))
                           .clamp(0, blocks[n].table - 1)
                           .to(q.device());
    position.push_back(all.gather(3, row.expand({all.size(0), H, T, blocks[n].len})));
  }
  const Tensor logits = (scale * (content + torch::cat(position, 3)))
                            .masked_fill(mask.to(q.device()), -std::numeric_limits<double>::infinity());
  return torch::einsum("bhtk,bkhd->bthd", {torch::softmax(logits, -1), value});
}

// One case's operands on `options`' device and dtype, in the projections' strided layouts.
struct Inputs {
  std::vector<kernels::KeyBlock> blocks;
  Tensor q, kv, u, v, mask;
  std::vector<Tensor> tables;
  double scale = 1;
};

Inputs inputs(const Case& c, const torch::TensorOptions& options) {
  torch::manual_seed(static_cast<uint64_t>(c.t * 7 + c.dh));
  Inputs in;
  const int64_t adjacent = c.mem + c.t, k = c.old_len + adjacent, m = k - c.t;
  if (c.old_len > 0) in.blocks.push_back({0, c.old_len, c.old_len + 40 + c.t - 1, c.t + c.old_len - 1});
  in.blocks.push_back({c.old_len, adjacent, adjacent - 1, adjacent});
  in.q = torch::randn({c.b, c.t, c.h, c.dh}, options);
  in.kv = torch::randn({c.b, k, 3, c.h, c.dh}, options).narrow(2, 0, 2);  // a view, as of [B, K, 3, H, dh]
  const auto f32 = options.dtype(torch::kFloat);
  in.u = 0.5 * torch::randn({c.h, c.dh}, f32);
  in.v = 0.5 * torch::randn({c.h, c.dh}, f32);
  for (const auto& blk : in.blocks) in.tables.push_back(torch::randn({blk.table + 3, c.h, c.dh}, options).narrow(0, 3, blk.table));
  auto i = torch::arange(c.t).unsqueeze(1), j = torch::arange(k).unsqueeze(0);
  auto back = m + i - j;
  in.mask = back < 0;
  if (c.same_length) in.mask = in.mask | (back >= c.mem);
  in.mask = in.mask.to(options.device());
  in.scale = 1.0 / std::sqrt(double(c.dh));
  return in;
}

const auto bf16 = torch::kBFloat16, f16 = torch::kHalf, f32 = torch::kFloat;
// Ragged tiles (100 queries, blocks of 70 and 190 keys), one query (generation), head widths
// that fill, pad (39 -> 48, element copies) and nearly empty (8 -> 32) a tile, SCH, same_length.
const std::vector<Case> kCases = {
    {2, 100, 3, 64, 70, 90, false, bf16, bf16, {}},  {2, 100, 3, 64, 70, 90, true, bf16, f32, {2, 0, 1}},
    {1, 100, 2, 39, 0, 150, false, bf16, bf16, {1, 0}}, {2, 37, 3, 8, 20, 40, false, f16, f16, {}},
    {3, 1, 4, 64, 30, 200, false, f16, f32, {3, 2, 1, 0}}, {1, 130, 2, 128, 0, 70, true, bf16, bf16, {}},
};

// The model the model-level tests run: 3 layers of 4 heads of 16, no dropout.
ModelConfig tiny_config() {
  return xl::test::model_of_sizes(30, 3, 32, 4, 16, 64);  // tokens, layers, d_model, heads, d_head, d_inner
}

TransformerXL tiny_model_on_gpu(const ModelConfig& c, uint64_t seed) {
  TransformerXL m(c);
  m->reset_parameters(seed);
  m->to(torch::kCUDA, torch::kFloat32);
  return m;
}

}  // namespace

TEST(FlashRelAttention, TheExplicitLoopComputesTheCpuKernelsFunction) {
  // The loop the GPU kernel is checked against, itself against xl's CPU attention (float32).
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const Inputs in = inputs(c, torch::TensorOptions(torch::kCPU).dtype(torch::kFloat));
    const Tensor cpu = kernels::chunked_relative_attention(in.q + in.u, in.q + in.v, in.kv, in.tables, in.blocks, c.heads,
                                                  in.mask, in.scale);
    const Tensor loop = naive(in.q, in.u, in.v, in.kv, in.tables, in.blocks, c.heads, in.mask, in.scale);
    EXPECT_LT((cpu.to(torch::kDouble) - loop).abs().max().item<double>(), 1e-5);
  }
}

TEST(FlashRelAttention, TheDifferentiableReferenceComputesTheLoopsFunctionAndTheCpuKernelsGradients) {
  // The reference the backward is checked against: its values those of the loop, its gradients
  // (autograd's, float64) those of xl's CPU kernel's own backward (float32).
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const Inputs in = inputs(c, torch::TensorOptions(torch::kCPU).dtype(torch::kFloat));
    const Tensor loop = naive(in.q, in.u, in.v, in.kv, in.tables, in.blocks, c.heads, in.mask, in.scale);
    std::vector<Tensor> leaves = {in.q.detach().requires_grad_(), in.u.detach().requires_grad_(),
                                  in.v.detach().requires_grad_(), in.kv.detach().requires_grad_()};
    for (const auto& t : in.tables) leaves.push_back(t.detach().requires_grad_());
    const std::vector<Tensor> tables(leaves.begin() + 4, leaves.end());
    const Tensor weight = torch::randn(loop.sizes(), torch::kDouble);
    const Tensor ref = differentiable(leaves[0], leaves[1], leaves[2], leaves[3], tables, in.blocks, c.heads, in.mask,
                                      in.scale);
    EXPECT_LT((ref - loop).abs().max().item<double>(), 1e-9);
    const auto ref_grads = torch::autograd::grad({(ref * weight).sum()}, leaves);
    const Tensor cpu = kernels::chunked_relative_attention(leaves[0] + leaves[1], leaves[0] + leaves[2], leaves[3], tables,
                                                  in.blocks, c.heads, in.mask, in.scale);
    const auto cpu_grads = torch::autograd::grad({(cpu * weight.to(torch::kFloat)).sum()}, leaves);
    for (size_t i = 0; i < leaves.size(); ++i) {
      SCOPED_TRACE("operand " + std::to_string(i));
      EXPECT_LT((cpu_grads[i].to(torch::kDouble) - ref_grads[i]).abs().max().item<double>(),
                1e-4 * (1 + ref_grads[i].abs().max().item<double>()));
    }
  }
}

TEST(FlashRelAttention, MatchesAnExplicitLoop) {
  REQUIRE_FLASH();
  torch::NoGradGuard no_grad;
  for (const Case& c : kCases) {
    SCOPED_TRACE(name(c));
    const Inputs in = inputs(c, torch::TensorOptions(torch::kCUDA).dtype(c.given));
    Tensor out;
    {
      compute::AutocastScope autocast(c.dtype == bf16 ? compute::Precision::kBf16 : compute::Precision::kFp16, torch::kCUDA);
      compute::KernelSetScope own(compute::KernelSet::kOwn);
      ASSERT_TRUE(kernels::flash_rel_attention_applies(in.q, in.blocks.size(), false));
      out = kernels::flash_rel_attention(in.q, in.u, in.v, in.kv, in.tables, in.blocks, c.heads, in.mask, in.scale);
    }
    ASSERT_EQ(out.scalar_type(), c.dtype);
    // The loop reads the operands as the kernel does: rounded to the product dtype.
    auto rounded = [&](const Tensor& x) { return x.to(c.dtype).cpu(); };
    std::vector<Tensor> tables;
    for (const auto& t : in.tables) tables.push_back(rounded(t));
    const Tensor ref = naive(rounded(in.q), in.u.cpu(), in.v.cpu(), rounded(in.kv), tables, in.blocks, c.heads,
                             in.mask.cpu(), in.scale);
    const Tensor got = out.cpu().to(torch::kDouble);
    ASSERT_FALSE(torch::isnan(got).any().item<bool>());
    EXPECT_LT((got - ref).norm().item<double>() / ref.norm().item<double>(), 1e-2);
    EXPECT_LT((got - ref).abs().max().item<double>(), 5e-2);
  }
}

TEST(FlashRelAttention, BackwardMatchesAutogradOfTheReference) {
  // Gradients in q, u, v, kv and the tables through the backward kernel against autograd of the
  // float64 reference, on the operands rounded as the kernels read them.
  REQUIRE_FLASH();
  for (const Case& c : kCases) {
    if (c.dh > 64) continue;  // the backward's widths
    SCOPED_TRACE(name(c));
    DeterministicScope nondeterministic(false);
    const Inputs in = inputs(c, torch::TensorOptions(torch::kCUDA).dtype(c.given));
    std::vector<Tensor> leaves = {in.q.detach().requires_grad_(), in.u.detach().requires_grad_(),
                                  in.v.detach().requires_grad_(), in.kv.detach().requires_grad_()};
    for (const auto& t : in.tables) leaves.push_back(t.detach().requires_grad_());
    std::vector<Tensor> tables(leaves.begin() + 4, leaves.end());
    Tensor out;
    {
      compute::AutocastScope autocast(c.dtype == bf16 ? compute::Precision::kBf16 : compute::Precision::kFp16, torch::kCUDA);
      compute::KernelSetScope own(compute::KernelSet::kOwn);
      ASSERT_TRUE(kernels::flash_rel_attention_applies(in.q, in.blocks.size(), false));
      out = kernels::flash_rel_attention(leaves[0], leaves[1], leaves[2], leaves[3], tables, in.blocks, c.heads, in.mask,
                                in.scale);
    }
    const Tensor weight = torch::randn(out.sizes(), torch::TensorOptions(torch::kCUDA).dtype(torch::kDouble));
    const auto grads = torch::autograd::grad({(out.to(torch::kDouble) * weight).sum()}, leaves);

    std::vector<Tensor> rounded;
    for (const Tensor& x : leaves) {
      const bool bias = x.dim() == 2;  // u and v reach the kernel in float32
      rounded.push_back((bias ? x.detach() : x.detach().to(c.dtype)).to(torch::kDouble).requires_grad_());
    }
    const Tensor ref = differentiable(rounded[0], rounded[1], rounded[2], rounded[3],
                                      std::vector<Tensor>(rounded.begin() + 4, rounded.end()), in.blocks, c.heads,
                                      in.mask, in.scale);
    const auto ref_grads = torch::autograd::grad({(ref * weight).sum()}, rounded);
    const char* names[] = {"q", "u", "v", "kv", "table 0", "table 1"};
    for (size_t i = 0; i < leaves.size(); ++i) {
      SCOPED_TRACE(names[i]);
      ASSERT_EQ(grads[i].scalar_type(), leaves[i].scalar_type());
      const Tensor got = grads[i].to(torch::kDouble);
      ASSERT_FALSE(torch::isnan(got).any().item<bool>());
      // (A block hidden from every query, as same_length hides the aged one, has none.)
      EXPECT_LE((got - ref_grads[i]).norm().item<double>(), 2e-2 * ref_grads[i].norm().item<double>());
    }
  }
}

TEST(FlashRelAttention, RunsByDefaultOnShortSegmentsOnly) {
  REQUIRE_FLASH();
  torch::NoGradGuard no_grad;
  const auto bf16 = torch::TensorOptions(torch::kCUDA).dtype(torch::kBFloat16);
  const Tensor q = torch::zeros({2, kernels::kFlashMaxQueries, 4, 64}, bf16), longer = torch::zeros({2, kernels::kFlashMaxQueries + 1, 4, 64}, bf16);
  EXPECT_TRUE(kernels::flash_rel_attention_applies(q, 2, false));
  EXPECT_FALSE(kernels::flash_rel_attention_applies(longer, 2, false));
  EXPECT_FALSE(kernels::flash_rel_attention_applies(q, 2, true)) << "attention dropout";
  EXPECT_FALSE(kernels::flash_rel_attention_applies(q, 9, false)) << "more key blocks than the kernel takes";
  {
    compute::KernelSetScope own(compute::KernelSet::kOwn);
    EXPECT_TRUE(kernels::flash_rel_attention_applies(longer, 2, false));
  }
  {
    compute::KernelSetScope library(compute::KernelSet::kLibrary);
    EXPECT_FALSE(kernels::flash_rel_attention_applies(q, 2, false));
  }
  torch::AutoGradMode grad(true);
  EXPECT_FALSE(kernels::flash_rel_attention_applies(q, 2, false)) << "autograd on";
  compute::KernelSetScope own(compute::KernelSet::kOwn);
  {
    DeterministicScope nondeterministic(false);
    EXPECT_TRUE(kernels::flash_rel_attention_applies(q, 2, false)) << "autograd on, asked for";
    EXPECT_FALSE(kernels::flash_rel_attention_applies(torch::zeros({2, 8, 4, 128}, bf16), 2, false)) << "autograd on, dh 128";
  }
  DeterministicScope deterministic(true);
  EXPECT_FALSE(kernels::flash_rel_attention_applies(q, 2, false)) << "autograd on, deterministic algorithms";
}

TEST(FlashRelAttention, EvaluationMatchesLibTorchsKernelAndTheExplicitPath) {
  REQUIRE_FLASH();
  // The tiny model evaluated in bf16 over segments with a skipped layer (memories of two ages),
  // SCH and a head mask: through xl's kernel, LibTorch's fused attention with the positional
  // bias, and the explicit path; each the same losses within bf16 rounding.
  const ModelConfig c = tiny_config();
  TransformerXL m = tiny_model_on_gpu(c, 11);
  m->eval();
  auto run = [&](compute::KernelSet set) {
    compute::KernelSetScope kernels(set);
    torch::NoGradGuard no_grad;
    Memory mem = m->new_memory();
    std::vector<Tensor> losses;
    for (int step = 0; step < 4; ++step) {
      torch::manual_seed(step);
      auto in = torch::randint(0, c.n_token, {3, 70}, torch::kLong).cuda();
      auto tg = torch::randint(0, c.n_token, {3, 70}, torch::kLong).cuda();
      ForwardOptions o;
      o.mem_len = 90;
      o.skip = {false, step == 1 || step == 2, false};
      o.perms = {{}, {}, step == 3 ? std::vector<int64_t>{3, 1, 0, 2} : std::vector<int64_t>{}};
      o.head_mask = torch::tensor({1.0f, 1.0f, 0.0f, 1.0f}, torch::kCUDA).repeat({3, 1});
      compute::AutocastScope autocast(compute::Precision::kBf16, torch::kCUDA);
      losses.push_back(m->forward(in, tg, mem, o).to(torch::kDouble).cpu());
    }
    return torch::stack(losses);
  };
  const Tensor flash = run(compute::KernelSet::kOwn), library = run(compute::KernelSet::kLibrary), generic = run(compute::KernelSet::kGeneric);
  EXPECT_FALSE(torch::isnan(flash).any().item<bool>());
  for (const Tensor& other : {library, generic}) {
    EXPECT_LT((flash - other).abs().mean().item<double>(), 2e-2 * other.abs().mean().item<double>());
    EXPECT_LT((flash.mean(-1) - other.mean(-1)).abs().max().item<double>(), 1e-2 * other.abs().mean().item<double>());
  }
}

TEST(FlashRelAttention, TrainingMatchesLibTorchsKernel) {
  REQUIRE_FLASH();
  // A training step of the tiny model in bf16 (a skipped layer's aged memory, SCH): the loss and
  // every parameter's gradient through xl's kernels as through LibTorch's fused attention.
  const ModelConfig c = tiny_config();
  TransformerXL m = tiny_model_on_gpu(c, 12);
  m->train();
  auto run = [&](compute::KernelSet set) {
    compute::KernelSetScope kernels(set);
    DeterministicScope nondeterministic(false);
    Memory mem = m->new_memory();
    {
      torch::NoGradGuard no_grad;  // a memory of two ages: layer 1 skips the second segment
      for (int step = 0; step < 2; ++step) {
        torch::manual_seed(step);
        auto in = torch::randint(0, c.n_token, {3, 70}, torch::kLong).cuda();
        ForwardOptions o;
        o.mem_len = 90;
        o.skip = {false, step == 1, false};
        compute::AutocastScope autocast(compute::Precision::kBf16, torch::kCUDA);
        m->forward(in, in, mem, o);
      }
    }
    m->zero_grad();
    torch::manual_seed(5);
    auto in = torch::randint(0, c.n_token, {3, 70}, torch::kLong).cuda();
    auto tg = torch::randint(0, c.n_token, {3, 70}, torch::kLong).cuda();
    ForwardOptions o;
    o.mem_len = 90;
    o.perms = {{}, {2, 3, 1, 0}, {}};
    Tensor loss;
    {
      compute::AutocastScope autocast(compute::Precision::kBf16, torch::kCUDA);
      loss = m->forward(in, tg, mem, o).mean();
    }
    loss.backward();
    std::vector<Tensor> grads = {loss.detach().to(torch::kDouble).cpu().view({1})};
    for (const auto& p : m->parameters())
      if (p.grad().defined()) grads.push_back(p.grad().to(torch::kDouble).cpu().flatten());
    return grads;
  };
  const auto own = run(compute::KernelSet::kOwn), library = run(compute::KernelSet::kLibrary);
  ASSERT_EQ(own.size(), library.size());
  EXPECT_NEAR(own[0].item<double>(), library[0].item<double>(), 1e-2 * std::abs(library[0].item<double>()));
  for (size_t i = 1; i < own.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    ASSERT_FALSE(torch::isnan(own[i]).any().item<bool>());
    EXPECT_LT((own[i] - library[i]).norm().item<double>(), 5e-2 * library[i].norm().item<double>() + 1e-6);
  }
}
