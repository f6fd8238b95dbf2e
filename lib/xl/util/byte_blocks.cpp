#include "xl/util/byte_blocks.h"

#include <algorithm>

namespace xl::io {

std::streamsize ByteBlocks::write(const char* data, std::streamsize n) {
  for (size_t left = static_cast<size_t>(n); left > 0;) {
    if (blocks_.empty() || blocks_.back().size() == block_bytes_) {
      blocks_.emplace_back();
      blocks_.back().reserve(block_bytes_);  // address space only: pages are touched as written
    }
    std::string& block = blocks_.back();
    const size_t take = std::min(left, block_bytes_ - block.size());
    block.append(data, take);
    data += take;
    left -= take;
  }
  return n;
}

std::string ByteBlocks::take() {
  size_t total = 0;
  for (const auto& block : blocks_) total += block.size();
  std::string all;
  all.reserve(total);
  for (auto& block : blocks_) {
    all += block;
    std::string().swap(block);
  }
  blocks_.clear();
  return all;
}

}  // namespace xl::io
