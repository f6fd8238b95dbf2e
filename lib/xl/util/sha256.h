// SHA-256 (OpenSSL) for vocab identity and source checksums.
#pragma once
#include <memory>
#include <string>

namespace xl {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  void update(const void* data, size_t n);
  void update(const std::string& s) { update(s.data(), s.size()); }
  std::string hex();  // finishes the digest

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string sha256_hex(const std::string& data);

}  // namespace xl
