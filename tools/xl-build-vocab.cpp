// xl-build-vocab: text -> vocab TSV (byte, char or word pieces, deterministic order).
#include <algorithm>

#include "xl/cli/options.h"
#include "xl/cli/tool_main.h"
#include "xl/text/segmenter.h"
#include "xl/text/vocab.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"

int main(int argc, char** argv) {
  return xl::cli::run_tool("xl-build-vocab", argc, argv, [](int argc, char** argv) {
    xl::cli::Options cli({"xl-build-vocab", "Count the pieces of a text and write a vocab (TSV).", "[OPTIONS] [INPUT...]",
                          "Reads text (files or - for stdin; gzip, bzip2 and xz are detected) and writes a vocab:\n"
                          "byte (256 fixed ids, the enwik8 convention), char (Unicode code points) or word\n"
                          "(whitespace tokens with <eos> at every line end). Specials come first, then pieces\n"
                          "by falling count, ties by byte order: identical input gives an identical file.",
                          "  xl-build-vocab --mode byte enwik8 > vocab.tsv\n"
                          "  xl-build-vocab --mode word --min-count 3 wiki.train.tokens -o vocab.tsv"});
    cli.add("Vocab")
        ("input", xl::cli::po::value<std::vector<std::string>>()->default_value({"-"}, "-"), "input text files")
        ("mode,m", xl::cli::po::value<std::string>()->default_value("byte"), "byte, char or word")
        ("min-count", xl::cli::po::value<int64_t>()->default_value(1), "char/word: rarer pieces become <unk>")
        ("max-size", xl::cli::po::value<int64_t>()->default_value(0), "word/char: at most this many entries (0: all)")
        ("allow-invalid-utf8", xl::cli::po::bool_switch(), "char: count invalid bytes as <unk> instead of failing")
        ("pretokenize", xl::cli::po::value<std::string>(), "word: none (split lines at whitespace) or moses (tokenize raw text as Hugging Face's TransfoXL tokenizer does); default: what the vocab records, none for a new vocab");
    cli.positional("input", -1);
    cli.add_output("the vocab");
    cli.files({"input"});
    if (!cli.parse(argc, argv)) return 0;

    xl::text::VocabOptions opts;
    opts.type = cli.parsed("mode", [&](const std::string& what) {
      return xl::text::parse_vocab_type(cli.get<std::string>("mode"), what);
    });
    opts.min_count = cli.get<int64_t>("min-count");
    opts.max_size = cli.get<int64_t>("max-size");
    xl::text::check_vocab_limits(opts.min_count, opts.max_size, cli.origins());
    opts.allow_invalid_utf8 = cli.get<bool>("allow-invalid-utf8");
    opts.pretokenizer = cli.parsed("pretokenize", [&](const std::string& what) {
      return xl::text::parse_pretokenizer(cli.get_or<std::string>("pretokenize", "none"), what);
    });
    xl::text::check_pretokenizer(opts.type, opts.pretokenizer);
    xl::io::AtomicOutput out(cli.output(), cli.force(), false);
    std::vector<std::string> texts;
    std::vector<std::string_view> views;
    std::vector<std::string> names;
    for (const auto& path : cli.get<std::vector<std::string>>("input")) {
      texts.push_back(xl::io::read_text(path));
      names.push_back(xl::io::display_name(path));
      xl::text::warn_byte_order_mark(texts.back(), opts.type, names.back());
    }
    for (const auto& t : texts) views.emplace_back(t);
    // A char or word vocab of specials alone would make every piece <unk>.
    const std::string source = names.front() + (names.size() > 1 ? " and the other inputs" : "");
    XL_CHECK(opts.type == xl::text::VocabType::kByte ||
                 std::any_of(texts.begin(), texts.end(), [](const std::string& t) { return !t.empty(); }),
             xl::kExitDataErr, source << ": no text to build the vocab from");
    auto vocab = xl::text::build_vocab(views, opts, names);
    xl::text::check_vocab_has_pieces(vocab, opts, source, cli.origins());
    out.stream() << vocab.to_tsv();
    out.commit();
    XL_INFO(xl::text::to_string(vocab.type()) << " vocab of " << vocab.size() << " entries, sha256 " << vocab.sha256());
    return 0;
  });
}
