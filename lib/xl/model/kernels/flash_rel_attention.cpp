#include "xl/model/kernels/flash_rel_attention.h"

#include <map>
#include <mutex>
#include <utility>

#include "xl/model/kernels/cuda_support.h"
#include "xl/model/kernels/flash_rel_attention_kernel.h"
#include "xl/model/kernels/kernel_choice.h"
#include "xl/model/precision.h"

namespace xl::model {
namespace {

namespace ck = cuda_kernels;

// x in `dtype` with a contiguous last dimension (its other strides kept where they can be).
torch::Tensor operand(const torch::Tensor& x, at::ScalarType dtype) {
  torch::Tensor y = x.scalar_type() == dtype ? x : x.to(dtype);
  return y.stride(-1) == 1 ? y : y.contiguous();
}

// Asked of the kernel once per device and head width.
bool fits_on(const torch::Device& device, int64_t head_width) {
  static std::mutex mutex;
  static std::map<std::pair<int, int64_t>, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(static_cast<int>(device.index()), head_width);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  c10::DeviceGuard guard(device);
  return known[key] = ck::flash_rel_attention_fits(static_cast<int>(head_width));
}

}  // namespace

bool flash_rel_attention_applies(const torch::Tensor& q, size_t key_blocks, bool attention_dropout) {
  const KernelSet set = kernel_set();
  if (!ck::flash_rel_attention_kernel_built() || !q.is_cuda() || attention_dropout ||
      torch::GradMode::is_enabled() || (set != KernelSet::kAll && set != KernelSet::kOwn) || q.dim() != 4)
    return false;
  if (set == KernelSet::kAll && q.size(1) > kFlashMaxQueries) return false;
  const at::ScalarType dtype = product_dtype(q);
  return (dtype == torch::kBFloat16 || dtype == torch::kHalf) && q.size(3) <= ck::kMaxHeadWidth &&
         q.size(2) <= ck::kMaxHeads && key_blocks >= 1 && key_blocks <= static_cast<size_t>(ck::kMaxKeyBlocks) &&
         cuda_bf16_native(q.device().index()) && fits_on(q.device(), q.size(3));
}

torch::Tensor flash_rel_attention(const torch::Tensor& q, const torch::Tensor& u, const torch::Tensor& v,
                                  const torch::Tensor& kv, const std::vector<torch::Tensor>& tables,
                                  const std::vector<KeyBlock>& blocks, const std::vector<int64_t>& heads,
                                  const torch::Tensor& mask, double scale) {
  const c10::DeviceGuard guard(q.device());  // the kernel launches on the current device
  const at::ScalarType dtype = product_dtype(q);
  const int64_t b = q.size(0), t = q.size(1), h = q.size(2), dh = q.size(3), k = kv.size(1);
  TORCH_CHECK(kv.dim() == 5 && kv.size(0) == b && kv.size(2) >= 2 && kv.size(3) == h && kv.size(4) == dh,
              "flash_rel_attention: kv must be [B, K, 2, H, dh]");
  TORCH_CHECK(tables.size() == blocks.size(), "flash_rel_attention: one table per key block");
  TORCH_CHECK(heads.empty() || static_cast<int64_t>(heads.size()) == h, "flash_rel_attention: one key head per head");
  TORCH_CHECK(!mask.defined() || (mask.size(0) == t && mask.size(1) == k), "flash_rel_attention: mask must be [T, K]");
  const torch::Tensor qc = operand(q, dtype), key = operand(kv.select(2, 0), dtype),
                      value = operand(kv.select(2, 1), dtype);
  const torch::Tensor u32 = u.to(torch::kFloat).contiguous(), v32 = v.to(torch::kFloat).contiguous();
  const torch::Tensor hidden = mask.defined() ? mask.to(torch::kBool).contiguous() : mask;
  std::vector<torch::Tensor> tabs;
  torch::Tensor out = torch::empty({b, t, h, dh}, qc.options());

  ck::FlashRelAttentionArgs a;
  auto strides3 = [](const torch::Tensor& x, int64_t* s) {
    for (int d = 0; d < 3; ++d) s[d] = x.stride(d);
  };
  a.q = qc.data_ptr();
  strides3(qc, a.q_stride);
  a.key = key.data_ptr();
  strides3(key, a.key_stride);
  a.value = value.data_ptr();
  strides3(value, a.value_stride);
  a.content_bias = u32.data_ptr<float>();
  a.position_bias = v32.data_ptr<float>();
  a.mask = hidden.defined() ? reinterpret_cast<const uint8_t*>(hidden.data_ptr<bool>()) : nullptr;
  a.blocks = static_cast<int>(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    TORCH_CHECK(tables[i].dim() == 3 && tables[i].size(0) == blocks[i].table && tables[i].size(1) == h &&
                    tables[i].size(2) == dh,
                "flash_rel_attention: table ", i, " must be [P, H, dh]");
    tabs.push_back(operand(tables[i], dtype));
    a.block_col[i] = static_cast<int>(blocks[i].col);
    a.block_len[i] = static_cast<int>(blocks[i].len);
    a.table[i] = tabs.back().data_ptr();
    a.table_rows[i] = tabs.back().size(0);
    a.table_stride[i][0] = tabs.back().stride(0);
    a.table_stride[i][1] = tabs.back().stride(1);
  }
  for (int64_t i = 0; i < h; ++i) a.key_head[i] = static_cast<int>(heads.empty() ? i : heads[i]);
  a.out = out.data_ptr();
  a.batch = static_cast<int>(b);
  a.queries = static_cast<int>(t);
  a.heads = static_cast<int>(h);
  a.keys = static_cast<int>(k);
  a.head_width = static_cast<int>(dh);
  a.scale = static_cast<float>(scale);
  const char* err = ck::launch_flash_rel_attention(
      a, dtype == torch::kBFloat16 ? ck::Element::kBf16 : ck::Element::kHalf, cuda_current_stream(q.device().index()));
  TORCH_CHECK(err == nullptr, "flash_rel_attention: ", err);
  return out;
}

}  // namespace xl::model
