// Cuts text into the pieces a vocab type counts: code points (char) or whitespace-separated words
// with an end-of-line marker after every line, empty lines included (word, the WikiText convention).
#pragma once
#include <string>
#include <string_view>

#include "xl/text/vocab.h"

namespace xl::text {

class Segmenter {
 public:
  enum class Kind { kPiece, kEos, kInvalid };
  // Invalid UTF-8 in char mode fails with 65 unless `allow_invalid`, which yields kInvalid per byte.
  Segmenter(VocabType type, std::string_view text, bool allow_invalid, std::string source_name);
  bool next(std::string_view* piece, Kind* kind);

 private:
  VocabType type_;
  std::string_view text_;
  bool allow_invalid_;
  std::string source_;
  size_t pos_ = 0;
  bool line_open_ = false;  // word mode: the current line has content not yet closed by <eos>
};

}  // namespace xl::text
