// Each stream's newest rows, [B, n, ...], kept in a buffer with room behind them ([B, capacity,
// ...]): appending t rows writes only those rows, and dropping the oldest only moves the window's
// start; the rows move to the front of a new buffer when the room runs out. Evaluation keeps its
// memory's key/value projections so. Copying all of them into a new tensor every segment (with the
// memory's inputs beside them) ran long-memory evaluation slower and in twice the memory, and cost
// generation a copy of the memory per token (measured: bench/HISTORY.md, long-memory evaluation).
//
// Windows are values whose copies share the buffer. A window grows in place only into rows that no
// other window has grown into, so two memories derived from one state never write the same rows.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace xl::model {

class RowWindow {
 public:
  RowWindow() = default;
  // A window over all rows of `rows` [B, n, ...] (shared, no room).
  static RowWindow of(const torch::Tensor& rows);

  const torch::Tensor& rows() const { return rows_; }  // [B, n, ...], a view; undefined when empty
  bool empty() const { return !rows_.defined(); }
  int64_t length() const { return empty() ? 0 : rows_.size(1); }

  // This window followed by t more rows for the caller to write: rows()[:, n:n+t]. A new buffer of
  // max(capacity, n + t) rows per stream is made when this one has no room for them (or another
  // window grew into it); `like` [B, *, ...] gives the batch, row shape and options when empty.
  RowWindow grown(int64_t t, int64_t capacity, const torch::Tensor& like) const;
  // The newest n rows (empty when n <= 0).
  RowWindow newest(int64_t n) const;
  // Streams [begin, end).
  RowWindow streams(int64_t begin, int64_t end) const;

 private:
  RowWindow(torch::Tensor buffer, int64_t start, int64_t length, std::shared_ptr<int64_t> claimed);

  torch::Tensor buffer_;               // [B, capacity, ...]
  int64_t start_ = 0;                  // first row of the window in the buffer
  std::shared_ptr<int64_t> claimed_;   // rows [0, *claimed_) of the buffer belong to some window
  torch::Tensor rows_;                 // buffer_[:, start_:start_ + length]
};

// Rows a window keeps for a memory of mem_len slots that grows by t rows a segment: the memory,
// the segment, and room for about mem_len / 4 more, so that the rows move once every few segments.
int64_t row_window_capacity(int64_t mem_len, int64_t t);

}  // namespace xl::model
