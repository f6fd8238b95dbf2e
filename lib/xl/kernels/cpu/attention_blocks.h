// The blocked attention's machinery (chunked_attention.h), shared by its forward and backward
// passes: the geometry of a call (row blocks, the key blocks each sees, the scratch a thread needs),
// its operands as raw rows, the per-task rows (copied, or rounded to bf16 and packed for AMX
// tiles), and the passes themselves. Internal to kernels/cpu/.
#pragma once
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <vector>

#include "xl/compute/amx_products.h"
#include "xl/compute/blas.h"
#include "xl/kernels/cpu/chunked_attention.h"
#include "xl/kernels/cpu/rel_softmax.h"

namespace xl::kernels::blocked {

// A row stride off multiples of 1 KB. Rows 4 KB apart fall in one set of L1's ways, and products
// that read such rows down their columns (A^T B: the probabilities' and scores' gradients into the
// values' and keys') ran slower from such rows (measured: bench/HISTORY.md, "Two layouts of the
// per-head products").
inline int64_t unaliased(int64_t floats) { return floats % 256 == 0 ? floats + 16 : floats; }

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
  // product packed them again through the cache and the TLB at a fraction of its speed, well
  // below what the same products reach from contiguous rows. At 1-2 KB apart (the tiny and small
  // models) the copy cost more than it saved. A few queries (generation's one) read each row about
  // once: there the copy is only one more pass over them, and below 16 queries it was slower; from
  // 16 on the two were within the machine's noise (measured: bench/HISTORY.md, "copies a head's
  // keys" and "The per-head copy's few-queries rule").
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
                  const AttentionExtras& extras);

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

HeadRows<const float> operand_rows(const Geometry& g, const Operands& x, int64_t n);

// A task's rows in the contiguous layout of Geometry::head_*, at `at` (head_floats floats).
template <typename T>
HeadRows<T> contiguous_rows(const Geometry& g, T* at) {
  HeadRows<T> r{at, at + g.k * g.dh, g.dh, {}, g.dh};
  for (int64_t offset : g.head_table) r.tables.push_back(at + offset);
  return r;
}

// `count` rows of `width` floats, `ld` apart: copied, or set to zero.
void copy_rows(const float* from, int64_t ld_from, float* to, int64_t ld_to, int64_t count, int64_t width);
void clear_rows(float* at, int64_t ld, int64_t count, int64_t width);
void copy_head(const Geometry& g, const HeadRows<const float>& from, const HeadRows<float>& to);

// Operands::bf16: task n's keys, values and tables (its rows `from`) rounded once, in the
// contiguous layout, into `to`; a mixture's component keys and the persistent keys and values
// after them.
HeadRows<const uint16_t> round_head(const Geometry& g, const Operands& x, int64_t n, const HeadRows<const float>& from,
                                    std::vector<uint16_t>& to);

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
// product (every row block reads them), the packing cost more than half as much as the products
// themselves (measured: bench/HISTORY.md, "The attention's bf16 products on AMX tiles").
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
HeadRows<const float> rows_to_read(const Geometry& g, const Operands& x, int64_t n, std::vector<float>& copy);

// A mixture's Gaussians as coef (q . k) + row + col (AttentionExtras::Component): per component
// the row terms -coef / 2 |q|^2 of a row block's queries and the column terms -coef / 2 |k|^2 +
// log_weight of a task's keys, the lengths those of the rows the products read (Operands::bf16:
// the rounded ones, so that the logits are the Gaussians of those). One thread's, filled as it
// reads the rows.
struct MixtureTerms {
  std::vector<float> row;  // [M, the row block's rows]
  std::vector<float> col;  // [M, K]
};

// The column terms of task n's keys (in16: its rounded rows, with Operands::bf16).
void column_terms(const Geometry& g, const Operands& x, int64_t n, const HeadRows<const uint16_t>& in16,
                  MixtureTerms& terms);

// Where a row block's unkept probabilities start in the scratch buffer: after block_probs' scratch.
int64_t probs_at(const Geometry& g, const RowBlock& rb);

// The probabilities of task n's row block rb into p (rows x ldp: persistent keys, then the
// context, zero from each row's visible keys to the block's width), from its rows `in`; the first
// M - 1 mixture responsibilities into resp when given. scratch: g.buffer floats; scores_of: one
// pointer per key block (the caller's, so that no task allocates). A mixture's column terms are
// task n's (column_terms); its row terms are the block's, made here.
// With Operands::bf16, in16 holds the rows rounded (round_head) and `rounded` the thread's slots.
void block_probs(const Geometry& g, const Operands& x, int64_t n, const RowBlock& rb, const HeadRows<const float>& in,
                 const HeadRows<const uint16_t>& in16, RoundedBlocks& rounded, HeadTiles& tiles, MixtureTerms& terms,
                 float* scratch, std::vector<const float*>& scores_of, float* p, int64_t ldp, float* resp);

// out [B, T, H, dh]. probs [N, T, ld_probs] keeps the probabilities for backward (entries past a
// row block's width are left unset), resp the mixture's responsibilities; without them they live
// in the thread's scratch.
void forward_blocks(const Geometry& g, const Operands& x, float* out, float* probs, float* resp);

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

// probs: forward_blocks' kept probabilities, or null to compute each block's again (block_probs:
// the same bits).
void backward_blocks(const Geometry& g, const Operands& x, const float* probs, const float* resp,
                     const float* grad_out, const Gradients& d);

}  // namespace xl::kernels::blocked
