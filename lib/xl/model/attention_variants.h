// The attention variants beside Transformer-XL's own, with segment memory and relative positions
// (README "Attention variants"). For query i (content query q~ = q + u, positional q^ = q + v),
// context key j at distance d(i, j) (Skip-Retain ages included) and scale s = 1/sqrt(dh):
//
//   rel:   logit_ij = s (q~ . k_j) + s (q^ . r_d)                               (Transformer-XL)
//   mgk:   logit_ij = log sum_m pi_m exp(-|q~ - k^m_j|^2 / (2 sigma_m^2)) + s (q^ . r_d)
//          M keys per head from M key projections; sigma_m^2 = sqrt(dh) / (2m + 1) (sqrt(dh) and
//          sqrt(dh)/3 for M = 2, as the MGK paper's language models); pi = softmax(pi_logits) per
//          head, learned (not per key position, so any memory length works). The hard E-step
//          takes max_m instead of log sum_m. Memory keys are mixtures too: projected from the
//          memory like the segment's.
//   smgk:  the same with k^m_j = k_j + mu_m: one key projection, M learned shifts per head.
//   persistent memory: N learned keys P_n and values V_n per head join the softmax with
//          logit_in = s (q~ . P_n), no positional term; out_i = sum_j p_ij v_j + sum_n p_in V_n.
//          Stored as P / sqrt(dh) and V / sqrt(N) (all-attention's parametrisation).
//   adaptive span: head h's context logits gain log m_h(d), m_h(d) = clamp((z_h S - d) / R + 1, 0, 1),
//          z_h in [0, 1] learned: p_ij = m_h(d) exp(logit_ij) / Z_i (the paper's soft mask; Z_i sums
//          every key of the row, persistent ones unmasked), keys with m = 0 hidden; the training
//          loss gains span_loss * S * mean_h(z_h) per layer.
// SCH: head h reads every key of head perm[h]'s mixture (keys, shifts, mixing weights, persistent
// keys and values); queries, u, v and the span stay with h.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "xl/kernels/cpu/rel_softmax.h"
#include "xl/model/config.h"

namespace xl::model {

// The per-head parameters of a layer's variants (undefined when the config does not use them).
struct VariantParams {
  torch::Tensor key0;        // the keys [B, K, H, dh], kv's part 0 with a gradient of its own (projection_parts.h)
  std::vector<torch::Tensor> mgk_keys;  // mgk: the extra keys [B, K, H, dh], M - 1 of them
  torch::Tensor mgk_mu;      // smgk: [H, M, dh] key shifts
  torch::Tensor mgk_pi;      // mgk, smgk: [H, M] mixing logits
  torch::Tensor pers_key;    // [H, N, dh], scaled by sqrt(dh) at use
  torch::Tensor pers_val;    // [H, N, dh], scaled by sqrt(N) at use
  torch::Tensor span_z;      // [H]
};

// Distances [T, K] (long) of every query to every key under `blocks` (rel_softmax.h).
torch::Tensor key_distances(const std::vector<kernels::KeyBlock>& blocks, int64_t t, int64_t k);

// m_h(d) of adaptive span: [H, T, K] from z [H] and distances [T, K].
torch::Tensor span_mask(const torch::Tensor& z, const torch::Tensor& distances, int64_t span_max, int64_t span_ramp);
// log m_h(d) with -inf where m_h(d) = 0 (a finite gradient everywhere).
torch::Tensor span_bias(const torch::Tensor& z, const torch::Tensor& distances, int64_t span_max, int64_t span_ramp);

// The attention of one layer with variants, differentiable: q [B, T, H, dh], kv [B, K, 2, H, dh]
// (k^0 and values), tables[b] [P_b, H, dh] positional keys, mask [T, K] bool (true = not seen) or
// undefined. With `blocked` (the caller's word that no attention dropout applies) the CPU's blocked
// kernel (chunked_attention.h) computes it where it can (float32); full score matrices otherwise.
// Returns [B, T, H, dh].
torch::Tensor variant_attention(const ModelConfig& cfg, const VariantParams& params, const torch::Tensor& q,
                                const torch::Tensor& kv, const std::vector<torch::Tensor>& tables,
                                const std::vector<kernels::KeyBlock>& blocks, const std::vector<int64_t>& perm,
                                const torch::Tensor& u, const torch::Tensor& v, const torch::Tensor& mask,
                                double dropatt, bool training, bool blocked);

}  // namespace xl::model
