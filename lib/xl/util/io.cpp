#include "xl/util/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <vector>

#include <boost/core/ref.hpp>
#include <boost/iostreams/copy.hpp>
#include <boost/iostreams/filter/bzip2.hpp>
#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filter/lzma.hpp>
#include <boost/iostreams/filtering_stream.hpp>

#include "xl/util/byte_blocks.h"
#include "xl/util/error.h"

namespace xl::io {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

namespace {

// Whether PATH, or a symlink on the way from it (/dev/stdout -> /proc/self/fd/1), names a file
// descriptor: replacing such a path by rename would replace the link (/dev/stdout itself, as root).
bool names_descriptor(std::string path) {
  for (int hop = 0; hop < 8; ++hop) {
    if (path.rfind("/proc/", 0) == 0 || path.rfind("/dev/fd/", 0) == 0 || path == "/dev/stdout" || path == "/dev/stderr")
      return true;
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::read_symlink(path, ec);
    if (ec) return false;
    path = (target.is_absolute() ? target : std::filesystem::path(path).parent_path() / target).lexically_normal();
  }
  return false;
}

}  // namespace

bool is_stream(const std::string& path) {
  struct stat st;
  if (is_stdio(path)) return true;
  if (::stat(path.c_str(), &st) != 0) return false;
  return (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) || names_descriptor(path);
}

std::string display_name(const std::string& path) { return is_stdio(path) ? "<stdin>" : path; }

namespace {

// A directory entry however it is spelt: symlinks followed, its directory by device and inode
// (a bind mount shows one directory under two paths), or by path while that does not exist.
struct Entry {
  bool known = false;
  dev_t dev = 0;
  ino_t dir_ino = 0;
  std::string dir, name;
  bool operator==(const Entry& o) const {
    return known && o.known && name == o.name && (dir_ino ? dev == o.dev && dir_ino == o.dir_ino : dir == o.dir);
  }
};

Entry entry_of(const std::string& path) {
  Entry e;
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  if (ec) return e;
  e.known = true;
  e.name = p.filename().string();
  e.dir = p.parent_path().string();
  struct stat d;
  if (::stat(e.dir.c_str(), &d) == 0) {
    e.dev = d.st_dev;
    e.dir_ino = d.st_ino;
  }
  return e;
}

// Where an output is made before it is renamed onto PATH: PATH.tmp.PID, in PATH's directory.
std::string temp_beside(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

// An output's bytes reach the disk before its name does: a machine that goes down after the
// rename (a node lost on a cluster) must not leave an empty or partial file where the last good
// one was. A write error that the file system reports only now (NFS: a quota) stops the commit
// with PATH as it was.
void sync_file(const std::string& temp, const std::string& path) {
  const int fd = ::open(temp.c_str(), O_RDONLY | O_CLOEXEC);
  XL_CHECK(fd >= 0, kExitIoErr, path << ": cannot open its temp file again: " << std::strerror(errno));
  int rc;
  while ((rc = ::fsync(fd)) != 0 && errno == EINTR) {
  }
  const int err = errno;
  ::close(fd);
  XL_CHECK(rc == 0 || err == EINVAL || err == ENOTSUP, kExitIoErr, path << ": write error: " << std::strerror(err));
}

// The rename itself, kept by the directory that holds PATH. Best effort: some file systems refuse
// to sync a directory, and the rename has happened either way.
void sync_directory_of(const std::string& path) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  while (::fsync(fd) != 0 && errno == EINTR) {
  }
  ::close(fd);
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty() || is_stream(a) || is_stream(b)) return false;  // written through, never replaced
  return entry_of(a) == entry_of(b);
}

namespace {

// An input opened for reading: stdin for "-"; its size when it is a regular file (0 otherwise).
struct Input {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file{nullptr, std::fclose};
  off_t size = 0;
  std::string name;
};

Input open_input(const std::string& path) {
  Input in;
  struct stat st;
  if (is_stdio(path)) {
    std::ios::sync_with_stdio(false);
    in.file = {stdin, [](std::FILE*) { return 0; }};
    in.name = "<stdin>";
    if (::fstat(0, &st) == 0 && S_ISREG(st.st_mode)) in.size = st.st_size;  // a file redirected to stdin
    return in;
  }
  if (::stat(path.c_str(), &st) != 0) XL_FAIL(kExitNoInput, path << ": " << std::strerror(errno));
  XL_CHECK(!S_ISDIR(st.st_mode), kExitNoInput, path << ": is a directory");
  in.file = {std::fopen(path.c_str(), "rb"), std::fclose};
  XL_CHECK(in.file, kExitNoInput, path << ": " << std::strerror(errno));
  in.name = path;
  if (S_ISREG(st.st_mode)) in.size = st.st_size;
  return in;
}

void check_no_read_error(const Input& in) {
  XL_CHECK(!std::ferror(in.file.get()), kExitIoErr, in.name << ": read error: " << std::strerror(errno));
}

// `head` (bytes already read from in) and the rest of in: into a string of the input's size when it
// is known, else in blocks joined once.
std::string read_rest(const Input& in, std::string head) {
  std::array<char, 1 << 16> buf;
  size_t n;
  std::FILE* f = in.file.get();
  if (in.size > 0) {
    head.reserve(static_cast<size_t>(in.size));
    while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) head.append(buf.data(), n);
    check_no_read_error(in);
    return head;
  }
  ByteBlocks blocks;
  blocks.write(head.data(), static_cast<std::streamsize>(head.size()));
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) blocks.write(buf.data(), static_cast<std::streamsize>(n));
  check_no_read_error(in);
  return blocks.take();
}

// A Boost.Iostreams source: `head`, then the rest of the file.
class HeadThenFile {
 public:
  using char_type = char;
  using category = boost::iostreams::source_tag;
  HeadThenFile(const std::string& head, std::FILE* f) : head_(head), file_(f) {}
  std::streamsize read(char* s, std::streamsize n) {
    size_t got = std::min(static_cast<size_t>(n), head_.size() - at_);
    std::copy_n(head_.data() + at_, got, s);
    at_ += got;
    got += std::fread(s + got, 1, static_cast<size_t>(n) - got, file_);
    return got > 0 ? static_cast<std::streamsize>(got) : -1;
  }

 private:
  const std::string& head_;
  size_t at_ = 0;
  std::FILE* file_;
};

enum class Packing { kNone, kGzip, kBzip2, kXz, kZstd, kZip };

Packing packing_of(const std::string& h) {  // h: the input's first bytes
  auto starts = [&](const char* magic, size_t n) { return h.size() >= n && h.compare(0, n, magic, n) == 0; };
  if (starts("\x1f\x8b", 2)) return Packing::kGzip;
  if (starts("BZh", 3)) return Packing::kBzip2;
  if (starts("\xfd" "7zXZ\0", 6)) return Packing::kXz;
  if (starts("\x28\xb5\x2f\xfd", 4)) return Packing::kZstd;
  if (starts("PK\x03\x04", 4)) return Packing::kZip;
  return Packing::kNone;
}

const char* name_of(Packing p) {
  switch (p) {
    case Packing::kGzip: return "gzip";
    case Packing::kBzip2: return "bzip2";
    case Packing::kXz: return "xz";
    case Packing::kZstd: return "zstd";
    case Packing::kZip: return "zip";
    case Packing::kNone: break;
  }
  return "plain";
}

}  // namespace

std::string read_raw(const std::string& path) { return read_rest(open_input(path), ""); }

std::string read_head(const std::string& path, size_t n) {
  std::string head(n, '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(head.data(), static_cast<std::streamsize>(n));
  head.resize(static_cast<size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return head;
}

std::string read_text(const std::string& path, ZipArchives zip) {
  namespace bio = boost::iostreams;
  // The first bytes say whether the input is compressed; it is then decompressed as it is read,
  // from a file or a pipe alike.
  const Input input = open_input(path);
  std::string head(6, '\0');
  head.resize(std::fread(head.data(), 1, head.size(), input.file.get()));
  check_no_read_error(input);
  const Packing packing = packing_of(head);
  if (packing == Packing::kNone || (packing == Packing::kZip && zip == ZipArchives::kAsStored))
    return read_rest(input, std::move(head));
  // Boost's zstd filter ends a truncated stream without an error, so zstd goes through its own
  // tool, which checks.
  const std::string file = input.name == "<stdin>" ? "FILE" : input.name;
  XL_CHECK(packing != Packing::kZip, kExitDataErr, input.name << ": a zip archive; give its text (unzip -p " << file << " | ...)");
  XL_CHECK(packing != Packing::kZstd, kExitDataErr,
           input.name << ": zstd data; give it decompressed (zstd -dc " << file << " | ...)");
  ByteBlocks out;
  try {
    bio::filtering_istream in;
    if (packing == Packing::kGzip) in.push(bio::gzip_decompressor());
    else if (packing == Packing::kBzip2) in.push(bio::bzip2_decompressor());
    else in.push(bio::lzma_decompressor());
    in.push(HeadThenFile(head, input.file.get()));
    bio::copy(in, boost::ref(out));
  } catch (const std::exception& e) {
    check_no_read_error(input);
    XL_FAIL(kExitDataErr, input.name << ": corrupt " << name_of(packing) << " data (" << e.what() << ")");
  }
  return out.take();
}

AtomicOutput::AtomicOutput(std::string path, bool force, bool binary) : path_(std::move(path)) {
  if (to_stdout()) {
    XL_CHECK(!(binary && ::isatty(1)), kExitUsage,
             "refusing to write binary output to a terminal; use -o FILE or redirect stdout");
    return;
  }
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0) {
    // Renaming a file over /dev/null would replace the device for every program on the machine,
    // and over /dev/stdout the link, leaving the file the shell redirected to empty.
    write_through_ = is_stream(path_);
    XL_CHECK(force || write_through_, kExitCantCreat, path_ << ": already exists (use -f to overwrite)");
    XL_CHECK(!S_ISDIR(st.st_mode), kExitCantCreat, path_ << ": is a directory");
  }
  if (write_through_) {
    std::string name = (std::filesystem::temp_directory_path() / "xl-output.XXXXXX").string();
    const int fd = ::mkstemp(name.data());
    XL_CHECK(fd >= 0, kExitCantCreat, "cannot create a temp file for " << path_ << ": " << std::strerror(errno));
    ::close(fd);
    temp_path_ = name;
  } else {
    temp_path_ = temp_beside(path_);
    // Prove now that the directory is writable, before any long computation.
    std::FILE* f = std::fopen(temp_path_.c_str(), "wb");
    XL_CHECK(f, kExitCantCreat, "cannot create " << path_ << ": " << std::strerror(errno));
    std::fclose(f);
  }
  register_temp(temp_path_);
}

AtomicOutput::~AtomicOutput() {
  if (!committed_ && !temp_path_.empty()) {
    file_.reset();
    // Emptied first: a library may still hold the file open after a failed write (HDF5 does), and
    // an unlinked file's blocks stay allocated on the full disk until every descriptor closes.
    if (::truncate(temp_path_.c_str(), 0) != 0) { /* removed below all the same */ }
    std::remove(temp_path_.c_str());
    unregister_temp(temp_path_);
  }
}

std::ostream& AtomicOutput::stream() {
  if (to_stdout()) return std::cout;
  if (!file_) {
    file_ = std::make_unique<std::ofstream>(temp_path_, std::ios::binary | std::ios::trunc);
    XL_CHECK(*file_, kExitCantCreat, "cannot create " << path_ << ": " << std::strerror(errno));
  }
  return *file_;
}

void AtomicOutput::commit() {
  if (to_stdout()) {
    std::cout.flush();
    XL_CHECK(std::cout.good() && std::fflush(stdout) == 0, kExitIoErr, "<stdout>: write error");
    committed_ = true;
    return;
  }
  if (file_) {
    file_->flush();
    XL_CHECK(file_->good(), kExitIoErr, path_ << ": write error (disk full?)");
    file_->close();
  }
  if (write_through_) {
    std::ifstream from(temp_path_, std::ios::binary);
    std::ofstream to(path_, std::ios::binary);  // a device or FIFO: opened as it is, not replaced
    XL_CHECK(from && to, kExitCantCreat, "cannot open " << path_ << " for writing: " << std::strerror(errno));
    // Not `to << from.rdbuf()`: it stops at a failed write (a reader that quit, with SIGPIPE
    // ignored) without marking `to`, once it has written anything: a cut file and no error.
    std::vector<char> block(1 << 20);
    while (from.read(block.data(), static_cast<std::streamsize>(block.size())) || from.gcount() > 0)
      if (!to.write(block.data(), from.gcount())) break;
    to.flush();
    XL_CHECK(to.good() && from.eof(), kExitIoErr, path_ << ": write error: " << std::strerror(errno));
    std::remove(temp_path_.c_str());
  } else {
    sync_file(temp_path_, path_);
    XL_CHECK(std::rename(temp_path_.c_str(), path_.c_str()) == 0, kExitCantCreat,
             "cannot rename " << temp_path_ << " to " << path_ << ": " << std::strerror(errno));
    sync_directory_of(path_);
  }
  unregister_temp(temp_path_);
  committed_ = true;
}

std::vector<std::string> remove_stale_temps(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".tmp.";
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(p.parent_path().empty() ? fs::path(".") : p.parent_path(), ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(::getpid())) continue;
    std::error_code gone;
    if (fs::remove(it->path(), gone)) removed.push_back((p.parent_path() / name).string());  // as PATH names its directory
  }
  return removed;
}

bool link_as(const std::string& existing, const std::string& path) {
  const std::string temp = temp_beside(path);
  ::unlink(temp.c_str());
  if (::link(existing.c_str(), temp.c_str()) != 0) return false;
  register_temp(temp);
  const bool renamed = ::rename(temp.c_str(), path.c_str()) == 0;
  ::unlink(temp.c_str());  // still there when PATH already named this file: rename does nothing then
  unregister_temp(temp);
  if (renamed) sync_directory_of(path);
  return renamed;
}

void write_stdout(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(1, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    XL_CHECK(n > 0, kExitIoErr, "<stdout>: write error: " << std::strerror(errno));
    off += static_cast<size_t>(n);
  }
}

namespace {
constexpr int kMaxTemps = 32;
char g_temps[kMaxTemps][4096];
std::mutex g_temps_mutex;
}  // namespace

void register_temp(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_temps_mutex);
  if (path.size() >= sizeof(g_temps[0])) return;
  for (auto& slot : g_temps)
    if (slot[0] == 0) {
      std::memcpy(slot, path.c_str(), path.size() + 1);
      return;
    }
}

void unregister_temp(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_temps_mutex);
  for (auto& slot : g_temps)
    if (path == slot) slot[0] = 0;
}

void remove_registered_temps() {
  for (auto& slot : g_temps)
    if (slot[0] != 0) ::unlink(slot);
}

}  // namespace xl::io
