#include "xl/kernels/cuda/flash_rel_attention.h"

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "xl/compute/cuda_support.h"
#include "xl/compute/kernel_choice.h"
#include "xl/compute/precision.h"
#include "xl/kernels/cuda/flash_rel_attention_kernel.h"

namespace xl::kernels {
namespace {

namespace ck = gpu;

// x in `dtype` with a contiguous last dimension (its other strides kept where they can be).
torch::Tensor operand(const torch::Tensor& x, at::ScalarType dtype) {
  torch::Tensor y = x.scalar_type() == dtype ? x : x.to(dtype);
  return y.stride(-1) == 1 ? y : y.contiguous();
}

// Asked of the kernels once per device and head width.
bool ask_once(bool (*fits)(int), const torch::Device& device, int64_t head_width) {
  static std::mutex mutex;
  static std::map<std::tuple<bool (*)(int), int, int64_t>, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(fits, static_cast<int>(device.index()), head_width);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  c10::DeviceGuard guard(device);
  return known[key] = fits(static_cast<int>(head_width));
}
bool fits_on(const torch::Device& device, int64_t head_width) {
  return ask_once(ck::flash_rel_attention_fits, device, head_width);
}
bool backward_fits_on(const torch::Device& device, int64_t head_width) {
  return ask_once(ck::flash_rel_attention_backward_fits, device, head_width);
}

// The kernels' operands: the tensors converted to the product dtype (kept alive here) and their
// addresses and shapes in the kernels' arguments.
struct Operands {
  at::ScalarType dtype;
  torch::Tensor q, key, value, u, v, hidden;
  std::vector<torch::Tensor> tables;
  ck::FlashRelAttentionArgs args;
};

Operands operands(const torch::Tensor& q, const torch::Tensor& u, const torch::Tensor& v, const torch::Tensor& kv,
                  const std::vector<torch::Tensor>& tables, const std::vector<KeyBlock>& blocks,
                  const std::vector<int64_t>& heads, const torch::Tensor& mask, double scale, at::ScalarType dtype) {
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), dh = q.size(3), k = kv.size(1);
  TORCH_CHECK(kv.dim() == 5 && kv.size(0) == b && kv.size(2) >= 2 && kv.size(3) == h && kv.size(4) == dh,
              "flash_rel_attention: kv must be [B, K, 2, H, dh]");
  TORCH_CHECK(tables.size() == blocks.size(), "flash_rel_attention: one table per key block");
  TORCH_CHECK(heads.empty() || static_cast<int64_t>(heads.size()) == h, "flash_rel_attention: one key head per head");
  TORCH_CHECK(!mask.defined() || (mask.size(0) == t && mask.size(1) == k), "flash_rel_attention: mask must be [T, K]");
  Operands o;
  o.dtype = dtype;
  o.q = operand(q, dtype);
  o.key = operand(kv.select(2, 0), dtype);
  o.value = operand(kv.select(2, 1), dtype);
  o.u = u.to(torch::kFloat).contiguous();
  o.v = v.to(torch::kFloat).contiguous();
  o.hidden = mask.defined() ? mask.to(torch::kBool).contiguous() : mask;

  ck::FlashRelAttentionArgs& a = o.args;
  auto strides3 = [](const torch::Tensor& x, int64_t* s) {
    for (int d = 0; d < 3; ++d) s[d] = x.stride(d);
  };
  a.q = o.q.data_ptr();
  strides3(o.q, a.q_stride);
  a.key = o.key.data_ptr();
  strides3(o.key, a.key_stride);
  a.value = o.value.data_ptr();
  strides3(o.value, a.value_stride);
  a.content_bias = o.u.data_ptr<float>();
  a.position_bias = o.v.data_ptr<float>();
  a.mask = o.hidden.defined() ? reinterpret_cast<const uint8_t*>(o.hidden.data_ptr<bool>()) : nullptr;
  a.blocks = static_cast<int>(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    TORCH_CHECK(tables[i].dim() == 3 && tables[i].size(0) == blocks[i].table && tables[i].size(1) == h &&
                    tables[i].size(2) == dh,
                "flash_rel_attention: table ", i, " must be [P, H, dh]");
    o.tables.push_back(operand(tables[i], dtype));
    a.block_col[i] = static_cast<int>(blocks[i].col);
    a.block_len[i] = static_cast<int>(blocks[i].len);
    a.table[i] = o.tables.back().data_ptr();
    a.table_rows[i] = o.tables.back().size(0);
    a.table_stride[i][0] = o.tables.back().stride(0);
    a.table_stride[i][1] = o.tables.back().stride(1);
  }
  for (int64_t i = 0; i < h; ++i) a.key_head[i] = static_cast<int>(heads.empty() ? i : heads[i]);
  a.batch = static_cast<int>(b);
  a.queries = static_cast<int>(t);
  a.heads = static_cast<int>(h);
  a.keys = static_cast<int>(k);
  a.head_width = static_cast<int>(dh);
  a.scale = static_cast<float>(scale);
  return o;
}

ck::Element element(at::ScalarType dtype) { return dtype == torch::kBFloat16 ? ck::Element::kBf16 : ck::Element::kHalf; }

// The forward into out [B, T, H, dh] and, when defined, log_sum [B, T, H] (float).
void run_forward(Operands& o, const torch::Tensor& out, const torch::Tensor& log_sum) {
  o.args.out = out.data_ptr();
  o.args.log_sum = log_sum.defined() ? log_sum.data_ptr<float>() : nullptr;
  const char* err = ck::launch_flash_rel_attention(o.args, element(o.dtype), compute::cuda_current_stream(out.device().index()));
  TORCH_CHECK(err == nullptr, "flash_rel_attention: ", err);
}

// Training's form: the forward keeps each row's log-sum-exp, and the backward kernel recomputes
// the probabilities from it (nothing score-sized is kept between the passes either).
class FlashRelAttentionFunction : public torch::autograd::Function<FlashRelAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& u,
                               const torch::Tensor& v, const torch::Tensor& kv, at::TensorList tables,
                               const torch::Tensor& mask, const std::vector<KeyBlock>& blocks,
                               const std::vector<int64_t>& heads, double scale) {
    const at::ScalarType dtype = compute::product_dtype(q);
    Operands o = operands(q, u, v, kv, tables.vec(), blocks, heads, mask, scale, dtype);
    torch::Tensor out = torch::empty({q.size(0), q.size(1), q.size(2), q.size(3)}, o.q.options());
    torch::Tensor log_sum = torch::empty({q.size(0), q.size(1), q.size(2)}, o.q.options().dtype(torch::kFloat));
    run_forward(o, out, log_sum);
    std::vector<torch::Tensor> saved = {q, u, v, kv, mask, out, log_sum};
    for (const auto& t : tables) saved.push_back(t);
    ctx->save_for_backward(saved);
    ctx->saved_data["blocks"] = pack_key_blocks(blocks);
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &u = saved[1], &v = saved[2], &kv = saved[3], &mask = saved[4],
                        &out = saved[5], &log_sum = saved[6];
    const std::vector<torch::Tensor> tables(saved.begin() + 7, saved.end());
    const auto blocks = unpack_key_blocks(ctx->saved_data["blocks"].toIntVector());
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const c10::DeviceGuard guard(q.device());
    Operands o = operands(q, u, v, kv, tables, blocks, ctx->saved_data["heads"].toIntVector(), mask,
                          ctx->saved_data["scale"].toDouble(), dtype);
    o.args.out = out.data_ptr();
    o.args.log_sum = log_sum.data_ptr<float>();
    const torch::Tensor grad_out = grad_outputs[0].to(dtype).contiguous();
    const torch::Tensor delta = (grad_out.to(torch::kFloat) * out.to(torch::kFloat)).sum(-1).contiguous();
    const auto f32 = q.options().dtype(torch::kFloat);
    const int64_t b = q.size(0), t = q.size(1), h = q.size(2), dh = q.size(3), k = kv.size(1);
    torch::Tensor grad_qc = torch::zeros({b, t, h, dh}, f32), grad_qp = torch::zeros({b, t, h, dh}, f32),
                  grad_key = torch::zeros({b, k, h, dh}, f32), grad_value = torch::zeros({b, k, h, dh}, f32);
    std::vector<torch::Tensor> grad_tables;
    ck::FlashRelAttentionGradArgs g;
    g.forward = o.args;
    g.grad_out = grad_out.data_ptr();
    g.delta = delta.data_ptr<float>();
    g.grad_q_content = grad_qc.data_ptr<float>();
    g.grad_q_position = grad_qp.data_ptr<float>();
    g.grad_key = grad_key.data_ptr<float>();
    g.grad_value = grad_value.data_ptr<float>();
    for (size_t i = 0; i < tables.size(); ++i) {
      grad_tables.push_back(torch::zeros({tables[i].size(0), h, dh}, f32));
      g.grad_table[i] = grad_tables.back().data_ptr<float>();
    }
    const char* err = ck::launch_flash_rel_attention_backward(g, element(dtype), compute::cuda_current_stream(q.device().index()));
    TORCH_CHECK(err == nullptr, "flash_rel_attention backward: ", err);

    torch::Tensor grad_kv = torch::stack({grad_key, grad_value}, 2);
    if (kv.size(2) > 2) grad_kv = torch::cat({grad_kv, torch::zeros_like(kv.narrow(2, 2, kv.size(2) - 2), f32)}, 2);
    torch::autograd::variable_list grads = {(grad_qc + grad_qp).to(q.scalar_type()),
                                            grad_qc.sum(torch::IntArrayRef{0, 1}).to(u.scalar_type()),
                                            grad_qp.sum(torch::IntArrayRef{0, 1}).to(v.scalar_type()), grad_kv.to(kv.scalar_type())};
    for (size_t i = 0; i < tables.size(); ++i) grads.push_back(grad_tables[i].to(tables[i].scalar_type()));
    grads.resize(grads.size() + 4);  // mask, blocks, heads, scale
    return grads;
  }
};

}  // namespace

bool flash_rel_attention_applies(const torch::Tensor& q, size_t key_blocks, bool attention_dropout) {
  const compute::KernelSet set = compute::kernel_set();
  const bool training = torch::GradMode::is_enabled();
  if (!ck::flash_rel_attention_kernel_built() || !q.is_cuda() || attention_dropout ||
      (set != compute::KernelSet::kAll && set != compute::KernelSet::kOwn) || q.dim() != 4)
    return false;
  if (set == compute::KernelSet::kAll && (training || q.size(1) > kFlashMaxQueries)) return false;
  // The backward's sums over key tiles are atomic, so not in deterministic mode (xl's GPU training
  // unless XL_DETERMINISTIC=0), where LibTorch's kernel has a deterministic backward.
  if (training && (at::globalContext().deterministicAlgorithms() || !backward_fits_on(q.device(), q.size(3))))
    return false;
  const at::ScalarType dtype = compute::product_dtype(q);
  return (dtype == torch::kBFloat16 || dtype == torch::kHalf) && q.size(3) <= ck::kMaxHeadWidth &&
         q.size(2) <= ck::kMaxHeads && key_blocks >= 1 && key_blocks <= static_cast<size_t>(ck::kMaxKeyBlocks) &&
         compute::cuda_bf16_native(q.device().index()) && fits_on(q.device(), q.size(3));
}

torch::Tensor flash_rel_attention(const torch::Tensor& q, const torch::Tensor& u, const torch::Tensor& v,
                                  const torch::Tensor& kv, const std::vector<torch::Tensor>& tables,
                                  const std::vector<KeyBlock>& blocks, const std::vector<int64_t>& heads,
                                  const torch::Tensor& mask, double scale) {
  const c10::DeviceGuard guard(q.device());  // the kernels launch on the current device
  bool grad = false;
  if (torch::GradMode::is_enabled()) {
    grad = q.requires_grad() || u.requires_grad() || v.requires_grad() || kv.requires_grad();
    for (const auto& t : tables) grad = grad || t.requires_grad();
  }
  if (grad) {
    const torch::Tensor hidden = mask.defined() ? mask : torch::zeros({q.size(1), kv.size(1)}, q.options().dtype(torch::kBool));
    return FlashRelAttentionFunction::apply(q, u, v, kv, at::TensorList(tables), hidden, blocks, heads, scale);
  }
  Operands o = operands(q, u, v, kv, tables, blocks, heads, mask, scale, compute::product_dtype(q));
  torch::Tensor out = torch::empty({q.size(0), q.size(1), q.size(2), q.size(3)}, o.q.options());
  run_forward(o, out, torch::Tensor());
  return out;
}

}  // namespace xl::kernels
