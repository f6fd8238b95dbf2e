// Minimal UTF-8 decoding/encoding: char-level vocabularies, printable error lines.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace xl {

// Decodes one code point at s[pos]; returns its length in bytes, or 0 if the bytes there are not
// valid UTF-8 (overlong forms, surrogates and values past U+10FFFF are invalid).
int utf8_decode(std::string_view s, size_t pos, uint32_t* cp);
void utf8_append(uint32_t cp, std::string* out);

}  // namespace xl
