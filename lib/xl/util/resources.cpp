#include "xl/util/resources.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

namespace xl {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

// The lowest memory limit on the way from cgroup directory `dir` up to `root` ("max" and
// v1's 2^63-ish "unlimited" are no limit); -1 when there is none.
int64_t cgroup_limit(std::filesystem::path dir, const std::filesystem::path& root, const char* file) {
  int64_t lowest = -1;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) dir = root;  // a namespaced container's own root
  for (;;) {
    std::ifstream in(dir / file);
    std::string text;
    if (in >> text && text != "max") {
      const long long v = std::atoll(text.c_str());
      if (v > 0 && v < (1LL << 62) && (lowest < 0 || v < lowest)) lowest = v;
    }
    if (dir == root || !dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
  }
  return lowest;
}

// The process's address space in use and its resident part, in bytes (0 when /proc is not there).
struct Statm {
  int64_t mapped = 0, resident = 0;
};
Statm statm_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return {};
  long size = 0, resident = 0;
  const int got = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  const int64_t page = sysconf(_SC_PAGESIZE);
  return got == 2 ? Statm{size * page, resident * page} : Statm{};
}

}  // namespace

int64_t usable_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  int64_t usable = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    // "0::/PATH" (cgroup v2) or "4:memory:/PATH" (v1's memory controller)
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::filesystem::path root;
    const char* file = nullptr;
    std::error_code ec;
    if (controllers.empty()) {
      root = std::filesystem::exists("/sys/fs/cgroup/unified/cgroup.controllers", ec) ? "/sys/fs/cgroup/unified"
                                                                                       : "/sys/fs/cgroup";
      file = "memory.max";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      root = "/sys/fs/cgroup/memory";
      file = "memory.limit_in_bytes";
    } else {
      continue;
    }
    const int64_t limit = cgroup_limit(root / std::filesystem::path(path).relative_path(), root, file);
    if (limit > 0 && (usable == 0 || limit < usable)) usable = limit;
  }
  // An address-space limit (ulimit -v, SGE's h_vmem) counts what is mapped already: what is left.
  rlimit space{};
  if (getrlimit(RLIMIT_AS, &space) == 0 && space.rlim_cur != RLIM_INFINITY) {
    const int64_t left = static_cast<int64_t>(space.rlim_cur) - mapped_bytes();
    if (usable == 0 || left < usable) usable = std::max<int64_t>(left, 1);
  }
  return usable;
}

double peak_rss_mb() {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux reports KiB
}

double rss_mb() {
  return static_cast<double>(statm_bytes().resident) / 1048576.0;
}

int64_t mapped_bytes() { return statm_bytes().mapped; }

std::string host_name() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace xl
