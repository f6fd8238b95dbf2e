// How the state_dict mapping's messages show shapes, lists and values, and the model a state_dict
// was checked against (txl_state_dict.cpp, txl_config.cpp).
#pragma once
#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

#include "xl/model/config.h"

namespace xl::interop {

inline std::string shape_str(const torch::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

template <typename T>
inline std::string list_str(const std::vector<T>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

inline std::string bools_str(const std::vector<bool>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += std::string(i ? "," : "") + (v[i] ? "true" : "false");
  return s;
}

// A value as a message shows it.
template <typename T>
inline std::string shown(const T& v) {
  std::ostringstream os;
  os << std::boolalpha << v;
  return os.str();
}
inline std::string shown(const std::vector<bool>& v) { return bools_str(v); }

inline std::string summary(const model::ModelConfig& c) {
  std::ostringstream os;
  os << "n_layer " << c.n_layer << ", d_model " << c.d_model << ", n_head " << c.n_head << ", d_head " << c.d_head
     << ", d_inner " << c.d_inner << ", n_token " << c.n_token << ", d_embed " << c.embed_dim();
  if (!c.cutoffs.empty()) os << ", cutoffs " << list_str(c.cutoffs) << ", div_val " << c.div_val;
  return os.str();
}

// Whether two tensors hold the same values in the same shape and type (tied twins).
inline bool same_values(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && torch::equal(a, b);
}

}  // namespace xl::interop
