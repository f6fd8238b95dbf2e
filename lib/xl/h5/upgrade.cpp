#include "xl/h5/upgrade.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "xl/h5/h5.h"
#include "xl/util/error.h"
#include "xl/util/io.h"

namespace xl::h5 {
namespace {

// Every object's path (the root is ".") that has a variable-length string attribute, with its names.
struct Found {
  std::vector<std::pair<std::string, std::vector<std::string>>> objects;
};

herr_t collect_attr(hid_t obj, const char* name, const H5A_info_t*, void* data) {
  auto* names = static_cast<std::vector<std::string>*>(data);
  Handle attr(H5Aopen(obj, name, H5P_DEFAULT));
  Handle type(attr.valid() ? H5Aget_type(attr) : -1);
  if (type.valid() && H5Tget_class(type) == H5T_STRING && H5Tis_variable_str(type) > 0) names->emplace_back(name);
  return 0;
}

herr_t collect_object(hid_t root, const char* name, const H5O_info_t*, void* data) {
  auto* found = static_cast<Found*>(data);
  Handle obj(H5Oopen(root, name, H5P_DEFAULT));
  if (!obj.valid()) return -1;
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, &names) < 0) return -1;
  if (!names.empty()) found->objects.emplace_back(name, std::move(names));
  return 0;
}

struct TrustStrings {
  TrustStrings() { trust_variable_length_strings(true); }
  ~TrustStrings() { trust_variable_length_strings(false); }
};

}  // namespace

int64_t upgrade_string_attributes(const std::string& path) {
  XL_CHECK(!io::is_stdio(path), kExitUsage, "--upgrade rewrites a file in place: name the file, not -");
  { File probe = File::open(path, "an HDF5 file"); }  // a clear line for a missing or non-HDF5 file
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  std::filesystem::copy_file(path, temp, std::filesystem::copy_options::overwrite_existing, ec);
  XL_CHECK(!ec, kExitCantCreat, temp << ": cannot copy " << path << " (" << ec.message() << ")");
  io::register_temp(temp);
  int64_t changed = 0;
  try {
    TrustStrings trust;
    Handle file(H5Fopen(temp.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    if (!file.valid()) fail(path, kExitDataErr, "cannot open a copy for writing (corrupt file?)");
    Found found;
    if (H5Ovisit(file, H5_INDEX_NAME, H5_ITER_INC, collect_object, &found) < 0)
      fail(path, kExitDataErr, "cannot walk the file's objects (corrupt file?)");
    for (const auto& [object, names] : found.objects) {
      Handle obj(H5Oopen(file, object.c_str(), H5P_DEFAULT));
      if (!obj.valid()) fail(path, kExitDataErr, "cannot open " + object + " (corrupt file?)");
      for (const auto& name : names) {
        const auto value = read_attr_string(obj, name);
        if (!value) fail(path, kExitDataErr, "cannot read attribute " + name + " of " + object + " (corrupt file?)");
        write_attr(obj, name, *value);
        ++changed;
      }
    }
    if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) fail(path, kExitIoErr, "cannot write " + temp + " (disk full?)");
  } catch (...) {
    std::remove(temp.c_str());
    io::unregister_temp(temp);
    throw;
  }
  if (changed == 0) {
    std::remove(temp.c_str());
  } else if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    io::unregister_temp(temp);
    XL_FAIL(kExitCantCreat, path << ": cannot replace it with the upgraded copy");
  }
  io::unregister_temp(temp);
  return changed;
}

}  // namespace xl::h5
