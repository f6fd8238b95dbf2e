// The attention core of one layer (content and positional scores, relative shift, mask, softmax,
// weighted values), forward and backward, computed in blocks of query rows that touch only the
// keys some row of the block can see. Under the causal mask a quarter of a Transformer-XL layer's
// score matrix is hidden when memory and segment are equally long; the full-matrix path computes it
// all and throws it away. A block's scores also stay in cache from its GEMMs through the softmax.
// GEMMs go straight to BLAS, single-threaded, with the blocks spread over the threads.
//
// Covers float32 on the CPU with a BLAS and no attention dropout, with memories of any age
// (Skip-Retain), and the variants' terms (AttentionExtras: Gaussian-mixture content, persistent
// keys, a per-head bias by distance). Everything else takes the general path
// (relative_attention_probs and batched products; attention_variants), against which this one is
// tested.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "xl/compute/setting_scope.h"
#include "xl/kernels/cpu/rel_softmax.h"

namespace xl::kernels {

// The variants' terms (attention_variants.h), each optional; all empty:
// Transformer-XL's attention.
struct AttentionExtras {
  // Gaussian-mixture content (MGK, sMGK) in place of scale (q_u . k_j):
  //   content(i, j) = combine_m [log_weight_m - coef_m / 2 |query_m[i] - key_m[j]|^2],
  // combine = log-sum-exp (soft E-step) or max (hard). Keys and log weights are indexed by the
  // key's head (SCH's source head), queries by the query's. The kernel expands the square as
  // coef (q . k) - coef / 2 |q|^2 - coef / 2 |k|^2, the product per block and the squared lengths
  // per row as it reads them (with bf16 products, of the rounded rows the products read), and
  // backward adds their gradients to the rows' own: no [B, T, H] or [B, H, K] terms pass through
  // autograd (as tensor ops they made MGK's training slower: bench/HISTORY.md, "MGK's Gaussians
  // inside the kernel").
  // Components may read q_u itself as their query (MGK) or one key tensor all (sMGK): backward then
  // sums their gradients in one buffer instead of autograd adding one per component.
  struct Component {
    torch::Tensor query;       // [B, T, H, dh]
    torch::Tensor key;         // [B, K, H, dh]; rows may be strided (a view of kv)
    torch::Tensor log_weight;  // [H]: log pi_m by the key's head
    double coef = 1;           // 1 / sigma_m^2
  };
  std::vector<Component> mixture;
  bool hard = false;
  // Persistent memory [H, N, dh] (by the key's head): N more keys and values in every query's
  // softmax, logit scale (q_u . key_n), no positional term, never masked.
  torch::Tensor persistent_key, persistent_value;
  // Per key block b, [H, P_b] by the query's head: added to the logit of every key that reads
  // table row r (so a function of distance: adaptive span's log m_h(d)); -inf hides the key. Each
  // query must keep one finite logit.
  std::vector<torch::Tensor> table_bias;
};

// Whether chunked_relative_attention can run on tensors like q (and these terms: float32 too).
bool chunked_attention_usable(const torch::Tensor& q, const AttentionExtras& extras = {});

// Operands stay in the projections' own token-major layouts (no copies into per-head order):
//   q_u, q_v: [B, T, H, dh] queries plus the content / positional bias;
//   kv:       [B, K, 2, H, dh] keys (index 0) and values (1);
//   blocks:   the keys' blocks as for relative_attention_probs, and for each tables[b]: [P_b, H, dh]
//             its positional keys (query i, key col_b + j reads row j + T - 1 - i);
//   heads:    SCH: head h reads the keys, values and positional keys of head heads[h] (a
//             permutation; empty: its own);
//   mask:     [T, K] bool (true = not seen); it must hide every key whose table row would be past
//             the table (no query sees its future), and leave each query at least one key.
// Returns [B, T, H, dh] = softmax(scale * (q_u key^T + shift(q_v tables^T)) masked) value,
// differentiable; `extras` change the logits as AttentionExtras says.
torch::Tensor chunked_relative_attention(const torch::Tensor& q_u, const torch::Tensor& q_v, const torch::Tensor& kv,
                                         const std::vector<torch::Tensor>& tables,
                                         const std::vector<KeyBlock>& blocks, const std::vector<int64_t>& heads,
                                         const torch::Tensor& mask, double scale,
                                         const AttentionExtras& extras = {});

}  // namespace xl::kernels
