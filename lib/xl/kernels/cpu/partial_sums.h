// Sums over the rows of row-major data [rows, d] that are the same bits on any thread count: each
// task sums kPartialRows rows in order into a partial sum [d], and the tasks' partials are then
// added in task order, in double. The kernels' bias and layer-norm gradients use it.
#pragma once
#include <cstdint>

#include "xl/compute/parallel.h"

namespace xl::kernels {

constexpr int64_t kPartialRows = 32;

inline int64_t partial_tasks(int64_t rows) { return (rows + kPartialRows - 1) / kPartialRows; }

// out[j] = the sum of partial[task * d + j] over the tasks, in task order.
template <typename T>
void add_partials(const T* partial, int64_t tasks, int64_t d, T* out) {
  compute::parallel_for(0, d, 256, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      double sum = 0;
      for (int64_t task = 0; task < tasks; ++task) sum += partial[task * d + j];
      out[j] = static_cast<T>(sum);
    }
  });
}

}  // namespace xl::kernels
