// One writer per output: two trainings given the same -o (a job started twice, a requeued job
// whose first run still saves) would each replace the other's checkpoints, and the resumed run
// would be half of each. The writer holds PATH.lock (flock), which names it; a second is refused.
#pragma once
#include <string>

namespace xl::io {

class OutputLock {
 public:
  // Takes PATH.lock or fails (73) naming the process that holds it. A lock left by a killed
  // process is free (the kernel drops it with the process) and is taken over. Where the file
  // system has no locks (ENOLCK, some NFS mounts) it goes on without one.
  explicit OutputLock(const std::string& path);
  ~OutputLock();  // removes PATH.lock
  // Who holds PATH.lock ("pid 123 on host"), or "" when no one does: a training still writes PATH.
  static std::string holder(const std::string& path);
  // Whether this process holds the lock (false where the file system has none).
  bool held() const { return fd_ >= 0; }
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  std::string lock_path_;
  int fd_ = -1;
};

}  // namespace xl::io
