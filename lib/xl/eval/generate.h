// Sampling text from a Transformer-XL with the segment memory carried along: the prompt is fed in
// segments of tgt_len, then each new token is one segment of length 1 that sees the last mem_len
// positions through the memory (the generation the PyTorch Transformer-XL never shipped, TXL #49).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

#include "xl/compute/precision.h"
#include "xl/model/transformer_xl.h"
#include "xl/text/tokenizer.h"
#include "xl/util/rng.h"

namespace xl::eval {

struct SampleSettings {
  double temperature = 1.0;  // <= 0: greedy
  int64_t top_k = 0;         // keep the k most likely tokens (0: all)
  double top_p = 1.0;        // then the smallest set whose probability reaches top_p (1: all)
  int32_t excluded = -1;     // a token never drawn, as if the vocab lacked it (--no-unk: <unk>); -1: none
};

// Draws one token id from log-probabilities [V] with `rng` (deterministic for a given state:
// the distribution is filtered and normalised in double precision on the CPU, its mass summed in
// id order, and one uniform draw inverted over the candidates by falling probability, ties by
// lower id, as in top-k). Takes time linear in V, plus sorting the candidates the draw passes (a
// few hundred from a trained model). NaN log-probabilities are refused (65). An excluded token
// leaves the others' draw as over the vocab without it (64 when it is the only token).
int32_t sample_token(const torch::Tensor& log_probs, const SampleSettings& s, Rng& rng);

struct GenerateSettings {
  compute::Precision precision = compute::Precision::kFp32;  // of the matrix products
  int64_t length = 200;   // tokens to generate
  int64_t tgt_len = 128;  // segment length for feeding the prompt
  int64_t mem_len = 512;  // memory (context) kept while generating
  int64_t cmem_len = 0;   // compressed memory kept (a model with cmem_rate)
  SampleSettings sampling;
};

// The ids of a prompt text (`name` for errors). A word vocab closes every line with <eos>, but a
// last line without its newline is left open: generation continues it.
std::vector<int32_t> prompt_ids(const text::Tokenizer& tokenizer, const text::Vocab& vocab, std::string_view text,
                                const std::string& name);

// Feeds `prompt` (at least one token) and samples `length` tokens, calling `on_token` with each
// as soon as it is drawn. Returns the generated ids. Runs without autograd in eval mode and
// restores the model's training flag.
std::vector<int32_t> generate(model::TransformerXL& model, const std::vector<int32_t>& prompt,
                              const GenerateSettings& s, Rng& rng, const std::function<void(int32_t)>& on_token);

}  // namespace xl::eval
