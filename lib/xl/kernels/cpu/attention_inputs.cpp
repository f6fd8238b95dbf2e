#include "xl/kernels/cpu/attention_inputs.h"

#include <cstring>
#include <optional>
#include <vector>

#include "xl/compute/blas.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/parallel.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cpu/biased_queries.h"
#include "xl/kernels/cpu/linear.h"
#include "xl/kernels/cpu/partial_sums.h"
#include "xl/kernels/cpu/product_operands.h"
#include "xl/kernels/cpu/row_kernels.h"
#include "xl/kernels/cpu/row_layout.h"

namespace xl::kernels {
namespace {

// A strided block of rows: `batch` groups of `rows` rows, `width` floats each, row r of group b
// at (b * group + r) * ld.
struct Rows {
  float* at = nullptr;
  int64_t group = 0, ld = 0;
};

// dst = src, row by row, in one parallel pass.
void copy_rows(Rows src, Rows dst, int64_t batch, int64_t rows, int64_t width) {
  compute::parallel_for(0, batch * rows, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / rows, r = i % rows;
      std::memcpy(dst.at + (b * dst.group + r) * dst.ld, src.at + (b * src.group + r) * src.ld,
                  sizeof(float) * static_cast<size_t>(width));
    }
  });
}

float* floats(const torch::Tensor& t) { return t.data_ptr<float>(); }

// t [B, R, width] as Rows, when its streams lie a whole number of rows apart (row_layout.h):
// evaluation's kept projections lie in a buffer with room behind each stream's rows.
std::optional<Rows> rows_of(const torch::Tensor& t) {
  if (!rows_are_strided(t) || stream_stride(t) % row_stride(t) != 0) return std::nullopt;
  return Rows{floats(t), stream_stride(t) / row_stride(t), row_stride(t)};
}

// The queries' biases u and v [q_width] (Transformer-XL's content and positional biases), or
// null pointers for none.
struct QueryBiases {
  const float *u = nullptr, *v = nullptr;
  bool given() const { return u != nullptr; }
};

// Splits the product's rows seg [B x T, width] in one parallel pass: each row's first q_width
// floats are its query, written as q (no biases) or as q + u into q and q + v into q_v; the rest
// are its keys and values, copied into row m + i of its stream in kv.
void split_rows(const float* seg, int64_t batch, int64_t t, int64_t width, int64_t q_width, const QueryBiases& biases,
                float* q, float* q_v, Rows kv, int64_t m) {
  const int64_t kv_width = width - q_width;
  compute::parallel_for(0, batch * t, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = seg + r * width;
      if (biases.given()) {
        rows::add_scale(row, biases.u, q + r * q_width, q_width, 1.0f);
        rows::add_scale(row, biases.v, q_v + r * q_width, q_width, 1.0f);
      } else {
        std::memcpy(q + r * q_width, row, sizeof(float) * static_cast<size_t>(q_width));
      }
      std::memcpy(kv.at + ((r / t) * kv.group + m + r % t) * kv.ld, row + q_width,
                  sizeof(float) * static_cast<size_t>(kv_width));
    }
  });
}

// backward's d_seg [B x T, width] from the queries' gradients (with biases: g_u + g_v, and their
// sums over the rows into d_u, d_v: partial_sums.h) and the segment's rows of kv's gradient, in one
// parallel pass.
// An undefined gradient counts as zeros.
void gather_rows(const torch::Tensor& g_q, const torch::Tensor& g_v, const torch::Tensor& g_kv, int64_t batch,
                 int64_t t, int64_t width, int64_t q_width, int64_t m, float* d_seg, float* d_u, float* d_v) {
  const int64_t n = batch * t, kv_width = width - q_width, tasks = partial_tasks(n);
  const bool biased = d_u != nullptr;
  const float* gq = g_q.defined() ? floats(g_q) : nullptr;
  const float* gv = g_v.defined() ? floats(g_v) : nullptr;
  const float* gkv = g_kv.defined() ? floats(g_kv) : nullptr;
  std::vector<float> partial(biased ? static_cast<size_t>(2 * tasks * q_width) : 0);  // u's tasks, then v's
  compute::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      float* pu = biased ? partial.data() + task * q_width : nullptr;
      float* pv = biased ? pu + tasks * q_width : nullptr;
      if (biased) {
        std::fill_n(pu, q_width, 0.0f);
        std::fill_n(pv, q_width, 0.0f);
      }
      for (int64_t r = task * kPartialRows; r < std::min(n, (task + 1) * kPartialRows); ++r) {
        float* row = d_seg + r * width;
        const float* a = gq ? gq + r * q_width : nullptr;
        const float* b = biased && gv ? gv + r * q_width : nullptr;
        if (a && b) rows::add_scale(a, b, row, q_width, 1.0f);
        else if (a || b) std::memcpy(row, a ? a : b, sizeof(float) * static_cast<size_t>(q_width));
        else std::fill_n(row, q_width, 0.0f);
        if (biased) {
          if (a) rows::add_scale(pu, a, pu, q_width, 1.0f);
          if (b) rows::add_scale(pv, b, pv, q_width, 1.0f);
        }
        if (gkv) {
          const int64_t k_rows = m + t;
          std::memcpy(row + q_width, gkv + ((r / t) * k_rows + m + r % t) * kv_width,
                      sizeof(float) * static_cast<size_t>(kv_width));
        } else {
          std::fill_n(row + q_width, kv_width, 0.0f);
        }
      }
    }
  });
  if (!biased) return;
  add_partials(partial.data(), tasks, q_width, d_u);
  add_partials(partial.data() + tasks * q_width, tasks, q_width, d_v);
}

class Projections : public torch::autograd::Function<Projections> {
 public:
  // x [B, T, d], memory [B, M, d] to project or [0]; weight [q_width + kv_width, d]; u, v [q_width]
  // or both [0] (LibTorch 1.13's Function::apply takes no undefined tensors); all contiguous.
  // bf16: the products take operands rounded to bf16 (product_operands.h).
  // Returns {q or q + u, q + v or [0], kv}.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& memory, const torch::Tensor& weight,
                                                const torch::Tensor& u, const torch::Tensor& v, int64_t q_width,
                                                bool bf16) {
    const int64_t batch = x.size(0), t = x.size(1), d = x.size(2), width = weight.size(0);
    const int64_t kv_width = width - q_width, n = batch * t;
    const bool project = memory.numel() > 0, biased = u.numel() > 0;
    const int64_t m = project ? memory.size(1) : 0;
    const torch::Tensor x_op = product_operand(x.view({n, d}), bf16), w_op = product_operand(weight, bf16);
    const torch::Tensor mem_op = project ? product_operand(memory.view({batch * m, d}), bf16) : memory;
    torch::Tensor seg = torch::empty({n, width}, x.options());
    operand_gemm(false, true, n, width, d, x_op, d, w_op, d, 0, seg, width);
    torch::Tensor q = torch::empty({batch, t, q_width}, x.options());
    torch::Tensor q_v = biased ? torch::empty({batch, t, q_width}, x.options()) : torch::empty({0}, x.options());
    torch::Tensor kv = torch::empty({batch, m + t, kv_width}, x.options());
    const QueryBiases biases = biased ? QueryBiases{floats(u), floats(v)} : QueryBiases{};
    split_rows(floats(seg), batch, t, width, q_width, biases, floats(q), biased ? floats(q_v) : nullptr,
               {floats(kv), m + t, kv_width}, m);
    if (project) {  // W_kv: W's rows from q_width on
      torch::Tensor kv_mem = torch::empty({batch * m, kv_width}, x.options());
      operand_gemm(false, true, batch * m, kv_width, d, mem_op, d, w_op.narrow(0, q_width, kv_width), d, 0, kv_mem,
                   kv_width);
      copy_rows({floats(kv_mem), m, kv_width}, {floats(kv), m + t, kv_width}, batch, m, kv_width);
    }
    ctx->save_for_backward({x_op, mem_op, w_op});
    ctx->saved_data["shape"] = std::vector<int64_t>{batch, t, m};
    ctx->saved_data["q_width"] = q_width;
    ctx->saved_data["biased"] = biased;
    return {q, q_v, kv};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x_op = saved[0], &mem_op = saved[1], &w_op = saved[2];
    const auto shape = ctx->saved_data["shape"].toIntVector();
    const int64_t batch = shape[0], t = shape[1], m = shape[2];
    const int64_t q_width = ctx->saved_data["q_width"].toInt();
    const bool biased = ctx->saved_data["biased"].toBool();
    const bool bf16 = x_op.scalar_type() == torch::kBFloat16;  // the forward's precision
    const int64_t d = x_op.size(1), width = w_op.size(0), kv_width = width - q_width, n = batch * t;
    const auto fp32 = x_op.options().dtype(torch::kFloat);
    auto contiguous = [](const torch::Tensor& g) { return g.defined() ? g.contiguous() : g; };
    const torch::Tensor dq = contiguous(grads[0]), dq_v = biased ? contiguous(grads[1]) : torch::Tensor();
    const torch::Tensor dkv = contiguous(grads[2]);
    torch::Tensor d_seg = torch::empty({n, width}, fp32);
    torch::Tensor du, dv;
    if (biased) du = torch::empty({q_width}, fp32), dv = torch::empty({q_width}, fp32);
    gather_rows(dq, dq_v, dkv, batch, t, width, q_width, dkv.defined() ? m : 0, floats(d_seg),
                biased ? floats(du) : nullptr, biased ? floats(dv) : nullptr);
    const torch::Tensor d_seg_op = product_operand(d_seg, bf16);
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {  // dx = d_seg W
      dx = torch::empty({batch, t, d}, fp32);
      operand_gemm(false, false, n, d, width, d_seg_op, width, w_op, d, 0, dx, d);
    }
    if (ctx->needs_input_grad(2)) {  // dW = d_seg^T x, then W_kv's rows += d_kv(memory)^T memory
      dw = torch::empty({width, d}, fp32);
      operand_gemm(true, false, width, d, n, d_seg_op, width, x_op, d, 0, dw, d);
      if (m > 0 && dkv.defined()) {
        torch::Tensor d_mem = torch::empty({batch * m, kv_width}, fp32);
        copy_rows({floats(dkv), m + t, kv_width}, {floats(d_mem), m, kv_width}, batch, m, kv_width);
        torch::Tensor dw_kv = dw.narrow(0, q_width, kv_width);
        operand_gemm(true, false, kv_width, d, batch * m, product_operand(d_mem, bf16), kv_width, mem_op, d, 1, dw_kv,
                     d);
      }
    }
    return {dx, torch::Tensor(), dw, du, dv, torch::Tensor(), torch::Tensor()};
  }
};

// Whether the kernels here run on x and the other tensors: float32 on the CPU (undefined ones
// pass), with a BLAS, outside autocast or with bf16 products (cpu_bf16_products).
bool runs_here(const torch::Tensor& x, std::initializer_list<torch::Tensor> others) {
  if (!compute::cpu_kernel_allowed(x) || !compute::blas().sgemm || !compute::cpu_kernels_take_products() || x.dim() != 3 || x.numel() == 0)
    return false;
  for (const torch::Tensor& t : others)
    if (t.defined() && !(t.scalar_type() == torch::kFloat && t.device().is_cpu())) return false;
  return x.scalar_type() == torch::kFloat;
}

// Generic path: the queries q [B, T, q_width] biased as biased_queries does it, when u is given.
AttentionInputs with_biases(const torch::Tensor& q, const torch::Tensor& kv, const torch::Tensor& u,
                            const torch::Tensor& v) {
  if (!u.defined()) return {q, torch::Tensor(), kv};
  const int64_t batch = q.size(0), t = q.size(1), q_width = q.size(2);
  const auto [q_u, q_v] =
      biased_queries(q.view({batch, t, 1, q_width}), u.reshape({1, q_width}), v.reshape({1, q_width}));
  return {q_u.view({batch, t, q_width}), q_v.view({batch, t, q_width}), kv};
}

void check_biases(const torch::Tensor& u, const torch::Tensor& v, int64_t q_width) {
  TORCH_CHECK(u.defined() == v.defined() && (!u.defined() || (u.numel() == q_width && v.numel() == q_width)),
              "attention_inputs: u and v must both be given, with q_width elements each, or neither");
}

}  // namespace

AttentionInputs attention_inputs(const torch::Tensor& x, const torch::Tensor& memory, const torch::Tensor& weight,
                                 int64_t q_width, const torch::Tensor& u, const torch::Tensor& v) {
  RECORD_FUNCTION("xl::attention_inputs", std::vector<c10::IValue>());
  check_biases(u, v, q_width);
  const int64_t kv_width = weight.size(0) - q_width;
  const bool project = memory.defined() && memory.size(1) > 0;
  if (!runs_here(x, {memory, weight, u, v}) || weight.dim() != 2 || (memory.defined() && memory.requires_grad())) {
    torch::Tensor w_kv = weight.narrow(0, q_width, kv_width);
    torch::Tensor kv = kernels::linear(x, w_kv);
    if (project) kv = torch::cat({kernels::linear(memory, w_kv), kv}, 1);
    return with_biases(kernels::linear(x, weight.narrow(0, 0, q_width)), kv, u, v);
  }
  const torch::Tensor none = torch::empty({0}, x.options());
  auto out = Projections::apply(x.contiguous(), project ? memory.contiguous() : none, weight.contiguous(),
                                u.defined() ? u.reshape({q_width}).contiguous() : none,
                                v.defined() ? v.reshape({q_width}).contiguous() : none, q_width,
                                takes_bf16_operands(x.size(0) * x.size(1)));
  return {out[0], u.defined() ? out[1] : torch::Tensor(), out[2]};
}

AttentionInputs attention_inputs_into(const torch::Tensor& x, const torch::Tensor& weight, int64_t q_width,
                                      const torch::Tensor& kv, const torch::Tensor& u, const torch::Tensor& v) {
  TORCH_CHECK(!torch::GradMode::is_enabled(), "attention_inputs_into: no autograd");
  RECORD_FUNCTION("xl::attention_inputs", std::vector<c10::IValue>());
  check_biases(u, v, q_width);
  const int64_t batch = x.size(0), t = x.size(1), d = x.size(2), width = weight.size(0);
  const int64_t kv_width = width - q_width, m = kv.size(1) - t;
  TORCH_CHECK(kv.dim() == 3 && kv.size(0) == batch && m >= 0 && kv.size(2) == kv_width,
              "attention_inputs_into: kv must be [B, M + T, kv_width]");
  const std::optional<Rows> into = kv.scalar_type() == torch::kFloat ? rows_of(kv) : std::nullopt;
  if (!runs_here(x, {weight, u, v}) || !into) {
    kv.narrow(1, m, t).copy_(kernels::linear(x, weight.narrow(0, q_width, kv_width)));
    return with_biases(kernels::linear(x, weight.narrow(0, 0, q_width)), kv, u, v);
  }
  const int64_t n = batch * t;
  const bool bf16 = takes_bf16_operands(n);
  const torch::Tensor x_op = product_operand(x.reshape({n, d}).contiguous(), bf16);
  const torch::Tensor w_op = product_operand(weight.contiguous(), bf16);
  torch::Tensor seg = torch::empty({n, width}, x.options());
  operand_gemm(false, true, n, width, d, x_op, d, w_op, d, 0, seg, width);
  torch::Tensor q = torch::empty({batch, t, q_width}, x.options()), q_v;
  QueryBiases biases;
  torch::Tensor uc, vc;
  if (u.defined()) {
    uc = u.reshape({q_width}).contiguous(), vc = v.reshape({q_width}).contiguous();
    biases = {floats(uc), floats(vc)};
    q_v = torch::empty_like(q);
  }
  split_rows(floats(seg), batch, t, width, q_width, biases, floats(q), q_v.defined() ? floats(q_v) : nullptr,
             into.value_or(Rows{}), m);  // (has a value: value_or keeps -Wmaybe-uninitialized quiet)
  return {q, q_v, kv};
}

}  // namespace xl::kernels
