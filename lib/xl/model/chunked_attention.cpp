#include "xl/model/chunked_attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "xl/model/blas.h"
#include "xl/model/parallel.h"
#include "xl/model/row_kernels.h"

namespace xl::model {
namespace {

// Query rows per block: small enough that a block's scores over a few thousand keys stay in L2,
// large enough for efficient GEMMs.
constexpr int64_t kBlockRows = 64;

// Query rows [i0, i0 + rows) see keys [0, width); their positional scores need the table rows
// [table_lo, table_lo + table_width) (query i, key j reads table row j + T - 1 - i).
struct Block {
  int64_t i0 = 0, rows = 0, width = 0, table_lo = 0, table_width = 0;
};

struct Geometry {
  int64_t n = 0, t = 0, k = 0, dh = 0, batch = 0;  // N = heads x batch
  std::vector<int64_t> visible;                   // per query: 1 + its last visible key
  std::vector<Block> blocks;
};

Geometry geometry(const torch::Tensor& q_u, const torch::Tensor& key, const torch::Tensor& r,
                  const torch::Tensor& mask) {
  Geometry g;
  g.n = q_u.size(0), g.t = q_u.size(1), g.dh = q_u.size(2), g.k = key.size(1);
  TORCH_CHECK(r.size(0) > 0 && g.n % r.size(0) == 0 && r.size(1) == g.k && r.size(2) == g.dh,
              "positional keys must be [H, K, dh]");
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == g.t && mask.size(1) == g.k, "mask must be [T, K]");
  g.batch = g.n / r.size(0);
  const bool* hidden = mask.data_ptr<bool>();
  g.visible.resize(g.t);
  for (int64_t i = 0; i < g.t; ++i) {
    int64_t last = g.k - 1;
    while (last >= 0 && hidden[i * g.k + last]) --last;
    TORCH_CHECK(last >= 0, "query ", i, " sees no key");
    TORCH_CHECK(last <= g.k - g.t + i, "query ", i, " sees a later key");
    g.visible[i] = last + 1;
  }
  for (int64_t i0 = 0; i0 < g.t; i0 += kBlockRows) {
    Block b;
    b.i0 = i0;
    b.rows = std::min(kBlockRows, g.t - i0);
    b.width = *std::max_element(g.visible.begin() + i0, g.visible.begin() + i0 + b.rows);
    b.table_lo = g.t - (i0 + b.rows);
    b.table_width = std::min(g.k - b.table_lo, b.width + b.rows - 1);
    g.blocks.push_back(b);
  }
  return g;
}

struct Operands {
  const float *q_u, *q_v, *key, *value, *r;
  const bool* mask;
  float scale;
};

// out [N, T, dh]. probs [N, T, K] keeps the probabilities for backward (entries past a block's
// width are left unset); without it they live in a per-thread block buffer.
void forward_blocks(const Geometry& g, const Operands& x, float* out, float* probs) {
  const int64_t nb = static_cast<int64_t>(g.blocks.size()), dh = g.dh;
  SingleThreadedBlas single;
  parallel_for(0, g.n * nb, 1, [&](int64_t task0, int64_t task1) {
    std::vector<float> buffer(static_cast<size_t>(kBlockRows * (3 * g.k + kBlockRows)));
    for (int64_t task = task0; task < task1; ++task) {
      const int64_t n = task / nb;
      const Block& b = g.blocks[task % nb];
      const float* q_u = x.q_u + (n * g.t + b.i0) * dh;
      const float* q_v = x.q_v + (n * g.t + b.i0) * dh;
      const float* key = x.key + n * g.k * dh;
      const float* value = x.value + n * g.k * dh;
      const float* r = x.r + ((n / g.batch) * g.k + b.table_lo) * dh;
      float* ac = buffer.data();
      float* bd = ac + b.rows * b.width;
      float* p = probs ? probs + (n * g.t + b.i0) * g.k : bd + b.rows * b.table_width;
      const int64_t ldp = probs ? g.k : b.width;
      sgemm_row_major(false, true, b.rows, b.width, dh, q_u, dh, key, dh, 0, ac, b.width);
      sgemm_row_major(false, true, b.rows, b.table_width, dh, q_v, dh, r, dh, 0, bd, b.table_width);
      for (int64_t row = 0; row < b.rows; ++row) {
        const int64_t i = b.i0 + row, seen = g.visible[i];
        const int64_t shift = b.rows - 1 - row;  // key j of this query reads bd column j + shift
        float* pr = p + row * ldp;
        const float max = rows::masked_scores(ac + row * b.width, bd + row * b.table_width + shift,
                                              x.mask + i * g.k, pr, seen, x.scale);
        rows::softmax(pr, seen, max);
        std::fill(pr + seen, pr + b.width, 0.0f);
      }
      sgemm_row_major(false, false, b.rows, dh, b.width, p, ldp, value, dh, 0, out + (n * g.t + b.i0) * dh, dh);
    }
  });
}

struct Gradients {
  float *q_u, *q_v, *key, *value;
  float* r_per_n;  // [N, K, dh]: heads share r over the batch; summed afterwards
};

void backward_blocks(const Geometry& g, const Operands& x, const float* probs, const float* grad_out,
                     const Gradients& d) {
  const int64_t dh = g.dh, kd = g.k * dh;
  SingleThreadedBlas single;
  // One task per (head, sequence): the key, value and table gradients accumulate over its blocks.
  parallel_for(0, g.n, 1, [&](int64_t n0, int64_t n1) {
    std::vector<float> buffer(static_cast<size_t>(kBlockRows * (2 * g.k + kBlockRows)));
    for (int64_t n = n0; n < n1; ++n) {
      const float* key = x.key + n * kd;
      const float* value = x.value + n * kd;
      float* d_key = d.key + n * kd;
      float* d_value = d.value + n * kd;
      float* d_r = d.r_per_n + n * kd;
      std::fill(d_key, d_key + kd, 0.0f);
      std::fill(d_value, d_value + kd, 0.0f);
      std::fill(d_r, d_r + kd, 0.0f);
      for (const Block& b : g.blocks) {
        const int64_t at = (n * g.t + b.i0) * dh;
        const float* p = probs + (n * g.t + b.i0) * g.k;
        const float* go = grad_out + at;
        const float* r = x.r + ((n / g.batch) * g.k + b.table_lo) * dh;
        float* gs = buffer.data();                  // d(probs), then d(scores)
        float* g_bd = gs + b.rows * b.width;        // d(scores) in table columns
        sgemm_row_major(false, true, b.rows, b.width, dh, go, dh, value, dh, 0, gs, b.width);
        sgemm_row_major(true, false, b.width, dh, b.rows, p, g.k, go, dh, 1, d_value, dh);
        for (int64_t row = 0; row < b.rows; ++row) {
          const int64_t seen = g.visible[b.i0 + row], shift = b.rows - 1 - row;
          const float* pr = p + row * g.k;
          float* gr = gs + row * b.width;
          rows::softmax_grad(pr, gr, gr, seen, rows::dot(pr, gr, seen), x.scale);
          std::fill(gr + seen, gr + b.width, 0.0f);
          float* tr = g_bd + row * b.table_width;
          std::fill(tr, tr + shift, 0.0f);
          std::memcpy(tr + shift, gr, sizeof(float) * static_cast<size_t>(seen));
          std::fill(tr + shift + seen, tr + b.table_width, 0.0f);
        }
        sgemm_row_major(false, false, b.rows, dh, b.width, gs, b.width, key, dh, 0, d.q_u + at, dh);
        sgemm_row_major(true, false, b.width, dh, b.rows, gs, b.width, x.q_u + at, dh, 1, d_key, dh);
        sgemm_row_major(false, false, b.rows, dh, b.table_width, g_bd, b.table_width, r, dh, 0, d.q_v + at, dh);
        sgemm_row_major(true, false, b.table_width, dh, b.rows, g_bd, b.table_width, x.q_v + at, dh, 1,
                        d_r + b.table_lo * dh, dh);
      }
    }
  });
}

Operands operands(const torch::Tensor& q_u, const torch::Tensor& q_v, const torch::Tensor& key,
                  const torch::Tensor& value, const torch::Tensor& r, const torch::Tensor& mask, double scale) {
  return {q_u.data_ptr<float>(), q_v.data_ptr<float>(), key.data_ptr<float>(), value.data_ptr<float>(),
          r.data_ptr<float>(),   mask.data_ptr<bool>(),  static_cast<float>(scale)};
}

class ChunkedRelativeAttention : public torch::autograd::Function<ChunkedRelativeAttention> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q_u,
                               const torch::Tensor& q_v, const torch::Tensor& key, const torch::Tensor& value,
                               const torch::Tensor& r, const torch::Tensor& mask, double scale) {
    RECORD_FUNCTION("xl::chunked_attention", std::vector<c10::IValue>());
    const Geometry g = geometry(q_u, key, r, mask);
    torch::Tensor out = torch::empty_like(q_u);
    torch::Tensor probs = torch::empty({g.n, g.t, g.k}, q_u.options());
    forward_blocks(g, operands(q_u, q_v, key, value, r, mask, scale), out.data_ptr<float>(),
                   probs.data_ptr<float>());
    ctx->save_for_backward({q_u, q_v, key, value, r, probs});
    ctx->saved_data["mask"] = mask;
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    RECORD_FUNCTION("xl::chunked_attention_backward", std::vector<c10::IValue>());
    auto s = ctx->get_saved_variables();
    const torch::Tensor &q_u = s[0], &q_v = s[1], &key = s[2], &value = s[3], &r = s[4], &probs = s[5];
    const torch::Tensor mask = ctx->saved_data["mask"].toTensor();
    const Geometry g = geometry(q_u, key, r, mask);
    torch::Tensor d_q_u = torch::empty_like(q_u), d_q_v = torch::empty_like(q_v);
    torch::Tensor d_key = torch::empty_like(key), d_value = torch::empty_like(value);
    torch::Tensor d_r_per_n = torch::empty({g.n, g.k, g.dh}, r.options());
    torch::Tensor go = grad_out[0].contiguous();
    backward_blocks(g, operands(q_u, q_v, key, value, r, mask, ctx->saved_data["scale"].toDouble()),
                    probs.data_ptr<float>(), go.data_ptr<float>(),
                    {d_q_u.data_ptr<float>(), d_q_v.data_ptr<float>(), d_key.data_ptr<float>(),
                     d_value.data_ptr<float>(), d_r_per_n.data_ptr<float>()});
    torch::Tensor d_r = d_r_per_n.view({r.size(0), g.batch, g.k, g.dh}).sum(1);
    return {d_q_u, d_q_v, d_key, d_value, d_r, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool chunked_attention_usable(const torch::Tensor& q) {
  return blas().sgemm && q.scalar_type() == torch::kFloat && q.device().is_cpu();
}

torch::Tensor chunked_relative_attention(const torch::Tensor& q_u, const torch::Tensor& q_v, const torch::Tensor& key,
                                         const torch::Tensor& value, const torch::Tensor& r, const torch::Tensor& mask,
                                         double scale) {
  TORCH_CHECK(chunked_attention_usable(q_u), "chunked_relative_attention: float32 CPU tensors and a BLAS needed");
  torch::Tensor qu = q_u.contiguous(), qv = q_v.contiguous(), k = key.contiguous(), v = value.contiguous(),
                rc = r.contiguous(), m = mask.to(torch::kBool).contiguous();
  const bool grad = torch::GradMode::is_enabled() &&
                    (qu.requires_grad() || qv.requires_grad() || k.requires_grad() || v.requires_grad() ||
                     rc.requires_grad());
  if (grad) return ChunkedRelativeAttention::apply(qu, qv, k, v, rc, m, scale);
  RECORD_FUNCTION("xl::chunked_attention", std::vector<c10::IValue>());
  const Geometry g = geometry(qu, k, rc, m);
  torch::Tensor out = torch::empty_like(qu);
  forward_blocks(g, operands(qu, qv, k, v, rc, m, scale), out.data_ptr<float>(), nullptr);
  return out;
}

}  // namespace xl::model
