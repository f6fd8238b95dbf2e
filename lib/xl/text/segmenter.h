// Cuts text into the pieces a vocab type counts: code points (char) or whitespace-separated words
// with an end-of-line marker after every line, empty lines included (word, the WikiText convention);
// with the Moses pretokenizer, each line's words are made by moses_tokenize.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "xl/text/vocab.h"

namespace xl::text {

// Fails (64) on a pretokenizer the vocab type cannot take: only words are pretokenized.
void check_pretokenizer(VocabType type, Pretokenizer pretokenizer);

class Segmenter {
 public:
  enum class Kind { kPiece, kEos, kInvalid };
  // Invalid UTF-8 in char mode fails with 65 unless `allow_invalid`, which yields kInvalid per byte;
  // in Moses-tokenized text it fails with 65. A pretokenizer needs a word vocab (64).
  Segmenter(VocabType type, std::string_view text, bool allow_invalid, std::string source_name,
            Pretokenizer pretokenizer = Pretokenizer::kNone);
  // A piece stays valid until the next call.
  bool next(std::string_view* piece, Kind* kind);

 private:
  VocabType type_;
  std::string_view text_;
  bool allow_invalid_;
  std::string source_;
  size_t pos_ = 0;
  bool line_open_ = false;  // word mode: the current line still owes its <eos>
  Pretokenizer pretokenizer_;
  std::vector<std::string> line_words_;  // Moses: the current line's words, from next_word_ on
  size_t next_word_ = 0;
  bool next_moses(std::string_view* piece, Kind* kind);
};

}  // namespace xl::text
