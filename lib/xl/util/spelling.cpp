#include "xl/util/spelling.h"

#include <algorithm>

namespace xl::spelling {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string nearest(const std::string& name, const std::vector<std::string>& candidates) {
  if (name.size() < 3) return "";
  std::string best;
  size_t best_distance = std::max<size_t>(1, name.size() / 4) + 1;
  for (const std::string& candidate : candidates) {
    const size_t d = edit_distance(name, candidate);
    if (!candidate.empty() && d < best_distance) best = candidate, best_distance = d;
  }
  if (!best.empty()) return best;
  // A shortened name ("mem" for mem-len) when one candidate alone starts with it.
  for (const std::string& candidate : candidates) {
    if (candidate.compare(0, name.size(), name) != 0) continue;
    if (!best.empty()) return "";
    best = candidate;
  }
  return best;
}

}  // namespace xl::spelling
