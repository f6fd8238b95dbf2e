// The vocab TSV reader (xl-build-vocab's output, read by xl-tokenize --vocab): any bytes are
// refused cleanly or read into a vocab that writes back to the same vocab.
#include "fuzz_support.h"
#include "xl/text/vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  xl::fuzz::expect_clean_refusal([&] {
    const auto vocab = xl::text::Vocab::from_tsv(text, "fuzz.tsv");
    const auto again = xl::text::Vocab::from_tsv(vocab.to_tsv(), "again.tsv");
    if (again.sha256() != vocab.sha256() || again.pretokenizer() != vocab.pretokenizer())
      xl::fuzz::finding("a vocab read back differs from the one written");
  });
  return 0;
}
