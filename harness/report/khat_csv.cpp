#include "harness/report/khat_csv.hpp"
#include "harness/io/regular_file.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <string_view>

namespace kcert::report {

using runner::InputError;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_infinity_word(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower == "inf" || lower == "infinity";
}

// A line is quoted in an error only when it could be a K-hat row (digits, signs, '.', 'e',
// 'inf', one comma; at most 40 characters): a tails file may be a link a folder's other owner
// planted to a secret, whose first line must not reach the terminal or a report (issue 53).
std::string shown(std::string_view text) {
  const bool plausible = !text.empty() && text.size() <= 40 && std::all_of(text.begin(), text.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '+' || c == '-' || c == ',' || c == ' ';
  });
  return plausible ? "'" + std::string(text) + "'" : "a line of " + std::to_string(text.size()) + " characters (not shown)";
}

}  // namespace

std::vector<double> read_khat(std::istream& in, const std::string& source) {
  std::vector<double> values;
  std::string line;
  std::size_t line_no = 0;
  // The nightly's tails/<control>.csv: a "replicate,khat" header, then "r,value" rows.
  bool csv = false;
  while (std::getline(in, line)) {
    ++line_no;
    std::string_view text = line;
    if (const auto hash = text.find('#'); hash != std::string_view::npos) text = text.substr(0, hash);
    text = trim(text);
    if (text.empty()) continue;
    const std::string where = source + ":" + std::to_string(line_no) + ": ";
    if (values.empty() && !csv && text == "replicate,khat") {
      csv = true;
      continue;
    }
    if (csv) {
      const auto comma = text.find(',');
      if (comma == std::string_view::npos || text.find(',', comma + 1) != std::string_view::npos) {
        throw InputError(where + "expected 'replicate,khat' (two fields), got " + shown(text));
      }
      text = trim(text.substr(comma + 1));
    }
    if (is_infinity_word(text)) {
      values.push_back(std::numeric_limits<double>::infinity());
      continue;
    }
    std::string_view number = text;
    if (number.front() == '+') number.remove_prefix(1);  // from_chars rejects a leading '+'
    double v = 0.0;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
    if (ec != std::errc() || end != number.data() + number.size() || std::isnan(v)) {
      throw InputError(where + "expected a number >= 0 or 'inf', got " + shown(text));
    }
    if (v < 0.0) {
      throw InputError(where + "K-hat must be >= 0 (it is max(0, (E_prod - eps)/E_ref)), got " +
                       std::string(text));
    }
    if (std::isinf(v)) v = std::numeric_limits<double>::infinity();  // "1e999"
    values.push_back(v);
  }
  if (in.bad()) throw InputError(source + ": read error");
  if (values.empty()) {
    throw InputError(source + ": no K-hat values (expected one number per line, or the nightly's 'replicate,khat' "
                              "CSV; '#' starts a comment)");
  }
  return values;
}

std::vector<double> read_khat_file(const std::string& path, FollowLinks follow) {
  if (path == "-") return read_khat(std::cin, "<stdin>");
  if (follow == FollowLinks::yes) {
    std::ifstream file(path);
    if (!file) throw InputError(path + ": cannot open file");
    return read_khat(file, path);
  }
  // R is at most 2^20 replicates, a few tens of bytes a row.
  std::string text;
  try {
    text = io::read_regular_file(path, std::uint64_t{256} << 20, io::Links::refuse, "a K-hat sample");
  } catch (const io::FileRefused& e) {
    throw InputError(e.what());
  }
  std::istringstream in(text);
  return read_khat(in, path);
}

}  // namespace kcert::report
