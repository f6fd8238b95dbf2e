#include "xl/text/segmenter.h"

#include "xl/util/utf8.h"
#include "xl/util/error.h"

namespace xl::text {

Segmenter::Segmenter(VocabType type, std::string_view text, bool allow_invalid, std::string source_name)
    : type_(type), text_(text), allow_invalid_(allow_invalid), source_(std::move(source_name)) {}

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

}  // namespace xl::text
