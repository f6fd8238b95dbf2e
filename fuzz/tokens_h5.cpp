// The tokens file reader (xl-tokenize's HDF5 output): any bytes are refused cleanly, or every
// split reads back with ids inside the embedded vocab.
#include "fuzz_support.h"
#include "xl/h5/tokens_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = xl::fuzz::input_file(data, size, ".h5");
  xl::fuzz::expect_clean_refusal([&] {
    const auto tokens = xl::h5::TokensFile::open(path);
    for (const auto& split : tokens.split_names()) {
      const auto ids = tokens.read_split(split);
      if (static_cast<int64_t>(ids.size()) != tokens.split_length(split)) xl::fuzz::finding("split length disagrees");
      for (int32_t id : ids)
        if (id < 0 || static_cast<size_t>(id) >= tokens.vocab().size()) xl::fuzz::finding("token id outside the vocab in split " + split);
    }
  });
  return 0;
}
