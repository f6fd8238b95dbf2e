#include "xl/text/tokenizer.h"

#include "xl/text/escape.h"
#include "xl/text/moses.h"
#include "xl/text/segmenter.h"
#include "xl/util/utf8.h"
#include "xl/util/error.h"

namespace xl::text {

Tokenizer::Tokenizer(const Vocab& vocab, bool allow_invalid_utf8, Pretokenizer pretokenizer)
    : vocab_(vocab), allow_invalid_(allow_invalid_utf8), pretokenizer_(pretokenizer) {
  check_pretokenizer(vocab.type(), pretokenizer);
  if (vocab.type() == VocabType::kByte) {
    byte_table_.assign(256, -1);
    for (size_t id = 0; id < vocab.size(); ++id)
      if (vocab.piece(static_cast<int32_t>(id)).size() == 1)
        byte_table_[static_cast<unsigned char>(vocab.piece(static_cast<int32_t>(id))[0])] = static_cast<int32_t>(id);
  }
  if (vocab.type() == VocabType::kChar) {
    char_table_.assign(0x110000, -1);
    for (size_t id = static_cast<size_t>(vocab.specials()); id < vocab.size(); ++id) {
      uint32_t cp;
      const std::string& p = vocab.piece(static_cast<int32_t>(id));
      if (!p.empty() && utf8_decode(p, 0, &cp) == static_cast<int>(p.size())) char_table_[cp] = static_cast<int32_t>(id);
    }
  }
}

void Tokenizer::encode(std::string_view text, const std::string& source_name, std::vector<int32_t>* out,
                       EncodeStats* stats) const {
  const size_t start = out->size();
  const int32_t unk = vocab_.unk_id();
  auto unknown = [&](std::string_view piece, const char* hint = "") {
    XL_CHECK(unk >= 0, kExitDataErr,
             source_name << ": '" << escape_piece(piece) << "' is not in the vocab, which has no <unk>" << hint);
    ++stats->unknown;
    return unk;
  };
  if (vocab_.type() == VocabType::kByte) {
    // xl's byte vocab holds every byte; one imported from Transformer-XL's enwik8 only those of
    // its training text, most frequent first (no newline).
    out->resize(start + text.size());
    int32_t* dst = out->data() + start;
    const unsigned char* src = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size(); ++i) {
      dst[i] = byte_table_[src[i]];
      if (dst[i] < 0)
        dst[i] = unknown(text.substr(i, 1), src[i] == '\n' ? " (Transformer-XL's enwik8 drops line ends: "
                                                              "remove them first, as tr -d '\\n' does)"
                                                            : "");
    }
    stats->tokens += static_cast<int64_t>(text.size());
    return;
  }
  std::string pretokenized;
  if (pretokenizer_ == Pretokenizer::kMoses) text = pretokenized = moses_pretokenize(text, source_name);
  out->reserve(start + text.size() / (vocab_.type() == VocabType::kWord ? 5 : 1));
  Segmenter seg(vocab_.type(), text, allow_invalid_, source_name);
  std::string_view piece;
  Segmenter::Kind kind;
  while (seg.next(&piece, &kind)) {
    int32_t id;
    if (kind == Segmenter::Kind::kEos) {
      id = vocab_.eos_id() >= 0 ? vocab_.eos_id() : unknown("<eos>");
    } else if (kind == Segmenter::Kind::kInvalid) {
      id = unknown(piece);
    } else if (vocab_.type() == VocabType::kChar) {
      uint32_t cp;
      utf8_decode(piece, 0, &cp);
      id = char_table_[cp];
      if (id < 0) id = unknown(piece);
    } else {
      id = vocab_.find(piece);
      if (id < 0) id = unknown(piece);
    }
    out->push_back(id);
  }
  stats->tokens += static_cast<int64_t>(out->size() - start);
}

const std::string& Tokenizer::piece(int32_t id) const {
  XL_CHECK(id >= 0 && static_cast<size_t>(id) < vocab_.size(), kExitDataErr,
           "token id " << id << " is out of range for a vocab of " << vocab_.size());
  return vocab_.piece(id);
}

std::string Tokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  if (pretokenizer_ == Pretokenizer::kMoses) {
    std::vector<std::string> line;
    for (size_t i = 0; i < n; ++i) {
      const std::string& p = piece(ids[i]);
      if (ids[i] != vocab_.eos_id()) {
        line.push_back(p);
        continue;
      }
      out += moses_detokenize(line) + "\n";
      line.clear();
    }
    return out + moses_detokenize(line);
  }
  const bool word = vocab_.type() == VocabType::kWord;
  out.reserve(word ? n * 6 : n);
  bool line_start = true;
  for (size_t i = 0; i < n; ++i) {
    const std::string& p = piece(ids[i]);
    if (word) {
      if (ids[i] == vocab_.eos_id()) {
        out.push_back('\n');
        line_start = true;
        continue;
      }
      if (!line_start) out.push_back(' ');
      line_start = false;
    }
    out += p;
  }
  return out;
}

}  // namespace xl::text
