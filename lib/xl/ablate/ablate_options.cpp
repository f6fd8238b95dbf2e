#include "xl/ablate/ablate_options.h"

#include <algorithm>
#include <filesystem>

#include "xl/util/error.h"
#include "xl/util/resources.h"

namespace xl::ablate {
namespace po = cli::po;
namespace fs = std::filesystem;
namespace {

std::string exe_dir() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

std::string absolute(const std::string& path) { return fs::absolute(path).lexically_normal().string(); }

}  // namespace

void add_ablate_options(cli::Options& cli) {
  cli.add("Grid")
      ("args", po::value<std::vector<std::string>>()->composing(), "GRID.ini, or: report DIR")
      ("tokens", po::value<std::string>(), "tokens file from xl-tokenize that every run trains and evaluates on")
      ("tokens-text", po::value<std::string>(), "raw corpus instead: tokenized (byte, 0.9,0.05,0.05) into DIR/tokens.h5")
      ("out", po::value<std::string>(), "directory of the runs")
      ("jobs,j", po::value<int>()->default_value(1), "runs trained in parallel (make -jN)")
      ("threads", po::value<int>()->default_value(0), "threads of each tool (0: cores / jobs)")
      ("launch", po::value<std::string>()->default_value(""), "start each training with this launcher, e.g. 'torchrun --nproc_per_node 2 --no_python'")
      ("emit-makefile", po::bool_switch(), "print the Makefile on stdout instead of running it")
      ("tensorboard", po::value<std::string>(), "write each run's TensorBoard curves into DIR/RUN (both phases)");
  cli.add("Report")
      ("format", po::value<std::string>()->default_value("md"), "jsonl, md (Markdown tables) or tsv")
      ("plot", po::value<std::string>(), "also draw the validation curves of all runs to FILE.png (gnuplot)");
  cli.positional("args", -1);
  cli.files({"args", "tokens", "tokens-text"}, {"plot"});
}

GridRunRequest grid_run_request(const cli::Options& cli) {
  GridRunRequest r;
  const auto args = cli.has("args") ? cli.get<std::vector<std::string>>("args") : std::vector<std::string>();
  const std::string format = cli.get<std::string>("format");
  if (format == "md") r.format = TableFormat::kMarkdown;
  else if (format == "tsv") r.format = TableFormat::kTsv;
  else if (format == "jsonl") r.format = TableFormat::kJsonl;
  else cli.fail("format", "must be md, tsv or jsonl");
  XL_CHECK(!args.empty(), kExitUsage, "give a GRID.ini (or: report DIR); see xl-ablate --help");
  if (cli.has("plot")) r.plot = cli.get<std::string>("plot");
  if (args[0] == "report") {
    XL_CHECK(args.size() == 2, kExitUsage, "usage: xl-ablate report DIR [--format md|tsv|jsonl] [--plot FILE.png]");
    XL_CHECK(!cli.has("tokens") && !cli.has("tokens-text") && !cli.has("out") && !cli.get<bool>("emit-makefile") &&
                 !cli.has("tensorboard"),
             kExitUsage, "report takes only DIR, --format and --plot");
    r.report = true;
    r.report_dir = args[1];
    return r;
  }
  XL_CHECK(args.size() == 1, kExitUsage, "give one GRID.ini (extra argument '" << args[1] << "')");
  XL_CHECK(cli.has("out"), kExitUsage, "give --out DIR, the directory of the runs");
  XL_CHECK(cli.has("tokens") != cli.has("tokens-text"), kExitUsage, "give either --tokens TOKENS.h5 or --tokens-text FILE");
  r.jobs = cli.get<int>("jobs");
  if (r.jobs < 1) cli.fail("jobs", "must be at least 1");
  int threads = cli.get<int>("threads");
  if (threads < 0) cli.fail("threads", "must not be negative");
  if (threads == 0) threads = std::max(1, usable_cores() / r.jobs);
  r.grid = args[0];
  r.emit_makefile = cli.get<bool>("emit-makefile");
  MakefileSettings& ms = r.makefile;
  ms.bin_dir = exe_dir();
  XL_CHECK(!ms.bin_dir.empty(), kExitSoftware, "cannot find the directory of xl-ablate (/proc/self/exe)");
  ms.out_dir = absolute(cli.get<std::string>("out"));
  ms.threads = threads;
  ms.launch = cli.get<std::string>("launch");
  ms.grid_path = absolute(args[0]);
  if (cli.has("tensorboard")) ms.tensorboard = absolute(cli.get<std::string>("tensorboard"));
  if (cli.has("tokens")) {
    ms.tokens = absolute(cli.get<std::string>("tokens"));
    XL_CHECK(fs::is_regular_file(ms.tokens), kExitNoInput, cli.get<std::string>("tokens") << ": no such tokens file");
  } else {
    ms.tokens_text = absolute(cli.get<std::string>("tokens-text"));
    XL_CHECK(fs::is_regular_file(ms.tokens_text), kExitNoInput, cli.get<std::string>("tokens-text") << ": no such file");
  }
  return r;
}

}  // namespace xl::ablate
