#include "xl/h5/h5.h"

#include <algorithm>
#include <atomic>

#include <hdf5_hl.h>

#include <cstring>

#include "xl/util/error.h"
#include "xl/util/io.h"

namespace xl::h5 {
namespace {

// HDF5 prints its error stack to stderr by default; we report one line ourselves. Its exit
// handler closes files still open, and a file whose write failed (a full disk) stays open after
// H5Fclose fails: closing it again at exit crashed (SIGSEGV). Every file xl writes is closed or
// abandoned (its temp file removed) before exit, so the handler has nothing to do.
struct SilenceHdf5 {
  SilenceHdf5() {
    H5dont_atexit();  // before the library initialises
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
};
const SilenceHdf5 g_silence;

herr_t close_any(hid_t id) {
  switch (H5Iget_type(id)) {
    case H5I_FILE: return H5Fclose(id);
    case H5I_GROUP: return H5Gclose(id);
    case H5I_DATASET: return H5Dclose(id);
    case H5I_DATASPACE: return H5Sclose(id);
    case H5I_DATATYPE: return H5Tclose(id);
    case H5I_ATTR: return H5Aclose(id);
    case H5I_GENPROP_LST: return H5Pclose(id);
    default: return 0;
  }
}

hid_t mem_type_id(Type t) {
  switch (t) {
    case Type::kU8: return H5T_NATIVE_UINT8;
    case Type::kU16: return H5T_NATIVE_UINT16;
    case Type::kI32: return H5T_NATIVE_INT32;
    case Type::kI64: return H5T_NATIVE_INT64;
    case Type::kF32: return H5T_NATIVE_FLOAT;
    case Type::kF64: return H5T_NATIVE_DOUBLE;
  }
  return -1;
}

hid_t file_type_id(Type t) {
  switch (t) {
    case Type::kU8: return H5T_STD_U8LE;
    case Type::kU16: return H5T_STD_U16LE;
    case Type::kI32: return H5T_STD_I32LE;
    case Type::kI64: return H5T_STD_I64LE;
    case Type::kF32: return H5T_IEEE_F32LE;
    case Type::kF64: return H5T_IEEE_F64LE;
  }
  return -1;
}

hid_t check(hid_t id, const std::string& file, int code, const std::string& what) {
  if (id < 0) fail(file, code, what);
  return id;
}

}  // namespace

std::string file_name(hid_t obj) {
  ssize_t n = H5Fget_name(obj, nullptr, 0);
  if (n <= 0) return "<hdf5>";
  std::string s(static_cast<size_t>(n) + 1, '\0');
  H5Fget_name(obj, s.data(), s.size());
  s.resize(static_cast<size_t>(n));
  return s;
}

Handle::Handle(hid_t id) : id_(id) {}
Handle::~Handle() {
  if (id_ >= 0) close_any(id_);
}
Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    if (id_ >= 0) close_any(id_);
    id_ = o.id_;
    o.id_ = -1;
  }
  return *this;
}

void fail(const std::string& file, int code, const std::string& what) {
  throw Error(code, file + ": " + what);
}

bool has_hdf5_signature(const std::string& bytes) {
  static const char sig[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  return bytes.size() >= 8 && std::memcmp(bytes.data(), sig, 8) == 0;
}

bool is_hdf5_file(const std::string& path) {
  return !io::is_stdio(path) && io::is_file(path) && has_hdf5_signature(io::read_head(path, 8));
}

namespace {

// File access without HDF5's file locks: xl writes a new file and renames it, never changes one in
// place, so the locks guard nothing, and on file systems without them (NFS homes on clusters)
// every open failed with "unable to lock file" (the HDF5_USE_FILE_LOCKING=FALSE of h5py users).
Handle access_without_locks() {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS));
#if H5_VERSION_GE(1, 10, 7)
  H5Pset_file_locking(fapl, false, true);
#endif
  return fapl;
}

}  // namespace

File File::create(const std::string& path, const std::string& display_name) {
  File f;
  f.name_ = display_name;
  Handle fapl = access_without_locks();
  std::string name = path;
  // Files on disk in the 1.8 format: fixed-length attributes above 64 KiB (a long validation
  // history) go to dense storage; any HDF5 from 1.8 on reads it. (An in-memory image of that
  // format does not reopen: images keep the earliest format and its 64 KiB attributes.)
  if (!path.empty()) H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18);
  if (path.empty()) {
    // In memory, never written to disk: image() hands out the bytes.
    H5Pset_fapl_core(fapl, 1 << 20, 0);
    name = "xl-memory-image.h5";
  }
  f.handle_ = Handle(check(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), display_name,
                           kExitCantCreat, "cannot create HDF5 file"));
  return f;
}

File File::open(const std::string& path, const std::string& what) {
  if (io::is_stdio(path)) return open_image(io::read_raw(path), "<stdin>", what);
  // HDF5 seeks: a pipe given by name (bash's <(zcat t.h5.gz), /dev/stdin, a FIFO) is read whole.
  if (io::is_stream(path)) return open_image(io::read_raw(path), path, what);
  // Sniff first so that a text file gets a clear message rather than an HDF5 error.
  std::FILE* fp = std::fopen(path.c_str(), "rb");
  XL_CHECK(fp, kExitNoInput, path << ": " << std::strerror(errno));
  char head[8] = {0};
  size_t n = std::fread(head, 1, 8, fp);
  const bool read_error = std::ferror(fp);  // e.g. a directory: fopen succeeds, reading fails
  const int err = errno;
  std::fclose(fp);
  XL_CHECK(!read_error, kExitNoInput, path << ": " << std::strerror(err));
  if (!has_hdf5_signature(std::string(head, n)))
    fail(path, kExitDataErr, "not an HDF5 file (expected " + what + ")");
  File f;
  f.name_ = path;
  const Handle fapl = access_without_locks();
  f.handle_ = Handle(check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), path, kExitDataErr,
                           "truncated or corrupt HDF5 file (expected " + what + ")"));
  return f;
}

File File::open_image(std::string bytes, const std::string& display_name, const std::string& what) {
  if (bytes.empty()) fail(display_name, kExitDataErr, "empty input (expected " + what + ")");
  if (!has_hdf5_signature(bytes))
    fail(display_name, kExitDataErr, "not an HDF5 file (expected " + what + ")");
  File f;
  f.name_ = display_name;
  // Read in place, not copied: a tokens file through a pipe is held once (a 420 MB one peaked at
  // 1.25 GB with HDF5's copy). Read-only images may be shared this way; the File owns the bytes.
  f.image_ = std::make_shared<const std::string>(std::move(bytes));
  hid_t id = H5LTopen_file_image(const_cast<char*>(f.image_->data()), f.image_->size(),
                                 H5LT_FILE_IMAGE_DONT_COPY | H5LT_FILE_IMAGE_DONT_RELEASE);
  f.handle_ = Handle(check(id, display_name, kExitDataErr,
                           "truncated or corrupt HDF5 data (expected " + what + ")"));
  return f;
}

std::string File::image() {
  flush();
  ssize_t n = H5Fget_file_image(id(), nullptr, 0);
  if (n < 0) fail(name_, kExitSoftware, "cannot get the file image");
  std::string bytes(static_cast<size_t>(n), '\0');
  if (H5Fget_file_image(id(), bytes.data(), bytes.size()) < 0)
    fail(name_, kExitSoftware, "cannot get the file image");
  return bytes;
}

void File::flush() {
  if (H5Fflush(id(), H5F_SCOPE_GLOBAL) < 0) fail(name_, kExitIoErr, "flush failed (disk full?)");
}

void File::close() {
  handle_ = Handle();  // closes
  image_.reset();
}

bool exists(hid_t loc, const std::string& path) {
  // Check each component: H5Lexists fails if a parent is missing.
  size_t pos = 0;
  while (true) {
    size_t next = path.find('/', pos + 1);
    std::string prefix = path.substr(0, next);
    if (!prefix.empty() && prefix != "/" && H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0)
      return false;
    if (next == std::string::npos) return true;
    pos = next;
  }
}

Handle create_group(hid_t loc, const std::string& path) {
  if (exists(loc, path)) return Handle(H5Gopen2(loc, path.c_str(), H5P_DEFAULT));
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl, 1);
  return Handle(check(H5Gcreate2(loc, path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT), file_name(loc),
                      kExitIoErr, "cannot create group " + path));
}

Handle open_group(hid_t loc, const std::string& path, const std::string& file) {
  if (!exists(loc, path)) fail(file, kExitDataErr, "missing group " + path);
  return Handle(check(H5Gopen2(loc, path.c_str(), H5P_DEFAULT), file, kExitDataErr,
                      "cannot open group " + path));
}

namespace {
herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> list(hid_t loc, const std::string& path) {
  std::vector<std::string> names;
  if (!exists(loc, path)) return names;
  Handle g(H5Gopen2(loc, path.c_str(), H5P_DEFAULT));
  if (!g.valid()) return names;
  // One walk in the storage's own order, sorted here: asking for links by index in name order
  // made HDF5 build (and free) a table of every link per call, quadratic, and on a crafted file
  // that table's release corrupted the heap (found by fuzz/checkpoint_h5).
  hsize_t idx = 0;
  if (H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, collect_link, &names) < 0)
    fail(file_name(loc), kExitDataErr, "cannot list group " + path + " (corrupt file?)");
  std::sort(names.begin(), names.end());
  return names;
}

namespace {
void write_attr_typed(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type,
                      const void* value) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle space(H5Screate(H5S_SCALAR));
  Handle attr(check(H5Acreate2(obj, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT),
                    file_name(obj), kExitIoErr, "cannot write attribute " + name));
  if (H5Awrite(attr, mem_type, value) < 0) fail(file_name(obj), kExitIoErr, "cannot write attribute " + name);
}
}  // namespace

void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, std::max<size_t>(1, value.size()));
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  H5Tset_cset(type, H5T_CSET_UTF8);
  write_attr_typed(obj, name, type, type, value.c_str());
}

namespace {
std::atomic<bool> g_trust_variable_length_strings{false};
}
void trust_variable_length_strings(bool trust) { g_trust_variable_length_strings = trust; }
void write_attr(hid_t obj, const std::string& name, int64_t value) {
  write_attr_typed(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}
void write_attr(hid_t obj, const std::string& name, double value) {
  write_attr_typed(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

std::optional<std::string> read_attr_string(hid_t obj, const std::string& name) {
  if (!has_attr(obj, name)) return std::nullopt;
  Handle attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  Handle ftype(H5Aget_type(attr));
  if (H5Tget_class(ftype) != H5T_STRING) return std::nullopt;
  if (H5Tis_variable_str(ftype) > 0) {
    if (!g_trust_variable_length_strings)
      fail(file_name(obj), kExitDataErr,
           "attribute " + name + " is a variable-length string (xl 0.2 and h5py write those), which this HDF5 "
           "cannot read safely from an untrusted file; if you trust the file, `xl-inspect --upgrade FILE` rewrites it");
    Handle mtype(H5Tcopy(H5T_C_S1));
    H5Tset_size(mtype, H5T_VARIABLE);
    H5Tset_cset(mtype, H5Tget_cset(ftype));
    char* p = nullptr;
    if (H5Aread(attr, mtype, &p) < 0 || !p) return std::nullopt;
    std::string s(p);
    Handle space(H5Aget_space(attr));
    H5Dvlen_reclaim(mtype, space, H5P_DEFAULT, &p);
    return s;
  }
  size_t n = H5Tget_size(ftype);
  std::string s(n, '\0');
  Handle mtype(H5Tcopy(H5T_C_S1));
  H5Tset_size(mtype, n);
  H5Tset_cset(mtype, H5Tget_cset(ftype));  // HDF5 converts no string between character sets
  H5Tset_strpad(mtype, H5T_STR_NULLPAD);   // all n bytes; NULLTERM would drop the last
  if (H5Aread(attr, mtype, s.data()) < 0) return std::nullopt;
  s.resize(std::strlen(s.c_str()));
  return s;
}

std::optional<int64_t> read_attr_int(hid_t obj, const std::string& name) {
  if (!has_attr(obj, name)) return std::nullopt;
  Handle attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  int64_t v = 0;
  if (H5Aread(attr, H5T_NATIVE_INT64, &v) < 0) return std::nullopt;
  return v;
}

std::optional<double> read_attr_double(hid_t obj, const std::string& name) {
  if (!has_attr(obj, name)) return std::nullopt;
  Handle attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT));
  double v = 0;
  if (H5Aread(attr, H5T_NATIVE_DOUBLE, &v) < 0) return std::nullopt;
  return v;
}

template <> Type type_of<uint8_t>() { return Type::kU8; }
template <> Type type_of<uint16_t>() { return Type::kU16; }
template <> Type type_of<int32_t>() { return Type::kI32; }
template <> Type type_of<int64_t>() { return Type::kI64; }
template <> Type type_of<float>() { return Type::kF32; }
template <> Type type_of<double>() { return Type::kF64; }

void write_dataset_raw(hid_t loc, const std::string& path, const void* data, Type mem_type,
                       Type file_type, const std::vector<hsize_t>& dims, const DatasetOptions& opts) {
  std::string file = file_name(loc);
  std::vector<hsize_t> maxdims = dims;
  if (opts.extendible && !maxdims.empty()) maxdims[0] = H5S_UNLIMITED;
  Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                            : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data()));
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE));
  if (!opts.chunk.empty()) {
    std::vector<hsize_t> chunk = opts.chunk;
    for (size_t i = 0; i < chunk.size() && i < dims.size(); ++i)
      if (!opts.extendible || i > 0) chunk[i] = std::max<hsize_t>(1, std::min(chunk[i], dims[i]));
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    if (opts.compress) {
      H5Pset_shuffle(dcpl);
      H5Pset_deflate(dcpl, 4);
    }
  }
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE));
  H5Pset_create_intermediate_group(lcpl, 1);
  if (exists(loc, path)) H5Ldelete(loc, path.c_str(), H5P_DEFAULT);
  Handle ds(check(H5Dcreate2(loc, path.c_str(), file_type_id(file_type), space, lcpl, dcpl, H5P_DEFAULT),
                  file, kExitIoErr, "cannot create dataset " + path));
  size_t n = 1;
  for (auto d : dims) n *= d;
  if (n && H5Dwrite(ds, mem_type_id(mem_type), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail(file, kExitIoErr, "cannot write dataset " + path + " (disk full?)");
}

std::vector<hsize_t> dataset_dims(hid_t loc, const std::string& path, const std::string& file) {
  if (!exists(loc, path)) fail(file, kExitDataErr, "missing dataset " + path);
  Handle ds(check(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), file, kExitDataErr, "cannot open dataset " + path));
  Handle space(H5Dget_space(ds));
  int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return dims;
}

Type dataset_type(hid_t loc, const std::string& path, const std::string& file) {
  Handle ds(check(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), file, kExitDataErr, "cannot open dataset " + path));
  Handle t(H5Dget_type(ds));
  H5T_class_t cls = H5Tget_class(t);
  size_t size = H5Tget_size(t);
  if (cls == H5T_FLOAT) return size == 4 ? Type::kF32 : Type::kF64;
  const bool is_signed = H5Tget_sign(t) == H5T_SGN_2;
  if (size == 1 && !is_signed) return Type::kU8;
  if (size == 2 && !is_signed) return Type::kU16;
  if (size <= 2 || (size == 4 && is_signed)) return Type::kI32;  // int8, int16 widened
  return Type::kI64;  // uint32 widened; 8 bytes (uint64 past 2^63 does not fit)
}

void read_dataset_raw(hid_t loc, const std::string& path, void* out, Type mem_type, const std::string& file) {
  Handle ds(check(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), file, kExitDataErr, "cannot open dataset " + path));
  if (H5Dread(ds, mem_type_id(mem_type), H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
    fail(file, kExitDataErr, "cannot read dataset " + path + " (truncated or corrupt file?)");
}

void read_slice_raw(hid_t loc, const std::string& path, hsize_t offset, hsize_t count, void* out,
                    Type mem_type, const std::string& file) {
  Handle ds(check(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), file, kExitDataErr, "cannot open dataset " + path));
  Handle fspace(H5Dget_space(ds));
  H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &offset, nullptr, &count, nullptr);
  Handle mspace(H5Screate_simple(1, &count, nullptr));
  if (H5Dread(ds, mem_type_id(mem_type), mspace, fspace, H5P_DEFAULT, out) < 0)
    fail(file, kExitDataErr, "cannot read dataset " + path + " (truncated or corrupt file?)");
}

}  // namespace xl::h5

namespace xl::h5 {

OutputFile::OutputFile(const std::string& path, bool force)
    : out_(std::make_unique<io::AtomicOutput>(path, force, /*binary=*/true)) {
  file_ = File::create(out_->temp_path(), out_->to_stdout() ? "<stdout>" : path);
}

OutputFile::~OutputFile() = default;

void OutputFile::commit() {
  if (out_->to_stdout()) {
    std::string bytes = file_.image();
    file_.close();
    io::write_stdout(bytes);
  } else {
    file_.flush();
    file_.close();
  }
  out_->commit();
}

}  // namespace xl::h5
