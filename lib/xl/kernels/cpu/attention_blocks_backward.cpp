// The blocked attention's backward pass: one task per (sequence, head), its row blocks widest
// first, each block's probabilities kept or computed again, their gradients through the softmax
// into the queries, keys, values, positional tables and the variants' operands.
#include <algorithm>
#include <array>
#include <cstring>

#include "xl/compute/parallel.h"
#include "xl/kernels/cpu/attention_blocks.h"
#include "xl/kernels/cpu/row_kernels.h"

namespace xl::kernels::blocked {
namespace {

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

// One thread's backward tasks: its scratch and rounded slots, and for the task under way its rows
// and which of its gradients are written yet (a beta of 0: the next product writes, 1: it adds).
struct BlockBackward {
  BlockBackward(const Geometry& g, const Operands& x, const float* probs, const float* resp, const float* grad_out,
                const Gradients& d, HeadTiles& tiles)
      : g(g), x(x), probs(probs), resp(resp), grad_out(grad_out), d(d), tiles(tiles),
        buffer(static_cast<size_t>(g.buffer)), d_col(static_cast<size_t>(g.components * g.k)) {
    if (g.copies_heads()) d_copy.resize(static_cast<size_t>(g.head_floats));
  }

  void task(int64_t task_n, const std::vector<const RowBlock*>& order);
  void block(const RowBlock& rb);
  const float* block_probs_of(const RowBlock& rb, int64_t ldp);
  void probability_grads(const RowBlock& rb, const float* p, int64_t ldp, const float* go, const uint16_t* go16,
                         float* gs, int64_t ldg);
  void logit_grads(const RowBlock& rb, const float* p, int64_t ldp, float* gs, int64_t ldg);
  float persistent_key_grads(const RowBlock& rb, int64_t at, const float* gs, int64_t ldg);
  void content_grads(const RowBlock& rb, int64_t at, const float* g_context, int64_t ldg, float* g_bd, float q_u_beta);
  void positional_grads(const RowBlock& rb, int64_t at, const float* g_context, int64_t ldg, float* g_bd);

  const Geometry& g;
  const Operands& x;
  const float *probs, *resp, *grad_out;
  const Gradients& d;
  HeadTiles& tiles;  // the thread's, kept between calls: its packed rows are about a head's size
  // With copies_heads, the key, value and table gradients are summed in a copy's layout too and
  // written out when the task is done.
  std::vector<float> buffer, copy, d_copy, recomputed;
  std::vector<uint16_t> copy16;
  RoundedBlocks rounded;
  MixtureTerms terms;
  std::vector<float> d_col;  // the task's column terms' gradients
  std::vector<const float*> scores_of;
  // The task under way.
  int64_t n = 0, batch = 0, h = 0, pers_at = 0;
  HeadRows<const float> in;
  HeadRows<const uint16_t> in16;
  HeadRows<float> d_in, d_rows;
  float kv_beta = 0;
  std::vector<float> table_beta;
};

void BlockBackward::task(int64_t task_n, const std::vector<const RowBlock*>& order) {
  const int64_t dh = g.dh, np = g.persistent;
  n = task_n;
  batch = n / g.heads, h = n % g.heads;
  in = x.bf16 ? operand_rows(g, x, n) : rows_to_read(g, x, n, copy);
  in16 = x.bf16 ? round_head(g, x, n, in, copy16) : HeadRows<const uint16_t>{};
  tiles.start_task();
  d_in = gradient_rows(g, d, n);
  d_rows = g.copies_heads() ? contiguous_rows(g, d_copy.data()) : d_in;
  pers_at = batch * g.heads * np * dh + g.persistent_at(n);
  clear_owned(g, d, n);
  if (g.components > 0) {
    clear_rows(d_rows.key, d_rows.ld, g.k, dh);  // the mixture's keys take its gradient
    std::fill(d_col.begin(), d_col.end(), 0.0f);
    if (!probs) column_terms(g, x, n, in16, terms);
  }
  kv_beta = 0;
  table_beta.assign(g.keys.size(), 0.0f);
  for (const RowBlock* rb : order) block(*rb);
  for (size_t b = 0; b < g.keys.size(); ++b)  // a table no block reads
    if (table_beta[b] == 0) clear_rows(d_rows.tables[b], d_rows.ld_table, g.keys[b].table, dh);
  if (g.components > 0) column_terms_backward(g, x, d, n, d_col.data());
  if (g.copies_heads()) copy_head(g, contiguous_rows<const float>(g, d_copy.data()), d_in);
}

// The block's kept probabilities, or computed again (block_probs: the same bits).
const float* BlockBackward::block_probs_of(const RowBlock& rb, int64_t ldp) {
  if (probs) return probs + (n * g.t + rb.i0) * ldp;
  recomputed.resize(static_cast<size_t>(rb.rows * rb.ld));
  block_probs(g, x, n, rb, in, in16, rounded, tiles, terms, buffer.data(), scores_of, recomputed.data(), ldp, nullptr);
  return recomputed.data();
}

void BlockBackward::block(const RowBlock& rb) {
  const int64_t dh = g.dh, np = g.persistent;
  if (kv_beta == 0) {  // keys no query of the widest block sees get no gradient
    clear_rows(d_rows.value + rb.width * d_rows.ld, d_rows.ld, g.k - rb.width, dh);
    if (g.components == 0) clear_rows(d_rows.key + rb.width * d_rows.ld, d_rows.ld, g.k - rb.width, dh);
  }
  const int64_t at = g.q_at(n, rb.i0), ldg = rb.ld, ldp = probs ? g.ld_probs() : rb.ld;
  const float* p = block_probs_of(rb, ldp);
  const float* go = grad_out + at;
  float* gs = buffer.data();  // d(probs), then scale x d(logits): persistent keys, then context
  const uint16_t* go16 = x.bf16 ? rounded(RoundedBlocks::kOutGrad, go, g.ld_q(), rb.rows, dh) : nullptr;
  probability_grads(rb, p, ldp, go, go16, gs, ldg);
  logit_grads(rb, p, ldp, gs, ldg);
  const float q_u_beta = persistent_key_grads(rb, at, gs, ldg);
  float* g_bd = gs + rb.rows * ldg;
  content_grads(rb, at, gs + np, ldg, g_bd, q_u_beta);
  positional_grads(rb, at, gs + np, ldg, g_bd);
  kv_beta = 1;
}

// d(probs) into gs from the output's gradient go, and the values' (and persistent values')
// gradients from the probabilities.
void BlockBackward::probability_grads(const RowBlock& rb, const float* p, int64_t ldp, const float* go,
                                      const uint16_t* go16, float* gs, int64_t ldg) {
  const int64_t dh = g.dh, np = g.persistent;
  float* g_context = gs + np;
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
}

// d(probs) in gs to scale x d(logits), row by row through the softmax; zero past a row's keys.
void BlockBackward::logit_grads(const RowBlock& rb, const float* p, int64_t ldp, float* gs, int64_t ldg) {
  for (int64_t row = 0; row < rb.rows; ++row) {
    const int64_t seen = g.persistent + g.visible[rb.i0 + row];
    const float* pr = p + row * ldp;
    float* gr = gs + row * ldg;
    rows::softmax_grad(pr, gr, gr, seen, rows::dot(pr, gr, seen), x.scale);
    std::fill(gr + seen, gr + ldg, 0.0f);
  }
}

// The persistent keys' gradients and their share of q_u's; returns the beta q_u's next product takes.
float BlockBackward::persistent_key_grads(const RowBlock& rb, int64_t at, const float* gs, int64_t ldg) {
  const int64_t dh = g.dh, np = g.persistent;
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
  return np > 0 ? 1 : 0;
}

// The content scores' gradients into q_u and the keys, or into a mixture's components.
void BlockBackward::content_grads(const RowBlock& rb, int64_t at, const float* g_context, int64_t ldg, float* g_bd,
                                  float q_u_beta) {
  const int64_t dh = g.dh;
  if (g.components == 0 && x.bf16) {
    const uint16_t* gc16 = rounded(RoundedBlocks::kScores, g_context, ldg, rb.rows, rb.width);
    tiles.product(false, rb.rows, rb.width, dh, gc16, rb.width, in16.key, in16.ld, g.k, 0, q_u_beta, d.q_u + at, g.ld_q());
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
      mixture_backward(g, x, resp, d, n, rb, m, g_context, ldg, g_bd + rb.table_scores, d_col.data() + m * g.k, in16,
                       rounded, tiles);
  }
}

// Positional scores: d(scores) moved to table columns, one key block at a time, into q_v's, the
// tables' and the table biases' gradients.
void BlockBackward::positional_grads(const RowBlock& rb, int64_t at, const float* g_context, int64_t ldg, float* g_bd) {
  const int64_t dh = g.dh;
  const float inv_scale = 1.0f / x.scale;
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
}

}  // namespace

void backward_blocks(const Geometry& g, const Operands& x, const float* probs, const float* resp,
                     const float* grad_out, const Gradients& d) {
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
    thread_local HeadTiles tiles;  // kept between calls: its packed rows are about a head's size
    BlockBackward worker(g, x, probs, resp, grad_out, d, tiles);
    for (int64_t n = n0; n < n1; ++n) worker.task(n, order);
  });
}

}  // namespace xl::kernels::blocked
