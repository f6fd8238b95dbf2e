#include "xl/model/rel_attention.h"

#include <algorithm>
#include <cmath>

#include "xl/compute/precision.h"
#include "xl/kernels/cpu/attention_inputs.h"
#include "xl/kernels/cpu/batched_matmul.h"
#include "xl/kernels/cpu/chunked_attention.h"
#include "xl/kernels/cpu/dropout_add_layer_norm.h"
#include "xl/kernels/cpu/fused_dropout.h"
#include "xl/kernels/cpu/linear.h"
#include "xl/kernels/cpu/projection_parts.h"
#include "xl/kernels/cpu/rel_softmax.h"
#include "xl/kernels/cuda/flash_rel_attention.h"
#include "xl/kernels/cuda/fused_attention.h"

namespace xl::model {
namespace {

// SCH's gather: [B, K, S, H, dh] (a projection's output viewed per head) -> contiguous
// [S, H, B, K, dh] with head h taken from head perm[h]. The backward writes the gradient straight
// into the projection's [B, K, S, H, dh] layout, in one buffer that the projection's backward uses
// as it is (index_select's backward would zero-fill a second buffer of that size first).
class PermutedHeadsFirst : public torch::autograd::Function<PermutedHeadsFirst> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& perm) {
    ctx->saved_data["sizes"] = x.sizes().vec();
    ctx->saved_data["perm"] = perm;
    return x.permute({2, 3, 0, 1, 4}).index_select(1, perm);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    torch::Tensor grad = torch::empty(ctx->saved_data["sizes"].toIntVector(), grad_out[0].options());
    grad.permute({2, 3, 0, 1, 4}).index_copy_(1, ctx->saved_data["perm"].toTensor(), grad_out[0]);
    return {grad, torch::Tensor()};
  }
};

// The general path (attention dropout, any dtype): heads first ([H, B, T, dh]) so that the
// positional term is one batched GEMM over heads; whole score matrices, or on a GPU the
// positional scores alone as the bias of a fused kernel. Returns [H x B, T, dh].
torch::Tensor full_matrix_attention(const torch::Tensor& q, const torch::Tensor& kv_proj,
                                    const std::vector<torch::Tensor>& tables, const std::vector<kernels::KeyBlock>& blocks,
                                    const std::vector<int64_t>& perm, const torch::Tensor& u, const torch::Tensor& v,
                                    const torch::Tensor& mask, double scale, const AttentionPass& pass) {
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), dh = q.size(3), k = kv_proj.size(1);
  // SCH: head i reads keys, values and positional keys of head perm[i]; queries stay.
  torch::Tensor perm_idx, kv;
  if (perm.empty()) {
    kv = kv_proj.permute({2, 3, 0, 1, 4}).contiguous();
  } else {
    perm_idx = torch::tensor(perm, torch::TensorOptions().dtype(torch::kLong).device(q.device()));
    kv = PermutedHeadsFirst::apply(kv_proj, perm_idx);
  }
  // unbind: its backward stacks the two gradients into one buffer (indexing kv[0] and kv[1] would
  // zero-fill a kv-sized gradient for each and add them).
  auto key_value = kv.unbind(0);
  torch::Tensor key = key_value[0].view({h * b, k, dh});
  torch::Tensor value = key_value[1].view({h * b, k, dh});
  // The scale goes into the queries, a small tensor, instead of a pass over the scores (a GPU's
  // step here is bound by passes over score-sized tensors).
  torch::Tensor q_heads = q.permute({2, 0, 1, 3});
  torch::Tensor q_u = (q_heads + u.view({h, 1, 1, dh})).mul_(scale).reshape({h * b, t, dh});
  torch::Tensor q_v = (q_heads + v.view({h, 1, 1, dh})).mul_(scale).reshape({h, b * t, dh});
  std::vector<torch::Tensor> bds;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int64_t p = blocks[i].table;
    torch::Tensor r_k = perm_idx.defined()
                            ? PermutedHeadsFirst::apply(tables[i].view({1, p, 1, h, dh}), perm_idx).view({h, p, dh})
                            : tables[i].permute({1, 0, 2});
    bds.push_back(kernels::batched_matmul(q_v, r_k.transpose(1, 2)).view({h * b, t, p}));
  }
  if (kernels::fused_attention_applies(q, pass.training && pass.dropatt > 0)) {
    const at::ScalarType dtype = bds[0].scalar_type();
    torch::Tensor bias = kernels::relative_positional_bias(std::move(bds), blocks, mask, dtype);
    return kernels::fused_attention(q_u.view({h, b, t, dh}), key.view({h, b, k, dh}), value.view({h, b, k, dh}),
                           bias.view({h, b, t, k}))
        .reshape({h * b, t, dh});
  }
  torch::Tensor ac = kernels::batched_matmul(q_u, key.transpose(1, 2));
  torch::Tensor probs = kernels::relative_attention_probs(std::move(ac), std::move(bds), blocks, mask, 1.0);
  if (pass.training && pass.dropatt > 0) probs = kernels::fused_dropout(probs, pass.dropatt, true);
  return kernels::batched_matmul(probs, value);
}

}  // namespace

torch::Tensor AttentionPass::positional(int64_t d_max, int64_t count, const torch::TensorOptions& opts) {
  auto key = std::make_pair(d_max, count);
  auto it = pos_emb.find(key);
  if (it != pos_emb.end()) return it->second;
  torch::Tensor table = sinusoid->descending(d_max, count, clamp_len, opts);
  if (training && dropout > 0) table = kernels::fused_dropout(table, dropout, true);
  pos_emb.emplace(key, table);
  return table;
}

torch::Tensor AttentionPass::mask(int64_t t, int64_t m, const torch::Device& device) {
  const int64_t k = t + m;
  auto key = std::make_tuple(t, m, same_length ? mem_len : -1, static_cast<int64_t>(device.type()));
  if (mask_cache) {
    auto it = mask_cache->find(key);
    if (it != mask_cache->end()) return it->second;
  }
  auto i = torch::arange(t, torch::kLong).unsqueeze(1);
  auto j = torch::arange(k, torch::kLong).unsqueeze(0);
  auto back = m + i - j;  // how many keys back from the query's own position
  torch::Tensor masked = back < 0;
  if (same_length) masked = masked | (back >= mem_len);
  masked = masked.to(device);
  if (mask_cache) {
    if (mask_cache->size() > 64) mask_cache->clear();
    mask_cache->emplace(key, masked);
  }
  return masked;
}

RelMultiHeadAttnImpl::RelMultiHeadAttnImpl(const ModelConfig& cfg, int64_t heads, bool own_biases)
    : n_head(heads), d_head(cfg.d_head), d_model(cfg.d_model), pre_lnorm(cfg.pre_lnorm), dropout(cfg.dropout),
      variants(cfg) {
  // Tensors unfilled (affine.h); their initial values: TransformerXLImpl::reset_parameters. A layer
  // whose heads were all pruned has an o_net of no columns (forward never calls it).
  qkv_net = register_module("qkv_net", Affine(d_model, 3 * heads * d_head, false));
  r_net = register_module("r_net", Affine(d_model, heads * d_head, false));
  o_net = register_module("o_net", Affine(heads * d_head, d_model, false));
  layer_norm = register_module("layer_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})));
  if (own_biases) {
    r_w_bias = register_parameter("r_w_bias", torch::empty({heads, d_head}));
    r_r_bias = register_parameter("r_r_bias", torch::empty({heads, d_head}));
  }
  const int64_t m = cfg.mgk_keys;
  if (cfg.attention == "mgk" && m > 1)
    mgk_k_net = register_module("mgk_k_net", Affine(d_model, (m - 1) * heads * d_head, false));
  if (cfg.attention == "smgk") mgk_mu = register_parameter("mgk_mu", torch::empty({heads, m, d_head}));
  if (cfg.is_mgk()) mgk_pi = register_parameter("mgk_pi", torch::empty({heads, m}));
  if (cfg.persistent_mem > 0) {
    pers_key = register_parameter("pers_key", torch::empty({heads, cfg.persistent_mem, d_head}));
    pers_val = register_parameter("pers_val", torch::empty({heads, cfg.persistent_mem, d_head}));
  }
  if (cfg.adaptive_span) span_z = register_parameter("span_z", torch::empty({heads}));
}

torch::Tensor RelMultiHeadAttnImpl::span_loss() const {
  if (!span_z.defined() || n_head == 0) return torch::zeros({});
  return span_z.clamp(0, 1).mean() * (variants.span_loss * static_cast<double>(variants.span_max));
}

int64_t RelMultiHeadAttnImpl::memory_needed(int64_t mem_len, double z_max) const {
  if (!span_z.defined() || n_head == 0) return mem_len;
  const double z = std::clamp(z_max, 0.0, 1.0);
  const auto reach = static_cast<int64_t>(std::ceil(z * static_cast<double>(variants.span_max) +
                                                    static_cast<double>(variants.span_ramp))) - 1;
  return std::clamp<int64_t>(reach, 0, mem_len);
}

std::vector<kernels::KeyBlock> RelMultiHeadAttnImpl::key_blocks(const LayerMemory& mem, int64_t position, int64_t t) {
  std::vector<kernels::KeyBlock> blocks;
  int64_t col = 0;
  const auto& runs = mem.runs;
  for (size_t r = 0; r < runs.size(); ++r) {
    const MemoryRun& run = runs[r];
    bool adjacent = r + 1 == runs.size() && run.start + run.length == position;
    if (adjacent) {
      // Memory that ends where the segment starts: one table, exactly Transformer-XL's.
      int64_t len = run.length + t;
      blocks.push_back({col, len, len - 1, len});
      return blocks;
    }
    // An older run (a layer that was skipped keeps its memory): distances grow by the gap.
    int64_t off = position - run.start;
    blocks.push_back({col, run.length, off + t - 1, t + run.length - 1});
    col += run.length;
  }
  blocks.push_back({col, t, t - 1, t});
  return blocks;
}

torch::Tensor RelMultiHeadAttnImpl::positional_keys(const kernels::KeyBlock& blk, int64_t t, AttentionPass& pass,
                                                    const torch::TensorOptions& opts) {
  const torch::Tensor& w_r = r_net->weight;
  auto project = [&](int64_t d_max, int64_t count) {
    return kernels::linear(pass.positional(d_max, count, opts), w_r).view({count, n_head, d_head});
  };
  // Without dropout or autograd the keys depend on the distances and w_r alone: those of every
  // distance a full memory reaches, mem_len + T - 1 down to 0, are made once and each table is a
  // slice of them (its distances descend one by one). What they are made of depends only on the
  // pass, so results do not depend on what ran before.
  const int64_t top = pass.mem_len + t - 1;
  const bool reusable = !(pass.training && pass.dropout > 0) && !torch::GradMode::is_enabled() &&
                        blk.d_max <= top && blk.d_max - blk.table + 1 >= 0;
  if (!reusable) return project(blk.d_max, blk.table);
  const std::array<int64_t, 4> what = {top, pass.clamp_len, static_cast<int64_t>(opts.dtype().toScalarType()),
                                       static_cast<int64_t>(compute::active_autocast_dtype(w_r.device()))};
  auto it = std::find_if(positional_keys_.begin(), positional_keys_.end(),
                         [&](const PositionalKeys& k) { return k.what == what && k.weight.unchanged({w_r}); });
  if (it == positional_keys_.end()) {
    if (positional_keys_.size() >= 4) positional_keys_.clear();
    positional_keys_.push_back({what, TensorSnapshot({w_r}), project(top, top + 1)});
    it = positional_keys_.end() - 1;
  }
  return it->keys.narrow(0, top - blk.d_max, blk.table);
}

torch::Tensor RelMultiHeadAttnImpl::forward(const torch::Tensor& w, const LayerMemory& mem, AttentionPass& pass,
                                            const torch::Tensor& u, const torch::Tensor& v,
                                            const std::vector<int64_t>& perm, const torch::Tensor& head_mask,
                                            RowWindow* kv_out) {
  const int64_t b = w.size(0), t = w.size(1), m = mem.length(), h = n_head, dh = d_head;
  torch::Tensor attn_out;
  if (h == 0) {
    attn_out = torch::zeros_like(w);
  } else {
    // MGK's extra keys are projected with the keys and values, and kept with them in evaluation:
    // [B, K, 2 + M - 1, H, dh].
    const int64_t parts = mgk_k_net ? 1 + variants.mgk_keys : 2;
    const torch::Tensor weight = mgk_k_net ? torch::cat({qkv_net->weight, mgk_k_net->weight}, 0) : qkv_net->weight;
    torch::Tensor x_q = pre_lnorm ? layer_norm(w) : w;
    // The blocked kernel runs in float32 on the CPU, so the queries are float32 when x_q is and no
    // autocast is on. (same_length without memory hides every key: left to the general path.)
    const bool blocked = !(pass.training && pass.dropatt > 0) && !(pass.same_length && pass.mem_len == 0) &&
                         kernels::chunked_attention_usable(x_q) && compute::cpu_kernels_take_products();
    // Without a variant, the projections' pass adds u and v to the queries for the blocked kernel.
    const bool biased = blocked && !variants.has_variant();
    const torch::Tensor u_in = biased ? u : torch::Tensor(), v_in = biased ? v : torch::Tensor();
    torch::Tensor kv_proj;  // [B, M + T, parts, H, dh]
    kernels::AttentionInputs inputs;
    if (kv_out) {
      // Evaluation keeps the memory's keys and values: only the segment's are projected, into the
      // room behind them. A memory that kept none (one loaded from elsewhere) is projected once.
      TORCH_CHECK(!torch::GradMode::is_enabled(), "kept projections are for evaluation, without autograd");
      RowWindow kept = mem.kv;
      if (kept.empty() && m > 0)
        kept = RowWindow::of(kernels::linear(pre_lnorm ? layer_norm(mem.hidden) : mem.hidden,
                                               weight.narrow(0, h * dh, parts * h * dh))
                                 .view({b, m, parts, h, dh}));
      TORCH_CHECK(kept.length() == m && (kept.empty() || kept.rows().size(2) == parts),
                  "the kept projections do not fit the memory");
      // Kept in the products' precision, as projecting the memory again would give them (under
      // autocast, bf16: an fp32 buffer met bf16 positional scores in one kernel).
      *kv_out = kept.grown(t, row_window_capacity(std::max(pass.mem_len, m), t),
                           torch::empty({b, 0, parts, h, dh}, w.options().dtype(compute::product_dtype(w))));
      kv_proj = kv_out->rows();
      inputs = kernels::attention_inputs_into(x_q, weight, h * dh, kv_proj.view({b, m + t, parts * h * dh}), u_in, v_in);
    } else {
      torch::Tensor mem_x;
      if (m > 0) mem_x = pre_lnorm ? layer_norm(mem.hidden) : mem.hidden;
      inputs = kernels::attention_inputs(x_q, mem_x, weight, h * dh, u_in, v_in);
      kv_proj = inputs.kv.view({b, m + t, parts, h, dh});
    }
    torch::Tensor q = inputs.q.view({b, t, h, dh});
    const double scale = 1.0 / std::sqrt(double(dh));
    torch::Tensor mask = pass.mask(t, m, w.device());
    auto blocks = key_blocks(mem, pass.position, t);
    std::vector<torch::Tensor> tables;
    for (const auto& blk : blocks) tables.push_back(positional_keys(blk, t, pass, w.options()));

    torch::Tensor vec;  // [B, T, H, dh]
    if (variants.has_variant()) {
      kernels::ProjectionParts in = kernels::projection_parts(kv_proj);
      VariantParams params{in.key0, in.extra_keys, mgk_mu, mgk_pi, pers_key, pers_val, span_z};
      vec = variant_attention(variants, params, q, in.kv, tables, blocks, perm, u, v, mask,
                              pass.dropatt, pass.training, blocked);
    } else if (blocked) {
      // Every operand in the projections' own layout; SCH is a head index inside the kernel. q is
      // q + u here.
      vec = kernels::chunked_relative_attention(q, inputs.q_v.view({b, t, h, dh}), kv_proj, tables, blocks, perm, mask, scale);
    } else if (!(pass.same_length && pass.mem_len == 0) &&
               kernels::flash_rel_attention_applies(q, blocks.size(), pass.training && pass.dropatt > 0)) {
      vec = kernels::flash_rel_attention(q, u, v, kv_proj, tables, blocks, perm, mask, scale);
    } else {
      vec = full_matrix_attention(q, kv_proj, tables, blocks, perm, u, v, mask, scale, pass)
                .view({h, b, t, dh})
                .permute({1, 2, 0, 3});
    }
    if (head_mask.defined()) vec = vec * head_mask.view({1, 1, h, 1});
    vec = vec.reshape({b, t, h * dh});
    // Dropout fused with the residual (and the layer norm after it): [LN](w + dropout(o_net(vec))).
    torch::Tensor out = kernels::linear(vec, o_net->weight);
    if (pre_lnorm) return kernels::fused_dropout_add(out, w, dropout, pass.training);
    return kernels::dropout_add_layer_norm(out, w, dropout, pass.training, layer_norm->weight, layer_norm->bias,
                                  layer_norm->options.eps());
  }
  return pre_lnorm ? w + attn_out : layer_norm(w + attn_out);
}

}  // namespace xl::model
