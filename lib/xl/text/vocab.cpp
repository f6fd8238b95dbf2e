#include "xl/text/vocab.h"

#include <algorithm>
#include <array>
#include <sstream>

#include "xl/text/escape.h"
#include "xl/text/moses.h"
#include "xl/text/segmenter.h"
#include "xl/util/utf8.h"
#include "xl/util/error.h"
#include "xl/util/log.h"
#include "xl/util/sha256.h"

namespace xl::text {

std::string to_string(VocabType type) {
  switch (type) {
    case VocabType::kByte: return "byte";
    case VocabType::kChar: return "char";
    case VocabType::kWord: return "word";
  }
  return "?";
}

std::optional<VocabType> vocab_type_named(const std::string& name) {
  if (name == "byte") return VocabType::kByte;
  if (name == "char") return VocabType::kChar;
  if (name == "word") return VocabType::kWord;
  return std::nullopt;
}

VocabType parse_vocab_type(const std::string& name, const std::string& what) {
  const auto type = vocab_type_named(name);
  XL_CHECK(type, kExitUsage, what << ": unknown vocab mode '" << name << "' (use byte, char or word)");
  return *type;
}

Pretokenizer parse_pretokenizer(const std::string& name, const std::string& what) {
  if (name == "none") return Pretokenizer::kNone;
  if (name == "moses") return Pretokenizer::kMoses;
  XL_FAIL(kExitUsage, what << ": unknown '" << name << "' (use none or moses)");
}

std::string to_string(Pretokenizer pretokenizer) {
  return pretokenizer == Pretokenizer::kMoses ? "moses" : "none";
}

void check_pretokenizer(VocabType type, Pretokenizer pretokenizer) {
  XL_CHECK(pretokenizer == Pretokenizer::kNone || type == VocabType::kWord, kExitUsage,
           "--pretokenize moses makes words: it needs a word vocab, not a " << to_string(type) << " one");
}

void check_vocab_limits(int64_t min_count, int64_t max_size, const SettingOrigins& origins) {
  if (min_count < 0) origins.fail("min-count", "must not be negative");
  if (max_size < 0) origins.fail("max-size", "must not be negative (0: all)");
}

void check_vocab_has_pieces(const Vocab& vocab, const VocabOptions& opts, const std::string& source,
                            const SettingOrigins& origins) {
  if (vocab.type() == VocabType::kByte || vocab.size() > static_cast<size_t>(vocab.specials())) return;
  const std::string specials = vocab.type() == VocabType::kWord ? "<eos> and <unk>" : "<unk>";
  if (opts.max_size > 0 && opts.max_size <= vocab.specials())
    origins.fail("max-size", "of " + std::to_string(opts.max_size) + " leaves no room beside " + specials);
  const char* piece = vocab.type() == VocabType::kWord ? "word" : "character";
  XL_CHECK(opts.min_count <= 1, kExitDataErr,
           source << ": no " << piece << " occurs " << opts.min_count << " times (" << origins.name("min-count")
                  << "): the vocab would hold only " << specials);
  XL_FAIL(kExitDataErr, source << ": no " << piece << " to build the vocab from: the vocab would hold only " << specials);
}

Pretokenizer parse_recorded_pretokenizer(VocabType type, const std::string& name, const std::string& file) {
  XL_CHECK(name == "none" || name == "moses", kExitDataErr, file << ": unknown pretokenize '" << name << "' in the vocab");
  const Pretokenizer p = parse_pretokenizer(name);
  XL_CHECK(p == Pretokenizer::kNone || type == VocabType::kWord, kExitDataErr,
           file << ": a " << to_string(type) << " vocab says pretokenize=" << name << " (only word vocabs are pretokenized)");
  return p;
}

Pretokenizer pretokenizer_for(const Vocab& vocab, const std::optional<std::string>& flag) {
  if (flag) {
    const Pretokenizer given = parse_pretokenizer(*flag);
    check_pretokenizer(vocab.type(), given);
    return given;
  }
  if (vocab.pretokenizer() != Pretokenizer::kNone)
    XL_INFO("--pretokenize " << to_string(vocab.pretokenizer())
            << ", as the vocab records (give --pretokenize none for words split at whitespace only)");
  return vocab.pretokenizer();
}

Vocab::Vocab(VocabType type, std::vector<std::string> pieces, std::vector<int64_t> counts, int specials)
    : type_(type), pieces_(std::move(pieces)), counts_(std::move(counts)), specials_(specials) {
  counts_.resize(pieces_.size(), 0);
  build_index();
}

Vocab::Vocab(const Vocab& other)
    : type_(other.type_), pieces_(other.pieces_), counts_(other.counts_), specials_(other.specials_),
      pretokenizer_(other.pretokenizer_) {
  build_index();
}

Vocab& Vocab::operator=(const Vocab& other) {
  if (this != &other) {
    type_ = other.type_;
    pieces_ = other.pieces_;
    counts_ = other.counts_;
    specials_ = other.specials_;
    pretokenizer_ = other.pretokenizer_;
    build_index();
  }
  return *this;
}

void Vocab::set_pretokenizer(Pretokenizer pretokenizer) {
  check_pretokenizer(type_, pretokenizer);
  pretokenizer_ = pretokenizer;
}

void Vocab::build_index() {
  index_.clear();
  index_.reserve(pieces_.size() * 2);
  for (size_t i = 0; i < pieces_.size(); ++i) index_.emplace(pieces_[i], static_cast<int32_t>(i));
  unk_id_ = eos_id_ = -1;
  for (int i = 0; i < specials_ && i < static_cast<int>(pieces_.size()); ++i)
    if (pieces_[static_cast<size_t>(i)] == kEos) eos_id_ = i;
  // xl's vocabs hold <unk> as a special; Transformer-XL's WikiText vocabs as a word of the text,
  // which also stands for words outside the vocab (as Hugging Face's tokenizer takes it).
  unk_id_ = find(kUnk);
}

int32_t Vocab::find(std::string_view piece) const {
  auto it = index_.find(piece);
  return it == index_.end() ? -1 : it->second;
}

std::string Vocab::sha256() const {
  Sha256 h;
  std::string head = "xl-vocab 1\n" + to_string(type_) + "\n" + std::to_string(specials_) + "\n";
  h.update(head);
  for (const auto& p : pieces_) {
    uint64_t n = p.size();
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    h.update(len, 8);
    h.update(p);
  }
  return h.hex();
}

std::string Vocab::to_tsv() const {
  std::ostringstream os;
  os << "#xl-vocab 1 type=" << to_string(type_) << " size=" << pieces_.size() << " specials=" << specials_;
  if (pretokenizer_ != Pretokenizer::kNone) os << " pretokenize=" << to_string(pretokenizer_);
  os << "\n";
  for (size_t i = 0; i < pieces_.size(); ++i) os << i << '\t' << escape_piece(pieces_[i]) << '\t' << counts_[i] << '\n';
  return os.str();
}

Vocab Vocab::from_tsv(const std::string& text, const std::string& file) {
  std::istringstream in(text);
  std::string line;
  XL_CHECK(std::getline(in, line) && line.rfind("#xl-vocab ", 0) == 0, kExitDataErr,
           file << ": not an xl vocab (expected a '#xl-vocab 1 ...' header line)");
  std::istringstream head(line.substr(10));
  std::string version, field;
  head >> version;
  XL_CHECK(version == "1", kExitDataErr, file << ": unsupported vocab format version " << version);
  std::string type_name, pretokenize = "none";
  long long size = -1, specials = 0;
  while (head >> field) {
    auto eq = field.find('=');
    std::string key = field.substr(0, eq), value = eq == std::string::npos ? "" : field.substr(eq + 1);
    try {
      if (key == "type") type_name = value;
      else if (key == "size") size = std::stoll(value);
      else if (key == "specials") specials = std::stoll(value);
      else if (key == "pretokenize") pretokenize = value;
    } catch (...) {
      XL_FAIL(kExitDataErr, file << ":1: bad header field '" << field << "'");
    }
  }
  const auto type = vocab_type_named(type_name);
  XL_CHECK(type, kExitDataErr, file << ":1: unknown vocab type '" << type_name << "'");
  std::vector<std::string> pieces;
  std::vector<int64_t> counts;
  int lineno = 1;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    auto t1 = line.find('\t'), t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
    XL_CHECK(t2 != std::string::npos, kExitDataErr, file << ":" << lineno << ": expected id<TAB>piece<TAB>count");
    std::string piece;
    long long id = -1, count = -1;
    try {
      id = std::stoll(line.substr(0, t1));
      count = std::stoll(line.substr(t2 + 1));
    } catch (...) {
    }
    XL_CHECK(id == static_cast<long long>(pieces.size()), kExitDataErr,
             file << ":" << lineno << ": expected id " << pieces.size());
    XL_CHECK(count >= 0, kExitDataErr, file << ":" << lineno << ": bad count");
    XL_CHECK(unescape_piece(std::string_view(line).substr(t1 + 1, t2 - t1 - 1), &piece), kExitDataErr,
             file << ":" << lineno << ": bad escape in piece");
    pieces.push_back(piece);
    counts.push_back(count);
  }
  XL_CHECK(size < 0 || size == static_cast<long long>(pieces.size()), kExitDataErr,
           file << ": header says size=" << size << " but " << pieces.size() << " entries follow");
  XL_CHECK(!pieces.empty(), kExitDataErr, file << ": empty vocab");
  Vocab v(*type, std::move(pieces), std::move(counts), static_cast<int>(specials));
  v.check(file);
  v.set_pretokenizer(parse_recorded_pretokenizer(*type, pretokenize, file));
  return v;
}

void Vocab::check(const std::string& file) const {
  XL_CHECK(index_.size() == pieces_.size(), kExitDataErr, file << ": duplicate pieces in the vocab");
  XL_CHECK(specials_ >= 0 && static_cast<size_t>(specials_) <= pieces_.size(), kExitDataErr,
           file << ": the vocab says " << specials_ << " specials of " << pieces_.size() << " entries");
  if (type_ == VocabType::kByte) XL_CHECK(specials_ == 0, kExitDataErr, file << ": a byte vocab has no specials");
  for (size_t id = static_cast<size_t>(specials_); id < pieces_.size(); ++id) {
    const std::string& p = pieces_[id];
    uint32_t cp;
    const bool ok = type_ == VocabType::kByte   ? p.size() == 1
                    : type_ == VocabType::kChar ? !p.empty() && utf8_decode(p, 0, &cp) == static_cast<int>(p.size())
                                                : !p.empty();
    XL_CHECK(ok, kExitDataErr, file << ": vocab entry " << id << " ('" << escape_piece(p) << "') is not "
                                    << (type_ == VocabType::kByte ? "one byte" : type_ == VocabType::kChar ? "one character" : "a word"));
  }
  for (size_t id = 0; id < counts_.size(); ++id)
    XL_CHECK(counts_[id] >= 0, kExitDataErr, file << ": vocab entry " << id << " has a negative count");
}

Vocab build_vocab(const std::vector<std::string_view>& texts, const VocabOptions& opts,
                  const std::string& source_name) {
  return build_vocab(texts, opts, std::vector<std::string>(texts.size(), source_name));
}

Vocab build_vocab(const std::vector<std::string_view>& texts, const VocabOptions& opts,
                  const std::vector<std::string>& source_names) {
  check_pretokenizer(opts.type, opts.pretokenizer);
  if (opts.type == VocabType::kByte) {
    std::array<int64_t, 256> counts{};
    for (auto t : texts)
      for (unsigned char c : t) ++counts[c];
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    return Vocab(VocabType::kByte, std::move(pieces), std::vector<int64_t>(counts.begin(), counts.end()), 0);
  }
  // Char and word: count pieces, then order them. Counting goes by code point (char) or by views
  // into the texts (word), so no string is made per occurrence; each piece is copied once at the end.
  const bool chars = opts.type == VocabType::kChar;
  std::vector<int64_t> cp_counts(chars ? 0x110000 : 0, 0);
  std::unordered_map<std::string_view, int64_t> word_counts;
  int64_t unk = 0, eos = 0;
  std::vector<std::string> pretokenized(opts.pretokenizer == Pretokenizer::kMoses ? texts.size() : 0);
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string name = i < source_names.size() ? source_names[i] : "input";
    std::string_view text = texts[i];
    if (!pretokenized.empty()) text = pretokenized[i] = moses_pretokenize(text, name);  // counted by views: kept
    Segmenter seg(opts.type, text, opts.allow_invalid_utf8, name);
    std::string_view piece;
    Segmenter::Kind kind;
    while (seg.next(&piece, &kind)) {
      if (kind == Segmenter::Kind::kEos) {
        ++eos;
      } else if (kind == Segmenter::Kind::kInvalid) {
        ++unk;
      } else if (chars) {
        uint32_t cp = 0;
        utf8_decode(piece, 0, &cp);  // the segmenter returned one valid code point
        ++cp_counts[cp];
      } else {
        ++word_counts[piece];
      }
    }
  }
  std::unordered_map<std::string, int64_t> counts;
  if (chars) {
    for (uint32_t cp = 0; cp < cp_counts.size(); ++cp) {
      if (!cp_counts[cp]) continue;
      std::string p;
      utf8_append(cp, &p);
      counts.emplace(std::move(p), cp_counts[cp]);
    }
  } else {
    counts.reserve(word_counts.size());
    for (const auto& [p, n] : word_counts) counts.emplace(std::string(p), n);
  }
  return vocab_from_counts(opts, std::move(counts), eos, unk);
}

Vocab vocab_from_counts(const VocabOptions& opts, std::unordered_map<std::string, int64_t> counts,
                        int64_t eos, int64_t unk) {
  XL_CHECK(opts.type != VocabType::kByte, kExitSoftware, "byte vocabs are fixed");
  std::vector<std::string> pieces;
  std::vector<int64_t> piece_counts;
  int specials = 0;
  if (opts.type == VocabType::kWord) {
    pieces.push_back(kEos);
    piece_counts.push_back(eos);
    ++specials;
  }
  // A literal "<unk>" in the text (as in WikiText) is the unknown token itself.
  auto lit = counts.find(kUnk);
  if (lit != counts.end()) {
    unk += lit->second;
    counts.erase(lit);
  }
  if (opts.type == VocabType::kWord) counts.erase(kEos);
  pieces.push_back(kUnk);
  piece_counts.push_back(unk);
  ++specials;
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  for (auto& [piece, count] : sorted) {
    if (count == 0) continue;
    bool keep = count >= opts.min_count &&
                (opts.max_size <= 0 || static_cast<int64_t>(pieces.size()) < opts.max_size);
    if (keep) {
      pieces.push_back(piece);
      piece_counts.push_back(count);
    } else {
      piece_counts[static_cast<size_t>(specials - 1)] += count;  // folded into <unk>
    }
  }
  Vocab vocab(opts.type, std::move(pieces), std::move(piece_counts), specials);
  vocab.set_pretokenizer(opts.pretokenizer);
  return vocab;
}

}  // namespace xl::text
