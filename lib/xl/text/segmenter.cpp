#include "xl/text/segmenter.h"

#include "xl/text/moses.h"
#include "xl/util/utf8.h"
#include "xl/util/error.h"

namespace xl::text {

Segmenter::Segmenter(VocabType type, std::string_view text, bool allow_invalid, std::string source_name,
                     Pretokenizer pretokenizer)
    : type_(type), text_(text), allow_invalid_(allow_invalid), source_(std::move(source_name)), pretokenizer_(pretokenizer) {
  check_pretokenizer(type, pretokenizer);
}

void check_pretokenizer(VocabType type, Pretokenizer pretokenizer) {
  XL_CHECK(pretokenizer == Pretokenizer::kNone || type == VocabType::kWord, kExitUsage,
           "--pretokenize moses makes words: it needs a word vocab, not a " << to_string(type) << " one");
}

namespace {
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
}  // namespace

bool Segmenter::next(std::string_view* piece, Kind* kind) {
  if (type_ == VocabType::kByte) {
    if (pos_ >= text_.size()) return false;
    *piece = text_.substr(pos_++, 1);
    *kind = Kind::kPiece;
    return true;
  }
  if (type_ == VocabType::kChar) {
    if (pos_ >= text_.size()) return false;
    uint32_t cp;
    int len = utf8_decode(text_, pos_, &cp);
    if (len == 0) {
      XL_CHECK(allow_invalid_, kExitDataErr,
               source_ << ": invalid UTF-8 at byte " << pos_ << " (use --allow-invalid-utf8 to map it to <unk>)");
      *piece = text_.substr(pos_++, 1);
      *kind = Kind::kInvalid;
      return true;
    }
    *piece = text_.substr(pos_, static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    *kind = Kind::kPiece;
    return true;
  }
  if (pretokenizer_ == Pretokenizer::kMoses) return next_moses(piece, kind);
  // Word mode.
  while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
  if (pos_ >= text_.size()) {
    if (line_open_) {  // a last line without its newline still ends with <eos>
      line_open_ = false;
      *kind = Kind::kEos;
      *piece = {};
      return true;
    }
    return false;
  }
  if (text_[pos_] == '\n') {
    ++pos_;
    line_open_ = false;
    *kind = Kind::kEos;
    *piece = {};
    return true;
  }
  size_t start = pos_;
  while (pos_ < text_.size() && !is_space(text_[pos_]) && text_[pos_] != '\n') ++pos_;
  *piece = text_.substr(start, pos_ - start);
  *kind = Kind::kPiece;
  line_open_ = true;
  return true;
}

bool Segmenter::next_moses(std::string_view* piece, Kind* kind) {
  while (next_word_ >= line_words_.size()) {
    if (line_open_) {
      line_open_ = false;
      *kind = Kind::kEos;
      *piece = {};
      return true;
    }
    if (pos_ >= text_.size()) return false;
    size_t end = text_.find('\n', pos_);
    const bool ended = end != std::string_view::npos;
    if (!ended) end = text_.size();
    std::u32string line;
    line.reserve(end - pos_);
    for (size_t at = pos_; at < end;) {
      uint32_t cp;
      int len = utf8_decode(text_, at, &cp);
      XL_CHECK(len > 0, kExitDataErr, source_ << ": invalid UTF-8 at byte " << at << " (--pretokenize moses reads UTF-8 text)");
      line.push_back(static_cast<char32_t>(cp));
      at += static_cast<size_t>(len);
    }
    line_words_ = moses_tokenize(std::move(line));
    next_word_ = 0;
    pos_ = ended ? end + 1 : end;
    line_open_ = ended || !line_words_.empty();  // every line ends with <eos>; a last one without its newline if it has words
  }
  *piece = line_words_[next_word_++];
  *kind = Kind::kPiece;
  return true;
}

}  // namespace xl::text
