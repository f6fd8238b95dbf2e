// xl-ablate's options: the grid and where its runs go (or `report DIR`), how many run at once and
// with how many threads, and the tables' format.
#pragma once
#include "xl/ablate/grid_run.h"
#include "xl/cli/options.h"

namespace xl::ablate {

void add_ablate_options(cli::Options& cli);
// Every flag checked (64, 66 for a missing tokens file); paths made absolute for the Makefile.
GridRunRequest grid_run_request(const cli::Options& cli);

}  // namespace xl::ablate
