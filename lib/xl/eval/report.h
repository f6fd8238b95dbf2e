// What xl-eval-longctx writes: one result row per evaluation setting (JSON Lines, a Markdown
// table or TSV, streamed as each row is ready) and the optional per-token losses (HDF5).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <ostream>
#include <optional>
#include <string>
#include <vector>

#include "xl/eval/evaluator.h"
#include "xl/text/vocab.h"

namespace xl::h5 {
class OutputFile;
}

namespace xl::eval {

struct EvalRow {
  std::string split;
  int64_t tgt_len = 0;
  int64_t mem_len = 0;
  std::optional<int64_t> cmem_len;  // a Compressive Transformer's compressed memory (else no column)
  int64_t clamp_len = 0;     // in force (0: off)
  bool same_length = false;  // in force
  bool warmup = false;
  int64_t batch_size = 0;    // streams used
  EvalResult result;  // tokens_per_s: over its scoring_seconds (0, as kept by an older xl: seconds)
  // bpc for byte and char vocabs, ppl for word vocabs.
  text::VocabType vocab_type = text::VocabType::kByte;
  double peak_rss_mb = 0;
  // Taken from a --cache file: its seconds are those of the run that kept it ("kept": true).
  bool kept = false;

  nlohmann::json to_json() const;
};

enum class RowFormat { kJsonl, kMarkdown, kTsv };

// Writes rows as they come (Markdown cells have fixed widths, so a table streams too).
class RowWriter {
 public:
  RowWriter(std::ostream& out, RowFormat format) : out_(out), format_(format) {}
  void write(const EvalRow& row);

 private:
  std::ostream& out_;
  RowFormat format_;
  bool header_done_ = false;
};

// Per-token losses: one group per setting holding `nll` float32 [tokens] and `index` int64
// [tokens] (position in the split of each scored token, ascending), with the setting as attributes.
class PerTokenFile {
 public:
  PerTokenFile(const std::string& path, bool force);
  ~PerTokenFile();
  // Collects the tokens of one setting (the evaluator's sink).
  PerTokenSink sink();
  // Writes what the sink collected as group `name` with the row's settings, and clears it.
  void write_group(const std::string& name, const EvalRow& row);
  void commit();

 private:
  std::unique_ptr<h5::OutputFile> out_;
  std::vector<int64_t> index_;
  std::vector<float> nll_;
};

}  // namespace xl::eval
