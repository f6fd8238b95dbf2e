// A reader of TensorBoard event files written for the tests alone, independent of xl's writer:
// TFRecord frames (uint64 length, masked CRC-32C of the length, data, masked CRC-32C of the data)
// with their CRCs checked by a bitwise CRC-32C (no table), and the Event protobuf decoded with a
// small varint / wire-type decoder:
//   Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//           SessionLog session_log = 7; }
//   Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
//   SessionLog { Status status = 1; }
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace xl::test::tfevents {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), one bit at a time.
inline uint32_t bitwise_crc32c(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 1u) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

// TFRecord's mask: rotate right by 15, add a constant.
inline uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

inline uint64_t read_le(const std::string& s, size_t at, int bytes) {
  if (at + static_cast<size_t>(bytes) > s.size()) throw std::runtime_error("read past the end");
  uint64_t v = 0;
  for (int i = bytes; i-- > 0;) v = v << 8 | static_cast<unsigned char>(s[at + static_cast<size_t>(i)]);
  return v;
}

struct Record {
  std::string data;
  bool length_crc_ok = false, data_crc_ok = false;
};

// The file's records; throws on a frame that runs past the end.
inline std::vector<Record> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<Record> out;
  for (size_t at = 0; at < file.size();) {
    const uint64_t length = read_le(file, at, 8);
    const auto length_crc = static_cast<uint32_t>(read_le(file, at + 8, 4));
    if (at + 12 + length + 4 > file.size()) throw std::runtime_error("a record runs past the end");
    Record r;
    r.data = file.substr(at + 12, static_cast<size_t>(length));
    const auto data_crc = static_cast<uint32_t>(read_le(file, at + 12 + static_cast<size_t>(length), 4));
    r.length_crc_ok = length_crc == mask(bitwise_crc32c(file.substr(at, 8)));
    r.data_crc_ok = data_crc == mask(bitwise_crc32c(r.data));
    out.push_back(std::move(r));
    at += 12 + static_cast<size_t>(length) + 4;
  }
  return out;
}

// Protobuf wire format: fields of one message.
struct Field {
  uint64_t number = 0;
  int wire = 0;
  uint64_t varint = 0;  // wire 0; wire 1 and 5: the raw little-endian bits
  std::string bytes;    // wire 2
};

inline uint64_t varint_at(const std::string& s, size_t* at) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*at >= s.size()) throw std::runtime_error("a varint runs past the end");
    const auto byte = static_cast<unsigned char>(s[(*at)++]);
    v |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return v;
  }
  throw std::runtime_error("a varint of more than 10 bytes");
}

inline std::vector<Field> fields_of(const std::string& message) {
  std::vector<Field> out;
  for (size_t at = 0; at < message.size();) {
    const uint64_t key = varint_at(message, &at);
    Field f;
    f.number = key >> 3;
    f.wire = static_cast<int>(key & 7);
    switch (f.wire) {
      case 0: f.varint = varint_at(message, &at); break;
      case 1: f.varint = read_le(message, at, 8), at += 8; break;
      case 5: f.varint = read_le(message, at, 4), at += 4; break;
      case 2: {
        const uint64_t n = varint_at(message, &at);
        if (at + n > message.size()) throw std::runtime_error("a length-delimited field runs past the end");
        f.bytes = message.substr(at, static_cast<size_t>(n));
        at += static_cast<size_t>(n);
        break;
      }
      default: throw std::runtime_error("wire type " + std::to_string(f.wire));
    }
    out.push_back(std::move(f));
  }
  return out;
}

struct Event {
  bool has_wall_time = false, has_step = false, has_file_version = false, has_summary = false, has_session_log = false;
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;  // the summary's (tag, simple_value), in order
  int64_t session_status = -1;
};

inline void expect_wire(const Field& f, int wire) {
  if (f.wire != wire)
    throw std::runtime_error("field " + std::to_string(f.number) + " has wire type " + std::to_string(f.wire));
}

// Decodes an Event; throws on a field or wire type the writer should not produce.
inline Event decode_event(const std::string& data) {
  Event e;
  for (const Field& f : fields_of(data)) {
    switch (f.number) {
      case 1: {
        expect_wire(f, 1);
        std::memcpy(&e.wall_time, &f.varint, 8);
        e.has_wall_time = true;
        break;
      }
      case 2: expect_wire(f, 0), e.step = static_cast<int64_t>(f.varint), e.has_step = true; break;
      case 3: expect_wire(f, 2), e.file_version = f.bytes, e.has_file_version = true; break;
      case 5: {
        expect_wire(f, 2);
        e.has_summary = true;
        for (const Field& v : fields_of(f.bytes)) {
          if (v.number != 1) throw std::runtime_error("a Summary field other than value");
          expect_wire(v, 2);
          std::string tag;
          float value = 0;
          bool has_tag = false, has_value = false;
          for (const Field& x : fields_of(v.bytes)) {
            if (x.number == 1) expect_wire(x, 2), tag = x.bytes, has_tag = true;
            else if (x.number == 2) {
              expect_wire(x, 5);
              const auto bits = static_cast<uint32_t>(x.varint);
              std::memcpy(&value, &bits, 4);
              has_value = true;
            } else {
              throw std::runtime_error("a Value field other than tag and simple_value");
            }
          }
          if (!has_tag || !has_value) throw std::runtime_error("a Value without its tag or simple_value");
          e.values.emplace_back(tag, value);
        }
        break;
      }
      case 7: {
        expect_wire(f, 2);
        e.has_session_log = true;
        for (const Field& x : fields_of(f.bytes))
          if (x.number == 1) expect_wire(x, 0), e.session_status = static_cast<int64_t>(x.varint);
        break;
      }
      default: throw std::runtime_error("an Event field " + std::to_string(f.number));
    }
  }
  return e;
}

// All events of a file whose frames' CRCs all check (throws otherwise).
inline std::vector<Event> read_events(const std::string& path) {
  std::vector<Event> out;
  for (const Record& r : read_records(path)) {
    if (!r.length_crc_ok || !r.data_crc_ok) throw std::runtime_error("a record fails its CRC");
    out.push_back(decode_event(r.data));
  }
  return out;
}

}  // namespace xl::test::tfevents
