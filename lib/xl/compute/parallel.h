// Parallel loops on LibTorch's own OpenMP thread pool for kernels written in this library.
// at::parallel_for is a header template whose `#pragma omp parallel` only takes effect in code
// compiled with -fopenmp, which this library is not; this calls the OpenMP runtime that LibTorch
// loaded (libgomp) directly, with LibTorch's thread count, so no second pool competes for cores.
#pragma once
#include <cstdint>
#include <functional>

namespace xl::compute {

// Applies --threads to LibTorch (intra-op) and OpenBLAS; the first call says (-v) which CPU and
// BLAS kernels the tool runs on.
void set_threads(int n);

// Calls f(b, e) on disjoint subranges covering [begin, end), in parallel when the range exceeds
// `grain` and no parallel region is active; one subrange per thread.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

}  // namespace xl::compute
