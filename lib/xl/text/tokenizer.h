// Text <-> token ids with a given vocab.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "xl/text/vocab.h"

namespace xl::text {

struct EncodeStats {
  int64_t tokens = 0;
  int64_t unknown = 0;  // pieces not in the vocab, mapped to <unk>
};

class Tokenizer {
 public:
  explicit Tokenizer(const Vocab& vocab, bool allow_invalid_utf8 = false, Pretokenizer pretokenizer = Pretokenizer::kNone);
  // Appends the ids of `text` to `out`. Fails (65) on a piece the vocab cannot represent when it
  // has no <unk>.
  void encode(std::string_view text, const std::string& source_name, std::vector<int32_t>* out,
              EncodeStats* stats) const;
  // Word pieces joined by spaces, a line per <eos>; with the Moses pretokenizer each line is
  // detokenized (moses_detokenize).
  std::string decode(const int32_t* ids, size_t n) const;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }

 private:
  const std::string& piece(int32_t id) const;  // fails (65) on an id outside the vocab
  const Vocab& vocab_;
  bool allow_invalid_;
  Pretokenizer pretokenizer_;
  std::vector<int32_t> byte_table_;  // byte -> id for byte vocabs (-1: not in the vocab)
  std::vector<int32_t> char_table_;  // code point -> id for char vocabs (-1: unknown)
};

}  // namespace xl::text
