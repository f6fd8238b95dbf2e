// xl-inspect: a readable (or JSON) summary of any xl HDF5 file.
#include <iostream>

#include "xl/cli/options.h"
#include "xl/cli/tool_main.h"
#include "xl/h5/checksum.h"
#include "xl/h5/inspect.h"
#include "xl/h5/upgrade.h"
#include "xl/util/json_io.h"

int main(int argc, char** argv) {
  return xl::cli::run_tool("xl-inspect", argc, argv, [](int argc, char** argv) {
    xl::cli::Options cli({"xl-inspect", "Summarize an xl HDF5 file: tokens file or checkpoint.", "[OPTIONS] [FILE]",
                          "Prints the format and version, provenance attributes, and the file's contents:\n"
                          "splits and their lengths, vocab type/size/hash and source hash for tokens files;\n"
                          "model configuration, step and parameters for checkpoints. FILE may be - (a pipe).\n"
                          "--verify instead reads every dataset and checks it against the checksum recorded\n"
                          "when it was written (65 naming the first corrupt one), without loading a model.\n"
                          "--upgrade rewrites a file of xl 0.2 (or one whose string attributes h5py wrote) in\n"
                          "place with fixed-length strings: xl refuses variable-length strings, because the\n"
                          "HDF5 library reads them without bounds checks. Upgrade only files you trust.",
                          "  xl-tokenize --mode byte corpus.txt | xl-inspect -\n"
                          "  xl-inspect --json model.h5 | jq .attributes.step\n"
                          "  xl-inspect --verify downloaded.h5\n"
                          "  xl-inspect --upgrade my-old-model.h5"});
    cli.add("Inspect")
        ("file", xl::cli::po::value<std::string>()->default_value("-"), "the HDF5 file (- is stdin)")
        ("json", xl::cli::po::bool_switch(), "print one JSON object instead of text")
        ("verify", xl::cli::po::bool_switch(), "check every dataset against its recorded checksum")
        ("upgrade", xl::cli::po::bool_switch(), "rewrite a trusted file's variable-length strings in place");
    cli.positional("file", 1);
    if (!cli.parse(argc, argv)) return 0;
    if (cli.get<bool>("upgrade")) {
      const std::string path = cli.get<std::string>("file");
      const int64_t changed = xl::h5::upgrade_string_attributes(path);
      if (cli.get<bool>("json")) std::cout << xl::json_line(nlohmann::json{{"file", path}, {"upgraded_attributes", changed}}) << "\n";
      else std::cout << path << ": " << (changed ? std::to_string(changed) + " string attributes rewritten" : "nothing to upgrade") << "\n";
      return 0;
    }
    auto file = xl::h5::File::open(cli.get<std::string>("file"), "an xl HDF5 file");
    if (cli.get<bool>("verify")) {
      const auto r = xl::h5::verify_checksums(file);
      if (cli.get<bool>("json"))
        std::cout << xl::json_line(nlohmann::json{{"file", file.name()}, {"verified", r.checked}, {"without_checksum", r.unchecked}})
                  << "\n";
      else
        std::cout << file.name() << ": " << r.checked << " datasets match their checksums"
                  << (r.unchecked ? ", " + std::to_string(r.unchecked) + " have none (written by an older xl or another program)" : "") << "\n";
      return 0;
    }
    auto description = xl::h5::describe(file);
    if (cli.get<bool>("json")) std::cout << xl::json_line(description) << "\n";
    else std::cout << xl::h5::describe_text(description);
    std::cout.flush();
    return 0;
  });
}
