// The blocked attention's forward pass: each row block's probabilities (content, positional and
// the variants' terms, masked, softmaxed) and the weighted values.
#include <algorithm>
#include <limits>

#include "xl/compute/parallel.h"
#include "xl/kernels/cpu/attention_blocks.h"
#include "xl/kernels/cpu/row_kernels.h"

namespace xl::kernels::blocked {
namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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
  // product per head paid its call and packing for little work (measured: bench/HISTORY.md,
  // "A single query's attention on row kernels").
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

}  // namespace xl::kernels::blocked
