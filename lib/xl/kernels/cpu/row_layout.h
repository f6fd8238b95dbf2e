// The layout of an operand [B, K, ...] made of rows (dims 2 on, in their standard layout), K rows
// per stream, that the kernels read through pointers: the floats in a row, from one row to the
// next, and from one stream to the next. Evaluation's kept keys and values lie in a buffer with
// room behind each stream's rows (RowWindow), MGK's extra keys beside the keys and values.
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace xl::kernels {

inline int64_t row_floats(const torch::Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 2; d < t.dim(); ++d) n *= t.size(d);
  return n;
}
// (A size-1 dimension's stride says nothing: even a contiguous tensor's may be anything.)
inline int64_t row_stride(const torch::Tensor& t) { return t.size(1) == 1 ? row_floats(t) : t.stride(1); }
inline int64_t stream_stride(const torch::Tensor& t) {
  return t.size(0) == 1 ? t.size(1) * row_stride(t) : t.stride(0);
}
// Whether t's rows are contiguous, evenly spaced, and its streams do not overlap.
inline bool rows_are_strided(const torch::Tensor& t) {
  if (t.dim() < 3) return false;
  int64_t expect = 1;
  for (int64_t d = t.dim() - 1; d >= 2; expect *= t.size(d), --d)
    if (t.size(d) != 1 && t.stride(d) != expect) return false;
  return row_stride(t) >= expect && stream_stride(t) >= t.size(1) * row_stride(t);
}

}  // namespace xl::kernels
