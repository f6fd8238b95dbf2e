#include "xl/kernels/cuda/fused_attention.h"

#include <torch/version.h>

#include "xl/compute/kernel_choice.h"
#include "xl/compute/precision.h"

// scaled_dot_product_attention with a scale argument: LibTorch 2.1 and later.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define XL_HAS_FUSED_ATTENTION 1
#endif

namespace xl::kernels {

bool fused_attention_applies(const torch::Tensor& q, bool attention_dropout) {
#ifdef XL_HAS_FUSED_ATTENTION
  const at::ScalarType dtype = compute::product_dtype(q);
  return q.is_cuda() && !attention_dropout && !compute::generic_kernels_forced() &&
         (dtype == torch::kBFloat16 || dtype == torch::kHalf);
#else
  (void)q;
  (void)attention_dropout;
  return false;
#endif
}

torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& bias) {
#ifdef XL_HAS_FUSED_ATTENTION
  const at::ScalarType dtype = compute::product_dtype(q);
  // The memory-efficient kernel takes head widths in multiples of 8 (wt103's is 39): zero
  // columns change no score and give zero output columns, dropped again.
  const int64_t dh = q.size(-1), pad = (8 - dh % 8) % 8;
  auto prepare = [&](const torch::Tensor& x) {
    torch::Tensor y = x.to(dtype);
    return pad ? torch::constant_pad_nd(y, {0, pad}) : y;
  };
  torch::Tensor out = at::scaled_dot_product_attention(prepare(q), prepare(k), prepare(v), bias.to(dtype),
                                                       /*dropout_p=*/0.0, /*is_causal=*/false, /*scale=*/1.0);
  return pad ? out.narrow(-1, 0, dh) : out;
#else
  (void)k;
  (void)v;
  (void)bias;
  TORCH_CHECK(false, "fused attention needs LibTorch 2.1 or later (", q.device(), ")");
  return {};
#endif
}

}  // namespace xl::kernels
