// A seeded generator for the run's own random decisions (which layers skip, which heads swap):
// separate from LibTorch's dropout generator, portable, and with a state that checkpoints carry.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace xl {

class Rng {
 public:
  explicit Rng(uint64_t seed = 1) : engine_(seed) {}
  double uniform();                               // [0, 1), 53 random bits
  uint64_t below(uint64_t n);                     // uniform in [0, n), unbiased
  std::vector<int64_t> permutation(int64_t n);    // uniform over all n! orders
  std::string state() const;
  void set_state(const std::string& state);       // throws 65 on a malformed state

 private:
  std::mt19937_64 engine_;
};

}  // namespace xl
