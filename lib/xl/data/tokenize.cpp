#include "xl/data/tokenize.h"

#include "xl/text/tokenizer.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"

namespace xl::data {
namespace po = cli::po;
namespace {

void decode(const TokenizeRequest& r) {
  auto tokens = h5::TokensFile::open(r.input);
  const std::string& which = *r.decode;
  std::vector<std::string> splits = which == "all" ? tokens.split_names() : std::vector<std::string>{which};
  const auto pretokenizer = text::pretokenizer_for(tokens.vocab(), r.pretokenize);
  text::Tokenizer tokenizer(tokens.vocab(), false, pretokenizer);
  io::AtomicOutput out(r.output, r.force, false);
  // "all" decodes the splits as one sequence: in word mode a line cut between two splits keeps
  // the space between its words.
  std::vector<int32_t> ids;
  for (const auto& s : splits) {
    auto part = tokens.read_split(s, "--decode names one of them, or all");
    if (ids.empty()) ids.swap(part);
    else ids.insert(ids.end(), part.begin(), part.end());
  }
  out.stream() << tokenizer.decode(ids);
  out.commit();
}

void tokenize(const TokenizeRequest& r) {
  h5::OutputFile out(r.output, r.force);  // fail early on an unwritable output
  auto corpus = tokenize_corpus(r.corpus);
  h5::TokensMeta meta;
  meta.created_by = std::string("xl-tokenize ") + XL_VERSION;
  meta.command_line = r.command_line;
  meta.source_sha256 = corpus.source_sha256;
  meta.source_bytes = corpus.source_bytes;
  meta.compress = r.compress;
  h5::write_tokens(out.file(), corpus.vocab, corpus.splits, meta);
  out.commit();
  for (const auto& s : corpus.splits)
    XL_INFO(s.name << ": " << s.ids.size() << " tokens" << (s.source.unknown ? ", " + std::to_string(s.source.unknown) + " mapped to <unk>" : ""));
}

// The corpus request of the flags: its inputs, and the vocab read or the one to build.
CorpusRequest corpus_request(const cli::Options& cli, const std::string& input) {
  CorpusRequest req;
  for (const char* s : {"train", "valid", "test"})
    if (cli.has(s)) req.inputs.push_back({s, cli.get<std::string>(s)});
  if (req.inputs.empty()) {
    req.whole_input = input;
    req.split_spec = cli.get<std::string>("split");
    cli.parsed("split", [&](const std::string& what) {
      check_split_spec(req.split_spec, 3, what);
      return 0;
    });
  } else {
    XL_CHECK(!cli.given("input") || input == "-", kExitUsage, "give either INPUT or --train/--valid/--test, not both");
  }
  XL_CHECK(cli.has("vocab") != cli.has("mode"), kExitUsage, "give exactly one of --vocab FILE or --mode byte|char|word");
  if (cli.has("vocab")) {
    req.vocab = h5::load_vocab(cli.get<std::string>("vocab"));
  } else {
    req.build.type = cli.parsed("mode", [&](const std::string& what) {
      return text::parse_vocab_type(cli.get<std::string>("mode"), what);
    });
    req.build.min_count = cli.get<int64_t>("min-count");
    req.build.max_size = cli.get<int64_t>("max-size");
    text::check_vocab_limits(req.build.min_count, req.build.max_size, cli.origins());
    req.build.origins = cli.origins();
  }
  req.allow_invalid_utf8 = cli.get<bool>("allow-invalid-utf8");
  if (cli.has("pretokenize"))
    cli.parsed("pretokenize", [&](const std::string& what) {
      return text::parse_pretokenizer(cli.get<std::string>("pretokenize"), what);
    });
  req.pretokenizer = req.vocab ? text::pretokenizer_for(*req.vocab, cli.get_optional<std::string>("pretokenize"))
                               : text::parse_pretokenizer(cli.get_or<std::string>("pretokenize", "none"));
  return req;
}

}  // namespace

void add_tokenize_options(cli::Options& cli) {
  cli.add("Tokenize")
      ("input", po::value<std::string>()->default_value("-"), "input text (or tokens file with --decode)")
      ("vocab", po::value<std::string>(), "vocab TSV from xl-build-vocab (man 5 xl-vocab), or a tokens file or checkpoint whose vocab to use")
      ("mode,m", po::value<std::string>(), "without --vocab: build a byte, char or word vocab from the train split")
      ("min-count", po::value<int64_t>()->default_value(1), "with --mode: rarer pieces become <unk>")
      ("max-size", po::value<int64_t>()->default_value(0), "with --mode: at most this many entries (0: all)")
      ("split", po::value<std::string>()->default_value("0.9,0.05,0.05"),
       "cut INPUT into train,valid,test: fractions (0.9,0.05,0.05; 1,0,0 is all train) or token counts (90M,5M,5M)")
      ("train", po::value<std::string>(), "train text (instead of INPUT)")
      ("valid", po::value<std::string>(), "valid text")
      ("test", po::value<std::string>(), "test text")
      ("allow-invalid-utf8", po::bool_switch(), "char/word: map invalid UTF-8 bytes to <unk> instead of failing")
      ("pretokenize", po::value<std::string>(), "word: none (split lines at whitespace) or moses (tokenize raw text as Hugging Face's TransfoXL tokenizer does); default: what the vocab records, none for a new vocab")
      ("compress", po::bool_switch(), "store splits with shuffle+deflate")
      ("decode", po::value<std::string>(), "write split NAME (or all) of the tokens file INPUT as text");
  cli.positional("input", 1);
  cli.add_output("the tokens file (text with --decode)");
  cli.files({"input", "train", "valid", "test", "vocab"});
}

TokenizeRequest tokenize_request(const cli::Options& cli, int argc, char** argv) {
  TokenizeRequest r;
  r.input = cli.get<std::string>("input");
  r.output = cli.output();
  r.force = cli.force();
  if (cli.has("decode")) {
    r.decode = cli.get<std::string>("decode");
    // `--decode FILE` reads like "decode FILE", but the value is the split: FILE would be taken as a
    // split name and the tokens read from stdin.
    if (io::is_stdio(r.input) && io::is_file(*r.decode))
      cli.fail("decode", "takes the split to write (train, valid, test or all), not the file: xl-tokenize --decode all " + *r.decode);
    r.pretokenize = cli.get_optional<std::string>("pretokenize");
    return r;
  }
  r.corpus = corpus_request(cli, r.input);
  r.compress = cli.get<bool>("compress");
  r.command_line = cli::command_line(argc, argv);
  return r;
}

void run_tokenize(const TokenizeRequest& request) {
  if (request.decode) decode(request);
  else tokenize(request);
}

}  // namespace xl::data
