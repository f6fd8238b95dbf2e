// Cuts text into the pieces a vocab type counts: code points (char) or whitespace-separated words
// with an end-of-line marker after every line, empty lines included (word, the WikiText convention).
// Words and lines end where Transformer-XL's vocab ends them: it reads files with Python's
// universal newlines and splits each line with str.split().
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include "xl/text/vocab.h"

namespace xl::text {

// Python's str.isspace(), where str.split() and strip() cut (Unicode's spaces beside ASCII's).
bool python_space(char32_t c);
// The length of the line end at text[pos] as Python's universal newlines read it: 1 for \n or a
// lone \r, 2 for \r\n, 0 for none.
size_t line_end_length(std::string_view text, size_t pos);

// Warns when a char or word text starts with a UTF-8 byte-order mark (Windows editors write one):
// Transformer-XL keeps U+FEFF as text, so it becomes a character of its own, or part of the first
// word ("\uFEFFThe" beside "The"); xl keeps it too, for the same vocab, and says how to drop it.
void warn_byte_order_mark(std::string_view text, VocabType type, const std::string& name);

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
