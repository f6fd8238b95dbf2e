// xl-ablate: runs an ablation grid (the paper's Tables 5-10) through a generated Makefile, and
// turns its run directories into tables.
#include <filesystem>

#include "xl/ablate/grid.h"
#include "xl/ablate/makefile_plan.h"
#include "xl/ablate/run_dir.h"
#include "xl/ablate/run_report.h"
#include "xl/ablate/tables.h"
#include "xl/cli/options.h"
#include "xl/cli/tool_main.h"
#include "xl/util/error.h"
#include "xl/util/gnuplot.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/output_lock.h"
#include "xl/util/resources.h"

namespace po = xl::cli::po;
namespace fs = std::filesystem;
using namespace xl;

namespace {

std::string exe_dir() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

std::string absolute(const std::string& path) { return fs::absolute(path).lexically_normal().string(); }

void print_report(const ablate::AblationReport& rep, const std::string& format) {
  if (format == "md") io::write_stdout(ablate::report_markdown(rep));
  else if (format == "tsv") io::write_stdout(ablate::report_tsv(rep));
  else io::write_stdout(ablate::report_jsonl(rep));
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool("xl-ablate", argc, argv, [](int argc, char** argv) {
    cli::Options cli(
        {"xl-ablate", "Run an ablation grid of training runs and tabulate dev and test results.",
         "[OPTIONS] GRID.ini --tokens TOKENS.h5 --out DIR | report DIR",
         "A grid INI (see FILES in xl-ablate(1)) expands to named runs: the cartesian product of its\n"
         "[axes], crossed with its [run NAME] sections, on a base config. xl-ablate writes DIR/Makefile,\n"
         "where each run is a directory DIR/RUN: phase 1 (xl-train-phase1), phase 2 for phases = p1+p2\n"
         "(xl-train-phase2 --init), then xl-eval-longctx on the valid and test splits. Every run gets\n"
         "the same total budget: a phase-1-only run trains p1 + p2 in phase 1. It then runs make -jN\n"
         "and prints the tables. A stopped xl-ablate (a signal, or even SIGKILL) stops its trainings,\n"
         "which save first. Running it again (or make -f DIR/Makefile) resumes interrupted\n"
         "trainings from their checkpoints and leaves finished runs alone; --emit-makefile prints\n"
         "the Makefile instead (it writes only DIR/grid.json and the runs' run.json). 'report DIR'\n"
         "rebuilds the tables from the run directories, listing unfinished runs as such: dev and\n"
         "test bpc (ppl for word vocabs), parameters, time per batch of each phase, training wall\n"
         "time and peak RSS, and with table-rows/table-cols a pivot like the paper's Table 10.",
         "  xl-ablate share/xl/grids/table5-tiny.ini --tokens enwik8.h5 --out t5 --jobs 2\n"
         "  xl-ablate table6-tiny.ini --tokens-text enwik8 --out t6 --jobs 2 --format tsv\n"
         "  xl-ablate table10-tiny.ini --tokens enwik8.h5 --out t10 --emit-makefile --threads 1 | make -f - -j2\n"
         "  xl-ablate report t5 --format md --plot t5-valid.png"});
    cli.add("Grid")
        ("args", po::value<std::vector<std::string>>()->composing(), "GRID.ini, or: report DIR")
        ("tokens", po::value<std::string>(), "tokens file from xl-tokenize that every run trains and evaluates on")
        ("tokens-text", po::value<std::string>(), "raw corpus instead: tokenized (byte, 0.9,0.05,0.05) into DIR/tokens.h5")
        ("out", po::value<std::string>(), "directory of the runs")
        ("jobs,j", po::value<int>()->default_value(1), "runs trained in parallel (make -jN)")
        ("threads", po::value<int>()->default_value(0), "threads of each tool (0: cores / jobs)")
        ("launch", po::value<std::string>()->default_value(""), "start each training with this launcher, e.g. 'torchrun --nproc_per_node 2 --no-python'")
        ("emit-makefile", po::bool_switch(), "print the Makefile on stdout instead of running it");
    cli.add("Report")
        ("format", po::value<std::string>()->default_value("md"), "jsonl, md (Markdown tables) or tsv")
        ("plot", po::value<std::string>(), "also draw the validation curves of all runs to FILE.png (gnuplot)");
    cli.positional("args", -1);
    cli.files({"args", "tokens", "tokens-text"}, {"plot"});
    if (!cli.parse(argc, argv)) return 0;

    const auto args = cli.has("args") ? cli.get<std::vector<std::string>>("args") : std::vector<std::string>();
    const std::string format = cli.get<std::string>("format");
    if (format != "md" && format != "tsv" && format != "jsonl") cli.fail("format", "must be md, tsv or jsonl");
    XL_CHECK(!args.empty(), kExitUsage, "give a GRID.ini (or: report DIR); see xl-ablate --help");
    if (cli.has("plot")) check_plot(cli.get<std::string>("plot"));  // now, not after the grid has trained

    if (args[0] == "report") {
      XL_CHECK(args.size() == 2, kExitUsage, "usage: xl-ablate report DIR [--format md|tsv|jsonl] [--plot FILE.png]");
      XL_CHECK(!cli.has("tokens") && !cli.has("tokens-text") && !cli.has("out") && !cli.get<bool>("emit-makefile"),
               kExitUsage, "report takes only DIR, --format and --plot");
      auto rep = ablate::read_report(args[1]);
      print_report(rep, format);
      if (cli.has("plot")) ablate::plot_validation(rep, cli.get<std::string>("plot"));
      return 0;
    }

    XL_CHECK(args.size() == 1, kExitUsage, "give one GRID.ini (extra argument '" << args[1] << "')");
    XL_CHECK(cli.has("out"), kExitUsage, "give --out DIR, the directory of the runs");
    XL_CHECK(cli.has("tokens") != cli.has("tokens-text"), kExitUsage, "give either --tokens TOKENS.h5 or --tokens-text FILE");
    const int jobs = cli.get<int>("jobs");
    if (jobs < 1) cli.fail("jobs", "must be at least 1");
    int threads = cli.get<int>("threads");
    if (threads < 0) cli.fail("threads", "must not be negative");
    if (threads == 0) threads = std::max(1, xl::usable_cores() / jobs);

    const std::string bin = exe_dir();
    XL_CHECK(!bin.empty(), kExitSoftware, "cannot find the directory of xl-ablate (/proc/self/exe)");
    ablate::Grid grid = ablate::load_grid(args[0], bin);
    ablate::MakefileSettings ms;
    ms.bin_dir = bin;
    ms.out_dir = absolute(cli.get<std::string>("out"));
    ms.threads = threads;
    ms.launch = cli.get<std::string>("launch");
    ms.grid_path = absolute(args[0]);
    if (cli.has("tokens")) {
      ms.tokens = absolute(cli.get<std::string>("tokens"));
      XL_CHECK(fs::is_regular_file(ms.tokens), kExitNoInput, cli.get<std::string>("tokens") << ": no such tokens file");
    } else {
      ms.tokens_text = absolute(cli.get<std::string>("tokens-text"));
      XL_CHECK(fs::is_regular_file(ms.tokens_text), kExitNoInput, cli.get<std::string>("tokens-text") << ": no such file");
    }
    const std::string makefile = ablate::makefile_text(grid, ms);
    ablate::prepare_out_dir(grid, ms.out_dir);
    if (cli.get<bool>("emit-makefile")) {
      io::write_stdout(makefile);
      return 0;
    }
    // One xl-ablate per --out: a second would start the same trainings, which their output locks
    // refuse (73), and mark those runs failed while the first still trains them.
    const std::string lock = ms.out_dir + "/xl-ablate";
    if (const std::string who = io::OutputLock::holder(lock); !who.empty())
      XL_FAIL(kExitCantCreat, ms.out_dir << ": another xl-ablate runs this grid (" << who
                                         << "); let it finish, or give this one another --out");
    io::OutputLock running(lock);
    const std::string path = ms.out_dir + "/Makefile";
    {
      io::AtomicOutput out(path, true, false);
      out.stream() << makefile;
      out.commit();
    }
    XL_INFO(grid.name << ": " << grid.runs.size() << " runs in " << ms.out_dir << ", " << jobs << " at a time, "
                      << threads << " thread" << (threads == 1 ? "" : "s") << " each");
    const int rc = ablate::run_make(path, jobs);
    if (rc >= 128) {
      XL_WARN("stopped by signal " << rc - 128 << "; run the same command again to resume");
      return rc;
    }
    print_report(ablate::read_report(ms.out_dir), format);
    if (rc != 0) {
      auto [code, run] = ablate::failed_run(grid, ms.out_dir);
      XL_CHECK(code == 0, code,
               "run " << run << " failed (exit " << code << "; see " << ms.out_dir << "/" << run
                      << "/*.log); finished runs are kept, run again to continue");
      XL_FAIL(rc == kExitUnavailable ? kExitUnavailable : kExitSoftware, "make -f " << path << " failed (exit " << rc << ")");
    }
    if (cli.has("plot")) ablate::plot_validation(ablate::read_report(ms.out_dir), cli.get<std::string>("plot"));
    return 0;
  });
}
