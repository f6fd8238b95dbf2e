#include "xl/tensorboard/event_file.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "xl/tensorboard/crc32c.h"
#include "xl/util/error.h"

namespace xl::tensorboard {
namespace {

enum WireType : uint64_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

std::string varint(uint64_t v) {
  std::string out;
  do {
    const auto low = static_cast<unsigned char>(v & 0x7F);
    v >>= 7;
    out.push_back(static_cast<char>(v ? low | 0x80 : low));
  } while (v);
  return out;
}

std::string key(uint64_t field, WireType type) { return varint(field << 3 | type); }

template <typename T>
std::string little_endian(T v) {
  std::string out(sizeof v, '\0');
  std::memcpy(out.data(), &v, sizeof v);  // x86-64 and aarch64 are little-endian, as the format
  return out;
}

std::string bytes_field(uint64_t field, const std::string& bytes) {
  return key(field, kBytes) + varint(bytes.size()) + bytes;
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// An Event's common head: wall_time and step.
std::string event_head(int64_t step) {
  return key(1, kFixed64) + little_endian(wall_time()) + key(2, kVarint) + varint(static_cast<uint64_t>(step));
}

std::string file_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
      std::chrono::system_clock::now().time_since_epoch()).count();
  return "events.out.tfevents." + std::to_string(seconds) + "." + host + "." + std::to_string(::getpid()) + ".xl";
}

}  // namespace

EventFile::EventFile(const std::string& dir, int64_t purge_from) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  XL_CHECK(!ec, kExitCantCreat, dir << ": cannot create the TensorBoard directory: " << ec.message());
  path_ = (std::filesystem::path(dir) / file_name()).string();
  out_.open(path_, std::ios::binary | std::ios::app);
  XL_CHECK(out_, kExitCantCreat, "cannot create " << path_ << ": " << std::strerror(errno));
  record(event_head(purge_from < 0 ? 0 : purge_from) + bytes_field(3, "brain.Event:2"));
  if (purge_from >= 0) record(event_head(purge_from) + bytes_field(7, key(1, kVarint) + varint(1)));
}

void EventFile::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values)
    summary += bytes_field(1, bytes_field(1, tag) + key(2, kFixed32) + little_endian(static_cast<float>(value)));
  record(event_head(step) + bytes_field(5, summary));
}

void EventFile::record(const std::string& event) {
  if (!failure_.empty()) return;
  const std::string length = little_endian(static_cast<uint64_t>(event.size()));
  out_ << length << little_endian(masked_crc32c(length.data(), length.size())) << event
       << little_endian(masked_crc32c(event.data(), event.size()));
  out_.flush();
  if (out_.good()) return;
  failure_ = path_ + ": write error: " + std::strerror(errno);
}

}  // namespace xl::tensorboard
