// What a misspelt name was probably meant to be, for refusals that can say "did you mean ...?".
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace xl::spelling {

// Levenshtein distance between a and b.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate a typo away from `name` (at most one edit per four characters, at least one), the
// closest first, else the one candidate that starts with `name`; "" when there is none (or several
// start with it), or `name` is shorter than 3 (too close to too many others).
std::string nearest(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace xl::spelling
