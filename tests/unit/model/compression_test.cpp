// The Compressive Transformer's compression functions and training losses
// (xl/model/compression.h, Rae et al.) against explicit loops written here: mean and max pooling,
// the convolution with kernel = stride = rate (mean pooling at its start, then any weights), the
// dilated stack, the decoder, the auto-encoding loss and the attention-reconstruction loss (content
// attention from the layer's own weights), and where the losses' gradients go.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "xl/model/compression.h"
#include "xl/model/config.h"
#include "xl/model/rel_attention.h"

namespace {

using torch::Tensor;
using xl::model::Compression;
using Vec = std::vector<double>;

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

Tensor randn(std::vector<int64_t> shape) { return torch::randn(shape, kF64); }

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LE(diff, tol) << what << ": max abs difference " << diff;
}

// Slot s of stream b of x [B, S, d] as a vector.
Vec slot(const Tensor& x, int64_t b, int64_t s) {
  auto a = x.accessor<double, 3>();
  Vec v(static_cast<size_t>(x.size(2)));
  for (int64_t i = 0; i < x.size(2); ++i) v[static_cast<size_t>(i)] = a[b][s][i];
  return v;
}

Tensor from_slots(const std::vector<std::vector<Vec>>& slots) {  // [B][S] of d -> [B, S, d]
  const auto B = static_cast<int64_t>(slots.size()), S = static_cast<int64_t>(slots[0].size());
  const auto d = S ? static_cast<int64_t>(slots[0][0].size()) : 0;
  Tensor out = torch::zeros({B, S, d}, kF64);
  auto a = out.accessor<double, 3>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t i = 0; i < d; ++i) a[b][s][i] = slots[static_cast<size_t>(b)][static_cast<size_t>(s)][static_cast<size_t>(i)];
  return out;
}

// M [o][i] times v.
Vec matvec(const Tensor& m, const Vec& v) {
  auto a = m.accessor<double, 2>();
  Vec out(static_cast<size_t>(m.size(0)), 0.0);
  for (int64_t o = 0; o < m.size(0); ++o)
    for (int64_t i = 0; i < m.size(1); ++i) out[static_cast<size_t>(o)] += a[o][i] * v[static_cast<size_t>(i)];
  return out;
}

// Each group of `rate` consecutive slots -> one, by `pool` over the group's slots.
template <typename Pool>
Tensor pool_loop(const Tensor& x, int64_t rate, Pool pool) {
  std::vector<std::vector<Vec>> out(static_cast<size_t>(x.size(0)));
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t g = 0; g < x.size(1) / rate; ++g) {
      std::vector<Vec> group;
      for (int64_t k = 0; k < rate; ++k) group.push_back(slot(x, b, g * rate + k));
      out[static_cast<size_t>(b)].push_back(pool(group));
    }
  return from_slots(out);
}

Vec mean_of(const std::vector<Vec>& group) {
  Vec m(group[0].size(), 0.0);
  for (const Vec& v : group)
    for (size_t i = 0; i < v.size(); ++i) m[i] += v[i] / static_cast<double>(group.size());
  return m;
}

Vec max_of(const std::vector<Vec>& group) {
  Vec m = group[0];
  for (const Vec& v : group)
    for (size_t i = 0; i < v.size(); ++i) m[i] = std::max(m[i], v[i]);
  return m;
}

// Conv1d with kernel = stride = rate, PyTorch's weight layout W [out, in, k]:
// y[b, g, o] = bias[o] + sum_k sum_i W[o, i, k] x[b, g * rate + k, i].
Tensor conv_loop(const Tensor& x, int64_t rate, const Tensor& w, const Tensor& bias) {
  auto W = w.accessor<double, 3>();
  auto bb = bias.accessor<double, 1>();
  return pool_loop(x, rate, [&](const std::vector<Vec>& group) {
    Vec y(static_cast<size_t>(w.size(0)));
    for (int64_t o = 0; o < w.size(0); ++o) {
      double s = bb[o];
      for (int64_t k = 0; k < rate; ++k)
        for (int64_t i = 0; i < w.size(1); ++i) s += W[o][i][k] * group[static_cast<size_t>(k)][static_cast<size_t>(i)];
      y[static_cast<size_t>(o)] = s;
    }
    return y;
  });
}

// The dilated stack: the group left-padded with zeros to 2^L slots, then L levels each joining
// neighbours (a older, b newer) as W[l][0] a + W[l][1] b + bias[l], down to one slot.
Tensor dilated_loop(const Tensor& x, int64_t rate, const Tensor& w, const Tensor& bias) {
  int64_t levels = 0;
  while ((int64_t{1} << levels) < rate) ++levels;
  return pool_loop(x, rate, [&](const std::vector<Vec>& group) {
    std::vector<Vec> level(static_cast<size_t>((int64_t{1} << levels) - rate), Vec(group[0].size(), 0.0));
    level.insert(level.end(), group.begin(), group.end());
    for (int64_t l = 0; l < levels; ++l) {
      std::vector<Vec> next;
      for (size_t j = 0; j + 1 < level.size(); j += 2) {
        const Vec a = matvec(w[l][0], level[j]), b = matvec(w[l][1], level[j + 1]);
        Vec y(a.size());
        for (size_t o = 0; o < y.size(); ++o) y[o] = a[o] + b[o] + bias[l][static_cast<int64_t>(o)].item<double>();
        next.push_back(y);
      }
      level = next;
    }
    EXPECT_EQ(level.size(), 1u);
    return level[0];
  });
}

// The transposed convolution back: out[b, g * rate + k, o] = bias[o] + sum_i D[k * d + o, i] z[b, g, i].
Tensor decode_loop(const Tensor& z, int64_t rate, const Tensor& D, const Tensor& bias) {
  const int64_t d = z.size(2);
  std::vector<std::vector<Vec>> out(static_cast<size_t>(z.size(0)));
  for (int64_t b = 0; b < z.size(0); ++b)
    for (int64_t g = 0; g < z.size(1); ++g) {
      const Vec zi = slot(z, b, g);
      for (int64_t k = 0; k < rate; ++k) {
        Vec y(static_cast<size_t>(d));
        for (int64_t o = 0; o < d; ++o) {
          double s = bias[o].item<double>();
          for (int64_t i = 0; i < d; ++i) s += D[k * d + o][i].item<double>() * zi[static_cast<size_t>(i)];
          y[static_cast<size_t>(o)] = s;
        }
        out[static_cast<size_t>(b)].push_back(y);
      }
    }
  return from_slots(out);
}

Compression make(const std::string& fn, int64_t rate, int64_t d) {
  Compression c(fn, rate, d);
  c->to(torch::kFloat64);
  return c;
}

void perturb(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) p.normal_(0, 0.7);
}

}  // namespace

TEST(Compression, MeanAndMaxPoolEachGroupOfRateSlots) {
  torch::manual_seed(1);
  for (int64_t rate : {1, 2, 3, 4})
    for (int64_t n : {1, 3}) {
      const Tensor x = randn({2, n * rate, 5});
      const std::string at = " rate " + std::to_string(rate) + " groups " + std::to_string(n);
      expect_close(make("mean", rate, 5)(x), pool_loop(x, rate, mean_of), 1e-14, "mean" + at);
      expect_close(make("max", rate, 5)(x), pool_loop(x, rate, max_of), 0, "max" + at);
    }
  EXPECT_TRUE(make("max", 2, 5)->parameters().empty());
  EXPECT_FALSE(make("mean", 2, 5)->learned());
  EXPECT_THROW(make("mean", 2, 5)->decode(randn({1, 1, 5})), c10::Error);
}

// The convolution starts as mean pooling; with other weights it is Conv1d(kernel = stride = rate).
TEST(Compression, ConvStartsAsMeanPoolingAndIsAStridedConvolution) {
  torch::manual_seed(2);
  for (int64_t rate : {1, 2, 3}) {
    Compression c = make("conv", rate, 4);
    const Tensor x = randn({2, 3 * rate, 4});
    const std::string at = " rate " + std::to_string(rate);
    // (reset_parameters makes I / rate in float32: 1 / 3 is float's in a float64 module.)
    expect_close(c(x), pool_loop(x, rate, mean_of), 1e-6, "conv at its start" + at);
    perturb(*c);
    torch::NoGradGuard no_grad;
    expect_close(c(x), conv_loop(x, rate, c->weight, c->bias), 1e-12, "conv" + at);
    c->reset_parameters();
    expect_close(c(x), pool_loop(x, rate, mean_of), 1e-6, "conv reset" + at);
  }
}

// The dilated stack: the mean of each pair at its start (so the group's mean for a power-of-two
// rate, the slot itself at rate 1), and the loop's formula with any weights.
TEST(Compression, DilatedIsAStackOfPairwiseConvolutions) {
  torch::manual_seed(3);
  for (int64_t rate : {1, 2, 3, 4, 5}) {
    Compression c = make("dilated", rate, 3);
    const Tensor x = randn({2, 2 * rate, 3});
    const std::string at = " rate " + std::to_string(rate);
    torch::NoGradGuard no_grad;
    if ((rate & (rate - 1)) == 0) expect_close(c(x), pool_loop(x, rate, mean_of), 1e-14, "dilated at its start" + at);
    expect_close(c(x), dilated_loop(x, rate, c->weight, c->bias), 1e-14, "dilated at its start" + at);
    perturb(*c);
    expect_close(c(x), dilated_loop(x, rate, c->weight, c->bias), 1e-12, "dilated" + at);
  }
}

// The decoder copies a slot to each of its rate positions at its start; then the transposed
// convolution's formula.
TEST(Compression, DecoderIsATransposedConvolution) {
  torch::manual_seed(4);
  for (const std::string fn : {"conv", "dilated"})
    for (int64_t rate : {1, 3}) {
      Compression c = make(fn, rate, 4);
      const Tensor z = randn({2, 2, 4});
      const std::string at = fn + " rate " + std::to_string(rate);
      torch::NoGradGuard no_grad;
      expect_close(c->decode(z), z.repeat_interleave(rate, 1), 1e-15, "decoder at its start, " + at);
      perturb(*c);
      expect_close(c->decode(z), decode_loop(z, rate, c->decoder_weight, c->decoder_bias), 1e-12, "decoder, " + at);
    }
}

TEST(Compression, BuildingOneDrawsNoRandomNumbers) {
  torch::manual_seed(11);
  const Tensor a = torch::randn({8});
  torch::manual_seed(11);
  Compression c("conv", 3, 16), d("dilated", 4, 16);
  const Tensor b = torch::randn({8});
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_THROW(Compression("avg", 2, 4), c10::Error);
  EXPECT_THROW(Compression("mean", 0, 4), c10::Error);
}

// mean((decode(compressed) - old)^2) over every element; old is a target only.
TEST(Compression, AutoEncodingLossIsTheDecodersMeanSquaredError) {
  torch::manual_seed(5);
  const int64_t rate = 2, d = 3;
  Compression c = make("conv", rate, d);
  perturb(*c);
  const Tensor old = randn({2, 2 * rate, d}).requires_grad_();
  const Tensor compressed = c(old.detach());
  const Tensor loss = xl::model::auto_encoding_loss(*c, old, compressed);

  Tensor recon;
  {
    torch::NoGradGuard no_grad;
    recon = decode_loop(compressed.detach(), rate, c->decoder_weight, c->decoder_bias);
  }
  const Tensor diff = recon - old.detach();
  double want = 0;
  auto a = diff.accessor<double, 3>();
  for (int64_t b = 0; b < diff.size(0); ++b)
    for (int64_t s = 0; s < diff.size(1); ++s)
      for (int64_t i = 0; i < d; ++i) want += a[b][s][i] * a[b][s][i] / static_cast<double>(diff.numel());
  EXPECT_NEAR(loss.item<double>(), want, 1e-12);

  loss.backward();
  EXPECT_FALSE(old.grad().defined());  // the target takes no gradient
  ASSERT_TRUE(c->weight.grad().defined());
  EXPECT_GT(c->weight.grad().abs().sum().item<double>(), 0);  // the encoder learns through `compressed`
  // d loss / d decoder_bias[o] = 2 / N * sum over streams and positions of diff[.., o].
  ASSERT_TRUE(c->decoder_bias.grad().defined());
  for (int64_t o = 0; o < d; ++o) {
    double g = 0;
    for (int64_t b = 0; b < diff.size(0); ++b)
      for (int64_t s = 0; s < diff.size(1); ++s) g += 2 * a[b][s][o] / static_cast<double>(diff.numel());
    EXPECT_NEAR(c->decoder_bias.grad()[o].item<double>(), g, 1e-12) << o;
  }
}

namespace {

struct AttnFixture {
  xl::model::ModelConfig cfg;
  xl::model::RelMultiHeadAttn attn{nullptr};
  explicit AttnFixture(bool pre_ln) {
    cfg.d_model = 6;
    cfg.n_head = 2;
    cfg.d_head = 3;
    cfg.dropout = 0;
    cfg.pre_lnorm = pre_ln;
    attn = xl::model::RelMultiHeadAttn(cfg, 2, false);
    torch::NoGradGuard no_grad;
    for (auto& p : attn->parameters()) p.normal_(0, 0.6);
    attn->to(torch::kFloat64);
  }
};

// LayerNorm of one slot (biased variance, eps 1e-5) with weight g and bias b.
Vec layer_norm(const Vec& x, const Tensor& g, const Tensor& b) {
  double mean = 0, var = 0;
  for (double v : x) mean += v / static_cast<double>(x.size());
  for (double v : x) var += (v - mean) * (v - mean) / static_cast<double>(x.size());
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = (x[i] - mean) / std::sqrt(var + 1e-5) * g[static_cast<int64_t>(i)].item<double>() +
           b[static_cast<int64_t>(i)].item<double>();
  return y;
}

// The content attention out[b][t][h][e] of the queries of w over the keys and values of `keys`:
// softmax_s(q . k_s / sqrt(dh)) v_s, with q, k, v from the rows of qkv_net's weight (q, then k,
// then v, H * dh rows each), after the layer norm when pre_lnorm.
std::vector<double> content_attention_loop(xl::model::RelMultiHeadAttnImpl& a, const Tensor& w, const Tensor& keys) {
  torch::NoGradGuard no_grad;
  const int64_t B = w.size(0), T = w.size(1), S = keys.size(1), H = a.n_head, dh = a.d_head;
  const Tensor W = a.qkv_net->weight;
  auto in = [&](const Tensor& x, int64_t b, int64_t s) {
    const Vec v = slot(x, b, s);
    return a.pre_lnorm ? layer_norm(v, a.layer_norm->weight, a.layer_norm->bias) : v;
  };
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const Vec q = matvec(W.narrow(0, h * dh, dh), in(w, b, t));
        std::vector<double> score(static_cast<size_t>(S));
        std::vector<Vec> v(static_cast<size_t>(S));
        double top = -1e300;
        for (int64_t s = 0; s < S; ++s) {
          const Vec x = in(keys, b, s);
          const Vec k = matvec(W.narrow(0, H * dh + h * dh, dh), x);
          v[static_cast<size_t>(s)] = matvec(W.narrow(0, 2 * H * dh + h * dh, dh), x);
          double dot = 0;
          for (int64_t e = 0; e < dh; ++e) dot += q[static_cast<size_t>(e)] * k[static_cast<size_t>(e)];
          score[static_cast<size_t>(s)] = dot / std::sqrt(static_cast<double>(dh));
          top = std::max(top, score[static_cast<size_t>(s)]);
        }
        double z = 0;
        for (double& sc : score) z += (sc = std::exp(sc - top));
        for (int64_t e = 0; e < dh; ++e) {
          double o = 0;
          for (int64_t s = 0; s < S; ++s)
            o += score[static_cast<size_t>(s)] / z * v[static_cast<size_t>(s)][static_cast<size_t>(e)];
          out.push_back(o);
        }
      }
  return out;
}

double reconstruction_loop(xl::model::RelMultiHeadAttnImpl& a, const Tensor& w, const Tensor& old, const Tensor& compressed) {
  const auto target = content_attention_loop(a, w, old), got = content_attention_loop(a, w, compressed);
  double mse = 0;
  for (size_t i = 0; i < got.size(); ++i) mse += (got[i] - target[i]) * (got[i] - target[i]) / static_cast<double>(got.size());
  return mse;
}

}  // namespace

// The loss's value: the MSE between the content attention over the old memory and over its
// compression, both from the layer's weights (and its layer norm with pre_lnorm).
TEST(Compression, AttentionReconstructionLossMatchesTheContentAttentionLoop) {
  for (bool pre_ln : {false, true}) {
    torch::manual_seed(6);
    AttnFixture f(pre_ln);
    const int64_t rate = 2;
    Compression c = make("conv", rate, 6);
    perturb(*c);
    const Tensor w = randn({2, 3, 6}), old = randn({2, 2 * rate, 6});
    const Tensor compressed = c(old);
    const Tensor loss = xl::model::attention_reconstruction_loss(*f.attn, w, old, compressed);
    const double want = reconstruction_loop(*f.attn, w, old, compressed.detach());
    EXPECT_GT(want, 1e-4);
    EXPECT_NEAR(loss.item<double>(), want, 1e-12 + 1e-10 * want) << "pre_lnorm " << pre_ln;
  }
}

// Only the compression learns from it: no gradient reaches the layer's input, the old memory or
// any of the attention's weights; the compressed memory's gradient is the loop loss's (central
// differences), and the compression network's weights get one.
TEST(Compression, AttentionReconstructionLossTrainsOnlyTheCompression) {
  for (bool pre_ln : {false, true}) {
    torch::manual_seed(7);
    AttnFixture f(pre_ln);
    const int64_t rate = 2;
    Compression c = make("conv", rate, 6);
    perturb(*c);
    const Tensor w = randn({1, 2, 6}).requires_grad_(), old = randn({1, 2 * rate, 6}).requires_grad_();
    const Tensor loss = xl::model::attention_reconstruction_loss(*f.attn, w, old, c(old.detach()));
    loss.backward();
    EXPECT_FALSE(w.grad().defined());
    EXPECT_FALSE(old.grad().defined());
    for (const auto& p : f.attn->named_parameters())
      EXPECT_FALSE(p.value().grad().defined()) << p.key() << " got a gradient (pre_lnorm " << pre_ln << ")";
    ASSERT_TRUE(c->weight.grad().defined());
    EXPECT_GT(c->weight.grad().abs().sum().item<double>(), 0);
    ASSERT_TRUE(c->bias.grad().defined());

    const Tensor leaf = c(old.detach()).detach().requires_grad_();
    xl::model::attention_reconstruction_loss(*f.attn, w, old, leaf).backward();
    const double h = 1e-6;
    for (int64_t s = 0; s < leaf.size(1); ++s)
      for (int64_t i = 0; i < leaf.size(2); ++i) {
        Tensor up = leaf.detach().clone(), down = leaf.detach().clone();
        up[0][s][i] += h;
        down[0][s][i] -= h;
        const double numeric =
            (reconstruction_loop(*f.attn, w.detach(), old.detach(), up) - reconstruction_loop(*f.attn, w.detach(), old.detach(), down)) /
            (2 * h);
        EXPECT_NEAR(leaf.grad()[0][s][i].item<double>(), numeric, 1e-7) << "slot " << s << " dim " << i;
      }
  }
}
