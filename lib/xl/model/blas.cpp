#include "xl/model/blas.h"

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

}  // namespace xl::model
