// xl-ablate's two commands: running a grid (DIR/Makefile written and run by make -jN, or printed
// with --emit-makefile, then the tables), and `report DIR`, the tables rebuilt from the run
// directories. One xl-ablate per DIR at a time.
#pragma once
#include <string>

#include "xl/ablate/makefile_plan.h"

namespace xl::ablate {

enum class TableFormat { kMarkdown, kTsv, kJsonl };

// Checked settings (options/ablate_options.h builds them from the flags).
struct GridRunRequest {
  bool report = false;        // `report DIR`: tables only
  std::string report_dir;     // for report
  std::string grid;           // GRID.ini
  MakefileSettings makefile;  // bin_dir, out_dir, tokens or tokens_text, threads, launch, grid_path
  int jobs = 1;
  bool emit_makefile = false;
  TableFormat format = TableFormat::kMarkdown;
  std::string plot;           // the validation curves' PNG, or empty
};

// The tables go to stdout. 0; 128 + N after signal N (a run of the same command resumes).
int run_grid(const GridRunRequest& request);

}  // namespace xl::ablate
