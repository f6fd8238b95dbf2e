// The BLAS that LibTorch loaded (OpenBLAS on Debian when installed), found at run time so that no
// link dependency is added and another BLAS still works (without the OpenBLAS-only controls).
#pragma once
#include <cstdint>

namespace xl::model {

struct Blas {
  // Fortran sgemm_ (column-major), present in every BLAS.
  using Sgemm = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                         const int*, const float*, const int*, const float*, float*, const int*);
  Sgemm sgemm = nullptr;
  void (*set_threads)(int) = nullptr;  // OpenBLAS only
  int (*get_threads)() = nullptr;      // OpenBLAS only
};

const Blas& blas();

// Row-major C[m, n] = op(A) op(B) + beta C with op(X) = X or X^T, through the column-major sgemm
// (C^T = op(B)^T op(A)^T). blas().sgemm must be present.
void sgemm_row_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// While alive, BLAS runs each GEMM on the calling thread only (OpenBLAS; a no-op for other BLAS
// libraries): for loops that spread many small GEMMs over the threads themselves.
class SingleThreadedBlas {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace xl::model
