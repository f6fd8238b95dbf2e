#include "xl/text/segmenter.h"

#include "xl/util/utf8.h"
#include "xl/util/error.h"
#include "xl/util/log.h"

namespace xl::text {

Segmenter::Segmenter(VocabType type, std::string_view text, bool allow_invalid, std::string source_name)
    : type_(type), text_(text), allow_invalid_(allow_invalid), source_(std::move(source_name)) {}

bool python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t line_end_length(std::string_view text, size_t pos) {
  if (text[pos] == '\n') return 1;
  if (text[pos] != '\r') return 0;
  return pos + 1 < text.size() && text[pos + 1] == '\n' ? 2 : 1;
}

namespace {

// The length of the character at text[pos] (1 for a byte that starts no valid UTF-8), and
// whether it is whitespace.
size_t char_length(std::string_view text, size_t pos, bool* space) {
  const auto c = static_cast<unsigned char>(text[pos]);
  if (c < 0x80) {
    *space = python_space(c);
    return 1;
  }
  uint32_t cp;
  const int len = utf8_decode(text, pos, &cp);
  *space = len > 0 && python_space(cp);
  return len > 0 ? static_cast<size_t>(len) : 1;
}

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
  auto end_line = [&] {
    line_open_ = false;
    *kind = Kind::kEos;
    *piece = {};
    return true;
  };
  bool space = true;
  size_t len = 0;
  while (pos_ < text_.size()) {
    if (const size_t end = line_end_length(text_, pos_)) {
      pos_ += end;
      return end_line();
    }
    len = char_length(text_, pos_, &space);
    if (!space) break;
    pos_ += len;
  }
  if (pos_ >= text_.size()) return line_open_ && end_line();  // a last line without its newline ends too
  const size_t start = pos_;
  do pos_ += len;  // line ends are spaces too
  while (pos_ < text_.size() && (len = char_length(text_, pos_, &space), !space));
  *piece = text_.substr(start, pos_ - start);
  *kind = Kind::kPiece;
  line_open_ = true;
  return true;
}

void warn_byte_order_mark(std::string_view text, VocabType type, const std::string& name) {
  if (type == VocabType::kByte || text.substr(0, 3) != "\xEF\xBB\xBF") return;
  XL_WARN(name << ": starts with a UTF-8 byte-order mark (U+FEFF), which stays in the text as Transformer-XL keeps it"
               << (type == VocabType::kWord ? ", glued to the first word" : ", a character of its own")
               << "; drop it with sed -i '1s/^\\xEF\\xBB\\xBF//' " << name);
}

}  // namespace xl::text
