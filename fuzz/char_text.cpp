// Text in char mode (UTF-8): any bytes are refused cleanly (invalid UTF-8 is 65) or build a char
// vocab under which they encode and decode back to themselves.
#include "fuzz_support.h"
#include "xl/text/tokenizer.h"
#include "xl/text/vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  xl::fuzz::expect_clean_refusal([&] {
    xl::text::VocabOptions opts;
    opts.type = xl::text::VocabType::kChar;
    const auto vocab = xl::text::build_vocab({std::string_view(text)}, opts, "fuzz.txt");
    xl::text::Tokenizer tok(vocab);
    std::vector<int32_t> ids;
    xl::text::EncodeStats stats;
    tok.encode(text, "fuzz.txt", &ids, &stats);
    if (tok.decode(ids) != text) xl::fuzz::finding("char mode does not round-trip");
  });
  return 0;
}
