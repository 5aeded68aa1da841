#pragma once
// A gate's or a case's three-way outcome (method.md §7). Ordered so that the worse
// verdict compares greater: combining gates is `std::max`.
#include <optional>
#include <string_view>

namespace kcert::stats {

enum class Verdict { pass = 0, warn = 1, fail = 2 };

constexpr std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::pass: return "PASS";
    case Verdict::warn: return "WARN";
    case Verdict::fail: return "FAIL";
  }
  return "?";
}

constexpr std::optional<Verdict> parse_verdict(std::string_view s) {
  if (s == "PASS") return Verdict::pass;
  if (s == "WARN") return Verdict::warn;
  if (s == "FAIL") return Verdict::fail;
  return std::nullopt;
}

constexpr Verdict worst(Verdict a, Verdict b) { return a > b ? a : b; }

}  // namespace kcert::stats
