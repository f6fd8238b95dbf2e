#include "xl/util/rng.h"

#include <sstream>

#include "xl/util/error.h"

namespace xl {

double Rng::uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

uint64_t Rng::below(uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = engine_();
  while (x >= limit);
  return x % n;
}

std::vector<int64_t> Rng::permutation(int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[static_cast<size_t>(i)], p[below(static_cast<uint64_t>(i + 1))]);
  return p;
}

std::string Rng::state() const {
  std::ostringstream os;
  os << engine_;
  return os.str();
}

void Rng::set_state(const std::string& state) {
  std::istringstream is(state);
  is >> engine_;
  XL_CHECK(!is.fail(), kExitDataErr, "malformed generator state");
}

}  // namespace xl
