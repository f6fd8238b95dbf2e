#include "xl/model/row_window.h"

#include <algorithm>

namespace xl::model {

RowWindow::RowWindow(torch::Tensor buffer, int64_t start, int64_t length, std::shared_ptr<int64_t> claimed)
    : buffer_(std::move(buffer)), start_(start), claimed_(std::move(claimed)) {
  if (length > 0) rows_ = buffer_.narrow(1, start_, length);
}

RowWindow RowWindow::of(const torch::Tensor& rows) {
  if (!rows.defined() || rows.size(1) == 0) return {};
  return RowWindow(rows, 0, rows.size(1), std::make_shared<int64_t>(rows.size(1)));
}

RowWindow RowWindow::grown(int64_t t, int64_t capacity, const torch::Tensor& like) const {
  const int64_t n = length(), end = start_ + n;
  if (!empty() && *claimed_ == end && end + t <= buffer_.size(1)) {
    *claimed_ = end + t;
    return RowWindow(buffer_, start_, n + t, claimed_);
  }
  std::vector<int64_t> shape = (empty() ? like : rows_).sizes().vec();
  shape[1] = std::max(capacity, n + t);
  torch::Tensor buffer = torch::empty(shape, (empty() ? like : rows_).options());
  if (n > 0) buffer.narrow(1, 0, n).copy_(rows_);
  return RowWindow(std::move(buffer), 0, n + t, std::make_shared<int64_t>(n + t));
}

RowWindow RowWindow::newest(int64_t n) const {
  if (n <= 0) return {};
  if (n >= length()) return *this;
  return RowWindow(buffer_, start_ + length() - n, n, claimed_);
}

RowWindow RowWindow::streams(int64_t begin, int64_t end) const {
  if (empty()) return {};
  return RowWindow(buffer_.slice(0, begin, end), start_, length(), claimed_);
}

int64_t row_window_capacity(int64_t mem_len, int64_t t) { return mem_len + t + std::max(t, mem_len / 4); }

}  // namespace xl::model
