#pragma once
// A gate's or a case's outcome (method.md §7). Ordered so that the worse verdict compares
// greater: combining gates is `std::max`. INCONCLUSIVE (issue 32) is a PASS that rests on
// nothing: the run could not have seen an effect at the gate's own floor (too few
// replicates). It sits above PASS, so a case with an inconclusive gate is not a PASS, and
// below WARN, so any observed finding outranks "could not tell".
#include <optional>
#include <string_view>

namespace kcert::stats {

enum class Verdict { pass = 0, inconclusive = 1, warn = 2, fail = 3 };

constexpr std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::pass: return "PASS";
    case Verdict::inconclusive: return "INCONCLUSIVE";
    case Verdict::warn: return "WARN";
    case Verdict::fail: return "FAIL";
  }
  return "?";
}

constexpr std::optional<Verdict> parse_verdict(std::string_view s) {
  if (s == "PASS") return Verdict::pass;
  if (s == "INCONCLUSIVE") return Verdict::inconclusive;
  if (s == "WARN") return Verdict::warn;
  if (s == "FAIL") return Verdict::fail;
  return std::nullopt;
}

constexpr Verdict worst(Verdict a, Verdict b) { return a > b ? a : b; }

// WARN or FAIL: what counts as a detection on a negative control (an INCONCLUSIVE one is
// neither a detection nor an escape).
constexpr bool flagged(Verdict v) { return v == Verdict::warn || v == Verdict::fail; }

}  // namespace kcert::stats
