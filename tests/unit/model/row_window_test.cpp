// RowWindow (model/row_window.h) against a plain list of each stream's rows: over many grow-and-
// drop rounds the window holds exactly the newest rows, grows in place while its buffer has room
// (no copy: the same storage), moves to a new buffer when the room runs out, and never lets two
// windows grown from one state write the same rows.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "xl/model/row_window.h"

using xl::model::RowWindow;
using torch::Tensor;

namespace {

// Grows `w` by the rows `add` [B, t, 3] (written into the window as its user would) and keeps the newest `keep`.
RowWindow append(const RowWindow& w, const Tensor& add, int64_t capacity, int64_t keep) {
  RowWindow g = w.grown(add.size(1), capacity, add);
  g.rows().narrow(1, g.length() - add.size(1), add.size(1)).copy_(add);
  return g.newest(keep);
}

const void* storage_of(const RowWindow& w) { return w.rows().storage().data(); }

}  // namespace

TEST(RowWindow, HoldsTheNewestRowsAndMovesOnlyWhenTheRoomRunsOut) {
  torch::manual_seed(5);
  const int64_t streams = 3, keep = 9, t = 4, capacity = xl::model::row_window_capacity(keep, t);
  EXPECT_EQ(capacity, keep + t + t);  // room: the larger of t and keep / 4
  RowWindow w;
  Tensor all = torch::empty({streams, 0, 3});
  int64_t moves = 0;
  for (int round = 0; round < 20; ++round) {
    Tensor add = torch::randn({streams, t, 3});
    all = torch::cat({all, add}, 1);
    const void* before = w.empty() ? nullptr : storage_of(w);
    w = append(w, add, capacity, keep);
    if (storage_of(w) != before) ++moves;
    const int64_t n = std::min<int64_t>(all.size(1), keep);
    ASSERT_EQ(w.length(), n) << "round " << round;
    ASSERT_TRUE(torch::equal(w.rows(), all.narrow(1, all.size(1) - n, n))) << "round " << round;
  }
  // 9 kept + 4 new rows in 17: a buffer in round 0, in place until round 4, then every other round.
  EXPECT_EQ(moves, 1 + 8);
}

TEST(RowWindow, TwoWindowsFromOneStateNeverShareNewRows) {
  const Tensor base = torch::arange(2 * 4 * 3, torch::kFloat).view({2, 4, 3});
  RowWindow state = RowWindow().grown(4, 20, base);
  state.rows().copy_(base);
  const Tensor a_rows = torch::full({2, 2, 3}, 1.0f), b_rows = torch::full({2, 2, 3}, 2.0f);
  RowWindow a = append(state, a_rows, 20, 100);
  RowWindow b = append(state, b_rows, 20, 100);
  EXPECT_EQ(storage_of(a), storage_of(state));  // the first grows in place
  EXPECT_NE(storage_of(b), storage_of(state));  // the second may not write where a did
  EXPECT_TRUE(torch::equal(a.rows(), torch::cat({base, a_rows}, 1)));
  EXPECT_TRUE(torch::equal(b.rows(), torch::cat({base, b_rows}, 1)));
  EXPECT_TRUE(torch::equal(state.rows(), base));

  // So do a window cut to some of the streams and the whole.
  RowWindow first = append(a.streams(0, 1), torch::full({1, 1, 3}, 3.0f), 20, 100);
  RowWindow whole = append(a, torch::full({2, 1, 3}, 4.0f), 20, 100);
  EXPECT_EQ(first.rows().size(0), 1);
  EXPECT_TRUE(torch::equal(first.rows().narrow(1, 6, 1), torch::full({1, 1, 3}, 3.0f)));
  EXPECT_TRUE(torch::equal(whole.rows().narrow(1, 6, 1), torch::full({2, 1, 3}, 4.0f)));
  EXPECT_TRUE(torch::equal(whole.rows().narrow(1, 0, 6), a.rows()));
}

TEST(RowWindow, AWindowOverAnotherTensorCopiesBeforeItGrows) {
  const Tensor rows = torch::randn({2, 5, 3});
  const Tensor outside = torch::randn({2, 8, 3});
  outside.narrow(1, 0, 5).copy_(rows);
  const Tensor before = outside.clone();
  RowWindow w = RowWindow::of(outside.narrow(1, 0, 5));
  RowWindow g = append(w, torch::randn({2, 2, 3}), 16, 100);
  EXPECT_TRUE(torch::equal(outside, before));  // the rows behind the view belong to someone else
  EXPECT_TRUE(torch::equal(g.rows().narrow(1, 0, 5), rows));
  EXPECT_EQ(g.rows().storage().nbytes(), 2 * 16 * 3 * sizeof(float));
  EXPECT_TRUE(w.newest(0).empty());
  EXPECT_EQ(w.newest(3).length(), 3);
  EXPECT_TRUE(torch::equal(w.newest(3).rows(), rows.narrow(1, 2, 3)));
}
