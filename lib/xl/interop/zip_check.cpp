#include "xl/interop/zip_check.h"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <vector>

#include "xl/util/error.h"

namespace xl::interop {
namespace {

std::atomic<bool> g_checks{true};

constexpr uint32_t kLocalSignature = 0x04034b50, kCentralSignature = 0x02014b50, kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50, kZip64LocatorSignature = 0x07064b50;
constexpr size_t kEndSize = 22, kLocatorSize = 20, kCentralSize = 46, kLocalSize = 30;

uint64_t le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes; i-- > 0;) v = v << 8 | p[i];
  return v;
}

struct Entry {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, size = 0, local = 0;
};

class Archive {
 public:
  Archive(uint64_t size, const ReadAt& read, const std::string& display) : size_(size), read_(read), display_(display) {}

  void check() {
    uint64_t count = 0, at = 0, bytes = 0;
    directory(&count, &at, &bytes);
    for (uint64_t i = 0; i < count; ++i) {
      const Entry e = central_entry(&at, at + bytes);
      check_local_header(e);
      check_data(e);
    }
  }

 private:
  std::vector<unsigned char> bytes(uint64_t pos, uint64_t n, const char* what) const {
    XL_CHECK(pos <= size_ && n <= size_ - pos, kExitDataErr, display_ << ": a zip archive cut short (its " << what << " lies past its end)");
    std::vector<unsigned char> out(static_cast<size_t>(n));
    if (n) read_(pos, out.data(), out.size());
    return out;
  }

  // The central directory: its entry count, offset and length, from the end record (ZIP64's where
  // the archive has one).
  void directory(uint64_t* count, uint64_t* at, uint64_t* length) const {
    XL_CHECK(size_ >= kEndSize, kExitDataErr, display_ << ": too short for a zip archive");
    const uint64_t tail_len = std::min<uint64_t>(size_, kEndSize + 0xFFFF);
    const auto tail = bytes(size_ - tail_len, tail_len, "end record");
    size_t end = tail.size();
    for (size_t i = tail.size() - kEndSize + 1; i-- > 0;)
      if (le(&tail[i], 4) == kEndSignature) {
        end = i;
        break;
      }
    XL_CHECK(end < tail.size(), kExitDataErr, display_ << ": no zip end record (not a zip archive, or cut short)");
    const unsigned char* e = &tail[end];
    *count = le(e + 10, 2), *length = le(e + 12, 4), *at = le(e + 16, 4);
    const uint64_t end_pos = size_ - tail_len + end;
    if (end_pos >= kLocatorSize) {
      const auto locator = bytes(end_pos - kLocatorSize, kLocatorSize, "ZIP64 locator");
      if (le(locator.data(), 4) == kZip64LocatorSignature) {
        const auto z = bytes(le(locator.data() + 8, 8), 56, "ZIP64 end record");
        XL_CHECK(le(z.data(), 4) == kZip64EndSignature, kExitDataErr, display_ << ": a bad ZIP64 end record");
        *count = le(z.data() + 32, 8), *length = le(z.data() + 40, 8), *at = le(z.data() + 48, 8);
      }
    }
  }

  // The central directory's entry at *at, which moves past it.
  Entry central_entry(uint64_t* at, uint64_t end) const {
    const auto h = bytes(*at, kCentralSize, "central directory");
    XL_CHECK(le(h.data(), 4) == kCentralSignature && *at + kCentralSize <= end, kExitDataErr,
             display_ << ": a bad zip central directory at byte " << *at);
    Entry e;
    e.flags = static_cast<uint16_t>(le(&h[8], 2)), e.method = static_cast<uint16_t>(le(&h[10], 2));
    e.crc = static_cast<uint32_t>(le(&h[16], 4));
    e.compressed = le(&h[20], 4), e.size = le(&h[24], 4), e.local = le(&h[42], 4);
    const uint64_t name_len = le(&h[28], 2), extra_len = le(&h[30], 2), comment_len = le(&h[32], 2);
    const auto name = bytes(*at + kCentralSize, name_len, "central directory");
    e.name.assign(name.begin(), name.end());
    zip64_sizes(bytes(*at + kCentralSize + name_len, extra_len, "central directory"), &e);
    *at += kCentralSize + name_len + extra_len + comment_len;
    return e;
  }

  // ZIP64's extra field (id 1): the 8-byte sizes and offset the header left at 0xFFFFFFFF, in order.
  static void zip64_sizes(const std::vector<unsigned char>& extra, Entry* e) {
    for (size_t i = 0; i + 4 <= extra.size();) {
      const uint64_t id = le(&extra[i], 2), len = le(&extra[i + 2], 2);
      if (id == 1) {
        size_t p = i + 4;
        for (uint64_t* field : {&e->size, &e->compressed, &e->local})
          if (*field == 0xFFFFFFFFu && p + 8 <= i + 4 + len && p + 8 <= extra.size()) *field = le(&extra[p], 8), p += 8;
      }
      i += 4 + len;
    }
  }

  void check_local_header(const Entry& e) const {
    const auto h = bytes(e.local, kLocalSize, "local header");
    // The signature first: a directory that points elsewhere reads as a disagreement, not as a
    // name length of whatever bytes lie there.
    const auto disagrees = [&] {
      XL_FAIL(kExitDataErr,
              display_ << ": entry " << e.name << ": its local header disagrees with the zip's central directory (a corrupt file)");
    };
    if (le(h.data(), 4) != kLocalSignature) disagrees();
    const uint64_t name_len = le(&h[26], 2);
    const auto name = bytes(e.local + kLocalSize, name_len, "local header");
    const bool agrees = std::string(name.begin(), name.end()) == e.name &&
                        le(&h[8], 2) == e.method &&
                        ((e.flags & 8) != 0 || le(&h[14], 4) == e.crc);  // bit 3: the CRC follows the data
    if (!agrees) disagrees();
  }

  // The entry's data, inflated where deflated, against its CRC-32.
  void check_data(const Entry& e) const {
    const auto h = bytes(e.local, kLocalSize, "local header");
    const uint64_t data = e.local + kLocalSize + le(&h[26], 2) + le(&h[28], 2);
    XL_CHECK(e.method == 0 || e.method == 8, kExitDataErr,
             display_ << ": entry " << e.name << ": compression method " << e.method << " is not supported (stored or deflate)");
    XL_CHECK(data <= size_ && e.compressed <= size_ - data, kExitDataErr,
             display_ << ": entry " << e.name << " runs past the end of the file (cut short?)");
    uLong crc = crc32(0, nullptr, 0);
    uint64_t produced = 0;
    z_stream z{};
    if (e.method == 8) XL_CHECK(inflateInit2(&z, -MAX_WBITS) == Z_OK, kExitSoftware, "zlib: inflateInit2 failed");
    std::vector<unsigned char> in(1 << 20), out(e.method == 8 ? 1 << 20 : 0);
    bool inflate_ok = true, ended = false;  // a deflate stream must reach its last block
    for (uint64_t done = 0; done < e.compressed;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(in.size(), e.compressed - done));
      read_(data + done, in.data(), n);
      done += n;
      if (e.method == 0) {
        crc = crc32(crc, in.data(), static_cast<uInt>(n));
        produced += n;
        continue;
      }
      z.next_in = in.data(), z.avail_in = static_cast<uInt>(n);
      do {
        z.next_out = out.data(), z.avail_out = static_cast<uInt>(out.size());
        const int rc = inflate(&z, Z_NO_FLUSH);
        inflate_ok = inflate_ok && (rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR);
        const size_t got = out.size() - z.avail_out;
        crc = crc32(crc, out.data(), static_cast<uInt>(got));
        produced += got;
        if (rc == Z_STREAM_END) {
          ended = true;
          break;
        }
      } while (z.avail_out == 0);
    }
    if (e.method == 8) inflateEnd(&z);
    XL_CHECK(inflate_ok && (e.method != 8 || ended) && produced == e.size && static_cast<uint32_t>(crc) == e.crc, kExitDataErr,
             display_ << ": entry " << e.name << " fails its CRC-32 check (the zip says " << hex(e.crc) << ", its data gives "
                      << hex(static_cast<uint32_t>(crc)) << "): a corrupt file (--no-verify-crc reads it anyway)");
  }

  static std::string hex(uint32_t v) {
    char text[16];
    std::snprintf(text, sizeof text, "%08x", v);
    return text;
  }

  uint64_t size_;
  const ReadAt& read_;
  const std::string& display_;
};

}  // namespace

void check_zip_archive(uint64_t size, const ReadAt& read, const std::string& display) {
  if (zip_checks()) Archive(size, read, display).check();
}

void set_zip_checks(bool on) { g_checks = on; }
bool zip_checks() { return g_checks; }

}  // namespace xl::interop
