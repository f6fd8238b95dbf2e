#include "xl/train/batcher.h"

#include "xl/util/error.h"

namespace xl::train {

StreamBatcher::StreamBatcher(const std::vector<int32_t>& ids, int64_t batch_size, int64_t tgt_len)
    : tgt_len_(tgt_len) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t len = n / batch_size;
  XL_CHECK(len >= 2, kExitDataErr,
           "the training split has " << n << " tokens: too few for " << batch_size << " streams of at least 2 tokens");
  streams_ = torch::from_blob(const_cast<int32_t*>(ids.data()), {batch_size, len}, torch::kInt32).clone();
}

Segment StreamBatcher::next(Cursor* c) const {
  const int64_t len = streams_.size(1);
  Segment s;
  if (c->offset >= len - 1) {
    c->offset = 0;
    ++c->epoch;
  }
  s.new_epoch = c->offset == 0;
  const int64_t t = std::min(tgt_len_, len - 1 - c->offset);
  s.input = streams_.slice(1, c->offset, c->offset + t).to(torch::kLong);
  s.target = streams_.slice(1, c->offset + 1, c->offset + t + 1).to(torch::kLong);
  c->offset += t;
  return s;
}

double StreamBatcher::epoch_progress(const Cursor& c) const {
  return static_cast<double>(c.epoch) + static_cast<double>(c.offset) / static_cast<double>(streams_.size(1) - 1);
}

}  // namespace xl::train
