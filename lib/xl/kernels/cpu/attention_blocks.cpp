#include "xl/kernels/cpu/attention_blocks.h"

#include <algorithm>
#include <cstring>

#include "xl/kernels/cpu/row_layout.h"

namespace xl::kernels::blocked {

Geometry geometry(const torch::Tensor& q_u, const torch::Tensor& kv, const std::vector<torch::Tensor>& tables,
                  const std::vector<KeyBlock>& keys, const std::vector<int64_t>& source, const torch::Tensor& mask,
                  const AttentionExtras& extras) {
  Geometry g;
  TORCH_CHECK(q_u.dim() == 4, "queries must be [B, T, H, dh]");
  g.batch = q_u.size(0), g.t = q_u.size(1), g.heads = q_u.size(2), g.dh = q_u.size(3), g.keys = keys;
  TORCH_CHECK(kv.dim() == 5 && kv.size(0) == g.batch && kv.size(2) == 2 && kv.size(3) == g.heads &&
                  kv.size(4) == g.dh,
              "keys and values must be [B, K, 2, H, dh]");
  g.k = kv.size(1);
  TORCH_CHECK(rows_are_strided(kv), "keys and values must lie in evenly spaced rows");
  g.kv_batch = stream_stride(kv), g.kv_row = row_stride(kv);
  g.source = source;
  if (g.source.empty())
    for (int64_t h = 0; h < g.heads; ++h) g.source.push_back(h);
  std::vector<int64_t> sorted = g.source;
  std::sort(sorted.begin(), sorted.end());
  TORCH_CHECK(static_cast<int64_t>(sorted.size()) == g.heads, "heads must be a permutation");
  for (int64_t h = 0; h < g.heads; ++h) TORCH_CHECK(sorted[h] == h, "heads must be a permutation");
  TORCH_CHECK(!keys.empty() && tables.size() == keys.size(), "one positional table per key block");
  int64_t col = 0;
  for (size_t b = 0; b < keys.size(); ++b) {
    TORCH_CHECK(keys[b].col == col && keys[b].len > 0, "key blocks must tile the keys in order");
    TORCH_CHECK(tables[b].dim() == 3 && tables[b].size(0) == keys[b].table && tables[b].size(1) == g.heads &&
                    tables[b].size(2) == g.dh && keys[b].table >= g.t,
                "positional table ", b, " must be [P, H, dh] with P >= T");
    col += keys[b].len;
  }
  TORCH_CHECK(col == g.k, "key blocks must cover all ", g.k, " keys");
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == g.t && mask.size(1) == g.k, "mask must be [T, K]");
  // The variants' terms.
  g.components = static_cast<int64_t>(extras.mixture.size());
  TORCH_CHECK(g.components != 1 && g.components <= 16, "a mixture needs 2 to 16 components");
  for (const auto& c : extras.mixture) {
    TORCH_CHECK(c.query.sizes() == q_u.sizes(), "mixture queries must be [B, T, H, dh]");
    TORCH_CHECK(c.key.dim() == 4 && c.key.size(0) == g.batch && c.key.size(1) == g.k && c.key.size(2) == g.heads &&
                    c.key.size(3) == g.dh,
                "mixture keys must be [B, K, H, dh]");
    TORCH_CHECK(c.log_weight.sizes() == torch::IntArrayRef({g.heads}), "mixture log weights must be [H]");
  }
  if (extras.persistent_key.defined()) {
    g.persistent = extras.persistent_key.size(1);
    TORCH_CHECK(extras.persistent_key.sizes() == torch::IntArrayRef({g.heads, g.persistent, g.dh}) &&
                    extras.persistent_value.sizes() == extras.persistent_key.sizes(),
                "persistent keys and values must be [H, N, dh]");
  }
  TORCH_CHECK(g.components == 0 || g.persistent == 0, "a mixture takes no persistent keys");
  TORCH_CHECK(extras.table_bias.empty() || extras.table_bias.size() == keys.size(), "one bias per key block");
  for (size_t b = 0; b < extras.table_bias.size(); ++b)
    TORCH_CHECK(extras.table_bias[b].sizes() == torch::IntArrayRef({g.heads, keys[b].table}),
                "table bias ", b, " must be [H, P]");

  const bool* hidden = mask.data_ptr<bool>();
  g.visible.resize(g.t);
  for (int64_t i = 0; i < g.t; ++i) {
    int64_t last = g.k - 1;
    while (last >= 0 && hidden[i * g.k + last]) --last;
    TORCH_CHECK(last >= 0, "query ", i, " sees no key");
    g.visible[i] = last + 1;
    for (const KeyBlock& kb : keys) {
      const int64_t seen = std::min(kb.len, g.visible[i] - kb.col);
      TORCH_CHECK(seen <= 0 || seen - 1 + g.t - 1 - i < kb.table, "query ", i, " sees a later key");
    }
  }
  for (int64_t i0 = 0; i0 < g.t; i0 += kBlockRows) {
    RowBlock rb;
    rb.i0 = i0;
    rb.rows = std::min(kBlockRows, g.t - i0);
    rb.width = *std::max_element(g.visible.begin() + i0, g.visible.begin() + i0 + rb.rows);
    for (const KeyBlock& kb : keys) {
      TableSlice s;
      s.col = kb.col;
      s.width = std::clamp<int64_t>(rb.width - kb.col, 0, kb.len);
      s.lo = g.t - (i0 + rb.rows);
      s.table_width = s.width > 0 ? std::min(kb.table - s.lo, s.width + rb.rows - 1) : 0;
      rb.table_scores += rb.rows * s.table_width;
      rb.slices.push_back(s);
    }
    // Forward: M content scores (or one), the table scores, the probabilities; backward: their
    // gradients, the table scores' and one component's.
    const int64_t m = std::max<int64_t>(g.components, 1);
    rb.ld = unaliased(g.persistent + rb.width);
    g.buffer = std::max(g.buffer, (m + 1) * rb.rows * rb.ld + rb.table_scores);
    g.blocks.push_back(rb);
  }
  g.head_floats = 2 * g.k * g.dh;
  for (const KeyBlock& kb : keys) {
    g.head_table.push_back(g.head_floats);
    g.head_floats += kb.table * g.dh;
  }
  return g;
}

HeadRows<const float> operand_rows(const Geometry& g, const Operands& x, int64_t n) {
  HeadRows<const float> r{x.kv + g.key_at(n), x.kv + g.value_at(n), g.ld_kv(), {}, g.ld_table()};
  for (size_t b = 0; b < g.keys.size(); ++b) r.tables.push_back(x.tables[b] + g.table_at(n, 0));
  return r;
}

void copy_rows(const float* from, int64_t ld_from, float* to, int64_t ld_to, int64_t count, int64_t width) {
  for (int64_t r = 0; r < count; ++r)
    std::memcpy(to + r * ld_to, from + r * ld_from, sizeof(float) * static_cast<size_t>(width));
}
void clear_rows(float* at, int64_t ld, int64_t count, int64_t width) {
  for (int64_t r = 0; r < count; ++r) std::fill_n(at + r * ld, width, 0.0f);
}

void copy_head(const Geometry& g, const HeadRows<const float>& from, const HeadRows<float>& to) {
  copy_rows(from.key, from.ld, to.key, to.ld, g.k, g.dh);
  copy_rows(from.value, from.ld, to.value, to.ld, g.k, g.dh);
  for (size_t b = 0; b < g.keys.size(); ++b)
    copy_rows(from.tables[b], from.ld_table, to.tables[b], to.ld_table, g.keys[b].table, g.dh);
}

// Operands::bf16: task n's keys, values and tables (its rows `from`) rounded once, in the
// contiguous layout, into `to`; a mixture's component keys and the persistent keys and values
// after them.
HeadRows<const uint16_t> round_head(const Geometry& g, const Operands& x, int64_t n, const HeadRows<const float>& from,
                                    std::vector<uint16_t>& to) {
  const int64_t component_floats = g.k * g.dh, persistent_floats = g.persistent * g.dh;
  to.resize(static_cast<size_t>(g.head_floats + g.components * component_floats + 2 * persistent_floats));
  const HeadRows<uint16_t> r = contiguous_rows(g, to.data());
  compute::round_rows_to_bf16(from.key, from.ld, r.key, r.ld, g.k, g.dh);
  compute::round_rows_to_bf16(from.value, from.ld, r.value, r.ld, g.k, g.dh);
  for (size_t b = 0; b < g.keys.size(); ++b)
    compute::round_rows_to_bf16(from.tables[b], from.ld_table, r.tables[b], r.ld_table, g.keys[b].table, g.dh);
  HeadRows<const uint16_t> rounded = contiguous_rows<const uint16_t>(g, to.data());
  uint16_t* components = to.data() + g.head_floats;
  for (int64_t m = 0; m < g.components; ++m) {
    const Component& c = x.mixture[m];
    compute::round_rows_to_bf16(c.key + g.component_key_at(n, c.ld_key_batch), c.ld_key, components + m * component_floats,
                       g.dh, g.k, g.dh);
  }
  if (g.components > 0) rounded.components = components;
  if (g.persistent > 0) {
    uint16_t* persistent = components + g.components * component_floats;
    compute::round_to_bf16(x.persistent_key + g.persistent_at(n), persistent, persistent_floats);
    compute::round_to_bf16(x.persistent_value + g.persistent_at(n), persistent + persistent_floats, persistent_floats);
    rounded.persistent = persistent;
  }
  return rounded;
}

// The rows task n reads: its operands' own, or (copies_heads) their copy in `copy`, made here.
HeadRows<const float> rows_to_read(const Geometry& g, const Operands& x, int64_t n, std::vector<float>& copy) {
  if (!g.copies_heads()) return operand_rows(g, x, n);
  copy.resize(static_cast<size_t>(g.head_floats));
  copy_head(g, operand_rows(g, x, n), contiguous_rows(g, copy.data()));
  return contiguous_rows<const float>(g, copy.data());
}

}  // namespace xl::kernels::blocked
