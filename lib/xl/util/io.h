// Inputs ("-" is stdin; gzip and bzip2 detected by magic bytes) and atomic outputs ("-" is stdout).
#pragma once
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace xl::io {

inline bool is_stdio(const std::string& path) { return path == "-"; }
// Whether PATH exists (any kind), is a regular file, is a directory.
bool exists(const std::string& path);
bool is_file(const std::string& path);
bool is_dir(const std::string& path);
// Whether PATH is a stream rather than a file: an output written once, never replaced; an input
// read whole, never sought. "-", a device (/dev/null), a FIFO, or a file descriptor however named
// (/dev/stdout, /dev/fd/63 from bash's <(...), /proc/self/fd/1), which may be a file a shell opened.
bool is_stream(const std::string& path);
// A name for messages: "<stdin>" for "-".
std::string display_name(const std::string& path);
// Whether paths A and B name one directory entry (links followed), so that replacing one (an output
// is renamed onto its path) replaces the other; never for a stream (is_stream), which is written
// through. Two hard links are two entries: replacing one leaves the other as it was.
bool same_file(const std::string& a, const std::string& b);

// Reads the whole input as it is stored.
std::string read_raw(const std::string& path);
// Reads the first n bytes of the file at PATH (fewer when it is shorter; none when unreadable).
std::string read_head(const std::string& path, size_t n);
// What read_text does with a zip archive: refuse it (65: a text is wanted, and which of its files
// that is is the user's to say), or return its bytes as stored (torch.save files are zip archives).
enum class ZipArchives { kRefuse, kAsStored };
// Reads the whole input, decompressing gzip, bzip2 or xz when its first bytes say so; zstd is
// refused (65) with the command that decompresses it.
std::string read_text(const std::string& path, ZipArchives zip = ZipArchives::kRefuse);

// An output written to PATH.tmp.PID and renamed onto PATH by commit(), so a reader never sees a
// half-written file and a killed process leaves nothing behind; the bytes are synced to disk
// before the rename, so neither does a machine that goes down. "-" writes to stdout. A PATH that
// is a device or a FIFO (/dev/null) is written through, never replaced by a file: the temp file is
// made in the temp directory and commit() copies it into PATH; it needs no -f.
class AtomicOutput {
 public:
  // Refuses an existing PATH without `force` (73) and binary output to a terminal (64).
  AtomicOutput(std::string path, bool force, bool binary);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  bool to_stdout() const { return is_stdio(path_); }
  const std::string& path() const { return path_; }
  // Where a library that opens files by name (HDF5) writes; empty for stdout.
  const std::string& temp_path() const { return temp_path_; }
  // A stream on the temp file or on stdout.
  std::ostream& stream();
  // Flushes, syncs and renames; for stdout flushes and checks for write errors.
  void commit();

 private:
  std::string path_, temp_path_;
  std::unique_ptr<std::ofstream> file_;
  bool committed_ = false;
  bool write_through_ = false;  // PATH is a device or FIFO
};

// Removes the temp files (PATH.tmp.PID) that writers of PATH killed by SIGKILL left behind, and
// returns their names. Only for the one writer of PATH (the holder of its OutputLock): another
// writer's temp file may still be in the making.
std::vector<std::string> remove_stale_temps(const std::string& path);

// Makes PATH a second name of the file at EXISTING (a hard link, put in place by rename, so a
// reader sees the old PATH or the new one). False where the file system has no hard links, and
// PATH is left as it was. Sound for files only ever replaced, never written in place, as every
// output here is: replacing EXISTING later leaves PATH with what it had.
bool link_as(const std::string& existing, const std::string& path);

// Writes bytes to stdout, failing with 74 on a write error.
void write_stdout(const std::string& bytes);

// Temp files registered here are removed if the process dies from SIGINT/SIGTERM/SIGHUP.
void register_temp(const std::string& path);
void unregister_temp(const std::string& path);
void remove_registered_temps();  // async-signal-safe

}  // namespace xl::io
