// The backward of flash relative attention (flash_rel_attention_kernel.cu), flash-attention style
// with the keys outside: a block owns a tile of 64 keys of one head and walks the queries in
// chunks of 64 (four warps of 16 rows), recomputing each chunk's probabilities from the forward's
// log-sum-exp, P = exp(s - L), and the scores' gradient G = scale P (dP - delta), dP = dO V^T.
// The key tile's gradients (dK = G^T (q + u), dV = P^T dO) stay in registers for the whole walk;
// the queries' (G K, and the shifted G times the positional keys) are added into float buffers with
// atomics (float4 on sm_90), so the order of those sums, and their last bits, vary run to run.
// (Summing them in a pass of their own, the probabilities computed a third time, measured slower:
// bench/HISTORY.md, "GPU runs", the flash kernel's backward.)
//
// The positional keys' gradient: query i and key j of the tile read window row j - i + 63 of the
// chunk's 128 positional rows, so G laid out by window row (the band, 64 x 128) gives both
// dq_position = band . window and dR(window) += band^T (q + v). Successive chunks' windows overlap
// by half: the block keeps its window's gradient in shared memory and adds a half to the float
// buffer as it leaves the window, so a row is added once per block rather than once per warp.
#include <mma.h>

#include <cmath>

#include "xl/kernels/cuda/flash_rel_attention_common.cuh"
#include "xl/kernels/cuda/flash_rel_attention_kernel.h"

namespace xl::kernels::gpu {
namespace {

using namespace flash;
constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;      // queries per chunk
constexpr int kWindow = kRows + kCols;  // positional rows per chunk (127 used)
constexpr int kWarpWindow = 16 + kCols;

template <int DH>
struct GradSmem {
  static constexpr int threads = 32 * kWarps;
  static constexpr int ld = DH + 8;          // staged bf16/fp16 rows
  static constexpr int ld_tile = kCols + 8;  // P and G, bf16/fp16
  static constexpr int ld_band = kWindow + 8;
  static constexpr int ld_acc = DH + 4;  // float
  static constexpr int ld_score = (kCols > DH ? kCols : DH) + 4;
  static constexpr int ld_pos = kWarpWindow + 4;
  static constexpr size_t key = 0;
  static constexpr size_t value = key + round_up(kCols * ld * 2);
  static constexpr size_t q_content = value + round_up(kCols * ld * 2);
  static constexpr size_t q_position = q_content + round_up(kRows * ld * 2);
  static constexpr size_t grad_out = q_position + round_up(kRows * ld * 2);
  static constexpr size_t table = grad_out + round_up(kRows * ld * 2);
  static constexpr size_t visible = table + round_up(kWindow * ld * 2);
  static constexpr size_t log_sum = visible + round_up(kRows * kCols);
  static constexpr size_t delta = log_sum + round_up(kRows * 4);
  static constexpr size_t prob = delta + round_up(kRows * 4);
  static constexpr size_t grad = prob + round_up(kRows * ld_tile * 2);
  static constexpr size_t band = grad + round_up(kRows * ld_tile * 2);
  static constexpr size_t table_grad = band + round_up(kRows * ld_band * 2);
  static constexpr size_t warps = table_grad + round_up(kWindow * ld_acc * 4);
  // per warp: float scratch
  static constexpr size_t score = 0;
  static constexpr size_t pos = score + round_up(16 * ld_score * 4);
  static constexpr size_t dprob = pos + round_up(16 * ld_pos * 4);
  static constexpr size_t per_warp = dprob + round_up(16 * ld_score * 4);
  static constexpr size_t bytes = warps + kWarps * per_warp;
};

// dst_row(r)[c] += src[r * ld + c] for rows r < n (dst_row(r) null: none) and columns c < dh, by
// threads [tid, tid + threads) of the group: four at a time where the GPU adds float4s (sm_90) and
// dh allows; exact zeros (hidden keys, rows past the end) are not added.
template <typename DstRow>
__device__ __forceinline__ void add_rows(const float* src, int ld, int n, int dh, int tid, int threads, DstRow dst_row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (dh % 4 == 0) {
    const int quads = dh / 4;
    for (int idx = tid; idx < n * quads; idx += threads) {
      const int r = idx / quads, c = (idx % quads) * 4;
      float* d = dst_row(r);
      const float4 x = *reinterpret_cast<const float4*>(src + r * ld + c);
      if (d && (x.x != 0.f || x.y != 0.f || x.z != 0.f || x.w != 0.f)) atomicAdd(reinterpret_cast<float4*>(d + c), x);
    }
    return;
  }
#endif
  for (int idx = tid; idx < n * dh; idx += threads) {
    const int r = idx / dh, c = idx % dh;
    float* d = dst_row(r);
    const float x = src[r * ld + c];
    if (d && x != 0.f) atomicAdd(d + c, x);
  }
}

// A 16 x 16 float accumulator: the key tile's gradients stay in these for the whole walk.
using Frag16 = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

// This block's key tile, the blockIdx.x-th over the key blocks' tiles: its key block blk and its
// first key j0 there.
__device__ __forceinline__ void locate_key_tile(const FlashRelAttentionArgs& a, int& blk, int& j0) {
  blk = 0;
  j0 = blockIdx.x * kCols;
  while (blk + 1 < a.blocks && j0 >= (a.block_len[blk] + kCols - 1) / kCols * kCols) {
    j0 -= (a.block_len[blk] + kCols - 1) / kCols * kCols;
    ++blk;
  }
}

// Stages the chunk's queries from i0 (of head h, at q) plus each bias (q + u, q + v), their output
// gradients (at dout), log-sum-exps and deltas; zero past the queries' end and past dh.
template <typename T, int DH>
__device__ __forceinline__ void stage_query_chunk(const FlashRelAttentionGradArgs& g, const T* q, const T* dout, int i0,
                                                  int b, int h, int t_len, int dh, int heads, T* s_qc, T* s_qp,
                                                  T* s_dout, float* s_log_sum, float* s_delta) {
  using S = GradSmem<DH>;
  const FlashRelAttentionArgs& a = g.forward;
  for (int idx = threadIdx.x; idx < kRows * DH; idx += S::threads) {
    const int r = idx / DH, c = idx % DH, i = i0 + r;
    const bool in = i < t_len && c < dh;
    const float x = in ? to_float(q[int64_t(i) * a.q_stride[1] + c]) : 0.f;
    s_qc[r * S::ld + c] = from_float<T>(in ? x + a.content_bias[h * dh + c] : 0.f);
    s_qp[r * S::ld + c] = from_float<T>(in ? x + a.position_bias[h * dh + c] : 0.f);
    s_dout[r * S::ld + c] = in ? dout[int64_t(i) * heads * dh + c] : from_float<T>(0.f);
  }
  for (int r = threadIdx.x; r < kRows; r += S::threads) {
    const int i = i0 + r;
    s_log_sum[r] = i < t_len ? a.log_sum[(int64_t(b) * t_len + i) * heads + h] : 0.f;
    s_delta[r] = i < t_len ? g.delta[(int64_t(b) * t_len + i) * heads + h] : 0.f;
  }
}

// The warp's 16 queries' content scores (into s_score), positional scores (16 x 80, into s_pos:
// the warp's window rows from kRows - 16 - 16 warp) and dP = dO V^T (into s_dprob).
template <typename T, int DH>
__device__ __forceinline__ void warp_scores(const T* s_qc, const T* s_qp, const T* s_dout, const T* s_key,
                                            const T* s_value, const T* s_table, float* s_score, float* s_pos,
                                            float* s_dprob, int warp) {
  using S = GradSmem<DH>;
  const T* window = s_table + (kRows - 16 - 16 * warp) * S::ld;
  const T* qc = s_qc + warp * 16 * S::ld;
  const T* qp = s_qp + warp * 16 * S::ld;
  const T* dow = s_dout + warp * 16 * S::ld;
  product_with_rows<T, DH, kCols / 16>([&](int k) { return rows_fragment(qc + k * 16, S::ld); }, s_key, S::ld, s_score,
                                       S::ld_score);
  product_with_rows<T, DH, kCols / 16>([&](int k) { return rows_fragment(dow + k * 16, S::ld); }, s_value, S::ld,
                                       s_dprob, S::ld_score);
  product_with_rows<T, DH, kWarpWindow / 16>([&](int k) { return rows_fragment(qp + k * 16, S::ld); }, window, S::ld,
                                             s_pos, S::ld_pos);
}

// P and G for the warp's rows from its scores and dP, two lanes a row (half: keys 0-31 or 32-63);
// G also by window row into the band (chunk row R, key c: band column c - R + 63; the row's other
// columns zero).
template <typename T, int DH>
__device__ __forceinline__ void probs_and_grads(const FlashRelAttentionArgs& a, const uint8_t* s_visible,
                                                const float* s_log_sum, const float* s_delta, const float* s_score,
                                                const float* s_pos, const float* s_dprob, T* s_prob, T* s_grad,
                                                T* s_band, int warp, int row, int half, float scale2) {
  using S = GradSmem<DH>;
  const int R = warp * 16 + row;
  const uint8_t* seen = s_visible + R * kCols;
  const float lse = s_log_sum[row + warp * 16], delta = s_delta[row + warp * 16];
  T* pr = s_prob + R * S::ld_tile;
  T* gr = s_grad + R * S::ld_tile;
  T* br = s_band + R * S::ld_band;
#pragma unroll 8
  for (int c = half * 32; c < half * 32 + 32; ++c) {
    float p = 0.f, gs = 0.f;
    if (seen[c]) {
      p = exp2f((s_score[row * S::ld_score + c] + s_pos[row * S::ld_pos + 15 - row + c]) * scale2 - lse);
      gs = a.scale * p * (s_dprob[row * S::ld_score + c] - delta);
    }
    pr[c] = from_float<T>(p);
    gr[c] = from_float<T>(gs);
    br[c - R + kCols - 1] = from_float<T>(gs);
  }
  for (int s = half * (kWindow / 2); s < (half + 1) * (kWindow / 2); ++s)
    if (s < kCols - 1 - R || s > 2 * kCols - 2 - R) br[s] = from_float<T>(0.f);
}

// The chunk's share of the key tile's gradients (dV += P^T dO, dK += G^T (q + u)): this warp's
// keys 16 warp .. + 15, summed over the chunk's queries.
template <typename T, int DH>
__device__ __forceinline__ void add_key_tile_grads(const T* s_prob, const T* s_grad, const T* s_dout, const T* s_qc,
                                                   int warp, Frag16 (&grad_key)[DH / 16],
                                                   Frag16 (&grad_value)[DH / 16]) {
  using namespace nvcuda;
  using S = GradSmem<DH>;
#pragma unroll
  for (int n = 0; n < DH / 16; ++n) {
#pragma unroll
    for (int k = 0; k < kRows / 16; ++k) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> pt, gt;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> df, qf;
      wmma::load_matrix_sync(pt, s_prob + k * 16 * S::ld_tile + warp * 16, S::ld_tile);
      wmma::load_matrix_sync(df, s_dout + k * 16 * S::ld + n * 16, S::ld);
      wmma::mma_sync(grad_value[n], pt, df, grad_value[n]);
      wmma::load_matrix_sync(gt, s_grad + k * 16 * S::ld_tile + warp * 16, S::ld_tile);
      wmma::load_matrix_sync(qf, s_qc + k * 16 * S::ld + n * 16, S::ld);
      wmma::mma_sync(grad_key[n], gt, qf, grad_key[n]);
    }
  }
}

// Adds the warp's 16 rows of s_score, the gradients of queries i_warp .. + 15 (none past t_len),
// into the float buffer dst of head h.
template <int DH>
__device__ __forceinline__ void add_query_rows(float* dst, const float* s_score, int i_warp, int b, int h, int t_len,
                                               int dh, int heads, int lane) {
  using S = GradSmem<DH>;
  __syncwarp();
  add_rows(s_score, S::ld_score, 16, dh, lane, 32, [&](int r) -> float* {
    return i_warp + r < t_len ? dst + ((int64_t(b) * t_len + i_warp + r) * heads + h) * dh : nullptr;
  });
  __syncwarp();
}

// The window's gradient, band^T (q + v), added into s_table_grad: this warp's window rows
// 32 warp .. + 31.
template <typename T, int DH>
__device__ __forceinline__ void add_window_grad(const T* s_band, const T* s_qp, float* s_table_grad, int warp) {
  using S = GradSmem<DH>;
#pragma unroll
  for (int m = 0; m < 2; ++m)
    product_into<T, DH, true>(
        [&](int k) { return transposed_fragment(s_band + k * 16 * S::ld_band + 32 * warp + 16 * m, S::ld_band); }, 0,
        kRows / 16, s_qp, S::ld, s_table_grad + (32 * warp + 16 * m) * S::ld_acc, S::ld_acc);
}

// Adds window rows [from, to) of the block's table gradient (window row s: table row first + s;
// none outside [0, rows)) into the float buffer of the key's head at table_grad_out; exact zeros
// (hidden keys) are not added.
template <int DH>
__device__ __forceinline__ void flush_window(const float* s_table_grad, int from, int to, int64_t first, int64_t rows,
                                             float* table_grad_out, int dh, int heads) {
  using S = GradSmem<DH>;
  add_rows(s_table_grad + from * S::ld_acc, S::ld_acc, to - from, dh, threadIdx.x, S::threads, [&](int r) -> float* {
    const int64_t e = first + from + r;
    return e >= 0 && e < rows ? table_grad_out + e * heads * dh : nullptr;
  });
}

// The next chunk's window starts kRows rows lower: the window's gradient moves up by kRows rows
// (its upper half, flushed, overwritten) and its lower kRows rows start at zero.
template <int DH>
__device__ __forceinline__ void shift_window(float* s_table_grad) {
  using S = GradSmem<DH>;
  for (int idx = threadIdx.x; idx < kRows * S::ld_acc; idx += S::threads) {
    s_table_grad[(kWindow - kRows) * S::ld_acc + idx] = s_table_grad[idx];
    s_table_grad[idx] = 0.f;
  }
}

template <typename T, int DH>
__global__ void __launch_bounds__(32 * kWarps) flash_rel_attention_backward_kernel(const FlashRelAttentionGradArgs g,
                                                                                   bool vector_ok) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace nvcuda;
  using S = GradSmem<DH>;
  constexpr int kThreads = S::threads, kSteps = DH / 16;
  const FlashRelAttentionArgs& a = g.forward;
  extern __shared__ __align__(128) unsigned char smem[];
  T* s_key = reinterpret_cast<T*>(smem + S::key);
  T* s_value = reinterpret_cast<T*>(smem + S::value);
  T* s_qc = reinterpret_cast<T*>(smem + S::q_content);
  T* s_qp = reinterpret_cast<T*>(smem + S::q_position);
  T* s_dout = reinterpret_cast<T*>(smem + S::grad_out);
  T* s_table = reinterpret_cast<T*>(smem + S::table);
  uint8_t* s_visible = smem + S::visible;
  float* s_log_sum = reinterpret_cast<float*>(smem + S::log_sum);
  float* s_delta = reinterpret_cast<float*>(smem + S::delta);
  T* s_prob = reinterpret_cast<T*>(smem + S::prob);
  T* s_grad = reinterpret_cast<T*>(smem + S::grad);
  T* s_band = reinterpret_cast<T*>(smem + S::band);
  float* s_table_grad = reinterpret_cast<float*>(smem + S::table_grad);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* mine = smem + S::warps + warp * S::per_warp;
  float* s_score = reinterpret_cast<float*>(mine + S::score);
  float* s_pos = reinterpret_cast<float*>(mine + S::pos);
  float* s_dprob = reinterpret_cast<float*>(mine + S::dprob);

  int blk, j0;
  locate_key_tile(a, blk, j0);  // this block's key tile
  const int col = a.block_col[blk], len = a.block_len[blk];
  if (j0 >= len) return;
  const int cols = min(kCols, len - j0);
  const int h = blockIdx.y, b = blockIdx.z, hk = a.key_head[h];
  const int t_len = a.queries, dh = a.head_width, heads = a.heads;
  const int64_t rows = a.table_rows[blk];
  const T* table = static_cast<const T*>(a.table[blk]) + hk * a.table_stride[blk][1];
  const T* q = static_cast<const T*>(a.q) + b * a.q_stride[0] + h * a.q_stride[2];
  const T* dout = static_cast<const T*>(g.grad_out) + int64_t(b) * t_len * heads * dh + h * dh;

  stage_key_tile<T, DH, kThreads>(a, b, hk, col + j0, cols, s_key, s_value, S::ld, vector_ok);
  for (int idx = threadIdx.x; idx < kWindow * S::ld_acc; idx += kThreads) s_table_grad[idx] = 0.f;

  Frag16 grad_key[kSteps], grad_value[kSteps];
#pragma unroll
  for (int n = 0; n < kSteps; ++n) {
    wmma::fill_fragment(grad_key[n], 0.f);
    wmma::fill_fragment(grad_value[n], 0.f);
  }
  const int row = lane / 2, half = lane % 2;  // lane pairs own a row of the warp's 16, 32 keys each
  const float scale2 = a.scale * 1.4426950408889634f;
  float* table_grad_out = g.grad_table[blk] + hk * dh;

  int64_t first = 0;
  for (int i0 = 0; i0 < t_len; i0 += kRows) {
    first = int64_t(j0) + t_len - 1 - (i0 + kRows - 1);
    __syncthreads();  // the last chunk's staged rows are consumed
    const bool any = stage_visibility<kRows, kThreads>(a, i0, col + j0, cols, s_visible);
    if (__syncthreads_or(any)) {
      stage_query_chunk<T, DH>(g, q, dout, i0, b, h, t_len, dh, heads, s_qc, s_qp, s_dout, s_log_sum, s_delta);
      stage_rows<T, DH, kThreads>(s_table, S::ld, kWindow, dh, vector_ok, [&](int s) -> const T* {
        const int64_t e = first + s;
        return e >= 0 && e < rows ? table + e * a.table_stride[blk][0] : nullptr;
      });
      __syncthreads();

      warp_scores<T, DH>(s_qc, s_qp, s_dout, s_key, s_value, s_table, s_score, s_pos, s_dprob, warp);
      __syncwarp();

      probs_and_grads<T, DH>(a, s_visible, s_log_sum, s_delta, s_score, s_pos, s_dprob, s_prob, s_grad, s_band, warp,
                             row, half, scale2);
      __syncthreads();  // every warp's P, G and band rows

      add_key_tile_grads<T, DH>(s_prob, s_grad, s_dout, s_qc, warp, grad_key, grad_value);

      // The warp's queries' gradients: through the content scores G K, through the positional ones
      // band . window (the warp's band rows are nonzero in window columns 48 - 16 warp .. 126 - 16 warp).
      const int i_warp = i0 + warp * 16;
      if (i_warp < t_len) {
        product_into<T, DH, false>(
            [&](int k) { return rows_fragment(s_grad + warp * 16 * S::ld_tile + k * 16, S::ld_tile); }, 0, kCols / 16,
            s_key, S::ld, s_score, S::ld_score);
        add_query_rows<DH>(g.grad_q_content, s_score, i_warp, b, h, t_len, dh, heads, lane);
        product_into<T, DH, false>(
            [&](int k) { return rows_fragment(s_band + warp * 16 * S::ld_band + k * 16, S::ld_band); }, 3 - warp,
            8 - warp, s_table, S::ld, s_score, S::ld_score);
        add_query_rows<DH>(g.grad_q_position, s_score, i_warp, b, h, t_len, dh, heads, lane);
      }

      add_window_grad<T, DH>(s_band, s_qp, s_table_grad, warp);
    }
    // The next chunk's window starts kRows rows lower: this window's upper half is done.
    __syncthreads();
    flush_window<DH>(s_table_grad, kWindow - kRows, kWindow, first, rows, table_grad_out, dh, heads);
    __syncthreads();
    shift_window<DH>(s_table_grad);
  }
  __syncthreads();
  flush_window<DH>(s_table_grad, kWindow - kRows, kWindow, first - kRows, rows, table_grad_out, dh, heads);

  // The key tile's gradients, to the key's head.
  auto add_keys = [&](Frag16* frags, float* dst) {
#pragma unroll
    for (int n = 0; n < kSteps; ++n) wmma::store_matrix_sync(s_score + n * 16, frags[n], S::ld_score, wmma::mem_row_major);
    __syncwarp();
    add_rows(s_score, S::ld_score, 16, dh, lane, 32, [&](int r) -> float* {
      const int j = warp * 16 + r;
      return j < cols ? dst + ((int64_t(b) * a.keys + col + j0 + j) * heads + hk) * dh : nullptr;
    });
    __syncwarp();
  };
  add_keys(grad_key, g.grad_key);
  add_keys(grad_value, g.grad_value);
#else
  __trap();  // tensor-core bf16/fp16 fragments need compute capability 8.0 (the caller checks)
#endif
}

template <typename T, int DH>
const char* launch(const FlashRelAttentionGradArgs& g, bool vector_ok, cudaStream_t stream) {
  using S = GradSmem<DH>;
  if (S::bytes > block_smem_limit()) return "flash relative attention backward: not enough shared memory on this GPU";
  auto kernel = flash_rel_attention_backward_kernel<T, DH>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(S::bytes));
  if (err != cudaSuccess) return cudaGetErrorString(err);
  int tiles = 0;
  for (int blk = 0; blk < g.forward.blocks; ++blk) tiles += (g.forward.block_len[blk] + kCols - 1) / kCols;
  kernel<<<dim3(tiles, g.forward.heads, g.forward.batch), S::threads, S::bytes, stream>>>(g, vector_ok);
  err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

template <typename T>
const char* launch_width(const FlashRelAttentionGradArgs& g, bool vector_ok, cudaStream_t stream) {
  switch (instantiated_width(g.forward.head_width)) {
    case 32: return launch<T, 32>(g, vector_ok, stream);
    case 48: return launch<T, 48>(g, vector_ok, stream);
    case 64: return launch<T, 64>(g, vector_ok, stream);
    default: return "flash relative attention backward: head width over 64";
  }
}

}  // namespace

bool flash_rel_attention_backward_fits(int head_width) {
  const size_t limit = block_smem_limit();
  switch (instantiated_width(head_width)) {
    case 32: return GradSmem<32>::bytes <= limit;
    case 48: return GradSmem<48>::bytes <= limit;
    case 64: return GradSmem<64>::bytes <= limit;
    default: return false;
  }
}

const char* launch_flash_rel_attention_backward(const FlashRelAttentionGradArgs& g, Element element, void* stream) {
  const FlashRelAttentionArgs& a = g.forward;
  if (a.blocks < 1 || a.blocks > kMaxKeyBlocks || a.heads > kMaxHeads || !a.log_sum)
    return "flash relative attention backward: bad shape";
  const bool vector_ok = flash::rows_copy_by_16_bytes(a);
  auto s = static_cast<cudaStream_t>(stream);
  return element == Element::kBf16 ? launch_width<__nv_bfloat16>(g, vector_ok, s) : launch_width<__half>(g, vector_ok, s);
}

}  // namespace xl::kernels::gpu
