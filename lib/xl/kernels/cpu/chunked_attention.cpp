#include "xl/kernels/cpu/chunked_attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include "xl/compute/kernel_choice.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "xl/compute/amx_products.h"
#include "xl/compute/blas.h"
#include "xl/compute/parallel.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cpu/product_operands.h"
#include "xl/kernels/cpu/row_kernels.h"
#include "xl/kernels/cpu/row_layout.h"

namespace xl::kernels {
namespace {

// A row stride off multiples of 1 KB. Rows 4 KB apart fall in one set of L1's ways, and products
// that read such rows down their columns (A^T B: the probabilities' and scores' gradients into the
// values' and keys') ran 1.12x slower (1,024 x 64 x 64 with rows of 1,024 floats against 1,040, one
// Zen 4 core, 2026-11-26).
int64_t unaliased(int64_t floats) { return floats % 256 == 0 ? floats + 16 : floats; }

// Query rows per block: small enough that a block's scores over a few thousand keys stay in L2,
// large enough for efficient GEMMs.
constexpr int64_t kBlockRows = 64;

// What the queries of one row block see of one key block: its score columns [col, col + width)
// and the table rows [lo, lo + table_width) their positional scores read (query i, key col + j
// reads table row j + T - 1 - i). Width 0 when none of them sees the key block.
struct TableSlice {
  int64_t col = 0, width = 0, lo = 0, table_width = 0;
};

// Query rows [i0, i0 + rows) see keys [0, width).
struct RowBlock {
  int64_t i0 = 0, rows = 0, width = 0;
  int64_t ld = 0;                  // row stride of its probabilities and their gradients in scratch
  std::vector<TableSlice> slices;  // one per key block
  int64_t table_scores = 0;        // sum of rows x table_width: the positional scores' buffer
};

struct Geometry {
  int64_t batch = 0, t = 0, heads = 0, dh = 0, k = 0;  // tasks n = b x heads + h
  int64_t kv_batch = 0;  // floats from one stream's keys to the next's: K x ld_kv() unless kept in a RowWindow
  // Floats from one key's row [2, H, dh] to the next's: 2 x H x dh, or more where the keys and
  // values lie in a wider buffer (MGK's extra keys beside them; evaluation reads them in place).
  int64_t kv_row = 0;
  int64_t persistent = 0;                              // N persistent keys per head, before the context
  int64_t components = 0;                              // mixture content: M; 0: scale (q_u . k)
  std::vector<KeyBlock> keys;
  std::vector<int64_t> source;   // SCH: head h reads keys, values and tables of head source[h]
  std::vector<int64_t> visible;  // per query: 1 + its last visible key
  std::vector<RowBlock> blocks;
  int64_t buffer = 0;            // floats of scratch one thread needs for any row block
  // A task's rows copied together (contiguous_rows): keys [K, dh], then values, then each key
  // block's table [P_b, dh] from offset head_table[b]; head_floats in all.
  int64_t head_floats = 0;
  std::vector<int64_t> head_table;

  int64_t n() const { return batch * heads; }
  // Whether tasks work on a copy of their keys, values and tables: when a head's consecutive keys
  // lie a page or more apart (2 x n_head x d_head floats; 4 KB in the base model), each per-head
  // product packed them again through the cache and the TLB at a fraction of its speed. On one
  // core of an Intel Xeon with AVX-512 (2026-11-25), 64 x 1024 x 64 products ran at 102 (keys) and
  // 91 (values) GFLOP/s from those rows, 149 and 145 from contiguous ones. At 1-2 KB apart (the
  // tiny and small models) the copy cost more than it saved. A few queries (generation's one)
  // read each row about once: there the copy is only one more pass over them. Base-model
  // evaluation over 1,024 kept keys (medians of 3 alternating processes, Zen 4, 2026-11-27): with
  // the copy 194/307/488/296 tok/s at 1/2/4/8 queries, without it 208/359/538/307; from 16 queries
  // on the two were within the machine's noise (16: 516 against 519; 64: 908 against 871).
  bool copies_heads() const { return t >= 16 && ld_kv() * static_cast<int64_t>(sizeof(float)) >= 4096; }
  // Row stride of the kept probabilities: persistent keys first, then the context.
  int64_t ld_probs() const { return unaliased(persistent + k); }
  // Row strides of the token-major layouts.
  int64_t ld_q() const { return heads * dh; }       // q_u, q_v, out: [B, T, H, dh]
  int64_t ld_kv() const { return kv_row; }         // kv: [B, K, 2, H, dh]
  int64_t ld_table() const { return heads * dh; }   // tables: [P, H, dh]
  // Offsets of task n's first row.
  int64_t q_at(int64_t n, int64_t i) const { return ((n / heads) * t + i) * ld_q() + (n % heads) * dh; }
  int64_t key_at(int64_t n) const { return (n / heads) * kv_batch + source[n % heads] * dh; }
  int64_t value_at(int64_t n) const { return key_at(n) + heads * dh; }
  int64_t table_at(int64_t n, int64_t row) const { return row * ld_table() + source[n % heads] * dh; }
  // A mixture component's key rows ([B, K, H, dh], rows ld and streams ld_batch apart) and the
  // per-head tensors.
  int64_t component_key_at(int64_t n, int64_t ld_batch) const { return (n / heads) * ld_batch + source[n % heads] * dh; }
  int64_t persistent_at(int64_t n) const { return source[n % heads] * persistent * dh; }
};

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

struct Component {
  const float *query, *key, *log_weight;
  int64_t ld_key, ld_key_batch;
  float coef;
};

struct Operands {
  const float *q_u = nullptr, *q_v = nullptr, *kv = nullptr;
  std::vector<const float*> tables;
  const bool* mask = nullptr;
  float scale = 1;
  std::vector<Component> mixture;
  bool hard = false;
  const float *persistent_key = nullptr, *persistent_value = nullptr;
  std::vector<const float*> table_bias;  // empty or one per key block
  // The per-head products, the variants' too (a mixture's components, persistent keys and
  // values), from operands rounded to bf16, sums in fp32 (--precision bf16 where the CPU has bf16
  // products). A single query takes them too (not the fp32 row kernels), so that its backward, in
  // products, matches.
  bool bf16 = false;
};

// Where task n's keys, values and positional keys lie (or their gradients): rows of dh floats,
// ld (tables: ld_table) apart.
template <typename T>
struct HeadRows {
  T *key = nullptr, *value = nullptr;
  int64_t ld = 0;
  std::vector<T*> tables;  // each key block's row 0
  int64_t ld_table = 0;
  T* components = nullptr;  // rounded rows only: the mixture components' keys [M, K, dh]
  T* persistent = nullptr;  // rounded rows only: the persistent keys [N, dh], then their values
};

HeadRows<const float> operand_rows(const Geometry& g, const Operands& x, int64_t n) {
  HeadRows<const float> r{x.kv + g.key_at(n), x.kv + g.value_at(n), g.ld_kv(), {}, g.ld_table()};
  for (size_t b = 0; b < g.keys.size(); ++b) r.tables.push_back(x.tables[b] + g.table_at(n, 0));
  return r;
}

// A task's rows in the contiguous layout of Geometry::head_*, at `at` (head_floats floats).
template <typename T>
HeadRows<T> contiguous_rows(const Geometry& g, T* at) {
  HeadRows<T> r{at, at + g.k * g.dh, g.dh, {}, g.dh};
  for (int64_t offset : g.head_table) r.tables.push_back(at + offset);
  return r;
}

// `count` rows of `width` floats, `ld` apart: copied, or set to zero.
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

// One thread's rounded block operands (Operands::bf16): each slot holds one at a time.
class RoundedBlocks {
 public:
  enum Slot { kQueryU, kQueryV, kOutGrad, kScores, kComponentQuery, kComponentGrad, kPersistent, kSlots };
  // rows x width floats, ld apart, rounded into `slot`: its rows lie width apart.
  const uint16_t* operator()(Slot slot, const float* from, int64_t ld, int64_t rows, int64_t width) {
    std::vector<uint16_t>& to = slots_[slot];
    to.resize(static_cast<size_t>(rows * width));
    compute::round_rows_to_bf16(from, ld, to.data(), width, rows, width);
    return to.data();
  }

 private:
  std::array<std::vector<uint16_t>, kSlots> slots_;
};

// Operands::bf16 where AMX tiles run the products (amx_bf16_usable): each of a task's rounded
// keys, values and positional keys (and the variants' component keys, persistent keys and values)
// packed into the tiles' layout once for each way its products read it (as B^T for scores, as B
// for weighted sums), when first read. Packed again for each
// product (every row block reads them), they took 6.6% of base bf16 training's samples against the
// products' 10.3%; packed once a task, 2.8% (bench/HISTORY.md).
class HeadTiles {
 public:
  // A new task's rows: what was packed is stale (the rounded rows' buffer is reused).
  void start_task() {
    for (Entry& e : entries_) e.rows = nullptr;
  }
  // C[m, len] = A[m, dh] X[off : off + len]^T (trans_x), or C[m, dh] = A[m, len] X[off : off + len],
  // for X one of the task's rounded matrices: `count` rows of dh, ld apart.
  void product(bool trans_x, int64_t m, int64_t len, int64_t dh, const uint16_t* a, int64_t lda, const uint16_t* x,
               int64_t ld, int64_t count, int64_t off, float beta, float* c, int64_t ldc) {
    const int64_t k = trans_x ? dh : len, n = trans_x ? len : dh;
    const int64_t row0 = trans_x ? 0 : off, col0 = trans_x ? off : 0;
    if (compute::amx_bf16_usable()) {
      const compute::AmxPackedB& packed = packed_rows(trans_x, x, ld, count, dh);
      if (packed.holds(row0, k, col0, n))
        return compute::amx_bf16_gemm_packed(false, m, n, k, a, lda, packed, row0, col0, beta, c, ldc);
    }
    compute::bf16_gemm_row_major(false, trans_x, m, n, k, a, lda, x + off * ld, ld, beta, c, ldc);
  }

 private:
  struct Entry {
    const uint16_t* rows = nullptr;
    bool trans = false;
    compute::AmxPackedB packed;
  };
  const compute::AmxPackedB& packed_rows(bool trans, const uint16_t* x, int64_t ld, int64_t count, int64_t dh) {
    for (Entry& e : entries_)
      if (e.rows == x && e.trans == trans) return e.packed;
    auto free = std::find_if(entries_.begin(), entries_.end(), [](const Entry& e) { return e.rows == nullptr; });
    Entry& e = free != entries_.end() ? *free : entries_.emplace_back();
    e.rows = x, e.trans = trans;
    e.packed.pack(trans, trans ? dh : count, trans ? count : dh, x, ld);
    return e.packed;
  }
  std::vector<Entry> entries_;
};

// The rows task n reads: its operands' own, or (copies_heads) their copy in `copy`, made here.
HeadRows<const float> rows_to_read(const Geometry& g, const Operands& x, int64_t n, std::vector<float>& copy) {
  if (!g.copies_heads()) return operand_rows(g, x, n);
  copy.resize(static_cast<size_t>(g.head_floats));
  copy_head(g, operand_rows(g, x, n), contiguous_rows(g, copy.data()));
  return contiguous_rows<const float>(g, copy.data());
}

// A mixture's Gaussians as coef (q . k) + row + col (AttentionExtras::Component): per component
// the row terms -coef / 2 |q|^2 of a row block's queries and the column terms -coef / 2 |k|^2 +
// log_weight of a task's keys, the lengths those of the rows the products read (Operands::bf16:
// the rounded ones, so that the logits are the Gaussians of those). One thread's, filled as it
// reads the rows.
struct MixtureTerms {
  std::vector<float> row;  // [M, the row block's rows]
  std::vector<float> col;  // [M, K]
};

// s[j] = |x_j|^2 for `count` rows of n bf16 bit patterns each, back to back.
void squared_lengths(const uint16_t* x, int64_t count, float* s, int64_t n) {
  for (int64_t j = 0; j < count; ++j) {
    float sum = 0;
    for (int64_t e = 0; e < n; ++e) {
      const float v = c10::detail::f32_from_bits(x[j * n + e]);
      sum += v * v;
    }
    s[j] = sum;
  }
}

// The column terms of task n's keys (in16: its rounded rows, with Operands::bf16).
void column_terms(const Geometry& g, const Operands& x, int64_t n, const HeadRows<const uint16_t>& in16,
                  MixtureTerms& terms) {
  terms.col.resize(static_cast<size_t>(g.components * g.k));
  for (int64_t m = 0; m < g.components; ++m) {
    const Component& c = x.mixture[m];
    float* col = terms.col.data() + m * g.k;
    if (x.bf16) squared_lengths(in16.components + m * g.k * g.dh, g.k, col, g.dh);
    else rows::squared_lengths(c.key + g.component_key_at(n, c.ld_key_batch), c.ld_key, g.k, col, g.dh);
    const float half = -0.5f * c.coef, log_weight = c.log_weight[g.source[n % g.heads]];
    for (int64_t j = 0; j < g.k; ++j) col[j] = half * col[j] + log_weight;
  }
}

// A mixture's probabilities for one row of a row block into p (its context keys), from the
// components' products (M planes rows x width at s, the first overwritten by the mixture's weights)
// and the positional scores; the first M - 1 responsibilities into resp [M - 1, N, T, K] when
// given, zero past the row's visible keys (backward multiplies them by zero gradients).
void mixture_probs(const Geometry& g, const Operands& x, int64_t n, const RowBlock& rb, int64_t row,
                   const MixtureTerms& terms, const std::vector<const float*>& scores_of, float* s, float* p,
                   float* resp) {
  const int64_t m_count = g.components, plane = rb.rows * rb.width, i = rb.i0 + row, seen = g.visible[i];
  const int64_t shift = rb.rows - 1 - row;  // key col + j of this query reads table column j + shift
  const float* x_rows[16];
  const float* cols[16];
  float coefs[16], row_terms[16];
  float* resp_rows[16];
  for (int64_t m = 0; m < m_count; ++m) {
    coefs[m] = x.mixture[m].coef;
    row_terms[m] = terms.row[static_cast<size_t>(m * rb.rows + row)];
  }
  auto resp_row = [&](int64_t m) { return resp + ((m * g.n() + n) * g.t + i) * g.k; };
  float* w = s + row * rb.width;  // component 0's products, then the weights
  float max = -std::numeric_limits<float>::infinity();
  for (size_t b = 0; b < g.keys.size(); ++b) {
    const TableSlice& sl = rb.slices[b];
    const int64_t len = std::min(sl.width, seen - sl.col);
    if (len <= 0) continue;
    for (int64_t m = 0; m < m_count; ++m) {
      x_rows[m] = s + m * plane + row * rb.width + sl.col;
      cols[m] = terms.col.data() + m * g.k + sl.col;
      if (resp && m + 1 < m_count) resp_rows[m] = resp_row(m) + sl.col;
    }
    max = std::max(max, rows::mixture_logits(x_rows, coefs, row_terms, cols, m_count,
                                             scores_of[b] + row * sl.table_width + shift, x.mask + i * g.k + sl.col,
                                             p + sl.col, w + sl.col, resp ? resp_rows : nullptr, len, x.hard,
                                             x.scale));
  }
  rows::weighted_softmax(p, w, seen, max);
  if (resp)
    for (int64_t m = 0; m + 1 < m_count; ++m) std::fill(resp_row(m) + seen, resp_row(m) + rb.width, 0.0f);
}

// Where a row block's unkept probabilities start in the scratch buffer: after block_probs' scratch.
int64_t probs_at(const Geometry& g, const RowBlock& rb) {
  return std::max<int64_t>(g.components, 1) * rb.rows * rb.width + rb.table_scores;
}

// The probabilities of task n's row block rb into p (rows x ldp: persistent keys, then the
// context, zero from each row's visible keys to the block's width), from its rows `in`; the first
// M - 1 mixture responsibilities into resp when given. scratch: g.buffer floats; scores_of: one
// pointer per key block (the caller's, so that no task allocates). A mixture's column terms are
// task n's (column_terms); its row terms are the block's, made here.
// With Operands::bf16, in16 holds the rows rounded (round_head) and `rounded` the thread's slots.
void block_probs(const Geometry& g, const Operands& x, int64_t n, const RowBlock& rb, const HeadRows<const float>& in,
                 const HeadRows<const uint16_t>& in16, RoundedBlocks& rounded, HeadTiles& tiles, MixtureTerms& terms,
                 float* scratch, std::vector<const float*>& scores_of, float* p, int64_t ldp, float* resp) {
  const int64_t dh = g.dh, np = g.persistent, h = n % g.heads;
  const float inv_scale = 1.0f / x.scale;
  const float* q_u = x.q_u + g.q_at(n, rb.i0);
  const float* q_v = x.q_v + g.q_at(n, rb.i0);
  float* ac = scratch;
  float* bd = ac + std::max<int64_t>(g.components, 1) * rb.rows * rb.width;
  scores_of.resize(g.keys.size());
  // A single query (generation's) reads each row once: the row kernels read them, where a
  // product per head paid its call and packing for little work (wt103 generation, Zen 4,
  // 2026-11-27: 444-460 -> 254-260 us a layer, medians of 3 alternating processes each).
  const bool one_query = rb.rows == 1 && !x.bf16;
  if (g.components == 0) {
    if (one_query) rows::dots(q_u, in.key, in.ld, rb.width, ac, dh);
    else if (x.bf16)
      tiles.product(true, rb.rows, rb.width, dh, rounded(RoundedBlocks::kQueryU, q_u, g.ld_q(), rb.rows, dh), dh,
                    in16.key, in16.ld, g.k, 0, 0, ac, rb.width);
    else compute::sgemm_row_major(false, true, rb.rows, rb.width, dh, q_u, g.ld_q(), in.key, in.ld, 0, ac, rb.width);
  } else {
    terms.row.resize(static_cast<size_t>(g.components * rb.rows));
    for (int64_t m = 0; m < g.components; ++m) {
      const Component& c = x.mixture[m];
      const float* query = c.query + g.q_at(n, rb.i0);
      float* product = ac + m * rb.rows * rb.width;
      float* row_terms = terms.row.data() + m * rb.rows;
      if (x.bf16) {
        const uint16_t* query16 = rounded(RoundedBlocks::kComponentQuery, query, g.ld_q(), rb.rows, dh);
        squared_lengths(query16, rb.rows, row_terms, dh);
        tiles.product(true, rb.rows, rb.width, dh, query16, dh, in16.components + m * g.k * dh, dh, g.k, 0, 0,
                      product, rb.width);
      } else {
        rows::squared_lengths(query, g.ld_q(), rb.rows, row_terms, dh);
        compute::sgemm_row_major(false, true, rb.rows, rb.width, dh, query, g.ld_q(),
                        c.key + g.component_key_at(n, c.ld_key_batch), c.ld_key, 0, product, rb.width);
      }
      for (int64_t row = 0; row < rb.rows; ++row) row_terms[row] *= -0.5f * c.coef;
    }
  }
  const uint16_t* q_v16 =
      x.bf16 ? rounded(RoundedBlocks::kQueryV, q_v, g.ld_q(), rb.rows, dh) : nullptr;
  for (size_t b = 0; b < g.keys.size(); ++b) {
    const TableSlice& s = rb.slices[b];
    if (s.table_width == 0) continue;
    if (one_query)
      rows::dots(q_v, in.tables[b] + s.lo * in.ld_table, in.ld_table, s.table_width, bd, dh);
    else if (q_v16)
      tiles.product(true, rb.rows, s.table_width, dh, q_v16, dh, in16.tables[b], in16.ld_table,
                    g.keys[b].table, s.lo, 0, bd, s.table_width);
    else
      compute::sgemm_row_major(false, true, rb.rows, s.table_width, dh, q_v, g.ld_q(), in.tables[b] + s.lo * in.ld_table,
                      in.ld_table, 0, bd, s.table_width);
    if (!x.table_bias.empty()) {
      const float* bias = x.table_bias[b] + h * g.keys[b].table + s.lo;
      for (int64_t row = 0; row < rb.rows; ++row)
        for (int64_t c = 0; c < s.table_width; ++c) bd[row * s.table_width + c] += bias[c] * inv_scale;
    }
    scores_of[b] = bd;
    bd += rb.rows * s.table_width;
  }
  if (np > 0 && x.bf16)
    tiles.product(true, rb.rows, np, dh, rounded(RoundedBlocks::kQueryU, q_u, g.ld_q(), rb.rows, dh), dh,
                  in16.persistent, dh, np, 0, 0, p, ldp);
  else if (np > 0)
    compute::sgemm_row_major(false, true, rb.rows, np, dh, q_u, g.ld_q(), x.persistent_key + g.persistent_at(n), dh, 0, p, ldp);
  for (int64_t row = 0; row < rb.rows; ++row) {
    const int64_t i = rb.i0 + row, seen = g.visible[i];
    const int64_t shift = rb.rows - 1 - row;  // key col + j of this query reads table column j + shift
    float* pr = p + row * ldp;
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < np; ++j) max = std::max(max, pr[j] *= x.scale);
    float* context = pr + np;
    if (g.components > 0) {
      mixture_probs(g, x, n, rb, row, terms, scores_of, ac, context, resp);
    } else {
      for (size_t b = 0; b < g.keys.size(); ++b) {
        const TableSlice& s = rb.slices[b];
        const int64_t len = std::min(s.width, seen - s.col);
        if (len <= 0) continue;
        max = std::max(max, rows::masked_scores(ac + row * rb.width + s.col, scores_of[b] + row * s.table_width + shift,
                                                x.mask + i * g.k + s.col, context + s.col, len, x.scale));
      }
      rows::softmax(pr, np + seen, max);
    }
    std::fill(context + seen, context + rb.width, 0.0f);
  }
}

// out [B, T, H, dh]. probs [N, T, ld_probs] keeps the probabilities for backward (entries past a
// row block's width are left unset), resp the mixture's responsibilities; without them they live
// in the thread's scratch.
void forward_blocks(const Geometry& g, const Operands& x, float* out, float* probs, float* resp) {
  const int64_t nb = static_cast<int64_t>(g.blocks.size()), dh = g.dh, np = g.persistent;
  compute::SingleThreadedBlas single;
  compute::parallel_for(0, g.n() * nb, 1, [&](int64_t task0, int64_t task1) {
    std::vector<float> buffer(static_cast<size_t>(g.buffer)), copy;
    std::vector<uint16_t> copy16;
    RoundedBlocks rounded;
    thread_local HeadTiles tiles;  // kept between calls: its packed rows are about a head's size
    MixtureTerms terms;
    std::vector<const float*> scores_of;
    HeadRows<const float> in;
    HeadRows<const uint16_t> in16;
    int64_t read = -1;  // whose rows `in` are: a thread's tasks run through n in order
    for (int64_t task = task0; task < task1; ++task) {
      const int64_t n = task / nb;
      const RowBlock& rb = g.blocks[task % nb];
      if (n != read) {  // bf16: the products read the rounded copy, so no float copy is made
        in = x.bf16 ? operand_rows(g, x, n) : rows_to_read(g, x, n, copy);
        if (x.bf16) {
          in16 = round_head(g, x, n, in, copy16);
          tiles.start_task();
        }
        if (g.components > 0) column_terms(g, x, n, in16, terms);
      }
      read = n;
      // Unkept, the probabilities follow block_probs' scratch in the buffer.
      float* p = probs ? probs + (n * g.t + rb.i0) * g.ld_probs() : buffer.data() + probs_at(g, rb);
      const int64_t ldp = probs ? g.ld_probs() : rb.ld;
      block_probs(g, x, n, rb, in, in16, rounded, tiles, terms, buffer.data(), scores_of, p, ldp, resp);
      if (rb.rows == 1 && !x.bf16)
        rows::weighted_rows(p + np, in.value, in.ld, rb.width, out + g.q_at(n, rb.i0), dh);
      else if (x.bf16)
        tiles.product(false, rb.rows, rb.width, dh,
                      rounded(RoundedBlocks::kScores, p + np, ldp, rb.rows, rb.width), rb.width, in16.value, in16.ld,
                      g.k, 0, 0, out + g.q_at(n, rb.i0), g.ld_q());
      else
        compute::sgemm_row_major(false, false, rb.rows, dh, rb.width, p + np, ldp, in.value, in.ld, 0, out + g.q_at(n, rb.i0),
                        g.ld_q());
      if (np > 0 && x.bf16)
        tiles.product(false, rb.rows, np, dh, rounded(RoundedBlocks::kPersistent, p, ldp, rb.rows, np), np,
                      in16.persistent + np * dh, dh, np, 0, 1, out + g.q_at(n, rb.i0), g.ld_q());
      else if (np > 0)
        compute::sgemm_row_major(false, false, rb.rows, dh, np, p, ldp, x.persistent_value + g.persistent_at(n), dh, 1,
                        out + g.q_at(n, rb.i0), g.ld_q());
    }
  });
}

// Uninitialised on entry: each backward task writes or clears the rows it owns (backward_blocks,
// clear_owned).
struct Gradients {
  float *q_u = nullptr, *q_v = nullptr, *kv = nullptr;  // layouts of the operands
  std::vector<float*> tables_per_batch;  // [B, P_b, H, dh]: summed over B after
  // The variants': per component query (layout of q_u), key ([B, K, H, dh]); per component log
  // weights [B, H], persistent keys and values [B, H, N, dh] and table biases [B, H, P_b] per
  // batch, summed over B after. Components that share a query or key tensor (MGK's queries are
  // all q_u, sMGK's keys all one) share its gradient: the first writes it, the others add
  // (adds_query), and a key is cleared by its first component only (first_with_key).
  std::vector<float*> query, key, log_weight_per_batch;
  std::vector<bool> adds_query, first_with_key;
  float *persistent_key = nullptr, *persistent_value = nullptr;
  std::vector<float*> bias_per_batch;
};

// The gradients of task n's keys, values and tables (operand_rows' rows), the tables' in batch n / H's part.
HeadRows<float> gradient_rows(const Geometry& g, const Gradients& d, int64_t n) {
  const int64_t batch = n / g.heads;
  HeadRows<float> r{d.kv + g.key_at(n), d.kv + g.value_at(n), g.ld_kv(), {}, g.ld_table()};
  for (size_t b = 0; b < g.keys.size(); ++b)
    r.tables.push_back(d.tables_per_batch[b] + batch * g.keys[b].table * g.ld_table() + g.table_at(n, 0));
  return r;
}

// Zeroes the gradient rows besides its keys, values and tables that backward task n accumulates
// into. They are its alone (SCH's permutation gives each task its own source head), so this runs
// inside the task, while the rows are about to be written, not as a pass of its own.
void clear_owned(const Geometry& g, const Gradients& d, int64_t n) {
  const int64_t dh = g.dh, batch = n / g.heads, h = n % g.heads;
  for (int64_t m = 0; m < g.components; ++m)
    if (d.first_with_key[static_cast<size_t>(m)])
      clear_rows(d.key[m] + g.component_key_at(n, g.k * g.ld_q()), g.ld_q(), g.k, dh);
  if (g.persistent > 0) {
    const int64_t at = batch * g.heads * g.persistent * dh + g.persistent_at(n);
    std::fill_n(d.persistent_key + at, g.persistent * dh, 0.0f);
    std::fill_n(d.persistent_value + at, g.persistent * dh, 0.0f);
  }
  for (size_t b = 0; b < d.bias_per_batch.size(); ++b)
    std::fill_n(d.bias_per_batch[b] + (batch * g.heads + h) * g.keys[b].table, g.keys[b].table, 0.0f);
}

// y[e] += f x[e]
void add_scaled(const float* x, float f, float* y, int64_t n) {
  for (int64_t e = 0; e < n; ++e) y[e] += f * x[e];
}

// The gradient of one mixture component m from the content's (gs: scale x d logit, rows x width,
// row stride ldg): into its query and key, and its column terms' into d_col [K] (task n's, added
// to its keys by column_terms_backward). ds: rows x width scratch. The squared lengths' gradients
// take the float rows (with bf16 products too: within the rounding of the products' own).
// With Operands::bf16, in16 holds the rounded component keys (round_head), `rounded` and `tiles` the
// thread's slots and packed rows.
void mixture_backward(const Geometry& g, const Operands& x, const float* resp, const Gradients& d, int64_t n,
                      const RowBlock& rb, int64_t m, const float* gs, int64_t ldg, float* ds, float* d_col,
                      const HeadRows<const uint16_t>& in16, RoundedBlocks& rounded, HeadTiles& tiles) {
  const Component& c = x.mixture[m];
  const int64_t plane = g.n() * g.t * g.k;
  std::array<float, kBlockRows> d_row;  // the row terms' gradients
  for (int64_t row = 0; row < rb.rows; ++row) {
    const int64_t i = rb.i0 + row;
    d_row[static_cast<size_t>(row)] =
        rows::mixture_grad(gs + row * ldg, resp + (n * g.t + i) * g.k, plane, m, g.components, 1.0f / x.scale, c.coef,
                           ds + row * rb.width, d_col, rb.width);
  }
  const int64_t at = g.q_at(n, rb.i0), key_at = g.component_key_at(n, c.ld_key_batch);
  const int64_t grad_key_at = g.component_key_at(n, g.k * g.ld_q());
  const float query_beta = d.adds_query[static_cast<size_t>(m)] ? 1.0f : 0.0f;
  if (x.bf16) {
    const uint16_t* ds16 = rounded(RoundedBlocks::kComponentGrad, ds, rb.width, rb.rows, rb.width);
    tiles.product(false, rb.rows, rb.width, g.dh, ds16, rb.width, in16.components + m * g.k * g.dh, g.dh, g.k,
                  0, query_beta, d.query[m] + at, g.ld_q());
    compute::bf16_gemm_row_major(true, false, rb.width, g.dh, rb.rows, ds16, rb.width,
                        rounded(RoundedBlocks::kComponentQuery, c.query + at, g.ld_q(), rb.rows, g.dh), g.dh, 1,
                        d.key[m] + grad_key_at, g.ld_q());
  } else {
    compute::sgemm_row_major(false, false, rb.rows, g.dh, rb.width, ds, rb.width, c.key + key_at, c.ld_key, query_beta,
                    d.query[m] + at, g.ld_q());
    compute::sgemm_row_major(true, false, rb.width, g.dh, rb.rows, ds, rb.width, c.query + at, g.ld_q(), 1,
                    d.key[m] + grad_key_at, g.ld_q());
  }
  // Row term -coef / 2 |q|^2: d q += -coef d_row q, after the product wrote d q.
  for (int64_t row = 0; row < rb.rows; ++row)
    add_scaled(c.query + at + row * g.ld_q(), -c.coef * d_row[static_cast<size_t>(row)],
               d.query[m] + at + row * g.ld_q(), g.dh);
}

// Task n's column terms' gradients d_col [M, K] (mixture_backward's sums over its row blocks):
// -coef / 2 |k|^2 gives d k += -coef d_col k, and log_weight their sum.
void column_terms_backward(const Geometry& g, const Operands& x, const Gradients& d, int64_t n, const float* d_col) {
  for (int64_t m = 0; m < g.components; ++m) {
    const Component& c = x.mixture[m];
    const float* dc = d_col + m * g.k;
    const float* key = c.key + g.component_key_at(n, c.ld_key_batch);
    float* d_key = d.key[m] + g.component_key_at(n, g.k * g.ld_q());
    float sum = 0;
    for (int64_t j = 0; j < g.k; ++j) {
      sum += dc[j];
      add_scaled(key + j * c.ld_key, -c.coef * dc[j], d_key + j * g.ld_q(), g.dh);
    }
    d.log_weight_per_batch[m][(n / g.heads) * g.heads + g.source[n % g.heads]] = sum;
  }
}

// probs: forward_blocks' kept probabilities, or null to compute each block's again (block_probs:
// the same bits).
void backward_blocks(const Geometry& g, const Operands& x, const float* probs, const float* resp,
                     const float* grad_out, const Gradients& d) {
  const int64_t dh = g.dh, np = g.persistent;
  const float inv_scale = 1.0f / x.scale;
  compute::SingleThreadedBlas single;
  // Row blocks widest first: the first writes the key, value and table gradients with beta 0 (and
  // clears the rows it does not reach), the others add to them; no pass that clears them all.
  std::vector<const RowBlock*> order;
  for (const RowBlock& rb : g.blocks) order.push_back(&rb);
  std::stable_sort(order.begin(), order.end(),
                   [](const RowBlock* a, const RowBlock* b) { return a->width > b->width; });
  // One task per (sequence, head): its key, value and table gradients accumulate over its row blocks
  // (SCH's permutation sends each task to its own source head, so no two tasks write the same rows).
  compute::parallel_for(0, g.n(), 1, [&](int64_t n0, int64_t n1) {
    // With copies_heads, the key, value and table gradients are summed in a copy's layout too and
    // written out when the task is done.
    std::vector<float> buffer(static_cast<size_t>(g.buffer)), copy, d_copy, recomputed;
    std::vector<uint16_t> copy16;
    RoundedBlocks rounded;
    thread_local HeadTiles tiles;  // kept between calls: its packed rows are about a head's size
    MixtureTerms terms;
    std::vector<float> d_col(static_cast<size_t>(g.components * g.k));  // the task's column terms' gradients
    std::vector<const float*> scores_of;
    if (g.copies_heads()) d_copy.resize(static_cast<size_t>(g.head_floats));
    for (int64_t n = n0; n < n1; ++n) {
      const int64_t batch = n / g.heads, h = n % g.heads;
      const HeadRows<const float> in = x.bf16 ? operand_rows(g, x, n) : rows_to_read(g, x, n, copy);
      const HeadRows<const uint16_t> in16 = x.bf16 ? round_head(g, x, n, in, copy16) : HeadRows<const uint16_t>{};
      tiles.start_task();
      const HeadRows<float> d_in = gradient_rows(g, d, n);
      const HeadRows<float> d_rows = g.copies_heads() ? contiguous_rows(g, d_copy.data()) : d_in;
      const int64_t pers_at = batch * g.heads * np * dh + g.persistent_at(n);
      clear_owned(g, d, n);
      if (g.components > 0) {
        clear_rows(d_rows.key, d_rows.ld, g.k, dh);  // the mixture's keys take its gradient
        std::fill(d_col.begin(), d_col.end(), 0.0f);
        if (!probs) column_terms(g, x, n, in16, terms);
      }
      float kv_beta = 0;
      std::vector<float> table_beta(g.keys.size(), 0.0f);
      for (const RowBlock* block : order) {
        const RowBlock& rb = *block;
        if (kv_beta == 0) {  // keys no query of the widest block sees get no gradient
          clear_rows(d_rows.value + rb.width * d_rows.ld, d_rows.ld, g.k - rb.width, dh);
          if (g.components == 0) clear_rows(d_rows.key + rb.width * d_rows.ld, d_rows.ld, g.k - rb.width, dh);
        }
        const int64_t at = g.q_at(n, rb.i0), ldg = rb.ld, ldp = probs ? g.ld_probs() : rb.ld;
        const float* p = probs ? probs + (n * g.t + rb.i0) * ldp : nullptr;
        if (!probs) {
          recomputed.resize(static_cast<size_t>(rb.rows * rb.ld));
          block_probs(g, x, n, rb, in, in16, rounded, tiles, terms, buffer.data(), scores_of, recomputed.data(), ldp,
                      nullptr);
          p = recomputed.data();
        }
        const float* go = grad_out + at;
        float* gs = buffer.data();  // d(probs), then scale x d(logits): persistent keys, then context
        float* g_context = gs + np;
        const uint16_t* go16 = x.bf16 ? rounded(RoundedBlocks::kOutGrad, go, g.ld_q(), rb.rows, dh) : nullptr;
        if (go16) {
          tiles.product(true, rb.rows, rb.width, dh, go16, dh, in16.value, in16.ld, g.k, 0, 0, g_context, ldg);
          compute::bf16_gemm_row_major(true, false, rb.width, dh, rb.rows,
                              rounded(RoundedBlocks::kScores, p + np, ldp, rb.rows, rb.width), rb.width, go16, dh,
                              kv_beta, d_rows.value, d_rows.ld);
        } else {
          compute::sgemm_row_major(false, true, rb.rows, rb.width, dh, go, g.ld_q(), in.value, in.ld, 0, g_context, ldg);
          compute::sgemm_row_major(true, false, rb.width, dh, rb.rows, p + np, ldp, go, g.ld_q(), kv_beta, d_rows.value,
                          d_rows.ld);
        }
        if (np > 0 && go16) {
          tiles.product(true, rb.rows, np, dh, go16, dh, in16.persistent + np * dh, dh, np, 0, 0, gs, ldg);
          compute::bf16_gemm_row_major(true, false, np, dh, rb.rows, rounded(RoundedBlocks::kPersistent, p, ldp, rb.rows, np),
                              np, go16, dh, 1, d.persistent_value + pers_at, dh);
        } else if (np > 0) {
          compute::sgemm_row_major(false, true, rb.rows, np, dh, go, g.ld_q(), x.persistent_value + g.persistent_at(n), dh, 0,
                          gs, ldg);
          compute::sgemm_row_major(true, false, np, dh, rb.rows, p, ldp, go, g.ld_q(), 1, d.persistent_value + pers_at, dh);
        }
        for (int64_t row = 0; row < rb.rows; ++row) {
          const int64_t seen = np + g.visible[rb.i0 + row];
          const float* pr = p + row * ldp;
          float* gr = gs + row * ldg;
          rows::softmax_grad(pr, gr, gr, seen, rows::dot(pr, gr, seen), x.scale);
          std::fill(gr + seen, gr + ldg, 0.0f);
        }
        float q_u_beta = 0;
        if (np > 0 && x.bf16) {
          const uint16_t* gs16 = rounded(RoundedBlocks::kPersistent, gs, ldg, rb.rows, np);
          tiles.product(false, rb.rows, np, dh, gs16, np, in16.persistent, dh, np, 0, 0, d.q_u + at, g.ld_q());
          compute::bf16_gemm_row_major(true, false, np, dh, rb.rows, gs16, np,
                              rounded(RoundedBlocks::kQueryU, x.q_u + at, g.ld_q(), rb.rows, dh), dh, 1,
                              d.persistent_key + pers_at, dh);
        } else if (np > 0) {
          compute::sgemm_row_major(false, false, rb.rows, dh, np, gs, ldg, x.persistent_key + g.persistent_at(n), dh, 0,
                          d.q_u + at, g.ld_q());
          compute::sgemm_row_major(true, false, np, dh, rb.rows, gs, ldg, x.q_u + at, g.ld_q(), 1, d.persistent_key + pers_at, dh);
        }
        if (np > 0) q_u_beta = 1;
        float* g_bd = gs + rb.rows * ldg;
        if (g.components == 0 && x.bf16) {
          const uint16_t* gc16 = rounded(RoundedBlocks::kScores, g_context, ldg, rb.rows, rb.width);
          tiles.product(false, rb.rows, rb.width, dh, gc16, rb.width, in16.key, in16.ld, g.k, 0, q_u_beta,
                        d.q_u + at, g.ld_q());
          compute::bf16_gemm_row_major(true, false, rb.width, dh, rb.rows, gc16, rb.width,
                              rounded(RoundedBlocks::kQueryU, x.q_u + at, g.ld_q(), rb.rows, dh), dh, kv_beta,
                              d_rows.key, d_rows.ld);
        } else if (g.components == 0) {
          compute::sgemm_row_major(false, false, rb.rows, dh, rb.width, g_context, ldg, in.key, in.ld, q_u_beta, d.q_u + at,
                          g.ld_q());
          compute::sgemm_row_major(true, false, rb.width, dh, rb.rows, g_context, ldg, x.q_u + at, g.ld_q(), kv_beta,
                          d_rows.key, d_rows.ld);
        } else {
          for (int64_t m = 0; m < g.components; ++m)
            mixture_backward(g, x, resp, d, n, rb, m, g_context, ldg, g_bd + rb.table_scores, d_col.data() + m * g.k,
                             in16, rounded, tiles);
        }
        // Positional scores: d(scores) moved to table columns, one key block at a time.
        const uint16_t* q_v16 = x.bf16 ? rounded(RoundedBlocks::kQueryV, x.q_v + at, g.ld_q(), rb.rows, dh) : nullptr;
        float beta = 0;
        for (size_t b = 0; b < g.keys.size(); ++b) {
          const TableSlice& s = rb.slices[b];
          if (s.table_width == 0) continue;
          for (int64_t row = 0; row < rb.rows; ++row) {
            const int64_t shift = rb.rows - 1 - row;
            const int64_t len = std::clamp<int64_t>(g.visible[rb.i0 + row] - s.col, 0, s.width);
            float* tr = g_bd + row * s.table_width;
            const int64_t end = std::min(s.table_width, shift + len);
            std::fill(tr, tr + std::min(shift, s.table_width), 0.0f);
            if (end > shift)
              std::memcpy(tr + shift, g_context + row * ldg + s.col, sizeof(float) * static_cast<size_t>(end - shift));
            std::fill(tr + std::max(end, std::min(shift, s.table_width)), tr + s.table_width, 0.0f);
          }
          float* d_table = d_rows.tables[b];
          if (table_beta[b] == 0) {  // the rows no query of this block reads get no gradient
            clear_rows(d_table, d_rows.ld_table, s.lo, dh);
            clear_rows(d_table + (s.lo + s.table_width) * d_rows.ld_table, d_rows.ld_table,
                       g.keys[b].table - s.lo - s.table_width, dh);
          }
          if (q_v16) {
            const uint16_t* g_bd16 = rounded(RoundedBlocks::kScores, g_bd, s.table_width, rb.rows, s.table_width);
            tiles.product(false, rb.rows, s.table_width, dh, g_bd16, s.table_width, in16.tables[b],
                          in16.ld_table, g.keys[b].table, s.lo, beta, d.q_v + at, g.ld_q());
            compute::bf16_gemm_row_major(true, false, s.table_width, dh, rb.rows, g_bd16, s.table_width, q_v16, dh,
                                table_beta[b], d_table + s.lo * d_rows.ld_table, d_rows.ld_table);
          } else {
            compute::sgemm_row_major(false, false, rb.rows, dh, s.table_width, g_bd, s.table_width,
                            in.tables[b] + s.lo * in.ld_table, in.ld_table, beta, d.q_v + at, g.ld_q());
            compute::sgemm_row_major(true, false, s.table_width, dh, rb.rows, g_bd, s.table_width, x.q_v + at, g.ld_q(),
                            table_beta[b], d_table + s.lo * d_rows.ld_table, d_rows.ld_table);
          }
          table_beta[b] = 1;
          if (!d.bias_per_batch.empty()) {
            float* d_bias = d.bias_per_batch[b] + (batch * g.heads + h) * g.keys[b].table + s.lo;
            for (int64_t row = 0; row < rb.rows; ++row)
              for (int64_t c = 0; c < s.table_width; ++c) d_bias[c] += g_bd[row * s.table_width + c] * inv_scale;
          }
          beta = 1;
        }
        if (beta == 0)  // sees no key: cannot happen (geometry checks), but never leave rows unset
          clear_rows(d.q_v + at, g.ld_q(), rb.rows, dh);
        kv_beta = 1;
      }
      for (size_t b = 0; b < g.keys.size(); ++b)  // a table no block reads
        if (table_beta[b] == 0) clear_rows(d_rows.tables[b], d_rows.ld_table, g.keys[b].table, dh);
      if (g.components > 0) column_terms_backward(g, x, d, n, d_col.data());
      if (g.copies_heads()) copy_head(g, contiguous_rows<const float>(g, d_copy.data()), d_in);
    }
  });
}

// t [B, ...] summed over B in one parallel pass, batch by batch in order (t.sum(0) clears its
// output in a pass of its own and reduced the base model's table gradients 4x slower).
torch::Tensor sum_over_batch(const torch::Tensor& t) {
  const int64_t batch = t.size(0);
  if (batch == 1) return t[0];
  const int64_t n = t.numel() / batch;
  torch::Tensor out = torch::empty(t.sizes().slice(1), t.options());
  const float* in = t.data_ptr<float>();
  float* o = out.data_ptr<float>();
  compute::parallel_for(0, n, 1 << 14, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) o[i] = in[i] + in[n + i];
    for (int64_t b = 2; b < batch; ++b)
      for (int64_t i = i0; i < i1; ++i) o[i] += in[b * n + i];
  });
  return out;
}

// The extras as a flat tensor list (for autograd) and back: per component query, key, log weights;
// then the persistent key and value; then the table biases. spec: {M, hard, persistent, biases},
// coefs: the components' coefficients.
struct PackedExtras {
  std::vector<torch::Tensor> tensors;
  std::vector<int64_t> spec;
  std::vector<double> coefs;
};

PackedExtras pack(const AttentionExtras& e) {
  PackedExtras p;
  for (const auto& c : e.mixture) {
    p.tensors.insert(p.tensors.end(), {c.query, c.key, c.log_weight});
    p.coefs.push_back(c.coef);
  }
  const bool persistent = e.persistent_key.defined();
  if (persistent) p.tensors.insert(p.tensors.end(), {e.persistent_key, e.persistent_value});
  p.tensors.insert(p.tensors.end(), e.table_bias.begin(), e.table_bias.end());
  p.spec = {static_cast<int64_t>(e.mixture.size()), e.hard ? 1 : 0, persistent ? 1 : 0,
            static_cast<int64_t>(e.table_bias.size())};
  return p;
}

AttentionExtras unpack(const std::vector<torch::Tensor>& t, const std::vector<int64_t>& spec,
                       const std::vector<double>& coefs) {
  AttentionExtras e;
  size_t at = 0;
  for (int64_t m = 0; m < spec[0]; ++m, at += 3) e.mixture.push_back({t[at], t[at + 1], t[at + 2], coefs[m]});
  e.hard = spec[1] != 0;
  if (spec[2] != 0) e.persistent_key = t[at], e.persistent_value = t[at + 1], at += 2;
  e.table_bias.assign(t.begin() + static_cast<int64_t>(at), t.begin() + static_cast<int64_t>(at) + spec[3]);
  return e;
}

// A component key [B, K, H, dh] whose rows the kernel can stride through (kv.select(2, 0) can).
torch::Tensor strided_rows(const torch::Tensor& key) { return rows_are_strided(key) ? key : key.contiguous(); }

AttentionExtras contiguous(const AttentionExtras& e) {
  AttentionExtras c;
  for (const auto& m : e.mixture)
    c.mixture.push_back({m.query.contiguous(), strided_rows(m.key), m.log_weight.contiguous(), m.coef});
  c.hard = e.hard;
  if (e.persistent_key.defined())
    c.persistent_key = e.persistent_key.contiguous(), c.persistent_value = e.persistent_value.contiguous();
  for (const auto& b : e.table_bias) c.table_bias.push_back(b.contiguous());
  return c;
}

Operands operands(const torch::Tensor& q_u, const torch::Tensor& q_v, const torch::Tensor& kv,
                  const std::vector<torch::Tensor>& tables, const torch::Tensor& mask, double scale,
                  const AttentionExtras& e, bool bf16) {
  Operands x;
  x.bf16 = bf16;
  x.q_u = q_u.data_ptr<float>(), x.q_v = q_v.data_ptr<float>(), x.kv = kv.data_ptr<float>();
  x.mask = mask.data_ptr<bool>();
  x.scale = static_cast<float>(scale);
  for (const auto& t : tables) x.tables.push_back(t.data_ptr<float>());
  for (const auto& c : e.mixture)
    x.mixture.push_back({c.query.data_ptr<float>(), c.key.data_ptr<float>(), c.log_weight.data_ptr<float>(),
                         row_stride(c.key), stream_stride(c.key), static_cast<float>(c.coef)});
  x.hard = e.hard;
  if (e.persistent_key.defined())
    x.persistent_key = e.persistent_key.data_ptr<float>(), x.persistent_value = e.persistent_value.data_ptr<float>();
  for (const auto& b : e.table_bias) x.table_bias.push_back(b.data_ptr<float>());
  return x;
}

// Which mixture components read the same tensors, for their gradients to share a buffer: per
// component, 1 if its query is q_u itself (then q_u's gradient is theirs: the kernel writes none of
// its own for a mixture), then per component the first component whose key is its key. Only the
// same tensor counts: a view of the same memory is another input to autograd.
std::vector<int64_t> shared_operands(const torch::Tensor& q_u, const AttentionExtras& e) {
  const size_t count = e.mixture.size();
  std::vector<int64_t> shared(2 * count);
  for (size_t m = 0; m < count; ++m) {
    shared[m] = e.mixture[m].query.is_same(q_u) ? 1 : 0;
    size_t first = 0;
    while (!e.mixture[first].key.is_same(e.mixture[m].key)) ++first;
    shared[count + m] = static_cast<int64_t>(first);
  }
  return shared;
}

class ChunkedRelativeAttention : public torch::autograd::Function<ChunkedRelativeAttention> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q_u,
                               const torch::Tensor& q_v, const torch::Tensor& kv, torch::TensorList tables,
                               torch::TensorList extra_tensors, const std::vector<int64_t>& keys,
                               const std::vector<int64_t>& heads, const torch::Tensor& mask, double scale,
                               const std::vector<int64_t>& spec, const std::vector<double>& coefs) {
    RECORD_FUNCTION("xl::chunked_attention", std::vector<c10::IValue>());
    const std::vector<torch::Tensor> table_list = tables.vec(), extra_list = extra_tensors.vec();
    const AttentionExtras extras = unpack(extra_list, spec, coefs);
    const Geometry g = geometry(q_u, kv, table_list, unpack_key_blocks(keys), heads, mask, extras);
    torch::Tensor out = torch::empty_like(q_u);
    const bool keep = compute::attention_probs() == compute::AttentionProbs::kKeep;
    torch::Tensor probs = torch::empty({keep ? g.n() : 0, g.t, g.ld_probs()}, q_u.options());
    torch::Tensor resp = torch::empty({std::max<int64_t>(g.components - 1, 0), g.n(), g.t, g.k}, q_u.options());
    // autocast's state is per thread: backward is told
    const bool bf16 = takes_bf16_operands(g.t);
    forward_blocks(g, operands(q_u, q_v, kv, table_list, mask, scale, extras, bf16), out.data_ptr<float>(),
                   keep ? probs.data_ptr<float>() : nullptr, g.components > 1 ? resp.data_ptr<float>() : nullptr);
    std::vector<torch::Tensor> saved = {q_u, q_v, kv, probs, resp};
    saved.insert(saved.end(), table_list.begin(), table_list.end());
    saved.insert(saved.end(), extra_list.begin(), extra_list.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["keys"] = keys;
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["mask"] = mask;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["spec"] = spec;
    ctx->saved_data["coefs"] = coefs;
    ctx->saved_data["bf16"] = bf16;
    ctx->saved_data["shared"] = shared_operands(q_u, extras);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    RECORD_FUNCTION("xl::chunked_attention_backward", std::vector<c10::IValue>());
    auto s = ctx->get_saved_variables();
    const torch::Tensor &q_u = s[0], &q_v = s[1], &kv = s[2], &probs = s[3], &resp = s[4];
    const auto keys = unpack_key_blocks(ctx->saved_data["keys"].toIntVector());
    const auto tables_end = s.begin() + 5 + static_cast<int64_t>(keys.size());
    const std::vector<torch::Tensor> tables(s.begin() + 5, tables_end), extra_list(tables_end, s.end());
    const AttentionExtras extras =
        unpack(extra_list, ctx->saved_data["spec"].toIntVector(), ctx->saved_data["coefs"].toDoubleVector());
    const torch::Tensor mask = ctx->saved_data["mask"].toTensor();
    const Geometry g = geometry(q_u, kv, tables, keys, ctx->saved_data["heads"].toIntVector(), mask, extras);
    // Every gradient starts uninitialised: backward_blocks clears what it accumulates into.
    const auto shared = ctx->saved_data["shared"].toIntVector();
    const size_t count = extras.mixture.size();
    const bool components_take_q_u = std::find(shared.begin(), shared.begin() + count, 1) != shared.begin() + count;
    // A mixture's content reads its components' queries, not q_u: q_u's gradient is theirs or none.
    torch::Tensor d_q_u;
    if (count == 0 || g.persistent > 0 || components_take_q_u) d_q_u = torch::empty_like(q_u);
    // kv's gradient in kv's own strides (backward writes it through the same geometry): the keys
    // and values of a wider projections buffer (MGK's) need no contiguous copy for autograd.
    torch::Tensor d_q_v = torch::empty_like(q_v), d_kv = torch::empty_strided(kv.sizes(), kv.strides(), kv.options());
    Gradients d;
    d.q_u = d_q_u.defined() ? d_q_u.data_ptr<float>() : nullptr;
    d.q_v = d_q_v.data_ptr<float>(), d.kv = d_kv.data_ptr<float>();
    std::vector<torch::Tensor> d_tables_per_batch, d_bias_per_batch;
    for (const torch::Tensor& t : tables) {
      d_tables_per_batch.push_back(torch::empty({g.batch, t.size(0), g.heads, g.dh}, t.options()));
      d.tables_per_batch.push_back(d_tables_per_batch.back().data_ptr<float>());
    }
    // Per component: its query's and key's gradients (undefined where shared), its log weights' per batch.
    std::vector<torch::Tensor> d_components;
    auto grad_of = [&](torch::Tensor t, std::vector<float*>* into) {
      d_components.push_back(t);
      into->push_back(t.data_ptr<float>());
    };
    bool q_u_written = false;
    for (size_t m = 0; m < count; ++m) {
      // A shared tensor's gradient goes to its first slot (q_u's for queries); the others get none.
      if (shared[m] != 0) {
        d_components.emplace_back();
        d.query.push_back(d.q_u);
        d.adds_query.push_back(q_u_written);
        q_u_written = true;
      } else {
        grad_of(torch::empty_like(q_u), &d.query);
        d.adds_query.push_back(false);
      }
      const auto first = static_cast<size_t>(shared[count + m]);
      if (first == m) {
        grad_of(torch::empty({g.batch, g.k, g.heads, g.dh}, q_u.options()), &d.key);
      } else {
        d_components.emplace_back();
        d.key.push_back(d.key[first]);
      }
      d.first_with_key.push_back(first == m);
      grad_of(torch::empty({g.batch, g.heads}, q_u.options()), &d.log_weight_per_batch);
    }
    torch::Tensor d_pk, d_pv;
    if (g.persistent > 0) {
      d_pk = torch::empty({g.batch, g.heads, g.persistent, g.dh}, q_u.options());
      d_pv = torch::empty_like(d_pk);
      d.persistent_key = d_pk.data_ptr<float>(), d.persistent_value = d_pv.data_ptr<float>();
    }
    for (size_t b = 0; b < extras.table_bias.size(); ++b) {
      d_bias_per_batch.push_back(torch::empty({g.batch, g.heads, keys[b].table}, q_u.options()));
      d.bias_per_batch.push_back(d_bias_per_batch.back().data_ptr<float>());
    }
    torch::Tensor go = grad_out[0].contiguous();
    backward_blocks(g,
                    operands(q_u, q_v, kv, tables, mask, ctx->saved_data["scale"].toDouble(), extras,
                             ctx->saved_data["bf16"].toBool()),
                    probs.numel() > 0 ? probs.data_ptr<float>() : nullptr,
                    g.components > 1 ? resp.data_ptr<float>() : nullptr, go.data_ptr<float>(), d);
    torch::autograd::variable_list grads = {d_q_u, d_q_v, d_kv};
    for (const torch::Tensor& t : d_tables_per_batch) grads.push_back(sum_over_batch(t));
    for (size_t m = 0; m < count; ++m)
      grads.insert(grads.end(), {d_components[3 * m], d_components[3 * m + 1], sum_over_batch(d_components[3 * m + 2])});
    if (g.persistent > 0) grads.insert(grads.end(), {sum_over_batch(d_pk), sum_over_batch(d_pv)});
    for (const torch::Tensor& t : d_bias_per_batch) grads.push_back(sum_over_batch(t));
    grads.insert(grads.end(), 6, torch::Tensor());
    return grads;  // keys, heads, mask, scale, spec, coefs: none
  }
};

}  // namespace

bool chunked_attention_usable(const torch::Tensor& q, const AttentionExtras& extras) {
  if (!compute::blas().sgemm || q.scalar_type() != torch::kFloat || !compute::cpu_kernel_allowed(q) || extras.mixture.size() > 16)
    return false;
  auto ok = [&](const torch::Tensor& t) { return !t.defined() || t.scalar_type() == torch::kFloat; };
  for (const auto& c : extras.mixture)
    if (!ok(c.query) || !ok(c.key) || !ok(c.log_weight)) return false;
  for (const auto& b : extras.table_bias)
    if (!ok(b)) return false;
  return ok(extras.persistent_key) && ok(extras.persistent_value);
}

torch::Tensor chunked_relative_attention(const torch::Tensor& q_u, const torch::Tensor& q_v, const torch::Tensor& kv,
                                         const std::vector<torch::Tensor>& tables,
                                         const std::vector<KeyBlock>& blocks, const std::vector<int64_t>& heads,
                                         const torch::Tensor& mask, double scale, const AttentionExtras& extras) {
  TORCH_CHECK(chunked_attention_usable(q_u, extras),
              "chunked_relative_attention: float32 CPU tensors and a BLAS needed");
  torch::Tensor qu = q_u.contiguous(), qv = q_v.contiguous(), kvc = rows_are_strided(kv) ? kv : kv.contiguous();
  torch::Tensor m = mask.to(torch::kBool).contiguous();
  const AttentionExtras ex = contiguous(extras);
  const PackedExtras packed = pack(ex);
  std::vector<torch::Tensor> tc;
  bool grad = qu.requires_grad() || qv.requires_grad() || kvc.requires_grad();
  for (const auto& t : tables) {
    tc.push_back(t.contiguous());
    grad = grad || t.requires_grad();
  }
  for (const auto& t : packed.tensors) grad = grad || t.requires_grad();
  if (grad && torch::GradMode::is_enabled())
    return ChunkedRelativeAttention::apply(qu, qv, kvc, torch::TensorList(tc), torch::TensorList(packed.tensors),
                                           pack_key_blocks(blocks), heads, m, scale, packed.spec, packed.coefs);
  RECORD_FUNCTION("xl::chunked_attention", std::vector<c10::IValue>());
  const Geometry g = geometry(qu, kvc, tc, blocks, heads, m, ex);
  torch::Tensor out = torch::empty_like(qu);
  forward_blocks(g, operands(qu, qv, kvc, tc, m, scale, ex, takes_bf16_operands(g.t)),
                 out.data_ptr<float>(), nullptr, nullptr);
  return out;
}

}  // namespace xl::kernels
