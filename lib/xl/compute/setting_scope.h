// A process-wide setting changed while a scope is alive and restored when it ends: how tests
// narrow the kernel set or make the attention recompute its probabilities for a few calls.
#pragma once

namespace xl::compute {

template <typename T, T (*Get)(), void (*Set)(T)>
class SettingScope {
 public:
  explicit SettingScope(T value) : saved_(Get()) { Set(value); }
  ~SettingScope() { Set(saved_); }
  SettingScope(const SettingScope&) = delete;
  SettingScope& operator=(const SettingScope&) = delete;

 private:
  T saved_;
};

}  // namespace xl::compute
