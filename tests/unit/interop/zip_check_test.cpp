// check_zip_archive (xl/interop/zip_check.h) on zip archives built here byte by byte: stored
// entries (with torch.save's alignment padding in an extra field), a raw-deflate entry (zlib,
// window -15), a data descriptor entry, ZIP64 end records and extra fields. CRC-32s come from a
// bitwise loop in the test.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "xl/interop/zip_check.h"

namespace {

using xl::interop::check_zip_archive;

// CRC-32 (reflected 0xEDB88320), one bit at a time.
uint32_t bitwise_crc32(const std::string& s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : s) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
  }
  return ~crc;
}

std::string raw_deflate(const std::string& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void put(std::string* s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void set(std::string* s, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) (*s)[at + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

struct Entry {
  std::string name, data;
  uint16_t method = 0;      // 0 stored, 8 deflate, anything else as is (then stored bytes)
  bool descriptor = false;  // flag bit 3: CRC and sizes after the data, zeros in the local header
};

struct Zip {
  std::string bytes;
  std::vector<size_t> local, data, central;  // per entry: its local header, data, central header
  std::vector<size_t> payload;               // per entry: the stored (compressed) length
  size_t end = 0;                            // the end record
};

// The archive; zip64: sizes and offsets in ZIP64 extra fields and a ZIP64 end record, the 32-bit
// fields all 0xFFFFFFFF (0xFFFF for counts), so that only a ZIP64 reader finds anything.
Zip build(const std::vector<Entry>& entries, bool zip64 = false, const std::string& comment = "") {
  Zip z;
  std::vector<uint32_t> crcs;
  for (const Entry& e : entries) {
    const uint32_t crc = bitwise_crc32(e.data);
    crcs.push_back(crc);
    const std::string payload = e.method == 8 ? raw_deflate(e.data) : e.data;
    z.payload.push_back(payload.size());
    z.local.push_back(z.bytes.size());
    // torch.save pads each local header with an extra field (id 'FB') so that data starts on a
    // 64-byte boundary.
    std::string extra;
    if (zip64) {
      put(&extra, 1, 2), put(&extra, 16, 2), put(&extra, e.data.size(), 8), put(&extra, payload.size(), 8);
    }
    const size_t unpadded = z.bytes.size() + 30 + e.name.size() + extra.size() + 4;
    const size_t pad = (64 - unpadded % 64) % 64;
    put(&extra, 0x4246, 2), put(&extra, pad, 2), extra.append(pad, 'Z');
    std::string& b = z.bytes;
    put(&b, 0x04034b50, 4), put(&b, zip64 ? 45 : 20, 2), put(&b, e.descriptor ? 8 : 0, 2), put(&b, e.method, 2);
    put(&b, 0, 2), put(&b, 0x21, 2);  // time, date
    put(&b, e.descriptor ? 0 : crc, 4);
    put(&b, zip64 ? 0xFFFFFFFFu : (e.descriptor ? 0 : payload.size()), 4);
    put(&b, zip64 ? 0xFFFFFFFFu : (e.descriptor ? 0 : e.data.size()), 4);
    put(&b, e.name.size(), 2), put(&b, extra.size(), 2);
    b += e.name + extra;
    z.data.push_back(b.size());
    b += payload;
    if (e.descriptor) put(&b, 0x08074b50, 4), put(&b, crc, 4), put(&b, payload.size(), 4), put(&b, e.data.size(), 4);
  }
  const size_t cd = z.bytes.size();
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    std::string& b = z.bytes;
    z.central.push_back(b.size());
    std::string extra;
    if (zip64) put(&extra, 1, 2), put(&extra, 24, 2), put(&extra, e.data.size(), 8), put(&extra, z.payload[i], 8),
        put(&extra, z.local[i], 8);
    put(&b, 0x02014b50, 4), put(&b, zip64 ? 45 : 20, 2), put(&b, zip64 ? 45 : 20, 2);
    put(&b, e.descriptor ? 8 : 0, 2), put(&b, e.method, 2), put(&b, 0, 2), put(&b, 0x21, 2);
    put(&b, crcs[i], 4);
    put(&b, zip64 ? 0xFFFFFFFFu : z.payload[i], 4), put(&b, zip64 ? 0xFFFFFFFFu : e.data.size(), 4);
    put(&b, e.name.size(), 2), put(&b, extra.size(), 2), put(&b, 0, 2);  // name, extra, comment lengths
    put(&b, 0, 2), put(&b, 0, 2), put(&b, 0, 4);                          // disk, attributes
    put(&b, zip64 ? 0xFFFFFFFFu : z.local[i], 4);
    b += e.name + extra;
  }
  const size_t cd_size = z.bytes.size() - cd;
  std::string& b = z.bytes;
  if (zip64) {
    const size_t z64 = b.size();
    put(&b, 0x06064b50, 4), put(&b, 44, 8), put(&b, 45, 2), put(&b, 45, 2), put(&b, 0, 4), put(&b, 0, 4);
    put(&b, entries.size(), 8), put(&b, entries.size(), 8), put(&b, cd_size, 8), put(&b, cd, 8);
    put(&b, 0x07064b50, 4), put(&b, 0, 4), put(&b, z64, 8), put(&b, 1, 4);
  }
  z.end = b.size();
  put(&b, 0x06054b50, 4), put(&b, 0, 2), put(&b, 0, 2);
  put(&b, zip64 ? 0xFFFF : entries.size(), 2), put(&b, zip64 ? 0xFFFF : entries.size(), 2);
  put(&b, zip64 ? 0xFFFFFFFFu : cd_size, 4), put(&b, zip64 ? 0xFFFFFFFFu : cd, 4);
  put(&b, comment.size(), 2);
  b += comment;
  return z;
}

// check_zip_archive on `bytes`: its exit code (0: passed) and message; a read outside the archive
// (the reader's contract: pos + n <= size) fails the test.
int check(const std::string& bytes, std::string* what = nullptr) {
  int outside = 0;
  const int code = xl::test::error_code(
      [&] {
        check_zip_archive(
            bytes.size(),
            [&](uint64_t pos, void* buf, size_t n) {
              if (pos > bytes.size() || n > bytes.size() - pos) {
                ++outside;
                std::memset(buf, 0, n);
                return;
              }
              std::memcpy(buf, bytes.data() + pos, n);
            },
            "model.pt");
      },
      what);
  EXPECT_EQ(outside, 0) << "reads past the archive's end";
  return code;
}

std::string pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + static_cast<size_t>(seed) * 7 + (i >> 9)) & 0xFF);
  return s;
}

// What torch.save writes, plus a deflated entry and one with a data descriptor.
std::vector<Entry> entries() {
  using namespace std::string_literals;
  return {{"archive/data.pkl", "\x80\x02}q\x00."s, 0, false},
          {"archive/data/0", pattern(1000, 1), 0, false},
          {"archive/data/1", std::string(5000, 'a') + pattern(700, 2), 8, false},
          {"archive/version", "3\n", 0, true},
          {"archive/empty", "", 0, false}};
}

}  // namespace

TEST(ZipCheck, TheTestsCrc32IsTheStandardOne) {
  EXPECT_EQ(bitwise_crc32("123456789"), 0xCBF43926u);
  EXPECT_EQ(bitwise_crc32(""), 0u);
}

TEST(ZipCheck, AGoodArchivePasses) {
  std::string what;
  EXPECT_EQ(check(build(entries()).bytes, &what), 0) << what;
  EXPECT_EQ(check(build(entries(), false, "a comment\x50\x4b").bytes, &what), 0) << what;
  EXPECT_EQ(check(build({}).bytes, &what), 0) << what;  // no entries: the end record alone
}

// Entries larger than the checker's 1 MiB buffers: a stored one read in pieces, a deflated one
// that inflates to several buffers' worth.
TEST(ZipCheck, LargeStoredAndDeflatedEntriesPass) {
  const Zip z = build({{"big.bin", pattern(2'500'000, 3), 0, false}, {"big.z", pattern(3'300'000, 4), 8, false}});
  std::string what;
  EXPECT_EQ(check(z.bytes, &what), 0) << what;
  std::string bad = z.bytes;
  bad[z.data[1] + z.payload[1] - 2] ^= 0x01;  // near the end of the deflate stream
  EXPECT_EQ(check(bad, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("big.z"), std::string::npos) << what;
  bad = z.bytes;
  bad[z.data[0] + 2'000'000] ^= 0x40;  // in the stored entry's second MiB
  EXPECT_EQ(check(bad, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("big.bin"), std::string::npos) << what;
}

// Any byte of any entry's data changed: 65, a line naming the file, the entry and its CRC. (A
// stored byte with one bit flipped; a deflated byte with all eight, since one flipped bit of the
// last byte's padding after the end-of-block code leaves a valid stream of the same data.)
TEST(ZipCheck, AChangedDataByteFailsItsCrcNamingTheEntry) {
  const auto list = entries();
  const Zip z = build(list);
  for (size_t i = 0; i < list.size(); ++i) {
    for (size_t k = 0; k < z.payload[i]; ++k) {
      std::string bad = z.bytes;
      bad[z.data[i] + k] ^= list[i].method == 8 ? 0xFF : (k % 2 ? 0x80 : 0x01);
      std::string what;
      ASSERT_EQ(check(bad, &what), xl::kExitDataErr) << list[i].name << " byte " << k;
      EXPECT_NE(what.find("model.pt"), std::string::npos) << what;
      EXPECT_NE(what.find("entry " + list[i].name), std::string::npos) << what;
      EXPECT_NE(what.find("CRC"), std::string::npos) << what;
    }
  }
}

// A CRC recorded wrong (in both headers alike) and a wrong uncompressed size fail too.
TEST(ZipCheck, AWrongCrcOrSizeInTheDirectoryFails) {
  const Zip z = build(entries());
  std::string bad = z.bytes, what;
  const uint32_t crc = static_cast<uint32_t>(z.bytes[z.central[1] + 16] & 0xFF) ^ 0x10;
  set(&bad, z.central[1] + 16, crc, 1);
  set(&bad, z.local[1] + 14, crc, 1);
  EXPECT_EQ(check(bad, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("archive/data/0"), std::string::npos) << what;
  EXPECT_NE(what.find("CRC"), std::string::npos) << what;
  bad = z.bytes;  // the deflated entry said to inflate to one byte more
  set(&bad, z.central[2] + 24, entries()[2].data.size() + 1, 4);
  EXPECT_EQ(check(bad, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("archive/data/1"), std::string::npos) << what;
}

// The local header must agree with the central directory: signature, name, method, and the CRC
// unless flag bit 3 puts it after the data.
TEST(ZipCheck, ALocalHeaderThatDisagreesWithTheDirectoryFails) {
  const Zip z = build(entries());
  auto expect_disagreement = [&](const std::string& bad, const std::string& entry, const char* mutation) {
    std::string what;
    EXPECT_EQ(check(bad, &what), xl::kExitDataErr) << mutation;
    EXPECT_NE(what.find("entry " + entry), std::string::npos) << mutation << ": " << what;
    EXPECT_NE(what.find("local header disagrees"), std::string::npos) << mutation << ": " << what;
  };
  std::string bad = z.bytes;
  bad[z.local[1] + 30 + 8] = 'D';  // "archive/data/0" -> "archive/Data/0" in the local header
  expect_disagreement(bad, "archive/data/0", "name");
  bad = z.bytes;
  set(&bad, z.local[1] + 8, 8, 2);  // method: deflate in the local header, stored in the directory
  expect_disagreement(bad, "archive/data/0", "method");
  bad = z.bytes;
  set(&bad, z.local[0] + 14, 0x12345678u, 4);  // local CRC
  expect_disagreement(bad, "archive/data.pkl", "crc");
  bad = z.bytes;
  set(&bad, z.local[2], 0x04034b51u, 4);  // signature
  expect_disagreement(bad, "archive/data/1", "signature");
  bad = z.bytes;  // the directory's offset one byte off: no local header there
  set(&bad, z.central[1] + 42, z.local[1] + 1, 4);
  std::string what;
  EXPECT_EQ(check(bad, &what), xl::kExitDataErr) << "offset";
  EXPECT_NE(what.find("model.pt"), std::string::npos) << what;

  // The data descriptor entry (archive/version) has a zero local CRC, and passes; without its flag
  // bit in the directory the zero CRC disagrees.
  bad = z.bytes;
  set(&bad, z.central[3] + 8, 0, 2);
  expect_disagreement(bad, "archive/version", "flag bit 3");
}

// Every prefix of an archive fails (65), reading nothing outside it; so does an archive whose
// middle was lost, and an entry whose size runs past the end.
TEST(ZipCheck, ATruncatedArchiveFails) {
  const Zip z = build({{"a", "hello", 0, false}, {"b", std::string(300, 'b'), 8, false}});
  for (size_t n = 0; n < z.bytes.size(); ++n) {
    std::string what;
    ASSERT_EQ(check(z.bytes.substr(0, n), &what), xl::kExitDataErr) << "prefix of " << n << " bytes";
    EXPECT_NE(what.find("model.pt"), std::string::npos) << what;
  }
  std::string what;
  const std::string holed = z.bytes.substr(0, z.data[1] + 2) + z.bytes.substr(z.central[0]);
  EXPECT_EQ(check(holed, &what), xl::kExitDataErr);
  std::string bad = z.bytes;
  set(&bad, z.central[1] + 20, z.bytes.size(), 4);  // compressed size past the end
  EXPECT_EQ(check(bad, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("entry b runs past the end"), std::string::npos) << what;
}

TEST(ZipCheck, NotAZipArchiveFails) {
  std::string what;
  EXPECT_EQ(check("PK\x03\x04", &what), xl::kExitDataErr);
  EXPECT_NE(what.find("too short"), std::string::npos) << what;
  EXPECT_EQ(check(pattern(5000, 9), &what), xl::kExitDataErr);
  EXPECT_NE(what.find("no zip end record"), std::string::npos) << what;
}

TEST(ZipCheck, AnUnsupportedMethodFailsNamingIt) {
  const Zip z = build({{"a.bz2", "BZh9", 12, false}});
  std::string what;
  EXPECT_EQ(check(z.bytes, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("entry a.bz2: compression method 12"), std::string::npos) << what;
}

// ZIP64: the counts, offsets and sizes only in the ZIP64 end record and extra fields.
TEST(ZipCheck, Zip64ArchivesAreReadAndChecked) {
  const auto list = entries();
  const Zip z = build(list, true);
  std::string what;
  EXPECT_EQ(check(z.bytes, &what), 0) << what;
  for (size_t i = 0; i < list.size(); ++i) {
    if (z.payload[i] == 0) continue;
    std::string bad = z.bytes;
    bad[z.data[i] + z.payload[i] / 2] ^= 0x20;
    EXPECT_EQ(check(bad, &what), xl::kExitDataErr) << list[i].name;
    EXPECT_NE(what.find("entry " + list[i].name), std::string::npos) << what;
    EXPECT_NE(what.find("CRC"), std::string::npos) << what;
  }
  std::string bad = z.bytes;  // the ZIP64 end record's signature
  const size_t z64 = z.end - 20 - 56;
  set(&bad, z64, 0x06064b51u, 4);
  EXPECT_EQ(check(bad, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("ZIP64"), std::string::npos) << what;
  bad = z.bytes;  // the last entry's ZIP64 local offset one byte off
  set(&bad, z.central[4] + 46 + list[4].name.size() + 4 + 16, z.local[4] + 1, 8);
  EXPECT_EQ(check(bad, &what), xl::kExitDataErr);
  EXPECT_NE(what.find("model.pt"), std::string::npos) << what;
}

// A deflate stream that never ends (its last block not marked final, or a writer stopped before
// Z_FINISH) is corrupt even when what it inflates to so far has the right size and CRC.
TEST(ZipCheck, ADeflateStreamThatDoesNotEndFails) {
  const std::string data = std::string(3000, 'q') + pattern(900, 5);
  Zip z = build({{"a.z", data, 8, false}});
  ASSERT_EQ(check(z.bytes), 0);
  std::string bad = z.bytes;
  ASSERT_EQ(bad[z.data[0]] & 1, 1);  // BFINAL of the stream's one block
  bad[z.data[0]] ^= 0x01;
  std::string what;
  EXPECT_EQ(check(bad, &what), xl::kExitDataErr) << "BFINAL cleared";
  EXPECT_NE(what.find("entry a.z"), std::string::npos) << what;

  // The same data flushed (Z_SYNC_FLUSH) but never finished, in place of the finished stream.
  z_stream s{};
  ASSERT_EQ(deflateInit2(&s, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string flushed(deflateBound(&s, data.size()) + 64, '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  s.avail_in = static_cast<uInt>(data.size());
  s.next_out = reinterpret_cast<Bytef*>(flushed.data());
  s.avail_out = static_cast<uInt>(flushed.size());
  ASSERT_EQ(deflate(&s, Z_SYNC_FLUSH), Z_OK);
  flushed.resize(s.total_out);
  deflateEnd(&s);
  // The archive of one entry a.z holding `stream` as its deflated data.
  auto with_stream = [&](const std::string& stream) {
    const Zip stored = build({{"a.z", data, 0, false}});
    std::string b = stored.bytes.substr(0, stored.data[0]) + stream;
    const size_t cd = b.size();
    std::string tail = stored.bytes.substr(stored.central[0]);
    set(&tail, 10, 8, 2), set(&tail, 20, stream.size(), 4);  // method, compressed size
    set(&tail, tail.size() - 22 + 16, cd, 4);                // the end record's directory offset
    b += tail;
    set(&b, 8, 8, 2), set(&b, 18, stream.size(), 4);  // the local header's method and size
    return b;
  };
  ASSERT_EQ(check(with_stream(raw_deflate(data)), &what), 0) << what;
  const std::string b = with_stream(flushed);
  EXPECT_EQ(check(b, &what), xl::kExitDataErr) << "never finished";
  EXPECT_NE(what.find("entry a.z"), std::string::npos) << what;
}

// --no-verify-crc: nothing is checked.
TEST(ZipCheck, ChecksOffPassEverything) {
  const Zip z = build(entries());
  std::string bad = z.bytes;
  bad[z.data[1] + 10] ^= 0x55;
  ASSERT_TRUE(xl::interop::zip_checks());
  xl::interop::set_zip_checks(false);
  const int code = check(bad);
  const int garbage = check("not a zip");
  xl::interop::set_zip_checks(true);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(garbage, 0);
  EXPECT_NE(check(bad), 0);
}
