#include "xl/model/transformer_xl.h"

#include <cmath>

#include "xl/compute/precision.h"
#include "xl/kernels/cpu/fused_dropout.h"
#include "xl/util/error.h"
#include "xl/util/parse.h"

namespace xl::model {

TransformerXLImpl::TransformerXLImpl(const ModelConfig& cfg, std::optional<uint64_t> seed)
    : config(cfg), sinusoid_(cfg.d_model) {
  cfg.validate(SettingOrigins("model config"));
  word_emb = register_module("word_emb", AdaptiveEmbedding(cfg));
  if (!cfg.per_layer_biases()) {
    r_w_bias = register_parameter("r_w_bias", torch::empty({cfg.n_head, cfg.d_head}));
    r_r_bias = register_parameter("r_r_bias", torch::empty({cfg.n_head, cfg.d_head}));
  }
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    auto layer = DecoderLayer(cfg, cfg.heads_in_layer(l), cfg.per_layer_biases());
    layers->push_back(layer);
    layer_list.push_back(layer);
  }
  crit = register_module("crit", AdaptiveLogSoftmax(cfg, word_emb));
  register_module("pos_emb", PositionalEmbedding(sinusoid_.inv_freq()));
  // Registered last, and started without random draws: the other weights are a Transformer-XL's.
  if (cfg.compressive()) {
    compress = register_module("compress", torch::nn::ModuleList());
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      compress_list.push_back(Compression(cfg.cmem_fn, cfg.cmem_rate, cfg.d_model));
      compress->push_back(compress_list.back());
    }
  }
  if (seed) reset_parameters(*seed);
}

std::vector<int64_t> TransformerXLImpl::heads_per_layer() const {
  std::vector<int64_t> h;
  for (int64_t l = 0; l < config.n_layer; ++l) h.push_back(config.heads_in_layer(l));
  return h;
}

std::pair<torch::Tensor, torch::Tensor> TransformerXLImpl::biases(int64_t l) const {
  const auto& attn = layer_list[static_cast<size_t>(l)]->dec_attn;
  if (config.per_layer_biases()) return {attn->r_w_bias, attn->r_r_bias};
  return {r_w_bias, r_r_bias};
}

void TransformerXLImpl::reset_parameters(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  // Drawn in double precision, in pieces of 2^20 values: LibTorch draws 16 at a time, so pieces of
  // a multiple of 16 (and a last one of at least 16) give the values of one draw, without a double
  // copy of the largest tensor (878 MB at Transformer-XL's wt103 embedding, 267,735 x 410).
  auto normal = [&](torch::Tensor& t, double mean, double std) {
    if (!t.is_contiguous()) {
      t.copy_(torch::empty(t.sizes(), torch::kFloat64).normal_(mean, std, gen));
      return;
    }
    constexpr int64_t kPiece = int64_t{1} << 20;
    torch::Tensor flat = t.view({-1});
    for (int64_t at = 0, n = flat.numel(); at < n;) {
      const int64_t len = n - at - kPiece < 16 ? n - at : kPiece;
      flat.narrow(0, at, len).copy_(torch::empty({len}, torch::kFloat64).normal_(mean, std, gen));
      at += len;
    }
  };
  for (auto& item : named_parameters(true)) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    if (name.rfind("compress.", 0) == 0) continue;  // Compression::reset_parameters, below
    auto ends_with = [&](const std::string& tail) { return parse::ends_with(name, tail); };
    if (name.find("layer_norm.weight") != std::string::npos) normal(p, 1.0, config.init_std);
    // The variants' (attention_variants.h): as the MGK and all-attention code start them.
    else if (ends_with("mgk_pi") || ends_with("span_z")) p.zero_();
    else if (ends_with("mgk_mu")) {
      p.zero_();
      if (p.size(1) > 1) {
        torch::Tensor rest = p.narrow(1, 1, p.size(1) - 1);
        normal(rest, 0.0, 0.5);
      }
    } else if (ends_with("pers_key")) normal(p, 0.0, 1.0 / std::sqrt(static_cast<double>(config.d_head)));
    else if (ends_with("pers_val")) normal(p, 0.0, 1.0 / std::sqrt(static_cast<double>(config.persistent_mem)));
    else if (ends_with("bias") && name.find("r_w_bias") == std::string::npos && name.find("r_r_bias") == std::string::npos)
      p.zero_();
    else if (name.find("emb_projs") != std::string::npos || name.find("out_projs") != std::string::npos)
      normal(p, 0.0, config.proj_init_std);
    else normal(p, 0.0, config.init_std);
  }
  for (auto& c : compress_list) c->reset_parameters();
}

std::vector<std::pair<std::string, torch::Tensor>> TransformerXLImpl::named_tensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : named_parameters(true)) out.emplace_back(p.key(), p.value());
  for (const auto& b : named_buffers(true)) out.emplace_back(b.key(), b.value());
  return out;
}

int64_t TransformerXLImpl::parameter_count(bool non_embedding_only) const {
  int64_t n = 0;
  for (const auto& p : named_parameters(true)) {
    if (non_embedding_only && (p.key().rfind("word_emb.", 0) == 0 || p.key().rfind("crit.", 0) == 0)) continue;
    n += p.value().numel();
  }
  return n;
}

torch::Tensor TransformerXLImpl::hidden(const torch::Tensor& input, Memory& memory, const ForwardOptions& opts) {
  const int64_t b = input.size(0), t = input.size(1);
  XL_CHECK(static_cast<int64_t>(memory.layers.size()) == config.n_layer, kExitSoftware,
           "memory has " << memory.layers.size() << " layers, the model " << config.n_layer);
  int64_t mem_b = memory.batch_size();
  XL_CHECK(mem_b == 0 || mem_b == b, kExitSoftware, "memory batch " << mem_b << " does not match input batch " << b);
  const bool train = is_training();
  const bool cache_kv = opts.cache_kv && !torch::GradMode::is_enabled();

  AttentionPass pass;
  pass.position = memory.position;
  pass.mem_len = opts.mem_len;
  // Without memory there is no length to keep the same (every key would be masked: NaN, as in
  // Transformer-XL's own code); evaluation's reports say it was off.
  pass.same_length = config.same_length && opts.mem_len > 0;
  pass.clamp_len = config.clamp_len;
  pass.dropout = config.dropout;
  pass.dropatt = config.dropatt;
  pass.training = train;
  pass.sinusoid = &sinusoid_;
  pass.mask_cache = &mask_cache_;

  // The residual stream, and with it the memories, in fp32 (or float64) whatever the products' precision.
  torch::Tensor h = compute::upcast(word_emb(input));
  if (train && config.dropout > 0) h = kernels::fused_dropout(h, config.dropout, true);
  const std::vector<int64_t> kept = memory_lengths(opts.mem_len);
  const bool compressing = config.compressive() && opts.cmem_len > 0;
  for (int64_t l = 0; l < config.n_layer; ++l) {
    const size_t li = static_cast<size_t>(l);
    // Skip-Retain: a skipped layer passes its input through and keeps its old memory.
    if (!opts.skip.empty() && opts.skip[li]) continue;
    auto [u, v] = biases(l);
    static const std::vector<int64_t> no_perm;
    const auto& perm = opts.perms.empty() ? no_perm : opts.perms[li];
    torch::Tensor mask_row;
    if (opts.head_mask.defined()) mask_row = opts.head_mask[l].narrow(0, 0, config.heads_in_layer(l));
    LayerMemory& layer_memory = memory.layers[li];
    // The attention's key/value projections, when kept (a memory that keeps them has nothing else;
    // a compressed memory needs the inputs).
    RowWindow kv;
    const bool keep_kv = !compressing && layer_memory.compressed_length() == 0 && (cache_kv || !layer_memory.kv.empty());
    torch::Tensor out =
        layer_memory.compressed_length() > 0
            ? layer_list[li](h, layer_memory.with_compressed(memory.position), pass, u, v, perm, mask_row, nullptr)
            : layer_list[li](h, layer_memory, pass, u, v, perm, mask_row, keep_kv ? &kv : nullptr);
    if (compressing) {
      Compression& compression = compress_list[li];
      auto [old, made] = Memory::append_compressing(&layer_memory, h, memory.position, kept[li], opts.cmem_len,
                                                    config.cmem_rate, [&](const torch::Tensor& x) { return compression(x); });
      if (opts.losses && train && old.defined() && compression->learned()) add_compression_losses(l, h, old, made, opts.losses);
    } else {
      Memory::append(&layer_memory, h, memory.position, kept[li], kv);
    }
    h = out;
  }
  memory.position += t;
  if (train && config.dropout > 0) h = kernels::fused_dropout(h, config.dropout, true);
  return h;
}

void TransformerXLImpl::add_compression_losses(int64_t l, const torch::Tensor& w, const torch::Tensor& old,
                                               const torch::Tensor& compressed, CompressionLosses* losses) {
  const size_t li = static_cast<size_t>(l);
  auto add = [](torch::Tensor& sum, const torch::Tensor& term) { sum = sum.defined() ? sum + term : term; };
  if (layer_list[li]->dec_attn->n_head > 0)
    add(losses->attention_reconstruction, attention_reconstruction_loss(*layer_list[li]->dec_attn, w, old, compressed));
  add(losses->auto_encoding, auto_encoding_loss(*compress_list[li], old, compressed));
}

torch::Tensor TransformerXLImpl::span_loss(const std::vector<bool>& skip) const {
  torch::Tensor sum;
  for (int64_t l = 0; l < config.n_layer; ++l) {
    if (!skip.empty() && skip[static_cast<size_t>(l)]) continue;
    torch::Tensor term = layer_list[static_cast<size_t>(l)]->dec_attn->span_loss();
    sum = sum.defined() ? sum + term : term;
  }
  return sum.defined() ? sum : torch::zeros({});
}

void TransformerXLImpl::clamp_spans() {
  if (!config.adaptive_span) return;
  torch::NoGradGuard no_grad;
  for (auto& layer : layer_list)
    if (layer->dec_attn->span_z.defined()) layer->dec_attn->span_z.clamp_(0, 1);
}

std::vector<int64_t> TransformerXLImpl::memory_lengths(int64_t mem_len) const {
  std::vector<int64_t> lengths(layer_list.size(), mem_len);
  if (!config.adaptive_span) return lengths;
  std::vector<torch::Tensor> maxima;
  std::vector<size_t> layers;
  for (size_t l = 0; l < layer_list.size(); ++l) {
    const auto& attn = layer_list[l]->dec_attn;
    if (!attn->span_z.defined() || attn->n_head == 0) continue;
    maxima.push_back(attn->span_z.detach().max());
    layers.push_back(l);
  }
  if (maxima.empty()) return lengths;
  const torch::Tensor z = torch::stack(maxima).to(torch::kCPU, torch::kDouble).contiguous();
  for (size_t i = 0; i < layers.size(); ++i)
    lengths[layers[i]] = layer_list[layers[i]]->dec_attn->memory_needed(mem_len, z.data_ptr<double>()[i]);
  return lengths;
}

torch::Tensor TransformerXLImpl::forward(const torch::Tensor& input, const torch::Tensor& target, Memory& memory,
                                         const ForwardOptions& opts) {
  torch::Tensor h = hidden(input, memory, opts);
  const int64_t b = input.size(0), t = input.size(1);
  return crit(h.reshape({b * t, config.d_model}), target.reshape({b * t})).view({b, t});
}

}  // namespace xl::model
