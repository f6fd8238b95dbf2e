// What the flash relative-attention kernels (forward: flash_rel_attention_kernel.cu, backward:
// flash_rel_attention_backward_kernel.cu) share: element conversions, staging rows into shared
// memory, the device's shared-memory limit, the instantiated head widths.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <type_traits>

#include <cstddef>
#include <cstdint>

#include "xl/kernels/cuda/flash_rel_attention_kernel.h"

namespace xl::kernels::gpu::flash {

constexpr int kCols = 64;  // keys per tile

inline constexpr size_t round_up(size_t n) { return (n + 127) / 128 * 128; }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16(x); }
template <>
__device__ __forceinline__ __half from_float(float x) { return __float2half(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

// Stages `rows` rows of dh elements into dst (pitch ld, zero past dh and for rows src(r) == null):
// 16-byte copies when every row allows them, else element by element.
template <typename T, int DH, int THREADS, typename RowPtr>
__device__ __forceinline__ void stage_rows(T* dst, int ld, int rows, int dh, bool vector_ok, RowPtr src) {
  constexpr int chunks = DH / 8;
  for (int idx = threadIdx.x; idx < rows * chunks; idx += THREADS) {
    const int r = idx / chunks, c = (idx % chunks) * 8;
    const T* s = src(r);
    T* d = dst + r * ld + c;
    if (s && vector_ok && c + 8 <= dh) {
      *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(s + c);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) d[e] = (s && c + e < dh) ? s[c + e] : from_float<T>(0.f);
    }
  }
}

// Stages which of ROWS queries from i0 see which of the tile's kCols keys from first_key (the
// mask, the tile's cols keys, the queries' end) into s_visible [ROWS x kCols]; returns whether
// this thread found one seen (for __syncthreads_or).
template <int ROWS, int THREADS>
__device__ __forceinline__ bool stage_visibility(const FlashRelAttentionArgs& a, int i0, int first_key, int cols,
                                                 uint8_t* s_visible) {
  bool any = false;
  for (int idx = threadIdx.x; idx < ROWS * kCols; idx += THREADS) {
    const int r = idx / kCols, c = idx % kCols, i = i0 + r;
    const bool seen = i < a.queries && c < cols && !(a.mask && a.mask[int64_t(i) * a.keys + first_key + c]);
    s_visible[idx] = seen;
    any |= seen;
  }
  return any;
}

// Stages a tile's keys and values: rows first_key .. first_key + cols - 1 of batch b's head hk
// into s_key and s_value (pitch ld, kCols rows, zero past cols).
template <typename T, int DH, int THREADS>
__device__ __forceinline__ void stage_key_tile(const FlashRelAttentionArgs& a, int b, int hk, int first_key, int cols,
                                               T* s_key, T* s_value, int ld, bool vector_ok) {
  const int64_t key_row0 = int64_t(b) * a.key_stride[0] + int64_t(hk) * a.key_stride[2];
  const int64_t value_row0 = int64_t(b) * a.value_stride[0] + int64_t(hk) * a.value_stride[2];
  stage_rows<T, DH, THREADS>(s_key, ld, kCols, a.head_width, vector_ok, [&](int r) -> const T* {
    return r < cols ? static_cast<const T*>(a.key) + key_row0 + int64_t(first_key + r) * a.key_stride[1] : nullptr;
  });
  stage_rows<T, DH, THREADS>(s_value, ld, kCols, a.head_width, vector_ok, [&](int r) -> const T* {
    return r < cols ? static_cast<const T*>(a.value) + value_row0 + int64_t(first_key + r) * a.value_stride[1]
                    : nullptr;
  });
}

// One warp's dst [16 x 16 N] (float, row-major, pitch ld_dst) = (or, Accumulate, +=) the sum over
// k in [k0, k1) of A_k B_kn on the tensor cores: A_k the 16 x 16 fragment a(k) (registers, or
// loaded when asked), B_kn the 16 x 16 block (k, n) of a matrix staged at b (pitch ld_b), read as
// BLayout says: col_major, B is the transpose of staged rows; row_major, B is the staged rows.
template <typename T, typename BLayout, int N, bool Accumulate, typename AFragment>
__device__ __forceinline__ void tile_product(AFragment a, int k0, int k1, const T* b, int ld_b, float* dst, int ld_dst) {
  using namespace nvcuda;
  constexpr bool transposed = std::is_same<BLayout, wmma::col_major>::value;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    if (Accumulate) wmma::load_matrix_sync(acc, dst + n * 16, ld_dst, wmma::mem_row_major);
    else wmma::fill_fragment(acc, 0.f);
#pragma unroll
    for (int k = k0; k < k1; ++k) {
      auto&& af = a(k);
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, BLayout> bf;
      wmma::load_matrix_sync(bf, transposed ? b + n * 16 * ld_b + k * 16 : b + k * 16 * ld_b + n * 16, ld_b);
      wmma::mma_sync(acc, af, bf, acc);
    }
    wmma::store_matrix_sync(dst + n * 16, acc, ld_dst, wmma::mem_row_major);
  }
}

// dst [16 x 16 N] = A B^T, A 16 x DH and B's 16 N rows of DH staged at b: the scores of queries
// against staged keys, values or positional rows.
template <typename T, int DH, int N, typename AFragment>
__device__ __forceinline__ void product_with_rows(AFragment a, const T* b, int ld_b, float* dst, int ld_dst) {
  tile_product<T, nvcuda::wmma::col_major, N, false>(a, 0, DH / 16, b, ld_b, dst, ld_dst);
}

// A row-major 16 x 16 fragment of rows staged at p (pitch ld).
template <typename T>
__device__ __forceinline__ nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, T, nvcuda::wmma::row_major>
rows_fragment(const T* p, int ld) {
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, T, nvcuda::wmma::row_major> f;
  nvcuda::wmma::load_matrix_sync(f, p, ld);
  return f;
}

// dst [16 x DH] = (or, Accumulate, +=) the sum over k in [k0, k1) of A_k times rows 16 k .. 16 k + 15
// of a row-major matrix of DH columns staged at b: probabilities or score gradients times staged
// values, keys, positional rows or queries.
template <typename T, int DH, bool Accumulate, typename AFragment>
__device__ __forceinline__ void product_into(AFragment a, int k0, int k1, const T* b, int ld_b, float* dst, int ld_dst) {
  tile_product<T, nvcuda::wmma::row_major, DH / 16, Accumulate>(a, k0, k1, b, ld_b, dst, ld_dst);
}

// The transpose of the 16 x 16 block staged row-major at p (pitch ld), as a left operand.
template <typename T>
__device__ __forceinline__ nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, T, nvcuda::wmma::col_major>
transposed_fragment(const T* p, int ld) {
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, T, nvcuda::wmma::col_major> f;
  nvcuda::wmma::load_matrix_sync(f, p, ld);
  return f;
}

// The most shared memory one block of the current device may have (0 if it cannot be read).
inline size_t block_smem_limit() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    return 0;
  return static_cast<size_t>(bytes);
}

// Head widths rounded up to one of the instantiated ones (zero columns change nothing).
inline int instantiated_width(int dh) { return dh <= 32 ? 32 : dh <= 48 ? 48 : dh <= 64 ? 64 : dh <= 128 ? 128 : 0; }

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether every staged row (keys, values, positional keys) starts on a 16-byte boundary, so that
// stage_rows copies 8 elements at a time.
inline bool rows_copy_by_16_bytes(const FlashRelAttentionArgs& a) {
  bool ok = a.head_width % 8 == 0 && aligned16(a.key) && aligned16(a.value);
  for (int d = 0; d < 3; ++d) ok = ok && a.key_stride[d] % 8 == 0 && a.value_stride[d] % 8 == 0;
  for (int blk = 0; blk < a.blocks; ++blk)
    ok = ok && aligned16(a.table[blk]) && a.table_stride[blk][0] % 8 == 0 && a.table_stride[blk][1] % 8 == 0;
  return ok;
}

}  // namespace xl::kernels::gpu::flash
