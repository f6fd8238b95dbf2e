#include "xl/model/kernels/chunked_attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include "xl/model/kernels/kernel_choice.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "xl/model/kernels/blas.h"
#include "xl/model/kernels/parallel.h"
#include "xl/model/kernels/row_kernels.h"

namespace xl::model {
namespace {

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
  std::vector<TableSlice> slices;  // one per key block
  int64_t table_scores = 0;        // sum of rows x table_width: the positional scores' buffer
};

struct Geometry {
  int64_t batch = 0, t = 0, heads = 0, dh = 0, k = 0;  // tasks n = b x heads + h
  std::vector<KeyBlock> keys;
  std::vector<int64_t> source;   // SCH: head h reads keys, values and tables of head source[h]
  std::vector<int64_t> visible;  // per query: 1 + its last visible key
  std::vector<RowBlock> blocks;
  int64_t buffer = 0;            // floats of scratch one thread needs for any row block

  int64_t n() const { return batch * heads; }
  // Row strides of the token-major layouts.
  int64_t ld_q() const { return heads * dh; }       // q_u, q_v, out: [B, T, H, dh]
  int64_t ld_kv() const { return 2 * heads * dh; }  // kv: [B, K, 2, H, dh]
  int64_t ld_table() const { return heads * dh; }   // tables: [P, H, dh]
  // Offsets of task n's first row.
  int64_t q_at(int64_t n, int64_t i) const { return ((n / heads) * t + i) * ld_q() + (n % heads) * dh; }
  int64_t key_at(int64_t n) const { return (n / heads) * k * ld_kv() + source[n % heads] * dh; }
  int64_t value_at(int64_t n) const { return key_at(n) + heads * dh; }
  int64_t table_at(int64_t n, int64_t row) const { return row * ld_table() + source[n % heads] * dh; }
};

Geometry geometry(const torch::Tensor& q_u, const torch::Tensor& kv, const std::vector<torch::Tensor>& tables,
                  const std::vector<KeyBlock>& keys, const std::vector<int64_t>& source, const torch::Tensor& mask) {
  Geometry g;
  TORCH_CHECK(q_u.dim() == 4, "queries must be [B, T, H, dh]");
  g.batch = q_u.size(0), g.t = q_u.size(1), g.heads = q_u.size(2), g.dh = q_u.size(3), g.keys = keys;
  TORCH_CHECK(kv.dim() == 5 && kv.size(0) == g.batch && kv.size(2) == 2 && kv.size(3) == g.heads &&
                  kv.size(4) == g.dh,
              "keys and values must be [B, K, 2, H, dh]");
  g.k = kv.size(1);
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
    g.buffer = std::max(g.buffer, 2 * rb.rows * rb.width + rb.table_scores);
    g.blocks.push_back(rb);
  }
  return g;
}

struct Operands {
  const float *q_u, *q_v, *kv;
  std::vector<const float*> tables;
  const bool* mask;
  float scale;
};

// out [B, T, H, dh]. probs [N, T, K] keeps the probabilities for backward (entries past a row
// block's width are left unset); without it they live in the thread's scratch.
void forward_blocks(const Geometry& g, const Operands& x, float* out, float* probs) {
  const int64_t nb = static_cast<int64_t>(g.blocks.size()), dh = g.dh;
  SingleThreadedBlas single;
  parallel_for(0, g.n() * nb, 1, [&](int64_t task0, int64_t task1) {
    std::vector<float> buffer(static_cast<size_t>(g.buffer));
    std::vector<const float*> scores_of(g.keys.size());
    for (int64_t task = task0; task < task1; ++task) {
      const int64_t n = task / nb;
      const RowBlock& rb = g.blocks[task % nb];
      const float* q_u = x.q_u + g.q_at(n, rb.i0);
      const float* q_v = x.q_v + g.q_at(n, rb.i0);
      float* ac = buffer.data();
      float* bd = ac + rb.rows * rb.width;
      float* p = probs ? probs + (n * g.t + rb.i0) * g.k : bd + rb.table_scores;
      const int64_t ldp = probs ? g.k : rb.width;
      sgemm_row_major(false, true, rb.rows, rb.width, dh, q_u, g.ld_q(), x.kv + g.key_at(n), g.ld_kv(), 0, ac,
                      rb.width);
      for (size_t b = 0; b < g.keys.size(); ++b) {
        const TableSlice& s = rb.slices[b];
        if (s.table_width == 0) continue;
        sgemm_row_major(false, true, rb.rows, s.table_width, dh, q_v, g.ld_q(), x.tables[b] + g.table_at(n, s.lo),
                        g.ld_table(), 0, bd, s.table_width);
        scores_of[b] = bd;
        bd += rb.rows * s.table_width;
      }
      for (int64_t row = 0; row < rb.rows; ++row) {
        const int64_t i = rb.i0 + row, seen = g.visible[i];
        const int64_t shift = rb.rows - 1 - row;  // key col + j of this query reads table column j + shift
        float* pr = p + row * ldp;
        float max = -std::numeric_limits<float>::infinity();
        for (size_t b = 0; b < g.keys.size(); ++b) {
          const TableSlice& s = rb.slices[b];
          const int64_t len = std::min(s.width, seen - s.col);
          if (len <= 0) continue;
          max = std::max(max, rows::masked_scores(ac + row * rb.width + s.col,
                                                  scores_of[b] + row * s.table_width + shift,
                                                  x.mask + i * g.k + s.col, pr + s.col, len, x.scale));
        }
        rows::softmax(pr, seen, max);
        std::fill(pr + seen, pr + rb.width, 0.0f);
      }
      sgemm_row_major(false, false, rb.rows, dh, rb.width, p, ldp, x.kv + g.value_at(n), g.ld_kv(), 0,
                      out + g.q_at(n, rb.i0), g.ld_q());
    }
  });
}

struct Gradients {
  float *q_u, *q_v, *kv;               // layouts of the operands; kv zero on entry
  std::vector<float*> tables_per_batch;  // [B, P_b, H, dh], zero on entry: summed over B after
};

void backward_blocks(const Geometry& g, const Operands& x, const float* probs, const float* grad_out,
                     const Gradients& d) {
  const int64_t dh = g.dh;
  SingleThreadedBlas single;
  // One task per (sequence, head): its key, value and table gradients accumulate over its row blocks
  // (SCH's permutation sends each task to its own source head, so no two tasks write the same rows).
  parallel_for(0, g.n(), 1, [&](int64_t n0, int64_t n1) {
    std::vector<float> buffer(static_cast<size_t>(g.buffer));
    for (int64_t n = n0; n < n1; ++n) {
      const float* key = x.kv + g.key_at(n);
      const float* value = x.kv + g.value_at(n);
      float* d_key = d.kv + g.key_at(n);
      float* d_value = d.kv + g.value_at(n);
      for (const RowBlock& rb : g.blocks) {
        const int64_t at = g.q_at(n, rb.i0);
        const float* p = probs + (n * g.t + rb.i0) * g.k;
        const float* go = grad_out + at;
        float* gs = buffer.data();  // d(probs), then d(scores)
        sgemm_row_major(false, true, rb.rows, rb.width, dh, go, g.ld_q(), value, g.ld_kv(), 0, gs, rb.width);
        sgemm_row_major(true, false, rb.width, dh, rb.rows, p, g.k, go, g.ld_q(), 1, d_value, g.ld_kv());
        for (int64_t row = 0; row < rb.rows; ++row) {
          const int64_t seen = g.visible[rb.i0 + row];
          const float* pr = p + row * g.k;
          float* gr = gs + row * rb.width;
          rows::softmax_grad(pr, gr, gr, seen, rows::dot(pr, gr, seen), x.scale);
          std::fill(gr + seen, gr + rb.width, 0.0f);
        }
        sgemm_row_major(false, false, rb.rows, dh, rb.width, gs, rb.width, key, g.ld_kv(), 0, d.q_u + at, g.ld_q());
        sgemm_row_major(true, false, rb.width, dh, rb.rows, gs, rb.width, x.q_u + at, g.ld_q(), 1, d_key, g.ld_kv());
        // Positional scores: d(scores) moved to table columns, one key block at a time.
        float* g_bd = gs + rb.rows * rb.width;
        float beta = 0;
        for (size_t b = 0; b < g.keys.size(); ++b) {
          const TableSlice& s = rb.slices[b];
          if (s.table_width == 0) continue;
          for (int64_t row = 0; row < rb.rows; ++row) {
            const int64_t shift = rb.rows - 1 - row;
            const int64_t len = std::clamp<int64_t>(g.visible[rb.i0 + row] - s.col, 0, s.width);
            float* tr = g_bd + row * s.table_width;
            std::fill(tr, tr + s.table_width, 0.0f);
            std::memcpy(tr + shift, gs + row * rb.width + s.col, sizeof(float) * static_cast<size_t>(len));
          }
          const int64_t table_rows = g.keys[b].table * g.ld_table();
          float* d_table = d.tables_per_batch[b] + (n / g.heads) * table_rows + g.table_at(n, s.lo);
          sgemm_row_major(false, false, rb.rows, dh, s.table_width, g_bd, s.table_width,
                          x.tables[b] + g.table_at(n, s.lo), g.ld_table(), beta, d.q_v + at, g.ld_q());
          sgemm_row_major(true, false, s.table_width, dh, rb.rows, g_bd, s.table_width, x.q_v + at, g.ld_q(), 1,
                          d_table, g.ld_table());
          beta = 1;
        }
        if (beta == 0)  // sees no key: cannot happen (geometry checks), but never leave rows unset
          for (int64_t row = 0; row < rb.rows; ++row) std::fill_n(d.q_v + at + row * g.ld_q(), dh, 0.0f);
      }
    }
  });
}

Operands operands(const torch::Tensor& q_u, const torch::Tensor& q_v, const torch::Tensor& kv,
                  const std::vector<torch::Tensor>& tables, const torch::Tensor& mask, double scale) {
  Operands x{q_u.data_ptr<float>(), q_v.data_ptr<float>(), kv.data_ptr<float>(), {}, mask.data_ptr<bool>(),
             static_cast<float>(scale)};
  for (const auto& t : tables) x.tables.push_back(t.data_ptr<float>());
  return x;
}

class ChunkedRelativeAttention : public torch::autograd::Function<ChunkedRelativeAttention> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q_u,
                               const torch::Tensor& q_v, const torch::Tensor& kv, torch::TensorList tables,
                               const std::vector<int64_t>& keys, const std::vector<int64_t>& heads,
                               const torch::Tensor& mask, double scale) {
    RECORD_FUNCTION("xl::chunked_attention", std::vector<c10::IValue>());
    const std::vector<torch::Tensor> table_list = tables.vec();
    const Geometry g = geometry(q_u, kv, table_list, unpack_key_blocks(keys), heads, mask);
    torch::Tensor out = torch::empty_like(q_u);
    torch::Tensor probs = torch::empty({g.n(), g.t, g.k}, q_u.options());
    forward_blocks(g, operands(q_u, q_v, kv, table_list, mask, scale), out.data_ptr<float>(),
                   probs.data_ptr<float>());
    std::vector<torch::Tensor> saved = {q_u, q_v, kv, probs};
    saved.insert(saved.end(), table_list.begin(), table_list.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["keys"] = keys;
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["mask"] = mask;
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    RECORD_FUNCTION("xl::chunked_attention_backward", std::vector<c10::IValue>());
    auto s = ctx->get_saved_variables();
    const torch::Tensor &q_u = s[0], &q_v = s[1], &kv = s[2], &probs = s[3];
    const std::vector<torch::Tensor> tables(s.begin() + 4, s.end());
    const torch::Tensor mask = ctx->saved_data["mask"].toTensor();
    const Geometry g = geometry(q_u, kv, tables, unpack_key_blocks(ctx->saved_data["keys"].toIntVector()),
                                ctx->saved_data["heads"].toIntVector(), mask);
    torch::Tensor d_q_u = torch::empty_like(q_u), d_q_v = torch::empty_like(q_v), d_kv = torch::zeros_like(kv);
    std::vector<torch::Tensor> d_tables_per_batch;
    Gradients d{d_q_u.data_ptr<float>(), d_q_v.data_ptr<float>(), d_kv.data_ptr<float>(), {}};
    for (const torch::Tensor& t : tables) {
      d_tables_per_batch.push_back(torch::zeros({g.batch, t.size(0), g.heads, g.dh}, t.options()));
      d.tables_per_batch.push_back(d_tables_per_batch.back().data_ptr<float>());
    }
    torch::Tensor go = grad_out[0].contiguous();
    backward_blocks(g, operands(q_u, q_v, kv, tables, mask, ctx->saved_data["scale"].toDouble()),
                    probs.data_ptr<float>(), go.data_ptr<float>(), d);
    torch::autograd::variable_list grads = {d_q_u, d_q_v, d_kv};
    for (const torch::Tensor& t : d_tables_per_batch) grads.push_back(g.batch == 1 ? t[0] : t.sum(0));
    grads.insert(grads.end(), {torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()});
    return grads;  // keys, heads, mask, scale: none
  }
};

}  // namespace

bool chunked_attention_usable(const torch::Tensor& q) {
  return blas().sgemm && q.scalar_type() == torch::kFloat && cpu_kernel_allowed(q);
}

torch::Tensor chunked_relative_attention(const torch::Tensor& q_u, const torch::Tensor& q_v, const torch::Tensor& kv,
                                         const std::vector<torch::Tensor>& tables,
                                         const std::vector<KeyBlock>& blocks, const std::vector<int64_t>& heads,
                                         const torch::Tensor& mask, double scale) {
  TORCH_CHECK(chunked_attention_usable(q_u), "chunked_relative_attention: float32 CPU tensors and a BLAS needed");
  torch::Tensor qu = q_u.contiguous(), qv = q_v.contiguous(), kvc = kv.contiguous();
  torch::Tensor m = mask.to(torch::kBool).contiguous();
  std::vector<torch::Tensor> tc;
  bool grad = qu.requires_grad() || qv.requires_grad() || kvc.requires_grad();
  for (const auto& t : tables) {
    tc.push_back(t.contiguous());
    grad = grad || t.requires_grad();
  }
  if (grad && torch::GradMode::is_enabled())
    return ChunkedRelativeAttention::apply(qu, qv, kvc, torch::TensorList(tc), pack_key_blocks(blocks), heads, m,
                                           scale);
  RECORD_FUNCTION("xl::chunked_attention", std::vector<c10::IValue>());
  const Geometry g = geometry(qu, kvc, tc, blocks, heads, m);
  torch::Tensor out = torch::empty_like(qu);
  forward_blocks(g, operands(qu, qv, kvc, tc, m, scale), out.data_ptr<float>(), nullptr);
  return out;
}

}  // namespace xl::model
