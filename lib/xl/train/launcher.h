// --nproc-per-node N without torchrun: this process starts N copies of itself as the ranks of one
// job on this machine (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a
// free MASTER_PORT in their environment), passes SIGINT and SIGTERM on to them, and when one of
// them fails stops the others (a rank that exits has said why; one killed by a signal, or one
// that had to be killed, is named here). A piped input (TOKENS or --init as -) is copied to an
// unnamed temp file first, which each rank reads as its stdin: a pipe can be read only once.
#pragma once

namespace xl::train {

// Runs the job to its end; returns its exit status (the first failing rank's, 69 only when no rank
// failed otherwise, never the launcher's own SIGKILL's; 128+N after signal N).
// With `spool_stdin` the ranks read a copy of this process's stdin.
int launch_local_ranks(char** argv, int nproc, bool spool_stdin);

// Whether this process is a rank that launch_local_ranks started (its argv still asks for ranks).
bool started_by_launcher();
// In such a rank: should the launcher die (even of SIGKILL), save and stop as on SIGTERM rather
// than train on orphaned.
void stop_with_launcher();
// Whether this rank's stdin is its own copy of the launcher's (so "-" may be read by every rank).
bool stdin_spooled_by_launcher();

}  // namespace xl::train
