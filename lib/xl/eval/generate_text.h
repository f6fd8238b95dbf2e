// xl-generate's run: a checkpoint's model continues a prompt (or starts a text), and each drawn
// token's text goes to stdout as soon as it is drawn: decoded as an append to what came before, or
// for Moses-tokenized words detokenized line by line, each word written once it is final.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "xl/eval/generate.h"

namespace xl::eval {

// Checked settings (options/generate_options.h builds them from the flags).
struct TextGenerationRequest {
  std::string checkpoint;
  std::optional<std::string> prompt;       // --prompt TEXT
  std::optional<std::string> prompt_file;  // or --prompt-file FILE
  std::optional<std::string> pretokenize;  // --pretokenize, or what the vocab records
  std::optional<int64_t> cmem_len;         // --cmem-len, or as the checkpoint trained
  bool allow_invalid_utf8 = false;
  bool no_unk = false;
  bool echo = false;
  GenerateSettings settings;
  torch::Device device = torch::kCPU;
  uint64_t seed = 1;
};

void generate_text(const TextGenerationRequest& request);

}  // namespace xl::eval
