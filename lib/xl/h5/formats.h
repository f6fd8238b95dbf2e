// The names and versions of xl's HDF5 formats (the root attributes xl_format and
// xl_format_version), in one place so that xl-inspect knows each without the code that writes it.
#pragma once
#include <cstdint>

namespace xl::h5 {

inline constexpr const char* kTokensFormat = "xl-tokens";          // man 5 xl-tokens
inline constexpr int64_t kTokensFormatVersion = 1;
inline constexpr const char* kCheckpointFormat = "xl-checkpoint";  // man 5 xl-checkpoint
inline constexpr int64_t kCheckpointFormatVersion = 1;
inline constexpr const char* kPerTokenFormat = "xl-per-token";     // xl-eval-longctx --per-token
inline constexpr int64_t kPerTokenFormatVersion = 1;

}  // namespace xl::h5
