// The integrity of a zip archive (torch.save's files and Hugging Face's .bin shards are zip
// archives whose entries carry CRC-32s, which PyTorch's reader does not check): every entry's data
// against its CRC-32, and its local header against the central directory, before anything in it
// is used. Stored (torch.save's) and deflated entries, ZIP64 archives.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace xl::interop {

// The archive's bytes: n of them from `pos` into buf (the caller checks they exist: pos + n <= size).
using ReadAt = std::function<void(uint64_t pos, void* buf, size_t n)>;

// 65 with one line naming `display` and the entry (or the directory) that fails; nothing when
// the checks are off (set_zip_checks(false): xl-import-torch --no-verify-crc).
void check_zip_archive(uint64_t size, const ReadAt& read, const std::string& display);

// Process-wide, as the tool's flag says; on by default.
void set_zip_checks(bool on);
bool zip_checks();

}  // namespace xl::interop
