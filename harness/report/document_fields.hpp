#pragma once
// Reading one field of a result document leniently, for the HTML pages and their plots: a
// number in words ("-" when absent), a string ("" when absent or of another type), a finite
// number. Issue 51 moves the pages onto the typed view (control_view.hpp); until then the page
// sections and the plots share these three.
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

#include "harness/stats/format.hpp"

namespace kcert::report::fields {

// A number as the reports print it, a string as it is, anything else "-".
inline std::string num(const nlohmann::json& j) {
  if (j.is_number()) return stats::format_number(j.get<double>());
  if (j.is_string()) return j.get<std::string>();
  return "-";
}

inline std::string text(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : "";
}

// A finite number from a result field: documents built in memory carry ±inf (an infinite U),
// which the JSON file stores as null; neither may reach a plot coordinate.
inline bool finite(const nlohmann::json& j) { return j.is_number() && std::isfinite(j.get<double>()); }


}  // namespace kcert::report::fields
