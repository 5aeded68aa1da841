#pragma once
// The falsifiability table (method.md §7): how the gates, and the checks people use today,
// did on negative controls (real defects: must be detected) and positive controls
// (known-correct: must not FAIL).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "harness/engine/case_result.hpp"

namespace kcert::eval {

struct Tally {
  int detected = 0;   // negatives with WARN or FAIL (baselines: flagged)
  int false_fail = 0; // positives with FAIL (baselines: flagged)
  int false_warn = 0; // positives with WARN (gates only)
};

struct Falsifiability {
  int negatives = 0;
  int positives = 0;
  int errors = 0;  // cases the harness could not finish (counted nowhere else)
  Tally algebra, bias, variance, combined;
  Tally bias_with_magnitude, combined_with_magnitude;  // the magnitude statistic deciding too
  Tally assert_close, flash_attention, dynamo_fp64;
  int expectations_met = 0;
  std::vector<std::string> unexpected;  // "id: gate: expected X, got Y"
};

Falsifiability tabulate(const std::vector<engine::CaseResult>& results);
nlohmann::json to_json(const Falsifiability& f);

// The verdict of a case's bias gate when the magnitude statistic decides as well.
stats::Verdict bias_with_magnitude(const engine::CaseResult& r);

}  // namespace kcert::eval
