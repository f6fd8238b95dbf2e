#include "xl/util/gnuplot.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "xl/util/error.h"
#include "xl/util/io.h"

namespace xl {
namespace {

constexpr char kMissing[] = "--plot needs gnuplot, which is not installed (apt-get install gnuplot-nox)";

// A path in a gnuplot single-quoted string, where a quote is written twice (bob's.png).
std::string quoted(const std::string& path) {
  std::string q = "'";
  for (char c : path) {
    q += c;
    if (c == '\'') q += '\'';
  }
  return q + "'";
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (::access(((dir.empty() ? "." : dir) + "/" + program).c_str(), X_OK) == 0) return true;
  return false;
}

// The last line gnuplot wrote to `path` (its error, after the command it quotes).
std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t^") != std::string::npos) last = line;
  return last;
}

// A plot replaces an earlier plot, as a rerun draws it again; any other file at its name (a
// checkpoint typed by mistake) is refused.
void refuse_other_file(const std::string& png) {
  std::ifstream in(png, std::ios::binary);
  if (!in || io::is_stream(png)) return;
  char head[8] = {};
  in.read(head, sizeof head);
  XL_CHECK(in.gcount() == 0 || std::memcmp(head, "\x89PNG\r\n\x1a\n", 8) == 0, kExitCantCreat,
           png << ": exists and is not a PNG: --plot replaces only an earlier plot");
}

}  // namespace

void check_plot(const std::string& png) {
  refuse_other_file(png);
  XL_CHECK(on_path("gnuplot"), kExitUnavailable, kMissing);
  io::AtomicOutput probe(png, true, true);  // its temp file, removed unwritten
}

void plot_png(const std::string& png, const std::string& data, const std::string& commands, int width, int height) {
  refuse_other_file(png);
  io::AtomicOutput out(png, true, true);
  const std::string data_path = out.temp_path() + ".dat", script_path = out.temp_path() + ".gp",
                    err_path = out.temp_path() + ".err";
  {
    std::ofstream d(data_path);
    d << data;
    std::ofstream gp(script_path);
    gp << "set terminal pngcairo size " << width << "," << height << " noenhanced\n"
       << "set output " << quoted(out.temp_path()) << "\n"
       << "DATA = " << quoted(data_path) << "\n"
       << commands << "\n";
    XL_CHECK(d.good() && gp.good(), kExitCantCreat, png << ": cannot write the plot's temp files beside it");
  }
  // Started without a shell, so that any name of the PNG reaches gnuplot as it is.
  const pid_t pid = ::fork();
  const int fork_error = errno;
  if (pid == 0) {
    const int null = ::open("/dev/null", O_RDWR), err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (null >= 0) {
      ::dup2(null, 0);
      ::dup2(null, 1);
    }
    if (err >= 0) ::dup2(err, 2);
    ::execlp("gnuplot", "gnuplot", script_path.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  if (pid > 0)
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  const std::string error = last_line(err_path);
  std::remove(data_path.c_str());
  std::remove(script_path.c_str());
  std::remove(err_path.c_str());
  XL_CHECK(pid > 0, kExitUnavailable, "--plot: cannot start gnuplot: " << std::strerror(fork_error));
  // 127: the child could not run it (gone from PATH since check_plot, or never checked for).
  XL_CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 127), kExitUnavailable, kMissing);
  XL_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, kExitUnavailable,
           "--plot: gnuplot failed" << (error.empty() ? std::string() : ": " + error));
  out.commit();
}

}  // namespace xl
