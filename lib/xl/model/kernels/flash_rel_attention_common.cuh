// What the flash relative-attention kernels (forward: flash_rel_attention_kernel.cu, backward:
// flash_rel_attention_backward_kernel.cu) share: element conversions, staging rows into shared
// memory, the device's shared-memory limit, the instantiated head widths.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace xl::model::cuda_kernels::flash {

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

}  // namespace xl::model::cuda_kernels::flash
