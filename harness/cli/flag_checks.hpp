#pragma once
// Checks on numeric flags with the YAML's bounds (docs/testcases.md), run on the flag's text
// before CLI11 converts it: an unsigned flag took "-5" as 2^64 - 5 (`--replicates -5` ran
// until killed) and `--seed -1` wrapped the same way. Each refusal says what was expected and
// what was given, and exits 2 like any bad input.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

namespace kcert::cli {

// The largest R a case may declare (gates.replicates, gates.max_replicates: 2^20).
constexpr std::int64_t kMaxReplicatesFlag = std::int64_t{1} << 20;

// An integer in [lo, hi], given as decimal digits (a sign only for negatives, refused here
// when lo >= 0 with the bound in the message).
inline CLI::Validator integer_in(std::int64_t lo, std::int64_t hi, std::string bounds_in_words) {
  return CLI::Validator(
      [lo, hi, bounds_in_words](std::string& s) -> std::string {
        std::int64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec == std::errc::result_out_of_range) return "expected " + bounds_in_words + ", got '" + s + "' (out of range)";
        if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return "expected an integer, got '" + s + "'";
        if (v < lo || v > hi) return "expected " + bounds_in_words + ", got " + s;
        return "";
      },
      "INT");
}

// --replicates: R as the YAML bounds it. There is no "0 = the case's own": leaving the flag
// out means that. At R = 2 the bias gate's t test has one degree of freedom and its cut at
// the union-bound level (about 6e11) is beyond what the t quantile computes: every case
// ERRORed (issue 53, item 9), so the bound is 3.
inline CLI::Validator replicate_count() {
  return integer_in(3, kMaxReplicatesFlag, "3 <= R <= 1048576 (2^20, the bound on gates.replicates)");
}

// --seed: as probe.seed, an integer >= 0.
inline CLI::Validator seed_value() {
  return integer_in(0, INT64_MAX, "an integer >= 0 (as probe.seed)");
}

// A number in [lo, hi]: finite, where CLI11's Range lets NaN through (every comparison with
// NaN is false), and `--case-deadline nan` disabled the deadline (issue 53, item 9).
inline CLI::Validator number_in(double lo, double hi, std::string bounds_in_words) {
  return CLI::Validator(
      [lo, hi, bounds_in_words](std::string& s) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return "expected a number, got '" + s + "'";
        if (!std::isfinite(v) || v < lo || v > hi) return "expected " + bounds_in_words + ", got " + s;
        return "";
      },
      "NUMBER");
}

// --run-id: it becomes a folder name (reports/RUN_ID), a spool file name and text in the
// report: a '/' or '..' would leave the state folder (`kcert run --run-id ../../x` wrote its
// spool outside it: issue 53, item 9), a newline broke gnuplot's quoting.
inline CLI::Validator run_id_check() {
  return CLI::Validator(
      [](const std::string& id) -> std::string {
        const bool plain = !id.empty() && id.size() <= 128 && std::isalnum(static_cast<unsigned char>(id[0])) &&
                           std::all_of(id.begin(), id.end(), [](char c) {
                             return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
                           });
        return plain ? std::string() : "a run id is 1-128 characters of [A-Za-z0-9._-], starting with a letter or digit";
      },
      "RUN_ID");
}

// --since: a calendar date YYYY-MM-DD (history's bound on a run's start). A bad one reached
// PostgreSQL and came back as "history query failed: ... invalid input syntax for type
// timestamp" (issue 32, item 5); refused here, before any connection.
inline CLI::Validator calendar_date() {
  return CLI::Validator(
      [](const std::string& s) -> std::string {
        const auto bad = "expected a date YYYY-MM-DD, got '" + s + "'";
        if (s.size() != 10 || s[4] != '-' || s[7] != '-') return bad;
        int parts[3] = {0, 0, 0};
        const int at[3][2] = {{0, 4}, {5, 2}, {8, 2}};
        for (int i = 0; i < 3; ++i) {
          const char* b = s.data() + at[i][0];
          const auto [end, ec] = std::from_chars(b, b + at[i][1], parts[i]);
          if (ec != std::errc() || end != b + at[i][1]) return bad;
        }
        const int y = parts[0], m = parts[1], d = parts[2];
        const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        const int days[12] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        if (y < 1 || m < 1 || m > 12 || d < 1 || d > days[m - 1]) return "no such date: '" + s + "' (YYYY-MM-DD)";
        return "";
      },
      "YYYY-MM-DD");
}

}  // namespace kcert::cli
