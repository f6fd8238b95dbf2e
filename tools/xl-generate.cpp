// xl-generate: sample text from a checkpoint, with the segment memory carried along.
#include "xl/cli/tool_main.h"
#include "xl/compute/torch_process.h"
#include "xl/eval/generate_text.h"
#include "xl/options/generate_options.h"

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
    xl::options::add_generate_options(cli);
    if (!cli.parse(argc, argv)) return 0;
    xl::eval::generate_text(xl::options::text_generation_request(cli));
    return 0;
  });
}
