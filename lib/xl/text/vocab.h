// Vocabularies: byte (single bytes; xl's own: all 256 in byte order), char (Unicode code points)
// and word (whitespace tokens), their TSV form (man 5 xl-vocab) and their SHA-256 identity.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "xl/util/setting_origins.h"

namespace xl::text {

enum class VocabType { kByte, kChar, kWord };
std::string to_string(VocabType type);
std::optional<VocabType> vocab_type_named(const std::string& name);  // byte, char or word
VocabType parse_vocab_type(const std::string& name, const std::string& what = "--mode");  // throws 64

// How a word vocab's text becomes words: split at whitespace as it is (none: text already
// tokenized, as WikiText is), or Moses-tokenized first as Hugging Face's TransfoXL tokenizer does.
enum class Pretokenizer { kNone, kMoses };
class Vocab;
Pretokenizer parse_pretokenizer(const std::string& name, const std::string& what = "--pretokenize");  // throws 64
std::string to_string(Pretokenizer pretokenizer);
// Fails (64) on a pretokenizer the vocab type cannot take: only words are pretokenized.
void check_pretokenizer(VocabType type, Pretokenizer pretokenizer);
// Fails on a negative min-count or max-size, naming where it was given (SettingOrigins).
void check_vocab_limits(int64_t min_count, int64_t max_size, const SettingOrigins& origins);
// What a tool reading text with `vocab` uses: --pretokenize as given (`flag`), else what the vocab
// records (logged when that is not none). Fails (64) as parse_pretokenizer and check_pretokenizer.
Pretokenizer pretokenizer_for(const Vocab& vocab, const std::optional<std::string>& flag);
// The pretokenizer a vocab file records, `name` read from `file`: fails (65, naming it) on an
// unknown one or one the type cannot take.
Pretokenizer parse_recorded_pretokenizer(VocabType type, const std::string& name, const std::string& file);

inline constexpr const char* kUnk = "<unk>";
inline constexpr const char* kEos = "<eos>";

class Vocab {
 public:
  Vocab() = default;
  Vocab(VocabType type, std::vector<std::string> pieces, std::vector<int64_t> counts, int specials);
  // index_ holds views into pieces_: a copy must rebuild it (a moved vector keeps its strings
  // where they are, so moves may keep it).
  Vocab(const Vocab& other);
  Vocab& operator=(const Vocab& other);
  Vocab(Vocab&&) = default;
  Vocab& operator=(Vocab&&) = default;

  VocabType type() const { return type_; }
  size_t size() const { return pieces_.size(); }
  int specials() const { return specials_; }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  const std::vector<std::string>& pieces() const { return pieces_; }
  const std::vector<int64_t>& counts() const { return counts_; }
  // -1 when the piece is not in the vocab.
  int32_t find(std::string_view piece) const;
  int32_t unk_id() const { return unk_id_; }
  int32_t eos_id() const { return eos_id_; }
  // How raw text became the words this vocab was built from: what tools that read text with it
  // use unless told otherwise. Not part of the identity (the ids mean the same either way).
  Pretokenizer pretokenizer() const { return pretokenizer_; }
  void set_pretokenizer(Pretokenizer pretokenizer);  // fails (64) on a pretokenizer the type cannot take

  // Fails (65, naming `file`) on what the type cannot hold: duplicate pieces, a byte vocab with
  // specials or pieces other than single bytes, a char vocab piece (after the specials) other than
  // one code point, an empty word, a negative count.
  void check(const std::string& file) const;

  // Identity over type and pieces (not counts): equal hashes mean interchangeable ids.
  std::string sha256() const;
  std::string to_tsv() const;
  // `file` names the source in errors (65 with the line number).
  static Vocab from_tsv(const std::string& text, const std::string& file);

 private:
  VocabType type_ = VocabType::kByte;
  std::vector<std::string> pieces_;
  std::vector<int64_t> counts_;
  int specials_ = 0;
  Pretokenizer pretokenizer_ = Pretokenizer::kNone;
  int32_t unk_id_ = -1, eos_id_ = -1;
  std::unordered_map<std::string_view, int32_t> index_;  // views into pieces_
  void build_index();
};

struct VocabOptions {
  VocabType type = VocabType::kByte;
  int64_t min_count = 1;       // char/word: rarer pieces become <unk>
  int64_t max_size = 0;        // word: keep at most this many entries (0: all)
  bool allow_invalid_utf8 = false;  // char: count invalid bytes as <unk> instead of failing
  Pretokenizer pretokenizer = Pretokenizer::kNone;  // word: applied to the texts, and recorded
};

// A char or word vocab of specials alone would make every piece of text <unk>: fails naming
// `source` (65) and the min-count that left no piece, or the max-size without room for one (as
// SettingOrigins names and codes it).
void check_vocab_has_pieces(const Vocab& vocab, const VocabOptions& opts, const std::string& source,
                            const SettingOrigins& origins);

// Counts pieces over the texts and orders them: specials first, then by falling count, ties by
// byte order of the piece, so identical input gives an identical vocab.
Vocab build_vocab(const std::vector<std::string_view>& texts, const VocabOptions& opts,
                  const std::string& source_name);
// The same with one name per text, for error messages (invalid UTF-8 names its file).
Vocab build_vocab(const std::vector<std::string_view>& texts, const VocabOptions& opts,
                  const std::vector<std::string>& source_names);

// Orders counted pieces into a char or word vocab (what build_vocab does after counting).
Vocab vocab_from_counts(const VocabOptions& opts, std::unordered_map<std::string, int64_t> counts,
                        int64_t eos, int64_t unk);

}  // namespace xl::text
