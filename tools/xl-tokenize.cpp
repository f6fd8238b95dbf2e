// xl-tokenize: text -> tokens HDF5 (train/valid/test splits, vocab embedded), and back with --decode.
#include "xl/cli/options.h"
#include "xl/cli/tool_main.h"
#include "xl/data/corpus.h"
#include "xl/h5/tokens_file.h"
#include "xl/text/tokenizer.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"

namespace po = xl::cli::po;

namespace {

int decode(const xl::cli::Options& cli, const std::string& input) {
  const std::string which = cli.get<std::string>("decode");
  // `--decode FILE` reads like "decode FILE", but the value is the split: FILE would be taken as a
  // split name and the tokens read from stdin.
  if (xl::io::is_stdio(input) && xl::io::is_file(which))
    cli.fail("decode", "takes the split to write (train, valid, test or all), not the file: xl-tokenize --decode all " + which);
  auto tokens = xl::h5::TokensFile::open(input);
  std::vector<std::string> splits = which == "all" ? tokens.split_names() : std::vector<std::string>{which};
  const auto pretokenizer = xl::text::pretokenizer_for(tokens.vocab(), cli.get_optional<std::string>("pretokenize"));
  xl::text::Tokenizer tokenizer(tokens.vocab(), false, pretokenizer);
  xl::io::AtomicOutput out(cli.output(), cli.force(), false);
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
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return xl::cli::run_tool("xl-tokenize", argc, argv, [](int argc, char** argv) {
    xl::cli::Options cli({"xl-tokenize", "Turn text into an xl tokens file (HDF5), or decode one.", "[OPTIONS] [INPUT]",
                          "Tokenizes one INPUT cut into train/valid/test by --split, or separate --train/--valid/\n"
                          "--test inputs. Inputs are files or - (stdin), plain, gzip, bzip2 or xz. The vocab comes from\n"
                          "--vocab (a TSV, or the vocab a tokens file or checkpoint embeds), or is built from the\n"
                          "train split with --mode. The output (an HDF5 file, also through a pipe) embeds the vocab.\n"
                          "Pieces missing from the vocab become <unk> and are counted. --decode turns a split of a\n"
                          "tokens file back into text (Moses words detokenized line by line).",
                          "  xl-tokenize --vocab v.tsv --split 90M,5M,5M enwik8 -o enwik8.h5\n"
                          "  xl-tokenize --mode byte --split 0.9,0.05,0.05 corpus.txt.gz | xl-inspect -\n"
                          "  xl-tokenize --mode word --train wiki.train.tokens --valid wiki.valid.tokens -o wt.h5\n"
                          "  xl-tokenize --vocab wt.h5 --test new.txt -o new.h5\n"
                          "  xl-tokenize --decode all enwik8.h5 > enwik8.txt"});
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
    if (!cli.parse(argc, argv)) return 0;

    const std::string input = cli.get<std::string>("input");
    if (cli.has("decode")) return decode(cli, input);

    xl::data::CorpusRequest req;
    for (const char* s : {"train", "valid", "test"})
      if (cli.has(s)) req.inputs.push_back({s, cli.get<std::string>(s)});
    if (req.inputs.empty()) {
      req.whole_input = input;
      req.split_spec = cli.get<std::string>("split");
      cli.parsed("split", [&](const std::string& what) {
        xl::data::check_split_spec(req.split_spec, 3, what);
        return 0;
      });
    } else {
      XL_CHECK(!cli.given("input") || input == "-", xl::kExitUsage, "give either INPUT or --train/--valid/--test, not both");
    }
    XL_CHECK(cli.has("vocab") != cli.has("mode"), xl::kExitUsage, "give exactly one of --vocab FILE or --mode byte|char|word");
    if (cli.has("vocab")) {
      req.vocab = xl::h5::load_vocab(cli.get<std::string>("vocab"));
    } else {
      req.build.type = cli.parsed("mode", [&](const std::string& what) {
        return xl::text::parse_vocab_type(cli.get<std::string>("mode"), what);
      });
      req.build.min_count = cli.get<int64_t>("min-count");
      req.build.max_size = cli.get<int64_t>("max-size");
      xl::text::check_vocab_limits(req.build.min_count, req.build.max_size, cli.origins());
      req.build.origins = cli.origins();
    }
    req.allow_invalid_utf8 = cli.get<bool>("allow-invalid-utf8");
    if (cli.has("pretokenize"))
      cli.parsed("pretokenize", [&](const std::string& what) {
        return xl::text::parse_pretokenizer(cli.get<std::string>("pretokenize"), what);
      });
    req.pretokenizer = req.vocab ? xl::text::pretokenizer_for(*req.vocab, cli.get_optional<std::string>("pretokenize"))
                                 : xl::text::parse_pretokenizer(cli.get_or<std::string>("pretokenize", "none"));
    xl::h5::OutputFile out(cli.output(), cli.force());  // fail early on an unwritable output
    auto corpus = xl::data::tokenize_corpus(req);

    xl::h5::TokensMeta meta;
    meta.created_by = std::string("xl-tokenize ") + XL_VERSION;
    meta.command_line = xl::cli::command_line(argc, argv);
    meta.source_sha256 = corpus.source_sha256;
    meta.source_bytes = corpus.source_bytes;
    meta.compress = cli.get<bool>("compress");
    xl::h5::write_tokens(out.file(), corpus.vocab, corpus.splits, meta);
    out.commit();
    for (const auto& s : corpus.splits)
      XL_INFO(s.name << ": " << s.ids.size() << " tokens" << (s.source.unknown ? ", " + std::to_string(s.source.unknown) + " mapped to <unk>" : ""));
    return 0;
  });
}
