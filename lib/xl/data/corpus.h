// Turning text inputs into the splits of a tokens file: one input cut by a split spec, or one
// input per split; with a given vocab, or one built from the training text only.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "xl/h5/tokens_file.h"
#include "xl/text/vocab.h"

namespace xl::data {

// Lengths of consecutive splits of `total` tokens from "0.9,0.05,0.05" (fractions; the last split
// takes the rounding remainder) or "90M,5M,5M" (counts with K/M/G suffixes). Fails with 64.
std::vector<int64_t> split_lengths(const std::string& spec, int64_t total);
// Checks the syntax of a split spec and that it has at most `max_parts` parts; fails with 64,
// naming `what` ("--split").
void check_split_spec(const std::string& spec, size_t max_parts, const std::string& what);

struct CorpusInput {
  std::string split;  // train, valid, test
  std::string path;   // file or "-"
};

struct CorpusRequest {
  std::vector<CorpusInput> inputs;           // several: one per split
  std::string whole_input;                   // or one input ...
  std::string split_spec;                    // ... cut by this spec into train, valid, test
  std::optional<text::Vocab> vocab;          // given vocab, or one built from the train split:
  struct VocabBuild {
    text::VocabType type = text::VocabType::kByte;
    int64_t min_count = 1;  // char/word: rarer pieces become <unk>
    int64_t max_size = 0;   // word: keep at most this many entries (0: all)
    SettingOrigins origins;  // where min-count and max-size were given, for messages
  } build;
  bool allow_invalid_utf8 = false;
  text::Pretokenizer pretokenizer = text::Pretokenizer::kNone;  // word: how lines become words,
                                                                // recorded in Corpus::vocab
};

struct Corpus {
  text::Vocab vocab;  // records the request's pretokenizer
  std::vector<h5::TokenSplit> splits;
  std::string source_sha256;  // whole input only
  int64_t source_bytes = 0;
};

Corpus tokenize_corpus(const CorpusRequest& request);

}  // namespace xl::data
