// bf16 products on AMX tiles (Intel CPUs since Sapphire Rapids), for the attention's per-head
// products on one thread each. oneDNN's bf16 GEMM, which xl calls everywhere else, pays its call
// and packing again for each of these small shapes (64 rows, d_head 64, a few hundred keys); the
// tiles, with B packed once, run them clearly faster (measured: bench/HISTORY.md, "The attention's
// bf16 products on AMX tiles").
#pragma once
#include <cstdint>
#include <vector>

namespace xl::compute {

// Whether this CPU has AMX-BF16 and Linux lets this process use the tiles (asked once, here).
bool this_cpu_has_amx_bf16();

// Whether bf16 products run on AMX tiles here: the CPU has AMX-BF16, Linux lets this process use
// the tiles' state, and kernel_vector_units() allows them (XL_VECTOR_UNITS unset or amx).
bool amx_bf16_usable();

// Row-major C[m, n] = op(A) op(B) + beta C (beta 0 or 1), bf16 operands as bit patterns, products
// and sums in fp32 (as AMX sums them: denormal operands and results count as zero), on the calling
// thread. amx_bf16_usable() must hold.
void amx_bf16_gemm_row_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
                             int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

// op(B) [k, n] packed once into the tiles' layout, for products that share it (the attention's
// keys, values and positional keys, read by each row block of a head).
class AmxPackedB {
 public:
  // op(B) = B, or B^T when trans; B's rows ld apart.
  void pack(bool trans, int64_t k, int64_t n, const uint16_t* b, int64_t ld);
  // Whether rows [row0, row0 + k) and columns [col0, col0 + n) of op(B) start on its tiles (row0 a
  // multiple of 32, col0 of 16) inside it: what amx_bf16_gemm_packed can read.
  bool holds(int64_t row0, int64_t k, int64_t col0, int64_t n) const;

 private:
  friend void amx_bf16_gemm_packed(bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const AmxPackedB&,
                                   int64_t, int64_t, float, float*, int64_t);
  std::vector<uint16_t> tiles_;
  int64_t k_ = 0, n_ = 0, kt_ = 0;
};

// C[m, n] = op(A) op(B)[row0 : row0 + k, col0 : col0 + n] + beta C (beta 0 or 1), op(B) packed;
// b.holds(row0, k, col0, n) must hold. Rows of op(B) past row0 + k that its last tile reads meet
// zeros in A.
void amx_bf16_gemm_packed(bool trans_a, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                          const AmxPackedB& b, int64_t row0, int64_t col0, float beta, float* c, int64_t ldc);

}  // namespace xl::compute
