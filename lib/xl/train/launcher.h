// --nproc-per-node N without torchrun: this process starts N copies of itself as the ranks of one
// job on this machine (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a
// free MASTER_PORT in their environment), passes SIGINT and SIGTERM on to them, and when one of
// them fails stops the others and says which one it was.
#pragma once

namespace xl::train {

// Runs the job to its end; returns its exit status (the first failing rank's; 128+N after signal N).
int launch_local_ranks(char** argv, int nproc);

// Whether this process is a rank that launch_local_ranks started (its argv still asks for ranks).
bool started_by_launcher();

}  // namespace xl::train
