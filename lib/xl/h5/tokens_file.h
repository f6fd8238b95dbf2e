// The xl tokens file (man 5 xl-tokens): named splits of token ids with the vocab embedded.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "xl/h5/formats.h"
#include "xl/h5/h5.h"
#include "xl/text/vocab.h"

namespace xl::h5 {


struct SplitSource {
  std::string name;    // file the split came from ("<stdin>" for a pipe)
  std::string sha256;  // of the decompressed text
  int64_t bytes = 0;
  int64_t unknown = 0;  // pieces mapped to <unk>
};

struct TokenSplit {
  std::string name;  // train, valid, test
  std::vector<int32_t> ids;
  SplitSource source;
};

struct TokensMeta {
  std::string created_by;
  std::string command_line;
  std::string source_sha256;  // of the whole input when one input was split
  int64_t source_bytes = 0;
  bool compress = false;
};

// Writes a complete tokens file into `file` (created by the caller, on disk or in memory).
void write_tokens(File& file, const text::Vocab& vocab, const std::vector<TokenSplit>& splits,
                  const TokensMeta& meta);

// Writes the vocab under `group` (also used by checkpoints).
void write_vocab(hid_t loc, const std::string& group, const text::Vocab& vocab);
text::Vocab read_vocab(hid_t loc, const std::string& group, const std::string& file);
// The vocab of `path` ("-": stdin): a TSV (man 5 xl-vocab), or the one embedded in an xl tokens
// file or checkpoint (65 naming the file for an HDF5 file without one, or a torch.save file).
text::Vocab load_vocab(const std::string& path);
// The same from the file's bytes; `name` names it in errors.
text::Vocab vocab_of_bytes(std::string bytes, const std::string& name);

class TokensFile {
 public:
  // "-" reads an HDF5 image from stdin. Fails with 65 for anything but an xl tokens file.
  static TokensFile open(const std::string& path);

  const std::string& name() const { return file_.name(); }
  const text::Vocab& vocab() const { return vocab_; }
  std::vector<std::string> split_names() const;  // train, valid, test order first
  bool has_split(const std::string& split) const;
  int64_t split_length(const std::string& split) const;
  // Fails with 65 naming the file and the available splits when `split` is absent, or when it holds
  // fewer than `min_tokens` tokens, followed by `remedy` (the flag that picks another split) when given.
  std::vector<int32_t> read_split(const std::string& split, const std::string& remedy = "", int64_t min_tokens = 0) const;
  std::string attr(const std::string& key) const;  // "" when absent
  int64_t attr_int(const std::string& key) const;  // -1 when absent
  SplitSource split_source(const std::string& split) const;

 private:
  File file_;
  text::Vocab vocab_;
};

}  // namespace xl::h5
