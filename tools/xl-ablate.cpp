// xl-ablate: runs an ablation grid (the paper's Tables 5-10) through a generated Makefile, and
// turns its run directories into tables.
#include "xl/ablate/ablate_options.h"
#include "xl/ablate/grid_run.h"
#include "xl/cli/tool_main.h"

int main(int argc, char** argv) {
  return xl::cli::run_tool("xl-ablate", argc, argv, [](int argc, char** argv) {
    xl::cli::Options cli(
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
    xl::ablate::add_ablate_options(cli);
    if (!cli.parse(argc, argv)) return 0;
    return xl::ablate::run_grid(xl::ablate::grid_run_request(cli));
  });
}
