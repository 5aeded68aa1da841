#pragma once
// "Did you mean": the candidates closest to a word a user typed, for error messages. Free of
// everything else in kcert, so the loader (a variant or family name in a case file) and the
// commands (a subcommand, a case id, a profile) suggest alike.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace kcert::text {

// Optimal-string-alignment distance (Levenshtein with adjacent transpositions): a swapped
// pair of letters is one typo, as people make them.
// Three rows, not the whole table: a name from a case file may be long (a 1 MB family name
// made a 1 MB x 1 MB table per candidate).
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::size_t> before(m + 1), prev(m + 1), row(m + 1);  // rows i - 2, i - 1, i
  for (std::size_t j = 0; j <= m; ++j) prev[j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    row[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) row[j] = std::min(row[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, row);
  }
  return prev[m];
}

// Up to `most` candidates that the word is a prefix of or within a third of its length in
// edits (at least 2) of, closest first; empty when nothing is near (a suggestion far from what
// was typed misleads more than none).
inline std::vector<std::string> closest(const std::string& word, const std::vector<std::string>& candidates,
                                        std::size_t most = 3) {
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::vector<std::pair<std::size_t, std::string>> near;
  for (const auto& c : candidates) {
    // A candidate the word begins is as good as one typo away (a truncated id). Lengths that
    // differ by more than the limit are that many edits apart at least: not computed.
    const bool prefix = !word.empty() && c.size() > word.size() && c.compare(0, word.size(), word) == 0;
    const std::size_t gap = word.size() > c.size() ? word.size() - c.size() : c.size() - word.size();
    if (!prefix && gap > limit) continue;
    const std::size_t d = prefix ? 1 : edit_distance(word, c);
    if (d <= limit) near.emplace_back(d, c);
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (std::size_t i = 0; i < near.size() && i < most; ++i) out.push_back(near[i].second);
  return out;
}

}  // namespace kcert::text

namespace kcert::text {

// " did you mean a, b?" (with a leading space), or "" when nothing is near.
inline std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const auto near = closest(word, candidates);
  if (near.empty()) return "";
  std::string out = " did you mean ";
  for (std::size_t i = 0; i < near.size(); ++i) out += (i ? (i + 1 == near.size() ? " or " : ", ") : "") + near[i];
  return out + "?";
}

}  // namespace kcert::text
