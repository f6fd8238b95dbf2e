// xl-tokenize: text -> tokens HDF5 (train/valid/test splits, vocab embedded), and back with --decode.
#include "xl/cli/tool_main.h"
#include "xl/data/tokenize.h"

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
    xl::data::add_tokenize_options(cli);
    if (!cli.parse(argc, argv)) return 0;
    xl::data::run_tokenize(xl::data::tokenize_request(cli, argc, argv));
    return 0;
  });
}
