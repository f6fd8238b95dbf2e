// Checksums of dataset contents: a writer records the SHA-256 of each dataset's bytes as written
// (attribute "sha256"), so that flipped bits inside the data are caught when it is read (or by
// xl-inspect --verify) instead of being trained on. Datasets without the attribute (files of
// older versions, other writers) are read unchecked.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "xl/h5/h5.h"

namespace xl::h5 {

constexpr const char* kChecksumAttr = "sha256";

// The checksum of `bytes` bytes at `data`, as recorded.
std::string data_checksum(const void* data, size_t bytes);

// Fails with 65 "FILE: corrupt dataset PATH (...)" when the bytes just read from dataset `ds` do
// not match its recorded checksum; nothing when it has none.
void check_data(hid_t ds, const void* data, size_t bytes, const std::string& path, const std::string& file);
// The same for bytes read piece by piece, given their checksum (data_checksum's, or Sha256's hex).
void check_digest(hid_t ds, const std::string& digest, const std::string& path, const std::string& file);

// write_dataset of a 1-D vector already in its stored type, with the checksum of its bytes.
template <typename T>
void write_checked_dataset(hid_t loc, const std::string& path, const std::vector<T>& values, Type file_type,
                           const DatasetOptions& opts = {}) {
  write_dataset(loc, path, values, {values.size()}, file_type, opts);
  Handle ds(H5Dopen2(loc, path.c_str(), H5P_DEFAULT));
  write_attr(ds, kChecksumAttr, data_checksum(values.data(), values.size() * sizeof(T)));
}

// read_dataset in the stored type T, checked against the dataset's checksum where it has one;
// `where` names it in errors ("/vocab/counts").
template <typename T>
std::vector<T> read_checked_dataset(hid_t loc, const std::string& path, const std::string& where,
                                    const std::string& file) {
  std::vector<T> values = read_dataset<T>(loc, path, file);
  Handle ds(H5Dopen2(loc, path.c_str(), H5P_DEFAULT));
  check_data(ds, values.data(), values.size() * sizeof(T), where, file);
  return values;
}

struct VerifyResult {
  int64_t checked = 0;    // datasets whose bytes match their checksum
  int64_t unchecked = 0;  // datasets without one
};
// Reads every dataset of the file and checks it (65 at the first corrupt one).
VerifyResult verify_checksums(const File& file);

}  // namespace xl::h5
