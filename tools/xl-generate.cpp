// xl-generate: sample text from a checkpoint, with the segment memory carried along.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "xl/checkpoint/checkpoint.h"
#include "xl/cli/options.h"
#include "xl/cli/tool_main.h"
#include "xl/compute/device.h"
#include "xl/compute/parallel.h"
#include "xl/compute/torch_process.h"
#include "xl/eval/evaluator.h"
#include "xl/eval/generate.h"
#include "xl/model/model_io.h"
#include "xl/options/compute_options.h"
#include "xl/text/moses.h"
#include "xl/text/tokenizer.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/rng.h"

namespace po = xl::cli::po;

namespace {

bool g_ends_line = true;  // the last byte written was a newline (or nothing was written)

void write_out(const std::string& text) {
  if (text.empty()) return;
  g_ends_line = text.back() == '\n';
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
    XL_FAIL(xl::kExitIoErr, "cannot write to stdout");
}

// The token a prompt-less generation starts from: <eos> (a line start) when the vocab has one,
// else a newline character, else id 0.
int32_t start_token(const xl::text::Vocab& vocab) {
  if (vocab.eos_id() >= 0) return vocab.eos_id();
  int32_t nl = vocab.find("\n");
  return nl >= 0 ? nl : 0;
}

}  // namespace

int main(int argc, char** argv) {
  xl::compute::prepare_torch_process();
  return xl::cli::run_tool("xl-generate", argc, argv, [](int argc, char** argv) {
    xl::cli::Options cli(
        {"xl-generate", "Sample text from a checkpoint, with the segment memory carried across segments.",
         "[OPTIONS] CHECKPOINT",
         "Tokenizes the prompt with the checkpoint's own vocab, feeds it in segments of --tgt-len, then\n"
         "draws --length tokens one at a time; each sees the last --mem-len positions through the memory.\n"
         "The text is written to stdout as it is produced. Sampling divides the log-probabilities by\n"
         "--temperature (0: greedy), keeps the --top-k most likely tokens, then the smallest set whose\n"
         "probability reaches --top-p. The same --seed gives the same text. Without a prompt,\n"
         "generation starts from a line start (in a vocab without line ends, such as an imported\n"
         "Transformer-XL enwik8 vocab, from its first entry).",
         "  xl-generate --prompt 'The history of ' --length 500 p2.h5\n"
         "  xl-generate --prompt-file intro.txt --top-k 40 --temperature 0.8 --seed 7 p2.h5\n"
         "  xl-generate --prompt 'In 1905' --top-k 1 --echo p2.h5"});
    cli.add("Generation")
        ("checkpoint", po::value<std::string>(), "checkpoint (HDF5; - is stdin)")
        ("prompt", po::value<std::string>(), "prompt TEXT")
        ("prompt-file", po::value<std::string>(), "read the prompt from FILE (- is stdin; gzip/bzip2/xz detected)")
        ("length,n", po::value<int64_t>()->default_value(200), "tokens to generate")
        ("temperature", xl::cli::real_value(1.0), "divide log-probabilities by T (0: greedy)")
        ("top-k", po::value<int64_t>()->default_value(0), "sample among the k most likely tokens (0: all; 1: greedy)")
        ("top-p", xl::cli::real_value(1.0), "then among the smallest set with probability >= p")
        ("no-unk", po::bool_switch(), "never draw <unk>: the others as if the vocab lacked it")
        ("mem-len", po::value<int64_t>()->default_value(512), "memory (context) length")
        ("tgt-len", po::value<int64_t>()->default_value(128), "segment length for feeding the prompt")
        ("echo", po::bool_switch(), "write the prompt before the generated text")
        ("allow-invalid-utf8", po::bool_switch(), "char/word vocabs: map invalid UTF-8 in the prompt to <unk>")
        ("pretokenize", po::value<std::string>(), "word: none (split lines at whitespace) or moses (tokenize raw text as Hugging Face's TransfoXL tokenizer does); default: what the vocab records, none for a new vocab");
    cli.positional("checkpoint", 1);
    xl::options::add_compute_options(cli);
    if (!cli.parse(argc, argv)) return 0;

    XL_CHECK(cli.has("checkpoint"), xl::kExitUsage, "give a CHECKPOINT (see xl-generate --help)");
    XL_CHECK(!(cli.has("prompt") && cli.has("prompt-file")), xl::kExitUsage, "give --prompt or --prompt-file, not both");
    const std::string ckpt_path = cli.get<std::string>("checkpoint");
    XL_CHECK(!(cli.has("prompt-file") && xl::io::is_stdio(cli.get<std::string>("prompt-file")) && xl::io::is_stdio(ckpt_path)),
             xl::kExitUsage, "CHECKPOINT and --prompt-file cannot both be stdin");
    xl::eval::GenerateSettings gs;
    gs.length = cli.get<int64_t>("length");
    gs.tgt_len = cli.get<int64_t>("tgt-len");
    gs.mem_len = cli.get<int64_t>("mem-len");
    gs.sampling.temperature = cli.get<double>("temperature");
    gs.sampling.top_k = cli.get<int64_t>("top-k");
    gs.sampling.top_p = cli.get<double>("top-p");
    if (gs.length < 0) cli.fail("length", "must not be negative");
    if (gs.tgt_len < 1) cli.fail("tgt-len", "must be at least 1");
    if (gs.mem_len < 0) cli.fail("mem-len", "must not be negative");
    if (gs.mem_len == 0)
      XL_WARN("--mem-len 0: each drawn token sees no earlier one (generation's context is its memory)");
    if (gs.sampling.temperature < 0) cli.fail("temperature", "must not be negative");
    if (gs.sampling.top_k < 0) cli.fail("top-k", "must not be negative");
    if (!(gs.sampling.top_p > 0 && gs.sampling.top_p <= 1)) cli.fail("top-p", "must be in (0, 1]");

    const auto compute = xl::options::compute_settings(cli);
    xl::compute::set_threads(compute.threads);
    torch::manual_seed(compute.seed);
    const torch::Device device = xl::compute::parse_device(compute.device);
    gs.precision = xl::compute::resolve_precision(compute.precision, device);
    std::string prompt_text;
    std::string prompt_name = "--prompt";
    if (cli.has("prompt")) prompt_text = cli.get<std::string>("prompt");
    if (cli.has("prompt-file")) {
      prompt_name = xl::io::display_name(cli.get<std::string>("prompt-file"));
      prompt_text = xl::io::read_text(cli.get<std::string>("prompt-file"));
    }

    auto [ckpt, model] = xl::model::load_model(ckpt_path);
    const xl::text::Vocab vocab = std::move(ckpt.vocab);
    model->to(device);
    const auto pretokenizer = xl::text::pretokenizer_for(vocab, cli.get_optional<std::string>("pretokenize"));
    xl::text::Tokenizer tokenizer(vocab, cli.get<bool>("allow-invalid-utf8"), pretokenizer);
    if (cli.get<bool>("no-unk")) {
      gs.sampling.excluded = vocab.unk_id();
      if (vocab.unk_id() < 0)
        XL_WARN("--no-unk: " << xl::io::display_name(ckpt_path) << "'s vocab has no <unk>: nothing to leave out");
    }

    std::vector<int32_t> prompt = xl::eval::prompt_ids(tokenizer, vocab, prompt_text, prompt_name);
    const bool have_prompt = !prompt.empty();
    if (!have_prompt) prompt.push_back(start_token(vocab));
    const bool echo = cli.get<bool>("echo") && have_prompt;
    // Moses-tokenized words are detokenized line by line, a word's text written once it is final.
    std::optional<xl::text::MosesLineWriter> moses;
    if (pretokenizer == xl::text::Pretokenizer::kMoses) {
      moses.emplace();
      auto open = std::find(prompt.rbegin(), prompt.rend(), vocab.eos_id()).base();
      std::vector<std::string> open_words;
      for (auto it = open; it != prompt.end(); ++it) open_words.push_back(vocab.piece(*it));
      if (echo) write_out(tokenizer.decode(prompt.data(), static_cast<size_t>(open - prompt.begin())));
      write_out(moses->begin_line(std::move(open_words), echo));
    } else if (echo) {
      write_out(tokenizer.decode(prompt));
    }

    // Decoding is append-only, so each token's text is what it adds after the previous token.
    int32_t prev = prompt.back();
    bool first = true;
    xl::Rng rng(compute.seed);
    xl::eval::generate(model, prompt, gs, rng, [&](int32_t id) {
      if (moses) {
        write_out(id == vocab.eos_id() ? moses->end_line() : moses->add(vocab.piece(id)));
        return;
      }
      int32_t pair[2] = {prev, id};
      std::string text;
      if (first && !have_prompt) {
        text = tokenizer.decode(&id, 1);  // nothing was printed before: no separator
      } else {
        std::string both = tokenizer.decode(pair, 2), one = tokenizer.decode(pair, 1);
        text = both.substr(one.size());
      }
      first = false;
      prev = id;
      write_out(text);
    });
    if (moses) write_out(moses->rest());
    if (!g_ends_line) write_out("\n");
    return 0;
  });
}
