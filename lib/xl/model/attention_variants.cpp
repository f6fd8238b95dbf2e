#include "xl/model/attention_variants.h"

#include <cmath>

#include "xl/kernels/cpu/biased_queries.h"
#include "xl/kernels/cpu/chunked_attention.h"
#include "xl/kernels/cpu/fused_dropout.h"

namespace xl::model {

torch::Tensor key_distances(const std::vector<kernels::KeyBlock>& blocks, int64_t t, int64_t k) {
  torch::Tensor d = torch::zeros({t, k}, torch::kLong);
  auto i = torch::arange(t, torch::kLong).unsqueeze(1);
  for (const auto& blk : blocks) {
    auto j = torch::arange(blk.len, torch::kLong).unsqueeze(0);
    // Table row j + T - 1 - i holds distance d_max - row.
    d.narrow(1, blk.col, blk.len).copy_(blk.d_max - (j + t - 1 - i));
  }
  return d;
}

torch::Tensor span_mask(const torch::Tensor& z, const torch::Tensor& distances, int64_t span_max, int64_t span_ramp) {
  torch::Tensor zc = z.clamp(0, 1).view({-1, 1, 1});
  torch::Tensor d = distances.to(z.device(), z.scalar_type()).unsqueeze(0);
  return ((zc * static_cast<double>(span_max) - d) / static_cast<double>(span_ramp) + 1).clamp(0, 1);
}

torch::Tensor span_bias(const torch::Tensor& z, const torch::Tensor& distances, int64_t span_max, int64_t span_ramp) {
  torch::Tensor m = span_mask(z, distances, span_max, span_ramp);
  torch::Tensor outside = m <= 0;
  // log of 1 where the key is hidden: the gradient stays finite there (masked_fill zeroes it).
  return torch::log(m.masked_fill(outside, 1)).masked_fill(outside, -INFINITY);
}

namespace {

// Head-first [B, H, K, dh] of x [B, K, H, dh], head h taken from perm[h].
torch::Tensor heads_first(const torch::Tensor& x, const torch::Tensor& perm) {
  torch::Tensor y = x.permute({0, 2, 1, 3});
  return perm.defined() ? y.index_select(1, perm) : y;
}

// Per head h, the rows of head perm[h] of a per-head tensor [H, ...].
torch::Tensor by_head(const torch::Tensor& x, const torch::Tensor& perm) {
  return perm.defined() ? x.index_select(0, perm) : x;
}

// The positional scores shifted into key columns: [B, H, T, K] from q^ [B, H, T, dh].
torch::Tensor positional_scores(const torch::Tensor& q_v, const std::vector<torch::Tensor>& tables,
                                const std::vector<kernels::KeyBlock>& blocks, const torch::Tensor& perm, int64_t k) {
  const int64_t b = q_v.size(0), h = q_v.size(1), t = q_v.size(2);
  std::vector<torch::Tensor> cols;
  auto i = torch::arange(t, torch::TensorOptions().dtype(torch::kLong).device(q_v.device())).unsqueeze(1);
  for (size_t n = 0; n < blocks.size(); ++n) {
    const kernels::KeyBlock& blk = blocks[n];
    torch::Tensor r = by_head(tables[n].permute({1, 0, 2}), perm);  // [H, P, dh]
    torch::Tensor bd = torch::matmul(q_v, r.transpose(1, 2).unsqueeze(0));  // [B, H, T, P]
    auto j = torch::arange(blk.len, i.options()).unsqueeze(0);
    // Rows past the table belong to masked keys (a query's future): any row does for them.
    torch::Tensor row = (j + t - 1 - i).clamp(0, blk.table - 1);
    cols.push_back(bd.gather(3, row.view({1, 1, t, blk.len}).expand({b, h, t, blk.len})));
  }
  torch::Tensor out = torch::cat(cols, 3);
  TORCH_CHECK(out.size(3) == k, "positional scores cover ", out.size(3), " keys of ", k);
  return out;
}

// The Gaussian-mixture content term [B, H, T, K].
torch::Tensor mixture_scores(const ModelConfig& cfg, const VariantParams& params, const torch::Tensor& q_u,
                             const torch::Tensor& key0, const torch::Tensor& perm) {
  const int64_t m_keys = cfg.mgk_keys, dh = q_u.size(3);
  torch::Tensor log_pi = torch::log_softmax(by_head(params.mgk_pi, perm), 1);  // [H, M]
  torch::Tensor q_sq = q_u.pow(2).sum(3, true);                                 // [B, H, T, 1]
  std::vector<torch::Tensor> comps;
  for (int64_t m = 0; m < m_keys; ++m) {
    torch::Tensor key;
    if (cfg.attention == "smgk") {
      key = key0 + by_head(params.mgk_mu, perm).select(1, m).view({1, -1, 1, dh});
    } else {
      key = m == 0 ? key0 : heads_first(params.mgk_keys[m - 1], perm);
    }
    const double two_sigma_sq = 2.0 * std::sqrt(static_cast<double>(dh)) / static_cast<double>(2 * m + 1);
    torch::Tensor dist = q_sq - 2 * torch::matmul(q_u, key.transpose(2, 3)) + key.pow(2).sum(3).unsqueeze(2);
    comps.push_back(log_pi.select(1, m).view({1, -1, 1, 1}) - dist / two_sigma_sq);
  }
  torch::Tensor all = torch::stack(comps, 0);
  return cfg.mgk_estep == "hard" ? std::get<0>(all.max(0)) : torch::logsumexp(all, 0);
}

// The variants as the blocked kernel's terms (chunked_attention.h), in the token-major layouts:
// a mixture's Gaussians as coef = 1 / sigma^2 and log pi_m by the key's head.
kernels::AttentionExtras kernel_terms(const ModelConfig& cfg, const VariantParams& params, const torch::Tensor& q_u,
                             const torch::Tensor& kv, const std::vector<kernels::KeyBlock>& blocks,
                             const std::vector<int64_t>& perm) {
  kernels::AttentionExtras e;
  const int64_t h = q_u.size(2), dh = q_u.size(3);
  if (cfg.is_mgk()) {
    torch::Tensor perm_idx;
    if (!perm.empty()) perm_idx = torch::tensor(perm, torch::TensorOptions().dtype(torch::kLong).device(q_u.device()));
    torch::Tensor log_pi = torch::log_softmax(params.mgk_pi, 1);  // [H, M] by the key's head
    const torch::Tensor& key0 = params.key0;                      // [B, K, H, dh]
    const bool shifted = cfg.attention == "smgk";
    for (int64_t m = 0; m < cfg.mgk_keys; ++m) {
      const double sigma_sq = std::sqrt(static_cast<double>(dh)) / static_cast<double>(2 * m + 1);
      torch::Tensor query = q_u, key = key0;
      if (shifted) {
        // Query h meets the shifts of its key's head perm[h].
        query = q_u - by_head(params.mgk_mu.select(1, m), perm_idx).view({1, 1, h, dh});
      } else if (m > 0) {
        key = params.mgk_keys[m - 1];
      }
      e.mixture.push_back({query, key, log_pi.select(1, m), 1.0 / sigma_sq});
    }
    e.hard = cfg.mgk_estep == "hard";
  }
  if (cfg.persistent_mem > 0) {
    e.persistent_key = params.pers_key * std::sqrt(static_cast<double>(dh));
    e.persistent_value = params.pers_val * std::sqrt(static_cast<double>(cfg.persistent_mem));
  }
  if (cfg.adaptive_span)
    for (const kernels::KeyBlock& blk : blocks) {
      torch::Tensor d = blk.d_max - torch::arange(blk.table, torch::kLong).unsqueeze(0);  // [1, P]
      e.table_bias.push_back(span_bias(params.span_z, d, cfg.span_max, cfg.span_ramp).squeeze(1));
    }
  return e;
}

}  // namespace

torch::Tensor variant_attention(const ModelConfig& cfg, const VariantParams& params, const torch::Tensor& q,
                                const torch::Tensor& kv, const std::vector<torch::Tensor>& tables,
                                const std::vector<kernels::KeyBlock>& blocks, const std::vector<int64_t>& perm,
                                const torch::Tensor& u, const torch::Tensor& v, const torch::Tensor& mask,
                                double dropatt, bool training, bool blocked) {
  const int64_t t = q.size(1), h = q.size(2), dh = q.size(3), k = kv.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  if (blocked && mask.defined()) {
    const auto [q_u, q_v] = kernels::biased_queries(q, u, v);
    kernels::AttentionExtras extras = kernel_terms(cfg, params, q_u, kv, blocks, perm);
    if (kernels::chunked_attention_usable(q, extras))
      return kernels::chunked_relative_attention(q_u, q_v, kv, tables, blocks, perm, mask, scale, extras);
  }
  // Scores in float32 at least, whatever the products' precision.
  const auto st = torch::promote_types(q.scalar_type(), torch::kFloat);
  torch::Tensor perm_idx;
  if (!perm.empty()) perm_idx = torch::tensor(perm, torch::TensorOptions().dtype(torch::kLong).device(q.device()));
  torch::Tensor qh = q.to(st).permute({0, 2, 1, 3});  // [B, H, T, dh]
  torch::Tensor q_u = qh + u.to(st).view({1, h, 1, dh}), q_v = qh + v.to(st).view({1, h, 1, dh});
  torch::Tensor key0 = heads_first(params.key0.to(st), perm_idx);      // [B, H, K, dh]
  torch::Tensor value = heads_first(kv.select(2, 1).to(st), perm_idx);  // [B, H, K, dh]
  std::vector<torch::Tensor> tables_st;
  for (const auto& tb : tables) tables_st.push_back(tb.to(st));

  torch::Tensor content = cfg.is_mgk() ? mixture_scores(cfg, params, q_u, key0, perm_idx)
                                       : torch::matmul(q_u, key0.transpose(2, 3)) * scale;
  const int64_t b = q.size(0), n = cfg.persistent_mem;
  torch::Tensor probs;
  if (n == 0 && !cfg.adaptive_span) {
    // MGK alone: the relative shift, mask and softmax of Transformer-XL's own path (one fused CPU
    // kernel), given the content term divided by the scale it multiplies.
    std::vector<torch::Tensor> bds;
    for (size_t i = 0; i < blocks.size(); ++i) {
      torch::Tensor r = by_head(tables_st[i].permute({1, 0, 2}), perm_idx);  // [H, P, dh]
      bds.push_back(torch::matmul(q_v, r.transpose(1, 2).unsqueeze(0)).view({b * h, t, blocks[i].table}));
    }
    probs = kernels::relative_attention_probs((content / scale).view({b * h, t, k}), std::move(bds), blocks, mask, scale)
                .view({b, h, t, k});
  } else {
    torch::Tensor logits = content + positional_scores(q_v, tables_st, blocks, perm_idx, k) * scale;
    if (cfg.adaptive_span)
      logits = logits + span_bias(params.span_z.to(st), key_distances(blocks, t, k).to(q.device()), cfg.span_max,
                                  cfg.span_ramp)
                            .unsqueeze(0);
    if (mask.defined()) logits = logits.masked_fill(mask.to(q.device()).view({1, 1, t, k}), -INFINITY);
    if (n > 0) {
      torch::Tensor p_key = by_head(params.pers_key.to(st), perm_idx) * std::sqrt(static_cast<double>(dh));  // [H, N, dh]
      logits = torch::cat({logits, torch::matmul(q_u, p_key.transpose(1, 2).unsqueeze(0)) * scale}, 3);
    }
    probs = torch::softmax(logits, 3);
  }
  if (training && dropatt > 0) probs = kernels::fused_dropout(probs, dropatt, true);
  torch::Tensor out = torch::matmul(probs.narrow(3, 0, k), value);
  if (n > 0) {
    torch::Tensor p_val = by_head(params.pers_val.to(st), perm_idx) * std::sqrt(static_cast<double>(n));
    out = out + torch::matmul(probs.narrow(3, k, n), p_val.unsqueeze(0));
  }
  return out.permute({0, 2, 1, 3}).to(q.scalar_type());  // [B, T, H, dh]
}

}  // namespace xl::model
