// A small RAII layer over the HDF5 C API: files on disk, in memory (for pipes) and from a byte
// image (stdin), groups, typed attributes and datasets. Failures throw xl::Error naming the file.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace xl::h5 {

// Owns an hid_t and closes it with the matching H5*close.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id);
  ~Handle();
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_ = -1;
};

// The 8-byte signature every HDF5 file starts with.
bool has_hdf5_signature(const std::string& bytes);
// Whether PATH is a regular file that starts with it (not "-", a pipe or a device): one that
// File::open reads in place, without its bytes in memory.
bool is_hdf5_file(const std::string& path);

class File {
 public:
  // A new file on disk (truncating), or in memory when path is empty (see image()).
  static File create(const std::string& path, const std::string& display_name);
  // Opens an existing file read-only; "-" reads stdin to its end and opens the bytes as an image.
  // `what` names the expected content for errors ("an xl tokens file").
  static File open(const std::string& path, const std::string& what);
  // Opens a file's bytes read-only; the File keeps them (HDF5 reads them where they are).
  static File open_image(std::string bytes, const std::string& display_name, const std::string& what);

  hid_t id() const { return handle_.id(); }
  operator hid_t() const { return handle_.id(); }
  const std::string& name() const { return name_; }
  // The bytes of a file created in memory.
  std::string image();
  void flush();
  void close();

 private:
  std::shared_ptr<const std::string> image_;  // open_image's bytes: declared first, freed after the handle closes
  Handle handle_;
  std::string name_;
};

// The name of the file `obj` belongs to (for errors: "<hdf5>" when HDF5 cannot tell).
std::string file_name(hid_t obj);

// Error context: every failure names this file.
[[noreturn]] void fail(const std::string& file, int code, const std::string& what);

bool exists(hid_t loc, const std::string& path);
// Creates a group and any missing parents.
Handle create_group(hid_t loc, const std::string& path);
Handle open_group(hid_t loc, const std::string& path, const std::string& file);
// Names of the direct children of a group, in creation or name order.
std::vector<std::string> list(hid_t loc, const std::string& path);

// Strings are written fixed-length (in the attribute itself). Variable-length strings live in
// HDF5's global heap, which HDF5 1.10 reads without bounds checks (a crafted file overflows the
// heap of the reader), so read_attr_string refuses them (65 naming the file and the fix) unless
// trust_variable_length_strings(true) was called: xl-inspect --upgrade, for files of xl 0.2.
void write_attr(hid_t obj, const std::string& name, const std::string& value);
void trust_variable_length_strings(bool trust);
void write_attr(hid_t obj, const std::string& name, int64_t value);
void write_attr(hid_t obj, const std::string& name, double value);
bool has_attr(hid_t obj, const std::string& name);
std::optional<std::string> read_attr_string(hid_t obj, const std::string& name);
std::optional<int64_t> read_attr_int(hid_t obj, const std::string& name);
std::optional<double> read_attr_double(hid_t obj, const std::string& name);

// Element types we store. `file_type` picks the on-disk little-endian type, `mem_type` the native one.
enum class Type { kU8, kU16, kI32, kI64, kF32, kF64 };
template <typename T> Type type_of();

struct DatasetOptions {
  std::vector<hsize_t> chunk;  // empty: contiguous
  bool compress = false;       // shuffle + deflate(4); needs chunking
  bool extendible = false;     // unlimited first dimension
};

// Writes `data` (native type T, row-major `dims`) as a dataset stored with `file_type`.
void write_dataset_raw(hid_t loc, const std::string& path, const void* data, Type mem_type,
                       Type file_type, const std::vector<hsize_t>& dims,
                       const DatasetOptions& opts = {});
template <typename T>
void write_dataset(hid_t loc, const std::string& path, const std::vector<T>& data,
                   const std::vector<hsize_t>& dims, Type file_type, const DatasetOptions& opts = {}) {
  write_dataset_raw(loc, path, data.data(), type_of<T>(), file_type, dims, opts);
}

// Shape of a dataset; throws (65) if absent.
std::vector<hsize_t> dataset_dims(hid_t loc, const std::string& path, const std::string& file);
// The memory type that holds every value of a dataset's stored type: itself where Type has it,
// else the narrowest wider one (int8 and int16 as int32, uint32 as int64).
Type dataset_type(hid_t loc, const std::string& path, const std::string& file);
// Reads the whole dataset converted to native T (HDF5 converts, e.g. uint16 -> int32).
void read_dataset_raw(hid_t loc, const std::string& path, void* out, Type mem_type,
                      const std::string& file);
template <typename T>
std::vector<T> read_dataset(hid_t loc, const std::string& path, const std::string& file,
                            std::vector<hsize_t>* dims_out = nullptr) {
  auto dims = dataset_dims(loc, path, file);
  size_t n = 1;
  for (auto d : dims) n *= d;
  std::vector<T> out(n);
  if (n) read_dataset_raw(loc, path, out.data(), type_of<T>(), file);
  if (dims_out) *dims_out = dims;
  return out;
}
// Reads elements [offset, offset+count) of a 1-D dataset.
void read_slice_raw(hid_t loc, const std::string& path, hsize_t offset, hsize_t count, void* out,
                    Type mem_type, const std::string& file);

}  // namespace xl::h5

namespace xl::io {
class AtomicOutput;
}

namespace xl::h5 {

// An HDF5 output that honours the output rules: a file is written to a temp name and renamed by
// commit(); "-" is built in memory and its image written to stdout by commit().
class OutputFile {
 public:
  OutputFile(const std::string& path, bool force);
  ~OutputFile();
  File& file() { return file_; }
  void commit();

 private:
  std::unique_ptr<io::AtomicOutput> out_;
  File file_;
};

}  // namespace xl::h5
