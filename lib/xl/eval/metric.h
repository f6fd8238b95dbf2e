// The number a language model is reported by: bits per character for byte and char vocabs,
// perplexity for word vocabs (the conventions of the enwik8/text8 and WikiText papers).
#pragma once
#include <string>

#include "xl/text/vocab.h"

namespace xl::eval {

class Metric {
 public:
  explicit Metric(text::VocabType type) : ppl_(type == text::VocabType::kWord) {}
  // "bpc" or "ppl": the key in JSON rows and the column in tables.
  std::string name() const { return ppl_ ? "ppl" : "bpc"; }
  // "bpc" or "perplexity": an axis label.
  std::string label() const { return ppl_ ? "perplexity" : "bpc"; }
  // The metric of a mean loss in nats per token.
  double of(double nats) const;

 private:
  bool ppl_;
};

}  // namespace xl::eval
