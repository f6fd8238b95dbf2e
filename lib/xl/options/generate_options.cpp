#include "xl/options/generate_options.h"

#include <torch/torch.h>

#include "xl/options/compute_options.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"

namespace xl::options {
namespace po = cli::po;

void add_generate_options(cli::Options& cli) {
  cli.add("Generation")
      ("checkpoint", po::value<std::string>(), "checkpoint (HDF5; - is stdin)")
      ("prompt", po::value<std::string>(), "prompt TEXT")
      ("prompt-file", po::value<std::string>(), "read the prompt from FILE (- is stdin; gzip/bzip2/xz detected)")
      ("length,n", po::value<int64_t>()->default_value(200), "tokens to generate")
      ("temperature", cli::real_value(1.0), "divide log-probabilities by T (0: greedy)")
      ("top-k", po::value<int64_t>()->default_value(0), "sample among the k most likely tokens (0: all; 1: greedy)")
      ("top-p", cli::real_value(1.0), "then among the smallest set with probability >= p")
      ("no-unk", po::bool_switch(), "never draw <unk>: the others as if the vocab lacked it")
      ("mem-len", po::value<int64_t>()->default_value(512), "memory (context) length")
      ("tgt-len", po::value<int64_t>()->default_value(128), "segment length for feeding the prompt")
      ("cmem-len", po::value<int64_t>(), "compressed memory slots (a model with --cmem-rate; default: as trained)")
      ("echo", po::bool_switch(), "write the prompt before the generated text")
      ("allow-invalid-utf8", po::bool_switch(), "char/word vocabs: map invalid UTF-8 in the prompt to <unk>")
      ("pretokenize", po::value<std::string>(), "word: none (split lines at whitespace) or moses (tokenize raw text as Hugging Face's TransfoXL tokenizer does); default: what the vocab records, none for a new vocab");
  cli.positional("checkpoint", 1);
  add_compute_options(cli);
}

eval::TextGenerationRequest text_generation_request(const cli::Options& cli) {
  eval::TextGenerationRequest r;
  XL_CHECK(cli.has("checkpoint"), kExitUsage, "give a CHECKPOINT (see xl-generate --help)");
  XL_CHECK(!(cli.has("prompt") && cli.has("prompt-file")), kExitUsage, "give --prompt or --prompt-file, not both");
  r.checkpoint = cli.get<std::string>("checkpoint");
  r.prompt = cli.get_optional<std::string>("prompt");
  r.prompt_file = cli.get_optional<std::string>("prompt-file");
  XL_CHECK(!(r.prompt_file && io::is_stdio(*r.prompt_file) && io::is_stdio(r.checkpoint)), kExitUsage,
           "CHECKPOINT and --prompt-file cannot both be stdin");
  eval::GenerateSettings& gs = r.settings;
  gs.length = cli.get<int64_t>("length");
  gs.tgt_len = cli.get<int64_t>("tgt-len");
  gs.mem_len = cli.get<int64_t>("mem-len");
  gs.sampling.temperature = cli.get<double>("temperature");
  gs.sampling.top_k = cli.get<int64_t>("top-k");
  gs.sampling.top_p = cli.get<double>("top-p");
  if (gs.length < 0) cli.fail("length", "must not be negative");
  if (gs.tgt_len < 1) cli.fail("tgt-len", "must be at least 1");
  if (gs.mem_len < 0) cli.fail("mem-len", "must not be negative");
  if (gs.mem_len == 0) XL_WARN("--mem-len 0: each drawn token sees no earlier one (generation's context is its memory)");
  if (gs.sampling.temperature < 0) cli.fail("temperature", "must not be negative");
  if (gs.sampling.top_k < 0) cli.fail("top-k", "must not be negative");
  if (!(gs.sampling.top_p > 0 && gs.sampling.top_p <= 1)) cli.fail("top-p", "must be in (0, 1]");
  r.pretokenize = cli.get_optional<std::string>("pretokenize");
  r.cmem_len = cli.get_optional<int64_t>("cmem-len");
  if (r.cmem_len && *r.cmem_len < 0) cli.fail("cmem-len", "must not be negative");
  r.allow_invalid_utf8 = cli.get<bool>("allow-invalid-utf8");
  r.no_unk = cli.get<bool>("no-unk");
  r.echo = cli.get<bool>("echo");
  const Placement placement = place(compute_settings(cli));
  torch::manual_seed(placement.seed);
  r.device = placement.device;
  r.seed = placement.seed;
  gs.precision = placement.precision;
  return r;
}

}  // namespace xl::options
