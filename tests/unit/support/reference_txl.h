// A plain Transformer-XL forward for char-level models, written for the tests from the PyTorch
// Transformer-XL's description (mem_transformer.py: RelPartialLearnableMultiHeadAttn with its
// pad-and-reshape relative shift, PositionwiseFF, the memory of each layer's input), with LibTorch
// tensor ops and nothing of xl's model code: no Skip-Retain, no SCH, no head mask, no blocked
// kernels. The model is checked against it. Parameters are read by their PyTorch names.
#pragma once
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "xl/model/config.h"

namespace xl::test {

class ReferenceTxl {
 public:
  ReferenceTxl(const model::ModelConfig& c, const std::vector<std::pair<std::string, torch::Tensor>>& tensors)
      : c_(c), mems_(static_cast<size_t>(c.n_layer)) {
    for (const auto& [name, t] : tensors) p_[name] = t.detach();
  }

  // The NLL of each target [B, T]; the memories advance (each layer keeps its last mem_len inputs).
  torch::Tensor nll(const torch::Tensor& input, const torch::Tensor& target, int64_t mem_len) {
    const int64_t b = input.size(0), t = input.size(1), d = c_.d_model, h = c_.n_head, dh = c_.d_head;
    const torch::Tensor emb = p("word_emb.emb_layers.0.weight");
    torch::Tensor x = emb.index_select(0, input.reshape(-1)).view({b, t, d}) * std::sqrt(static_cast<double>(d));
    const int64_t mlen = mems_[0].defined() ? mems_[0].size(1) : 0, klen = mlen + t;
    // Sinusoids of the distances klen-1 .. 0, [sin | cos].
    torch::Tensor pos = torch::arange(klen - 1, -1, -1, x.options());
    if (c_.clamp_len > 0) pos = pos.clamp_max(static_cast<double>(c_.clamp_len));
    const torch::Tensor inv_freq = 1 / torch::pow(10000.0, torch::arange(0, d, 2, x.options()) / static_cast<double>(d));
    const torch::Tensor sinusoid = torch::outer(pos, inv_freq);
    const torch::Tensor pos_emb = torch::cat({sinusoid.sin(), sinusoid.cos()}, -1);  // [klen, d]
    // Query i (at memory offset mlen + i) may see key j when j <= mlen + i (and with same_length
    // only the last mem_len of those).
    auto i = torch::arange(t).unsqueeze(1), j = torch::arange(klen).unsqueeze(0);
    torch::Tensor masked = j > (i + mlen);
    if (c_.same_length) masked = masked | (j <= i + mlen - mem_len);
    std::vector<torch::Tensor> next(static_cast<size_t>(c_.n_layer));
    for (int64_t l = 0; l < c_.n_layer; ++l) {
      const std::string a = "layers." + std::to_string(l) + ".dec_attn.", f = "layers." + std::to_string(l) + ".pos_ff.";
      const torch::Tensor& mem = mems_[static_cast<size_t>(l)];
      const torch::Tensor cat = mlen > 0 ? torch::cat({mem, x}, 1) : x;
      next[static_cast<size_t>(l)] = cat.slice(1, std::max<int64_t>(0, klen - mem_len)).detach();
      const torch::Tensor kv_in = c_.pre_lnorm ? layer_norm(cat, a + "layer_norm") : cat;
      const torch::Tensor heads = torch::matmul(kv_in, p(a + "qkv_net.weight").t()).view({b, klen, 3, h, dh});
      const torch::Tensor q = heads.select(2, 0).slice(1, mlen), k = heads.select(2, 1), v = heads.select(2, 2);
      const torch::Tensor r = torch::matmul(pos_emb, p(a + "r_net.weight").t()).view({klen, h, dh});
      const torch::Tensor u = c_.untie_r ? p(a + "r_w_bias") : p("r_w_bias");
      const torch::Tensor rb = c_.untie_r ? p(a + "r_r_bias") : p("r_r_bias");
      const torch::Tensor ac = torch::einsum("bihd,bjhd->bhij", {q + u, k});
      const torch::Tensor bd = rel_shift(torch::einsum("bihd,jhd->bhij", {q + rb, r}));
      torch::Tensor score = (ac + bd) / std::sqrt(static_cast<double>(dh));
      score = score.masked_fill(masked.view({1, 1, t, klen}), -INFINITY);
      const torch::Tensor prob = torch::softmax(score, -1);
      const torch::Tensor vec = torch::einsum("bhij,bjhd->bihd", {prob, v}).reshape({b, t, h * dh});
      const torch::Tensor attn = torch::matmul(vec, p(a + "o_net.weight").t());
      const torch::Tensor out = c_.pre_lnorm ? x + attn : layer_norm(x + attn, a + "layer_norm");
      const torch::Tensor ff_in = c_.pre_lnorm ? layer_norm(out, f + "layer_norm") : out;
      const torch::Tensor ff = torch::linear(torch::relu(torch::linear(ff_in, p(f + "CoreNet.0.weight"), p(f + "CoreNet.0.bias"))),
                                             p(f + "CoreNet.3.weight"), p(f + "CoreNet.3.bias"));
      x = c_.pre_lnorm ? out + ff : layer_norm(out + ff, f + "layer_norm");
    }
    mems_ = next;
    const torch::Tensor logits = torch::linear(x, emb, p("crit.out_layers.0.bias"));
    return -torch::log_softmax(logits, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1);
  }

 private:
  const torch::Tensor& p(const std::string& name) const { return p_.at(name); }

  torch::Tensor layer_norm(const torch::Tensor& x, const std::string& prefix) const {
    return torch::layer_norm(x, {c_.d_model}, p(prefix + ".weight"), p(prefix + ".bias"), 1e-5);
  }

  // mem_transformer.py's _rel_shift: pad a zero column in front, reinterpret [q, k+1] as [k+1, q],
  // drop the first row and reinterpret back, so out[i][j] = x[i][j + q - 1 - i].
  static torch::Tensor rel_shift(const torch::Tensor& x) {
    const auto s = x.sizes();
    const int64_t q = s[2], k = s[3];
    torch::Tensor padded = torch::cat({torch::zeros({s[0], s[1], q, 1}, x.options()), x}, -1);
    return padded.view({s[0], s[1], k + 1, q}).slice(2, 1).reshape({s[0], s[1], q, k});
  }

  model::ModelConfig c_;
  std::map<std::string, torch::Tensor> p_;
  std::vector<torch::Tensor> mems_;
};

}  // namespace xl::test
