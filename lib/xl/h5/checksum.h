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

struct VerifyResult {
  int64_t checked = 0;    // datasets whose bytes match their checksum
  int64_t unchecked = 0;  // datasets without one
};
// Reads every dataset of the file and checks it (65 at the first corrupt one).
VerifyResult verify_checksums(const File& file);

}  // namespace xl::h5
