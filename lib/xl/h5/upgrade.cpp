#include "xl/h5/upgrade.h"

#include <filesystem>
#include <vector>

#include "xl/h5/h5.h"
#include "xl/util/error.h"
#include "xl/util/io.h"

namespace xl::h5 {
namespace {

using Found = std::vector<std::pair<std::string, std::vector<std::string>>>;  // object -> its names

herr_t collect_attr(hid_t obj, const char* name, const H5A_info_t*, void* data) {
  Handle attr(H5Aopen(obj, name, H5P_DEFAULT));
  Handle type(attr.valid() ? H5Aget_type(attr) : -1);
  if (type.valid() && H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0)
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}

// Every object (the root is ".") with variable-length string attributes, and their names.
herr_t collect_object(hid_t root, const char* name, const H5O_info_t*, void* data) {
  Handle obj(H5Oopen(root, name, H5P_DEFAULT));
  if (!obj.valid()) return -1;
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_NATIVE, &idx, collect_attr, &names) < 0) return -1;
  if (!names.empty()) static_cast<Found*>(data)->emplace_back(name, std::move(names));
  return 0;
}

struct TrustStrings {
  TrustStrings() { trust_variable_length_strings(true); }
  ~TrustStrings() { trust_variable_length_strings(false); }
};

}  // namespace

int64_t upgrade_string_attributes(const std::string& path) {
  XL_CHECK(!io::is_stdio(path), kExitUsage, "--upgrade rewrites a file in place: name the file, not -");
  {
    File probe = File::open(path, "an HDF5 file");  // a clear line for a missing or non-HDF5 file
    // Another program's HDF5 file keeps its own string layout: only xl's files are rewritten.
    if (H5Aexists(probe.id(), "xl_format") <= 0)
      fail(path, kExitDataErr, "not a file of xl (no xl_format attribute): --upgrade rewrites only xl's own files");
  }
  io::AtomicOutput out(path, /*force=*/true, /*binary=*/true);  // a copy changed, then renamed over it
  std::error_code ec;
  std::filesystem::copy_file(path, out.temp_path(), std::filesystem::copy_options::overwrite_existing, ec);
  XL_CHECK(!ec, kExitCantCreat, out.temp_path() << ": cannot copy " << path << " (" << ec.message() << ")");
  int64_t changed = 0;
  {
    TrustStrings trust;
    Handle file(H5Fopen(out.temp_path().c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    if (!file.valid()) fail(path, kExitDataErr, "cannot open a copy for writing (corrupt file?)");
    Found found;
    if (H5Ovisit(file, H5_INDEX_NAME, H5_ITER_NATIVE, collect_object, &found) < 0)
      fail(path, kExitDataErr, "cannot walk the file's objects (corrupt file?)");
    for (const auto& [object, names] : found) {
      Handle obj(H5Oopen(file, object.c_str(), H5P_DEFAULT));
      if (!obj.valid()) fail(path, kExitDataErr, "cannot open " + object + " (corrupt file?)");
      for (const auto& name : names) {
        const auto value = read_attr_string(obj, name);
        if (!value) fail(path, kExitDataErr, "cannot read attribute " + name + " of " + object + " (corrupt file?)");
        write_attr(obj, name, *value);
        ++changed;
      }
    }
    if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) fail(path, kExitIoErr, "cannot write " + out.temp_path() + " (disk full?)");
  }
  if (changed > 0) out.commit();  // otherwise the copy goes and the file stays as it was
  return changed;
}

}  // namespace xl::h5
