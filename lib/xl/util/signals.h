// SIGINT, SIGTERM and SIGHUP. By default they remove the process's registered temp files and kill
// it; a long job (training) asks to be told instead, finishes its step, saves and exits 128+N.
// SIGUSR1 asks that job for a checkpoint (Slurm's --signal=USR1@120 before a time limit).
#pragma once

#include <string>

namespace xl::signals {

// The default: registered temp outputs are removed, then the signal kills the process.
void remove_temps_and_die_on_stop();
// From now on SIGINT/SIGTERM/SIGHUP (a closed terminal) only set a flag. Another one a second or more later kills at once;
// copies of the first within that second (a signal to the process and to its group) do not.
void catch_stop();
// Said on stderr as the first stop signal is caught: "TOOL: DOING; another stop signal a second or
// more from now stops it at once, unsaved" (a base step and its save take seconds, in which a user
// who hears nothing stops it again). `on_new_line` when a live progress line may be on screen.
void set_stop_notice(const std::string& doing, bool on_new_line = false);
// The signal caught since catch_stop(), or 0.
int pending();
// SIGUSR1 asks a process that called catch_stop() for a checkpoint, and it trains on (elsewhere
// SIGUSR1 stops a tool as the stop signals do). Whether one came since the last call.
bool take_checkpoint_request();
// In a child after fork, before exec: the stop signals as a new process has them (default action,
// not blocked; the parent blocks them in all its threads and takes them on a thread of its own).
void default_in_child();
// From now on, once process `pid` has ended (even of SIGKILL), this process stops as on one
// SIGTERM; at once when it has ended already. A pidfd tells, so a reused pid cannot deceive it.
// (PR_SET_PDEATHSIG would send one signal for each of a multithreaded parent's threads as they
// die, and a second signal stops at once without saving.)
void stop_when_process_ends(int pid);
// The environment variable through which a program asks the xl tools it starts, however deep
// (make, a recipe's shell), to stop when it ends: its pid. run_tool() obeys it.
extern const char* const kStopWithVariable;

}  // namespace xl::signals
