// Transformer-XL batching: a split is cut into B parallel streams (the tail that does not fill
// all B streams is dropped) and consumed in tgt_len segments; memory is carried across segments.
// The cursor (epoch, offset) is exact, so a resumed run reads the very next segment.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace xl::train {

struct Cursor {
  int64_t epoch = 0;
  int64_t offset = 0;  // position in each stream of the next segment's first input token
};

struct Segment {
  torch::Tensor input, target;  // [B, t] int64
  bool new_epoch = false;       // the first segment of an epoch: memories must be reset
};

class StreamBatcher {
 public:
  StreamBatcher(const std::vector<int32_t>& ids, int64_t batch_size, int64_t tgt_len);
  int64_t stream_length() const { return streams_.size(1); }
  int64_t tokens_per_epoch() const { return streams_.size(0) * (streams_.size(1) - 1); }
  // The segment at the cursor, advancing it (wrapping to the next epoch at the end).
  Segment next(Cursor* cursor) const;
  // Fraction of the current epoch done.
  double epoch_progress(const Cursor& c) const;

 private:
  torch::Tensor streams_;  // [B, L] int32
  int64_t tgt_len_;
};

}  // namespace xl::train
