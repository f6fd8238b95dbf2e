// Raw text Moses-tokenized into words: any bytes are refused cleanly (invalid UTF-8 is 65) or build
// a word vocab under which they encode without <unk>, into words that split at whitespace again as
// they were made (decoded and read back without the pretokenizer, the same ids), the same in
// three chunks as in one, and whose lines detokenize word by word (xl-generate's writer) into the
// text they detokenize to at once.
#include "fuzz_support.h"
#include "xl/text/moses.h"
#include "xl/text/tokenizer.h"
#include "xl/text/vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  xl::fuzz::expect_clean_refusal([&] {
    xl::text::VocabOptions opts;
    opts.type = xl::text::VocabType::kWord;
    opts.pretokenizer = xl::text::Pretokenizer::kMoses;
    const auto vocab = xl::text::build_vocab({std::string_view(text)}, opts, "fuzz.txt");
    std::vector<int32_t> ids, again;
    xl::text::EncodeStats stats;
    xl::text::Tokenizer(vocab, false, xl::text::Pretokenizer::kMoses).encode(text, "fuzz.txt", &ids, &stats);
    if (stats.unknown != 0) xl::fuzz::finding("a word of the text is not in its vocab");
    xl::text::Tokenizer plain(vocab);
    plain.encode(plain.decode(ids), "decoded", &again, &stats);
    if (again != ids) xl::fuzz::finding("Moses words do not split at whitespace as they were made");
    if (xl::text::moses_pretokenize(text, "fuzz.txt", 3) != xl::text::moses_pretokenize(text, "fuzz.txt", 1))
      xl::fuzz::finding("three chunks pretokenize otherwise than one");
    std::string whole, streamed;
    std::vector<std::string> line;
    xl::text::MosesLineWriter writer;
    for (int32_t id : ids) {
      if (id == vocab.eos_id()) {
        whole += xl::text::moses_detokenize(line) + "\n";
        streamed += writer.end_line();
        line.clear();
      } else {
        line.push_back(vocab.piece(id));
        streamed += writer.add(vocab.piece(id));
      }
    }
    if (whole + xl::text::moses_detokenize(line) + "\n" != streamed + writer.end_line())
      xl::fuzz::finding("word by word the text is not the line's text");
  });
  return 0;
}
