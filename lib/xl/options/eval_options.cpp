#include "xl/options/eval_options.h"

#include <unistd.h>

#include <algorithm>

#include "xl/options/compute_options.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/parse.h"

namespace xl::options {
namespace po = cli::po;

void add_eval_options(cli::Options& cli, const std::string& default_split, MemLens mem_lens) {
  const char* mem_len_help = mem_lens == MemLens::kSweep ? "memory length, or a comma list for a sweep (default: 2 x tgt-len)"
                                                         : "memory length (default: 2 x tgt-len)";
  cli.add("Evaluation (clamp-len and same-length default to the model's)")
      ("split", po::value<std::string>()->default_value(default_split), "split of the tokens file")
      ("tgt-len", po::value<int64_t>()->default_value(128), "segment length")
      ("mem-len", po::value<std::string>(), mem_len_help)
      ("cmem-len", po::value<std::string>(),
       mem_lens == MemLens::kSweep ? "compressed memory slots (a model with --cmem-rate), or a comma list, each at every --mem-len (default: as trained)"
                                   : "compressed memory slots (a model with --cmem-rate; default: as trained)")
      ("clamp-len", po::value<int64_t>(), "clamp relative distances (0: off)")
      ("same-length", po::value<bool>(), "every query sees mem-len keys (true/false; off with mem-len 0)")
      ("batch-size", po::value<int64_t>()->default_value(10), "parallel streams")
      ("warmup", po::bool_switch(), "score only segments whose memory is full (NVIDIA's convention)")
      ("max-tokens", po::value<std::string>()->default_value("0"), "stop after about this many scored tokens (0: all; K, M suffixes)")
      ("kv-cache-budget", po::value<std::string>()->default_value("auto"),
       (std::string("bytes the memories may take to keep their key/value projections in place of their inputs, "
                    "which spares each segment projecting its memory again (0: never; K, M, G; ") +
        kMemoryBudgetHelp + ")").c_str())
      ("ignore-head-mask", po::bool_switch(), "evaluate all heads even when the checkpoint has a head mask")
      ("cache", po::value<std::string>(), "keep each finished evaluation (a sweep's setting, a head study's pass) in FILE "
                                          "and take those it holds: run again after a stop, even by SIGKILL, it goes on "
                                          "from them");
}

namespace {

// A length, or with MemLens::kSweep a comma list of them, each once.
std::vector<int64_t> lengths(const cli::Options& cli, const std::string& option, const std::string& text, MemLens mem_lens) {
  return cli.parsed(option, [&](const std::string& what) {
    std::vector<int64_t> lens;
    for (const auto& item : parse::list_items(text, what)) {
      const auto v = static_cast<int64_t>(parse::count(item, what));
      XL_CHECK(std::find(lens.begin(), lens.end(), v) == lens.end(), kExitUsage, what << ": " << v << " is given twice");
      lens.push_back(v);
    }
    XL_CHECK(!lens.empty(), kExitUsage, what << ": no value");
    XL_CHECK(lens.size() == 1 || mem_lens == MemLens::kSweep, kExitUsage,
             what << ": " << cli.info().name << " evaluates at one memory length");
    return lens;
  });
}

}  // namespace

EvalRequest eval_request(const cli::Options& cli, MemLens mem_lens) {
  EvalRequest r;
  r.split = cli.get<std::string>("split");
  eval::EvalSettings& s = r.settings;
  s.tgt_len = cli.get<int64_t>("tgt-len");
  s.batch_size = cli.get<int64_t>("batch-size");
  if (cli.has("clamp-len")) s.clamp_len = cli.get<int64_t>("clamp-len");
  if (cli.has("same-length")) s.same_length = cli.get<bool>("same-length");
  s.warmup = cli.get<bool>("warmup");
  s.max_tokens = static_cast<int64_t>(cli.count("max-tokens"));
  s.kv_cache_bytes = memory_budget(cli, "kv-cache-budget");
  r.ignore_head_mask = cli.get<bool>("ignore-head-mask");
  if (cli.has("cache")) {
    r.cache = cli.get<std::string>("cache");
    if (io::is_stdio(r.cache) || io::is_stream(r.cache)) cli.fail("cache", "must be a file: it is read, then appended to");
  }
  if (s.tgt_len < 1) cli.fail("tgt-len", "must be at least 1");
  if (s.batch_size < 1) cli.fail("batch-size", "must be at least 1");
  if (s.clamp_len && *s.clamp_len < 0) cli.fail("clamp-len", "must be 0 (off) or positive");
  const std::string text = cli.has("mem-len") ? cli.get<std::string>("mem-len") : std::to_string(2 * s.tgt_len);
  r.mem_lens = lengths(cli, "mem-len", text, mem_lens);
  if (cli.has("cmem-len")) r.cmem_lens = lengths(cli, "cmem-len", cli.get<std::string>("cmem-len"), mem_lens);
  s.mem_len = r.mem_lens.front();
  return r;
}

const char* const kRowFormatHelp = "jsonl, md (Markdown tables) or tsv (default: md on a terminal, else jsonl)";

eval::RowFormat row_format(const cli::Options& cli, bool rows_to_stdout) {
  if (!cli.has("format")) return rows_to_stdout && ::isatty(STDOUT_FILENO) ? eval::RowFormat::kMarkdown : eval::RowFormat::kJsonl;
  const std::string format = cli.get<std::string>("format");
  if (format == "jsonl") return eval::RowFormat::kJsonl;
  if (format == "md") return eval::RowFormat::kMarkdown;
  if (format != "tsv") cli.fail("format", "must be jsonl, md or tsv, not '" + format + "'");
  return eval::RowFormat::kTsv;
}

}  // namespace xl::options
