// The output directory of a grid and the make that fills it: DIR/grid.json and each run's
// DIR/RUN/run.json (a run whose settings changed since it started is refused), make -jN with its
// output on stderr, and which run failed.
#pragma once
#include <string>
#include <utility>

#include "xl/ablate/grid.h"

namespace xl::ablate {

// Creates DIR and the run directories with their descriptions; 78 when a started run's settings
// changed, 73 when a directory cannot be made or DIR holds a Makefile or grid.json that xl-ablate
// did not write (--out . in a project of the user's: both would be replaced).
void prepare_out_dir(const Grid& grid, const std::string& out);

// make -f MAKEFILE -jN, stdout sent to stderr (stdout is for the tables). Returns make's status,
// or 128+N after signal N, which it passes on to make and the trainings (they save their
// checkpoints and stop).
int run_make(const std::string& makefile, int jobs);

// The exit status a failed run left in DIR/RUN/failed, and that run's name ({0, ""} for none).
std::pair<int, std::string> failed_run(const Grid& grid, const std::string& out);

}  // namespace xl::ablate
