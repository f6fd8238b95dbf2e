// The BLAS that LibTorch loaded (OpenBLAS on Debian when installed), found at run time so that no
// link dependency is added and another BLAS still works (without the OpenBLAS-only controls).
#pragma once

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

}  // namespace xl::model
