#include "xl/model/kernels/attention_inputs.h"

#include <cstring>
#include <optional>

#include "xl/model/kernels/blas.h"
#include "xl/model/kernels/kernel_choice.h"
#include "xl/model/kernels/linear.h"
#include "xl/model/kernels/parallel.h"
#include "xl/model/kernels/row_layout.h"
#include "xl/model/precision.h"

namespace xl::model {
namespace {

// A strided block of rows: `batch` groups of `rows` rows, `width` floats each, row r of group b
// at (b * group + r) * ld.
struct Rows {
  float* at = nullptr;
  int64_t group = 0, ld = 0;
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

// t [B, R, width] as Rows, when its streams lie a whole number of rows apart (row_layout.h):
// evaluation's kept projections lie in a buffer with room behind each stream's rows.
std::optional<Rows> rows_of(const torch::Tensor& t) {
  if (!rows_are_strided(t) || stream_stride(t) % row_stride(t) != 0) return std::nullopt;
  return Rows{floats(t), stream_stride(t) / row_stride(t), row_stride(t)};
}

class Projections : public torch::autograd::Function<Projections> {
 public:
  // x [B, T, d], memory [B, M, d] to project or [0]; weight [q_width + kv_width, d]; all contiguous.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& memory, const torch::Tensor& weight,
                                                int64_t q_width) {
    const int64_t batch = x.size(0), t = x.size(1), d = x.size(2), width = weight.size(0);
    const int64_t kv_width = width - q_width, n = batch * t;
    const bool project = memory.numel() > 0;
    const int64_t m = project ? memory.size(1) : 0;
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
    if (ctx->needs_input_grad(2)) {  // dW = d_seg^T x, then W_kv's rows += d_kv(memory)^T memory
      dw = torch::empty_like(weight);
      sgemm_row_major(true, false, width, d, n, floats(d_seg), width, floats(x), d, 0, floats(dw), d);
      if (memory.numel() > 0 && m > 0) {
        torch::Tensor d_mem = torch::empty({batch * m, kv_width}, x.options());
        copy_rows({floats(dkv), m + t, kv_width}, {floats(d_mem), m, kv_width}, batch, m, kv_width);
        sgemm_row_major(true, false, kv_width, d, batch * m, floats(d_mem), kv_width, floats(memory), d, 1,
                        floats(dw) + q_width * d, d);
      }
    }
    return {dx, torch::Tensor(), dw, torch::Tensor()};
  }
};

// Whether the kernels here run on x and the other tensors: float32 on the CPU (undefined ones
// pass), with a BLAS, outside autocast.
bool runs_here(const torch::Tensor& x, std::initializer_list<torch::Tensor> others) {
  if (!cpu_kernel_allowed(x) || !blas().sgemm || cpu_autocast_enabled() || x.dim() != 3 || x.numel() == 0)
    return false;
  for (const torch::Tensor& t : others)
    if (t.defined() && !(t.scalar_type() == torch::kFloat && t.device().is_cpu())) return false;
  return x.scalar_type() == torch::kFloat;
}

}  // namespace

AttentionInputs attention_inputs(const torch::Tensor& x, const torch::Tensor& memory, const torch::Tensor& weight,
                                 int64_t q_width) {
  const int64_t kv_width = weight.size(0) - q_width;
  const bool project = memory.defined() && memory.size(1) > 0;
  if (!runs_here(x, {memory, weight}) || weight.dim() != 2 || (memory.defined() && memory.requires_grad())) {
    torch::Tensor w_kv = weight.narrow(0, q_width, kv_width);
    torch::Tensor kv = xl::model::linear(x, w_kv);
    if (project) kv = torch::cat({xl::model::linear(memory, w_kv), kv}, 1);
    return {xl::model::linear(x, weight.narrow(0, 0, q_width)), kv};
  }
  auto out = Projections::apply(x.contiguous(), project ? memory.contiguous() : torch::empty({0}, x.options()),
                                weight.contiguous(), q_width);
  return {out[0], out[1]};
}

AttentionInputs attention_inputs_into(const torch::Tensor& x, const torch::Tensor& weight, int64_t q_width,
                                      const torch::Tensor& kv) {
  TORCH_CHECK(!torch::GradMode::is_enabled(), "attention_inputs_into: no autograd");
  const int64_t batch = x.size(0), t = x.size(1), d = x.size(2), width = weight.size(0);
  const int64_t kv_width = width - q_width, m = kv.size(1) - t;
  TORCH_CHECK(kv.dim() == 3 && kv.size(0) == batch && m >= 0 && kv.size(2) == kv_width,
              "attention_inputs_into: kv must be [B, M + T, kv_width]");
  const std::optional<Rows> into = kv.scalar_type() == torch::kFloat ? rows_of(kv) : std::nullopt;
  if (!runs_here(x, {weight}) || !into) {
    kv.narrow(1, m, t).copy_(xl::model::linear(x, weight.narrow(0, q_width, kv_width)));
    return {xl::model::linear(x, weight.narrow(0, 0, q_width)), kv};
  }
  const torch::Tensor xc = x.contiguous(), wc = weight.contiguous();
  const int64_t n = batch * t;
  torch::Tensor seg = torch::empty({n, width}, x.options());
  sgemm_row_major(false, true, n, width, d, floats(xc), d, floats(wc), d, 0, floats(seg), width);
  torch::Tensor q = torch::empty({batch, t, q_width}, x.options());
  copy_rows({floats(seg), 0, width}, {floats(q), 0, q_width}, 1, n, q_width);
  const Rows dst = into.value_or(Rows{});  // (has a value: value_or keeps -Wmaybe-uninitialized quiet)
  copy_rows({floats(seg) + q_width, t, width}, {dst.at + m * dst.ld, dst.group, dst.ld}, batch, t, kv_width);
  return {q, kv};
}

}  // namespace xl::model
