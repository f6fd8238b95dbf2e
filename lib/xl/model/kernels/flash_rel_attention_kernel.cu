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

#include "xl/model/kernels/flash_rel_attention_common.cuh"
#include "xl/model/kernels/flash_rel_attention_kernel.h"

namespace xl::model::cuda_kernels {
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
  for (int idx = threadIdx.x; idx < kRows * DH; idx += kThreads) {
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
      bool any = false;
      for (int idx = threadIdx.x; idx < kRows * kCols; idx += kThreads) {
        const int r = idx / kCols, c = idx % kCols, i = i0 + r;
        const bool seen = i < t_len && c < cols && !(a.mask && a.mask[int64_t(i) * a.keys + col + j0 + c]);
        s_visible[idx] = seen;
        any |= seen;
      }
      if (!__syncthreads_or(any)) continue;  // every key of the tile hidden from every query
      const int64_t key_row0 = int64_t(b) * a.key_stride[0] + int64_t(hk) * a.key_stride[2];
      const int64_t value_row0 = int64_t(b) * a.value_stride[0] + int64_t(hk) * a.value_stride[2];
      stage_rows<T, DH, kThreads>(s_key, S::ld, kCols, dh, vector_ok, [&](int r) -> const T* {
        return r < cols ? static_cast<const T*>(a.key) + key_row0 + int64_t(col + j0 + r) * a.key_stride[1] : nullptr;
      });
      stage_rows<T, DH, kThreads>(s_value, S::ld, kCols, dh, vector_ok, [&](int r) -> const T* {
        return r < cols ? static_cast<const T*>(a.value) + value_row0 + int64_t(col + j0 + r) * a.value_stride[1]
                        : nullptr;
      });
      // Row s of the window: table row j0 + T - 1 - (i0 + kRows - 1) + s.
      const int64_t first = int64_t(j0) + t_len - 1 - (i0 + kRows - 1);
      stage_rows<T, DH, kThreads>(s_table, S::ld, kWindow, dh, vector_ok, [&](int s) -> const T* {
        const int64_t e = first + s;
        return e >= 0 && e < rows ? table + e * a.table_stride[blk][0] : nullptr;
      });
      __syncthreads();
      if (!warp_has_rows) continue;

      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
#pragma unroll
      for (int n = 0; n < kCols / 16; ++n) {
        wmma::fill_fragment(acc, 0.f);
#pragma unroll
        for (int k = 0; k < kSteps; ++k) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kf;
          wmma::load_matrix_sync(kf, s_key + n * 16 * S::ld + k * 16, S::ld);
          wmma::mma_sync(acc, q_content[k], kf, acc);
        }
        wmma::store_matrix_sync(s_score + n * 16, acc, S::ld_score, wmma::mem_row_major);
      }
      // This warp's rows i0 + 16 warp + r read window rows from (kRows - 16 - 16 warp).
      const T* window = s_table + (kRows - 16 - 16 * warp) * S::ld;
#pragma unroll
      for (int n = 0; n < kWarpWindow / 16; ++n) {
        wmma::fill_fragment(acc, 0.f);
#pragma unroll
        for (int k = 0; k < kSteps; ++k) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> rf;
          wmma::load_matrix_sync(rf, window + n * 16 * S::ld + k * 16, S::ld);
          wmma::mma_sync(acc, q_position[k], rf, acc);
        }
        wmma::store_matrix_sync(s_pos + n * 16, acc, S::ld_pos, wmma::mem_row_major);
      }
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
#pragma unroll
      for (int n = 0; n < kSteps; ++n) {
        wmma::load_matrix_sync(acc, s_out + n * 16, S::ld_out, wmma::mem_row_major);
#pragma unroll
        for (int k = 0; k < kCols / 16; ++k) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pf;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vf;
          wmma::load_matrix_sync(pf, s_prob + k * 16, S::ld_prob);
          wmma::load_matrix_sync(vf, s_value + k * 16 * S::ld + n * 16, S::ld);
          wmma::mma_sync(acc, pf, vf, acc);
        }
        wmma::store_matrix_sync(s_out + n * 16, acc, S::ld_out, wmma::mem_row_major);
      }
      __syncwarp();
    }
  }

  const int i = i0 + warp * 16 + row;
  if (i < t_len) {
    const float inv = run_sum > 0.f ? 1.f / run_sum : 0.f;
    T* o = static_cast<T*>(a.out) + ((int64_t(b) * t_len + i) * a.heads + h) * dh;
    const float* orow = s_out + row * S::ld_out;
    for (int c = half * (DH / 2); c < (half + 1) * (DH / 2) && c < dh; ++c) o[c] = from_float<T>(orow[c] * inv);
    if (a.log_sum && half == 0)
      a.log_sum[(int64_t(b) * t_len + i) * a.heads + h] = run_sum > 0.f ? run_max + log2f(run_sum) : INFINITY;
  }
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
  // 16-byte row copies when every row starts on a 16-byte boundary (8 elements).
  bool vector_ok = a.head_width % 8 == 0 && aligned16(a.key) && aligned16(a.value);
  for (int d = 0; d < 3; ++d) vector_ok = vector_ok && a.key_stride[d] % 8 == 0 && a.value_stride[d] % 8 == 0;
  for (int blk = 0; blk < a.blocks; ++blk)
    vector_ok = vector_ok && aligned16(a.table[blk]) && a.table_stride[blk][0] % 8 == 0 && a.table_stride[blk][1] % 8 == 0;
  auto s = static_cast<cudaStream_t>(stream);
  return element == Element::kBf16 ? launch_width<__nv_bfloat16>(a, vector_ok, s) : launch_width<__half>(a, vector_ok, s);
}

}  // namespace xl::model::cuda_kernels
