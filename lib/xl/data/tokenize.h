// xl-tokenize's run: text inputs into a tokens file (the vocab given or built, the splits cut or
// given one per input), or a tokens file's splits back into text.
#pragma once
#include <optional>
#include <string>

#include "xl/cli/options.h"
#include "xl/data/corpus.h"

namespace xl::data {

struct TokenizeRequest {
  std::string input = "-";
  std::optional<std::string> decode;       // --decode SPLIT (or all): INPUT is a tokens file
  std::optional<std::string> pretokenize;  // --decode: how words are joined, or what the vocab records
  CorpusRequest corpus;                    // otherwise
  bool compress = false;
  std::string output = "-";
  bool force = false;
  std::string command_line;                // recorded in the tokens file
};

// xl-tokenize's flags, and the request they make: every flag checked (64, or 78 for a settings
// file's value); a --vocab file is read.
void add_tokenize_options(cli::Options& cli);
TokenizeRequest tokenize_request(const cli::Options& cli, int argc, char** argv);

void run_tokenize(const TokenizeRequest& request);

}  // namespace xl::data
