// Relative attention with memory in one pass over the keys, flash-attention style: a block of
// queries (warps of 16 rows) walks the keys in tiles of 64; per tile it stages the keys, values,
// the tile's visibility (mask, ragged ends) and the positional keys the tile's distances need in
// shared memory, computes content and positional scores on the tensor cores (bf16/fp16 operands,
// float accumulators), applies the relative shift by indexing, and folds the tile into an online
// softmax (float) and the weighted sum of values. Nothing score-sized reaches device memory.
//
// The relative shift: query i and key col + j of a block read positional row j + T - 1 - i, so a
// warp's 16 queries and a tile's 64 keys need 79 consecutive rows; their products with the
// warp's positional queries are one 16 x 80 product, and score (r, c) reads its column 15 - r + c.
#include <mma.h>

#include <cmath>

#include "xl/kernels/cuda/flash_rel_attention_common.cuh"
#include "xl/kernels/cuda/flash_rel_attention_kernel.h"

namespace xl::kernels::gpu {
namespace {

using namespace flash;
constexpr int kWarpWindow = 16 + kCols;  // positional rows one warp reads (79 used)

// A block of WARPS warps, 16 queries each, with head width DH; its shared memory: pitches keep
// each 16 x 16 fragment 32-byte aligned and rows off one bank.
template <int DH, int WARPS>
struct Smem {
  static constexpr int threads = 32 * WARPS;
  static constexpr int rows = 16 * WARPS;        // queries per block
  static constexpr int window = rows + kCols;    // positional rows staged per tile (rows + 63 used)
  static constexpr int ld = DH + 8;               // staged bf16/fp16 rows
  static constexpr int ld_score = kCols + 4;      // float
  static constexpr int ld_pos = kWarpWindow + 4;  // float
  static constexpr int ld_prob = kCols + 8;       // bf16/fp16
  static constexpr int ld_out = DH + 4;           // float
  static constexpr size_t key = 0;
  static constexpr size_t value = key + round_up(kCols * ld * 2);
  static constexpr size_t table = value + round_up(kCols * ld * 2);
  static constexpr size_t visible = table + round_up(window * ld * 2);
  static constexpr size_t warps = visible + round_up(rows * kCols);
  // per warp
  static constexpr size_t score = 0;
  static constexpr size_t pos = score + round_up(16 * ld_score * 4);
  static constexpr size_t prob = pos + round_up(16 * ld_pos * 4);
  static constexpr size_t out = prob + round_up(16 * ld_prob * 2);
  static constexpr size_t per_warp = out + round_up(16 * ld_out * 4);
  static constexpr size_t bytes = warps + WARPS * per_warp;
};

// Stages the block's S::rows queries from i0 (of head h, at q) plus each bias: q + u at
// s_q_content, q + v at s_q_position (pitch S::ld; zero past the queries' end t_len and past dh).
template <typename T, int DH, typename S>
__device__ __forceinline__ void stage_biased_queries(const FlashRelAttentionArgs& a, const T* q, int i0, int h,
                                                     int t_len, int dh, T* s_q_content, T* s_q_position) {
  for (int idx = threadIdx.x; idx < S::rows * DH; idx += S::threads) {
    const int r = idx / DH, c = idx % DH, i = i0 + r;
    float x = 0.f, u = 0.f, v = 0.f;
    if (i < t_len && c < dh) {
      x = to_float(q[i * a.q_stride[1] + c]);
      u = a.content_bias[h * dh + c];
      v = a.position_bias[h * dh + c];
    }
    s_q_content[r * S::ld + c] = from_float<T>(i < t_len && c < dh ? x + u : 0.f);
    s_q_position[r * S::ld + c] = from_float<T>(i < t_len && c < dh ? x + v : 0.f);
  }
}

// Writes query i's output (its row of s_out over its softmax's sum; this lane's half of the
// columns) and, where asked, its log-sum-exp for the backward.
template <typename T, int DH, typename S>
__device__ __forceinline__ void write_row(const FlashRelAttentionArgs& a, int b, int h, int i, int t_len, int dh,
                                          const float* s_out, int row, int half, float run_max, float run_sum) {
  const float inv = run_sum > 0.f ? 1.f / run_sum : 0.f;
  T* o = static_cast<T*>(a.out) + ((int64_t(b) * t_len + i) * a.heads + h) * dh;
  const float* orow = s_out + row * S::ld_out;
  for (int c = half * (DH / 2); c < (half + 1) * (DH / 2) && c < dh; ++c) o[c] = from_float<T>(orow[c] * inv);
  if (a.log_sum && half == 0)
    a.log_sum[(int64_t(b) * t_len + i) * a.heads + h] = run_sum > 0.f ? run_max + log2f(run_sum) : INFINITY;
}

template <typename T, int DH, int WARPS>
__global__ void __launch_bounds__(32 * WARPS) flash_rel_attention_kernel(const FlashRelAttentionArgs a, bool vector_ok) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  using S = Smem<DH, WARPS>;
  constexpr int kThreads = S::threads, kRows = S::rows, kWindow = S::window;
  constexpr int kSteps = DH / 16;
  extern __shared__ __align__(128) unsigned char smem[];
  T* s_key = reinterpret_cast<T*>(smem + S::key);
  T* s_value = reinterpret_cast<T*>(smem + S::value);
  T* s_table = reinterpret_cast<T*>(smem + S::table);
  uint8_t* s_visible = smem + S::visible;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* mine = smem + S::warps + warp * S::per_warp;
  float* s_score = reinterpret_cast<float*>(mine + S::score);
  float* s_pos = reinterpret_cast<float*>(mine + S::pos);
  T* s_prob = reinterpret_cast<T*>(mine + S::prob);
  float* s_out = reinterpret_cast<float*>(mine + S::out);

  const int i0 = blockIdx.x * kRows, h = blockIdx.y, b = blockIdx.z;
  const int t_len = a.queries, dh = a.head_width, hk = a.key_head[h];
  const T* q = static_cast<const T*>(a.q) + b * a.q_stride[0] + h * a.q_stride[2];

  // The block's queries plus each bias, staged where the positional keys and where the keys and
  // values (adjacent: 2 x kCols >= kRows rows) go, then kept in registers as matrix fragments.
  T* s_q_content = s_table;
  T* s_q_position = s_key;
  stage_biased_queries<T, DH, S>(a, q, i0, h, t_len, dh, s_q_content, s_q_position);
  __syncthreads();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> q_content[kSteps], q_position[kSteps];
#pragma unroll
  for (int k = 0; k < kSteps; ++k) {
    wmma::load_matrix_sync(q_content[k], s_q_content + warp * 16 * S::ld + k * 16, S::ld);
    wmma::load_matrix_sync(q_position[k], s_q_position + warp * 16 * S::ld + k * 16, S::ld);
  }
  for (int idx = lane; idx < 16 * S::ld_out; idx += 32) s_out[idx] = 0.f;

  // Lane pairs own a row: lane 2r and 2r + 1, columns [0, 32) and [32, 64) of each tile.
  const int row = lane / 2, half = lane % 2;
  const bool warp_has_rows = i0 + warp * 16 < t_len;
  const float scale = a.scale * 1.4426950408889634f;  // scores in log2 units: exp2
  float run_max = -INFINITY, run_sum = 0.f;

  for (int blk = 0; blk < a.blocks; ++blk) {
    const int col = a.block_col[blk], len = a.block_len[blk];
    const int64_t rows = a.table_rows[blk];
    const T* table = static_cast<const T*>(a.table[blk]) + hk * a.table_stride[blk][1];
    for (int j0 = 0; j0 < len; j0 += kCols) {
      const int cols = min(kCols, len - j0);
      __syncthreads();  // the last tile's staged rows are consumed
      const bool any = stage_visibility<kRows, kThreads>(a, i0, col + j0, cols, s_visible);
      if (!__syncthreads_or(any)) continue;  // every key of the tile hidden from every query
      stage_key_tile<T, DH, kThreads>(a, b, hk, col + j0, cols, s_key, s_value, S::ld, vector_ok);
      // Row s of the window: table row j0 + T - 1 - (i0 + kRows - 1) + s.
      const int64_t first = int64_t(j0) + t_len - 1 - (i0 + kRows - 1);
      stage_rows<T, DH, kThreads>(s_table, S::ld, kWindow, dh, vector_ok, [&](int s) -> const T* {
        const int64_t e = first + s;
        return e >= 0 && e < rows ? table + e * a.table_stride[blk][0] : nullptr;
      });
      __syncthreads();
      if (!warp_has_rows) continue;

      product_with_rows<T, DH, kCols / 16>([&](int k) -> const auto& { return q_content[k]; }, s_key, S::ld, s_score,
                                           S::ld_score);
      // This warp's rows i0 + 16 warp + r read window rows from (kRows - 16 - 16 warp).
      const T* window = s_table + (kRows - 16 - 16 * warp) * S::ld;
      product_with_rows<T, DH, kWarpWindow / 16>([&](int k) -> const auto& { return q_position[k]; }, window, S::ld,
                                                 s_pos, S::ld_pos);
      __syncwarp();

      // Online softmax over the tile: two lanes per row.
      const uint8_t* seen = s_visible + (warp * 16 + row) * kCols + half * 32;
      const float* sc = s_score + row * S::ld_score + half * 32;
      const float* ps = s_pos + row * S::ld_pos + half * 32 + 15 - row;
      float x[32];
      float tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        x[c] = seen[c] ? (sc[c] + ps[c]) * scale : -INFINITY;
        tile_max = fmaxf(tile_max, x[c]);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      const float new_max = fmaxf(run_max, tile_max);
      const float base = new_max == -INFINITY ? 0.f : new_max;
      const float alpha = exp2f(run_max - base);
      float sum = 0.f;
      T* pr = s_prob + row * S::ld_prob + half * 32;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const float p = exp2f(x[c] - base);
        sum += p;
        pr[c] = from_float<T>(p);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      run_sum = run_sum * alpha + sum;
      run_max = new_max;
      float* orow = s_out + row * S::ld_out + half * (DH / 2);
#pragma unroll
      for (int c = 0; c < DH / 2; ++c) orow[c] *= alpha;
      __syncwarp();

      // out += probs . values
      product_into<T, DH, true>([&](int k) { return rows_fragment(s_prob + k * 16, S::ld_prob); }, 0, kCols / 16,
                                s_value, S::ld, s_out, S::ld_out);
      __syncwarp();
    }
  }

  const int i = i0 + warp * 16 + row;
  if (i < t_len) write_row<T, DH, S>(a, b, h, i, t_len, dh, s_out, row, half, run_max, run_sum);
#else
  __trap();  // tensor-core bf16/fp16 fragments need compute capability 8.0 (the caller checks)
#endif
}

// Eight warps (128 queries) per block where their shared memory fits the device (DH 64: 181 KB,
// an H100's 227 KB), else four (DH 64: 104 KB): the tile's keys, values and positional rows then
// serve more queries.
template <typename T, int DH, int WARPS>
const char* launch_warps(const FlashRelAttentionArgs& a, bool vector_ok, cudaStream_t stream) {
  using S = Smem<DH, WARPS>;
  static_assert(2 * kCols >= S::rows && S::window >= S::rows, "the queries' staging rows");
  auto kernel = flash_rel_attention_kernel<T, DH, WARPS>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(S::bytes));
  if (err != cudaSuccess) return cudaGetErrorString(err);
  const dim3 grid((a.queries + S::rows - 1) / S::rows, a.heads, a.batch);
  kernel<<<grid, S::threads, S::bytes, stream>>>(a, vector_ok);
  err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

template <typename T, int DH>
const char* launch(const FlashRelAttentionArgs& a, bool vector_ok, cudaStream_t stream) {
  const size_t limit = block_smem_limit();
  if (Smem<DH, 8>::bytes <= limit) return launch_warps<T, DH, 8>(a, vector_ok, stream);
  if (Smem<DH, 4>::bytes <= limit) return launch_warps<T, DH, 4>(a, vector_ok, stream);
  return "flash relative attention: not enough shared memory on this GPU for this head width";
}

template <typename T>
const char* launch_width(const FlashRelAttentionArgs& a, bool vector_ok, cudaStream_t stream) {
  switch (instantiated_width(a.head_width)) {
    case 32: return launch<T, 32>(a, vector_ok, stream);
    case 48: return launch<T, 48>(a, vector_ok, stream);
    case 64: return launch<T, 64>(a, vector_ok, stream);
    case 128: return launch<T, 128>(a, vector_ok, stream);
    default: return "flash relative attention: head width over 128";
  }
}

}  // namespace

bool flash_rel_attention_kernel_built() { return true; }

bool flash_rel_attention_fits(int head_width) {
  const size_t limit = block_smem_limit();
  switch (instantiated_width(head_width)) {
    case 32: return Smem<32, 4>::bytes <= limit;
    case 48: return Smem<48, 4>::bytes <= limit;
    case 64: return Smem<64, 4>::bytes <= limit;
    case 128: return Smem<128, 4>::bytes <= limit;
    default: return false;
  }
}

const char* launch_flash_rel_attention(const FlashRelAttentionArgs& a, Element element, void* stream) {
  if (a.blocks < 1 || a.blocks > kMaxKeyBlocks || a.heads > kMaxHeads) return "flash relative attention: bad shape";
  const bool vector_ok = flash::rows_copy_by_16_bytes(a);
  auto s = static_cast<cudaStream_t>(stream);
  return element == Element::kBf16 ? launch_width<__nv_bfloat16>(a, vector_ok, s) : launch_width<__half>(a, vector_ok, s);
}

}  // namespace xl::kernels::gpu
