#include "xl/compute/parallel.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>

#include "xl/compute/blas.h"
#include "xl/util/log.h"

namespace xl::compute {
namespace {

struct Gomp {
  void (*parallel)(void (*)(void*), void*, unsigned, unsigned) = nullptr;
  int (*thread_num)() = nullptr;
  int (*num_threads)() = nullptr;
  int (*in_parallel)() = nullptr;
  bool ok = false;
};

const Gomp& gomp() {
  static const Gomp g = [] {
    Gomp r;
    r.parallel = reinterpret_cast<decltype(r.parallel)>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
    r.thread_num = reinterpret_cast<decltype(r.thread_num)>(dlsym(RTLD_DEFAULT, "omp_get_thread_num"));
    r.num_threads = reinterpret_cast<decltype(r.num_threads)>(dlsym(RTLD_DEFAULT, "omp_get_num_threads"));
    r.in_parallel = reinterpret_cast<decltype(r.in_parallel)>(dlsym(RTLD_DEFAULT, "omp_in_parallel"));
    r.ok = r.parallel && r.thread_num && r.num_threads && r.in_parallel;
    return r;
  }();
  return g;
}

struct Job {
  int64_t begin, end;
  const std::function<void(int64_t, int64_t)>* f;
  std::exception_ptr error;
  std::mutex mutex;
};

void run_share(void* data) {
  Job* job = static_cast<Job*>(data);
  const Gomp& g = gomp();
  const int64_t tid = g.thread_num(), nt = g.num_threads();
  const int64_t chunk = (job->end - job->begin + nt - 1) / nt;
  const int64_t b = job->begin + tid * chunk, e = std::min(job->end, b + chunk);
  if (b >= e) return;
  try {
    (*job->f)(b, e);
  } catch (...) {
    std::lock_guard<std::mutex> lock(job->mutex);
    if (!job->error) job->error = std::current_exception();
  }
}

// How idle OpenMP workers wait (as torch_process.cpp sets it up, or the user's environment).
std::string openmp_waiting() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spins = std::getenv("GOMP_SPINCOUNT");
  std::string d = std::string("OpenMP workers wait: ") + (policy ? policy : "OpenMP's default");
  return spins ? d + " after " + spins + " spins" : d;
}

}  // namespace

void set_threads(int n) {
  at::set_num_threads(n);
  if (blas().set_threads) blas().set_threads(n);
  static bool described = false;
  if (!described) {
    described = true;
    XL_DEBUG(n << " threads on " << cpu_model_name() << "; BLAS: " << blas_description()
               << "; products: " << gemm_choice_description() << "; xl's vector kernels: "
               << kernel_vector_units_name() << "; " << openmp_waiting());
  }
}

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  if (begin >= end) return;
  const Gomp& g = gomp();
  const int64_t threads = at::get_num_threads();
  if (!g.ok || threads <= 1 || end - begin <= std::max<int64_t>(grain, 1) || g.in_parallel()) {
    f(begin, end);
    return;
  }
  const int64_t n = std::min<int64_t>(threads, (end - begin + grain - 1) / std::max<int64_t>(grain, 1));
  Job job{begin, end, &f, nullptr, {}};
  g.parallel(run_share, &job, static_cast<unsigned>(n), 0);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace xl::compute
