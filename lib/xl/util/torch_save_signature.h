// How a torch.save file starts, in its two formats: a zip archive (PyTorch 1.6 and later), or the
// legacy pickles, whose first is the magic number (protocol 2, a LONG1 of 10 bytes). For the torch
// reader, and for readers of other files that name such a file given in their place.
#pragma once
#include <string_view>

namespace xl {

inline bool is_torch_zip(std::string_view bytes) { return bytes.substr(0, 4) == std::string_view("PK\x03\x04", 4); }

inline bool is_torch_legacy(std::string_view bytes) {
  static constexpr std::string_view kMagic("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14);
  return bytes.substr(0, kMagic.size()) == kMagic;
}

}  // namespace xl
