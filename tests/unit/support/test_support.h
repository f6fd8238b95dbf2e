// Helpers shared by the unit tests: a scratch directory that is removed afterwards, and the exit
// code of the xl::Error a call throws.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "xl/util/error.h"

namespace xl::test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "xl-test.XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  // Writes `bytes` to NAME in the directory and returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::string path = file(name);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) names.push_back(e.path().filename().string());
    return names;
  }

 private:
  std::string path_;
};

// The exit code of the xl::Error `f` throws (0 when it throws none); its message in *what.
inline int error_code(const std::function<void()>& f, std::string* what = nullptr) {
  try {
    f();
  } catch (const xl::Error& e) {
    if (what) *what = e.what();
    return e.code();
  }
  return 0;
}

}  // namespace xl::test
