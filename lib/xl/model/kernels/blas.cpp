#include "xl/model/kernels/blas.h"

#include <dlfcn.h>

namespace xl::model {

const Blas& blas() {
  static const Blas b = [] {
    Blas r;
    r.sgemm = reinterpret_cast<Blas::Sgemm>(dlsym(RTLD_DEFAULT, "sgemm_"));
    r.set_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    r.get_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    return r;
  }();
  return b;
}

void sgemm_row_major(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const char op_a = trans_a ? 'T' : 'N', op_b = trans_b ? 'T' : 'N';
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
  const float one = 1;
  blas().sgemm(&op_b, &op_a, &ni, &mi, &ki, &one, b, &lb, a, &la, &beta, c, &lc);
}

SingleThreadedBlas::SingleThreadedBlas() {
  const Blas& l = blas();
  if (l.set_threads && l.get_threads) {
    saved_ = l.get_threads();
    l.set_threads(1);
  }
}

SingleThreadedBlas::~SingleThreadedBlas() {
  if (saved_ > 0) blas().set_threads(saved_);
}

}  // namespace xl::model
