#include "xl/model/compression.h"

#include <cmath>

#include "xl/model/rel_attention.h"

namespace xl::model {

CompressionImpl::CompressionImpl(const std::string& fn_, int64_t rate_, int64_t d_model_)
    : fn(fn_), rate(rate_), d_model(d_model_) {
  TORCH_CHECK(rate >= 1, "compression rate must be at least 1");
  const int64_t d = d_model;
  if (fn == "conv") {
    weight = register_parameter("weight", torch::empty({d, d, rate}));
    bias = register_parameter("bias", torch::empty({d}));
  } else if (fn == "dilated") {
    while ((int64_t{1} << levels) < rate) ++levels;
    weight = register_parameter("weight", torch::empty({std::max<int64_t>(levels, 1), 2, d, d}));
    bias = register_parameter("bias", torch::empty({std::max<int64_t>(levels, 1), d}));
  } else {
    TORCH_CHECK(fn == "max" || fn == "mean", "unknown compression function ", fn);
  }
  if (learned()) {
    decoder_weight = register_parameter("decoder_weight", torch::empty({rate * d, d}));
    decoder_bias = register_parameter("decoder_bias", torch::empty({d}));
  }
  reset_parameters();
}

void CompressionImpl::reset_parameters() {
  if (!learned()) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor eye = torch::eye(d_model);
  if (fn == "conv") {
    weight.copy_((eye / static_cast<double>(rate)).unsqueeze(2).expand({d_model, d_model, rate}));
  } else {
    weight.copy_((eye / 2).view({1, 1, d_model, d_model}).expand(weight.sizes()));
  }
  bias.zero_();
  decoder_weight.copy_(eye.repeat({rate, 1}));
  decoder_bias.zero_();
}

torch::Tensor CompressionImpl::forward(const torch::Tensor& old) {
  const int64_t b = old.size(0), n = old.size(1) / rate, d = d_model;
  TORCH_CHECK(old.dim() == 3 && old.size(1) == n * rate && old.size(2) == d, "compression: [B, n * rate, d] expected");
  const torch::Tensor groups = old.view({b, n, rate, d});
  if (fn == "max") return std::get<0>(groups.max(2));
  if (fn == "mean") return groups.mean(2);
  if (fn == "conv") {
    // y[b, g, o] = sum_{k, i} W[o, i, k] x[b, g * rate + k, i] + bias[o]: one product over the
    // group's rate x d inputs, ordered k-major as the view lays them.
    const torch::Tensor w = weight.permute({0, 2, 1}).reshape({d, rate * d});
    return torch::linear(old.reshape({b, n, rate * d}), w.to(old.scalar_type()), bias.to(old.scalar_type()));
  }
  // dilated: each level joins pairs, y = W0 a + W1 b + bias (a the older of the two).
  torch::Tensor x = groups;
  const int64_t padded = int64_t{1} << levels;
  if (padded > rate) x = torch::cat({torch::zeros({b, n, padded - rate, d}, old.options()), x}, 2);
  for (int64_t l = 0; l < levels; ++l) {
    const int64_t len = x.size(2) / 2;
    const torch::Tensor pairs = x.view({b, n, len, 2, d});
    x = torch::linear(pairs.select(3, 0), weight[l][0].to(old.scalar_type())) +
        torch::linear(pairs.select(3, 1), weight[l][1].to(old.scalar_type()), bias[l].to(old.scalar_type()));
  }
  return levels == 0 ? x.select(2, 0) : x.view({b, n, d});
}

torch::Tensor CompressionImpl::decode(const torch::Tensor& compressed) {
  TORCH_CHECK(learned(), "the ", fn, " compression has no decoder");
  const int64_t b = compressed.size(0), n = compressed.size(1), d = d_model;
  // y[b, g * rate + k, o] = sum_i D[k * d + o, i] z[b, g, i] + bias[o]
  const torch::Tensor y = torch::linear(compressed, decoder_weight.to(compressed.scalar_type()));
  return (y.view({b, n, rate, d}) + decoder_bias.to(compressed.scalar_type())).view({b, n * rate, d});
}

namespace {

// softmax(q k^T / sqrt(dh)) v per head: q [B, T, H, dh], k and v [B, S, H, dh] -> [B, T, H, dh].
torch::Tensor content_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const torch::Tensor scores = torch::einsum("bthd,bshd->bhts", {q, k}) * scale;
  return torch::einsum("bhts,bshd->bthd", {torch::softmax(scores, -1), v});
}

}  // namespace

torch::Tensor attention_reconstruction_loss(const RelMultiHeadAttnImpl& attn, const torch::Tensor& w,
                                            const torch::Tensor& old, const torch::Tensor& compressed) {
  const int64_t h = attn.n_head, dh = attn.d_head;
  auto norm = [&](const torch::Tensor& x) {
    if (!attn.pre_lnorm) return x;
    const auto& ln = attn.layer_norm;
    return torch::layer_norm(x, {attn.d_model}, ln->weight.detach(), ln->bias.detach(), ln->options.eps());
  };
  const torch::Tensor weight = attn.qkv_net->weight.detach();
  auto heads = [&](const torch::Tensor& x, int64_t part) {
    return torch::linear(x, weight.narrow(0, part * h * dh, h * dh).to(x.scalar_type())).view({x.size(0), x.size(1), h, dh});
  };
  const torch::Tensor q = heads(norm(w.detach()), 0);
  const torch::Tensor x_old = norm(old.detach()), x_new = norm(compressed);
  const torch::Tensor target = content_attention(q, heads(x_old, 1), heads(x_old, 2));
  return torch::mse_loss(content_attention(q, heads(x_new, 1), heads(x_new, 2)), target);
}

torch::Tensor auto_encoding_loss(CompressionImpl& compression, const torch::Tensor& old, const torch::Tensor& compressed) {
  return torch::mse_loss(compression.decode(compressed), old.detach());
}

}  // namespace xl::model
