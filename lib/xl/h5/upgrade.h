// Rewrites files of xl 0.2 (and files whose string attributes h5py wrote) in today's layout:
// every variable-length string attribute becomes a fixed-length one (see read_attr_string).
#pragma once
#include <cstdint>
#include <string>

namespace xl::h5 {

// Rewrites the HDF5 file at `path` in place (a copy is changed, then renamed over it) and returns
// how many attributes changed; 0 leaves the file untouched. Reads variable-length strings, so
// only for files the user trusts: xl-inspect --upgrade. An HDF5 file that is not xl's (no
// xl_format attribute) is refused (65), as it was.
int64_t upgrade_string_attributes(const std::string& path);

}  // namespace xl::h5
