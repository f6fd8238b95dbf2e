// The CUDA kernel behind flash_rel_attention (flash_rel_attention.h), in plain types so that its
// source (flash_rel_attention_kernel.cu) compiles with nvcc alone, without LibTorch's headers. A
// build that has no CUDA compiler links flash_rel_attention_kernel_none.cpp instead.
#pragma once
#include <cstdint>

namespace xl::kernels::gpu {

constexpr int kMaxKeyBlocks = 8;
constexpr int kMaxHeads = 64;
constexpr int kMaxHeadWidth = 128;

enum class Element { kBf16, kHalf };

// Every tensor's last dimension (dh) is contiguous; strides are in elements. Inputs are in the
// element type; the biases are float.
struct FlashRelAttentionArgs {
  const void* q = nullptr;  // [B, T, H, dh] queries (no bias)
  int64_t q_stride[3] = {};
  const void* key = nullptr;  // [B, K, H, dh]
  int64_t key_stride[3] = {};
  const void* value = nullptr;  // [B, K, H, dh]
  int64_t value_stride[3] = {};
  const float* content_bias = nullptr;   // [H, dh] (Transformer-XL's u), contiguous
  const float* position_bias = nullptr;  // [H, dh] (Transformer-XL's v), contiguous
  const uint8_t* mask = nullptr;         // [T, K], nonzero = hidden; null: nothing hidden
  int blocks = 0;
  int block_col[kMaxKeyBlocks] = {}, block_len[kMaxKeyBlocks] = {};
  const void* table[kMaxKeyBlocks] = {};  // [P, H, dh] positional keys; key col + j, query i: row j + T - 1 - i
  int64_t table_rows[kMaxKeyBlocks] = {}, table_stride[kMaxKeyBlocks][2] = {};
  int key_head[kMaxHeads] = {};  // SCH: query head h reads keys, values and tables of head key_head[h]
  void* out = nullptr;           // [B, T, H, dh], contiguous
  float* log_sum = nullptr;      // [B, T, H] or null: each row's log2 sum of exp2(scores in log2 units), for the backward
  int batch = 0, queries = 0, heads = 0, keys = 0, head_width = 0;
  float scale = 1;
};

// Whether the kernel was compiled into this build.
bool flash_rel_attention_kernel_built();
// Whether the current GPU gives a block the shared memory the kernel needs at this head width
// (dh 64: 104 KB; more than an RTX 30xx/40xx's 99 KB, less than an A100's 163 or an H100's 227).
bool flash_rel_attention_fits(int head_width);

// Launches on `stream` (a cudaStream_t); nullptr when launched, else CUDA's error message.
const char* launch_flash_rel_attention(const FlashRelAttentionArgs& args, Element element, void* stream);

// The backward's operands: the forward's (with log_sum as the forward wrote it) and the gradients,
// float32 buffers [shape as their operand's, contiguous] that the kernel adds into (zeroed first).
// The queries' gradient comes in two parts: through the content scores (q + u) and through the
// positional scores (q + v); u's and v's gradients are their sums.
struct FlashRelAttentionGradArgs {
  FlashRelAttentionArgs forward;
  const void* grad_out = nullptr;  // [B, T, H, dh], contiguous
  const float* delta = nullptr;    // [B, T, H]: sum over dh of grad_out * out
  float* grad_q_content = nullptr;   // [B, T, H, dh]
  float* grad_q_position = nullptr;  // [B, T, H, dh]
  float* grad_key = nullptr;         // [B, K, H, dh]
  float* grad_value = nullptr;       // [B, K, H, dh]
  float* grad_table[kMaxKeyBlocks] = {};  // [P, H, dh] each
};

// Whether the backward was compiled and the current GPU gives a block the shared memory it needs
// at this head width (dh <= 64: 192 KB, an H100's or H200's 227 KB; not an A100's 163).
bool flash_rel_attention_backward_fits(int head_width);
const char* launch_flash_rel_attention_backward(const FlashRelAttentionGradArgs& args, Element element, void* stream);

}  // namespace xl::kernels::gpu
