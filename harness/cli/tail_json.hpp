#pragma once
// JSON form of the variance gate's analysis (documented in docs/results.md). +inf is
// written as the string "inf" and an undefined value as null, since JSON has neither.
#include <nlohmann/json.hpp>

#include "harness/stats/tail.hpp"

namespace kcert::cli {

nlohmann::json json_number(double v);
nlohmann::json to_json(const stats::GpdFit& fit);
nlohmann::json to_json(const stats::TailAnalysis& a);

}  // namespace kcert::cli
