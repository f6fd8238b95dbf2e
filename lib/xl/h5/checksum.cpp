#include "xl/h5/checksum.h"

#include <exception>
#include <vector>

#include "xl/util/error.h"
#include "xl/util/sha256.h"

namespace xl::h5 {

std::string data_checksum(const void* data, size_t bytes) {
  Sha256 h;
  h.update(data, bytes);
  return h.hex();
}

void check_digest(hid_t ds, const std::string& digest, const std::string& path, const std::string& file) {
  const auto want = read_attr_string(ds, kChecksumAttr);
  if (want && digest != *want)
    fail(file, kExitDataErr, "corrupt dataset " + path + " (its bytes do not match their checksum)");
}

void check_data(hid_t ds, const void* data, size_t bytes, const std::string& path, const std::string& file) {
  if (has_attr(ds, kChecksumAttr)) check_digest(ds, data_checksum(data, bytes), path, file);
}

namespace {

struct VerifyState {
  const File* file;
  int64_t file_bytes;
  VerifyResult result;
  std::exception_ptr error;  // not thrown through HDF5's C frames: kept, and rethrown after the walk
};

void verify_dataset(hid_t root, const char* name, VerifyState* st) {
  const std::string path = std::string("/") + name, file = st->file->name();
  Handle ds(H5Dopen2(root, name, H5P_DEFAULT));
  if (!ds.valid()) fail(file, kExitDataErr, "cannot open dataset " + path + " (corrupt file?)");
  if (!has_attr(ds, kChecksumAttr)) {
    ++st->result.unchecked;
    return;
  }
  Handle type(H5Dget_type(ds)), space(H5Dget_space(ds));
  const hssize_t points = space.valid() ? H5Sget_simple_extent_npoints(space) : -1;
  const size_t size = type.valid() ? H5Tget_size(type) : 0;
  if (points < 0 || size == 0) fail(file, kExitDataErr, "cannot read the shape of " + path + " (corrupt file?)");
  // Variable-length elements would be read from the global heap (see read_attr_string); xl writes none.
  if (H5Tdetect_class(type, H5T_VLEN) != 0 || H5Tis_variable_str(type) != 0)
    fail(file, kExitDataErr, "dataset " + path + " has variable-length elements (not an xl tensor)");
  // A damaged header may claim any shape: no dataset holds more bytes than its file.
  const double bytes = static_cast<double>(points) * static_cast<double>(size);
  if (st->file_bytes >= 0 && bytes > static_cast<double>(st->file_bytes))
    fail(file, kExitDataErr, "dataset " + path + " claims more bytes than the file has (corrupt file?)");
  std::vector<unsigned char> buf(static_cast<size_t>(bytes));
  // The stored type as the memory type: the bytes as they are on disk.
  if (!buf.empty() && H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0)
    fail(file, kExitDataErr, "cannot read dataset " + path + " (truncated or corrupt file?)");
  check_data(ds, buf.data(), buf.size(), path, file);
  ++st->result.checked;
}

herr_t visit(hid_t root, const char* name, const H5O_info_t* info, void* data) {
  auto* st = static_cast<VerifyState*>(data);
  if (info->type != H5O_TYPE_DATASET) return 0;
  try {
    verify_dataset(root, name, st);
    return 0;
  } catch (...) {
    st->error = std::current_exception();
    return 1;  // stops the walk
  }
}

}  // namespace

VerifyResult verify_checksums(const File& file) {
  // HDF5's own count: a file read whole from a pipe (<stdin>, /dev/stdin) has no size on disk.
  hsize_t size = 0;
  VerifyState st{&file, H5Fget_filesize(file.id(), &size) >= 0 ? static_cast<int64_t>(size) : -1, {}, nullptr};
  const herr_t walked = H5Ovisit(file.id(), H5_INDEX_NAME, H5_ITER_INC, visit, &st);
  if (st.error) std::rethrow_exception(st.error);
  if (walked < 0) fail(file.name(), kExitDataErr, "cannot walk the file's objects (corrupt file?)");
  return st.result;
}

}  // namespace xl::h5
