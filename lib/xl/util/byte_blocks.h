// Bytes of unknown length (a pipe, a FIFO, a decompressor's output) gathered in blocks and joined
// once. A string growing by doubling held up to twice (three times, beside a compressed input) what
// was read; blocks of 64 MB are above glibc's largest mmap threshold (32 MB), so each is mapped on
// its own and returned to the system as it is copied out: the peak is the bytes and one block.
#pragma once
#include <cstddef>
#include <ios>
#include <string>
#include <vector>

#include <boost/iostreams/categories.hpp>

namespace xl::io {

class ByteBlocks {
 public:
  // A Boost.Iostreams sink: boost::iostreams::copy(in, boost::ref(blocks)).
  using char_type = char;
  using category = boost::iostreams::sink_tag;

  explicit ByteBlocks(size_t block_bytes = size_t{64} << 20) : block_bytes_(block_bytes) {}
  std::streamsize write(const char* data, std::streamsize n);
  // All the bytes written, in one string; the blocks are released as they are copied.
  std::string take();

 private:
  size_t block_bytes_;
  std::vector<std::string> blocks_;
};

}  // namespace xl::io
