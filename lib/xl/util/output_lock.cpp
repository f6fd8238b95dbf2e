#include "xl/util/output_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/resources.h"

namespace xl::io {

namespace {

// The holder's name as the lock file gives it, without its line end.
std::string read_holder(int fd) {
  char text[256] = {0};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  std::string who(text, got > 0 ? static_cast<size_t>(got) : 0);
  while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
  return who;
}

// "pid N on HOST": HOST when it is another machine. On a network file system a machine that went
// down can hold its lock long after (NFSv3 until it boots again): a requeued job is told the way out.
std::string other_host(const std::string& who) {
  const size_t on = who.rfind(" on ");
  if (who.rfind("pid ", 0) != 0 || on == std::string::npos) return "";
  const std::string host = who.substr(on + 4);
  return host == host_name() ? "" : host;
}

}  // namespace

std::string OutputLock::holder(const std::string& path) {
  const int fd = ::open((path + ".lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string who;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    who = read_holder(fd);
    if (who.empty()) who = "a training";
  }
  ::close(fd);  // (drops a shared lock taken)
  return who;
}

OutputLock::OutputLock(const std::string& path) : lock_path_(path + ".lock") {
  // The holder removes the file as it ends: a lock taken on a file since removed is retried on the
  // new one, so that two waiters never both hold one.
  for (int attempt = 0; attempt < 10; ++attempt) {
    const int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    XL_CHECK(fd >= 0, kExitCantCreat, "cannot create " << path << " (its lock " << lock_path_ << "): " << std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == ENOLCK || err == EOPNOTSUPP) {  // a file system without locks: no one can hold this one
        ::close(fd);
        ::unlink(lock_path_.c_str());
        lock_path_.clear();
        return;
      }
      const std::string who = read_holder(fd), host = other_host(who);
      ::close(fd);
      XL_FAIL(kExitCantCreat, path << ": another training writes it" << (who.empty() ? "" : " (" + who + ")")
                                   << "; stop it first, or give this one another -o (the lock is " << lock_path_
                                   << (host.empty() ? "" : "; if " + host + " is down, remove it") << ")");
    }
    struct stat held, named;
    if (::fstat(fd, &held) == 0 && ::stat(lock_path_.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
        held.st_dev == named.st_dev) {
      const std::string me = "pid " + std::to_string(::getpid()) + " on " + host_name() + "\n";
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) < 0) {
        // The name of the holder is a courtesy: the lock holds without it.
      }
      fd_ = fd;
      register_temp(lock_path_);  // removed too if a signal kills the process
      return;
    }
    ::close(fd);  // its holder removed it as we locked it: take the new one
  }
  XL_FAIL(kExitCantCreat, lock_path_ << ": cannot take the lock (it is removed and made again as fast as it is taken)");
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(lock_path_.c_str());
  unregister_temp(lock_path_);
  ::close(fd_);
}

}  // namespace xl::io
