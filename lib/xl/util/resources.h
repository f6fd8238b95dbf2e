// What the process has used so far, for reports and metrics, the cores it may use, and the
// machine it runs on.
#pragma once
#include <cstdint>
#include <string>

namespace xl {

// The cores this process may run on: its CPU affinity (what Slurm, taskset or a container's
// cpuset allot), not the machine's count; at least 1.
int usable_cores();

// The memory this process may use, in bytes: the machine's, or its cgroup's limit where lower
// (Slurm's --mem, a container's), or what is left of its address-space limit where lower still
// (ulimit -v, SGE's h_vmem); 0 when none can be read.
int64_t usable_memory_bytes();

// Peak resident set size in MB (2^20 bytes).
double peak_rss_mb();
// Resident set size now, in MB (0 when /proc is not there).
double rss_mb();
// The address space mapped now, in bytes, as an address-space limit counts it (0 without /proc).
int64_t mapped_bytes();

// This machine's name, as the ranks and the output locks name where a process runs.
std::string host_name();

}  // namespace xl
