#include "xl/ablate/grid_run.h"

#include "xl/ablate/grid.h"
#include "xl/ablate/run_dir.h"
#include "xl/ablate/run_report.h"
#include "xl/ablate/tables.h"
#include "xl/util/error.h"
#include "xl/util/gnuplot.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/output_lock.h"

namespace xl::ablate {
namespace {

void print_report(const AblationReport& rep, TableFormat format) {
  if (format == TableFormat::kMarkdown) io::write_stdout(report_markdown(rep));
  else if (format == TableFormat::kTsv) io::write_stdout(report_tsv(rep));
  else io::write_stdout(report_jsonl(rep));
}

int report(const GridRunRequest& r) {
  auto rep = read_report(r.report_dir);
  print_report(rep, r.format);
  if (!r.plot.empty()) plot_validation(rep, r.plot);
  return 0;
}

// Why make failed: a run's training or evaluation (its exit code), else make itself.
[[noreturn]] void fail_after_make(const Grid& grid, const std::string& out_dir, const std::string& makefile, int rc) {
  auto [code, run] = failed_run(grid, out_dir);
  XL_CHECK(code == 0, code,
           "run " << run << " failed (exit " << code << "; see " << out_dir << "/" << run
                  << "/*.log); finished runs are kept, run again to continue");
  XL_FAIL(rc == kExitUnavailable ? kExitUnavailable : kExitSoftware, "make -f " << makefile << " failed (exit " << rc << ")");
}

}  // namespace

int run_grid(const GridRunRequest& r) {
  if (!r.plot.empty()) check_plot(r.plot);  // now, not after the grid has trained
  if (r.report) return report(r);
  const MakefileSettings& ms = r.makefile;
  Grid grid = load_grid(r.grid, ms.bin_dir);
  const std::string makefile = makefile_text(grid, ms);
  prepare_out_dir(grid, ms.out_dir);
  if (r.emit_makefile) {
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
  XL_INFO(grid.name << ": " << grid.runs.size() << " runs in " << ms.out_dir << ", " << r.jobs << " at a time, "
                    << ms.threads << " thread" << (ms.threads == 1 ? "" : "s") << " each");
  const int rc = run_make(path, r.jobs);
  if (rc >= 128) {
    XL_WARN("stopped by signal " << rc - 128 << "; run the same command again to resume");
    return rc;
  }
  print_report(read_report(ms.out_dir), r.format);
  if (rc != 0) fail_after_make(grid, ms.out_dir, path, rc);
  if (!r.plot.empty()) plot_validation(read_report(ms.out_dir), r.plot);
  return 0;
}

}  // namespace xl::ablate
