#include "xl/model/kernels/attention_inputs.h"

#include <cstring>
#include <optional>

#include "xl/model/kernels/blas.h"
#include "xl/model/kernels/kernel_choice.h"
#include "xl/model/kernels/linear.h"
#include "xl/model/kernels/parallel.h"
#include "xl/model/precision.h"

namespace xl::model {
namespace {

// A strided block of rows: `batch` groups of `rows` rows, `width` floats each, row r of group b
// at (b * group + r) * ld.
struct Rows {
  float* at;
  int64_t group, ld;
};

// dst = src, row by row, in one parallel pass.
void copy_rows(Rows src, Rows dst, int64_t batch, int64_t rows, int64_t width) {
  parallel_for(0, batch * rows, 64, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / rows, r = i % rows;
      std::memcpy(dst.at + (b * dst.group + r) * dst.ld, src.at + (b * src.group + r) * src.ld,
                  sizeof(float) * static_cast<size_t>(width));
    }
  });
}

float* floats(const torch::Tensor& t) { return t.data_ptr<float>(); }

// t [B, M, width] as Rows, when its rows are contiguous and evenly spaced within and across the
// batch. Evaluation's cached projections are such a view (the memory's newest M slots of the last
// step's keys and values), which .contiguous() would copy once more.
std::optional<Rows> rows_of(const torch::Tensor& t) {
  if (t.stride(2) != 1) return std::nullopt;
  // A size-1 dimension's stride says nothing (even a contiguous tensor's may be anything).
  const int64_t ld = t.size(1) == 1 ? t.size(2) : t.stride(1);
  const int64_t batch_stride = t.size(0) == 1 ? t.size(1) * ld : t.stride(0);
  if (ld < t.size(2) || batch_stride % ld != 0 || batch_stride / ld < t.size(1)) return std::nullopt;
  return Rows{floats(t), batch_stride / ld, ld};
}

class Projections : public torch::autograd::Function<Projections> {
 public:
  // x [B, T, d], memory [B, M, d] to project or [0], memory_kv [B, M, kv_width] or [0]; weight
  // [q_width + kv_width, d]; all contiguous but memory_kv, whose rows may be strided (rows_of).
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& memory, const torch::Tensor& memory_kv,
                                                const torch::Tensor& weight, int64_t q_width) {
    const int64_t batch = x.size(0), t = x.size(1), d = x.size(2), width = weight.size(0);
    const int64_t kv_width = width - q_width, n = batch * t;
    const bool project = memory.numel() > 0;
    const int64_t m = project ? memory.size(1) : memory_kv.numel() > 0 ? memory_kv.size(1) : 0;
    torch::Tensor seg = torch::empty({n, width}, x.options());
    sgemm_row_major(false, true, n, width, d, floats(x), d, floats(weight), d, 0, floats(seg), width);
    torch::Tensor q = torch::empty({batch, t, q_width}, x.options());
    torch::Tensor kv = torch::empty({batch, m + t, kv_width}, x.options());
    copy_rows({floats(seg), 0, width}, {floats(q), 0, q_width}, 1, n, q_width);
    copy_rows({floats(seg) + q_width, t, width}, {floats(kv) + m * kv_width, m + t, kv_width}, batch, t, kv_width);
    if (project) {  // W_kv: W's rows from q_width on
      torch::Tensor kv_mem = torch::empty({batch * m, kv_width}, x.options());
      sgemm_row_major(false, true, batch * m, kv_width, d, floats(memory), d, floats(weight) + q_width * d, d, 0,
                      floats(kv_mem), kv_width);
      copy_rows({floats(kv_mem), m, kv_width}, {floats(kv), m + t, kv_width}, batch, m, kv_width);
    } else if (m > 0) {
      copy_rows(*rows_of(memory_kv), {floats(kv), m + t, kv_width}, batch, m, kv_width);
    }
    ctx->save_for_backward({x, memory, weight});
    ctx->saved_data["q_width"] = q_width;
    return {q, kv};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &memory = saved[1], &weight = saved[2];
    const int64_t q_width = ctx->saved_data["q_width"].toInt();
    const int64_t batch = x.size(0), t = x.size(1), d = x.size(2), width = weight.size(0);
    const int64_t kv_width = width - q_width, n = batch * t;
    // An unused output's gradient arrives undefined: zeros stand in.
    torch::Tensor dq = grads[0].defined() ? grads[0].contiguous() : torch::zeros({batch, t, q_width}, x.options());
    torch::Tensor dkv = grads[1].defined() ? grads[1].contiguous() : torch::Tensor();
    const int64_t m = dkv.defined() ? dkv.size(1) - t : 0;
    torch::Tensor d_seg = torch::empty({n, width}, x.options());
    copy_rows({floats(dq), 0, q_width}, {floats(d_seg), 0, width}, 1, n, q_width);
    if (dkv.defined()) {
      copy_rows({floats(dkv) + m * kv_width, m + t, kv_width}, {floats(d_seg) + q_width, t, width}, batch, t, kv_width);
    } else {
      for (int64_t r = 0; r < n; ++r) std::memset(floats(d_seg) + r * width + q_width, 0, sizeof(float) * kv_width);
    }
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {  // dx = d_seg W
      dx = torch::empty_like(x);
      sgemm_row_major(false, false, n, d, width, floats(d_seg), width, floats(weight), d, 0, floats(dx), d);
    }
    if (ctx->needs_input_grad(3)) {  // dW = d_seg^T x, then W_kv's rows += d_kv(memory)^T memory
      dw = torch::empty_like(weight);
      sgemm_row_major(true, false, width, d, n, floats(d_seg), width, floats(x), d, 0, floats(dw), d);
      if (memory.numel() > 0 && m > 0) {
        torch::Tensor d_mem = torch::empty({batch * m, kv_width}, x.options());
        copy_rows({floats(dkv), m + t, kv_width}, {floats(d_mem), m, kv_width}, batch, m, kv_width);
        sgemm_row_major(true, false, kv_width, d, batch * m, floats(d_mem), kv_width, floats(memory), d, 1,
                        floats(dw) + q_width * d, d);
      }
    }
    return {dx, torch::Tensor(), torch::Tensor(), dw, torch::Tensor()};
  }
};

bool runs_here(const torch::Tensor& x, const torch::Tensor& memory, const torch::Tensor& memory_kv,
               const torch::Tensor& weight) {
  auto is_float = [](const torch::Tensor& t) {
    return !t.defined() || (t.scalar_type() == torch::kFloat && t.device().is_cpu());
  };
  return cpu_kernel_allowed(x) && blas().sgemm && !cpu_autocast_enabled() && is_float(x) && is_float(memory) &&
         is_float(memory_kv) && is_float(weight) && x.dim() == 3 && weight.dim() == 2 && x.numel() > 0 &&
         !(memory.defined() && memory.requires_grad()) && !(memory_kv.defined() && memory_kv.requires_grad());
}

}  // namespace

AttentionInputs attention_inputs(const torch::Tensor& x, const torch::Tensor& memory, const torch::Tensor& memory_kv,
                                 const torch::Tensor& weight, int64_t q_width) {
  const int64_t kv_width = weight.size(0) - q_width;
  if (!runs_here(x, memory, memory_kv, weight)) {
    torch::Tensor w_kv = weight.narrow(0, q_width, kv_width);
    torch::Tensor kv = xl::model::linear(x, w_kv);
    torch::Tensor kv_mem = memory_kv.defined() ? memory_kv.to(kv.scalar_type())
                           : memory.defined()  ? xl::model::linear(memory, w_kv)
                                               : torch::Tensor();
    if (kv_mem.defined() && kv_mem.size(1) > 0) kv = torch::cat({kv_mem, kv}, 1);
    return {xl::model::linear(x, weight.narrow(0, 0, q_width)), kv};
  }
  const torch::Tensor none = torch::empty({0}, x.options());
  const bool project = !memory_kv.defined() && memory.defined() && memory.size(1) > 0;
  const bool cached = memory_kv.defined() && memory_kv.size(1) > 0;
  auto out = Projections::apply(x.contiguous(), project ? memory.contiguous() : none,
                                cached ? (rows_of(memory_kv) ? memory_kv : memory_kv.contiguous()) : none,
                                weight.contiguous(), q_width);
  return {out[0], out[1]};
}

}  // namespace xl::model
