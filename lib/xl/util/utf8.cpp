#include "xl/util/utf8.h"

namespace xl {

int utf8_decode(std::string_view s, size_t pos, uint32_t* cp) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char c = byte(pos);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  int len;
  uint32_t v, min;
  if ((c & 0xE0) == 0xC0) len = 2, v = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) len = 3, v = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) len = 4, v = c & 0x07, min = 0x10000;
  else return 0;
  if (pos + len > s.size()) return 0;
  for (int i = 1; i < len; ++i) {
    unsigned char d = byte(pos + i);
    if ((d & 0xC0) != 0x80) return 0;
    v = (v << 6) | (d & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

void utf8_append(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace xl
