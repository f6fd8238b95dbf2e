// How a torch.save file starts, in its two formats: a zip archive (PyTorch 1.6 and later), or the
// legacy pickles, whose first is the magic number (protocol 2, a LONG1 of 10 bytes); and a plain
// pickle. For the torch reader, and for readers of other files that name such a file given in
// their place.
#pragma once
#include <string_view>

namespace xl {

inline bool is_torch_zip(std::string_view bytes) { return bytes.substr(0, 4) == std::string_view("PK\x03\x04", 4); }

inline bool is_torch_legacy(std::string_view bytes) {
  static constexpr std::string_view kMagic("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14);
  return bytes.substr(0, kMagic.size()) == kMagic;
}

// A pickle.dump file of protocol 2 to 5 (Hugging Face's vocab.pkl from save_vocabulary), which the
// torch reader also takes; the legacy torch.save format starts as one too.
inline bool is_plain_pickle(std::string_view bytes) {
  return bytes.size() > 2 && bytes[0] == '\x80' && bytes[1] >= 2 && bytes[1] <= 5 && !is_torch_legacy(bytes);
}

}  // namespace xl
