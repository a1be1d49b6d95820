#pragma once
// "Did you mean": the allowed name nearest a misspelt one, for unknown job-file keys
// (yaml_reader.cpp) and unknown command-line options and commands (cli/command_line.cpp).
#include <algorithm>
#include <string>
#include <vector>

namespace partune {

// Levenshtein distance: the fewest single-character insertions, deletions and
// substitutions that turn `a` into `b`.
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The name of `allowed` nearest `name` when it is near enough to be a slip (at most a
// third of its letters, and at most 3, differ); "" otherwise. The first of equals wins.
template <class Names>
std::string nearest_name(const std::string& name, const Names& allowed) {
  std::string best;
  std::size_t best_distance = std::min<std::size_t>(3, std::max<std::size_t>(1, name.size() / 3)) + 1;
  for (const auto& a : allowed) {
    const std::size_t d = edit_distance(name, a);
    if (d < best_distance) best = a, best_distance = d;
  }
  return best;
}

}  // namespace partune
